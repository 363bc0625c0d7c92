#include "stream_copy.h"

#include <cstdint>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace twohop {

void copy_streaming(void *dst, const void *src, std::size_t n) {
#if defined(__SSE2__)
    auto *d = static_cast<char *>(dst);
    const auto *s = static_cast<const char *>(src);
    const std::size_t head = (16 - (reinterpret_cast<uintptr_t>(d) & 15)) & 15;
    if (n < head + 64) {
        std::memcpy(d, s, n);
        return;
    }
    std::memcpy(d, s, head);
    d += head;
    s += head;
    n -= head;
    std::size_t i = 0;
    for (; i + 64 <= n; i += 64) { // one cache line per iteration
        __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i *>(s + i));
        __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i *>(s + i + 16));
        __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i *>(s + i + 32));
        __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i *>(s + i + 48));
        _mm_stream_si128(reinterpret_cast<__m128i *>(d + i), a);
        _mm_stream_si128(reinterpret_cast<__m128i *>(d + i + 16), b);
        _mm_stream_si128(reinterpret_cast<__m128i *>(d + i + 32), c);
        _mm_stream_si128(reinterpret_cast<__m128i *>(d + i + 48), e);
    }
    std::memcpy(d + i, s + i, n - i);
    _mm_sfence(); // order the streaming stores before the flag that publishes completion
#else
    std::memcpy(dst, src, n);
#endif
}

} // namespace twohop
