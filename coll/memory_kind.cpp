#include "memory_kind.h"

#include <cstring>

#include "stream_copy.h"

namespace twohop {
namespace {

void host_to_shm(void *shm, const void *user, std::size_t n) { std::memcpy(shm, user, n); }

void host_from_shm(void *user, const void *shm, std::size_t n, bool streaming) {
    if (streaming) {
        copy_streaming(user, shm, n);
    } else {
        std::memcpy(user, shm, n);
    }
}

const MemOps kHost = {host_to_shm, host_from_shm};

} // namespace

const MemOps &mem_ops(MemoryKind kind) {
    switch (kind) {
    case MemoryKind::Host:
    default:
        return kHost;
    }
}

} // namespace twohop
