/*
 * Fiber: a function run on a stack of its own that can stop in the middle (yield) and be
 * resumed later, by the same or another thread (one at a time). Set-up of a communicator is a
 * sequence of blocking exchanges (setup_exchange.h); run inside a fiber, each wait for a peer
 * yields instead of spinning, so a non-blocking call can start the set-up and return, and MPI
 * progress resumes it (MPI-4.1 section 6.12: starting a non-blocking or persistent collective
 * is local -- it must not wait for other processes).
 *
 * Implementation: POSIX ucontext (makecontext/swapcontext, glibc), a stack of kStackBytes
 * mapped on demand with a guard page below it; AddressSanitizer and ThreadSanitizer are told
 * of every switch (their fiber interfaces), so sanitizer builds check fiber code too.
 *
 * Rules for the body: it may call Fiber::yield() (through Exchange::wait) only where it holds
 * no lock and no thread-local state it relies on across the yield; a fiber resumed from a
 * different thread continues on that thread.
 */
#ifndef TWOHOP_FIBER_H
#define TWOHOP_FIBER_H

#include <cstddef>
#include <functional>

namespace twohop {

class Fiber {
  public:
    /* Stack size: the set-up runs UCX's and the CUDA driver's initialisation, which expect a
     * thread's default stack (8 MiB on Linux); pages are committed only when touched. */
    static constexpr std::size_t kStackBytes = std::size_t(8) << 20;

    /* Creates the fiber; the body runs at the first resume(). ok() is false when the stack
     * could not be mapped. */
    explicit Fiber(std::function<void()> body);
    ~Fiber(); /* the body must have finished (or never started) */
    Fiber(const Fiber &) = delete;
    Fiber &operator=(const Fiber &) = delete;

    bool ok() const { return stack_ != nullptr; }
    /* Runs the body until it yields or returns; true once it has returned. Never call on a
     * finished fiber, nor from inside this fiber. */
    bool resume();
    bool finished() const { return finished_; }

    /* From inside a fiber: back to the thread that resumed it. Elsewhere: returns at once. */
    static void yield();
    /* Whether the calling code runs inside a fiber. */
    static bool inside();

  private:
    static void entry(unsigned lo, unsigned hi);
    void switch_out();

    std::function<void()> body_;
    void *stack_ = nullptr;  /* mapping, guard page included */
    std::size_t mapped_ = 0; /* bytes mapped */
    void *context_;          /* ucontext_t of the fiber */
    void *caller_;           /* ucontext_t of the thread that resumed it */
    bool finished_ = false;
    /* sanitizer bookkeeping */
    const void *caller_stack_ = nullptr;
    std::size_t caller_stack_size_ = 0;
    void *tsan_fiber_ = nullptr;
    void *tsan_caller_ = nullptr;
};

} // namespace twohop

#endif
