/*
 * Memory kinds of user buffers and the copy operations the data path uses for each.
 *
 * The kind is per call and per buffer (send and receive buffers may differ; ranks may pass
 * different kinds) and never changes the schedule or a fallback decision: it only decides how
 * THIS rank reaches its own bytes. The schedule never loads or stores user memory except
 * through a kind's operations (or, for the host kind, the direct pointer of a twohop_userbuf).
 *
 *   Host      plain or registered (pinned) host memory: memcpy / streaming stores
 *   Cuda      device, managed or stream-ordered pool memory of a CUDA device: copies through
 *             the CUDA driver, which twohop resolves at run time (cuda_driver.h); a process
 *             without a usable driver never sees this kind
 *   Poisoned  TESTING AID (coll_twohop_test_poisoned_memory=1): host pages mapped PROT_NONE,
 *             standing in for memory the host must not touch; its operations lift the
 *             protection around each copy, so any other host access crashes the test
 *
 * Operations return 0 or a twohop_status (the error channel); a copy has completed, and its
 * data is visible to the destination's consumers, when the operation returns.
 */
#ifndef TWOHOP_MEMORY_KIND_H
#define TWOHOP_MEMORY_KIND_H

#include <cstddef>

namespace twohop {

enum class MemoryKind { Host = 0, Cuda = 1, Poisoned = 2 };

struct MemOps {
    /* user buffer -> host memory (hop 1 copy-in, staging), n bytes */
    int (*to_host)(void *host, const void *user, std::size_t n);
    /* host memory -> user buffer (hop 3, staging), n bytes; `streaming` asks for
     * non-temporal stores (host kind only) */
    int (*from_host)(void *user, const void *host, std::size_t n, bool streaming);
};

/* The copy operations for buffers of `kind`. */
const MemOps &mem_ops(MemoryKind kind);

/* The kind of the memory at p (any pointer into an allocation). */
MemoryKind memory_kind(const void *p);

/* Turns the testing aid on or off (component open). */
void set_poisoned_memory_testing(bool on);

} // namespace twohop

#endif
