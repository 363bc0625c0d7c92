/*
 * copy_streaming: memcpy with non-temporal stores for the destination. Used for the hop-3
 * copy into large receive buffers: streaming stores skip the read-for-ownership of every
 * destination cache line (one DRAM read per 64 bytes written) and do not evict the shared
 * buffers from the caches. Falls back to memcpy where SSE2 is unavailable.
 */
#ifndef TWOHOP_STREAM_COPY_H
#define TWOHOP_STREAM_COPY_H

#include <cstddef>

namespace twohop {

/* Copies n bytes from src to dst (no overlap); the stores are globally visible on return. */
void copy_streaming(void *dst, const void *src, std::size_t n);

} // namespace twohop

#endif
