/* The engine (engine.h): blocking drive, the per-communicator queue, process-wide progress. */
#include "engine.h"

#include <algorithm>
#include <cstdio>
#include <mutex>
#include <pthread.h>
#include <thread>
#include <vector>

#include "gpu_node.h"
#include "latency_job.h"
#include "memory_kind.h"
#include "mpi_handoff.h"
#include "proxy.h"
#include "pipeline_job.h"

namespace twohop {
namespace {

using Clock = std::chrono::steady_clock;

/* Communicators with queued calls, and up to kRegisteredIdle more that had some (kept so
 * that their next call skips the lock); guarded by g_mutex. g_queued counts queued calls of
 * the whole process, so that progress_all() costs one atomic load when there are none. */
std::mutex g_mutex;
std::vector<twohop_comm *> g_active;
constexpr size_t kRegisteredIdle = 4;
std::atomic<long> g_queued{0};
/* A detached proxy job runs while async-safe calls are queued (engine.h). */
std::atomic<bool> g_async_job{false};
std::atomic<long> g_async_queued{0};
/* Whether threads inside MPI calls drive the queued calls now (their progress passes,
 * progress_all) or the proxy thread may (async_step): mpi_handoff.h. */
MpiHandOff g_handoff;
constexpr int64_t kMpiDrivesNs = 20000;
/* Advances without a step after which an MPI progress call gives up: flags move within a few
 * checks, and one pass of the MPI's whole progress engine costs far more than one check. */
constexpr int kMpiRetries = 16;
constexpr int kMpiPollEvery = 8;

/* The starting thread of a call still pending returns to the application: the proxy thread
 * may take the calls over at once, not kMpiDrivesNs after that thread's last progress (an MPI
 * call just before the start, e.g. the barrier or the previous MPI_Wait). Measured on one node,
 * device buffers: docs/perf.md. Another thread inside MPI (MPI_THREAD_MULTIPLE) clears the mark
 * and counts again at its next progress pass; until then the two only try the engine lock. */
void leaving_mpi() { g_handoff.left(); }

int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               Clock::now().time_since_epoch()).count();
}

} // namespace

void poisoned_message(const twohop_comm *c, char *why, size_t whylen) {
    if (why && whylen) {
        std::snprintf(why, whylen, "an earlier twohop allreduce on this communicator failed "
                      "(%s); the communicator is unusable", c->failure.c_str());
    }
}

const char *status_reason(int rc) {
    switch (rc) {
    case TWOHOP_ERR_PEER:
        return "another rank of the communicator failed its part of the call (told through the "
               "node's control block or a hop-2 abort message), or a node peer's process is gone";
    case TWOHOP_ERR_TIMEOUT: return "no progress within coll_twohop_timeout seconds";
    case TWOHOP_ERR_MISMATCH:
        return "ranks passed different message sizes (count x datatype size must be the "
               "same on every rank)";
    case TWOHOP_ERR_TRANSPORT:
        return "hop-2 transfer failed (a rank on another node is gone, or the network failed)";
    case TWOHOP_ERR_REDUCE: return "the user-defined reduction reported an error";
    case TWOHOP_ERR_HOST: return "converting the datatype layout of a user buffer failed";
    case TWOHOP_ERR_NO_MEMORY: return "out of memory";
    default: return "internal error";
    }
}

namespace {

/*
 * Ends the oldest queued call with `rc`: records a failure on the communicator at once (its
 * peers learn of it now) and moves the call to `completed`, whose done functions run on an
 * MPI thread (deliver_completed): the proxy thread finishes jobs but never completes requests,
 * so every request completion -- and the happens-before edge to the application's reads of
 * the result -- comes from a thread inside an MPI call.
 */
void record_failure(twohop_comm *c, int rc) {
    if (rc != TWOHOP_OK && rc != TWOHOP_ERR_POISONED && c->poisoned == TWOHOP_OK) {
        c->fail(rc, status_reason(rc));
    }
}

void finish_head(twohop_comm *c, int rc) {
    QueuedCall *q = c->queue.front();
    c->queue.pop_front();
    record_failure(c, rc);
    q->result = rc;
    q->job.reset(); // before done: the front end may free the buffers the job points to
    if (q->lazy) c->lazy_jobs.fetch_sub(1, std::memory_order_release);
    if (q->async_counted) g_async_queued.fetch_sub(1, std::memory_order_release);
    c->completed.push_back(q);
}

/* Runs a finished call's done function with its status and reason (MPI threads only). */
void deliver(twohop_comm *c, twohop_done_fn done, void *ctx, int result) {
    char poisoned[320];
    const char *why = nullptr;
    if (result == TWOHOP_ERR_POISONED) {
        poisoned_message(c, poisoned, sizeof(poisoned));
        why = poisoned;
    } else if (result != TWOHOP_OK) {
        why = status_reason(result);
    }
    // A failed call's GPU work left running where it was dropped (the proxy thread makes no
    // CUDA call outside a step's lock): it ends before the request does, since the
    // application may reuse the buffers from then on.
    if (result != TWOHOP_OK && c->gpu_hop1.pending) gpu_settle(c);
    done(ctx, result, why);
}

/* Runs the done functions of the finished calls, oldest first (MPI threads only). */
int deliver_completed(twohop_comm *c) {
    int n = 0;
    while (!c->completed.empty()) {
        std::unique_ptr<QueuedCall> q(c->completed.front());
        c->completed.pop_front();
        g_queued.fetch_sub(1, std::memory_order_relaxed);
        deliver(c, q->done, q->ctx, q->result);
        ++n;
    }
    return n;
}

/* With the engine lock held: calls queued without it go to the back of the queue. */
void take_incoming(twohop_comm *c) {
    if (!c->has_incoming.load(std::memory_order_acquire)) return;
    std::lock_guard<std::mutex> g(c->incoming_mutex);
    for (QueuedCall *q : c->incoming) c->queue.push_back(q);
    c->incoming.clear();
    c->has_incoming.store(false, std::memory_order_release);
}

void kick_async();

/* A gap between two passes of threads inside MPI longer than this is time the application
 * spent outside MPI (MPI_Wait and MPI_Test loops pass every few microseconds; the coarse clock
 * ticks every 1-4 ms). */
constexpr std::chrono::milliseconds kAwayGap{50};

/*
 * coll_twohop_timeout for a queued call, on a pass that left it pending: whether it has waited
 * that long without a step. Only time spent waiting counts, as in the blocking call, whose clock
 * runs inside the call: on passes of threads inside MPI, a gap since the previous such pass
 * (the application computed, or waited on something else) moves the call's clock forward; the
 * proxy thread (`on_proxy`) times out only stream-ordered calls, which the application waits
 * for on its stream, not in MPI (a peer that computes is not a peer that failed).
 */
bool timed_out(twohop_comm *c, QueuedCall *q, bool on_proxy) {
    const auto now = CoarseClock::now();
    if (!on_proxy && !q->stream_ordered) { // a stream-ordered call's wait is all the time
        if (now - q->last_wait > kAwayGap) q->since += now - q->last_wait;
        q->last_wait = now;
    }
    if (q->job->steps() != q->steps_seen || q->job->waiting_on_application()) {
        q->steps_seen = q->job->steps();
        q->since = now;
        return false;
    }
    return std::chrono::duration<double>(now - q->since).count() > c->timeout_s;
}

/*
 * With the engine lock held: one pass over the call at the head of the queue (or the call about
 * to be, submit_job's first pass): starts it on its first pass, then advances its job -- inside
 * MPI driving on while it moves, on the proxy once with a transport poll. Returns
 * TWOHOP_PENDING or the call's final status.
 */
int step_head(twohop_comm *c, QueuedCall *q, bool async_only) {
    int rc = TWOHOP_OK;
    if (!q->started) {
        q->started = true;
        if (c->timeout_s > 0) q->since = q->last_wait = CoarseClock::now(); // the timeout's
        if (c->poisoned != TWOHOP_OK) {
            rc = TWOHOP_ERR_POISONED;
        } else if (q->job) {
            const uint64_t reserved = q->job->reserved_first_seq();
            c->call_first_seq = reserved ? reserved : c->seq.last() + 1;
            // A stream-ordered call still on this rank's GPU writes this rank's flags.
            rc = gpu_enqueue_drain(c);
        }
    }
    if (rc != TWOHOP_OK || !q->job) return rc;
    FpEnvScope env(q->env); // the call's rounding, whichever thread runs this step
    // The transport is polled (hop-2 progress, peers' failure words, liveness) when the job
    // waits, not before it tries: a call whose flags are all there -- most small calls by the
    // time MPI_Wait runs -- ends without a pass over the peers' words (75 of the non-blocking
    // call's ~790 extra instructions at 2 ranks, docs/perf.md).
    rc = q->job->advance();
    if (rc == TWOHOP_PENDING && async_only) { // the proxy: one poll per pass
        rc = c->poll_transport();
        if (rc == TWOHOP_OK) rc = q->job->advance();
    }
    // Inside MPI (MPI_Wait, MPI_Test, ...): drive the job on while it moves, as the blocking
    // call does, and give up after kMpiRetries advances without a step, polling the transport
    // every kMpiPollEvery of them (a poll before the first retry and every 4th cost about 2 %
    // of a small call's time: docs/perf.md).
    for (int idle = 0; !async_only && rc == TWOHOP_PENDING && idle < kMpiRetries;) {
        const uint64_t before = q->job->steps();
        if ((idle + 1) % kMpiPollEvery == 0 && (rc = c->poll_transport()) != TWOHOP_OK) break;
        rc = q->job->advance();
        idle = q->job->steps() == before ? idle + 1 : 0;
    }
    return rc;
}

/*
 * With the engine lock held, after step_head left the head call q pending: the proxy's share
 * of it and its timeout. Returns true when it timed out (the caller finishes it).
 */
bool head_pending(twohop_comm *c, QueuedCall *q, bool async_only, uint64_t steps_before,
                  bool *moved) {
    // A job whose next steps became safe on the proxy thread (Job::async_now): from now on the
    // proxy advances it too, while the application computes; until its steps need a thread
    // inside MPI again.
    if (q->job->async_managed() && q->job->async_now() != q->async_ok) {
        q->async_ok = !q->async_ok;
        if (q->async_ok) {
            q->async_counted = true;
            g_async_queued.fetch_add(1, std::memory_order_release);
            kick_async();
        } else if (q->async_counted) {
            q->async_counted = false;
            g_async_queued.fetch_sub(1, std::memory_order_release);
        }
    }
    if (moved && q->job->steps() != steps_before) *moved = true;
    return c->timeout_s > 0 && (!async_only || q->stream_ordered) &&
           timed_out(c, q, async_only);
}

/*
 * With the engine lock held: advances the queue as far as it goes without waiting. Returns
 * the number of calls that completed; *pending = whether calls remain.
 */
int advance_queue(twohop_comm *c, bool *pending, bool async_only = false,
                  bool *moved = nullptr) {
    take_incoming(c);
    int completed = async_only ? 0 : deliver_completed(c);
    while (!c->queue.empty()) {
        QueuedCall *q = c->queue.front();
        if (async_only && !q->async_ok) break;
        // Draining a stream-ordered call still on this rank's GPU waits for the device and
        // drives the MPI's progress: threads inside MPI only.
        if (!q->started && async_only && q->job && c->gpu_hop1.enq_pending) break;
        const uint64_t steps_before = q->job ? q->job->steps() : 0;
        const int rc = step_head(c, q, async_only);
        if (rc == TWOHOP_PENDING) {
            if (!head_pending(c, q, async_only, steps_before, moved)) break;
            finish_head(c, TWOHOP_ERR_TIMEOUT);
        } else {
            finish_head(c, rc);
        }
        if (moved) *moved = true;
        if (!async_only) completed += deliver_completed(c); // MPI threads only
    }
    *pending = !c->queue.empty() || !c->completed.empty() ||
               c->has_incoming.load(std::memory_order_acquire);
    return completed;
}

/*
 * Whether every step of the call is safe on the proxy thread: host memory in the canonical
 * layout read in place (no convertor, no memory-kind copy, not the poisoned testing kind) and a
 * predefined op (no user function).
 */
bool async_safe(const twohop_comm *c, const twohop_userbuf &in, const twohop_userbuf &out,
                const twohop_reduction &red) {
    return c->async_progress && in.direct && out.direct && red.op != TWOHOP_OP_USER &&
           c->mem == &twohop::mem_ops(twohop::MemoryKind::Host);
}


int async_step() {
    int moved = -1;
    if (g_handoff.mpi_drives(now_ns(), kMpiDrivesNs)) {
        std::this_thread::yield(); // a thread inside MPI drives the calls now
    } else {
        moved = progress_all(true);
    }
    if (g_async_queued.load(std::memory_order_acquire) > 0) {
        if (moved < 0) std::this_thread::yield(); // nothing moved: leave the core to others
        return Proxy::kPending;
    }
    // Stop; but a call queued between the check and here must not be stranded.
    g_async_job.store(false, std::memory_order_release);
    if (g_async_queued.load(std::memory_order_acquire) > 0 &&
        !g_async_job.exchange(true, std::memory_order_acq_rel)) {
        return Proxy::kPending;
    }
    return TWOHOP_OK;
}

void kick_async() {
    if (g_async_job.load(std::memory_order_acquire) ||
        g_async_job.exchange(true, std::memory_order_acq_rel)) {
        return;
    }
    if (!Proxy::instance().submit(async_step)) g_async_job.store(false);
}

} // namespace

bool call_async_safe(const twohop_comm *c, const twohop_userbuf &in,
                     const twohop_userbuf &out, const twohop_reduction &red) {
    return async_safe(c, in, out, red);
}

bool latency_path(const twohop_comm *c, uint64_t count, uint64_t item_bytes) {
    // The path must be the same on every rank: scale by the largest node's rank count (the
    // shard count), not by this node's.
    const uint64_t bytes = count * item_bytes;
    return bytes <= c->slot_bytes &&
           bytes * static_cast<uint64_t>(c->topo.n_shards()) <= c->small_bytes;
}

std::unique_ptr<Job> make_job(twohop_comm *c, const twohop_userbuf &in, const twohop_userbuf &out,
                              uint64_t count, const twohop_reduction &red) {
    if (latency_path(c, count, red.item_bytes)) {
        return std::unique_ptr<Job>(new LatencyJob(c, in, out, count, red));
    }
    return std::unique_ptr<Job>(new PipelineJob(c, in, out, count, red));
}

int drive(twohop_comm *c, Job &job) {
    unsigned spins = 0;
    uint64_t seen = job.steps();
    Clock::time_point since{};
    for (;;) {
        int rc = job.advance();
        if (rc != TWOHOP_PENDING) return rc;
        // Flags usually move within a few checks: poll (UCX, Open MPI) every 16.
        if (++spins % 16 != 0) continue;
        if ((rc = c->poll()) != TWOHOP_OK) return rc;
        if (c->timeout_s > 0) {
            const auto now = Clock::now();
            if (job.steps() != seen || spins == 16) {
                seen = job.steps();
                since = now;
            } else if (std::chrono::duration<double>(now - since).count() > c->timeout_s) {
                return TWOHOP_ERR_TIMEOUT;
            }
        }
    }
}

namespace {
/* This thread's id as twohop_comm::busy_holder stores it. pthread_self() reads the thread
 * pointer (one load): a thread_local list of held communicators cost a __tls_get_addr call
 * per access in this dlopen'ed component (9 per non-blocking start, docs/perf.md). */
unsigned long self_id() { return static_cast<unsigned long>(pthread_self()); }

/* Whether this thread takes c's engine lock without waiting: sets the holder on success. */
bool try_lock_engine(twohop_comm *c) {
    if (c->busy.exchange(true, std::memory_order_acquire)) return false;
    c->busy_holder.store(self_id(), std::memory_order_relaxed);
    return true;
}
} // namespace

bool held_by_this_thread(const twohop_comm *c) {
    return c->busy_holder.load(std::memory_order_relaxed) == self_id();
}

void lock_engine(twohop_comm *c) {
    unsigned spins = 0;
    while (!try_lock_engine(c)) {
        if (++spins % 64 == 0) std::this_thread::yield();
    }
}

void unlock_engine(twohop_comm *c) {
    c->busy_holder.store(0, std::memory_order_relaxed);
    c->busy.store(false, std::memory_order_release);
}

void drain_queue(twohop_comm *c) {
    bool pending = !c->queue.empty() || !c->completed.empty() ||
                   c->has_incoming.load(std::memory_order_acquire);
    unsigned spins = 0;
    while (pending) {
        (void)advance_queue(c, &pending);
        if (pending && ++spins % 16 == 0) c->host.progress();
    }
}

void forget_comm(twohop_comm *c) {
    {
        std::lock_guard<std::mutex> g(g_mutex);
        g_active.erase(std::remove(g_active.begin(), g_active.end(), c), g_active.end());
        c->registered.store(false);
    }
    c->lazy_jobs.store(0);
    take_incoming(c);
    for (QueuedCall *q : c->queue) {
        if (q->async_counted) g_async_queued.fetch_sub(1, std::memory_order_release);
        delete q;
        g_queued.fetch_sub(1, std::memory_order_relaxed);
    }
    c->queue.clear();
    for (QueuedCall *q : c->completed) {
        delete q;
        g_queued.fetch_sub(1, std::memory_order_relaxed);
    }
    c->completed.clear();
}

bool mpi_thread_work_queued() {
    return g_queued.load(std::memory_order_relaxed) >
           g_async_queued.load(std::memory_order_relaxed);
}

int progress_all(bool async_only) {
    if (g_queued.load(std::memory_order_relaxed) == 0) return 0;
    if (!async_only) g_handoff.pass();
    std::unique_lock<std::mutex> g(g_mutex, std::try_to_lock);
    if (!g.owns_lock()) return async_only ? -1 : 0;
    int completed = 0;
    bool moved = false;
    for (size_t i = 0; i < g_active.size();) {
        twohop_comm *c = g_active[i];
        bool pending = true;
        if (try_lock_engine(c)) {
            completed += advance_queue(c, &pending, async_only, &moved);
            // An idle communicator stays registered while few are (the next call then skips
            // the registry's lock); a pass over an idle one costs a few loads, and none runs
            // while no call is queued anywhere (g_queued). It leaves under its engine lock: a
            // call queued under that lock afterwards sees `registered` false and registers
            // again (it waits for g_mutex, held here until the communicator is out). A call
            // queued without it (`incoming`) may have seen `registered` still true: both sides
            // use sequentially consistent operations (its has_incoming store, then its load of
            // `registered`; this store, then this load), so one of them sees the other's write.
            if (!pending && g_active.size() > kRegisteredIdle) {
                c->registered.store(false);
                if (c->has_incoming.load()) {
                    c->registered.store(true);
                    pending = true;
                }
            }
            unlock_engine(c);
        }
        if (pending || c->registered.load()) {
            ++i;
        } else {
            g_active[i] = g_active.back();
            g_active.pop_back();
        }
    }
    return async_only && completed == 0 && !moved ? -1 : completed;
}

/* Queues a call (engine lock held, or `incoming` without it) and registers the communicator
 * for progress. */
static void enqueue_call(twohop_comm *c, QueuedCall *q, bool incoming = false) {
    if (incoming) {
        std::lock_guard<std::mutex> g(c->incoming_mutex);
        c->incoming.push_back(q);
        c->has_incoming.store(true); // sequentially consistent: see progress_all
    } else {
        take_incoming(c);
        c->queue.push_back(q);
    }
    g_queued.fetch_add(1, std::memory_order_relaxed);
    if (q->async_counted) g_async_queued.fetch_add(1, std::memory_order_release);
    if (c->registered.load()) return; // see progress_all
    std::lock_guard<std::mutex> g(g_mutex);
    if (std::find(g_active.begin(), g_active.end(), c) == g_active.end()) g_active.push_back(c);
    c->registered.store(true);
}

int submit_job(twohop_comm *c, std::unique_ptr<Job> job, twohop_done_fn done, void *ctx,
               bool async_ok, bool first_pass, bool wake_proxy, bool stream_ordered) {
    QueuedCall call; // on the stack until it has to wait in the queue
    QueuedCall *q = &call;
    q->done = done;
    q->ctx = ctx;
    q->job = std::move(job);
    q->async_ok = q->job != nullptr && async_ok;
    q->stream_ordered = stream_ordered;
    // Counted for the proxy (it runs while counted calls are queued) only when this start may
    // wake it: a latency-path call that does not (one node) is advanced by the proxy only while
    // it runs for others, and its count cost two atomic read-modify-writes per call.
    const bool held = held_by_this_thread(c);
    q->async_counted = q->async_ok && (held || !first_pass || wake_proxy);
    // Counted only where its one reader may look (a stream-ordered call on several nodes that
    // may vote on its calling thread: stream_call.cpp); fixed at set-up, and each call's flag
    // keeps its increment and decrement paired. Elsewhere the count's two atomic
    // read-modify-writes per call are spared (docs/perf.md).
    q->lazy = q->job != nullptr && q->job->reserved_first_seq() == 0 && c->gpu_round &&
              c->stream_on_device && c->topo.n_nodes() > 1;
    if (!held && first_pass) {
        lock_engine(c);
        take_incoming(c);
        (void)deliver_completed(c);
        // Nothing queued before it: the first pass runs before the call is queued, as the
        // blocking call's does. A call that ends in it -- a small call whose peers are there --
        // never enters the queue or the registry (the queued call's allocation, the queue and
        // the process's count of queued calls: ~175 of the non-blocking call's instructions,
        // docs/perf.md).
        const bool first = c->queue.empty();
        const uint64_t steps_before = q->job ? q->job->steps() : 0;
        int rc = first ? step_head(c, q, false) : TWOHOP_PENDING;
        if (rc == TWOHOP_PENDING) {
            q = new (std::nothrow) QueuedCall(std::move(call));
            if (q == nullptr) { // no memory to queue it: it ends here, as a blocking call
                q = &call;
                if (!first) drain_queue(c); // after the calls queued before it
                if (!q->started) rc = step_head(c, q, false);
                if (rc == TWOHOP_PENDING) {
                    FpEnvScope env(q->env);
                    rc = drive(c, *q->job);
                }
            }
        }
        if (rc != TWOHOP_PENDING) {
            record_failure(c, rc);
            q->job.reset(); // before done: the front end may free the buffers it points to
            deliver(c, done, ctx, rc);
            unlock_engine(c);
            return TWOHOP_OK;
        }
        if (q->lazy) c->lazy_jobs.fetch_add(1, std::memory_order_relaxed);
        enqueue_call(c, q);
        bool pending = true;
        if (!first) {
            // Queued behind others: a first pass at once publishes this rank's input early,
            // and small calls whose peers are already there complete inside the start.
            (void)advance_queue(c, &pending);
        } else if (head_pending(c, q, false, steps_before, nullptr)) {
            finish_head(c, TWOHOP_ERR_TIMEOUT);
            (void)deliver_completed(c);
            pending = false;
        }
        unlock_engine(c);
        if (pending) leaving_mpi();
        if (pending && wake_proxy) kick_async();
        return TWOHOP_OK;
    }
    // Started from inside the progress of a call this thread is running on the same
    // communicator (queued behind: advanced once that call has ended), or without a first
    // pass: queued for the proxy and MPI progress without waiting for the engine lock (its
    // holder may be in the middle of a long pass).
    q = new (std::nothrow) QueuedCall(std::move(call));
    if (q == nullptr) return TWOHOP_ERR_NO_MEMORY;
    if (q->lazy) c->lazy_jobs.fetch_add(1, std::memory_order_relaxed);
    enqueue_call(c, q, !held);
    if (q->async_ok) {
        if (!held) leaving_mpi();
        kick_async();
    }
    return TWOHOP_OK;
}

} // namespace twohop

extern "C" int twohop_comm_iallreduce(twohop_comm *c, const twohop_userbuf *in,
                                      const twohop_userbuf *out, uint64_t count,
                                      const twohop_reduction *red, twohop_done_fn done,
                                      void *ctx) {
    std::unique_ptr<twohop::Job> job;
    const bool latency = count > 0 && twohop::latency_path(c, count, red->item_bytes);
    // A communicator that runs the GPU vote: the node's GPU vote as a job (gpu_node_job) where
    // the blocking call (run_call) votes -- one node at every size; several nodes on the
    // pipeline path, where the node's yes runs hop 1 and hop 3 on the GPU. Every local rank
    // queues it for the call whatever its buffers (the agreed gpu_round, the node count and
    // the message size decide: the same on every rank). A rank with host buffers publishes its
    // descriptor and its "no" and runs the host path's job at once, as in the blocking call
    // (device buffers on the host path's copies took 1.3-1.5x the blocking call on one node
    // below 4 KiB, 1.04-3.7x on two virtual nodes from 8 KiB: docs/perf.md). A rank that
    // declines at once (host buffers, most often) queues the host path's job alone, which
    // publishes that "no" when it starts (Job::decline_first): the same words and sequence
    // numbers, without a second job around it.
    const bool gpu_vote = count > 0 && c->gpu_round && (c->topo.n_nodes() == 1 || !latency);
    const bool declines = gpu_vote && gpu_declines_at_once(*in, *out, *red);
    if (gpu_vote && !declines) {
        job = gpu_node_job(c, *in, *out, count, *red);
        // Device buffers with asynchronous progress: the proxy thread takes the job over after
        // its start (the vote, the kernel). Woken now, its wake-up overlaps the start (the
        // input's synchronisation with the legacy stream) instead of following it. Thread
        // scheduling only: nothing any rank does depends on it.
        if (c->async_progress && in->device != nullptr && out->device != nullptr) {
            twohop::Proxy::instance().prewake();
        }
    } else if (count > 0) {
        job = twohop::make_job(c, *in, *out, count, *red);
        if (declines) job->decline_first(gpu_decline_first);
    }
    const bool async_ok = count > 0 && twohop::async_safe(c, *in, *out, *red);
    // Who drives the call besides the threads inside MPI (docs/design.md, "Who advances a
    // job"):
    // - a pipeline call of coll_twohop_async_start_bytes or more that the proxy thread may
    //   advance starts there: the starting thread makes no first pass, whose copy-in of a whole
    //   segment would be time the application cannot overlap (osu_iallreduce: "Coll. Init");
    //   below that the first pass costs less than handing the call to the proxy (measured:
    //   docs/perf.md, "Non-blocking and persistent allreduce");
    // - a latency-path call makes its first pass (it publishes this rank's input; small calls
    //   whose peers are there complete inside the start) and wakes the proxy only where other
    //   ranks then wait for this one: the node leader's hop 2. Once a rank's input is
    //   published, its node peers read it without it, so the rest waits for MPI_Wait/MPI_Test
    //   (the proxy still advances it while it runs for other calls). Not so for the node GPU
    //   job on device buffers: every local rank's steps (vote, kernel, `reduced`) run on its
    //   own MPI threads, so peers wait for a rank that computes until it enters MPI again.
    const bool first_pass =
        !async_ok || latency || count * red->item_bytes < c->async_start_bytes;
    const bool wake_proxy = !latency || (c->topo.n_nodes() > 1 && c->topo.local_rank == 0);
    return twohop::submit_job(c, std::move(job), done, ctx, async_ok, first_pass, wake_proxy);
}

extern "C" int twohop_core_progress(void) { return twohop::progress_all(); }
