/*
 * The Open MPI adapter's own interface between its files (coll/ompi/, the only files of twohop
 * that include Open MPI internal headers):
 *   twohop_component.c  the component: structure, MCA parameters, performance variables,
 *                       open / close / init_query
 *   twohop_module.c     the module: query, enable, host services, the communicator's set-up
 *   twohop_datatype.c   datatypes and ops -> the policy's facts; buffer views, staging, user
 *                       ops, half-precision registration, the single-rank copy
 *   twohop_allreduce.c  the blocking and stream-ordered calls: route, fallback, the core call
 *   twohop_requests.c   MPI_Iallreduce and persistent allreduce requests
 */
#ifndef TWOHOP_ADAPTER_H
#define TWOHOP_ADAPTER_H

#include "ompi_config.h"

#include <stdbool.h>
#include <stddef.h>
#include <pthread.h>
#include <stdint.h>

#include "mpi.h"
#include "ompi/communicator/communicator.h"
#include "ompi/datatype/ompi_datatype.h"
#include "ompi/mca/coll/coll.h"
#include "ompi/op/op.h"
#include "ompi/request/request.h"

#include "mpi_handles.h"
#include "policy.h"
#include "twohop_core.h"

/*
 * Open MPI 4.1 may finish a communicator's activation -- coll selection, so twohop_comm_query
 * and module_enable -- inside a request callback run by whichever thread drives progress, and
 * hands the communicator to the creating thread through its own (uninstrumented) request
 * completion. Under ThreadSanitizer that happens-before edge is made explicit on the module.
 */
#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#define TWOHOP_HANDOFF_RELEASE(p) __tsan_release(p)
#define TWOHOP_HANDOFF_ACQUIRE(p) __tsan_acquire(p)
#else
#define TWOHOP_HANDOFF_RELEASE(p) ((void)(p))
#define TWOHOP_HANDOFF_ACQUIRE(p) ((void)(p))
#endif

typedef struct twohop_module {
    mca_coll_base_module_t super;
    mca_coll_base_module_allreduce_fn_t prev_allreduce;
    mca_coll_base_module_t *prev_allreduce_module;
    ompi_communicator_t *comm;
    twohop_comm *core;
    int setup_state; /* 0 not yet, 1 ready, -1 failed: every call falls back, -2 broken:
                        the ranks could not agree (every call is an error), 2 running in
                        setup_fiber (started by a non-blocking or persistent call) */
    char setup_failure[256];
    const char *last_reason; /* last fallback reason printed (prints once per change) */
    int error_reported;      /* a failed call was reported at verbosity 0 */
    /* The previous module's non-blocking and persistent allreduce (NULL: not provided, and
     * twohop does not provide them either on this communicator). */
    mca_coll_base_module_iallreduce_fn_t prev_iallreduce;
    mca_coll_base_module_t *prev_iallreduce_module;
    mca_coll_base_module_allreduce_init_fn_t prev_allreduce_init;
    mca_coll_base_module_t *prev_allreduce_init_module;
    /* Set-up started by a non-blocking or persistent call (twohop_requests.c): the fiber that
     * runs it, the calls waiting for it in call order, and the list of such communicators
     * the progress callback resumes. setup_lock guards all four. */
    twohop_fiber *setup_fiber;
    int deferred_state; /* the fiber's outcome (as setup_state), published after the flush */
    /* 1 from the end of a set-up that a non-blocking or persistent call started and that ended
     * in a fallback, until the next blocking call that reads the set-up's outcome: the
     * non-blocking and persistent calls made meanwhile fail (route_call: CALL_FAILED), as the
     * calls that waited for the set-up do -- which calls waited depends on when each rank saw
     * the end, the window's end on the call sequence only (every rank's blocking call finishes
     * the set-up first). Set before setup_state is published, cleared by the calling thread. */
    int fallback_window;
    struct twohop_request *pending_head, *pending_tail;
    struct twohop_module *next_deferred;
    opal_mutex_t setup_lock;
} twohop_module;

/* A canonical-layout buffer in memory the host must reach through its kind's copies. */
typedef struct kind_view {
    int kind;
    char *base;
} kind_view;

/*
 * A host copy of the bytes `count` items of `dtype` occupy at buf (from the first to the last
 * byte of the type map, holes included), for memory the host must not touch directly: the
 * previous module or Open MPI's convertor then work on host memory only.
 */
typedef struct staging {
    char *user_lo;  /* first byte of the type map in user memory */
    char *host;     /* its host copy */
    size_t bytes;
    ptrdiff_t true_lb;
    ompi_datatype_t *dtype; /* the type map copied back (only its bytes: stage_out) */
    size_t count;
} staging;

/*
 * How one rank reaches the canonical bytes of one user buffer (twohop_userbuf). For
 * predefined ops the canonical layout is an array of the signature's predefined element type
 * at its C layout (base_extent bytes each, holding base_size signature bytes); for user ops it
 * is the packed signature (item = type size bytes).
 */
typedef struct layout_view {
    ompi_datatype_t *dtype; /* the user's datatype and count */
    size_t count;
    char *buf;
    ompi_datatype_t *base;  /* canonical element type, or NULL: canonical = packed */
    size_t base_size, base_extent;
} layout_view;

typedef struct user_op_ctx {
    ompi_op_t *op;
    ompi_datatype_t *dtype;
    bool packed; /* the datatype's layout is its packed signature */
    size_t size; /* type size: bytes of one item in the canonical (packed) layout */
    ptrdiff_t extent, true_lb, true_extent;
} user_op_ctx;

/*
 * What one call needs about its buffers, datatype and op on this rank: on the stack for a
 * blocking call, inside the request for a non-blocking or persistent one (the core keeps
 * pointers into it -- in/out ctx, red.user_ctx -- until the call ends).
 */
typedef struct call_args {
    twohop_reduction red;
    user_op_ctx uctx;
    ompi_datatype_t *base; /* canonical element type (NULL: user op, packed items) */
    size_t base_size, base_extent, elems_per_item;
    int kin, kout;         /* memory kinds of the user's buffers (set by the caller) */
    uint64_t n;            /* canonical items */
    twohop_userbuf in, out;
    layout_view vin, vout;
    kind_view kvin, kvout;
    staging sin, sout;
} call_args;

/* call_route (CALL_EMPTY, CALL_SERVE, CALL_FALLBACK, CALL_BROKEN, CALL_DEFER, CALL_FAILED) and
 * the rules behind it are the front ends' shared policy (front/policy.h). CALL_DEFER here:
 * twohop would serve the call once the communicator's set-up, running in a fiber (or not
 * started and allowed to start there), is done. */

/* twohop_component.c */
extern struct twohop_params twohop_adapter_params;
extern int twohop_adapter_output;
extern unsigned long long twohop_served_calls, twohop_fallback_calls;
/* MPI_THREAD_MULTIPLE was granted, as told at init_query (recorded then: Open MPI 4.1's
 * MPI_T_init_thread() later overwrites the process's thread level with the level asked for
 * MPI_T); the thread that initialised MPI. */
extern bool twohop_mpi_threads;
extern pthread_t twohop_mpi_init_thread;

/* twohop_module.c */
/* comm_query: a twohop module for comm (NULL: not selected), its priority in *priority. */
mca_coll_base_module_t *twohop_comm_query(ompi_communicator_t *comm, int *priority);
/* Calls of Open MPI's progress from a foreign thread below MPI_THREAD_MULTIPLE, refused (pvar
 * coll_twohop_foreign_thread_progress: must stay 0). */
extern unsigned long long twohop_foreign_progress_calls;
/* "comm NAME (twohop id N)" into buf (len bytes), for messages; returns buf. */
const char *twohop_comm_label(const twohop_module *m, char *buf, size_t len);
/* The communicator's set-up (steps of comm_setup.cpp), blocking unless run in a fiber; sets
 * *state to 1, -1 or -2 (m->setup_state, or where a deferred set-up keeps it until the calls
 * that waited are started) and reports failures. Returns a twohop_status. */
int twohop_module_setup(twohop_module *m, int *state);

/* twohop_allreduce.c */
/* The module's allreduce (served, or handed to the previous module) and its single-rank form
 * (a copy that respects memory kinds). MPI error codes. */
int twohop_allreduce(const void *sbuf, void *rbuf, int count, ompi_datatype_t *dtype,
                     ompi_op_t *op, ompi_communicator_t *comm, mca_coll_base_module_t *module);
int twohop_allreduce_self(const void *sbuf, void *rbuf, int count, ompi_datatype_t *dtype,
                          ompi_op_t *op, ompi_communicator_t *comm,
                          mca_coll_base_module_t *module);
/* Serve or hand back, from the op, the type signature and the agreed set-up only. A set-up
 * not yet run runs here (blocking) unless `defer`: then CALL_DEFER; a set-up running in a fiber
 * gives CALL_DEFER with `defer`, and without it is driven to its end here first (with the calls
 * waiting for it started, in order: twohop_deferred_setup_finish). */
call_route route_call(twohop_module *m, int count, ompi_datatype_t *dtype, ompi_op_t *op,
                      call_args *a, const char **why, bool defer);
/* route_call's second half: from the set-up's outcome `state` (1, -1 or -2, as setup_state). */
call_route route_setup(twohop_module *m, int count, const call_args *a, const char **why,
                       int state);
/* Verbose output and failure reports of calls; twohop_status -> MPI error code. */
void log_call(twohop_module *m, const char *form, const call_args *a, bool in_place);
void log_fallback(twohop_module *m, const char *why, bool staged);
void report_failure(twohop_module *m, const char *why);
int to_mpi_error(int rc);

/* twohop_datatype.c */
/* Served calls of half-precision pairs (pvar coll_twohop_half_calls). */
extern unsigned long long twohop_half_calls;
/* route_call's first half: from the op and the type signature (CALL_EMPTY, CALL_FALLBACK with
 * *why, or CALL_SERVE: servable, a->red and the layout filled). */
call_route route_signature(int count, ompi_datatype_t *dtype, ompi_op_t *op, call_args *a,
                           const char **why);
/* Whether `count` items of dtype are the canonical array of `base` elements (base_size bytes
 * at base_extent strides) at the buffer's address (base NULL: the packed signature). */
bool layout_is_canonical(ompi_datatype_t *dtype, size_t count, ompi_datatype_t *base,
                         size_t base_size, size_t base_extent);
/* This rank's views of its buffers for a served call (fills a->in/out, a->n; stages memory of
 * another kind in a non-canonical layout) and their end (staged output copied back, copies
 * freed). twohop_status. */
int prepare_buffers(call_args *a, const void *sbuf, void *rbuf, int count,
                    ompi_datatype_t *dtype);
int finish_buffers(call_args *a, int rc);
/* The predefined type of the signature of count items of dtype (NULL: several), *n of it. */
ompi_datatype_t *signature_base(ompi_datatype_t *dtype, int count, uint64_t *n);
/* Allreduce on a single-rank communicator (input copied to output, memory kinds respected). */
int self_copy(const void *sbuf, void *rbuf, int count, ompi_datatype_t *dtype);
/* Host copies of `count` items of dtype at buf (whole type map, holes included): stage_alloc
 * only allocates, stage_copy_in / stage_out copy; stage_in = both. */
int stage_alloc(staging *st, const char *buf, ompi_datatype_t *dtype, size_t count);
int stage_copy_in(staging *st, int kind);
int stage_in(staging *st, int kind, const char *buf, ompi_datatype_t *dtype, size_t count);
char *staged_buf(const staging *st);
int stage_out(staging *st, int kind);
/* Counts a served call in coll_twohop_half_calls when its reduction is on a half type. */
void twohop_count_half(const twohop_reduction *red);

/* twohop_requests.c */
int twohop_iallreduce(const void *sbuf, void *rbuf, int count, ompi_datatype_t *dtype,
                      ompi_op_t *op, ompi_communicator_t *comm, ompi_request_t **request,
                      mca_coll_base_module_t *module);
int twohop_allreduce_init(const void *sbuf, void *rbuf, int count, ompi_datatype_t *dtype,
                          ompi_op_t *op, ompi_communicator_t *comm, struct ompi_info_t *info,
                          ompi_request_t **request, mca_coll_base_module_t *module);
/* Counters (MPI_T): served non-blocking calls, served persistent starts. */
extern unsigned long long twohop_nonblocking_calls, twohop_persistent_starts;
/* Unregisters the progress callback (component close). */
void twohop_requests_finalize(void);
/* A set-up running in a fiber on m: resumed until it ends (MPI progress between resumes), then
 * the calls that waited for it started in order. For blocking calls on m and its destruction. */
void twohop_deferred_setup_finish(twohop_module *m);
/* m is being destroyed: off the list of deferred set-ups (its fiber, which held a reference
 * on the communicator, has ended). */
void twohop_deferred_setup_forget(twohop_module *m);

#endif
