/*
 * A per-thread cache of freed objects of one class, for the objects every allreduce call
 * creates and destroys (the queued call, the latency-path job): a class that declares its
 * operator new/delete through ObjectCache<T> takes its memory from the calling thread's last
 * freed objects of that class (at most N kept per thread) instead of the allocator. Objects
 * may be freed on another thread than the one that made them: each thread keeps what it
 * frees. What a thread keeps is released when the thread ends. Under AddressSanitizer every
 * object goes to and from the allocator, so a use after free stays visible.
 */
#ifndef TWOHOP_SCHEDULE_OBJECT_CACHE_H
#define TWOHOP_SCHEDULE_OBJECT_CACHE_H

#include <cstddef>
#include <new>

namespace twohop {

#if defined(__SANITIZE_ADDRESS__)
#define TWOHOP_OBJECT_CACHE_SLOTS 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TWOHOP_OBJECT_CACHE_SLOTS 0
#endif
#endif
#ifndef TWOHOP_OBJECT_CACHE_SLOTS
#define TWOHOP_OBJECT_CACHE_SLOTS 8
#endif

template <typename T, int N = TWOHOP_OBJECT_CACHE_SLOTS> class ObjectCache {
  public:
    /* Memory for one object of `bytes` bytes (sizeof(T) comes from the cache); nullptr when
     * out of memory. */
    static void *get(std::size_t bytes) noexcept {
        if constexpr (N > 0) {
            Slots &s = slots();
            if (bytes == sizeof(T) && s.n > 0) return s.p[--s.n];
        }
        return ::operator new(bytes, std::nothrow);
    }
    /* Gives back memory from get() of `bytes` bytes. */
    static void put(void *p, std::size_t bytes) noexcept {
        if (p == nullptr) return;
        if constexpr (N > 0) {
            Slots &s = slots();
            if (bytes == sizeof(T) && s.n < N) {
                s.p[s.n++] = p;
                return;
            }
        }
        ::operator delete(p);
    }

  private:
    struct Slots {
        void *p[N > 0 ? N : 1];
        int n = 0;
        ~Slots() {
            while (n > 0) ::operator delete(p[--n]);
        }
    };
    static Slots &slots() noexcept {
        thread_local Slots s;
        return s;
    }
};

/* Declares a class's operator new/delete (plain and nothrow) on ObjectCache<Class>. The plain
 * form throws std::bad_alloc when out of memory, as ::operator new does. */
#define TWOHOP_CACHED_OBJECT(Class)                                                            \
    static void *operator new(std::size_t n) {                                                 \
        void *p = ::twohop::ObjectCache<Class>::get(n);                                        \
        if (p == nullptr) throw std::bad_alloc();                                              \
        return p;                                                                              \
    }                                                                                          \
    static void *operator new(std::size_t n, const std::nothrow_t &) noexcept {                \
        return ::twohop::ObjectCache<Class>::get(n);                                           \
    }                                                                                          \
    static void operator delete(void *p, std::size_t n) noexcept {                             \
        ::twohop::ObjectCache<Class>::put(p, n);                                               \
    }

} // namespace twohop

#endif
