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
                if (__builtin_expect(!s.cleanup_registered, 0)) register_cleanup(s);
                s.p[s.n++] = p;
                return;
            }
        }
        ::operator delete(p);
    }

  private:
    /* Plain data, zero-initialised: an access is one thread-local lookup. A thread_local with a
     * destructor costs a second one (its guard) on every access, which in this dlopen'ed
     * component is a call into the dynamic loader each (docs/perf.md); the destructor is
     * registered instead by the thread's first put. */
    struct Slots {
        void *p[N > 0 ? N : 1];
        int n;
        bool cleanup_registered;
    };
    /* Frees what the thread keeps when it ends. */
    struct Cleanup {
        Slots *s;
        ~Cleanup() {
            while (s->n > 0) ::operator delete(s->p[--s->n]);
            s->cleanup_registered = false;
        }
    };
    static Slots &slots() noexcept {
        static thread_local Slots s;
        // The address as an opaque value: GCC otherwise recomputes a thread-local's address
        // (another __tls_get_addr call) at each use after a branch instead of keeping it.
        Slots *p = &s;
        asm("" : "+r"(p));
        return *p;
    }
    /* Out of line, off the path of every put. */
    __attribute__((noinline, cold)) static void register_cleanup(Slots &s) noexcept {
        static thread_local Cleanup c{&s};
        (void)c;
        s.cleanup_registered = true;
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
