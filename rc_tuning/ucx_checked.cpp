/*
 * twohop_rc_ucx_pairs_checked (rc_api.h): the pairs of twohop_rc_ucx_pairs, with every name
 * checked against the configuration listing of the UCX loaded in this process and only the pairs
 * an open transport reads passed on (ucx_names.h, ucx_loaded.h).
 */
#include "rc_api.h"
#include "ucx_config.h"
#include "ucx_loaded.h"
#include "ucx_names.h"

#include <mutex>

namespace {

using namespace twohop::rc;

/* UCX's listing and open transports, read once per process (neither changes while it runs). */
struct LoadedUcx {
    UcxNameListing listing;
    std::vector<std::string> open_tls;
};

const LoadedUcx &loaded() {
    static LoadedUcx l;
    static std::once_flag once;
    std::call_once(once, [] {
        l.listing = parse_ucx_listing(loaded_ucx_listing());
        for (const UcxResource &r : loaded_ucx_resources()) {
            l.open_tls.push_back(r.tl);
        }
    });
    return l;
}

} // namespace

extern "C" int twohop_rc_ucx_pairs_checked(const struct twohop_rc_settings *s, int rail_index,
                                           int n_rails, twohop_rc_kv_fn emit, void *arg,
                                           char *err, size_t errlen) {
    if (emit == nullptr) {
        put_error(err, errlen, "twohop_rc_ucx_pairs_checked: emit is NULL");
        return TWOHOP_RC_EINVAL;
    }
    std::vector<UcxPair> pairs;
    int rc = rail_pairs(s, rail_index, n_rails, &pairs, err, errlen);
    if (rc < 0 || pairs.empty()) {
        return rc;
    }
    try {
        const LoadedUcx &u = loaded();
        if (u.listing.empty()) {
            put_error(err, errlen,
                      "twohop_rc_ucx_pairs_checked: the loaded UCX printed no configuration "
                      "listing, so coll_twohop_rc_* names cannot be checked");
            return TWOHOP_RC_EINVAL;
        }
        NameCheck c = check_names(pairs, u.listing, u.open_tls);
        if (!c.unknown.empty()) {
            put_error(err, errlen, describe_unknown(c.unknown));
            return TWOHOP_RC_EINVAL;
        }
        for (const UcxPair &p : c.apply) {
            emit(p.name.c_str(), p.value.c_str(), arg);
        }
        if (rc == TWOHOP_RC_OK && !c.no_transport.empty()) {
            std::string msg = "not applied (no open UCX transport on this host reads them):";
            for (const UcxPair &p : c.no_transport) {
                msg += " " + p.name + "=" + p.value;
            }
            put_error(err, errlen, msg);
            return TWOHOP_RC_NOT_APPLIED;
        }
        return rc;
    } catch (const std::exception &e) {
        put_error(err, errlen, std::string("twohop_rc_ucx_pairs_checked: ") + e.what());
        return TWOHOP_RC_EINVAL;
    }
}
