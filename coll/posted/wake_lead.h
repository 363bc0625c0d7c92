/*
 * How long before a blocking GPU-posted call's predicted end its sleeping calling thread is
 * woken (the "lead", microseconds), adapted per size class from what the previous calls of
 * that class measured on this rank.
 *
 * A woken caller spins until the call ends: the lead is paid in the calling thread's CPU time
 * (a CPU-posted call spins throughout; the GPU-posted one should not). A caller woken too late
 * adds its lateness to the call's latency, and through it to the next call's rounds. Both
 * depend on this host's wake-up latency (a free core or not: ranks and proxy threads against
 * cores) and on how well the previous call's tail predicts this one's, which no fixed lead
 * fits at every rank count (docs/perf.md: 20 µs halved the CPU time at 4 ranks of one 16-core
 * host and doubled the latency at 8).
 *
 * The controller (one per size class): after each call, `spin_us` = the call's end minus the
 * moment the caller woke (negative: it woke that much after the end).
 *   - late (spin_us < 0): lead += lateness + target (the next call's wake-up absorbs a delay
 *     as large as this one), unless the caller was already woken at the last gate (a lead
 *     at least the predicted tail: waking earlier is impossible, growing would wind up);
 *   - spun longer than the target: lead -= (spin_us - target) / 2 (halves the excess: a few
 *     calls of one size class to settle, slow enough that one early call does not swing it);
 *   - clamped to [0, max_us].
 * Each late wake-up costs its lateness once and raises the lead for the next call; with
 * jittery wake-ups the lead settles where a share of the calls still wakes late (measured:
 * 5-39 %, docs/perf.md "wake lead").
 *
 * The quantile controller (coll_twohop_posted_wake_quantile = q > 0, 95 by default, which
 * takes precedence over the spin target): after each call, `needed_us` = the lead that call
 * would have needed to wake at its end = the lead it had minus its spin (the caller's wake-up
 * latency plus the prediction's error). The lead it had is the predicted tail less the time
 * from the last gate to when its caller was signalled: woken at the lead, at the gate (the
 * whole predicted tail) or at the end (a tail shorter than predicted less the lead; the
 * caller computes it: gpu/posted_path.cpp, gpu_posted_pipeline). The next lead is the q-th
 * percentile of the last kWindow calls' needed leads (nearest rank: the ceil(q/100 * n)-th
 * smallest of n), clamped to [0, max_us]; before kMinSamples calls it stays start_us. So
 * about (100 - q) % of the calls wake late, by the distribution's tail beyond the q-th
 * percentile, and the others spin the needed lead's distance below that percentile: at
 * q = 95 on one H200 host (docs/perf.md, "The wake lead at the 95th percentile") the calling
 * thread's CPU at 1 MiB fell from 3.4-4.3x to 4.3-7.9x below CPU-posted. A burst of very
 * late wake-ups (a disturbed host) raises the lead for at most kWindow calls after it.
 *
 * Only when the calling thread wakes changes; what the rank does in the protocol does not
 * (docs/design.md, "The rule": rank-local timing decides no protocol step).
 */
#ifndef TWOHOP_WAKE_LEAD_H
#define TWOHOP_WAKE_LEAD_H

#include <algorithm>
#include <array>
#include <cmath>

namespace twohop {

/*
 * The lead a blocking GPU-posted call had, microseconds: its predicted tail less the time from
 * its last finish gate to when its calling thread was signalled -- `near` (near_after_gate_us;
 * < 0: never set) or the call's end (end_after_gate_us) when that came first. Woken at `near`
 * set a lead before the predicted end this is about that lead; at the gate, the whole
 * predicted tail; at the end, the predicted tail less the tail taken. Minus the call's spin:
 * the lead it needed (WakeLead::update's had_us).
 */
inline double lead_had_us(double predicted_tail_us, double near_after_gate_us,
                          double end_after_gate_us) {
    const bool near_first = near_after_gate_us >= 0 && near_after_gate_us < end_after_gate_us;
    return predicted_tail_us - (near_first ? near_after_gate_us : end_after_gate_us);
}

class WakeLead {
  public:
    static constexpr int kWindow = 64;     // the quantile controller's calls remembered
    static constexpr int kMinSamples = 4;  // its calls before the first adapted lead

    WakeLead() = default; // a fixed lead of 0 until assigned
    /* start_us: the first call's lead (coll_twohop_posted_wake_lead_us); target_us: the spin
     * aimed at (coll_twohop_posted_wake_spin_us; <= 0: the lead stays start_us); max_us: the
     * largest lead (raised to start_us if below); quantile_pct: 1..99 selects the quantile
     * controller (coll_twohop_posted_wake_quantile; 0: the spin target's, or fixed; values
     * outside 0..99 are clamped to it). All times microseconds. */
    WakeLead(float start_us, float target_us, float max_us, int quantile_pct = 0)
        : lead_(start_us), target_(target_us), max_(std::max(max_us, start_us)),
          quantile_(std::min(std::max(quantile_pct, 0), 99)) {}

    float lead_us() const { return lead_; }

    /* One call's outcome: spin_us = its end minus its caller's wake-up (microseconds, < 0 when
     * the caller woke after the end). could_wake_earlier: false when the lead already covered
     * the whole predicted tail (the caller was woken at the last gate, as early as it can be):
     * then lateness does not raise the spin target's lead, which would only wind it up.
     * had_us: the lead this call had (the predicted tail less the time from the last gate to
     * when its caller was signalled); the quantile controller records had_us - spin_us.
     * Returns the next call's lead. */
    float update(float spin_us, bool could_wake_earlier = true, float had_us = 0) {
        if (quantile_ > 0) return record(had_us - spin_us);
        if (target_ <= 0) return lead_;
        if (spin_us < 0) {
            if (!could_wake_earlier) return lead_;
            lead_ += -spin_us + target_;
        } else if (spin_us > target_) {
            lead_ -= (spin_us - target_) / 2;
        }
        lead_ = std::min(std::max(lead_, 0.0f), max_);
        return lead_;
    }

  private:
    float record(float needed_us) {
        if (!std::isfinite(needed_us)) return lead_;
        window_[static_cast<size_t>(next_)] = needed_us;
        next_ = (next_ + 1) % kWindow;
        if (n_ < kWindow) ++n_;
        if (n_ < kMinSamples) return lead_;
        std::array<float, kWindow> v;
        std::copy(window_.begin(), window_.begin() + n_, v.begin());
        // Nearest rank: the ceil(q n / 100)-th smallest (1-based), in integers.
        const int k = (quantile_ * n_ + 99) / 100 - 1;
        std::nth_element(v.begin(), v.begin() + k, v.begin() + n_);
        lead_ = std::min(std::max(v[static_cast<size_t>(k)], 0.0f), max_);
        return lead_;
    }

    float lead_ = 0, target_ = 0, max_ = 0;
    int quantile_ = 0;
    int n_ = 0, next_ = 0;               // samples held (<= kWindow), the next slot
    std::array<float, kWindow> window_{}; // the last calls' needed leads, a ring
};

} // namespace twohop

#endif
