/*
 * What the UCX loaded in this process offers, read through its own API (links libucs/libuct):
 * the configuration listing of every registered table and the transports that have a device.
 * Used by the checked C entry point twohop_rc_ucx_pairs_checked (rc_api.h) and by the report.
 */
#ifndef TWOHOP_RC_UCX_LOADED_H
#define TWOHOP_RC_UCX_LOADED_H

#include <string>
#include <vector>

namespace twohop::rc {

/* The text UCX prints for all its configuration tables (names, values, docs with "inherits:"),
 * as by `ucx_info -c -f`: uct_query_components() first, so the transport modules (libuct_ib) are
 * loaded and their tables registered, then ucs_config_parser_print_all_opts() with
 * UCS_CONFIG_PRINT_CONFIG | HIDDEN | DOC into an open_memstream buffer. "" on failure. */
std::string loaded_ucx_listing();

/* One transport resource of this host: UCT transport name and device ("rc_mlx5", "mlx5_0:1"). */
struct UcxResource {
    std::string tl;
    std::string dev;
};

/* Every transport resource of every memory domain UCT can open on this host
 * (uct_query_components -> uct_md_open -> uct_md_query_tl_resources). Empty on a host
 * without devices for a component, or on failure. */
std::vector<UcxResource> loaded_ucx_resources();

} // namespace twohop::rc

#endif
