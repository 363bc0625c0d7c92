/*
 * NodeShm: the per-node shared-memory segment of one communicator, and its layout.
 *
 * Layout (offsets from the mapping's start; every block 4 KiB aligned):
 *   control   L flag lines of 256 bytes, one per local rank (its sequence counters), then L
 *             descriptor blocks of 256 bytes (what a rank publishes for the GPU path: IPC
 *             handles of its device buffers)
 *   set 0     L input slots of slot_bytes, then the result buffer of slot_bytes
 *   ...
 *   set D-1   (D = pipeline depth)
 * Footprint = 4 KiB-aligned(L * 512) + D * (L + 1) * slot_bytes: independent of the message
 * size (slot_bytes = coll_twohop_segment_bytes rounded up to 4 KiB).
 *
 * Lifecycle: the node leader creates the segment exclusively with mode 0600; after every
 * local rank has mapped it the leader unlinks the name, so nothing stays in /dev/shm even if
 * the job is killed later. Names (shm_name) carry the creator's uid, pid namespace, pid and a
 * random 64-bit nonce: unique across hosts, containers and jobs, and a segment left behind by
 * a leader killed between create and unlink is recognised (its pid is gone) and removed by
 * the next twohop process of the same user and pid namespace (remove_stale_segments).
 */
#ifndef TWOHOP_NODE_SHM_H
#define TWOHOP_NODE_SHM_H

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

namespace twohop {

/* Sequence counters one local rank publishes; each line has a single writer. Four 64-byte
 * lines: the counters written on every call; the message sizes; the stream-ordered words
 * (written by the GPU); and the failure words, written only when a call fails. The failure
 * words have a line of their own because every rank polls its peers' ones on each pass of a
 * queued call (twohop_comm::peer_failed): on a line the peer writes every call, each of those
 * reads missed in the cache (18 % of a non-blocking 8-byte call's time on 2 ranks; docs/perf.md,
 * "Where a small non-blocking call spends its time"). */
struct alignas(128) RankFlags {
    std::atomic<uint64_t> arrived; // input of segment `seq` copied into my slot
    std::atomic<uint64_t> reduced; // my shards of `seq` hold the final (post hop 2) result
    std::atomic<uint64_t> done;    // I finished reading every buffer of `seq`
    std::atomic<uint64_t> vote;    // GPU path round: (seq << 1) | "I can take it"
    std::atomic<uint64_t> desc_seq; // GPU round `seq`: my descriptor is published
    std::atomic<uint64_t> gathered; // hop 3 on the GPU: my shards of `seq` are in my device
                                    // receive buffer, where local peers copy them from
    std::atomic<uint64_t> pad0_[2];
    std::atomic<uint64_t> bytes[8]; // [set] message bytes of the call using that buffer set,
                                    // written before `arrived`: local peers compare sizes
    /* Stream-ordered GPU path: my input of `seq` is complete (written by my GPU stream, not
     * by the host). One word per call in flight: a multi-node call uses ready[n % kReadyWords]
     * for the communicator's n-th such call (twohop_comm::stream_ready_calls), so a call that
     * reaches the GPU before an earlier one (unordered streams) never satisfies the earlier
     * call's wait; the single-node form uses ready[0]. */
    static constexpr int kReadyWords = 8;
    std::atomic<uint64_t> ready[kReadyWords];
    std::atomic<uint64_t> failed;     // non-zero: my call failed (a twohop_status); peers stop
    std::atomic<uint64_t> failed_seq; // first sequence number of the call that failed (written
                                      // before `failed`): peers still in an earlier call finish it
    std::atomic<uint64_t> pad1_[6];
};
static_assert(sizeof(RankFlags) == 256, "flag lines of 256 bytes, one per rank");
static_assert(offsetof(RankFlags, failed) % 64 == 0 && offsetof(RankFlags, bytes) % 64 == 0 &&
                  offsetof(RankFlags, ready) % 64 == 0,
              "the failure words, the sizes and the ready words each begin a 64-byte line");

struct ShmLayout {
    int local_size = 0;
    int depth = 0;
    uint64_t slot_bytes = 0; // 4 KiB multiple

    static constexpr uint64_t kAlign = 4096;
    static constexpr uint64_t kDescBytes = 256;
    static uint64_t align_up(uint64_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

    uint64_t desc_offset(int local) const {
        return uint64_t(local_size) * sizeof(RankFlags) + uint64_t(local) * kDescBytes;
    }
    uint64_t control_bytes() const {
        return align_up(uint64_t(local_size) * (sizeof(RankFlags) + kDescBytes));
    }
    uint64_t set_bytes() const { return uint64_t(local_size + 1) * slot_bytes; }
    uint64_t slot_offset(int set, int local) const {
        return control_bytes() + uint64_t(set) * set_bytes() + uint64_t(local) * slot_bytes;
    }
    uint64_t result_offset(int set) const { return slot_offset(set, local_size); }
    uint64_t total_bytes() const { return control_bytes() + uint64_t(depth) * set_bytes(); }
};

/* "/twohop-<uid>-<pidns>-<pid>-<nonce hex>" for the segment a leader creates. */
std::string shm_name(uint64_t pidns, int64_t pid, uint64_t nonce);
/* This process's pid namespace id (inode of /proc/self/ns/pid; 0 when unknown). */
uint64_t pid_namespace();
/* A random 64-bit value from the kernel (getrandom), for names. */
uint64_t random_nonce();
/*
 * Unlinks segments in `dir` (normally /dev/shm) named by shm_name for this uid and pid
 * namespace whose creating process no longer exists. Returns the number removed and adds
 * their sizes to *bytes.
 */
int remove_stale_segments(const std::string &dir, uint64_t pidns, uint64_t *bytes);

class NodeShm {
  public:
    NodeShm() = default;
    ~NodeShm();
    NodeShm(const NodeShm &) = delete;
    NodeShm &operator=(const NodeShm &) = delete;
    /* Takes over o's mapping (o is left empty). */
    NodeShm(NodeShm &&o) noexcept { *this = std::move(o); }
    NodeShm &operator=(NodeShm &&o) noexcept;
    /* True while a segment is mapped. */
    bool mapped() const { return base_ != nullptr; }
    /* The segment's name (the same on every local rank). */
    const std::string &name() const { return name_; }

    /*
     * Leader: creates `name` (O_CREAT|O_EXCL, mode 0600), sizes it to layout.total_bytes()
     * with pages reserved (posix_fallocate, so a full /dev/shm is an error now rather than a
     * SIGBUS later), maps it and zeroes the control block. Returns false with *err set.
     */
    bool create(const std::string &name, const ShmLayout &layout, std::string *err);
    /* Other local ranks: maps an existing segment of the same layout. */
    bool attach(const std::string &name, const ShmLayout &layout, std::string *err);
    /* Leader, after every local rank attached: removes the name. */
    void unlink();
    /* Forgets the mapping without unmapping it (memory another agent may still write to). */
    void leak() { base_ = nullptr; }

    const ShmLayout &layout() const { return layout_; }
    RankFlags &flags(int local) { return reinterpret_cast<RankFlags *>(base_)[local]; }
    char *slot(int set, int local) { return base_ + layout_.slot_offset(set, local); }
    char *result(int set) { return base_ + layout_.result_offset(set); }
    /* Local rank `local`'s descriptor block (ShmLayout::kDescBytes bytes). */
    char *desc(int local) { return base_ + layout_.desc_offset(local); }

  private:
    bool map(int fd, std::string *err);
    char *base_ = nullptr;
    ShmLayout layout_;
    std::string name_;
    bool owner_ = false;
};

} // namespace twohop

#endif
