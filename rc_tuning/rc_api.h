/*
 * rc_tuning public C interface, used by the coll layer (coll/ calls it; rc_tuning/ never includes
 * coll/). Compiles as C99 and C++17. Nothing here throws; every function reports errors through its
 * return value and an (err, errlen) buffer holding one lowercase line that names the object and the
 * value.
 *
 * The fields of struct twohop_rc_settings and the MCA parameters coll_twohop_<field> are both
 * generated from rc_knobs.def, the one declaration of the RC knobs.
 */
#ifndef TWOHOP_RC_API_H
#define TWOHOP_RC_API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Raw user values, one field per row of rc_knobs.def (type from its kind: INT int, SIZE size_t,
 * BOOL bool). "Unset" leaves UCX's own default in place (nothing is emitted for it). Meaning,
 * unit and range of each field: rc_knobs.def and docs/rc_tuning.md. */
#define TWOHOP_RC_CTYPE_INT int
#define TWOHOP_RC_CTYPE_SIZE size_t
#define TWOHOP_RC_CTYPE_BOOL bool
struct twohop_rc_settings {
#define TWOHOP_RC_KNOB(field, kind, ...) TWOHOP_RC_CTYPE_##kind field;
#include "rc_knobs.def"
#undef TWOHOP_RC_KNOB
};

/* Every knob unset (the MCA defaults of coll/params.def, which come from the same table). */
static const struct twohop_rc_settings twohop_rc_settings_unset = {
#define TWOHOP_RC_KNOB(field, kind, unset, ...) unset,
#include "rc_knobs.def"
#undef TWOHOP_RC_KNOB
};
#define TWOHOP_RC_SETTINGS_INIT twohop_rc_settings_unset

/* Return codes. */
#define TWOHOP_RC_OK 0
#define TWOHOP_RC_NOTICE 1    /* success; err holds a one-time notice (environment overrides) */
#define TWOHOP_RC_EINVAL (-1) /* a parameter is out of range; err names parameter, value, range */
#define TWOHOP_RC_ENODEV (-2) /* no RDMA device / nothing to report */
#define TWOHOP_RC_EIO (-3)    /* a file could not be read or written */
#define TWOHOP_RC_NOT_APPLIED 2 /* success; err lists pairs no open UCX transport reads (dropped) */

/* Checks every field. Returns TWOHOP_RC_OK, or TWOHOP_RC_EINVAL with the first problem in err, e.g.
 * "coll_twohop_rc_retry_count: value 9 is out of range 0..7 (...)". No value is clamped. */
int twohop_rc_validate(const struct twohop_rc_settings *s, char *err, size_t errlen);

/* Receives one UCX configuration pair: name without the "UCX_" prefix, value as UCX parses it. */
typedef void (*twohop_rc_kv_fn)(const char *name, const char *value, void *arg);

/* Validates s, then calls emit(name, value, arg) once per parameter that is set, for the UCP
 * context of local rail rail_index (0 <= rail_index < n_rails), with the timeout staggered by
 * rc_stagger. Pass each pair to ucp_config_modify() before ucp_init().
 * Precedence: a UCX_* environment variable set by the user wins. Such a pair is not emitted; the
 * first call in the process that meets a conflict returns TWOHOP_RC_NOTICE with the conflicts
 * listed in err (later calls return TWOHOP_RC_OK), so the caller logs it exactly once. Returns
 * TWOHOP_RC_EINVAL (nothing emitted) on invalid settings or rail indices. */
int twohop_rc_ucx_pairs(const struct twohop_rc_settings *s, int rail_index, int n_rails,
                        twohop_rc_kv_fn emit, void *arg, char *err, size_t errlen);

/* Same pairs as twohop_rc_ucx_pairs, checked against the UCX loaded in this process: every name
 * must appear in UCX's own configuration listing (ucs_config_parser_print_all_opts after
 * uct_query_components, i.e. what `ucx_info -c -f` prints, including "inherits:" aliases), and a
 * pair is emitted only when a transport with a device on this host (uct_md_query_tl_resources:
 * rc_mlx5, rc_verbs) reads it. Returns, in this order of precedence: TWOHOP_RC_EINVAL (invalid
 * settings, or a name the loaded UCX does not know -- a typo or a renamed knob; err names it,
 * nothing is emitted), TWOHOP_RC_NOTICE (as twohop_rc_ucx_pairs), TWOHOP_RC_NOT_APPLIED (err
 * lists the dropped pairs, e.g. every pair on a host without RDMA devices), TWOHOP_RC_OK. The
 * listing and the transports are read once per process (thread-safe). */
int twohop_rc_ucx_pairs_checked(const struct twohop_rc_settings *s, int rail_index, int n_rails,
                                twohop_rc_kv_fn emit, void *arg, char *err, size_t errlen);

/* Per-job port-counter forensics (rc_report=1). The first rank on each node calls begin at
 * component init and end at MPI_Finalize; end prints the classified counter deltas and frees r.
 * sysfs_root: the directory holding class/infiniband; NULL means "/sys".
 * devices: UCX_NET_DEVICES-style list "mlx5_0:1,mlx5_2" of the ports to read; "" = every port;
 *          NULL = the job's UCX devices: UCX_NET_DEVICES when set (and not "all"), else the
 *          devices of the RC/DC transports the loaded UCX reports (report_devices.h). The report
 *          names the devices and where they came from.
 * begin never fails: a node without an RDMA device gets a handle whose end prints one short line.
 * end returns TWOHOP_RC_OK, TWOHOP_RC_ENODEV (the one line was printed) or TWOHOP_RC_EIO. */
struct twohop_rc_report;
struct twohop_rc_report *twohop_rc_report_begin(const char *sysfs_root, const char *devices);
int twohop_rc_report_end(struct twohop_rc_report *r, FILE *out);

#ifdef __cplusplus
}
#endif

#endif /* TWOHOP_RC_API_H */
