/*
 * Memory kinds of user buffers and the copy operations the data path uses for each. The
 * schedule in allreduce.cpp never calls memcpy on a user buffer directly: it goes through the
 * MemOps of the buffers' kind, so a device kind (CUDA, later) adds a table entry and its own
 * kernels without touching the schedule. Today only host memory exists; the shared-memory
 * segment is always host memory.
 */
#ifndef TWOHOP_MEMORY_KIND_H
#define TWOHOP_MEMORY_KIND_H

#include <cstddef>

namespace twohop {

enum class MemoryKind { Host };

struct MemOps {
    /* user buffer -> shared memory (hop 1 copy-in), n bytes */
    void (*to_shm)(void *shm, const void *user, std::size_t n);
    /* shared memory -> user buffer (hop 3), n bytes; `streaming` asks for non-temporal stores */
    void (*from_shm)(void *user, const void *shm, std::size_t n, bool streaming);
};

/* The copy operations for buffers of `kind`. */
const MemOps &mem_ops(MemoryKind kind);

} // namespace twohop

#endif
