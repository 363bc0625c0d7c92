/*
 * The engine: runs jobs (job.h) on a communicator, for the blocking call and for the calls in
 * flight (non-blocking and persistent starts).
 *
 * Ownership and threads:
 *   - A communicator's queue (twohop_comm::queue) holds its calls in flight in call order;
 *     only the oldest runs (MPI matches collectives in program order, and the node's buffer
 *     sets are shared by all calls of the communicator).
 *   - twohop_comm::busy is the engine lock of the communicator. The thread that holds it may
 *     touch the queue, the jobs and the communicator's per-call state; nobody else may. A
 *     starting call and a blocking call take it (spinning: holders keep it for one pass of
 *     work at most); the progress callback only tries it and skips a busy communicator, so it
 *     never waits and never re-enters a communicator the same thread is already driving.
 *   - A blocking call holds the lock from start to end: it first completes the calls queued
 *     before it, then drives its own job (drive()).
 *   - Process-wide, a registry lists the communicators with queued calls; progress_all()
 *     (Open MPI: an opal_progress callback; any thread, any MPI thread level) advances them
 *     and makes no MPI call other than completing requests through their done functions.
 *   - Done functions run only on threads inside an MPI call (the starting call, the progress
 *     callback, a blocking call): a call the proxy thread finishes waits in
 *     twohop_comm::completed until one of those delivers it. A failure is recorded on the
 *     communicator (and told to its peers) at once, wherever it is found.
 *   - Sequence numbers (twohop_comm::seq) belong to the job that runs: a job takes its own when
 *     it starts, except a stream-ordered call on the device buffers, whose calling thread
 *     reserves them while no such job is queued (twohop_comm::lazy_jobs = 0; the reserved jobs
 *     never touch seq): gpu_node.h, gpu_stream_posted.
 *   - Asynchronous progress (coll_twohop_async_progress): while calls are queued, a detached
 *     job on the process's proxy thread (posted/proxy.h, the thread GPU-posted mode uses) runs
 *     progress_all(async only): it advances only calls whose every step is safe off the MPI
 *     threads -- host buffers of the canonical layout, predefined ops (no user function, no
 *     convertor, no memory-kind copies) -- and jobs while they say their next steps are
 *     (Job::async_now: the node GPU job on device buffers, gpu/node_job.cpp); its own UCX use is
 *     serialised with the calling threads' by the worker's mutex (comm_setup.cpp). It stops
 *     when the last queued call is gone and is resubmitted by the next call.
 */
#ifndef TWOHOP_SCHEDULE_ENGINE_H
#define TWOHOP_SCHEDULE_ENGINE_H

#include <chrono>
#include <cstdint>
#include <memory>

#include "coarse_clock.h"
#include "comm_state.h"
#include "fp_env.h"
#include "job.h"
#include "object_cache.h"

namespace twohop {

/* One non-blocking or persistent start in a communicator's queue. */
struct QueuedCall {
    TWOHOP_CACHED_OBJECT(QueuedCall) // one per call: from a per-thread cache (object_cache.h)
    std::unique_ptr<Job> job;   // null: an empty call (count 0), completes at once
    twohop_done_fn done = nullptr;
    void *ctx = nullptr;
    bool started = false;
    bool async_ok = false;      // the proxy thread may advance it (engine.cpp: async_safe)
    bool async_counted = false; // counted in the queued calls the proxy runs for (submit_job)
    bool lazy = false;          // counted in twohop_comm::lazy_jobs until it finishes (where
                                // that count is kept: submit_job)
    int result = TWOHOP_OK;     // final status once in twohop_comm::completed
    uint64_t steps_seen = 0;    // job->steps() at the last check (timeouts)
    CoarseClock::time_point since{}; // last step (coll_twohop_timeout; coarse_clock.h), moved
                                     // forward by the time spent outside MPI (engine.cpp)
    CoarseClock::time_point last_wait{}; // last pass of a thread inside MPI that found it pending
    bool stream_ordered = false; // waited for on a CUDA stream: the proxy times it out too
    FpEnv env = FpEnv::current(); // the starting thread's, in place around every step (fp_env.h)
};

/*
 * The job for `count` items from `in` to `out` with the path chosen from what is equal on all
 * ranks (message bytes, the largest node's rank count, agreed parameters).
 */
std::unique_ptr<Job> make_job(twohop_comm *c, const twohop_userbuf &in, const twohop_userbuf &out,
                              uint64_t count, const twohop_reduction &red);

/* One-line reason of a failed call's status (log messages, `why` buffers). */
const char *status_reason(int rc);
/* The reason a call on a poisoned communicator fails, into why[0, whylen). */
void poisoned_message(const twohop_comm *c, char *why, size_t whylen);

/* Whether every step of a call on these buffers is safe on the proxy thread (host memory of
 * the canonical layout, a predefined op, asynchronous progress on): the engine then lets the
 * proxy advance it. A choice of this rank alone (who drives, never what the rank does). */
bool call_async_safe(const twohop_comm *c, const twohop_userbuf &in, const twohop_userbuf &out,
                     const twohop_reduction &red);

/* Whether `count` items of `item_bytes` take the latency path (rank-invariant). */
bool latency_path(const twohop_comm *c, uint64_t count, uint64_t item_bytes);

/*
 * Advances `job` until it finishes, polling the transport and the host MPI between advances;
 * bounded by coll_twohop_timeout (time without a step). Returns its final status.
 */
int drive(twohop_comm *c, Job &job);

/* Takes / releases the communicator's engine lock (spins, yielding, while another thread holds
 * it for a pass). Not re-entrant: see held_by_this_thread. */
void lock_engine(twohop_comm *c);
void unlock_engine(twohop_comm *c);
/* True while this thread holds c's engine lock (a call started from inside the MPI progress
 * of a call this thread runs on c must not wait for it). */
bool held_by_this_thread(const twohop_comm *c);

/* With the engine lock held: completes every queued call (their done functions run). */
void drain_queue(twohop_comm *c);

/* Drops the communicator from the process's registry and deletes calls still queued without
 * reporting them (its state is being freed; front ends keep the communicator alive while
 * calls are in flight, so there are none). */
void forget_comm(twohop_comm *c);

/*
 * Queues a call in flight (`job` null: count 0, completes at once) behind the calls already
 * queued on c and lets the proxy thread drive it when `async_ok` (engine.cpp: async_safe;
 * stream-ordered calls always). With `first_pass` the calling thread advances the queue once
 * (driving on while it moves, as MPI progress does) and wakes the proxy after it when the call
 * is still pending and `wake_proxy`; without it (stream-ordered calls, pipeline calls the proxy
 * advances) the call returns at once and the proxy is woken when `async_ok`. `done` runs
 * exactly once, on an MPI thread (twohop_comm_iallreduce). `stream_ordered`: a call that the
 * application waits for on a CUDA stream, not in MPI, so coll_twohop_timeout also runs on the
 * proxy thread's passes (engine.cpp, timed_out). Returns TWOHOP_OK or TWOHOP_ERR_NO_MEMORY.
 */
int submit_job(twohop_comm *c, std::unique_ptr<Job> job, twohop_done_fn done, void *ctx,
               bool async_ok, bool first_pass = true, bool wake_proxy = true,
               bool stream_ordered = false);

/* Advances the queued calls of every communicator that is not busy (async_only: only heads
 * with async_ok); returns how many completed, or -1 when no job moved at all. Cheap when
 * nothing is queued. */
int progress_all(bool async_only = false);

/* True while calls are queued that only threads inside MPI advance (no async_ok): a blocking
 * call that waits without the MPI's progress (the GPU-posted call) then runs it often. A
 * hint (relaxed loads), never a decision of what a rank does. */
bool mpi_thread_work_queued();

} // namespace twohop

#endif
