/* Knob-name check against UCX's configuration listing; see ucx_names.h. */
#include "ucx_names.h"

#include <cctype>
#include <sstream>

namespace twohop::rc {

namespace {

const std::string kUcx = "UCX_";

/* "UCX_RC_TIMEOUT" -> "RC_TIMEOUT"; "" when the token is not a UCX name. */
std::string strip_ucx(std::string token) {
    while (!token.empty() && (token.back() == ',' || std::isspace((unsigned char)token.back()))) {
        token.pop_back();
    }
    if (token.compare(0, kUcx.size(), kUcx) != 0 || token.size() == kUcx.size()) {
        return "";
    }
    return token.substr(kUcx.size());
}

std::string upper(const std::string &s) {
    std::string u = s;
    for (char &c : u) {
        c = static_cast<char>(std::toupper((unsigned char)c));
    }
    return u;
}

} // namespace

UcxNameListing parse_ucx_listing(const std::string &text) {
    UcxNameListing out;
    std::vector<std::string> inherited; // aliases announced for the next entry
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line)) {
        if (line.rfind("#", 0) == 0) {
            size_t at = line.find("inherits:");
            if (at != std::string::npos) {
                std::istringstream names(line.substr(at + 9));
                std::string tok;
                while (names >> tok) {
                    std::string n = strip_ucx(tok);
                    if (!n.empty()) {
                        inherited.push_back(n);
                    }
                }
            }
            continue;
        }
        size_t eq = line.find('=');
        if (line.rfind(kUcx, 0) != 0 || eq == std::string::npos) {
            inherited.clear();
            continue;
        }
        std::string full = line.substr(0, eq);
        size_t sp = full.find(' '); // "UCX_X_MAX_BCOPY (deprecated)"
        full = strip_ucx(full.substr(0, sp));
        if (!full.empty()) {
            out.readers[full].insert(full);
            for (const std::string &alias : inherited) {
                out.readers[alias].insert(full);
            }
        }
        inherited.clear();
    }
    return out;
}

NameCheck check_names(const std::vector<UcxPair> &pairs, const UcxNameListing &listing,
                      const std::vector<std::string> &open_tls) {
    NameCheck out;
    for (const UcxPair &p : pairs) {
        auto it = listing.readers.find(p.name);
        if (it == listing.readers.end()) {
            out.unknown.push_back(p);
            continue;
        }
        bool read = false;
        for (const std::string &full : it->second) {
            for (const std::string &tl : open_tls) {
                read = read || full.rfind(upper(tl) + "_", 0) == 0;
            }
        }
        (read ? out.apply : out.no_transport).push_back(p);
    }
    return out;
}

std::string describe_unknown(const std::vector<UcxPair> &unknown) {
    std::string msg;
    for (const UcxPair &p : unknown) {
        msg += (msg.empty() ? "" : "; ") + kUcx + p.name + "=" + p.value + " (from " + p.from +
               ") is not a configuration name of the loaded UCX";
    }
    return msg;
}

} // namespace twohop::rc
