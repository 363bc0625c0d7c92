#include "fiber.h"

#include "twohop_core.h"

#include <cstdint>
#include <new>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define TWOHOP_FIBER_ASAN 1
#endif
#if defined(__SANITIZE_THREAD__)
#define TWOHOP_FIBER_TSAN 1
#endif
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TWOHOP_FIBER_ASAN 1
#endif
#if __has_feature(thread_sanitizer)
#define TWOHOP_FIBER_TSAN 1
#endif
#endif

#if TWOHOP_FIBER_ASAN
extern "C" void __sanitizer_start_switch_fiber(void **fake_stack_save, const void *bottom,
                                               std::size_t size);
extern "C" void __sanitizer_finish_switch_fiber(void *fake_stack_save, const void **bottom_old,
                                                std::size_t *size_old);
#endif
#if TWOHOP_FIBER_TSAN
extern "C" void *__tsan_get_current_fiber(void);
extern "C" void *__tsan_create_fiber(unsigned flags);
extern "C" void __tsan_destroy_fiber(void *fiber);
extern "C" void __tsan_switch_to_fiber(void *fiber, unsigned flags);
#endif

namespace twohop {

namespace {
thread_local Fiber *t_current = nullptr;

ucontext_t *uc(void *p) {
    return static_cast<ucontext_t *>(p);
}
} // namespace

Fiber::Fiber(std::function<void()> body)
    : body_(std::move(body)), context_(new ucontext_t()), caller_(new ucontext_t()) {
    const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    mapped_ = kStackBytes + page;
    void *p = mmap(nullptr, mapped_, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
    if (p == MAP_FAILED)
        return;
    // Guard page at the low end: the stack grows down into it on overflow and faults.
    if (mprotect(p, page, PROT_NONE) != 0 || getcontext(uc(context_)) != 0) {
        munmap(p, mapped_);
        return;
    }
    stack_ = p;
    ucontext_t *c = uc(context_);
    c->uc_stack.ss_sp = static_cast<char *>(p) + page;
    c->uc_stack.ss_size = kStackBytes;
    c->uc_link = nullptr; // the body never returns through the context: entry() switches out
    const uintptr_t self = reinterpret_cast<uintptr_t>(this);
    makecontext(c, reinterpret_cast<void (*)()>(&Fiber::entry), 2,
                static_cast<unsigned>(self & 0xffffffffu), static_cast<unsigned>(self >> 32));
#if TWOHOP_FIBER_TSAN
    tsan_fiber_ = __tsan_create_fiber(0);
#endif
}

Fiber::~Fiber() {
#if TWOHOP_FIBER_TSAN
    if (tsan_fiber_)
        __tsan_destroy_fiber(tsan_fiber_);
#endif
    if (stack_)
        munmap(stack_, mapped_);
    delete uc(context_);
    delete uc(caller_);
}

void Fiber::entry(unsigned lo, unsigned hi) {
    Fiber *f = reinterpret_cast<Fiber *>((static_cast<uintptr_t>(hi) << 32) | lo);
#if TWOHOP_FIBER_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &f->caller_stack_, &f->caller_stack_size_);
#endif
    f->body_();
    f->finished_ = true;
    f->switch_out(); // never resumed again
}

bool Fiber::resume() {
    Fiber *outer = t_current;
    t_current = this;
#if TWOHOP_FIBER_TSAN
    tsan_caller_ = __tsan_get_current_fiber();
    __tsan_switch_to_fiber(tsan_fiber_, 0);
#endif
#if TWOHOP_FIBER_ASAN
    void *fake = nullptr;
    const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    __sanitizer_start_switch_fiber(&fake, static_cast<char *>(stack_) + page, kStackBytes);
#endif
    swapcontext(uc(caller_), uc(context_));
#if TWOHOP_FIBER_ASAN
    __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
    t_current = outer;
    return finished_;
}

void Fiber::switch_out() {
#if TWOHOP_FIBER_ASAN
    void *fake = nullptr;
    // A finished fiber's fake stack is released (nullptr), a yielding one's kept.
    __sanitizer_start_switch_fiber(finished_ ? nullptr : &fake, caller_stack_, caller_stack_size_);
#endif
#if TWOHOP_FIBER_TSAN
    __tsan_switch_to_fiber(tsan_caller_, 0);
#endif
    swapcontext(uc(context_), uc(caller_));
#if TWOHOP_FIBER_ASAN
    __sanitizer_finish_switch_fiber(fake, &caller_stack_, &caller_stack_size_);
#endif
}

void Fiber::yield() {
    Fiber *f = t_current;
    if (f != nullptr)
        f->switch_out();
}

bool Fiber::inside() {
    return t_current != nullptr;
}

} // namespace twohop

struct twohop_fiber {
    twohop::Fiber fiber;
    explicit twohop_fiber(std::function<void()> body) : fiber(std::move(body)) {}
};

extern "C" twohop_fiber *twohop_fiber_new(void (*fn)(void *), void *arg) {
    auto *f = new (std::nothrow) twohop_fiber([fn, arg] { fn(arg); });
    if (f != nullptr && !f->fiber.ok()) {
        delete f;
        f = nullptr;
    }
    return f;
}

extern "C" int twohop_fiber_resume(twohop_fiber *f) {
    return f->fiber.resume() ? 1 : 0;
}

extern "C" void twohop_fiber_free(twohop_fiber *f) {
    delete f;
}
