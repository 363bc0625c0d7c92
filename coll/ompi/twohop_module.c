/*
 * The Open MPI adapter's module (twohop_adapter.h): its object, comm_query and enable (the
 * previous allreduce, iallreduce and allreduce_init saved and retained), the host services the
 * core's set-up runs over (point-to-point on twohop's private tag, Open MPI's progress, verbose
 * output) and the communicator's set-up.
 */
#include "ompi_config.h"

#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpi.h"
#include "ompi/communicator/communicator.h"
#include "ompi/mca/coll/base/coll_tags.h"
#include "ompi/mca/coll/coll.h"
#include "ompi/mca/pml/pml.h"
#include "ompi/proc/proc.h"
#include "ompi/request/request.h"
#include "opal/runtime/opal_progress.h"
#include "opal/util/output.h"
#include "opal/util/proc.h"

#include "twohop_adapter.h"
#include "twohop_core.h"

/* ------------------------------------------------------------ module object ---- */

static void module_construct(twohop_module *m) {
    m->prev_allreduce = NULL;
    m->prev_allreduce_module = NULL;
    m->prev_iallreduce = NULL;
    m->prev_iallreduce_module = NULL;
    m->prev_allreduce_init = NULL;
    m->prev_allreduce_init_module = NULL;
    m->comm = NULL;
    m->core = NULL;
    m->setup_state = 0;
    m->setup_failure[0] = '\0';
    m->last_reason = NULL;
    m->error_reported = 0;
    m->setup_fiber = NULL;
    m->deferred_state = 0;
    m->fallback_window = 0;
    m->pending_head = m->pending_tail = NULL;
    m->next_deferred = NULL;
    OBJ_CONSTRUCT(&m->setup_lock, opal_mutex_t);
}

static void module_destruct(twohop_module *m) {
    twohop_deferred_setup_forget(m);
    OBJ_DESTRUCT(&m->setup_lock);
    twohop_comm_free(m->core);
    m->core = NULL;
    if (m->prev_allreduce_module) {
        OBJ_RELEASE(m->prev_allreduce_module);
        m->prev_allreduce_module = NULL;
    }
    if (m->prev_iallreduce_module) {
        OBJ_RELEASE(m->prev_iallreduce_module);
        m->prev_iallreduce_module = NULL;
    }
    if (m->prev_allreduce_init_module) {
        OBJ_RELEASE(m->prev_allreduce_init_module);
        m->prev_allreduce_init_module = NULL;
    }
}

static OBJ_CLASS_INSTANCE(twohop_module, mca_coll_base_module_t, module_construct,
                          module_destruct);

/* ------------------------------------------------------------ host services ---- */

static void host_log(int level, const char *msg) {
    if (level <= 0) {
        opal_output(0, "coll:twohop: %s", msg);
    } else {
        opal_output_verbose(level, twohop_adapter_output, "coll:twohop: %s", msg);
    }
}

/*
 * twohop's private point-to-point tag for set-up traffic. Negative like every coll tag, so no
 * user message can match it, and distinct from the tags of Open MPI's own collectives
 * (coll_tags.h). Its magnitude is below 2^23 so that it survives pml/ucx's 24-bit tag field
 * unchanged; libnbc would reach it only after about four million non-blocking collectives
 * on one communicator.
 */
#define TWOHOP_SETUP_TAG (-(1 << 22) - 77)

typedef struct p2p_req {
    ompi_request_t *req;
    int is_recv;
    size_t bytes;
} p2p_req;

static int host_post(void *ctx, void *buf, size_t bytes, int peer, int is_recv, void **out) {
    twohop_module *m = (twohop_module *)ctx;
    if (bytes > INT_MAX) return TWOHOP_ERR_HOST;
    p2p_req *r = (p2p_req *)malloc(sizeof(*r));
    if (r == NULL) return TWOHOP_ERR_NO_MEMORY;
    r->is_recv = is_recv;
    r->bytes = bytes;
    int rc = is_recv ? MCA_PML_CALL(irecv(buf, (int)bytes, MPI_BYTE, peer, TWOHOP_SETUP_TAG,
                                          m->comm, &r->req))
                     : MCA_PML_CALL(isend(buf, (int)bytes, MPI_BYTE, peer, TWOHOP_SETUP_TAG,
                                          MCA_PML_BASE_SEND_STANDARD, m->comm, &r->req));
    if (rc != OMPI_SUCCESS) {
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
    ompi_status_public_t st;
    int flag = 0;
    *done = 0;
    int rc = ompi_request_test(&r->req, &flag, &st);
    if (rc != OMPI_SUCCESS && !flag && rc != MPI_ERR_TRUNCATE) return TWOHOP_ERR_HOST;
    if (rc == MPI_ERR_TRUNCATE) flag = 1;
    if (!flag) return TWOHOP_OK;
    *done = 1;
    int status = TWOHOP_OK;
    /* (Single-completion tests do not set MPI_ERROR: the return code carries errors.) */
    if (rc == MPI_ERR_TRUNCATE || (r->is_recv && st._ucount != r->bytes)) {
        status = TWOHOP_ERR_MISMATCH;
    } else if (rc != OMPI_SUCCESS) {
        status = TWOHOP_ERR_HOST;
    }
    free(r);
    return status;
}

static void host_cancel(void *ctx, void *req) {
    (void)ctx;
    p2p_req *r = (p2p_req *)req;
    if (r->is_recv) {
        ompi_request_cancel(r->req);
        ompi_request_wait(&r->req, MPI_STATUS_IGNORE);
    } else {
        ompi_request_free(&r->req); /* released when it completes */
    }
    free(r);
}

/* Open MPI's own allreduce implementations talk with these tags (tuned, basic = reduce+bcast). */
static int host_foreign_pending(void *ctx, int peer) {
    static const int tags[] = {MCA_COLL_BASE_TAG_ALLREDUCE, MCA_COLL_BASE_TAG_REDUCE,
                               MCA_COLL_BASE_TAG_BCAST};
    twohop_module *m = (twohop_module *)ctx;
    for (size_t i = 0; i < sizeof(tags) / sizeof(tags[0]); ++i) {
        int flag = 0;
        if (MCA_PML_CALL(iprobe(peer, tags[i], m->comm, &flag, MPI_STATUS_IGNORE)) ==
                OMPI_SUCCESS && flag) {
            return 1;
        }
    }
    return 0;
}

/*
 * Open MPI's progress, for the core's waits. Below MPI_THREAD_MULTIPLE only the thread that
 * initialised MPI may call into Open MPI: a call from any other thread (the proxy thread must
 * only ever progress UCX and shared memory) is refused and counted (MPI_T
 * coll_twohop_foreign_thread_progress, which the tests require to stay 0).
 */
unsigned long long twohop_foreign_progress_calls;
static void host_progress(void) {
    if (!twohop_mpi_threads && !pthread_equal(pthread_self(), twohop_mpi_init_thread)) {
        __atomic_add_fetch(&twohop_foreign_progress_calls, 1, __ATOMIC_RELAXED);
        return;
    }
    opal_progress();
}

/* ------------------------------------------------------------ set-up ---- */

static uint64_t fnv1a(const char *s) {
    uint64_t h = 1469598103934665603ULL; /* FNV-1a 64-bit offset basis and prime */
    for (; s && *s; ++s) h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return h;
}

/*
 * "comm NAME", with twohop's communicator id once set up (twohop_comm_id: agreed by the ranks,
 * so the same in every rank's messages). Open MPI's own id is not used: 4.1's
 * ompi_comm_get_cid() is gone in 5.0, whose ompi_comm_get_local_cid() differs between ranks.
 */
const char *twohop_comm_label(const twohop_module *m, char *buf, size_t len) {
    if (m->core) {
        snprintf(buf, len, "comm %s (twohop id %u)", m->comm->c_name,
                 (unsigned)twohop_comm_id(m->core));
    } else {
        snprintf(buf, len, "comm %s", m->comm->c_name);
    }
    return buf;
}

/* Resource-caused fallbacks are printed once per process at the default verbosity. */
static int resource_warned;

int twohop_module_setup(twohop_module *m, int *state) {
    twohop_comm_args a;
    memset(&a, 0, sizeof(a));
    a.rank = ompi_comm_rank(m->comm);
    a.size = ompi_comm_size(m->comm);
    a.thread_multiple = twohop_mpi_threads;
    a.host_key = fnv1a(opal_process_info.nodename);
    a.virtual_nodes = twohop_adapter_params.virtual_nodes;
    a.world_rank = ompi_comm_rank(&ompi_mpi_comm_world.comm);
    a.world_size = ompi_comm_size(&ompi_mpi_comm_world.comm);
    const opal_process_name_t *me = &ompi_proc_local()->super.proc_name;
    a.proc_key = ((uint64_t)me->jobid << 32) | me->vpid;
    a.params = &twohop_adapter_params;
    a.host.ctx = m;
    a.host.isend = host_isend;
    a.host.irecv = host_irecv;
    a.host.test = host_test;
    a.host.cancel = host_cancel;
    a.host.foreign_pending = host_foreign_pending;
    a.host.progress = host_progress;
    a.host.log = host_log;
    int resource = 0;
    int rc = twohop_comm_setup(&a, &m->core, &resource, m->setup_failure,
                               sizeof(m->setup_failure));
    if (rc == TWOHOP_OK) {
        *state = 1;
    } else if (rc == TWOHOP_ERR_MISMATCH || rc == TWOHOP_ERR_TIMEOUT || rc == TWOHOP_ERR_HOST) {
        *state = -2;
        char label[MPI_MAX_OBJECT_NAME + 32];
        opal_output(0, "coll:twohop: %s: set-up failed: %s",
                    twohop_comm_label(m, label, sizeof(label)), m->setup_failure);
    } else {
        *state = -1;
        if (resource && !__atomic_exchange_n(&resource_warned, 1, __ATOMIC_RELAXED)) {
            opal_output(0, "coll:twohop: comm %s: twohop does not serve this communicator: %s "
                        "(its allreduce falls back to the previous component; further notices "
                        "at coll_twohop_verbose 1)", m->comm->c_name, m->setup_failure);
        } else {
            char label[MPI_MAX_OBJECT_NAME + 32];
            opal_output_verbose(1, twohop_adapter_output, "coll:twohop: %s: set-up failed: %s",
                                twohop_comm_label(m, label, sizeof(label)), m->setup_failure);
        }
    }
    return rc;
}

/* -------------------------------------------------------- module, query ---- */

static int twohop_module_enable(mca_coll_base_module_t *module, ompi_communicator_t *comm) {
    twohop_module *m = (twohop_module *)module;
    m->comm = comm;
    m->prev_allreduce = comm->c_coll->coll_allreduce;
    m->prev_allreduce_module = comm->c_coll->coll_allreduce_module;
    if (m->prev_allreduce == NULL || m->prev_allreduce_module == NULL) {
        opal_output_verbose(1, twohop_adapter_output,
                            "coll:twohop: comm %s: no allreduce selected below twohop to fall "
                            "back to; twohop disabled on it", comm->c_name);
        return OMPI_ERROR;
    }
    OBJ_RETAIN(m->prev_allreduce_module);
    /* Non-blocking and persistent forms only where the module below provides them too (the
     * calls twohop does not serve go there); the function table is copied after enable. */
    m->prev_iallreduce = comm->c_coll->coll_iallreduce;
    m->prev_iallreduce_module = comm->c_coll->coll_iallreduce_module;
    if (m->prev_iallreduce && m->prev_iallreduce_module) {
        OBJ_RETAIN(m->prev_iallreduce_module);
    } else {
        m->prev_iallreduce = NULL;
        m->prev_iallreduce_module = NULL;
        m->super.coll_iallreduce = NULL;
    }
    m->prev_allreduce_init = comm->c_coll->coll_allreduce_init;
    m->prev_allreduce_init_module = comm->c_coll->coll_allreduce_init_module;
    if (m->prev_allreduce_init && m->prev_allreduce_init_module) {
        OBJ_RETAIN(m->prev_allreduce_init_module);
    } else {
        m->prev_allreduce_init = NULL;
        m->prev_allreduce_init_module = NULL;
        m->super.coll_allreduce_init = NULL;
    }
    TWOHOP_HANDOFF_RELEASE(m);
    return OMPI_SUCCESS;
}

/* twohop's priority on single-rank communicators: above coll/self's default 75. */
enum { kSelfPriority = 90 };

mca_coll_base_module_t *twohop_comm_query(ompi_communicator_t *comm, int *priority) {
    *priority = twohop_adapter_params.priority;
    if (twohop_adapter_params.priority < 0) return NULL;
    if (OMPI_COMM_IS_INTER(comm)) {
        opal_output_verbose(2, twohop_adapter_output,
                            "coll:twohop: comm %s: intercommunicator, not selected", comm->c_name);
        return NULL;
    }
    twohop_module *m = OBJ_NEW(twohop_module);
    if (m == NULL) return NULL;
    m->super.coll_module_enable = twohop_module_enable;
    m->super.coll_allreduce = twohop_allreduce;
    if (ompi_comm_size(comm) < 2) {
        /* Single-rank communicators: coll/self (priority 75) copies with a host memcpy, which
         * crashes on device buffers; twohop takes the allreduce forms over there with a copy
         * that respects memory kinds (self_copy), and leaves every other collective to it. */
        *priority = kSelfPriority;
        m->super.coll_allreduce = twohop_allreduce_self;
    }
    m->super.coll_iallreduce = twohop_iallreduce;
    m->super.coll_allreduce_init = twohop_allreduce_init;
    return &m->super;
}

