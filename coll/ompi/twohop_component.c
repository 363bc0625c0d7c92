/*
 * The Open MPI adapter of twohop (coll/ompi/: the only files that include Open MPI internal
 * headers, over their private header twohop_adapter.h): this file is the component -- its
 * structure, the MCA parameters (from params.def) and performance variables, open, close and
 * init_query. The module (query, enable, set-up, host services) is twohop_module.c; datatypes,
 * ops, buffer views and staging twohop_datatype.c; the blocking and stream-ordered calls
 * twohop_allreduce.c; non-blocking and persistent requests twohop_requests.c. The C++ core
 * sits behind twohop_core.h.
 *
 * Selection: priority coll_twohop_priority (default 45, above tuned 30 and han 0); twohop
 * provides MPI_Allreduce, and MPI_Iallreduce and persistent allreduce where the module below
 * provides them (twohop_requests.c). At enable time the previously selected allreduce (function and
 * module) is saved and retained; every call twohop does not serve goes there, with the reason
 * at coll_twohop_verbose >= 1. Every decision depends only on what MPI requires to be equal on
 * all ranks -- the op and the type signature of the message (its predefined element types
 * and their number) -- or on a result the ranks agreed at set-up (coll/front/policy.h).
 * Datatype layouts (extent, lower bound, holes) may differ between ranks: a rank whose layout
 * is not the reduction's canonical one reaches its buffers through Open MPI's convertor
 * (twohop_userbuf), never by a decision of its own.
 */
#include "ompi_config.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "mpi.h"
#include "ompi/mca/coll/base/base.h"
#include "ompi/mca/coll/coll.h"
#include "opal/mca/base/mca_base_pvar.h"
#include "opal/util/output.h"
#include "opal/util/proc.h"

#include "rc_settings.h"
#include "twohop_adapter.h"
#include "twohop_core.h"

/*
 * Open MPI 4.1 and 5.0 (docs/stacks/ompi5.md). The one difference the adapter selects here:
 * the coll framework's version (5.0's 2.4.0 module drops ft_event and adds coll_agree/iagree;
 * twohop sets none of them). Everything else it uses is the same in both -- the allreduce
 * signature, the coll_allreduce/coll_allreduce_module pair, coll_base_comm_select (module_enable
 * runs before the module's functions are copied in, so c_coll still holds the previous
 * allreduce), MCA variables and pvars, datatypes, convertor, PML and requests -- except
 * ompi_comm_get_cid(), gone in 5.0 and no longer used (twohop_comm_label()).
 * Building against 5.0 needs <pmix.h> and headers packages lack (meson.build).
 */
#if OMPI_MAJOR_VERSION >= 5
#define TWOHOP_COLL_VERSION MCA_COLL_BASE_VERSION_2_4_0
#else
#define TWOHOP_COLL_VERSION MCA_COLL_BASE_VERSION_2_0_0
#endif

_Static_assert(sizeof(MPI_Fint) == sizeof(int), "fint_2_int shim assumes 4-byte Fortran INTEGER");

/* ---------------------------------------------------------------- state ---- */

struct twohop_params twohop_adapter_params;
int twohop_adapter_output = -1;
unsigned long long twohop_served_calls;   /* pvar coll_twohop_allreduce_calls */
unsigned long long twohop_fallback_calls; /* pvar coll_twohop_fallback_calls */
static struct twohop_rc_report *rc_report;  /* port counters at MPI_Init (rc_report=1) */
/* MPI_THREAD_MULTIPLE was granted, as told at init_query. Recorded then because Open MPI 4.1's
 * MPI_T_init_thread() later overwrites the process's thread level (ompi_mpi_thread_provided,
 * MPI_Query_thread) with the level asked for MPI_T. */
bool twohop_mpi_threads;
pthread_t twohop_mpi_init_thread; /* the thread that initialised MPI (init_query) */

static int twohop_init_query(bool enable_progress_threads, bool enable_mpi_threads) {
    (void)enable_progress_threads;
    twohop_mpi_threads = enable_mpi_threads;
    twohop_mpi_init_thread = pthread_self(); /* MPI_Init runs init_query on the initialising thread */
    /* The first rank of each node snapshots the InfiniBand port counters for the job report. */
    if (twohop_adapter_params.rc_report && rc_report == NULL && opal_process_info.my_local_rank == 0) {
        rc_report = twohop_rc_report_begin(NULL, NULL);
    }
    return OMPI_SUCCESS;
}

/* ------------------------------------------------------ component, twohop_adapter_params ---- */

static int get_counter(const struct mca_base_pvar_t *pvar, void *value, void *obj) {
    (void)obj;
    *(unsigned long long *)value = *(const unsigned long long *)pvar->ctx;
    return OPAL_SUCCESS;
}

/* Registers the read-only, continuous MPI_T counter coll_twohop_<name> reading *value. */
static void register_counter(const mca_base_component_t *c, const char *name, const char *doc,
                             const unsigned long long *value) {
    (void)mca_base_component_pvar_register(
        c, name, doc, OPAL_INFO_LVL_4, MCA_BASE_PVAR_CLASS_COUNTER,
        MCA_BASE_VAR_TYPE_UNSIGNED_LONG_LONG, NULL, MCA_BASE_VAR_BIND_NO_OBJECT,
        MCA_BASE_PVAR_FLAG_READONLY | MCA_BASE_PVAR_FLAG_CONTINUOUS, get_counter, NULL, NULL,
        (void *)value);
}

static int twohop_register(void);
static int twohop_open(void);
static int twohop_close(void);

mca_coll_base_component_t mca_coll_twohop_component
    __attribute__((visibility("default"))) = {
        .collm_version =
            {
                TWOHOP_COLL_VERSION,
                .mca_component_name = "twohop",
                MCA_BASE_MAKE_VERSION(component, 0, 1, 0),
                .mca_open_component = twohop_open,
                .mca_close_component = twohop_close,
                .mca_register_component_params = twohop_register,
            },
        .collm_data = {MCA_BASE_METADATA_PARAM_CHECKPOINT},
        .collm_init_query = twohop_init_query,
        .collm_comm_query = twohop_comm_query,
};

static int twohop_register(void) {
    const mca_base_component_t *c = &mca_coll_twohop_component.collm_version;
#define TWOHOP_VAR_INT MCA_BASE_VAR_TYPE_INT
#define TWOHOP_VAR_SIZE MCA_BASE_VAR_TYPE_SIZE_T
#define TWOHOP_VAR_BOOL MCA_BASE_VAR_TYPE_BOOL
#define TWOHOP_VAR_STRING MCA_BASE_VAR_TYPE_STRING
#define TWOHOP_PARAM(name, kind, def, level, doc)                                              \
    twohop_adapter_params.name = def;                                                                         \
    (void)mca_base_component_var_register(c, #name, doc, TWOHOP_VAR_##kind, NULL, 0, 0,       \
                                          (mca_base_var_info_lvl_t)(OPAL_INFO_LVL_1 + (level)-1), \
                                          MCA_BASE_VAR_SCOPE_READONLY, &twohop_adapter_params.name);
#include "params.def"
#undef TWOHOP_PARAM
    register_counter(c, "allreduce_calls",
                     "MPI_Allreduce calls (and stream-ordered calls) executed by twohop's own "
                     "algorithm; the other forms have counters of their own",
                     &twohop_served_calls);
    register_counter(c, "fallback_calls",
                     "Allreduce calls twohop handed to the previously selected module (a "
                     "persistent allreduce handed over counts once, at its initialisation; "
                     "non-blocking and persistent calls of at most 4 MPI_INT with MIN or MAX, "
                     "the shape of Open MPI's own communicator construction, are handed over "
                     "uncounted)",
                     &twohop_fallback_calls);
    register_counter(c, "nonblocking_calls",
                     "MPI_Iallreduce calls executed by twohop's own algorithm (a call that "
                     "fails, e.g. on sizes that differ between ranks, counts too)",
                     &twohop_nonblocking_calls);
    register_counter(c, "half_calls",
                     "Allreduces (any form; every start of a persistent one) of "
                     "include/twohop_half.h's bfloat16/float16 types and ops that twohop served "
                     "with its own kernels", &twohop_half_calls);
    register_counter(c, "persistent_starts",
                     "Starts of persistent allreduces (MPI_Allreduce_init, MPIX_Allreduce_init) "
                     "executed by twohop's own algorithm", &twohop_persistent_starts);
    register_counter(c, "foreign_thread_progress",
                     "Calls of Open MPI's progress from a thread other than the one that "
                     "initialised MPI below MPI_THREAD_MULTIPLE, refused (an invariant: twohop's "
                     "proxy thread progresses UCX and shared memory only; must stay 0)",
                     &twohop_foreign_progress_calls);
    /* The core's counters, one per row of counters.def. */
#define TWOHOP_COUNTER(id, name, doc)                                                          \
    register_counter(c, #name, doc, twohop_core_counter(TWOHOP_COUNTER_##id));
#include "counters.def"
#undef TWOHOP_COUNTER
    return OMPI_SUCCESS;
}

/*
 * Declines when the Open MPI this process runs is not the release twohop was compiled
 * against: internal structure layouts may differ between 4.1.x releases.
 */
static int twohop_open(void) {
    twohop_adapter_output = opal_output_open(NULL);
    opal_output_set_verbosity(twohop_adapter_output, twohop_adapter_params.verbose);
    char version[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0, major = -1, minor = -1, release = -1;
    MPI_Get_library_version(version, &len);
    const char *v = strstr(version, "Open MPI v");
    if (v) sscanf(v, "Open MPI v%d.%d.%d", &major, &minor, &release);
    if (major != OMPI_MAJOR_VERSION || minor != OMPI_MINOR_VERSION ||
        release != OMPI_RELEASE_VERSION) {
        opal_output_verbose(1, twohop_adapter_output,
                            "coll:twohop: built against Open MPI %d.%d.%d but running in %d.%d.%d;"
                            " declining (rebuild twohop against this Open MPI)",
                            OMPI_MAJOR_VERSION, OMPI_MINOR_VERSION, OMPI_RELEASE_VERSION, major,
                            minor, release);
        return OMPI_ERR_NOT_AVAILABLE;
    }
    /* Invalid RC values are reported loudly here; the decision to fall back is taken
     * collectively at communicator set-up (a per-rank decline could deadlock). */
    struct twohop_rc_settings rc = twohop_rc_from_params(&twohop_adapter_params);
    char err[512];
    if (twohop_rc_validate(&rc, err, sizeof(err)) != TWOHOP_RC_OK) {
        opal_output(0, "coll:twohop: %s; multi-node communicators will fall back", err);
    }
    /* Loading twohop must not change how the application's crashes are reported. */
    twohop_core_quiet_signals();
    char why[256] = "";
    if (!twohop_memory_kinds_init(twohop_adapter_params.test_poisoned_memory, why, sizeof(why))) {
        opal_output_verbose(2, twohop_adapter_output, "coll:twohop: device buffers not served: %s", why);
    }
    return OMPI_SUCCESS;
}

static int twohop_close(void) {
    twohop_requests_finalize();
    if (rc_report) {
        (void)twohop_rc_report_end(rc_report, stdout);
        rc_report = NULL;
    }
    twohop_core_finalize();
    if (twohop_adapter_output >= 0) opal_output_close(twohop_adapter_output);
    twohop_adapter_output = -1;
    return OMPI_SUCCESS;
}
