/*
 * Twohop-private communicator ids, agreed at set-up, carried in every hop-2 tag.
 *
 * Every process keeps the set of ids its live twohop communicators use (all processes share
 * one UCX worker per process, so tags must differ between the communicators of a process).
 * Agreement, in rounds over the set-up Exchange (same idea as Open MPI's context-id
 * allocation):
 *   1. every rank reserves the smallest id >= floor that is free locally and proposes it;
 *   2. the candidate is the largest proposal; every rank reserves the candidate if it is free
 *      locally (or is its own proposal) and releases its own proposal otherwise;
 *   3. if the candidate was taken on some rank (agreed OR), everyone releases it and retries
 *      with floor = candidate + 1.
 * Reservations are atomic per process (a mutex), so threads setting up different
 * communicators at once never obtain the same id. Ids are < kMaxCommIds (the width of the
 * tag field); running out is a fallback reason, not an error.
 */
#ifndef TWOHOP_COMM_IDS_H
#define TWOHOP_COMM_IDS_H

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <set>
#include <string>

#include "setup_exchange.h"

namespace twohop {

constexpr uint32_t kCommIdBits = 22;
constexpr uint32_t kMaxCommIds = uint32_t(1) << kCommIdBits;

/*
 * The ids one process's live communicators hold. Thread-safe. New ids are proposed above the
 * last one handed out (wrapping to 0 only when the top of the id space is taken), so a freshly
 * created communicator does not reuse the id of one just freed: messages still in flight for
 * the old one (a failed call's abort, an interrupted ring) can never match the new one's.
 */
class CommIdRegistry {
  public:
    /* Reserves the smallest free id >= max(floor, the next id after the last reserved); wraps
     * around to the smallest free id >= floor when there is none above. kMaxCommIds when the
     * space is full. */
    uint32_t reserve_from(uint64_t floor);
    /* Reserves exactly `id`; false when another communicator holds it. */
    bool reserve_exact(uint32_t id);
    void release(uint32_t id);
    std::size_t size();

  private:
    uint32_t smallest_free(uint64_t from) const;
    std::mutex mutex_;
    std::set<uint32_t> used_;
    uint64_t next_ = 0;
};

/* The registry of this process. */
CommIdRegistry &process_comm_ids();

/*
 * Agrees an id for a new communicator. Returns TWOHOP_OK with *id set (reserved in `reg`
 * until released), TWOHOP_ERR_NO_MEMORY when the id space is exhausted on some rank (same
 * answer everywhere), or the Exchange's failure status with *err set.
 */
int agree_comm_id(Exchange &ex, CommIdRegistry &reg, uint32_t *id, std::string *err);

} // namespace twohop

#endif
