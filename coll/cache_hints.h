/*
 * demote_lines: hint the CPU to move the cache lines of [p, p + n) from this core's private
 * caches to the shared last-level cache (CLDEMOTE, Intel SDM vol. 2A). twohop writes a slot or
 * a result shard on one core and reads it on others right after; without the hint every reader
 * snoops the line out of the writer's L2, which measured as the limit of the shared-memory
 * hops on a 16-core Sapphire Rapids VM (docs/perf.md). CLDEMOTE is encoded in the reserved-NOP
 * space (0F 1C /0), so processors without it execute a NOP.
 */
#ifndef TWOHOP_CACHE_HINTS_H
#define TWOHOP_CACHE_HINTS_H

#include <cstddef>
#include <cstdint>

namespace twohop {

inline void demote_lines(const void *p, std::size_t n) {
#if defined(__x86_64__)
    const char *c = static_cast<const char *>(p);
    const char *end = c + n;
    for (c = reinterpret_cast<const char *>(reinterpret_cast<uintptr_t>(c) & ~uintptr_t(63));
         c < end; c += 64) {
        // cldemote (%rax): 0F 1C /0 with ModRM 0x00; spelled as bytes for older assemblers.
        __asm__ volatile(".byte 0x0f, 0x1c, 0x00" ::"a"(c) : "memory");
    }
#else
    (void)p;
    (void)n;
#endif
}

} // namespace twohop

#endif
