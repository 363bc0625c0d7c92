/*
 * The Open MPI adapter of twohop: the only file that includes Open MPI internal headers.
 * It owns the component structure, the MCA parameters (from params.def) and performance
 * variables, communicator query/enable, the fallback decision, and the translation of MPI
 * datatypes and ops into the core's twohop_reduction. The C++ core sits behind twohop_core.h.
 *
 * Selection: priority coll_twohop_priority (default 45, above tuned 30 and han 0); twohop
 * provides MPI_Allreduce only. At enable time the previously selected allreduce (function and
 * module) is saved and retained; every call twohop does not serve goes there, with the reason
 * at coll_twohop_verbose >= 1. Every fallback decision depends only on arguments MPI requires
 * to be equal on all ranks (count, datatype, op) or on a collectively agreed set-up result.
 */
#include "ompi_config.h"

#include <stdio.h>
#include <string.h>

#include "mpi.h"
#include "ompi/communicator/communicator.h"
#include "ompi/datatype/ompi_datatype.h"
#include "ompi/mca/coll/base/base.h"
#include "ompi/mca/coll/coll.h"
#include "ompi/op/op.h"
#include "ompi/proc/proc.h"
#include "opal/mca/base/mca_base_pvar.h"
#include "opal/runtime/opal_progress.h"
#include "opal/util/output.h"
#include "opal/util/proc.h"

#include "rc_settings.h"
#include "twohop_core.h"

#if OMPI_MAJOR_VERSION >= 5
#define TWOHOP_COLL_VERSION MCA_COLL_BASE_VERSION_2_4_0
#else
#define TWOHOP_COLL_VERSION MCA_COLL_BASE_VERSION_2_0_0
#endif

_Static_assert(sizeof(MPI_Fint) == sizeof(int), "fint_2_int shim assumes 4-byte Fortran INTEGER");

/* ---------------------------------------------------------------- state ---- */

static struct twohop_params params;
static int output_stream = -1;
static unsigned long long served_calls;   /* pvar coll_twohop_allreduce_calls */
static unsigned long long fallback_calls; /* pvar coll_twohop_fallback_calls */
static struct twohop_rc_report *rc_report;  /* port counters at MPI_Init (rc_report=1) */
/* MPI_THREAD_MULTIPLE was granted, as told at init_query. Recorded then because Open MPI 4.1's
 * MPI_T_init_thread() later overwrites the process's thread level (ompi_mpi_thread_provided,
 * MPI_Query_thread) with the level asked for MPI_T. */
static bool mpi_threads;

typedef struct twohop_module {
    mca_coll_base_module_t super;
    mca_coll_base_module_allreduce_fn_t prev_allreduce;
    mca_coll_base_module_t *prev_allreduce_module;
    ompi_communicator_t *comm;
    twohop_comm *core;
    int setup_state; /* 0 not yet, 1 ready, -1 failed: every call falls back */
    char setup_failure[256];
    const char *last_reason; /* last fallback reason printed (prints once per change) */
} twohop_module;

static void module_construct(twohop_module *m) {
    m->prev_allreduce = NULL;
    m->prev_allreduce_module = NULL;
    m->comm = NULL;
    m->core = NULL;
    m->setup_state = 0;
    m->setup_failure[0] = '\0';
    m->last_reason = NULL;
}

static void module_destruct(twohop_module *m) {
    twohop_comm_free(m->core);
    m->core = NULL;
    if (m->prev_allreduce_module) {
        OBJ_RELEASE(m->prev_allreduce_module);
        m->prev_allreduce_module = NULL;
    }
}

static OBJ_CLASS_INSTANCE(twohop_module, mca_coll_base_module_t, module_construct,
                          module_destruct);

/* ------------------------------------------------------------ host services ---- */

static void host_log(int level, const char *msg) {
    opal_output_verbose(level, output_stream, "coll:twohop: %s", msg);
}

static int host_allgather(void *ctx, const void *sbuf, void *rbuf, size_t bytes) {
    ompi_communicator_t *comm = ((twohop_module *)ctx)->comm;
    return comm->c_coll->coll_allgather(sbuf, (int)bytes, MPI_BYTE, rbuf, (int)bytes, MPI_BYTE,
                                        comm, comm->c_coll->coll_allgather_module);
}

static int host_agree_or(void *ctx, int *flag) {
    twohop_module *m = (twohop_module *)ctx;
    return m->prev_allreduce(MPI_IN_PLACE, flag, 1, MPI_INT, MPI_MAX, m->comm,
                             m->prev_allreduce_module);
}

static void host_progress(void) { opal_progress(); }

/* ------------------------------------------------------- datatype mapping ---- */

#define INT_T(ctype) (sizeof(ctype) == 8 ? TWOHOP_I64 : sizeof(ctype) == 4 ? TWOHOP_I32 : \
                      sizeof(ctype) == 2 ? TWOHOP_I16 : TWOHOP_I8)
#define UINT_T(ctype) (sizeof(ctype) == 8 ? TWOHOP_U64 : sizeof(ctype) == 4 ? TWOHOP_U32 : \
                       sizeof(ctype) == 2 ? TWOHOP_U16 : TWOHOP_U8)

/* Predefined datatype -> twohop element type; -1 when twohop has no kernel for it. */
static int map_predefined(ompi_datatype_t *d) {
    static struct { MPI_Datatype dt; int t; } table[48];
    static int n = 0;
    if (n == 0) {
#define MAP(mpi, kind) table[n].dt = (mpi); table[n].t = (kind); n++;
        MAP(MPI_CHAR, TWOHOP_I8) MAP(MPI_SIGNED_CHAR, TWOHOP_I8) MAP(MPI_UNSIGNED_CHAR, TWOHOP_U8)
        MAP(MPI_BYTE, TWOHOP_BYTE) MAP(MPI_SHORT, TWOHOP_I16) MAP(MPI_UNSIGNED_SHORT, TWOHOP_U16)
        MAP(MPI_INT, TWOHOP_I32) MAP(MPI_UNSIGNED, TWOHOP_U32) MAP(MPI_LONG, INT_T(long))
        MAP(MPI_UNSIGNED_LONG, UINT_T(unsigned long)) MAP(MPI_LONG_LONG_INT, TWOHOP_I64)
        MAP(MPI_UNSIGNED_LONG_LONG, TWOHOP_U64) MAP(MPI_INT8_T, TWOHOP_I8)
        MAP(MPI_UINT8_T, TWOHOP_U8) MAP(MPI_INT16_T, TWOHOP_I16) MAP(MPI_UINT16_T, TWOHOP_U16)
        MAP(MPI_INT32_T, TWOHOP_I32) MAP(MPI_UINT32_T, TWOHOP_U32) MAP(MPI_INT64_T, TWOHOP_I64)
        MAP(MPI_UINT64_T, TWOHOP_U64) MAP(MPI_AINT, INT_T(MPI_Aint))
        MAP(MPI_OFFSET, INT_T(MPI_Offset)) MAP(MPI_COUNT, INT_T(MPI_Count))
        MAP(MPI_FLOAT, TWOHOP_F32) MAP(MPI_DOUBLE, TWOHOP_F64) MAP(MPI_LONG_DOUBLE, TWOHOP_LDBL)
        MAP(MPI_C_BOOL, TWOHOP_BOOL) MAP(MPI_CXX_BOOL, TWOHOP_BOOL)
        MAP(MPI_C_FLOAT_COMPLEX, TWOHOP_C32) MAP(MPI_C_DOUBLE_COMPLEX, TWOHOP_C64)
        MAP(MPI_C_LONG_DOUBLE_COMPLEX, TWOHOP_CLDBL) MAP(MPI_CXX_FLOAT_COMPLEX, TWOHOP_C32)
        MAP(MPI_CXX_DOUBLE_COMPLEX, TWOHOP_C64) MAP(MPI_CXX_LONG_DOUBLE_COMPLEX, TWOHOP_CLDBL)
        MAP(MPI_FLOAT_INT, TWOHOP_FLOAT_INT) MAP(MPI_DOUBLE_INT, TWOHOP_DOUBLE_INT)
        MAP(MPI_LONG_INT, TWOHOP_LONG_INT) MAP(MPI_2INT, TWOHOP_2INT)
        MAP(MPI_SHORT_INT, TWOHOP_SHORT_INT) MAP(MPI_LONG_DOUBLE_INT, TWOHOP_LONG_DOUBLE_INT)
        MAP(MPI_INTEGER, TWOHOP_I32) MAP(MPI_REAL, TWOHOP_F32)
        MAP(MPI_DOUBLE_PRECISION, TWOHOP_F64) MAP(MPI_COMPLEX, TWOHOP_C32)
        MAP(MPI_DOUBLE_COMPLEX, TWOHOP_C64) MAP(MPI_2INTEGER, TWOHOP_2INT)
#undef MAP
    }
    for (int i = 0; i < n; ++i) {
        if (table[i].dt == d) return table[i].t;
    }
    return -1;
}

static int map_op(ompi_op_t *op) {
    if (op == MPI_SUM) return TWOHOP_OP_SUM;
    if (op == MPI_PROD) return TWOHOP_OP_PROD;
    if (op == MPI_MAX) return TWOHOP_OP_MAX;
    if (op == MPI_MIN) return TWOHOP_OP_MIN;
    if (op == MPI_LAND) return TWOHOP_OP_LAND;
    if (op == MPI_LOR) return TWOHOP_OP_LOR;
    if (op == MPI_LXOR) return TWOHOP_OP_LXOR;
    if (op == MPI_BAND) return TWOHOP_OP_BAND;
    if (op == MPI_BOR) return TWOHOP_OP_BOR;
    if (op == MPI_BXOR) return TWOHOP_OP_BXOR;
    if (op == MPI_MAXLOC) return TWOHOP_OP_MAXLOC;
    if (op == MPI_MINLOC) return TWOHOP_OP_MINLOC;
    return -1;
}

typedef struct user_op_ctx {
    ompi_op_t *op;
    ompi_datatype_t *dtype;
} user_op_ctx;

static int user_reduce(void *ctx, const void *in, void *inout, size_t count) {
    user_op_ctx *u = (user_op_ctx *)ctx;
    ompi_op_reduce(u->op, (void *)in, inout, count, u->dtype);
    return 0;
}

/*
 * Fills *red for (dtype, op) or returns why twohop cannot serve it. Uses only the datatype
 * and op, which MPI requires to be the same on every rank.
 */
static const char *classify(ompi_datatype_t *dtype, ompi_op_t *op, twohop_reduction *red,
                            user_op_ctx *uctx) {
    ptrdiff_t lb, extent, true_lb, true_extent;
    size_t size;
    ompi_datatype_get_extent(dtype, &lb, &extent);
    ompi_datatype_get_true_extent(dtype, &true_lb, &true_extent);
    ompi_datatype_type_size(dtype, &size);
    memset(red, 0, sizeof(*red));
    red->item_bytes = (size_t)extent;
    red->elems_per_item = 1;
    if (lb != 0 || true_lb != 0 || extent <= 0) return "datatype has a non-zero lower bound";

    if (!ompi_op_is_intrinsic(op)) {
        if (!ompi_op_is_commute(op)) return "user-defined op is not commutative";
        if (!ompi_datatype_is_predefined(dtype) &&
            ((size_t)extent != size || !ompi_datatype_is_contiguous_memory_layout(dtype, 2))) {
            return "datatype is not contiguous";
        }
        red->op = TWOHOP_OP_USER;
        uctx->op = op;
        uctx->dtype = dtype;
        red->user_fn = user_reduce;
        red->user_ctx = uctx;
        return NULL;
    }
    int o = map_op(op);
    if (o < 0) return "op is not one of the predefined reduction ops";
    ompi_datatype_t *base = dtype;
    if (!ompi_datatype_is_predefined(dtype)) {
        if ((size_t)extent != size || !ompi_datatype_is_contiguous_memory_layout(dtype, 2)) {
            return "datatype is not contiguous";
        }
        base = ompi_datatype_get_single_predefined_type_from_args(dtype);
        if (base == NULL) return "derived datatype mixes several predefined types";
    }
    int t = map_predefined(base);
    if (t < 0) return "no twohop kernel for this predefined datatype";
    ptrdiff_t base_lb, base_extent;
    ompi_datatype_get_extent(base, &base_lb, &base_extent);
    if ((size_t)base_extent != twohop_dtype_size((twohop_dtype)t) ||
        (size_t)extent % (size_t)base_extent != 0) {
        return "datatype layout differs from twohop's element layout";
    }
    if (!twohop_kernel_supported((twohop_dtype)t, (twohop_op)o)) {
        return "MPI does not define this op for this datatype";
    }
    red->dtype = (twohop_dtype)t;
    red->op = (twohop_op)o;
    red->elems_per_item = (size_t)extent / (size_t)base_extent;
    return NULL;
}

/* ------------------------------------------------------------- allreduce ---- */

static uint64_t fnv1a(const char *s) {
    uint64_t h = 1469598103934665603ULL; /* FNV-1a 64-bit offset basis and prime */
    for (; s && *s; ++s) h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return h;
}

static int setup(twohop_module *m) {
    twohop_comm_args a;
    memset(&a, 0, sizeof(a));
    a.rank = ompi_comm_rank(m->comm);
    a.size = ompi_comm_size(m->comm);
    a.comm_id = ompi_comm_get_cid(m->comm);
    a.thread_multiple = mpi_threads;
    a.host_key = fnv1a(opal_process_info.nodename);
    a.virtual_nodes = params.virtual_nodes;
    a.world_rank = ompi_comm_rank(&ompi_mpi_comm_world.comm);
    a.world_size = ompi_comm_size(&ompi_mpi_comm_world.comm);
    const opal_process_name_t *me = &ompi_proc_local()->super.proc_name;
    a.proc_key = ((uint64_t)me->jobid << 32) | me->vpid;
    a.params = &params;
    a.host.ctx = m;
    a.host.allgather = host_allgather;
    a.host.agree_or = host_agree_or;
    a.host.progress = host_progress;
    a.host.log = host_log;
    int rc = twohop_comm_setup(&a, &m->core, m->setup_failure, sizeof(m->setup_failure));
    m->setup_state = rc == TWOHOP_OK ? 1 : -1;
    return rc;
}

static int to_mpi_error(int rc) {
    switch (rc) {
    case TWOHOP_OK: return MPI_SUCCESS;
    case TWOHOP_ERR_NO_MEMORY: return OMPI_ERR_OUT_OF_RESOURCE;
    case TWOHOP_ERR_BAD_PARAM: return OMPI_ERR_BAD_PARAM;
    default: return OMPI_ERROR;
    }
}

static int fallback(twohop_module *m, const char *why, const void *sbuf, void *rbuf, int count,
                    ompi_datatype_t *dtype, ompi_op_t *op) {
    if (why != m->last_reason) {
        opal_output_verbose(1, output_stream,
                            "coll:twohop: comm %s (cid %u): allreduce falls back: %s",
                            m->comm->c_name, ompi_comm_get_cid(m->comm), why);
        m->last_reason = why;
    }
    __atomic_add_fetch(&fallback_calls, 1, __ATOMIC_RELAXED);
    return m->prev_allreduce(sbuf, rbuf, count, dtype, op, m->comm, m->prev_allreduce_module);
}

static int twohop_allreduce(const void *sbuf, void *rbuf, int count, ompi_datatype_t *dtype,
                            ompi_op_t *op, ompi_communicator_t *comm,
                            mca_coll_base_module_t *module) {
    twohop_module *m = (twohop_module *)module;
    twohop_reduction red;
    user_op_ctx uctx;
    (void)comm;
    if (count < 0) return fallback(m, "negative count", sbuf, rbuf, count, dtype, op);
    const char *why = classify(dtype, op, &red, &uctx);
    if (why) return fallback(m, why, sbuf, rbuf, count, dtype, op);
    if (m->setup_state == 0 && setup(m) != TWOHOP_OK) {
        opal_output_verbose(1, output_stream, "coll:twohop: comm %s (cid %u): set-up failed: %s",
                            m->comm->c_name, ompi_comm_get_cid(m->comm), m->setup_failure);
    }
    if (m->setup_state < 0) return fallback(m, "set-up failed", sbuf, rbuf, count, dtype, op);
    why = twohop_comm_cannot_serve(m->core, (uint64_t)count, red.item_bytes);
    if (why) return fallback(m, why, sbuf, rbuf, count, dtype, op);
    if (count == 0) return MPI_SUCCESS;
    const void *in = sbuf == MPI_IN_PLACE ? rbuf : sbuf;
    if (OPAL_UNLIKELY(params.verbose >= 3)) {
        opal_output_verbose(3, output_stream,
                            "coll:twohop: comm %s: allreduce of %d x %zu bytes, %s %s%s",
                            m->comm->c_name, count, red.item_bytes,
                            red.op == TWOHOP_OP_USER ? "user type" : twohop_dtype_name(red.dtype),
                            twohop_op_name(red.op), sbuf == MPI_IN_PLACE ? ", in place" : "");
    }
    int rc = twohop_comm_allreduce(m->core, in, rbuf, (uint64_t)count, &red);
    __atomic_add_fetch(&served_calls, 1, __ATOMIC_RELAXED);
    if (rc != TWOHOP_OK) {
        opal_output(0, "coll:twohop: comm %s: allreduce failed (twohop status %d)",
                    m->comm->c_name, rc);
    }
    return to_mpi_error(rc);
}

/* -------------------------------------------------------- module, query ---- */

static int twohop_module_enable(mca_coll_base_module_t *module, ompi_communicator_t *comm) {
    twohop_module *m = (twohop_module *)module;
    m->comm = comm;
    m->prev_allreduce = comm->c_coll->coll_allreduce;
    m->prev_allreduce_module = comm->c_coll->coll_allreduce_module;
    if (m->prev_allreduce == NULL || m->prev_allreduce_module == NULL) {
        opal_output_verbose(1, output_stream,
                            "coll:twohop: comm %s: no allreduce selected below twohop to fall "
                            "back to; twohop disabled on it", comm->c_name);
        return OMPI_ERROR;
    }
    OBJ_RETAIN(m->prev_allreduce_module);
    return OMPI_SUCCESS;
}

static mca_coll_base_module_t *twohop_comm_query(ompi_communicator_t *comm, int *priority) {
    *priority = params.priority;
    if (params.priority < 0) return NULL;
    if (OMPI_COMM_IS_INTER(comm)) {
        opal_output_verbose(1, output_stream,
                            "coll:twohop: comm %s: intercommunicator, not selected", comm->c_name);
        return NULL;
    }
    if (ompi_comm_size(comm) < 2) return NULL; /* coll/self serves single-rank communicators */
    twohop_module *m = OBJ_NEW(twohop_module);
    if (m == NULL) return NULL;
    m->super.coll_module_enable = twohop_module_enable;
    m->super.coll_allreduce = twohop_allreduce;
    return &m->super;
}

static int twohop_init_query(bool enable_progress_threads, bool enable_mpi_threads) {
    (void)enable_progress_threads;
    mpi_threads = enable_mpi_threads;
    /* The first rank of each node snapshots the InfiniBand port counters for the job report. */
    if (params.rc_report && rc_report == NULL && opal_process_info.my_local_rank == 0) {
        rc_report = twohop_rc_report_begin(NULL, NULL);
    }
    return OMPI_SUCCESS;
}

/* ------------------------------------------------------ component, params ---- */

static int get_counter(const struct mca_base_pvar_t *pvar, void *value, void *obj) {
    (void)obj;
    *(unsigned long long *)value = *(const unsigned long long *)pvar->ctx;
    return OPAL_SUCCESS;
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
    params.name = def;                                                                         \
    (void)mca_base_component_var_register(c, #name, doc, TWOHOP_VAR_##kind, NULL, 0, 0,       \
                                          (mca_base_var_info_lvl_t)(OPAL_INFO_LVL_1 + (level)-1), \
                                          MCA_BASE_VAR_SCOPE_READONLY, &params.name);
#include "params.def"
#undef TWOHOP_PARAM
    (void)mca_base_component_pvar_register(
        c, "allreduce_calls", "MPI_Allreduce calls executed by twohop's own algorithm",
        OPAL_INFO_LVL_4, MCA_BASE_PVAR_CLASS_COUNTER, MCA_BASE_VAR_TYPE_UNSIGNED_LONG_LONG, NULL,
        MCA_BASE_VAR_BIND_NO_OBJECT, MCA_BASE_PVAR_FLAG_READONLY | MCA_BASE_PVAR_FLAG_CONTINUOUS,
        get_counter, NULL, NULL, &served_calls);
    (void)mca_base_component_pvar_register(
        c, "fallback_calls", "MPI_Allreduce calls twohop handed to the previously selected module",
        OPAL_INFO_LVL_4, MCA_BASE_PVAR_CLASS_COUNTER, MCA_BASE_VAR_TYPE_UNSIGNED_LONG_LONG, NULL,
        MCA_BASE_VAR_BIND_NO_OBJECT, MCA_BASE_PVAR_FLAG_READONLY | MCA_BASE_PVAR_FLAG_CONTINUOUS,
        get_counter, NULL, NULL, &fallback_calls);
    return OMPI_SUCCESS;
}

/*
 * Declines when the Open MPI this process runs is not the release twohop was compiled
 * against: internal structure layouts may differ between 4.1.x releases.
 */
static int twohop_open(void) {
    output_stream = opal_output_open(NULL);
    opal_output_set_verbosity(output_stream, params.verbose);
    char version[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0, major = -1, minor = -1, release = -1;
    MPI_Get_library_version(version, &len);
    const char *v = strstr(version, "Open MPI v");
    if (v) sscanf(v, "Open MPI v%d.%d.%d", &major, &minor, &release);
    if (major != OMPI_MAJOR_VERSION || minor != OMPI_MINOR_VERSION ||
        release != OMPI_RELEASE_VERSION) {
        opal_output_verbose(1, output_stream,
                            "coll:twohop: built against Open MPI %d.%d.%d but running in %d.%d.%d;"
                            " declining (rebuild twohop against this Open MPI)",
                            OMPI_MAJOR_VERSION, OMPI_MINOR_VERSION, OMPI_RELEASE_VERSION, major,
                            minor, release);
        return OMPI_ERR_NOT_AVAILABLE;
    }
    /* Invalid RC values are reported loudly here; the decision to fall back is taken
     * collectively at communicator set-up (a per-rank decline could deadlock). */
    struct twohop_rc_settings rc = twohop_rc_from_params(&params);
    char err[512];
    if (twohop_rc_validate(&rc, err, sizeof(err)) != TWOHOP_RC_OK) {
        opal_output(0, "coll:twohop: %s; multi-node communicators will fall back", err);
    }
    return OMPI_SUCCESS;
}

static int twohop_close(void) {
    if (rc_report) {
        (void)twohop_rc_report_end(rc_report, stdout);
        rc_report = NULL;
    }
    twohop_core_finalize();
    if (output_stream >= 0) opal_output_close(output_stream);
    output_stream = -1;
    return OMPI_SUCCESS;
}
