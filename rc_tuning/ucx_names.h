/*
 * Knob-name check against UCX's own configuration listing.
 *
 * ucp_config_modify() accepts any name (UCX 1.13..1.16 cache unknown keys and only the worker
 * later prints "invalid configurations"), so a misspelt or renamed knob would ship unnoticed.
 * This check reads the names UCX itself lists for its registered configuration tables (the text
 * of ucs_config_parser_print_all_opts with UCS_CONFIG_PRINT_DOC, what `ucx_info -c -f` prints):
 *   # inherits:  UCX_RC_TIMEOUT            <- alias names UCX reads for the next entry
 *   UCX_RC_MLX5_TIMEOUT=1000000.00us        <- full name of one transport's field
 * A pair is applied only when its name is listed and a transport that is open on this host
 * (e.g. rc_mlx5 with a device) reads it. Pure text processing; the listing of the UCX loaded at
 * run time comes from ucx_loaded.h.
 */
#ifndef TWOHOP_RC_UCX_NAMES_H
#define TWOHOP_RC_UCX_NAMES_H

#include "ucx_config.h"

#include <map>
#include <set>
#include <string>
#include <vector>

namespace twohop::rc {

/* Names UCX accepts. Key: a name without "UCX_" (a full name or an inherited alias); value: the
 * full names (without "UCX_") of the table fields that read it, e.g.
 * "RC_TIMEOUT" -> {"RC_MLX5_TIMEOUT", "RC_VERBS_TIMEOUT"}. */
struct UcxNameListing {
    std::map<std::string, std::set<std::string>> readers;
    bool empty() const { return readers.empty(); }
};

/* Parses the listing text described above. Lines that are neither "UCX_<NAME>=..." nor
 * "# inherits: ..." are ignored; a "(deprecated)" marker after a name is dropped. Never fails:
 * garbage yields fewer names. */
UcxNameListing parse_ucx_listing(const std::string &text);

/* Result of checking pairs against a listing and the open transports. */
struct NameCheck {
    std::vector<UcxPair> apply;        // listed and read by an open transport
    std::vector<UcxPair> no_transport; // listed, but no open transport reads it (not applied)
    std::vector<UcxPair> unknown;      // not a UCX name at all: an error (typo or renamed knob)
};

/* Checks every pair name ("RC_TIMEOUT", no "UCX_" prefix) against `listing`. open_tls are UCT
 * transport names with a device on this host ("rc_mlx5", "rc_verbs"); a field is read by
 * transport tl when its full name starts with upper(tl) + "_". */
NameCheck check_names(const std::vector<UcxPair> &pairs, const UcxNameListing &listing,
                      const std::vector<std::string> &open_tls);

/* "RC_BOGUS=1 (from coll_twohop_rc_x) is not a configuration name of the loaded UCX" lines,
 * joined with "; ". */
std::string describe_unknown(const std::vector<UcxPair> &unknown);

} // namespace twohop::rc

#endif
