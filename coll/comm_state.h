/*
 * twohop_comm: everything twohop keeps for one communicator (behind the opaque C handle).
 * Owned by the adapter's module; created by twohop_comm_setup on the first allreduce,
 * destroyed with the module. State owned here:
 *   - topology (who shares a node, shard ownership, rails), the agreed private id
 *   - the node's shared-memory segment and this rank's sequence counter
 *   - hop 2: endpoints to the left/right rail neighbours of each owned shard (borrowed from
 *     the process's worker), ring state machines and their scratch buffers (set-up time)
 *   - failure state: a failed call poisons the communicator; liveness data of local peers
 */
#ifndef TWOHOP_COMM_STATE_H
#define TWOHOP_COMM_STATE_H

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "coarse_clock.h"
#include "gpu_node.h"
#include "hop2_slot.h"
#include "memory_kind.h"
#include "node_shm.h"
#include "sequence.h"
#include "topology.h"
#include "twohop_core.h"
#include "worker.h"

/* Hop 2 view of one shard this rank owns. */
struct twohop_rail {
    int shard = 0;
    int n = 1;                                      // rail members (= nodes)
    int pos = 0;                                    // my position on the ring (= my node index)
    const twohop::ucx::Endpoint *right = nullptr;   // to position pos+1
    const twohop::ucx::Endpoint *left = nullptr;    // to position pos-1 (failure detection)
    std::vector<const twohop::ucx::Endpoint *> peers; // by position: Rabenseifner partners
};

/*
 * Hop-2 tag layout (64 bits): comm id (22) | segment seq mod 2^16 (16) | shard (12) | last (1) |
 * step (13). `last` marks the call's last segment: ring receives ignore it when matching and
 * compare it afterwards, so a rank whose call has more segments than its neighbour's (a count
 * that differs between ranks) gets an error instead of waiting for a segment nobody sends.
 * Bounds checked at set-up: shards <= 4095, nodes <= 4096 (2(n-1) ring steps < 2^13). Shard
 * field 4095 is reserved for the communicator's abort message (abort_tag).
 */
constexpr int kTagShardBits = 12;
constexpr int kTagStepBits = 14; // including the `last` bit
constexpr int kTagSeqBits = 16;
constexpr uint64_t kTagLastBit = uint64_t(1) << (kTagStepBits - 1);
constexpr int kMaxShards = (1 << kTagShardBits) - 1;
constexpr int kMaxNodes = 1 << (kTagStepBits - 2);

namespace twohop {
struct QueuedCall;  // coll/schedule/engine.h
class StreamSlots;  // coll/schedule/stream_call.h
}

struct twohop_comm {
    twohop_host host;
    twohop::Topology topo;
    twohop::NodeShm shm;
    uint64_t shm_token = 0;        // identity of the segment (shm_cache.h), same on local ranks
    uint64_t shm_shape = 0;        // layout + local member processes it serves
    bool shm_reused = false;       // taken over from a freed communicator at set-up
    int depth = 2;
    int post_batch = 4;
    uint64_t slot_bytes = 0;
    uint64_t small_bytes = 0;
    uint64_t stream_bytes = 0;     // 0 = never use streaming stores for hop 3
    int verbose = 0;               // coll_twohop_verbose (what is worth formatting)
    uint32_t comm_id = 0;          // agreed at set-up, unique among this process's communicators
    bool id_reserved = false;
    // Segments processed on this communicator (same on all ranks). Written by the engine lock's
    // holder, or by a stream-ordered call's calling thread reserving numbers (engine.h) while
    // the proxy thread's failure checks read it: relaxed atomic accesses.
    twohop::Sequence seq;
    uint64_t call_first_seq = 1;   // the first sequence number of the call in progress
    std::vector<int> my_shards;
    const twohop::MemOps *mem = &twohop::mem_ops(twohop::MemoryKind::Host); // user buffers

    bool gpu_round = false;        // run the GPU path's decision rounds (gpu_node.h): every
                                   // rank has the driver and kernels (agreed at set-up)
    GpuStaging gpu_staging[2];     // [0] input, [1] output, for buffers IPC cannot share
    GpuHop1 gpu_hop1;              // >1 node: hop 1 on the GPU for this call
    bool gpu_decline_logged = false; // "a peer GPU is out of reach" said once (verbose 1)
    bool gpu_stale_logged = false;   // "a stale mapping would be closed" said once (verbose 1)
    GpuPathClock gpu_clock;        // verbose >= 2: the GPU path's phases (gpu_node.h)

    twohop::ucx::Worker *worker = nullptr; // non-null only with more than one node
    std::vector<twohop_rail> rails;        // one per owned shard (empty on one node)
    std::vector<twohop::Hop2Slot> hop2;    // every hop-2 op: [set * rails.size() + i] (hop2_slot.h)
    int hop2_alg = 2;                      // 0 ring, 1 Rabenseifner, 2 by size (agreed)
    uint64_t rhd_max_bytes = 65536;        // hop2_alg 2: largest shard sent with Rabenseifner
    int rhd_min_nodes = 8;                 // hop2_alg 2: fewest nodes for Rabenseifner
    // Latency path between node leaders (local rank 0, the rail of shard 0): recursive
    // doubling (latency_hop2 0) with endpoints to its partners by node position, one per set.
    int latency_hop2 = 0;
    bool gpu_posted = false;               // coll_twohop_gpu_posted (agreed at set-up)
    uint64_t gpu_one_kernel_bytes = 0;     // coll_twohop_gpu_one_kernel_max_bytes (agreed)
    bool gpu_hop3_gather = false;          // coll_twohop_gpu_hop3_gather (agreed)
    uint64_t gather_min_bytes = 0;         // coll_twohop_gpu_hop3_gather_min_bytes (agreed)
    uint64_t posted_wide_bytes = 0;        // coll_twohop_posted_kernel_wide_bytes
    bool async_progress = true;            // coll_twohop_async_progress (this process)
    bool posted_nonblocking = false;       // coll_twohop_posted_nonblocking (this process;
                                           //   the node agrees per call in its vote)
    uint64_t async_start_bytes = 131072;   // coll_twohop_async_start_bytes (this process)
    bool stream_on_device = false;         // coll_twohop_enqueue_on_device (this process)
    uint64_t stream_on_device_min = 0;     // coll_twohop_enqueue_on_device_min_bytes
    uint64_t stream_stage_kernel_max = 0;  // coll_twohop_enqueue_stage_kernel_max_bytes
    bool vnode_shm = false;                // coll_twohop_vnode_shm_transport (agreed)
    int posted_batch = 1;                  // coll_twohop_posted_batch
    int posted_kernel_blocks = 0;          // coll_twohop_posted_kernel_blocks (0: stream ops)
    uint64_t posted_proxy_min_bytes = 0;   // coll_twohop_posted_proxy_min_bytes
    bool posted_wake_early = true;         // coll_twohop_posted_wake_early
    int posted_wake_lead_us = 50;          // coll_twohop_posted_wake_lead_us
    int posted_wake_spin_us = 0;           // coll_twohop_posted_wake_spin_us
    int posted_wake_quantile = 95;         // coll_twohop_posted_wake_quantile
    int posted_wake_nap_us = 10;           // coll_twohop_posted_wake_nap_us
    std::vector<const twohop::ucx::Endpoint *> rd_peers;
    std::vector<char> scratch;             // one slot_bytes block per ring
    std::vector<char> private_out;         // latency-path result when `out` is not direct

    // Failure handling.
    int poisoned = TWOHOP_OK;              // status of the call that failed
    std::string failure;                   // its reason
    bool quarantined = false;              // UCX may still own ring buffers: never unmap
    double timeout_s = 0;                  // coll_twohop_timeout (0 = none)
    std::vector<int64_t> local_pids;       // [local rank] pid, or 0 when not checkable
    twohop::CoarseClock::time_point next_liveness{};
    // Abort messages between rail neighbours (>1 node): a rank whose call failed tells its
    // neighbours, which fail too and tell theirs, so no rank of the communicator waits forever
    // for one that gave up. One receive is posted for the communicator's life.
    // The message: {status, first sequence number of the failed call}. A rank still finishing
    // an earlier call (a lower sequence number) completes it and fails the failed call itself
    // once it gets there, so a correct call never fails because a later one did elsewhere.
    struct AbortMessages {
        twohop::ucx::Request recv;
        uint64_t in[2] = {0, 0};
        std::vector<twohop::ucx::Request> sends; // 2 per rail (right, left)
        uint64_t out[2] = {0, 0};
        bool posted = false;
    };
    std::unique_ptr<AbortMessages> aborts;   // heap: leaked, not freed, if UCX keeps it

    // Non-blocking and persistent calls in flight (coll/schedule/engine.h), oldest first.
    // They run one at a time in call order (MPI matches collectives in program order); a
    // blocking call first completes every one of them. `busy` is the communicator's engine
    // lock: held by whichever thread advances the queue or runs a blocking call (the calling
    // thread, or MPI progress in any thread); the progress callback only ever tries it.
    std::deque<twohop::QueuedCall *> queue;
    std::deque<twohop::QueuedCall *> completed; // finished, done function not yet run
    std::atomic<bool> busy{false};
    // The thread that holds `busy` (pthread_self(); 0: none), written by the holder after it
    // took the lock and before it lets go. Only a thread comparing it with its own id reads
    // it, so relaxed order suffices: a thread always sees its own last write, and another
    // thread's id never equals its own (twohop::held_by_this_thread).
    std::atomic<unsigned long> busy_holder{0};
    // Calls queued without the engine lock (stream-ordered calls: their calling thread must
    // not wait for a pass of the proxy thread): moved to the back of `queue`, in order, by the
    // next holder of the lock before it advances or queues anything.
    std::mutex incoming_mutex;
    std::vector<twohop::QueuedCall *> incoming;
    std::atomic<bool> has_incoming{false};
    // Queued calls that take their sequence numbers from `seq` when they start (every job but
    // reserved ones, job.h: reserved_first_seq): incremented by the starting thread, decremented
    // when the call finishes. At 0 the calling thread owns `seq` (gpu_node.h: gpu_stream_posted).
    // Kept only where that is asked (several nodes, gpu_round, stream_on_device: engine.cpp,
    // submit_job); 0 elsewhere.
    std::atomic<long> lazy_jobs{0};
    // Whether it is in the engine's registry: a starting call takes the registry's mutex only
    // when it is not (the proxy may hold that mutex for a long pass over other communicators).
    // Cleared by progress_all under the engine lock (engine.cpp).
    std::atomic<bool> registered{false};
    // Stream-ordered calls on several nodes (schedule/stream_call.h): their host copies, and
    // the token of the last one (increasing; the stream and the host compare against it).
    std::unique_ptr<twohop::StreamSlots> stream_slots;
    uint64_t stream_token = 0;
    uint64_t stream_ready_calls = 0; // stream-ordered calls the node ran on the GPU (several
                                     // nodes): picks each call's RankFlags::ready word

    ~twohop_comm();

    /* Tag of hop-2 messages of segment s, shard `shard` (step 0; the ring adds the step). */
    uint64_t rail_tag(uint64_t s, int shard) const {
        return (uint64_t(comm_id) << (kTagSeqBits + kTagShardBits + kTagStepBits)) |
               ((s & ((uint64_t(1) << kTagSeqBits) - 1)) << (kTagShardBits + kTagStepBits)) |
               (uint64_t(shard) << kTagStepBits);
    }
    /* Tag of the communicator's abort message (shard field 4095, never a real shard). */
    uint64_t abort_tag() const {
        return (uint64_t(comm_id) << (kTagSeqBits + kTagShardBits + kTagStepBits)) |
               (uint64_t(kMaxShards) << kTagStepBits);
    }
    /* Posts the abort receive (set-up, >1 node). */
    int post_abort_recv();
    char *ring_scratch(int set, size_t i) {
        return scratch.data() + (set * rails.size() + i) * slot_bytes;
    }

    /*
     * One round of progress: advances in-flight rings, UCX and Open MPI; checks that no local
     * peer reported a failure and (every 100 ms) that local peer processes still exist.
     * Returns a twohop_status.
     */
    int poll();
    /*
     * poll() without the host MPI's progress: UCX, the hop-2 operations, the node's failure
     * flags and peer liveness only. The only progress the proxy thread and the MPI progress
     * callback may make (neither may call back into the MPI library).
     */
    int poll_transport();
    /* True when a local peer's process is gone (kill(pid, 0) finds no such process). */
    bool local_peer_gone() const;
    /* Spins (polling every 16 checks) until `flag` reaches `target`; bounded by timeout_s. */
    int wait_for(const std::atomic<uint64_t> &flag, uint64_t target);
    /* Spins (with poll) until every local rank's counter `which` reaches `target`; then fails
     * with peer_failure's status when a node peer reported a failure. */
    int wait_all(std::atomic<uint64_t> twohop::RankFlags::*which, uint64_t target);
    /* Polls until done() holds; bounded by timeout_s like wait_for. */
    int poll_until(const std::function<bool()> &done);
    /* True when local peer i failed a call this rank has reached (its first sequence number is
     * at most this rank's current one). */
    bool peer_failed(int i) {
        twohop::RankFlags &f = shm.flags(i);
        return f.failed.load(std::memory_order_acquire) != 0 &&
               f.failed_seq.load(std::memory_order_relaxed) <= seq.last();
    }
    /* What a rank told of another rank's failure (its failure word, or a hop-2 abort message,
     * carrying that rank's status) fails its call with: TWOHOP_ERR_MISMATCH when the call was
     * erroneous there (ranks passed different message sizes), so that every rank of the call
     * reports the same MPI error class (MPI_ERR_TRUNCATE), told or not; else
     * TWOHOP_ERR_PEER. */
    static int told_status(uint64_t peer_status) {
        return peer_status == static_cast<uint64_t>(TWOHOP_ERR_MISMATCH) ? TWOHOP_ERR_MISMATCH
                                                                           : TWOHOP_ERR_PEER;
    }
    /* peer_failed(i) as the status this rank fails with (told_status), or TWOHOP_OK. */
    int peer_failure(int i) {
        if (!peer_failed(i)) return TWOHOP_OK;
        return told_status(shm.flags(i).failed.load(std::memory_order_acquire));
    }
    /* Starts hop 2 of rail i (set `set`) over data[0, items) with the agreed algorithm. */
    int start_hop2(int set, size_t i, char *data, uint64_t items, const twohop::Reducer *red,
                   uint64_t tag, bool last);
    /* True while hop 2 of rail i (set `set`) is in flight. */
    bool hop2_active(int set, size_t i) const {
        return hop2[set * rails.size() + i].active();
    }
    /* Whether a shard of `bytes` among n nodes goes by Rabenseifner: depends only on agreed
     * parameters, the node count and the shard size (the same on every rank of the rail). */
    bool use_rabenseifner(int n, uint64_t bytes) const {
        return hop2_alg == 1 || (hop2_alg == 2 && n >= rhd_min_nodes && bytes <= rhd_max_bytes);
    }
    /* Cancels every in-flight ring and recursive doubling; false when UCX kept a buffer. */
    bool cancel_transfers();
    /*
     * Records a failed call: cancels in-flight rings (quarantining their buffers when UCX does
     * not let go), tells the local peers through the control block, poisons the communicator.
     */
    void fail(int status, const std::string &why);
};

#endif
