#include "memory_kind.h"

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <sys/mman.h>
#include <unistd.h>

#include "cuda_driver.h"
#include "stream_copy.h"
#include "twohop_status.h"

namespace twohop {
namespace {

bool g_poison_testing = false;

int host_to(void *host, const void *user, std::size_t n) {
    std::memcpy(host, user, n);
    return TWOHOP_OK;
}

int host_from(void *user, const void *host, std::size_t n, bool streaming) {
    if (streaming) {
        copy_streaming(user, host, n);
    } else {
        std::memcpy(user, host, n);
    }
    return TWOHOP_OK;
}

int cuda_to(void *host, const void *user, std::size_t n) {
    return cuda::copy(host, user, n) ? TWOHOP_OK : TWOHOP_ERR_TRANSPORT;
}

int cuda_from(void *user, const void *host, std::size_t n, bool) {
    return cuda::copy(user, host, n) ? TWOHOP_OK : TWOHOP_ERR_TRANSPORT;
}

/* Page range covering [p, p + n). */
void page_range(const void *p, std::size_t n, char **start, std::size_t *len) {
    const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    const uintptr_t a = reinterpret_cast<uintptr_t>(p) & ~(page - 1);
    const uintptr_t b = (reinterpret_cast<uintptr_t>(p) + n + page - 1) & ~(page - 1);
    *start = reinterpret_cast<char *>(a);
    *len = b - a;
}

/* Copies with the protection of the poisoned pages lifted for the copy only. */
int poisoned_copy(void *dst, const void *src, std::size_t n, const void *poisoned, int prot) {
    if (n == 0) return TWOHOP_OK;
    char *start;
    std::size_t len;
    page_range(poisoned, n, &start, &len);
    if (mprotect(start, len, prot) != 0) return TWOHOP_ERR_HOST;
    std::memcpy(dst, src, n);
    return mprotect(start, len, PROT_NONE) == 0 ? TWOHOP_OK : TWOHOP_ERR_HOST;
}

int poisoned_to(void *host, const void *user, std::size_t n) {
    return poisoned_copy(host, user, n, user, PROT_READ);
}

int poisoned_from(void *user, const void *host, std::size_t n, bool) {
    return poisoned_copy(user, host, n, user, PROT_READ | PROT_WRITE);
}

/* True when p lies in a mapping without any access rights (/proc/self/maps "---p"). */
bool is_poisoned(const void *p) {
    FILE *f = std::fopen("/proc/self/maps", "r");
    if (!f) return false;
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    char line[512];
    bool found = false;
    while (std::fgets(line, sizeof(line), f)) {
        unsigned long lo, hi;
        char perms[8];
        if (std::sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) != 3) continue;
        if (a >= lo && a < hi) {
            found = std::strncmp(perms, "---", 3) == 0;
            break;
        }
    }
    std::fclose(f);
    return found;
}

const MemOps kHost = {host_to, host_from};
const MemOps kCuda = {cuda_to, cuda_from};
const MemOps kPoisoned = {poisoned_to, poisoned_from};

} // namespace

const MemOps &mem_ops(MemoryKind kind) {
    switch (kind) {
    case MemoryKind::Cuda: return kCuda;
    case MemoryKind::Poisoned: return kPoisoned;
    case MemoryKind::Host:
    default: return kHost;
    }
}

MemoryKind memory_kind(const void *p) {
    if (p == nullptr) return MemoryKind::Host;
    if (g_poison_testing && is_poisoned(p)) return MemoryKind::Poisoned;
    return cuda::is_device_memory(p) ? MemoryKind::Cuda : MemoryKind::Host;
}

void set_poisoned_memory_testing(bool on) { g_poison_testing = on; }

} // namespace twohop
