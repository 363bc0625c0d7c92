/* The stream-ordered call on several nodes (stream_call.h) and its host copies. */
#include "stream_call.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "comm_state.h"
#include "core_counters.h"
#include "cuda_driver.h"
#include "engine.h"
#include "gpu_node.h"
#include "pipeline_job.h"
#include "stage_args.h"
#include "twohop_core.h"

namespace twohop {
namespace {

constexpr uint64_t kPage = 4096;
static_assert(StreamSlot::kRingOffset >= sizeof(StreamWords) &&
                  StreamSlot::kRingOffset + sizeof(DoorbellRing) <= kPage,
              "the words and the ring share one page");
// A call on the GPU path writes RankFlags::ready[n % kReadyWords] for its n-th such call. It
// acquires a slot first, and jobs finish in call order, so the call kMax before it has
// released its slot (its stream ended, after the whole node passed its handshake); the words
// leave room for twice the slots, also if jobs ever overlap their neighbours. Calls on
// unordered streams then never read another call's `ready`.
static_assert(twohop::RankFlags::kReadyWords >= 2 * twohop::StreamSlots::kMax,
              "one ready word per stream-ordered call in flight, with margin");

uint64_t round_up_pow2(uint64_t v) {
    uint64_t p = kPage;
    while (p < v) p <<= 1;
    return p;
}

void free_slot(StreamSlot *s) {
    if (s->host) {
        cuda::host_unregister(s->device, s->host);
        std::free(s->host);
    }
    if (s->words) {
        cuda::host_unregister(s->device, s->words);
        std::free(s->words);
    }
    delete s;
}

/* A stream-ordered call queued in the engine has no request: nothing to complete. Its failure
 * is recorded on the communicator (poisoned), and the next call reports it. */
void stream_done(void *, int, const char *) {}

/* The calls queued before a call this rank cannot take part in end first (their failures are
 * theirs). */
void end_queued_calls(twohop_comm *c) {
    lock_engine(c);
    drain_queue(c);
    unlock_engine(c);
}

/* This rank cannot take part in the call (`why`): the queued calls end first, then the call
 * fails on every rank (twohop_comm_abort: the communicator poisoned under the call's first
 * sequence number, unless one of them failed it already). Returns rc. */
int fail_everywhere(twohop_comm *c, int rc, const char *why) {
    end_queued_calls(c);
    twohop_comm_abort(c, rc, why);
    return rc;
}

/*
 * The stream's half of a call through the host copy `slot` (bytes from `in` to `out`, both
 * device memory): one th_stage launch (stage_kernel) or the stream's own copies and memory
 * operations -- copy in, write `arrived`, wait for `gate`, copy back, write `released`.
 * Returns whether all of it was enqueued; *waits: whether the stream waits on the gate (it
 * must then be opened whatever happens).
 */
bool enqueue_host_copy(StreamSlot *slot, int device, void *st, bool stage_kernel,
                       const twohop_userbuf &in, const twohop_userbuf &out, uint64_t bytes,
                       uint64_t token, bool *waits) {
    slot->token = token;
    if (stage_kernel) {
        StageArgs a;
        a.in = static_cast<const char *>(in.device);
        a.host = slot->host_dev;
        a.out = static_cast<char *>(out.device);
        a.bytes = bytes;
        a.arrived = reinterpret_cast<unsigned long long *>(&slot->words_dev->arrived);
        a.gate = reinterpret_cast<const unsigned long long *>(&slot->words_dev->gate);
        a.released = reinterpret_cast<unsigned long long *>(&slot->words_dev->released);
        a.token = token;
        *waits = cuda::launch_grid(device, "th_stage", &a, sizeof(a), 1, kStageThreads, st);
        return *waits;
    }
    bool ok = cuda::copy_async(device, slot->host, in.device, bytes, st) &&
              cuda::write_flag(device, st, &slot->words_dev->arrived, token);
    *waits = ok && cuda::wait_flag(device, st, &slot->words_dev->gate, token);
    return *waits && cuda::copy_async(device, out.device, slot->host, bytes, st) &&
           cuda::write_flag(device, st, &slot->words_dev->released, token);
}

/*
 * Queues the host side of a call through the host copy `slot` (token: the call's): the job the
 * blocking call would run on host buffers, on the host copy in place, inside a StreamJob that
 * waits for `arrived` and opens the gate after it. vote: this rank's GPU vote runs as the
 * StreamJob's start -- with the vote on the pipeline path (the peers that called
 * MPI_Allreduce on device buffers run it) its vote is a no (its buffer is host memory), and a
 * no never waits (gpu_node.h). Not the inner job's Job::decline_first: the start runs when
 * the job starts, before the application's stream reaches the call, so the node's other ranks
 * get this rank's "no" without waiting for its producer; the inner job begins only after the
 * stream arrived. Returns submit_job's status (not OK: the job was dropped, its gate opened).
 */
int queue_host_copy_job(twohop_comm *c, StreamSlot *slot, uint64_t count,
                        const twohop_reduction &red, uint64_t token, bool vote) {
    twohop_userbuf h;
    std::memset(&h, 0, sizeof(h));
    h.direct = slot->host;
    std::unique_ptr<Job> inner = make_job(c, h, h, count, red);
    std::function<int()> start;
    if (vote) {
        start = [c, h, count, red]() -> int {
            bool gpu = false;
            const int rc = gpu_node_allreduce(c, h, h, count, red, &gpu);
            return rc != TWOHOP_OK ? rc : gpu ? TWOHOP_ERR_HOST : TWOHOP_OK;
        };
    }
    std::unique_ptr<Job> job(
        new StreamJob(std::move(inner), slot->words, token, start, gpu_waiting_kernel_end));
    return submit_job(c, std::move(job), stream_done, nullptr, true, false, true, true);
}

} // namespace

StreamSlots::~StreamSlots() {
    for (StreamSlot *s : slots_) {
        if (s->idle()) free_slot(s); // else the GPU may still copy from it: left allocated
    }
}

bool StreamSlots::idle() const {
    for (const StreamSlot *s : slots_) {
        if (!s->idle()) return false;
    }
    return true;
}

bool StreamSlots::grow(StreamSlot *s, int device, uint64_t bytes) {
    if (bytes == 0 || (s->host && s->bytes >= bytes)) return true; // 0: only the words
    if (s->host) {
        cuda::host_unregister(s->device, s->host);
        std::free(s->host);
        s->host = nullptr;
        s->host_dev = nullptr;
        s->bytes = 0;
    }
    const uint64_t want = round_up_pow2(bytes);
    void *p = std::aligned_alloc(kPage, want);
    if (p == nullptr) return false;
    void *dev = cuda::host_register(device, p, want);
    if (dev == nullptr) {
        std::free(p);
        return false;
    }
    s->host = static_cast<char *>(p);
    s->host_dev = static_cast<char *>(dev);
    s->bytes = want;
    return true;
}

StreamSlot *StreamSlots::acquire(int device, uint64_t bytes, double timeout_s, bool *timed_out) {
    *timed_out = false;
    const auto start = std::chrono::steady_clock::now();
    for (unsigned spins = 0;; ++spins) {
        StreamSlot *best = nullptr;
        for (StreamSlot *s : slots_) { // an idle slot, preferably one large enough
            if (!s->idle()) continue;
            if (best == nullptr || (s->bytes >= bytes && best->bytes < bytes)) best = s;
        }
        if (best == nullptr && slots_.size() < kMax) {
            auto *s = new StreamSlot();
            void *w = std::aligned_alloc(kPage, kPage);
            if (w == nullptr) {
                delete s;
                return nullptr;
            }
            std::memset(w, 0, kPage);
            s->words_dev = static_cast<StreamWords *>(cuda::host_register(device, w, kPage));
            if (s->words_dev == nullptr) {
                std::free(w);
                delete s;
                return nullptr;
            }
            s->words = static_cast<StreamWords *>(w);
            s->device = device;
            s->index = static_cast<int>(slots_.size());
            slots_.push_back(s);
            best = s;
        }
        if (best != nullptr) return grow(best, best->device, bytes) ? best : nullptr;
        // kMax calls in flight: the oldest is released once the proxy thread completed it and
        // the stream copied its result out.
        if (timeout_s > 0 && spins % 256 == 0 &&
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() >
                timeout_s) {
            *timed_out = true;
            return nullptr;
        }
        std::this_thread::yield();
    }
}

} // namespace twohop

using twohop::StreamSlot;

int twohop_stream_enqueue_multinode(twohop_comm *c, const twohop_userbuf &in,
                                    const twohop_userbuf &out, uint64_t count,
                                    const twohop_reduction &red, void *stream, bool *taken,
                                    char *why, size_t whylen) {
    namespace cuda = twohop::cuda;
    const auto entry = std::chrono::steady_clock::now();
    *taken = false;
    // What can stay on the stream: canonical device buffers, a predefined op (the proxy
    // thread runs the host side: no user function there), and the proxy allowed to drive UCX
    // (its worker is serialised only with asynchronous progress on).
    if (count == 0 || c->topo.n_nodes() < 2 || !c->async_progress || !in.device ||
        !out.device || red.op == TWOHOP_OP_USER || twohop::held_by_this_thread(c)) {
        return TWOHOP_OK;
    }
    cuda::PointerInfo oi;
    if (!cuda::pointer_info(out.device, &oi)) return TWOHOP_OK;
    const int device = stream ? cuda::stream_device(stream) : oi.device;
    if (device < 0 || !cuda::flag_ops_supported(device)) return TWOHOP_OK;
    void *st = stream ? stream : cuda::legacy_stream();
    const uint64_t bytes = count * red.item_bytes;

    // (A stream being captured into a CUDA graph was refused by the front end:
    // twohop_comm_refuse_capture.)

    // The pipeline path of a communicator that runs the GPU vote stays on the device buffers
    // (gpu_stream_posted: hop 1 and hop 3 on the application's stream, GPU-posted) when the node
    // agrees; the rounds run here, on the calling thread, when it owns the sequence numbers
    // (no call that takes its own when it starts is queued). Otherwise through a host copy,
    // whose job runs the rounds when it starts. Either way every local rank runs the node's
    // rounds for the call once, so the choice is this rank's alone.
    const bool pipeline = !twohop::latency_path(c, count, red.item_bytes);
    const bool vote_now = c->gpu_round && pipeline && c->stream_on_device &&
                          bytes >= c->stream_on_device_min && device == oi.device &&
                          c->lazy_jobs.load(std::memory_order_acquire) == 0;
    if (!c->stream_slots) c->stream_slots.reset(new twohop::StreamSlots());
    bool timed_out = false;
    StreamSlot *slot =
        c->stream_slots->acquire(device, vote_now ? 0 : bytes, c->timeout_s, &timed_out);
    if (slot == nullptr && !timed_out) return TWOHOP_OK; // no host copy: the blocking form
    *taken = true;
    const uint64_t token = ++c->stream_token;
    bool ok = slot != nullptr;
    bool voted = false;
    if (ok && vote_now) {
        const GpuStreamSlot gs{slot->ring(),       slot->ring_dev(),
                               &slot->words->released, &slot->words_dev->released,
                               token,              &slot->token,
                               &slot->job_live,    &slot->enqueue_state,
                               slot->index,        entry};
        auto submit = [c](std::unique_ptr<twohop::Job> job) {
            return twohop::submit_job(c, std::move(job), twohop::stream_done, nullptr, true,
                                      false, true, true);
        };
        bool on_gpu = false;
        const int rc = gpu_stream_posted(c, in, out, count, red, stream, gs, submit, &on_gpu);
        if (rc != TWOHOP_OK) { // this rank cannot take part: the call fails on every rank
            twohop::end_queued_calls(c);
            std::snprintf(why, whylen, "%s", c->poisoned != TWOHOP_OK ? c->failure.c_str()
                                                                      : twohop::status_reason(rc));
            twohop_comm_abort(c, rc, why);
            return rc;
        }
        if (on_gpu) {
            twohop::count(TWOHOP_COUNTER_ENQUEUED_CALLS);
            twohop::count(TWOHOP_COUNTER_ENQUEUED_MULTINODE_CALLS);
            return TWOHOP_OK;
        }
        // The node declined: a host copy, the rounds done.
        voted = true;
        slot = c->stream_slots->acquire(device, bytes, c->timeout_s, &timed_out);
        ok = slot != nullptr;
    }
    bool waits = false; // the stream waits on the gate: it must be opened whatever happens
    // The stream's wait on the gate is one for the proxy (StreamJob opens it after hop 2):
    // counted from before it is enqueued until the gate opens (gpu_node.h).
    if (ok) gpu_waiting_kernel_begin();
    const bool counted = ok;
    // Small calls: one launch (th_stage) for the five steps; else the stream's own copies and
    // memory operations. This rank's choice (what reaches the host copy is the same).
    // The kernel dereferences the buffers: both on the stream's device (the copies of the
    // stream operations would also reach another device's memory).
    cuda::PointerInfo ii;
    const bool stage_kernel = ok && bytes <= c->stream_stage_kernel_max && device == oi.device &&
                              (in.device == out.device ||
                               (cuda::pointer_info(in.device, &ii) && ii.device == device)) &&
                              cuda::preload(device, "th_stage");
    if (ok) ok = twohop::enqueue_host_copy(slot, device, st, stage_kernel, in, out, bytes, token,
                                           &waits);
    if (!ok) { // this rank cannot take part: the call fails on every rank
        if (waits) twohop::open_word(&slot->words->gate, token);
        if (counted) gpu_waiting_kernel_end();
        std::snprintf(why, whylen, "%s",
                      timed_out ? "no host copy was released within coll_twohop_timeout "
                                  "(stream-ordered calls in flight do not progress)"
                                : "enqueueing a stream-ordered allreduce on the application's "
                                  "stream failed");
        return twohop::fail_everywhere(c, timed_out ? TWOHOP_ERR_TIMEOUT : TWOHOP_ERR_TRANSPORT,
                                       why);
    }

    // The host side, queued in call order (the GPU vote's "no" in its start where the node
    // votes and the rounds have not run here).
    const int rc = twohop::queue_host_copy_job(c, slot, count, red, token,
                                               c->gpu_round && pipeline && !voted);
    if (rc != TWOHOP_OK) { // the job was dropped (its gate opened): this rank cannot take part
        std::snprintf(why, whylen, "%s", twohop::status_reason(rc));
        return twohop::fail_everywhere(c, rc, why);
    }
    twohop::count(TWOHOP_COUNTER_ENQUEUED_CALLS);
    twohop::count(TWOHOP_COUNTER_ENQUEUED_MULTINODE_CALLS);
    if (c->verbose >= 3) {
        char msg[160];
        std::snprintf(msg, sizeof(msg), "stream-ordered call on %d nodes: %llu bytes, token %llu, "
                      "through a host copy (%s)", c->topo.n_nodes(),
                      static_cast<unsigned long long>(bytes),
                      static_cast<unsigned long long>(token),
                      stage_kernel ? "one kernel" : "stream copies and memory operations");
        c->host.log(3, msg);
    }
    return TWOHOP_OK;
}
