/* The loaded UCX's configuration listing and transport resources; see ucx_loaded.h. */
#include "ucx_loaded.h"

#include <ucs/config/parser.h>
#include <uct/api/uct.h>

#include <cstdio>
#include <cstdlib>

namespace twohop::rc {

std::string loaded_ucx_listing() {
    uct_component_h *comps = nullptr;
    unsigned n = 0;
    if (uct_query_components(&comps, &n) == UCS_OK) { // loads transport modules
        uct_release_component_list(comps);
    }
    char *buf = nullptr;
    size_t len = 0;
    FILE *mem = open_memstream(&buf, &len);
    if (mem == nullptr) {
        return "";
    }
    ucs_config_parser_print_all_opts(
        mem, "UCX_",
        static_cast<ucs_config_print_flags_t>(UCS_CONFIG_PRINT_CONFIG | UCS_CONFIG_PRINT_HIDDEN |
                                              UCS_CONFIG_PRINT_DOC),
        &ucs_config_global_list);
    std::fclose(mem);
    std::string text(buf != nullptr ? buf : "", len);
    std::free(buf);
    return text;
}

std::vector<UcxResource> loaded_ucx_resources() {
    std::vector<UcxResource> out;
    uct_component_h *comps = nullptr;
    unsigned n = 0;
    if (uct_query_components(&comps, &n) != UCS_OK) {
        return out;
    }
    for (unsigned c = 0; c < n; ++c) {
        uct_component_attr_t attr = {};
        attr.field_mask = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCE_COUNT;
        if (uct_component_query(comps[c], &attr) != UCS_OK || attr.md_resource_count == 0) {
            continue;
        }
        std::vector<uct_md_resource_desc_t> mds(attr.md_resource_count);
        attr.field_mask = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCES;
        attr.md_resources = mds.data();
        if (uct_component_query(comps[c], &attr) != UCS_OK) {
            continue;
        }
        for (const uct_md_resource_desc_t &m : mds) {
            uct_md_config_t *cfg = nullptr;
            uct_md_h md = nullptr;
            if (uct_md_config_read(comps[c], nullptr, nullptr, &cfg) != UCS_OK) {
                continue;
            }
            ucs_status_t st = uct_md_open(comps[c], m.md_name, cfg, &md);
            uct_config_release(cfg);
            if (st != UCS_OK) {
                continue;
            }
            uct_tl_resource_desc_t *res = nullptr;
            unsigned nres = 0;
            if (uct_md_query_tl_resources(md, &res, &nres) == UCS_OK) {
                for (unsigned i = 0; i < nres; ++i) {
                    out.push_back({res[i].tl_name, res[i].dev_name});
                }
                uct_release_tl_resource_list(res);
            }
            uct_md_close(md);
        }
    }
    uct_release_component_list(comps);
    return out;
}

} // namespace twohop::rc
