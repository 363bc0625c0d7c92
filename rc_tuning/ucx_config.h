/*
 * Validated RC settings -> configuration of twohop's own UCP context.
 *
 * Each knob maps to one UCX name, written without the "UCX_" prefix and valid from UCX 1.13 to
 * current releases (checked against UCX 1.13.1 `ucp_config_print`/config tables; per-version notes
 * in docs/rc_tuning.md). The RC_ prefix reaches both rc_mlx5 and rc_verbs ("inherits: UCX_RC_X").
 *
 * Precedence: a user's UCX_* environment variable wins. UCX applies ucp_config_modify() values
 * *after* the environment, so a pair is withheld when the user set the same knob under any name
 * UCX would read for it (UCX_RC_X, UCX_RC_MLX5_X, UCX_RC_VERBS_X and, where inherited, UCX_IB_X).
 */
#ifndef TWOHOP_RC_UCX_CONFIG_H
#define TWOHOP_RC_UCX_CONFIG_H

#include "rc_api.h"

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace twohop::rc {

struct UcxPair {
    std::string name;  // without UCX_ prefix, e.g. "RC_TIMEOUT"
    std::string value; // as UCX parses it, e.g. "67108.864us"
    std::string from;  // MCA parameter it comes from, e.g. "coll_twohop_rc_timeout"
};

struct UcxConflict {
    std::string env_name; // e.g. "UCX_RC_MLX5_TIMEOUT"
    std::string env_value;
    UcxPair withheld; // what twohop would have set
};

/* Looks up an environment variable; returns nullptr when unset. Injectable for tests. */
using EnvLookup = std::function<const char *(const char *)>;

/* The real environment (getenv): the one place rc_tuning reads the environment. */
EnvLookup process_env();

/* UCX names under which a user may set the knob `ucx_name` ("RC_TIMEOUT" -> "UCX_RC_TIMEOUT",
 * "UCX_RC_MLX5_TIMEOUT", "UCX_RC_VERBS_TIMEOUT"). */
std::vector<std::string> env_aliases(const std::string &ucx_name);

/* Timeout exponent used by rail rail_index: base + (rail_index mod (stagger + 1)), where base is
 * the requested exponent or UCX's default (18 = 1.07 s) when only rc_stagger is set. nullopt when
 * neither timeout nor stagger is set (emit nothing). Precondition: validate(s) is empty. */
std::optional<int> rail_timeout_exp(const twohop_rc_settings &s, int rail_index);

/* All pairs for the rail, before the environment is consulted. Precondition: valid settings and
 * 0 <= rail_index. */
std::vector<UcxPair> ucx_pairs(const twohop_rc_settings &s, int rail_index);

/* Splits pairs into those to apply and those the environment overrides. */
std::vector<UcxPair> apply_env_precedence(const std::vector<UcxPair> &pairs, const EnvLookup &env,
                                          std::vector<UcxConflict> *conflicts);

/* "UCX_RC_TIMEOUT=2s (environment) wins over coll_twohop_rc_timeout (RC_TIMEOUT=67108.864us)" */
std::string describe(const UcxConflict &c);

/* Validated settings -> the pairs for rail rail_index of n_rails, after environment precedence.
 * Returns TWOHOP_RC_OK, TWOHOP_RC_NOTICE (first conflict with the environment in this process; err
 * lists it) or TWOHOP_RC_EINVAL (err names the problem; *out untouched). The one implementation
 * behind twohop_rc_ucx_pairs and twohop_rc_ucx_pairs_checked (rc_api.h). */
int rail_pairs(const twohop_rc_settings *s, int rail_index, int n_rails,
               std::vector<UcxPair> *out, char *err, size_t errlen);

/* Writes msg into (err, errlen) when err is non-null and errlen > 0, truncating. */
void put_error(char *err, size_t errlen, const std::string &msg);

/* Test hook: forget that the one-time conflict notice was already given. */
void reset_conflict_notice_for_tests();

} // namespace twohop::rc

#endif
