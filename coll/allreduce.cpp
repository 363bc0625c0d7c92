/*
 * The blocking call and the stream-ordered call's front: the choice between the node's GPU path
 * and a host job (coll/schedule/: latency_job.h and pipeline_job.h have the step tables), and
 * the C entry points of the calls themselves. The communicator's progress, waits and failure
 * handling are comm.cpp.
 */
#include <chrono>
#include <cstdio>

#include "comm_state.h"
#include "core_counters.h"
#include "cuda_driver.h"
#include "gpu_node.h"
#include "memory_kind.h"
#include "posted/proxy.h"
#include "schedule/engine.h"
#include "schedule/stream_call.h"

using twohop::RankFlags;

namespace {

/*
 * One call, after the poisoned check. enqueue: the stream-ordered form (the application's
 * `stream` is not known to be complete yet); *enqueued = 1 when the call stayed on the stream.
 * Every other path first waits for the stream (join), then runs as a blocking call. A
 * communicator runs at most one GPU vote per call, whichever form each rank called: a rank
 * that declined the stream-ordered path goes on with the host path, as the ranks that called
 * the blocking form after their vote. Returns a twohop_status (the caller records failures).
 */
int run_call(twohop_comm *c, const twohop_userbuf &in, const twohop_userbuf &out,
             uint64_t count, const twohop_reduction &red, bool enqueue, void *stream,
             int *enqueued) {
    // A stream-ordered call still running on this rank's GPU writes this rank's flags: the
    // host must not write them before it has (gpu_node_enqueue drains itself if it declines).
    c->call_first_seq = c->seq.last() + 1;
    int rc = enqueue ? TWOHOP_OK : gpu_enqueue_drain(c);
    if (rc != TWOHOP_OK) return rc;
    bool joined = !enqueue;
    auto join = [&joined, stream]() {
        if (joined) return TWOHOP_OK;
        joined = true;
        return twohop_stream_sync(stream) == 0 ? TWOHOP_OK : TWOHOP_ERR_TRANSPORT;
    };
    const bool latency = twohop::latency_path(c, count, red.item_bytes);
    // GPU rounds: on one node the whole call can run on the GPU; with several nodes hop 1 of
    // the pipeline can (the latency path stays on the host). A rank that declines at once
    // votes no without waiting: the host job below publishes it when it starts.
    const bool gpu_vote = c->gpu_round && (c->topo.n_nodes() == 1 || !latency);
    const bool declines = gpu_vote && !enqueue && gpu_declines_at_once(in, out, red);
    if (gpu_vote && !declines) {
        bool taken = false;
        if (c->verbose >= 3) {
            c->gpu_hop1.call_entry = std::chrono::steady_clock::now();
            c->gpu_hop1.call_entry_cpu = twohop::thread_cpu_s();
        }
        // A GPU-posted call the proxy thread will run: wake it now, so that its wake-up
        // overlaps the node's rounds and the launch (gpu_posted_pipeline).
        if (!enqueue && c->gpu_posted && c->posted_wake_early && c->topo.n_nodes() > 1 &&
            in.device && out.device && count * red.item_bytes >= c->posted_proxy_min_bytes) {
            twohop::Proxy::instance().prewake();
        }
        if (enqueue && c->topo.n_nodes() == 1) {
            rc = gpu_node_enqueue(c, in, out, count, red, stream, &taken);
            if (rc != TWOHOP_OK) return rc;
            if (taken) {
                *enqueued = 1;
                return TWOHOP_OK;
            }
        } else {
            if ((rc = join()) != TWOHOP_OK) return rc;
            rc = gpu_node_allreduce(c, in, out, count, red, &taken);
            if (rc != TWOHOP_OK || taken) return rc;
        }
    }
    if ((rc = join()) != TWOHOP_OK) return rc;
    if (c->gpu_hop1.active && c->gpu_posted) {
        rc = gpu_posted_pipeline(c, out, count, red);
    } else {
        const std::unique_ptr<twohop::Job> job = twohop::make_job(c, in, out, count, red);
        if (declines) job->decline_first(gpu_decline_first);
        rc = twohop::drive(c, *job);
    }
    if (c->gpu_hop1.active && rc == TWOHOP_OK) twohop::count(TWOHOP_COUNTER_GPU_HOP1_CALLS);
    if (c->gpu_hop1.active && rc != TWOHOP_OK) gpu_settle(c);
    c->gpu_hop1.active = false;
    c->gpu_hop1.gather = false;
    return rc;
}

/* The poisoned check and failure recording around run_call. */
int call(twohop_comm *c, const twohop_userbuf &in, const twohop_userbuf &out, uint64_t count,
         const twohop_reduction &red, bool enqueue, void *stream, int *enqueued, char *why,
         size_t whylen) {
    if (c->poisoned != TWOHOP_OK) {
        twohop::poisoned_message(c, why, whylen);
        return TWOHOP_ERR_POISONED;
    }
    if (count == 0) return TWOHOP_OK;
    // A blocking call from inside the progress of a call this thread runs on the same
    // communicator (a nested collective) cannot be ordered: an error, never a self-deadlock.
    if (twohop::held_by_this_thread(c)) {
        if (why && whylen) {
            std::snprintf(why, whylen, "allreduce started on a communicator from inside the "
                          "progress of another allreduce on it (a nested collective)");
        }
        return TWOHOP_ERR_HOST;
    }
    // After the calls queued before this one (non-blocking, persistent), which may fail.
    twohop::lock_engine(c);
    twohop::drain_queue(c);
    const int rc = c->poisoned != TWOHOP_OK
                       ? TWOHOP_ERR_POISONED
                       : run_call(c, in, out, count, red, enqueue, stream, enqueued);
    twohop::unlock_engine(c);
    if (rc == TWOHOP_ERR_POISONED) {
        twohop::poisoned_message(c, why, whylen);
        return rc;
    }
    if (rc != TWOHOP_OK) {
        c->fail(rc, twohop::status_reason(rc));
        if (why && whylen) std::snprintf(why, whylen, "%s", twohop::status_reason(rc));
    }
    return rc;
}

} // namespace

extern "C" int twohop_comm_allreduce(twohop_comm *c, const twohop_userbuf *in,
                                     const twohop_userbuf *out, uint64_t count,
                                     const twohop_reduction *red, char *why, size_t whylen) {
    int enqueued = 0;
    return call(c, *in, *out, count, *red, false, nullptr, &enqueued, why, whylen);
}

extern "C" int twohop_comm_allreduce_enqueue(twohop_comm *c, const twohop_userbuf *in,
                                             const twohop_userbuf *out, uint64_t count,
                                             const twohop_reduction *red, void *stream,
                                             int *enqueued, char *why, size_t whylen) {
    *enqueued = 0;
    // (A stream being captured into a CUDA graph never gets here: the front ends refuse it
    // before any staging, twohop_comm_refuse_capture.)
    // Several nodes: the call stays on the stream when this rank's buffers allow it
    // (schedule/stream_call.h); a poisoned communicator fails in call() as always.
    if (c->poisoned == TWOHOP_OK) {
        bool taken = false;
        const int rc = twohop_stream_enqueue_multinode(c, *in, *out, count, *red, stream, &taken,
                                                       why, whylen);
        if (taken) {
            *enqueued = rc == TWOHOP_OK ? 1 : 0;
            return rc;
        }
    }
    return call(c, *in, *out, count, *red, true, stream, enqueued, why, whylen);
}

extern "C" int twohop_stream_sync(void *stream) {
    const int dev = stream ? twohop::cuda::stream_device(stream) : -1;
    if (stream && dev < 0) return -1;
    if (!stream) return twohop::cuda::sync_current() ? 0 : -1;
    return twohop::cuda::stream_sync(dev, stream) ? 0 : -1;
}

extern "C" int twohop_stream_capturing(void *stream) {
    return twohop::cuda::stream_capturing(stream ? stream : twohop::cuda::legacy_stream()) != 0;
}

extern "C" int twohop_comm_refuse_capture(twohop_comm *c, char *why, size_t whylen) {
    // The calls queued before this one end first (their failures are theirs) -- unless this
    // thread is inside one of them (a nested call: the lock is not re-entrant).
    if (!twohop::held_by_this_thread(c)) {
        twohop::lock_engine(c);
        twohop::drain_queue(c);
        twohop::unlock_engine(c);
    }
    char msg[256];
    if (c->poisoned != TWOHOP_OK) {
        twohop::poisoned_message(c, msg, sizeof(msg));
        if (why && whylen) std::snprintf(why, whylen, "%s", msg);
        return TWOHOP_ERR_POISONED;
    }
    std::snprintf(msg, sizeof(msg), "twohop_allreduce_enqueue on a stream being captured into a "
                  "CUDA graph is refused (a replay would run the stream's half of the call "
                  "without its host half; or the stream's capture state could not be read)");
    c->call_first_seq = c->seq.last() + 1;
    c->fail(TWOHOP_ERR_HOST, msg);
    if (why && whylen) std::snprintf(why, whylen, "%s", msg);
    return TWOHOP_ERR_HOST;
}

extern "C" void twohop_comm_abort(twohop_comm *c, int status, const char *why) {
    c->call_first_seq = c->seq.last() + 1; // the call this rank cannot take part in
    if (c->poisoned == TWOHOP_OK) c->fail(status, why ? why : twohop::status_reason(status));
}
