/*
 * The floating-point environment a call's host reductions run in. Each rounding of a float,
 * double or half-precision combination on the host follows the executing thread's environment:
 * on x86-64 the MXCSR's rounding mode, flush-to-zero and denormals-are-zero bits (set, for
 * instance, by -ffast-math start-up code or torch.set_flush_denormal), elsewhere the C
 * floating-point environment (<cfenv>). A call started on one thread may be reduced on another
 * (the proxy thread, or a thread that waits in MPI), so the starting thread's environment is
 * captured with the call and put in place around every step of it: the result does not depend
 * on which thread ran the step, nor on when.
 */
#ifndef TWOHOP_SCHEDULE_FP_ENV_H
#define TWOHOP_SCHEDULE_FP_ENV_H

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#else
#include <cfenv>
#endif

namespace twohop {

#if defined(__x86_64__) || defined(__i386__)
/* MXCSR control bits (rounding, FTZ, DAZ, exception masks); the low 6 bits are the sticky
 * exception flags, which stay the executing thread's. */
class FpEnv {
  public:
    /* The calling thread's environment. */
    static FpEnv current() {
        FpEnv e;
        e.csr_ = _mm_getcsr() & ~kFlags;
        return e;
    }
    bool operator==(const FpEnv &o) const { return csr_ == o.csr_; }

  private:
    friend class FpEnvScope;
    static constexpr unsigned kFlags = 0x3f;
    unsigned csr_ = 0x1f80; // the default: round to nearest, all exceptions masked
};

/* Puts `e` in place on this thread for the scope's life (nothing when it already is). */
class FpEnvScope {
  public:
    explicit FpEnvScope(const FpEnv &e) : saved_(_mm_getcsr()) {
        set_ = (saved_ & ~FpEnv::kFlags) != e.csr_;
        if (set_) _mm_setcsr(e.csr_ | (saved_ & FpEnv::kFlags));
    }
    ~FpEnvScope() {
        if (set_) _mm_setcsr((saved_ & ~FpEnv::kFlags) | (_mm_getcsr() & FpEnv::kFlags));
    }
    FpEnvScope(const FpEnvScope &) = delete;
    FpEnvScope &operator=(const FpEnvScope &) = delete;

  private:
    unsigned saved_;
    bool set_;
};
#else
class FpEnv {
  public:
    static FpEnv current() {
        FpEnv e;
        e.ok_ = std::fegetenv(&e.env_) == 0;
        return e;
    }

  private:
    friend class FpEnvScope;
    std::fenv_t env_{};
    bool ok_ = false;
};

class FpEnvScope {
  public:
    explicit FpEnvScope(const FpEnv &e) {
        set_ = e.ok_ && std::fegetenv(&saved_) == 0 && std::fesetenv(&e.env_) == 0;
    }
    ~FpEnvScope() {
        if (set_) std::fesetenv(&saved_);
    }
    FpEnvScope(const FpEnvScope &) = delete;
    FpEnvScope &operator=(const FpEnvScope &) = delete;

  private:
    std::fenv_t saved_{};
    bool set_ = false;
};
#endif

} // namespace twohop

#endif
