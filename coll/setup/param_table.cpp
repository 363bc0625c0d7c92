#include "param_table.h"

#include <type_traits>

namespace twohop {

namespace {

/* v in lo..hi, compared in the parameter's own signedness (a negative SIZE value cannot
 * exist; a negative INT one is below any lo >= 0). */
template <class T>
bool in_range(T v, long long lo, long long hi) {
    if (std::is_signed<T>::value) {
        const long long x = static_cast<long long>(v);
        return x >= lo && x <= hi;
    }
    const unsigned long long x = static_cast<unsigned long long>(v);
    return (lo < 0 || x >= static_cast<unsigned long long>(lo)) && hi >= 0 &&
           x <= static_cast<unsigned long long>(hi);
}

template <class T>
uint64_t word(T v) {
    return std::is_signed<T>::value ? static_cast<uint64_t>(static_cast<long long>(v))
                                    : static_cast<uint64_t>(v);
}

struct AgreedRow {
    const char *name;
    bool is_signed;
};

const AgreedRow kAgreed[kAgreedParams > 0 ? kAgreedParams : 1] = {
#define TWOHOP_PARAM(name, kind, def, level, doc)
#define TWOHOP_AGREED(name) {#name, std::is_signed<decltype(twohop_params::name)>::value},
#include "params.def"
#undef TWOHOP_AGREED
#undef TWOHOP_PARAM
};

std::string word_text(uint64_t w, bool is_signed) {
    return is_signed ? std::to_string(static_cast<long long>(w)) : std::to_string(w);
}

/* A parameter's value as text, in its own signedness. */
template <class T>
std::string text(T v) {
    return word_text(word(v), std::is_signed<T>::value);
}

} // namespace

std::string param_range_error(const twohop_params &p) {
#define TWOHOP_PARAM(name, kind, def, level, doc)
#define TWOHOP_RANGE(name, lo, hi)                                                             \
    if (!in_range(p.name, (lo), (hi))) {                                                       \
        return "coll_twohop_" #name ": value " + text(p.name) + " is out of range " +          \
               std::to_string(static_cast<long long>(lo)) + ".." +                             \
               std::to_string(static_cast<long long>(hi));                                     \
    }
#include "params.def"
#undef TWOHOP_RANGE
#undef TWOHOP_PARAM
    return "";
}

void agreed_words(const twohop_params &p, uint64_t out[kAgreedParams]) {
    size_t i = 0;
#define TWOHOP_PARAM(name, kind, def, level, doc)
#define TWOHOP_AGREED(name) out[i++] = word(p.name);
#include "params.def"
#undef TWOHOP_AGREED
#undef TWOHOP_PARAM
    (void)i;
}

std::string agreed_mismatch(const uint64_t a[kAgreedParams], const uint64_t b[kAgreedParams],
                            int ra, int rb) {
    for (size_t i = 0; i < kAgreedParams; ++i) {
        if (a[i] == b[i]) continue;
        const AgreedRow &r = kAgreed[i];
        return std::string("coll_twohop_") + r.name + " differs between ranks " +
               std::to_string(ra) + " (" + word_text(a[i], r.is_signed) + ") and " +
               std::to_string(rb) + " (" + word_text(b[i], r.is_signed) + ")";
    }
    return "";
}

} // namespace twohop
