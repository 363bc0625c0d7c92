/*
 * libtwohop_pmpi.so: twohop's allreduce for any MPI library, through the MPI profiling
 * interface. Loaded with LD_PRELOAD (or linked before the MPI library), it defines
 * MPI_Allreduce (and MPI_Init, MPI_Init_thread, MPI_Finalize for its state) and runs the same
 * core (twohop_core.h) as the Open MPI component; every call it does not serve goes to
 * PMPI_Allreduce, the MPI's own. It uses the MPI standard only:
 *   settings       TWOHOP_<NAME> environment variables (env_params.h), agreed at MPI_Init:
 *                  ranks whose settings differ run without twohop, all of them;
 *   nodes          MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) at MPI_Init;
 *   set-up traffic point-to-point on a private duplicate of the communicator;
 *   state          a communicator attribute whose delete callback releases it;
 *   datatypes      envelope/contents and MPI_Pack/MPI_Unpack (mpi_types.h);
 *   user ops       MPI_Reduce_local;
 *   counters       twohop_pmpi_counter() (the names of the component's MPI_T counters).
 * The serve/fallback rules are the component's: they depend only on the op, the type signature
 * and results the ranks agreed.
 */
#define _GNU_SOURCE
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <mpi.h>

#include "env_params.h"
#include "mpi_handles.h"
#include "mpi_types.h"
#include "pmpi_staging.h"
#include "policy.h"
#include "rc_settings.h"
#include "twohop_core.h"

#define EXPORT __attribute__((visibility("default")))

/* ---------------------------------------------------------------- state ---- */

static struct twohop_params params;
static int enabled;            /* twohop serves allreduce (settings agreed, priority >= 0) */
static int finalizing;
static int thread_multiple;
static int world_rank, world_size;
static int oversubscribed;     /* more processes on this node than online CPUs: yield */
static uint64_t host_key, job_key;
static int keyval = MPI_KEYVAL_INVALID;
static unsigned long long served_calls, fallback_calls;
static struct twohop_rc_report *rc_report; /* port counters at MPI_Init (TWOHOP_RC_REPORT=1) */

/* One communicator's twohop state: the value of the attribute `keyval`. */
typedef struct pmpi_state {
    MPI_Comm comm;  /* the application's communicator */
    MPI_Comm priv;  /* private duplicate: set-up traffic */
    twohop_comm *core;
    int setup_state; /* 0 not yet, 1 ready, -1 failed (fall back), -2 broken (errors) */
    char setup_failure[256];
    const char *last_reason;
    int error_reported;
    struct pmpi_state *prev, *next;
} pmpi_state;

static pthread_mutex_t states_lock = PTHREAD_MUTEX_INITIALIZER;
static pmpi_state *states; /* every live state, for MPI_Finalize */

int twohop_pmpi_active(void) { return enabled; }

static void log_msg(int level, const char *msg) {
    if (level <= params.verbose) fprintf(stderr, "twohop[%d]: %s\n", world_rank, msg);
}

/* ------------------------------------------------------------ host services ---- */

#define TWOHOP_PMPI_TAG 7077 /* any tag: the private communicator carries nothing else */

typedef struct p2p_req {
    MPI_Request req;
    int is_recv;
    size_t bytes;
} p2p_req;

static int host_post(void *ctx, void *buf, size_t bytes, int peer, int is_recv, void **out) {
    pmpi_state *s = (pmpi_state *)ctx;
    if (bytes > INT_MAX) return TWOHOP_ERR_HOST;
    p2p_req *r = (p2p_req *)malloc(sizeof(*r));
    if (r == NULL) return TWOHOP_ERR_NO_MEMORY;
    r->is_recv = is_recv;
    r->bytes = bytes;
    int rc = is_recv ? PMPI_Irecv(buf, (int)bytes, MPI_BYTE, peer, TWOHOP_PMPI_TAG, s->priv, &r->req)
                     : PMPI_Isend(buf, (int)bytes, MPI_BYTE, peer, TWOHOP_PMPI_TAG, s->priv, &r->req);
    if (rc != MPI_SUCCESS) {
        free(r);
        return TWOHOP_ERR_HOST;
    }
    *out = r;
    return TWOHOP_OK;
}

static int host_isend(void *ctx, const void *buf, size_t bytes, int peer, void **req) {
    return host_post(ctx, (void *)buf, bytes, peer, 0, req);
}

static int host_irecv(void *ctx, void *buf, size_t bytes, int peer, void **req) {
    return host_post(ctx, buf, bytes, peer, 1, req);
}

static int host_test(void *ctx, void *req, int *done) {
    (void)ctx;
    p2p_req *r = (p2p_req *)req;
    MPI_Status st;
    int flag = 0;
    *done = 0;
    int rc = PMPI_Test(&r->req, &flag, &st);
    int cls = MPI_SUCCESS;
    if (rc != MPI_SUCCESS) PMPI_Error_class(rc, &cls);
    if (rc != MPI_SUCCESS && cls != MPI_ERR_TRUNCATE) {
        if (r->req != MPI_REQUEST_NULL) return TWOHOP_ERR_HOST;
        flag = 1;
    }
    if (cls == MPI_ERR_TRUNCATE) flag = 1;
    if (!flag) return TWOHOP_OK;
    *done = 1;
    int status = TWOHOP_OK;
    int got = 0;
    if (cls == MPI_ERR_TRUNCATE) {
        status = TWOHOP_ERR_MISMATCH;
    } else if (rc != MPI_SUCCESS) {
        status = TWOHOP_ERR_HOST;
    } else if (r->is_recv && (PMPI_Get_count(&st, MPI_BYTE, &got) != MPI_SUCCESS ||
                              (size_t)got != r->bytes)) {
        status = TWOHOP_ERR_MISMATCH;
    }
    free(r);
    return status;
}

static void host_cancel(void *ctx, void *req) {
    (void)ctx;
    p2p_req *r = (p2p_req *)req;
    if (r->is_recv) {
        PMPI_Cancel(&r->req);
        PMPI_Wait(&r->req, MPI_STATUS_IGNORE);
    } else {
        PMPI_Request_free(&r->req); /* released when it completes */
    }
    free(r);
}

/* The MPI's own collectives are invisible through the standard: no detection (the settings
 * that select twohop are agreed at MPI_Init instead, so every rank takes the same path). */
static int host_foreign_pending(void *ctx, int peer) {
    (void)ctx;
    (void)peer;
    return 0;
}

/* Drives the MPI's progress now and then (another of the application's requests may be in
 * flight), and yields the CPU when the node runs more processes than it has CPUs. */
static void host_progress(void) {
    static __thread unsigned n;
    if ((++n & 255u) == 0) {
        int flag = 0;
        PMPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_SELF, &flag, MPI_STATUS_IGNORE);
    }
    if (oversubscribed) sched_yield();
}

/* ------------------------------------------------------------ start, end ---- */

static uint64_t fnv1a(uint64_t h, const void *data, size_t n) {
    const unsigned char *b = (const unsigned char *)data;
    for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ULL; /* FNV-1a 64 prime */
    return h;
}

static const char *get_env(void *ctx, const char *name) {
    (void)ctx;
    return getenv(name);
}

static int state_delete(MPI_Comm comm, int kv, void *attr, void *extra);

/*
 * After PMPI_Init*: settings from the environment, agreed over MPI_COMM_WORLD (one
 * allreduce: any rank with invalid or different settings turns twohop off everywhere), the
 * node of this process (MPI_Comm_split_type), a job-wide process key, the attribute key.
 */
static void pmpi_start(void) {
    PMPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    PMPI_Comm_size(MPI_COMM_WORLD, &world_size);
    int level = MPI_THREAD_SINGLE;
    PMPI_Query_thread(&level);
    thread_multiple = level == MPI_THREAD_MULTIPLE;

    char err[512] = "";
    const int bad = twohop_env_params_parse(&params, get_env, NULL, err, sizeof(err)) != 0;
    if (bad) fprintf(stderr, "twohop[%d]: %s; twohop is off on every rank\n", world_rank, err);
    const uint64_t h = bad ? 0 : twohop_params_hash(&params);
    /* max(h) == min(h) == ~max(~h) on every rank iff all ranks hold the same settings. */
    uint64_t v[3] = {h, ~h, (uint64_t)bad};
    if (PMPI_Allreduce(MPI_IN_PLACE, v, 3, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD) != MPI_SUCCESS) {
        v[2] = 1;
    }
    const int agreed = v[0] == ~v[1] && v[2] == 0;
    if (!agreed && !bad && world_rank == 0) {
        fprintf(stderr, "twohop: the TWOHOP_* settings differ between ranks (or a rank's are "
                        "invalid); twohop is off, every MPI_Allreduce runs the MPI's own\n");
    }

    /* The node: ranks sharing memory per the MPI; its key mixes the host name and the
     * MPI_COMM_WORLD rank of the node's first process. */
    MPI_Comm node = MPI_COMM_NULL;
    int leader = world_rank, node_procs = 1, node_rank = 0;
    if (PMPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) ==
        MPI_SUCCESS) {
        PMPI_Allreduce(&world_rank, &leader, 1, MPI_INT, MPI_MIN, node);
        PMPI_Comm_size(node, &node_procs);
        PMPI_Comm_rank(node, &node_rank);
        PMPI_Comm_free(&node);
    }
    char host[256] = "";
    gethostname(host, sizeof(host) - 1);
    host_key = fnv1a(fnv1a(1469598103934665603ULL, host, strlen(host)), &leader, sizeof(leader));
    const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    oversubscribed = cpus > 0 && node_procs > cpus;
    /* Process key: unique per process of the job (a nonce of rank 0 and the world rank). */
    uint64_t nonce = 0;
    if (world_rank == 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        nonce = fnv1a(fnv1a(1469598103934665603ULL, &ts, sizeof(ts)), host, strlen(host)) ^
                (uint64_t)getpid();
    }
    PMPI_Bcast(&nonce, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    job_key = nonce & 0xffffffff00000000ULL;

    if (PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, state_delete, &keyval, NULL) !=
        MPI_SUCCESS) {
        keyval = MPI_KEYVAL_INVALID;
    }
    enabled = agreed && params.priority >= 0 && keyval != MPI_KEYVAL_INVALID;

    struct twohop_rc_settings rc = twohop_rc_from_params(&params);
    char rcerr[512];
    if (enabled && twohop_rc_validate(&rc, rcerr, sizeof(rcerr)) != TWOHOP_RC_OK &&
        world_rank == 0) {
        fprintf(stderr, "twohop: %s; multi-node communicators will fall back\n", rcerr);
    }
    /* The first process of each node snapshots the InfiniBand port counters for the report. */
    if (enabled && params.rc_report && node_rank == 0) rc_report = twohop_rc_report_begin(NULL, NULL);
    twohop_core_quiet_signals();
    char why[256] = "";
    if (enabled && !twohop_memory_kinds_init(params.test_poisoned_memory, why, sizeof(why))) {
        char msg[320];
        snprintf(msg, sizeof(msg), "device buffers not served: %s", why);
        log_msg(2, msg);
    }
    if (enabled && world_rank == 0) {
        char msg[128];
        snprintf(msg, sizeof(msg), "libtwohop_pmpi serving MPI_Allreduce on %d ranks", world_size);
        log_msg(1, msg);
    }
}

EXPORT int MPI_Init(int *argc, char ***argv) {
    int rc = PMPI_Init(argc, argv);
    if (rc == MPI_SUCCESS) pmpi_start();
    return rc;
}

EXPORT int MPI_Init_thread(int *argc, char ***argv, int required, int *provided) {
    int rc = PMPI_Init_thread(argc, argv, required, provided);
    if (rc == MPI_SUCCESS) pmpi_start();
    return rc;
}

/* Releases the core's state of every communicator still alive and the process-wide resources
 * (UCX, the GPU-posted proxy thread), then finalizes MPI. */
EXPORT int MPI_Finalize(void) {
    if (enabled) {
        pthread_mutex_lock(&states_lock);
        finalizing = 1;
        for (pmpi_state *s = states; s; s = s->next) {
            twohop_comm_free(s->core);
            s->core = NULL;
        }
        pthread_mutex_unlock(&states_lock);
        twohop_core_finalize();
        if (rc_report) {
            (void)twohop_rc_report_end(rc_report, stdout);
            rc_report = NULL;
        }
        if (params.verbose >= 1) {
            char msg[160];
            snprintf(msg, sizeof(msg), "served %llu, fell back %llu MPI_Allreduce calls",
                     served_calls, fallback_calls);
            log_msg(1, msg);
        }
        enabled = 0;
    }
    return PMPI_Finalize();
}

/* Attribute delete callback: the communicator is being freed (not collective). */
static int state_delete(MPI_Comm comm, int kv, void *attr, void *extra) {
    (void)comm;
    (void)kv;
    (void)extra;
    pmpi_state *s = (pmpi_state *)attr;
    pthread_mutex_lock(&states_lock);
    if (s->prev) s->prev->next = s->next;
    else if (states == s) states = s->next;
    if (s->next) s->next->prev = s->prev;
    const int fin = finalizing;
    pthread_mutex_unlock(&states_lock);
    twohop_comm_free(s->core);
    if (s->priv != MPI_COMM_NULL && !fin) PMPI_Comm_free(&s->priv);
    free(s);
    return MPI_SUCCESS;
}

/* This communicator's state, created on first use (NULL when out of memory). */
static pmpi_state *state_of(MPI_Comm comm) {
    void *v = NULL;
    int flag = 0;
    if (PMPI_Comm_get_attr(comm, keyval, &v, &flag) == MPI_SUCCESS && flag) return (pmpi_state *)v;
    pmpi_state *s = (pmpi_state *)calloc(1, sizeof(*s));
    if (s == NULL) return NULL;
    s->comm = comm;
    s->priv = MPI_COMM_NULL;
    if (PMPI_Comm_set_attr(comm, keyval, s) != MPI_SUCCESS) {
        free(s);
        return NULL;
    }
    pthread_mutex_lock(&states_lock);
    s->next = states;
    if (states) states->prev = s;
    states = s;
    pthread_mutex_unlock(&states_lock);
    return s;
}

/* Resource-caused fallbacks are printed once per process at the default verbosity. */
static int resource_warned;

/* Collective over s->comm: the private duplicate, then the core's set-up. */
static void setup(pmpi_state *s) {
    int rank, size;
    PMPI_Comm_rank(s->comm, &rank);
    PMPI_Comm_size(s->comm, &size);
    if (PMPI_Comm_dup(s->comm, &s->priv) != MPI_SUCCESS) {
        s->priv = MPI_COMM_NULL;
        s->setup_state = -2;
        snprintf(s->setup_failure, sizeof(s->setup_failure), "MPI_Comm_dup failed");
        log_msg(0, "set-up failed: MPI_Comm_dup of the communicator failed");
        return;
    }
    PMPI_Comm_set_errhandler(s->priv, MPI_ERRORS_RETURN);
    twohop_comm_args a;
    memset(&a, 0, sizeof(a));
    a.rank = rank;
    a.size = size;
    a.thread_multiple = thread_multiple;
    a.host_key = host_key;
    a.virtual_nodes = params.virtual_nodes;
    a.world_rank = world_rank;
    a.world_size = world_size;
    a.proc_key = job_key | (uint32_t)world_rank;
    a.params = &params;
    a.host.ctx = s;
    a.host.isend = host_isend;
    a.host.irecv = host_irecv;
    a.host.test = host_test;
    a.host.cancel = host_cancel;
    a.host.foreign_pending = host_foreign_pending;
    a.host.progress = host_progress;
    a.host.log = log_msg;
    int resource = 0;
    int rc = twohop_comm_setup(&a, &s->core, &resource, s->setup_failure,
                               sizeof(s->setup_failure));
    char msg[400];
    if (rc == TWOHOP_OK) {
        s->setup_state = 1;
    } else if (rc == TWOHOP_ERR_MISMATCH || rc == TWOHOP_ERR_TIMEOUT || rc == TWOHOP_ERR_HOST) {
        s->setup_state = -2;
        snprintf(msg, sizeof(msg), "set-up failed: %s", s->setup_failure);
        log_msg(0, msg);
    } else {
        s->setup_state = -1;
        snprintf(msg, sizeof(msg), "twohop does not serve this communicator: %s (its allreduce "
                 "runs the MPI's own)", s->setup_failure);
        const int first = resource && !__atomic_exchange_n(&resource_warned, 1, __ATOMIC_RELAXED);
        log_msg(first ? 0 : 1, msg);
    }
}

/* ------------------------------------------------------------- allreduce ---- */

static int mpi_error(int rc) {
    switch (rc) {
    case TWOHOP_OK: return MPI_SUCCESS;
    case TWOHOP_ERR_NO_MEMORY: return MPI_ERR_NO_MEM;
    case TWOHOP_ERR_BAD_PARAM: return MPI_ERR_ARG;
    case TWOHOP_ERR_MISMATCH: return MPI_ERR_TRUNCATE;
    default: return MPI_ERR_OTHER;
    }
}

/* The MPI's own allreduce, with buffers of memory the host must not touch staged first. */
static int fallback(pmpi_state *s, const char *why, const void *sbuf, void *rbuf, int count,
                    MPI_Datatype dtype, MPI_Op op, MPI_Comm comm, int kin, int kout) {
    const int staged = kin != TWOHOP_KIND_HOST || kout != TWOHOP_KIND_HOST;
    if (s && why != s->last_reason) {
        char msg[320];
        snprintf(msg, sizeof(msg), "allreduce falls back%s: %s",
                 staged ? " (buffers staged through host memory)" : "", why);
        log_msg(1, msg);
        s->last_reason = why;
    }
    __atomic_add_fetch(&fallback_calls, 1, __ATOMIC_RELAXED);
    return staged_allreduce(sbuf, rbuf, count, dtype, op, comm, kin, kout, 0);
}

/* User-defined op on canonical (packed) items: MPI_Reduce_local, through the user's layout
 * when it is not the packed one. */
typedef struct user_op_ctx {
    MPI_Op op;
    MPI_Datatype dtype;
    int packed;
    uint64_t size, extent;
    ptrdiff_t true_lb;
    uint64_t true_extent;
} user_op_ctx;

static int user_reduce(void *ctx, const void *in, void *inout, size_t count) {
    user_op_ctx *u = (user_op_ctx *)ctx;
    if (u->packed) {
        for (size_t done = 0; done < count; done += INT_MAX) {
            const size_t n = count - done < INT_MAX ? count - done : INT_MAX;
            if (PMPI_Reduce_local((const char *)in + done * u->size, (char *)inout + done * u->size,
                                  (int)n, u->dtype, u->op) != MPI_SUCCESS) {
                return -1;
            }
        }
        return 0;
    }
    size_t chunk = u->extent > 0 ? (size_t)(1 << 20) / (size_t)u->extent : 1;
    if (chunk == 0) chunk = 1;
    if (chunk > count) chunk = count;
    const size_t span = (size_t)u->true_extent + (chunk - 1) * (size_t)u->extent;
    char *mem = (char *)malloc(2 * span + 1);
    if (mem == NULL) return -1;
    int rc = 0;
    for (size_t done = 0; rc == 0 && done < count; done += chunk) {
        const size_t n = count - done < chunk ? count - done : chunk;
        char *a = mem - u->true_lb, *b = mem + span - u->true_lb;
        const char *pin = (const char *)in + done * u->size;
        char *pio = (char *)inout + done * u->size;
        rc = twohop_mpi_from_canonical(a, u->dtype, n, MPI_DATATYPE_NULL, 1, pin);
        if (rc == 0) rc = twohop_mpi_from_canonical(b, u->dtype, n, MPI_DATATYPE_NULL, 1, pio);
        if (rc == 0 && PMPI_Reduce_local(a, b, (int)n, u->dtype, u->op) != MPI_SUCCESS) rc = -1;
        if (rc == 0) rc = twohop_mpi_to_canonical(b, u->dtype, n, MPI_DATATYPE_NULL, 1, pio);
    }
    free(mem);
    return rc;
}

/*
 * Half precision (include/twohop_half.h): the handles the header registers here, in the front
 * ends' shared registry (coll/front/mpi_handles.h; the Open MPI component's
 * mca_coll_twohop_register_half takes the same arguments). MPI_SUCCESS, MPI_ERR_ARG, or
 * MPI_ERR_NO_MEM when the 64 entries are taken (the handle then runs its host function).
 */
static unsigned long long half_calls; /* coll_twohop_half_calls */

EXPORT int twohop_pmpi_register_half(MPI_Datatype type, MPI_Op op, int kind, int half_op) {
    return twohop_half_register(type, op, kind, half_op);
}

/*
 * The route of a call from the count, the op and the type signature (coll/front/policy.h,
 * shared with the Open MPI adapter): *red filled for CALL_SERVE, *why for CALL_FALLBACK.
 * *base: the canonical element type for predefined ops (the half type itself for a half pair;
 * MPI_DATATYPE_NULL for user ops, whose canonical layout is the packed signature);
 * *elems_per_item: canonical elements per user item.
 */
static call_route route_signature(int count, MPI_Datatype dtype, MPI_Op op, twohop_reduction *red,
                                  user_op_ctx *u, MPI_Datatype *base_out, uint64_t *elems_per_item,
                                  const char **why) {
    twohop_type_facts f;
    memset(&f, 0, sizeof(f));
    MPI_Count size = 0;
    PMPI_Type_size_x(dtype, &size);
    f.type_size = (uint64_t)size;
    f.half_dtype = f.op = f.base = TWOHOP_NO_KERNEL;
    MPI_Datatype base = MPI_DATATYPE_NULL;
    /* The op and the signature are read only for a call that has one (twohop_route_signature
     * decides empty calls first). */
    const bool nonempty = count > 0 && size > 0;
    twohop_dtype ht = TWOHOP_F32;
    twohop_op ho = TWOHOP_OP_SUM;
    if (nonempty && twohop_half_lookup(dtype, op, &ht, &ho)) {
        f.half_dtype = (int)ht;
        f.half_op = (int)ho;
    }
    if (nonempty) {
        f.op_predefined = twohop_mpi_op_is_predefined(op);
        f.op = twohop_mpi_map_op(op);
        int commute = 0;
        f.op_commutes = f.half_dtype < 0 && !f.op_predefined &&
                        PMPI_Op_commutative(op, &commute) == MPI_SUCCESS && commute;
    }
    if (nonempty && f.half_dtype < 0 && f.op >= 0) {
        base = twohop_mpi_single_type(dtype);
        f.base = base == MPI_DATATYPE_NULL ? TWOHOP_BASE_MIXED : twohop_mpi_map_type(base);
        if (base != MPI_DATATYPE_NULL) {
            MPI_Aint blb, bext;
            MPI_Count bsize = 0;
            PMPI_Type_get_extent(base, &blb, &bext);
            PMPI_Type_size_x(base, &bsize);
            f.base_size = (uint64_t)bsize;
            f.base_extent = (uint64_t)bext;
        }
    }
    const call_route route = twohop_route_signature(count, &f, red, elems_per_item, why);
    *base_out = MPI_DATATYPE_NULL;
    if (route != CALL_SERVE) return route;
    if (red->op == TWOHOP_OP_USER) {
        MPI_Count lb, extent, tlb, textent;
        PMPI_Type_get_extent_x(dtype, &lb, &extent);
        PMPI_Type_get_true_extent_x(dtype, &tlb, &textent);
        u->op = op;
        u->dtype = dtype;
        u->size = (uint64_t)size;
        u->extent = (uint64_t)extent;
        u->true_lb = (ptrdiff_t)tlb;
        u->true_extent = (uint64_t)textent;
        u->packed = 0; /* set per call */
        red->user_fn = user_reduce;
        red->user_ctx = u;
    } else {
        *base_out = f.half_dtype >= 0 ? dtype : base;
    }
    return route;
}

/* Canonical: the user's buffer is the canonical array itself (the predefined base type, or
 * packed items in order). */
static int is_canonical(MPI_Datatype dtype, MPI_Datatype base) {
    if (base != MPI_DATATYPE_NULL && dtype == base) return 1;
    if (base != MPI_DATATYPE_NULL) {
        MPI_Aint lb, ext;
        MPI_Count s = 0;
        PMPI_Type_get_extent(base, &lb, &ext);
        PMPI_Type_size_x(base, &s);
        if ((MPI_Count)ext != s) return 0; /* a derived type of an element with holes */
    }
    return twohop_mpi_packed_in_order(dtype);
}

/* A buffer of this rank as the core sees it: canonical memory (direct or through its kind's
 * copies), else a canonical host copy made with MPI_Pack/MPI_Unpack. */
typedef struct view {
    int kind;
    char *base;
    staging st;      /* memory of another kind in a non-canonical layout: host copy */
    char *canon;     /* canonical host copy of a non-canonical layout */
} view;

static int kind_read(void *ctx, void *dst, uint64_t off, uint64_t len) {
    const view *v = (const view *)ctx;
    return twohop_kind_to_host(v->kind, dst, v->base + off, (size_t)len);
}

static int kind_write(void *ctx, const void *src, uint64_t off, uint64_t len) {
    const view *v = (const view *)ctx;
    return twohop_kind_from_host(v->kind, v->base + off, src, (size_t)len);
}

/* Prepares *ub for one buffer; copy_in: its contents are read (the send buffer, or the
 * receive buffer of MPI_IN_PLACE). 0 or a twohop_status. */
static int view_open(view *v, twohop_userbuf *ub, int kind, const void *buf, MPI_Datatype dtype,
                     uint64_t count, MPI_Datatype base, uint64_t epi, uint64_t canon_bytes,
                     int canonical, int copy_in) {
    memset(v, 0, sizeof(*v));
    memset(ub, 0, sizeof(*ub));
    v->kind = kind;
    if (canonical) {
        if (kind == TWOHOP_KIND_HOST) {
            ub->direct = (char *)buf;
        } else {
            v->base = (char *)buf;
            if (kind == TWOHOP_KIND_CUDA) ub->device = (char *)buf;
            ub->ctx = v;
            ub->read = kind_read;
            ub->write = kind_write;
        }
        return TWOHOP_OK;
    }
    const char *user = (const char *)buf;
    if (kind != TWOHOP_KIND_HOST) {
        int rc = stage_in(&v->st, kind, buf, dtype, count);
        if (rc != TWOHOP_OK) return rc;
        user = staged_buf(&v->st);
    }
    v->canon = (char *)malloc((size_t)canon_bytes + 1);
    if (v->canon == NULL) return TWOHOP_ERR_NO_MEMORY;
    if (copy_in && twohop_mpi_to_canonical(user, dtype, count, base, epi, v->canon) != 0) {
        return TWOHOP_ERR_HOST;
    }
    ub->direct = v->canon;
    return TWOHOP_OK;
}

/* Writes a converted receive buffer back to the user's layout (and memory kind). */
static int view_close(view *v, void *buf, MPI_Datatype dtype, uint64_t count, MPI_Datatype base,
                      uint64_t epi, int write_back) {
    int rc = TWOHOP_OK;
    if (write_back && v->canon) {
        char *user = v->st.host ? staged_buf(&v->st) : (char *)buf;
        if (twohop_mpi_from_canonical(user, dtype, count, base, epi, v->canon) != 0) {
            rc = TWOHOP_ERR_HOST;
        } else if (v->st.host) {
            rc = stage_out(&v->st, v->kind);
        }
    }
    free(v->canon);
    free(v->st.host);
    v->canon = NULL;
    v->st.host = NULL;
    return rc;
}

static int call_errhandler(MPI_Comm comm, int err) {
    if (err != MPI_SUCCESS) PMPI_Comm_call_errhandler(comm, err);
    return err;
}

/* A call on arguments twohop does not take (erroneous ones, an intercommunicator, a single
 * rank, twohop switched off): the MPI's own allreduce, which reports the errors as it would.
 * A stream-ordered call first waits for its stream, or is refused on a stream being captured
 * (a wait would end the capture); a single rank's device buffers are staged, never passed to
 * the MPI's host memcpy. */
static int unserved_call(const void *sbuf, void *rbuf, int count, MPI_Datatype dtype, MPI_Op op,
                         MPI_Comm comm, int inter, int size, int enqueue, void *stream) {
    /* A call that reads nothing (empty or erroneous: the MPI reports it) skips the wait, any
     * other is refused on this rank alone (see twohop.h). */
    const int capturing = enqueue && twohop_stream_capturing(stream);
    if (capturing && count > 0 && comm != MPI_COMM_NULL) {
        log_msg(0, "twohop_allreduce_enqueue on a stream being captured into a CUDA graph "
                   "is refused (twohop does not serve this call)");
        return call_errhandler(comm, MPI_ERR_OTHER);
    }
    if (enqueue && !capturing && twohop_stream_sync(stream) != 0) {
        return call_errhandler(comm, MPI_ERR_OTHER);
    }
    if (enabled && size == 1 && !inter && count > 0 && rbuf != MPI_IN_PLACE) {
        /* A single-rank communicator: the MPI copies with a host memcpy, which device
         * buffers must not reach. */
        const int ko = twohop_memory_kind(rbuf);
        const int ki = sbuf == MPI_IN_PLACE ? ko : twohop_memory_kind(sbuf);
        return staged_allreduce(sbuf, rbuf, count, dtype, op, comm, ki, ko, 0);
    }
    return PMPI_Allreduce(sbuf, rbuf, count, dtype, op, comm);
}

/* A stream-ordered call on a stream being captured into a CUDA graph, refused before any
 * staging or wait on the stream (either would invalidate the capture): a call twohop serves
 * (route CALL_SERVE) fails on every rank (twohop_comm_refuse_capture), one it does not serve
 * fails here alone (`why`: the reason it is not served). Returns the error handler's code. */
static int refuse_capture(pmpi_state *s, call_route route, const char *why, MPI_Comm comm) {
    char cwhy[256], msg[320];
    if (route == CALL_SERVE) {
        (void)twohop_comm_refuse_capture(s->core, cwhy, sizeof(cwhy));
        s->error_reported = 1;
        snprintf(msg, sizeof(msg), "allreduce failed: %s", cwhy);
    } else {
        snprintf(msg, sizeof(msg), "twohop_allreduce_enqueue on a stream being captured into "
                 "a CUDA graph is refused (this call is not served by twohop: %s; the other "
                 "ranks are not told)", why);
    }
    log_msg(0, msg);
    return call_errhandler(comm, MPI_ERR_OTHER);
}

/* The signature of a served call: what route_signature found (red, base, epi: elements of
 * `base` per item) and where its buffers live (kin, kout: TWOHOP_KIND_*). */
typedef struct served_call {
    twohop_reduction red;
    user_op_ctx uctx;
    MPI_Datatype base;
    uint64_t epi;
    int canonical; /* the layout is `count` dense items of `base` (no packing) */
    int in_place;
    int kin, kout;
} served_call;

/* Runs a served call on twohop's core: the buffers viewed in the canonical layout (packed
 * through MPI_Pack/MPI_Unpack otherwise), the blocking or stream-ordered call, the result
 * unpacked, the counters moved, and the first failure on the communicator logged. Returns
 * the error handler's code. */
static int run_served(pmpi_state *s, served_call *sc, const void *sbuf, void *rbuf, int count,
                      MPI_Datatype dtype, MPI_Comm comm, int enqueue, void *stream) {
    const uint64_t n = (uint64_t)count * sc->epi;
    const uint64_t canon_bytes = n * sc->red.item_bytes;
    if (sc->red.op == TWOHOP_OP_USER) sc->uctx.packed = sc->canonical;
    view vin, vout;
    twohop_userbuf in, out;
    int rc = view_open(&vout, &out, sc->kout, rbuf, dtype, (uint64_t)count, sc->base, sc->epi,
                       canon_bytes, sc->canonical, sc->in_place);
    if (rc == TWOHOP_OK && sc->in_place) {
        in = out;
    } else if (rc == TWOHOP_OK) {
        rc = view_open(&vin, &in, sc->kin, sbuf, dtype, (uint64_t)count, sc->base, sc->epi,
                       canon_bytes, sc->canonical, 1);
    } else {
        memset(&vin, 0, sizeof(vin));
    }
    if (sc->in_place) memset(&vin, 0, sizeof(vin));
    char fail_why[256];
    fail_why[0] = '\0'; /* (not "" as initialiser: that zeroes all 256 bytes per call) */
    if (rc != TWOHOP_OK) {
        snprintf(fail_why, sizeof(fail_why), "converting a buffer of a non-canonical layout "
                                             "through MPI_Pack/MPI_Unpack failed");
        twohop_comm_abort(s->core, rc, fail_why); /* the others must not wait for this rank */
    } else if (enqueue) {
        int enqueued = 0;
        rc = twohop_comm_allreduce_enqueue(s->core, &in, &out, n, &sc->red, stream, &enqueued,
                                           fail_why, sizeof(fail_why));
    } else {
        rc = twohop_comm_allreduce(s->core, &in, &out, n, &sc->red, fail_why, sizeof(fail_why));
    }
    const int wrc = view_close(&vout, rbuf, dtype, (uint64_t)count, sc->base, sc->epi,
                               rc == TWOHOP_OK);
    if (rc == TWOHOP_OK) rc = wrc;
    (void)view_close(&vin, NULL, dtype, 0, sc->base, sc->epi, 0);
    __atomic_add_fetch(&served_calls, 1, __ATOMIC_RELAXED);
    if (sc->red.dtype == TWOHOP_BF16 || sc->red.dtype == TWOHOP_F16) {
        __atomic_add_fetch(&half_calls, 1, __ATOMIC_RELAXED);
    }
    if (rc != TWOHOP_OK && !s->error_reported) {
        s->error_reported = 1;
        char msg[320];
        snprintf(msg, sizeof(msg), "allreduce failed: %s", fail_why);
        log_msg(0, msg);
    }
    return call_errhandler(comm, mpi_error(rc));
}

/* MPI_Allreduce (enqueue 0) and twohop_allreduce_enqueue (1, on `stream`): the route of the
 * call from its signature and the communicator's agreed set-up (the same on every rank), then
 * the MPI's own allreduce, the fallback, an error or twohop's core. */
static int allreduce_impl(const void *sbuf, void *rbuf, int count, MPI_Datatype dtype, MPI_Op op,
                          MPI_Comm comm, int enqueue, void *stream) {
    int inter = 0, size = 0;
    if (!enabled || comm == MPI_COMM_NULL || count < 0 || dtype == MPI_DATATYPE_NULL ||
        op == MPI_OP_NULL || rbuf == MPI_IN_PLACE || (sbuf == rbuf && count > 0) ||
        PMPI_Comm_test_inter(comm, &inter) != MPI_SUCCESS || inter ||
        PMPI_Comm_size(comm, &size) != MPI_SUCCESS || size < 2) {
        return unserved_call(sbuf, rbuf, count, dtype, op, comm, inter, size, enqueue, stream);
    }
    served_call sc;
    sc.in_place = sbuf == MPI_IN_PLACE;
    sc.kout = count > 0 ? twohop_memory_kind(rbuf) : TWOHOP_KIND_HOST;
    sc.kin = sc.in_place || count <= 0 ? sc.kout : twohop_memory_kind(sbuf);
    pmpi_state *s = state_of(comm);
    const char *why = NULL;
    call_route route =
        route_signature(count, dtype, op, &sc.red, &sc.uctx, &sc.base, &sc.epi, &why);
    if (route == CALL_EMPTY) {
        /* Nothing is read: no wait (none on a capturing stream, which it would end). */
        if (enqueue && !twohop_stream_capturing(stream) && twohop_stream_sync(stream) != 0) {
            return call_errhandler(comm, MPI_ERR_OTHER);
        }
        return MPI_SUCCESS; /* empty signature on every rank */
    }
    if (route == CALL_SERVE && s == NULL) {
        /* Every rank must take the same path: fail the call rather than fall back alone. */
        log_msg(0, "out of memory for the communicator's state");
        return call_errhandler(comm, MPI_ERR_NO_MEM);
    }
    if (route == CALL_SERVE) {
        if (s->setup_state == 0) setup(s);
        route = twohop_route_setup(s->setup_state,
                                   s->setup_state == 1
                                       ? twohop_comm_cannot_serve(s->core, (uint64_t)count,
                                                                  sc.red.item_bytes)
                                       : NULL,
                                   &why);
    }
    if (route == CALL_BROKEN) return call_errhandler(comm, MPI_ERR_OTHER);
    sc.canonical = route == CALL_SERVE && is_canonical(dtype, sc.base);
    if (enqueue && twohop_stream_capturing(stream)) return refuse_capture(s, route, why, comm);
    if (enqueue && !twohop_stays_on_stream(route, sc.kin, sc.kout, sc.canonical)) {
        enqueue = 0; /* a blocking path: the inputs must be complete first */
        if (twohop_stream_sync(stream) != 0) {
            log_msg(0, "twohop_allreduce_enqueue: waiting for the application's CUDA stream "
                       "failed (the stream or its device is in an error state)");
            return call_errhandler(comm, MPI_ERR_OTHER);
        }
    }
    if (route == CALL_FALLBACK) {
        return fallback(s, why, sbuf, rbuf, count, dtype, op, comm, sc.kin, sc.kout);
    }
    return run_served(s, &sc, sbuf, rbuf, count, dtype, comm, enqueue, stream);
}

EXPORT int MPI_Allreduce(const void *sbuf, void *rbuf, int count, MPI_Datatype dtype, MPI_Op op,
                         MPI_Comm comm) {
    return allreduce_impl(sbuf, rbuf, count, dtype, op, comm, 0, NULL);
}

/*
 * The stream-ordered allreduce behind include/twohop.h's twohop_allreduce_enqueue (found with
 * dlsym), for MPIs using this library: the component's entry point
 * mca_coll_twohop_allreduce_enqueue with the same arguments and rules.
 */
EXPORT int twohop_pmpi_allreduce_enqueue(const void *sbuf, void *rbuf, int count,
                                         MPI_Datatype dtype, MPI_Op op, MPI_Comm comm,
                                         void *stream) {
    return allreduce_impl(sbuf, rbuf, count, dtype, op, comm, 1, stream);
}

/*
 * The library's counters, by the names of the Open MPI component's MPI_T counters
 * (coll_twohop_allreduce_calls, coll_twohop_fallback_calls, coll_twohop_gpu_path_calls,
 * coll_twohop_gpu_hop1_calls, coll_twohop_gpu_posted_calls, coll_twohop_doorbells,
 * coll_twohop_rabenseifner_shards, coll_twohop_enqueued_calls,
 * coll_twohop_enqueued_multinode_calls): *value = the count in this
 * process. Returns 0, or -1 for an unknown name. Callable any time (tests find it with dlsym).
 */
EXPORT int twohop_pmpi_counter(const char *name, unsigned long long *value) {
    const struct { const char *name; const unsigned long long *v; } table[] = {
        {"coll_twohop_allreduce_calls", &served_calls},
        {"coll_twohop_fallback_calls", &fallback_calls},
#define TWOHOP_COUNTER(id, name, doc) {"coll_twohop_" #name, twohop_core_counter(TWOHOP_COUNTER_##id)},
#include "counters.def"
#undef TWOHOP_COUNTER
        {"coll_twohop_half_calls", &half_calls},
    };
    for (size_t i = 0; name && i < sizeof(table) / sizeof(table[0]); ++i) {
        if (strcmp(name, table[i].name) == 0) {
            *value = __atomic_load_n(table[i].v, __ATOMIC_RELAXED);
            return 0;
        }
    }
    return -1;
}
