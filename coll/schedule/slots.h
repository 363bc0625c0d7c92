/*
 * The node's shared-memory steps every allreduce path is made of: reading a user buffer into
 * a slot, reducing the local ranks' slots, writing a result out, and the per-segment flags
 * (arrived, done) local ranks publish and test. Nothing here waits: a test that cannot be
 * decided yet returns TWOHOP_PENDING, and the job (job.h) is advanced again later.
 */
#ifndef TWOHOP_SCHEDULE_SLOTS_H
#define TWOHOP_SCHEDULE_SLOTS_H

#include <atomic>
#include <cstdint>

#include "comm_state.h"
#include "reducer.h"

namespace twohop {

using FlagPtr = std::atomic<uint64_t> RankFlags::*;
constexpr FlagPtr kArrived = &RankFlags::arrived;
constexpr FlagPtr kDone = &RankFlags::done;

/*
 * out = in_f op in_{f+1} op ... op in_{f+L-1} (indices mod L, f = `first`) over `items` items
 * at byte offset off_bytes of the segment, where in_l is local rank l's slot of set `set`,
 * except that my own contribution is read from `own` when given (the pipeline does not copy a
 * rank's own shards into its slot). The latency path uses first = 0 on every rank; the
 * pipeline starts each shard at its owner, so owners do not all read slot 0 at once.
 * Returns a twohop_status (TWOHOP_ERR_REDUCE when a user function failed).
 */
int reduce_slots(twohop_comm *c, int set, uint64_t off_bytes, uint64_t items, char *out,
                 const Reducer &red, const char *own = nullptr, int first = 0);

/* Canonical bytes [off, off + len) of the user's input into dst (shared memory). */
int read_in(twohop_comm *c, const twohop_userbuf &b, char *dst, uint64_t off, uint64_t len);

/* src (shared or private memory) into canonical bytes [off, off + len) of the user's output;
 * `streaming` selects non-temporal stores for host memory. */
int write_out(twohop_comm *c, const twohop_userbuf &b, uint64_t off, const char *src,
              uint64_t len, bool streaming);

/*
 * The word local ranks compare before using each other's inputs: message bytes and item size
 * (ranks must agree on both; a user op with another count of the same signature differs in
 * item size). Odd multiplier from the 64-bit golden ratio (Knuth, TAOCP vol. 3, 6.4).
 */
inline uint64_t call_word(uint64_t msg_bytes, uint64_t item_bytes) {
    return msg_bytes * 0x9E3779B97F4A7C15ULL ^ item_bytes;
}

/* Publishes my input of segment s (set `set`) after recording the call's word. */
void publish_arrived(twohop_comm *c, int set, uint64_t s, uint64_t word);

/*
 * Every local rank's counter `which` reached `target`: TWOHOP_OK, or TWOHOP_ERR_PEER when a
 * node peer reported a failure of a call this rank has reached; TWOHOP_PENDING while some
 * counter is behind.
 */
int test_all(twohop_comm *c, FlagPtr which, uint64_t target);

/* test_all(arrived, s), then every local rank's call word of set `set` must equal `word`
 * (else TWOHOP_ERR_MISMATCH). */
int test_arrived(twohop_comm *c, int set, uint64_t s, uint64_t word);

} // namespace twohop

#endif
