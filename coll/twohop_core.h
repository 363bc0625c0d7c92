/*
 * The plain C interface between the front ends -- the Open MPI adapter (coll/ompi/, the only
 * files that include Open MPI internal headers) and the PMPI library (pmpi/) -- and the C++
 * core. Nothing here throws; every function
 * returns 0 (TWOHOP_OK) or a twohop_status code, and writes a human-readable reason where a
 * `why` buffer is given.
 */
#ifndef TWOHOP_CORE_H
#define TWOHOP_CORE_H

#include <stddef.h>
#include <stdint.h>

#include "params.h"
#include "twohop_status.h"
#include "reduce_types.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Services the adapter provides to the core for one communicator. Set-up traffic is
 * point-to-point on the communicator with twohop's private tag (never the communicator's own
 * collectives, which may be a different component on a rank whose selection differs).
 * Requests are opaque; every function returns 0 or a twohop_status.
 */
typedef struct twohop_host {
    void *ctx;
    /* Non-blocking send/receive of `bytes` bytes to/from communicator rank `peer`. */
    int (*isend)(void *ctx, const void *buf, size_t bytes, int peer, void **req);
    int (*irecv)(void *ctx, void *buf, size_t bytes, int peer, void **req);
    /* *done = 1 once the request completed (it is then released); drives progress. A
     * completed receive of a size other than posted is TWOHOP_ERR_MISMATCH. */
    int (*test)(void *ctx, void *req, int *done);
    /* Abandons a request that has not completed (receives are cancelled, sends released). */
    void (*cancel)(void *ctx, void *req);
    /* 1 when `peer` is known to run another allreduce on this communicator right now (a
     * message of Open MPI's allreduce/reduce/bcast tags from it is waiting), else 0. */
    int (*foreign_pending)(void *ctx, int peer);
    /* Drives Open MPI progress; yields the CPU when Open MPI runs oversubscribed. */
    void (*progress)(void);
    /* Logs msg at verbosity `level` through coll_twohop_verbose's output stream
     * (level 0: always printed). */
    void (*log)(int level, const char *msg);
} twohop_host;

/*
 * Memory kinds of user buffers (memory_kind.h): per buffer and per call, never a reason to
 * change the schedule or a fallback decision.
 */
enum { TWOHOP_KIND_HOST = 0, TWOHOP_KIND_CUDA = 1, TWOHOP_KIND_POISONED = 2 };
/* Kind of the memory at p. */
int twohop_memory_kind(const void *p);
/* Copies n bytes from user memory of `kind` to host memory, and back; 0 or a twohop_status. */
int twohop_kind_to_host(int kind, void *host, const void *user, size_t n);
int twohop_kind_from_host(int kind, void *user, const void *host, size_t n);
/*
 * At component open: resolves the CUDA driver (1 when device buffers can be served, else 0
 * with *why saying why), and turns the poisoned-memory testing aid on or off.
 */
int twohop_memory_kinds_init(int poison_testing, char *why, size_t whylen);

/*
 * One user buffer of an allreduce as the core sees it, in the reduction's canonical layout
 * (count items of item_bytes, consecutive, starting at byte 0). `direct` is non-NULL when the
 * user's layout is exactly that and the memory is host memory (then the core reads/writes it
 * through the host kind's copy operations, and may read it in place); otherwise every access goes through read/write, which convert between the
 * user's layout and canonical bytes [off, off + len) (off and len are multiples of the item
 * size). This is per rank: ranks may pass different layouts of the same type signature.
 */
typedef struct twohop_userbuf {
    char *direct;
    char *device; /* canonical layout in CUDA device memory: its address (the GPU path reads and
                     writes it on the device), else NULL */
    void *ctx;
    int (*read)(void *ctx, void *dst, uint64_t off, uint64_t len);
    int (*write)(void *ctx, const void *src, uint64_t off, uint64_t len);
} twohop_userbuf;

/* What the adapter knows about this process when a communicator is set up. */
typedef struct twohop_comm_args {
    int rank, size;       /* in the communicator */
    uint64_t host_key;    /* equal on ranks sharing memory: a hash of the host name */
    const char *virtual_nodes; /* testing aid coll_twohop_virtual_nodes ("" or NULL: off) */
    int world_rank, world_size; /* in MPI_COMM_WORLD, for virtual_nodes */
    uint64_t proc_key;    /* unique per process across the job (jobid, vpid) */
    int thread_multiple;  /* the application initialised MPI_THREAD_MULTIPLE */
    const struct twohop_params *params;
    twohop_host host;
} twohop_comm_args;

typedef struct twohop_comm twohop_comm;

/*
 * Collective over the communicator: exchanges topology, agrees a twohop-private communicator
 * id, maps the node's shared-memory segment and, with more than one node, connects the rails.
 * Returns
 *   TWOHOP_OK            *out set, on every rank;
 *   a fallback status    (NO_MEMORY, TRANSPORT, BAD_PARAM) *out NULL, the same status on
 *                        every rank (failures are agreed), *resource set to 1 when the cause
 *                        is a resource (shared memory, ids) rather than a setting;
 *   TWOHOP_ERR_MISMATCH / TWOHOP_ERR_TIMEOUT / TWOHOP_ERR_HOST
 *                        the exchange itself failed (a rank does not take part: its selection
 *                        differs, or it is gone): the call must become an MPI error, since the
 *                        ranks cannot agree on anything any more.
 */
int twohop_comm_setup(const twohop_comm_args *args, twohop_comm **out, int *resource, char *why,
                      size_t whylen);

/* Releases everything the communicator state owns (not collective). NULL is allowed. */
void twohop_comm_free(twohop_comm *c);

/*
 * A function run as a fiber (coll/setup/fiber.h): twohop_comm_setup() called inside one
 * yields at every wait for a peer, so the adapters start a set-up from a non-blocking or
 * persistent call without waiting for the other ranks and resume it from MPI progress.
 * twohop_fiber_new: NULL when no stack could be mapped (ENOMEM). twohop_fiber_resume: runs the
 * function until it yields (0) or has returned (1); one thread at a time, never from inside
 * the fiber, never after it returned. twohop_fiber_free: after it returned, or before the
 * first resume.
 */
/* The smallest valid coll_twohop_segment_bytes: every communicator's shared-memory slot holds
 * at least this many bytes, whatever the (agreed) parameter. */
#define TWOHOP_MIN_SEGMENT_BYTES 4096

typedef struct twohop_fiber twohop_fiber;
twohop_fiber *twohop_fiber_new(void (*fn)(void *), void *arg);
int twohop_fiber_resume(twohop_fiber *f);
void twohop_fiber_free(twohop_fiber *f);

/*
 * Allreduce of `count` items (red->item_bytes each, canonical layout) from `in` into `out`
 * (for MPI_IN_PLACE both describe the receive buffer). count may exceed 2^31; sizes are
 * 64-bit throughout. Returns a twohop_status; after a failure the communicator is poisoned
 * (every later call returns TWOHOP_ERR_POISONED at once) and the local peers were told
 * through the node's control block, so they return an error instead of waiting. why gets
 * a one-line reason on failure.
 */
int twohop_comm_allreduce(twohop_comm *c, const twohop_userbuf *in, const twohop_userbuf *out,
                          uint64_t count, const twohop_reduction *red, char *why, size_t whylen);

/*
 * Stream-ordered allreduce (twohop_allreduce_enqueue), same arguments and status rules as
 * twohop_comm_allreduce plus the application's `stream` (a CUstream; NULL: the legacy default
 * stream). On a single-node communicator whose local ranks all pass device buffers of the
 * canonical layout, the node agrees on the host (no GPU synchronisation) and the reduction is
 * enqueued on `stream`, after the work enqueued there before and before the work enqueued
 * after: *enqueued = 1, the call returns at once. On a communicator of several nodes a rank
 * whose buffers are canonical device memory, with a predefined op and asynchronous progress on,
 * stays on the stream (*enqueued = 1): on the device buffers when the node agrees
 * (gpu_stream_posted), else through a host copy (schedule/stream_call.h). Otherwise
 * the call waits for the stream and completes as a blocking allreduce before returning
 * (*enqueued = 0). Ranks may mix this form and twohop_comm_allreduce in one call: each call
 * runs one GPU vote on every rank. The caller must not pass a `stream` being captured into a
 * CUDA graph (twohop_stream_capturing): it refuses such a call with twohop_comm_refuse_capture
 * before any staging or wait on the stream.
 */
int twohop_comm_allreduce_enqueue(twohop_comm *c, const twohop_userbuf *in,
                                  const twohop_userbuf *out, uint64_t count,
                                  const twohop_reduction *red, void *stream, int *enqueued,
                                  char *why, size_t whylen);

/*
 * How a call in flight ends (twohop_comm_iallreduce): called exactly once with the call's
 * status (TWOHOP_OK or an error; after an error the communicator is poisoned as for a
 * blocking call) and, on failure, a one-line reason (NULL on success). It runs on the thread
 * that advanced the call to its end -- inside twohop_comm_iallreduce, twohop_core_progress or
 * a later call on the communicator -- and must not call back into twohop for that
 * communicator.
 */
typedef void (*twohop_done_fn)(void *ctx, int status, const char *why);

/*
 * Non-blocking allreduce: the same arguments, paths, results and errors as
 * twohop_comm_allreduce, but the call only queues the work (and advances it once) and
 * returns. Calls on a communicator run one at a time in call order, blocking calls after the
 * ones queued before them. The work moves whenever twohop_core_progress runs (the adapter
 * registers it with the MPI's progress engine) or another call reaches the communicator;
 * `done(ctx, ...)` reports the end. `in`, `out` (and what their ctx point to) and
 * red->user_ctx must stay valid until then; the structs themselves are copied. Returns
 * TWOHOP_OK when queued (done will be called), else TWOHOP_ERR_NO_MEMORY (done will not be).
 * Memory kinds: on a communicator that runs the GPU vote, a call takes the node's GPU vote as
 * a job where the blocking call votes (one node: every size; several nodes: the pipeline
 * path) and, when every local rank passes device buffers, the node's GPU path -- one node:
 * its kernel; several nodes: the pipeline with hop 1 and hop 3 on the GPU, CPU-posted, or
 * GPU-posted with coll_twohop_posted_nonblocking (gpu_node_job: every local rank votes,
 * decided from the agreed state, the node count and the size, the same on every rank since
 * MPI matches a non-blocking collective only with the same non-blocking collective);
 * otherwise device buffers are reached through their kind's copies.
 */
int twohop_comm_iallreduce(twohop_comm *c, const twohop_userbuf *in, const twohop_userbuf *out,
                           uint64_t count, const twohop_reduction *red, twohop_done_fn done,
                           void *ctx);

/*
 * Advances every communicator's queued calls that no other thread is advancing; returns how
 * many completed. Never waits, never calls the MPI library (only the done functions); safe
 * from any thread at any MPI thread level, as an MPI progress callback.
 */
int twohop_core_progress(void);

/* Waits for the work enqueued on `stream` (a CUstream; NULL: the legacy default stream).
 * Returns 0 on success, -1 on a driver error or without a CUDA driver. */
int twohop_stream_sync(void *stream);

/* 1 when `stream` (a CUstream; NULL: the legacy default stream) is being captured into a CUDA
 * graph (cuStreamIsCapturing), or its capture state cannot be read (a driver error, e.g. the
 * legacy stream during another stream's global capture); 0 otherwise, also without a CUDA
 * driver or, for NULL, without a current context. Rank-local: a decision taken from it must be
 * made collective (twohop_comm_refuse_capture). */
int twohop_stream_capturing(void *stream);

/*
 * Refuses a stream-ordered call whose stream this rank is capturing into a CUDA graph: a graph
 * would replay the stream's half of the call without the host's (rounds, sequence numbers,
 * hop 2), so no replay could be a correct allreduce. The calls queued before it end first;
 * then the call fails on every rank as twohop_comm_abort's do (the communicator is poisoned:
 * its later allreduce calls fail too). Writes the reason to why[0, whylen) and returns
 * TWOHOP_ERR_HOST (TWOHOP_ERR_POISONED when the communicator already was); `why` may be NULL.
 * Not collective. Safe from inside the progress of another call on `c` (no drain then).
 */
int twohop_comm_refuse_capture(twohop_comm *c, char *why, size_t whylen);

/* The core's counters (coll/counters.def: one row each, the MPI_T counter coll_twohop_<name>). */
enum twohop_counter {
#define TWOHOP_COUNTER(id, name, doc) TWOHOP_COUNTER_##id,
#include "counters.def"
#undef TWOHOP_COUNTER
    TWOHOP_COUNTERS /* how many */
};
/* Counter `which` (0 <= which < TWOHOP_COUNTERS) in this process: its address, for relaxed
 * atomic loads (it only grows); NULL for another value. */
const unsigned long long *twohop_core_counter(int which);

/*
 * This rank cannot take part in the allreduce it was called for (e.g. staging memory could not
 * be allocated): poisons the communicator and tells the other ranks as a failed call would
 * (node peers through the control block, rail neighbours through the abort message), so no
 * rank waits for this one. Not collective.
 */
void twohop_comm_abort(twohop_comm *c, int status, const char *why);

/*
 * Reason this communicator cannot serve an allreduce of `count` items of `item_bytes`
 * (NULL if it can). Depends only on values identical on all ranks.
 */
const char *twohop_comm_cannot_serve(const twohop_comm *c, uint64_t count, size_t item_bytes);

/* Topology facts for verbose output. */
int twohop_comm_nodes(const twohop_comm *c);

/* The twohop-private id agreed for this communicator at set-up (hop-2 tags carry it). */
uint32_t twohop_comm_id(const twohop_comm *c);

/*
 * Restores the signal handlers UCX's library constructor installed (its backtrace printer),
 * unless the user asked for them with UCX_HANDLE_ERRORS: a crash in the application is then
 * reported by Open MPI alone, as without twohop.
 */
void twohop_core_quiet_signals(void);

/* Releases process-wide resources (the GPU-posted proxy thread, the UCX worker and endpoints).
 * Called at component close. */
void twohop_core_finalize(void);

#ifdef __cplusplus
}
#endif

#endif
