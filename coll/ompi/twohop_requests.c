/*
 * MPI_Iallreduce and persistent allreduce (MPI_Allreduce_init, MPIX_Allreduce_init) through
 * twohop: Open MPI requests over the core's engine (coll/schedule/engine.h).
 *
 * A request is one of
 *   served    twohop runs the call: twohop_comm_iallreduce queues a job on the communicator;
 *             the engine completes the request through done_served() from whichever thread
 *             advances it (the starting call, the progress callback, a later call).
 *   staged    twohop hands the call to the previous module, but a buffer is memory the host
 *             must not touch (device memory): the previous module's request runs on host
 *             copies; the progress callback sees it complete, copies the result back and
 *             completes this request. A device pointer never reaches a host-only module.
 *   empty     count 0 or an empty signature: complete at once (persistent: at every start).
 *   self      a single-rank communicator: the input copied to the output (self_copy), then
 *             complete at once.
 *   pending   twohop would serve the call, but the communicator's set-up is not done: it
 *             runs in a fiber (coll/setup/fiber.h) that this call starts or finds running, so
 *             the start returns without waiting for the other ranks (MPI-4.1 6.12: starting
 *             a non-blocking or persistent collective is local). MPI progress resumes the
 *             fiber; when the set-up has ended the calls started meanwhile are routed again
 *             and started in the order they were started (a persistent request created
 *             meanwhile is routed at its first start): served (they become `served`), or --
 *             when the ranks agreed on a fallback -- `failed`: an error, since handing a
 *             started call to the previous module late could reorder it against that
 *             module's other non-blocking collectives on the communicator. A blocking call on
 *             the communicator first drives the set-up to its end and starts those calls.
 * Host-memory calls twohop hands back return the previous module's own request.
 *
 * The route (serve or hand back) depends only on the op, the type signature and the set-up
 * the ranks agreed (route_call), never on memory kinds or layouts. A persistent request
 * decides it and runs the set-up once, at initialisation; every start prepares the buffer
 * views again (cheap) and queues a job.
 *
 * Progress: one opal_progress callback (registered on first use, removed at component close)
 * advances the engine and polls the staged requests. It never waits and makes no MPI call
 * but completing requests, so it is safe at every thread level; a communicator being driven
 * by another thread is skipped, never waited for.
 *
 * Lifetimes: a request retains its communicator, datatype and op until it is freed, so the
 * communicator's twohop state outlives every call in flight on it.
 */
#include "twohop_adapter.h"

#include <stdlib.h>
#include <string.h>

#include "ompi/errhandler/errhandler.h"
#include "ompi/mca/coll/base/coll_base_util.h"
#include "opal/class/opal_free_list.h"
#include "opal/runtime/opal_progress.h"
#include "opal/util/output.h"

unsigned long long twohop_nonblocking_calls;
unsigned long long twohop_persistent_starts;

typedef enum { REQ_SERVED, REQ_STAGED, REQ_EMPTY, REQ_SELF, REQ_PENDING, REQ_FAILED } req_kind;

/* Open MPI's MPI_Iallreduce / MPI_Allreduce_init (ompi_coll_base_retain_op) treat every
 * collective request as an ompi_coll_base_nbc_request_t and write into its fields: it must be
 * the base. */
typedef struct twohop_request {
    ompi_coll_base_nbc_request_t nbc;
    twohop_module *m;
    req_kind kind;
    bool persistent;
    const void *sbuf;
    void *rbuf;
    int count;
    ompi_datatype_t *dtype;
    ompi_op_t *op;
    call_args a;              /* served: this start's buffer views */
    bool kinds_fixed;         /* served: a.kin/a.kout were taken when the request was made
                                 (MPI binds a request's buffers to it: a persistent request's
                                 starts do not ask the driver again); else at each start */
    bool views_fixed;         /* served persistent: a.in/a.out from the first start hold for
                                 every start (host memory read in place: plain pointers, no
                                 staging copy, no convertor state), so later starts skip
                                 prepare_buffers */
    ompi_request_t *inner;    /* staged: the previous module's request */
    staging fin, fout;        /* staged: host copies of the send / receive buffers */
    int kin, kout;            /* staged: memory kinds of the user's buffers */
    struct twohop_request *next; /* staged: in the list the progress callback polls;
                                    pending and started: in the module's list of started calls
                                    waiting for the set-up, in start order */
    int failed_err;              /* failed: the MPI error every start completes with */
} twohop_request;

static OBJ_CLASS_INSTANCE(twohop_request, ompi_coll_base_nbc_request_t, NULL, NULL);

/* Staged requests in flight, polled by the progress callback (guarded by staged_lock). */
static twohop_request *staged_head;
static opal_mutex_t staged_lock = OPAL_MUTEX_STATIC_INIT;
static int progress_registered;

/* Every twohop request comes from this free list (Open MPI's, as libnbc's requests do): a
 * request is constructed once and reused, so a non-blocking call allocates nothing here.
 * Initialised with the progress callback (ensure_progress), destructed at component close. */
static opal_free_list_t request_pool;

/* ------------------------------------------------------------------ completion ---- */

static void unlink_pending(twohop_request *r);
static void append_pending(twohop_module *m, twohop_request *r);
static void route_pending(twohop_request *r, int state);

static void release_request(twohop_request *r) {
    if (r->kind == REQ_PENDING) unlink_pending(r); /* a persistent request freed unstarted */
    if (r->inner != NULL && r->inner != MPI_REQUEST_NULL) (void)ompi_request_free(&r->inner);
    if (r->fin.host) free(r->fin.host);
    if (r->fout.host) free(r->fout.host);
    r->fin.host = r->fout.host = NULL;
    /* As retained (init_request): predefined objects never. */
    if (!ompi_datatype_is_predefined(r->dtype)) OBJ_RELEASE(r->dtype);
    if (!ompi_op_is_intrinsic(r->op)) OBJ_RELEASE(r->op);
    /* Through a local: OBJ_RELEASE evaluates its argument again after the destructors ran,
     * and the communicator's destructor may free r->m. */
    ompi_communicator_t *comm = r->m->comm;
    OBJ_RELEASE(comm);
    OMPI_REQUEST_FINI(&r->nbc.super);
    opal_free_list_return(&request_pool, &r->nbc.super.super);
}

/* Marks the request complete with MPI error `err`. Never releases it (nor its communicator):
 * this may run inside the engine, whose locks a communicator's destruction would take. */
static void complete(twohop_request *r, int err) {
    r->nbc.super.req_status.MPI_ERROR = err;
    ompi_request_complete(&r->nbc.super, true);
}

/* The engine's done function for served calls (twohop_done_fn). */
static void done_served(void *ctx, int status, const char *why) {
    twohop_request *r = (twohop_request *)ctx;
    status = finish_buffers(&r->a, status);
    if (status != TWOHOP_OK) {
        report_failure(r->m, why ? why : "staging a device buffer back failed");
    }
    complete(r, to_mpi_error(status));
}

/* Polls the staged requests; completes those whose inner request completed. */
static int poll_staged(void) {
    if (__atomic_load_n(&staged_head, __ATOMIC_ACQUIRE) == NULL) return 0;
    if (opal_mutex_trylock(&staged_lock) != 0) return 0;
    int completed = 0;
    twohop_request **pp = &staged_head;
    twohop_request *done_list = NULL;
    while (*pp) {
        twohop_request *r = *pp;
        if (!REQUEST_COMPLETE(r->inner)) {
            pp = &r->next;
            continue;
        }
        *pp = r->next;
        r->next = done_list;
        done_list = r;
    }
    opal_mutex_unlock(&staged_lock);
    while (done_list) {
        twohop_request *r = done_list;
        done_list = r->next;
        int err = r->inner->req_status.MPI_ERROR;
        if (r->persistent) {
            r->inner->req_state = OMPI_REQUEST_INACTIVE; /* as MPI_Wait leaves it */
        } else {
            (void)ompi_request_free(&r->inner);
        }
        if (err == MPI_SUCCESS && stage_out(&r->fout, r->kout) != TWOHOP_OK) {
            opal_output(0, "coll:twohop: comm %s: copying an allreduce result back into a "
                        "device buffer failed", r->m->comm->c_name);
            err = MPI_ERR_OTHER;
        }
        complete(r, err);
        ++completed;
    }
    return completed;
}

static int poll_deferred(void);

static int progress_cb(void) { return twohop_core_progress() + poll_staged() + poll_deferred(); }

/* The progress callback and the request pool, once per process. False when the pool could
 * not be set up. */
static bool ensure_progress(void) {
    if (__atomic_load_n(&progress_registered, __ATOMIC_ACQUIRE)) return true;
    bool ok = true;
    OPAL_THREAD_LOCK(&staged_lock);
    if (!progress_registered) {
        OBJ_CONSTRUCT(&request_pool, opal_free_list_t);
        /* 8 at first, 8 more when empty, no limit (libnbc's choice) */
        ok = opal_free_list_init(&request_pool, sizeof(twohop_request), 8,
                                 OBJ_CLASS(twohop_request), 0, 0, 8, -1, 8, NULL, 0, NULL, NULL,
                                 NULL) == OPAL_SUCCESS;
        if (ok) {
            opal_progress_register(progress_cb);
            __atomic_store_n(&progress_registered, 1, __ATOMIC_RELEASE);
        } else {
            OBJ_DESTRUCT(&request_pool);
        }
    }
    OPAL_THREAD_UNLOCK(&staged_lock);
    return ok;
}

void twohop_requests_finalize(void) {
    if (progress_registered) {
        opal_progress_unregister(progress_cb);
        OBJ_DESTRUCT(&request_pool);
        progress_registered = 0;
    }
}

/* ------------------------------------------------------------ request methods ---- */

/* MPI_Request_free, or the end of MPI_Wait/MPI_Test. Freeing an active collective request is
 * erroneous (MPI 4.1, 6.12): refused, as libnbc does, since the engine still points into it. */
static int req_free(ompi_request_t **rptr) {
    twohop_request *r = (twohop_request *)*rptr;
    if (!REQUEST_COMPLETE(&r->nbc.super)) return MPI_ERR_REQUEST;
    *rptr = MPI_REQUEST_NULL;
    release_request(r);
    return OMPI_SUCCESS;
}

static int req_cancel(ompi_request_t *req, int complete_flag) {
    (void)req;
    (void)complete_flag;
    return MPI_ERR_REQUEST; /* collectives cannot be cancelled (erroneous), as libnbc says */
}

/* The user's buffers into a staged request's host copies (0 or a twohop_status). */
static int copy_in_staged(twohop_request *r) {
    int rc = stage_copy_in(&r->fout, r->kout);
    if (rc == TWOHOP_OK && r->fin.host) rc = stage_copy_in(&r->fin, r->kin);
    return rc;
}

/* A staged request whose inner request runs: active, and polled by the progress callback. */
static void watch_staged(twohop_request *r) {
    r->nbc.super.req_state = OMPI_REQUEST_ACTIVE;
    opal_mutex_lock(&staged_lock);
    r->next = staged_head;
    __atomic_store_n(&staged_head, r, __ATOMIC_RELEASE);
    opal_mutex_unlock(&staged_lock);
}

/* Starts one call of the request (non-blocking: at creation; persistent: at each start). */
static int start_one(twohop_request *r) {
    r->nbc.super.req_status.MPI_ERROR = MPI_SUCCESS;
    r->nbc.super.req_status._cancelled = 0;
    if (r->kind == REQ_EMPTY || r->kind == REQ_SELF) {
        r->nbc.super.req_state = OMPI_REQUEST_ACTIVE;
        complete(r, r->kind == REQ_SELF ? self_copy(r->sbuf, r->rbuf, r->count, r->dtype)
                                        : MPI_SUCCESS);
        return MPI_SUCCESS;
    }
    if (r->kind == REQ_PENDING) { /* a persistent request created before the set-up ended */
        twohop_module *m = r->m;
        r->nbc.super.req_state = OMPI_REQUEST_ACTIVE;
        opal_mutex_lock(&m->setup_lock);
        const bool waits = m->setup_state == 2;
        if (waits) {
            append_pending(m, r); /* started in start order with the others that wait */
        } else {
            route_pending(r, m->setup_state); /* the set-up ended: served or failed now */
        }
        opal_mutex_unlock(&m->setup_lock);
        if (waits) return MPI_SUCCESS; /* started by flush_pending() */
    }
    if (r->kind == REQ_FAILED) {
        r->nbc.super.req_state = OMPI_REQUEST_ACTIVE;
        complete(r, r->failed_err);
        return MPI_SUCCESS;
    }
    if (r->kind == REQ_STAGED) {
        if (copy_in_staged(r) != TWOHOP_OK) return MPI_ERR_OTHER;
        int err = r->inner->req_start(1, &r->inner);
        if (err != MPI_SUCCESS) return err;
        watch_staged(r);
        return MPI_SUCCESS;
    }
    const bool in_place = r->sbuf == MPI_IN_PLACE;
    if (!r->kinds_fixed) { /* a request routed at its first start (made before the set-up) */
        r->a.kout = twohop_memory_kind(r->rbuf);
        r->a.kin = in_place ? r->a.kout : twohop_memory_kind(r->sbuf);
        r->kinds_fixed = r->persistent; /* its buffers are bound to it, as at creation */
    }
    int rc = TWOHOP_OK;
    if (!r->views_fixed) {
        rc = prepare_buffers(&r->a, r->sbuf, r->rbuf, r->count, r->dtype);
        r->views_fixed = r->persistent && rc == TWOHOP_OK && r->kinds_fixed &&
                         r->a.kin == TWOHOP_KIND_HOST && r->a.kout == TWOHOP_KIND_HOST &&
                         r->a.in.direct != NULL && r->a.out.direct != NULL &&
                         r->a.sin.host == NULL && r->a.sout.host == NULL;
    }
    log_call(r->m, r->persistent ? "persistent allreduce start" : "iallreduce", &r->a, in_place);
    __atomic_add_fetch(r->persistent ? &twohop_persistent_starts : &twohop_nonblocking_calls, 1,
                       __ATOMIC_RELAXED);
    twohop_count_half(&r->a.red);
    r->nbc.super.req_state = OMPI_REQUEST_ACTIVE;
    if (rc != TWOHOP_OK) {
        /* This rank cannot take part: the others must not wait for it. */
        twohop_comm_abort(r->m->core, rc, "staging a device buffer through host memory failed");
        report_failure(r->m, "staging a device buffer through host memory failed");
        (void)finish_buffers(&r->a, rc);
        complete(r, to_mpi_error(rc));
        return MPI_SUCCESS;
    }
    rc = twohop_comm_iallreduce(r->m->core, &r->a.in, &r->a.out, r->a.n, &r->a.red,
                                done_served, r);
    if (rc != TWOHOP_OK) {
        (void)finish_buffers(&r->a, rc);
        complete(r, to_mpi_error(rc));
    }
    return MPI_SUCCESS;
}

/* req_start of persistent requests (MPI_Start, MPI_Startall). */
static int req_start(size_t count, ompi_request_t **requests) {
    for (size_t i = 0; i < count; ++i) {
        twohop_request *r = (twohop_request *)requests[i];
        /* Starting an active request is erroneous (MPI-4.1 3.9); Open MPI 4.1.4's MPI_Start
         * does not check it (later 4.1 releases and MPI_Startall do): refused here before the
         * call in flight is touched, as MPI_Request_free and MPI_Cancel of it are. */
        if (r->nbc.super.req_state == OMPI_REQUEST_ACTIVE) return MPI_ERR_REQUEST;
        r->nbc.super.req_complete = REQUEST_PENDING;
        int err = start_one(r);
        if (err != MPI_SUCCESS) {
            complete(r, err);
            return err;
        }
    }
    return MPI_SUCCESS;
}

/* ------------------------------------------------------------------ creation ---- */

/* A request from the pool, not yet initialised (init_request); NULL when none could be had.
 * One not used goes back with opal_free_list_return. */
static twohop_request *take_request(void) {
    if (!ensure_progress()) return NULL;
    return (twohop_request *)opal_free_list_get(&request_pool);
}

/* Initialises a request from take_request for the call; r->a is left as it is (the caller
 * zeroed it, or routed the call into it). */
static void init_request(twohop_request *r, twohop_module *m, req_kind kind, bool persistent,
                         const void *sbuf, void *rbuf, int count, ompi_datatype_t *dtype,
                         ompi_op_t *op) {
    OMPI_REQUEST_INIT(&r->nbc.super, persistent);
#if OMPI_MAJOR_VERSION >= 5
    r->nbc.super.req_type = OMPI_REQUEST_COLL;
#else
    /* Open MPI 4.1 raises the error of a completed request on its communicator's error handler
     * only for requests of this type (ompi_errhandler_request_invoke; collective requests go
     * to MPI_COMM_WORLD's, which 5.0 corrected): MPI_ERRORS_RETURN on the communicator must
     * return a failed call's error from MPI_Wait, not abort the job. Elsewhere 4.1 treats the
     * two types alike (MPI_Start, MPI_Startall: req_start). */
    r->nbc.super.req_type = OMPI_REQUEST_PML;
#endif
    r->nbc.super.req_mpi_object.comm = m->comm;
    r->nbc.super.req_free = req_free;
    r->nbc.super.req_cancel = req_cancel;
    r->nbc.super.req_start = persistent ? req_start : NULL;
    r->m = m;
    r->kind = kind;
    r->persistent = persistent;
    r->sbuf = sbuf;
    r->rbuf = rbuf;
    r->count = count;
    r->dtype = dtype;
    r->op = op;
    r->inner = NULL;
    memset(&r->fin, 0, sizeof(r->fin));
    memset(&r->fout, 0, sizeof(r->fout));
    r->next = NULL;
    r->failed_err = MPI_SUCCESS;
    r->kinds_fixed = false;
    r->views_fixed = false;
    OBJ_RETAIN(m->comm);
    /* Predefined datatypes and ops live as long as the library (Open MPI's own retain of a
     * collective's objects skips them too, ompi_coll_base_retain_op): under
     * MPI_THREAD_MULTIPLE their reference counts are atomics every thread's calls would share. */
    if (!ompi_datatype_is_predefined(dtype)) OBJ_RETAIN(dtype);
    if (!ompi_op_is_intrinsic(op)) OBJ_RETAIN(op);
}

/* A request of the given kind with no call arguments (r->a zeroed); NULL when none could be
 * had. */
static twohop_request *new_request(twohop_module *m, req_kind kind, bool persistent,
                                   const void *sbuf, void *rbuf, int count,
                                   ompi_datatype_t *dtype, ompi_op_t *op) {
    twohop_request *r = take_request();
    if (r == NULL) return NULL;
    memset(&r->a, 0, sizeof(r->a));
    init_request(r, m, kind, persistent, sbuf, rbuf, count, dtype, op);
    return r;
}

/*
 * A call handed to the previous module whose buffers the host must not touch: host copies
 * (allocated here; filled at each start) and the previous module's request on them.
 */
static int staged_request(twohop_module *m, bool persistent, const void *sbuf, void *rbuf,
                          int count, ompi_datatype_t *dtype, ompi_op_t *op, int kin, int kout,
                          struct ompi_info_t *info, ompi_request_t **request) {
    twohop_request *r = new_request(m, REQ_STAGED, persistent, sbuf, rbuf, count, dtype, op);
    if (r == NULL) return OMPI_ERR_OUT_OF_RESOURCE;
    const bool in_place = sbuf == MPI_IN_PLACE;
    r->kin = kin;
    r->kout = kout;
    int rc = stage_alloc(&r->fout, (const char *)rbuf, dtype, (size_t)count);
    if (rc == TWOHOP_OK && !in_place) {
        rc = stage_alloc(&r->fin, (const char *)sbuf, dtype, (size_t)count);
    }
    if (rc != TWOHOP_OK) {
        release_request(r);
        opal_output(0, "coll:twohop: comm %s: staging a device buffer through host memory "
                    "failed", m->comm->c_name);
        return OMPI_ERR_OUT_OF_RESOURCE;
    }
    const void *s = in_place ? MPI_IN_PLACE : staged_buf(&r->fin);
    void *d = staged_buf(&r->fout);
    int err;
    if (persistent) {
        err = m->prev_allreduce_init(s, d, count, dtype, op, m->comm, info, &r->inner,
                                     m->prev_allreduce_init_module);
        if (err == MPI_SUCCESS) {
            *request = &r->nbc.super;
            return MPI_SUCCESS;
        }
    } else {
        /* Copy in first: the previous module may start reading at once. */
        if (copy_in_staged(r) != TWOHOP_OK) {
            release_request(r);
            return MPI_ERR_OTHER;
        }
        err = m->prev_iallreduce(s, d, count, dtype, op, m->comm, &r->inner,
                                 m->prev_iallreduce_module);
        if (err == MPI_SUCCESS) {
            watch_staged(r);
            *request = &r->nbc.super;
            return MPI_SUCCESS;
        }
    }
    r->inner = NULL;
    release_request(r);
    return err;
}

/* ------------------------------------------------------ deferred set-up ---- */

/* Communicators whose set-up runs in a fiber, resumed by the progress callback. */
static twohop_module *deferred_head;
static opal_mutex_t deferred_lock = OPAL_MUTEX_STATIC_INIT;

static void setup_body(void *arg) {
    twohop_module *m = (twohop_module *)arg;
    (void)twohop_module_setup(m, &m->deferred_state);
}

/* Takes r out of its module's pending list (setup_lock taken here). */
static void unlink_pending(twohop_request *r) {
    twohop_module *m = r->m;
    opal_mutex_lock(&m->setup_lock);
    twohop_request **pp = &m->pending_head, *prev = NULL;
    while (*pp && *pp != r) {
        prev = *pp;
        pp = &(*pp)->next;
    }
    if (*pp == r) {
        *pp = r->next;
        if (m->pending_tail == r) m->pending_tail = prev;
        r->next = NULL;
    }
    opal_mutex_unlock(&m->setup_lock);
}

/* A pending request routed from the set-up's outcome `state` (setup_lock held): served, or
 * failed (an agreed fallback: too late to hand a started call back). */
static void route_pending(twohop_request *r, int state) {
    twohop_module *m = r->m;
    call_args a;
    memset(&a, 0, sizeof(a));
    const char *why = NULL;
    call_route route = route_signature(r->count, r->dtype, r->op, &a, &why);
    if (route == CALL_SERVE) route = route_setup(m, r->count, &a, &why, state);
    if (route == CALL_SERVE) {
        r->kind = REQ_SERVED;
        r->a = a;
        if (r->a.red.op == TWOHOP_OP_USER) r->a.red.user_ctx = &r->a.uctx;
        return;
    }
    r->kind = REQ_FAILED;
    r->failed_err = MPI_ERR_OTHER;
    if (route != CALL_BROKEN) { /* broken: reported once in set-up */
        char msg[512];
        snprintf(msg, sizeof(msg), "the communicator's set-up, started by a non-blocking or "
                 "persistent allreduce, ended in a fallback (%s); a call started before cannot "
                 "be handed to the previous component any more",
                 why ? why : "set-up failed");
        report_failure(m, msg);
    }
}

/* A started call that waits for the set-up, behind the others (setup_lock held). */
static void append_pending(twohop_module *m, twohop_request *r) {
    r->next = NULL;
    if (m->pending_tail) m->pending_tail->next = r;
    else m->pending_head = r;
    m->pending_tail = r;
}

/* After the fiber ended (setup_lock held): the started calls that waited, routed and started
 * in the order they were started; then the outcome published (setup_state). A persistent
 * request not started yet is routed at its first MPI_Start. */
static void flush_pending(twohop_module *m) {
    twohop_request *r = m->pending_head;
    m->pending_head = m->pending_tail = NULL;
    while (r) {
        twohop_request *next = r->next;
        r->next = NULL;
        route_pending(r, m->deferred_state);
        (void)start_one(r);
        r = next;
    }
    /* Before the outcome: a call that sees the fallback also sees the window (route_call). */
    if (m->deferred_state == -1) __atomic_store_n(&m->fallback_window, 1, __ATOMIC_RELAXED);
    /* Published last: a blocking call that sees it finds every waiting call queued. */
    __atomic_store_n(&m->setup_state, m->deferred_state, __ATOMIC_RELEASE);
}

/* Resumes m's set-up once (or, with `wait`, until it ends); when it has ended, starts the
 * calls that waited. Returns 0 while it runs (or another thread resumes it), 1 when it had
 * ended before, 2 when it ended in this call: the caller then releases the communicator
 * reference the fiber held, after dropping every twohop lock (the release may destroy m). */
static int advance_deferred(twohop_module *m, bool wait) {
    for (;;) {
        if (opal_mutex_trylock(&m->setup_lock) == 0) {
            int over = m->setup_fiber == NULL ? 1 : 0;
            if (!over && twohop_fiber_resume(m->setup_fiber)) {
                twohop_fiber_free(m->setup_fiber);
                m->setup_fiber = NULL;
                flush_pending(m);
                over = 2;
            }
            opal_mutex_unlock(&m->setup_lock);
            if (over || !wait) return over;
        } else if (!wait) {
            return 0; /* this thread is inside the fiber, or another one resumes it */
        }
        opal_progress();
    }
}

static int poll_deferred(void) {
    if (__atomic_load_n(&deferred_head, __ATOMIC_ACQUIRE) == NULL) return 0;
    if (opal_mutex_trylock(&deferred_lock) != 0) return 0;
    twohop_module *release = NULL; /* fibers that ended here: their references, released
                                      after the lock (a release may destroy the module) */
    int n = 0;
    twohop_module **pp = &deferred_head;
    while (*pp) {
        twohop_module *m = *pp;
        const int over = advance_deferred(m, false);
        if (!over) {
            pp = &m->next_deferred;
            continue;
        }
        *pp = m->next_deferred;
        m->next_deferred = NULL;
        if (over == 2) {
            m->next_deferred = release;
            release = m;
        } else {
            ++n;
        }
    }
    opal_mutex_unlock(&deferred_lock);
    for (; release; ++n) {
        twohop_module *m = release;
        release = m->next_deferred;
        m->next_deferred = NULL;
        /* The fiber's reference. It may destroy m: through a local, since OBJ_RELEASE
         * evaluates its argument again after the destructors ran (and writes NULL to it). */
        ompi_communicator_t *comm = m->comm;
        OBJ_RELEASE(comm);
    }
    return n;
}

void twohop_deferred_setup_finish(twohop_module *m) {
    /* The caller holds the communicator: the release cannot destroy m here. The progress
     * callback takes m off the list. */
    if (advance_deferred(m, true) == 2) {
        ompi_communicator_t *comm = m->comm; /* a local: see poll_deferred */
        OBJ_RELEASE(comm);
    }
}

void twohop_deferred_setup_forget(twohop_module *m) {
    /* A fiber holds a reference on its communicator: m is destroyed only after it ended. */
    opal_mutex_lock(&deferred_lock);
    twohop_module **pp = &deferred_head;
    while (*pp && *pp != m) pp = &(*pp)->next_deferred;
    if (*pp == m) *pp = m->next_deferred;
    opal_mutex_unlock(&deferred_lock);
}

/* A call twohop serves once the set-up ends: starts the set-up in a fiber if no call did yet,
 * queues the call behind the others that wait, and gives the set-up a first turn. */
static int create(const void *sbuf, void *rbuf, int count, ompi_datatype_t *dtype,
                  ompi_op_t *op, ompi_communicator_t *comm, struct ompi_info_t *info,
                  ompi_request_t **request, twohop_module *m, bool persistent);

static int deferred_request(twohop_module *m, bool persistent, const void *sbuf, void *rbuf,
                            int count, ompi_datatype_t *dtype, ompi_op_t *op,
                            struct ompi_info_t *info, ompi_request_t **request) {
    opal_mutex_lock(&m->setup_lock);
    if (m->setup_state == 0) {
        m->setup_fiber = twohop_fiber_new(setup_body, m);
        if (m->setup_fiber == NULL) { /* no stack: the set-up runs here, blocking */
            int state = 0;
            (void)twohop_module_setup(m, &state);
            /* As if deferred: other ranks' calls may be waiting for their set-up's end. */
            if (state == -1) __atomic_store_n(&m->fallback_window, 1, __ATOMIC_RELAXED);
            __atomic_store_n(&m->setup_state, state, __ATOMIC_RELEASE);
        } else {
            m->deferred_state = 0;
            m->setup_state = 2;
            /* The fiber keeps the communicator (and m) alive until it ends: a request of its
             * own may hold the last reference, and must not destroy m inside the fiber. */
            OBJ_RETAIN(m->comm);
            opal_mutex_lock(&deferred_lock);
            m->next_deferred = deferred_head;
            __atomic_store_n(&deferred_head, m, __ATOMIC_RELEASE);
            opal_mutex_unlock(&deferred_lock);
        }
    }
    if (m->setup_state != 2) { /* set up now (blocking above, or by another thread): route */
        opal_mutex_unlock(&m->setup_lock);
        return create(sbuf, rbuf, count, dtype, op, m->comm, info, request, m, persistent);
    }
    twohop_request *r = new_request(m, REQ_PENDING, persistent, sbuf, rbuf, count, dtype, op);
    if (r != NULL && !persistent) append_pending(m, r); /* started now: waits in start order */
    opal_mutex_unlock(&m->setup_lock);
    if (r == NULL) return OMPI_ERR_OUT_OF_RESOURCE;
    r->nbc.super.req_state = persistent ? OMPI_REQUEST_INACTIVE : OMPI_REQUEST_ACTIVE;
    *request = &r->nbc.super;
    /* A first turn: posts this rank's first messages. (The caller and r hold m->comm.) */
    if (advance_deferred(m, false) == 2) {
        ompi_communicator_t *comm = m->comm; /* a local: see poll_deferred */
        OBJ_RELEASE(comm);
    }
    return MPI_SUCCESS;
}

/*
 * The shape of the non-blocking allreduces Open MPI's communicator construction (context id
 * and activation agreement, also of MPI_Comm_idup) runs on the parent communicator: a type
 * signature of at most 4 MPI_INT, MIN or MAX. It issues them from its progress engine, at
 * moments that differ between ranks -- possibly inside a twohop call on the same
 * communicator -- so they must never enter twohop's call order: always the previous module
 * (whose non-blocking calls have a tag space of their own). Decided from the op and the type
 * signature only.
 */
static bool looks_internal(int count, ompi_datatype_t *dtype, ompi_op_t *op) {
    if (op != &ompi_mpi_op_max.op && op != &ompi_mpi_op_min.op) return false;
    uint64_t n = 0;
    return signature_base(dtype, count, &n) == &ompi_mpi_int.dt && n > 0 && n <= 4;
}

/* The shared front of both forms: route, then the request of the right kind. */
static int create(const void *sbuf, void *rbuf, int count, ompi_datatype_t *dtype,
                  ompi_op_t *op, ompi_communicator_t *comm, struct ompi_info_t *info,
                  ompi_request_t **request, twohop_module *m, bool persistent) {
    if (ompi_comm_size(comm) < 2) { /* single-rank communicator: a copy */
        if (!persistent) {
            int err = self_copy(sbuf, rbuf, count, dtype);
            if (err == MPI_SUCCESS) *request = &ompi_request_empty;
            return err;
        }
        twohop_request *r = new_request(m, REQ_SELF, true, sbuf, rbuf, count, dtype, op);
        if (r == NULL) return OMPI_ERR_OUT_OF_RESOURCE;
        *request = &r->nbc.super;
        return MPI_SUCCESS;
    }
    const bool in_place = sbuf == MPI_IN_PLACE;
    const int kout = count > 0 ? twohop_memory_kind(rbuf) : TWOHOP_KIND_HOST;
    const int kin = in_place || count <= 0 ? kout : twohop_memory_kind(sbuf);
    /* The call is routed into the request's own arguments, as the blocking call routes into
     * its stack: route_call writes what a route reads (red, base, elems_per_item; a deferred
     * call's request is zeroed by new_request), prepare_buffers the views at the start -- no
     * zeroing of the 450-byte call_args per call (73 of the non-blocking call's instructions,
     * docs/perf.md); a request the route does not need goes back at once. Open MPI's own
     * calls (looks_internal) never touch the pool: they come from its progress engine, in any
     * thread, while a communicator is made. */
    const bool internal = looks_internal(count, dtype, op);
    twohop_request *r = NULL;
    const char *why;
    call_route route;
    if (internal) {
        why = "at most 4 MPI_INT, MIN or MAX (the shape of Open MPI's own communicator "
              "construction, issued from its progress engine)";
        route = CALL_FALLBACK;
    } else {
        r = take_request();
        if (r == NULL) return OMPI_ERR_OUT_OF_RESOURCE;
        r->a.sin.host = r->a.sout.host = NULL; /* no staging copy until prepare_buffers */
        route = route_call(m, count, dtype, op, &r->a, &why, true);
    }
    if (r != NULL && route != CALL_SERVE && route != CALL_FAILED &&
        (route != CALL_EMPTY || !persistent)) {
        opal_free_list_return(&request_pool, &r->nbc.super.super);
        r = NULL;
    }
    if (route == CALL_DEFER) {
        return deferred_request(m, persistent, sbuf, rbuf, count, dtype, op, info, request);
    }
    if (route == CALL_BROKEN) return MPI_ERR_OTHER; /* reported once in set-up */
    if (route == CALL_FALLBACK) {
        const bool staged = kin != TWOHOP_KIND_HOST || kout != TWOHOP_KIND_HOST;
        if (!internal) log_fallback(m, why, staged); /* internal: not the application's call */
        if (staged && count > 0) {
            return staged_request(m, persistent, sbuf, rbuf, count, dtype, op, kin, kout, info,
                                  request);
        }
        return persistent ? m->prev_allreduce_init(sbuf, rbuf, count, dtype, op, m->comm, info,
                                                   request, m->prev_allreduce_init_module)
                           : m->prev_iallreduce(sbuf, rbuf, count, dtype, op, m->comm, request,
                                                m->prev_iallreduce_module);
    }
    if (route == CALL_EMPTY && !persistent) {
        *request = &ompi_request_empty;
        return MPI_SUCCESS;
    }
    const req_kind kind = route == CALL_EMPTY    ? REQ_EMPTY
                          : route == CALL_FAILED ? REQ_FAILED
                                                 : REQ_SERVED;
    init_request(r, m, kind, persistent, sbuf, rbuf, count, dtype, op);
    if (route == CALL_FAILED) { /* completes with an error, as the calls that waited did */
        r->failed_err = MPI_ERR_OTHER;
        report_failure(m, why);
    } else if (route == CALL_SERVE) {
        /* Classification once; the views at the starts (prepare_buffers; a persistent request
         * on host memory read in place keeps its first start's: start_one). The
         * reduction's user context must point into the request, which outlives the call. */
        if (r->a.red.op == TWOHOP_OP_USER) r->a.red.user_ctx = &r->a.uctx;
        r->a.kin = kin;
        r->a.kout = kout;
        r->kinds_fixed = true;
    }
    *request = &r->nbc.super;
    if (persistent) {
        r->nbc.super.req_state = OMPI_REQUEST_INACTIVE;
        return MPI_SUCCESS;
    }
    return start_one(r);
}

int twohop_iallreduce(const void *sbuf, void *rbuf, int count, ompi_datatype_t *dtype,
                      ompi_op_t *op, ompi_communicator_t *comm, ompi_request_t **request,
                      mca_coll_base_module_t *module) {
    return create(sbuf, rbuf, count, dtype, op, comm, NULL, request, (twohop_module *)module,
                  false);
}

int twohop_allreduce_init(const void *sbuf, void *rbuf, int count, ompi_datatype_t *dtype,
                          ompi_op_t *op, ompi_communicator_t *comm, struct ompi_info_t *info,
                          ompi_request_t **request, mca_coll_base_module_t *module) {
    return create(sbuf, rbuf, count, dtype, op, comm, info, request, (twohop_module *)module,
                  true);
}
