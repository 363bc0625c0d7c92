/*
 * Reuse of node shared-memory segments between communicators of the same processes.
 *
 * Creating a segment costs most of a communicator's set-up (the leader reserves every page
 * with posix_fallocate, the kernel zeroes them) and freeing it most of MPI_Comm_free. A
 * communicator freed in good health therefore hands its segment to the process's ShmCache
 * instead of unmapping it; the next communicator whose node has the same processes in the same
 * local order and the same layout takes it back, if every one of its local ranks kept it.
 *
 * Agreement without an extra round: at set-up each rank takes its cached segments out of the
 * cache (so a concurrent set-up cannot offer them too) and publishes them as ShmOffers in the
 * set-up allgather; every rank then evaluates choose_reuse for every node from the same
 * allgathered data, so all ranks reach the same decision. A reused segment's flags hold values
 * up to the old communicator's last sequence number: the new communicator's sequence numbers
 * start above the largest final_seq of any reused segment (agreed the same way), so no stale
 * flag can satisfy a wait. Offers not reused are unmapped at once.
 */
#ifndef TWOHOP_SHM_CACHE_H
#define TWOHOP_SHM_CACHE_H

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "node_shm.h"

namespace twohop {

/* One retained segment as published at set-up. token 0 = no offer. */
struct ShmOffer {
    uint64_t token;     // identity of the segment: a hash of its name (same on every local rank)
    uint64_t shape;     // shm_shape of the communicator it served
    uint64_t final_seq; // that communicator's sequence number when it was freed
};
constexpr int kShmOffers = 2; // segments a process retains (and offers) at most

/* Hash of the segment name (never 0). */
uint64_t shm_token(const std::string &name);
/* Hash of the layout and the node's member processes in local-rank order (never 0). */
uint64_t shm_shape(const ShmLayout &layout, const std::vector<uint64_t> &member_proc_keys);

/*
 * The segment a node reuses: the first of the first local rank's offers whose shape is `shape`
 * and which every local rank offers too (offers[l] = local rank l's kShmOffers offers). 0 when
 * none. Pure: every rank evaluates it on the same allgathered offers.
 */
uint64_t choose_reuse(const std::vector<const ShmOffer *> &offers, uint64_t shape);

struct RetainedShm {
    ShmOffer offer{};
    std::unique_ptr<NodeShm> shm;
};

/* The process's retained segments (thread-safe). */
class ShmCache {
  public:
    static ShmCache &process();
    /* Takes every retained segment out, most recently retained first (at most kShmOffers). */
    std::vector<RetainedShm> take();
    /* Retains a segment; the oldest beyond kShmOffers is unmapped. */
    void put(RetainedShm r);
    /* Unmaps every retained segment (component close). */
    void clear();
    /* Segments retained now (tests). */
    size_t size();

  private:
    std::mutex m_;
    std::vector<RetainedShm> kept_; // oldest first
};

} // namespace twohop

#endif
