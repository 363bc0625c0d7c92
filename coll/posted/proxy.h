/*
 * The progress (proxy) thread of GPU-posted operations: one per process, started on first use,
 * stopped at component close. A calling thread hands it a job (a step function that polls the
 * doorbell ring, posts transfers and tracks their completion) and sleeps until the job ends;
 * the proxy runs the steps of every pending job in turn. With no job pending it sleeps on a
 * condition variable: no busy spin, no core taken from the application. Jobs may come from
 * several threads at once (MPI_THREAD_MULTIPLE).
 *
 * Hand-off latency: a thread woken from a condition variable takes tens of microseconds to run
 * again, twice per job (proxy woken at submit, caller woken at the end). Both sides therefore
 * spin for a bounded time before they sleep: the caller right after submitting (kSpin: short
 * jobs finish in it) or, for a job with a foreseeable end, from `near` (kNearSpin; spinning
 * or, with run()'s near_nap_us, in short naps); the proxy
 * right after its last job (kSpin: back-to-back calls find it awake) or after a prewake()
 * (kPrewakeSpin). An idle proxy sleeps.
 *
 * The backend interface a device-initiated transport would replace: the step function is the
 * only thing the proxy knows of a job (post what the doorbell announced, poll completions).
 */
#ifndef TWOHOP_PROXY_H
#define TWOHOP_PROXY_H

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <list>
#include <mutex>
#include <thread>

#include "fp_env.h"

namespace twohop {

class Proxy {
  public:
    /* Step result: keep calling (kPending), or the job's final status (any other value). */
    static constexpr int kPending = -1000;
    /* Status of jobs the proxy refused or abandoned because it is stopping / stopped. */
    static constexpr int kStopped = -1001;
    /* How long each side spins before it sleeps (see the hand-off note above). */
    static constexpr std::chrono::microseconds kSpin{50};

    Proxy() = default;
    Proxy(const Proxy &) = delete;
    Proxy &operator=(const Proxy &) = delete;
    ~Proxy() { stop(); }

    /* The process's proxy. */
    static Proxy &instance();

    /*
     * Runs `step` on the proxy thread until it returns something other than kPending, and
     * returns that; the calling thread sleeps meanwhile. Starts the thread on first use.
     * kStopped when the proxy was stopped before or while the job ran (the job's step is not
     * called again: the caller must clean up what it started).
     */
    int run(std::function<int()> step);
    /*
     * run(), with work of the calling thread alongside: after queueing `step` the caller calls
     * `alongside` until it returns false (pausing kAlongsidePause between calls) or the job
     * ends, then sleeps as in run(). GPU-posted calls launch their call kernel this way (the
     * first call of `alongside`), or, in the stream-operation form, enqueue their segments a
     * bounded window ahead of the proxy, so the stream's queue never fills while the GPU waits
     * on a gate only the proxy opens.
     */
    int run(std::function<int()> step, const std::function<bool()> &alongside);
    static constexpr std::chrono::microseconds kAlongsidePause{20};
    /*
     * run(step, alongside), for a long job whose end can be foreseen: `near` (written by the
     * job's step, read by the proxy and the caller) turns true when the rest of the job is
     * short (a GPU-posted call: its last gate opened, only the GPU's hop 3 and the end remain).
     * The caller does not spin after queueing the job; it sleeps until `near` or the end, and
     * from `near` spins up to kNearSpin for the end, so the wake-up of a sleeping thread
     * (tens of microseconds) overlaps the job's tail instead of following it. `woke` (may
     * be null): when the caller woke from that sleep (for `near` or for the end), so that it
     * can tell how long it spun or how late it woke (wake_lead.h). `near_nap_us` > 0: from
     * `near` the caller polls for the end in naps of that many microseconds (nanosleep, its
     * timer slack lowered to kNapSlack for the wait and restored after) instead of spinning:
     * less CPU, the end seen up to a nap plus a timer wake-up later
     * (coll_twohop_posted_wake_nap_us).
     */
    int run(std::function<int()> step, const std::function<bool()> &alongside,
            const std::atomic<bool> *near,
            std::chrono::steady_clock::time_point *woke = nullptr,
            const std::function<bool()> &idle = {}, int near_nap_us = 0);
    static constexpr std::chrono::microseconds kNearSpin{250};
    static constexpr std::chrono::nanoseconds kNapSlack{1000};
    /*
     * `idle` (may be empty): work the waiting caller does while its job runs -- a blocking
     * call's MPI progress, so that calls in flight elsewhere on this rank move while it waits
     * (a peer may wait for them before it joins this call). The caller wakes from its sleeps
     * every kIdlePeriod to call it, or every kIdleBusyPeriod after it returned true (more work
     * is waiting for it), and whenever it pauses between `alongside` calls.
     */
    static constexpr std::chrono::microseconds kIdlePeriod{1000};
    static constexpr std::chrono::microseconds kIdleBusyPeriod{20};

    /*
     * Wakes a sleeping proxy thread to spin up to kPrewakeSpin for a job that is about to be
     * queued (a GPU-posted call about to run its node's rounds), so that its wake-up overlaps
     * the caller's rounds and launch instead of delaying the first doorbell. Costs the
     * proxy's CPU, never the caller's beyond one futex wake; nothing when it is awake. Does not
     * start the thread.
     */
    void prewake();
    static constexpr std::chrono::microseconds kPrewakeSpin{300};

    /*
     * Queues `step` on the proxy thread without waiting for it (asynchronous progress of calls
     * in flight, coll/schedule/engine.h): the proxy calls it in turn with the other jobs until
     * it returns something other than kPending, then drops it. False when the proxy is
     * stopped (nothing queued).
     */
    bool submit(std::function<int()> step);

    /* Stops the thread (joins it); pending jobs end with kStopped. Later run() calls return
     * kStopped at once. Idempotent. */
    void stop();

    /* True while the thread exists. */
    bool running();
    /* True on the proxy thread (of any Proxy): jobs stop there before steps that need a thread
     * inside MPI (job.h: async_now). */
    static bool on_proxy_thread();
    /* The thread's native handle (for CPU-time tests), or 0. */
    std::thread::native_handle_type handle();
    /* Jobs completed since start (for tests and the benchmark). */
    uint64_t jobs_done();
    /* Callers woken for their job's `near` (run(..., near)), and spins begun for a prewake()
     * (for tests). */
    uint64_t near_wakes();
    uint64_t prewake_spins();

  private:
    struct Job {
        std::function<int()> step;
        FpEnv env = FpEnv::current(); // the submitting thread's, around every step (fp_env.h)
        int status = kPending;
        std::atomic<bool> finished{false};
        bool detached = false; // submit(): nobody waits, the proxy deletes it
        const std::atomic<bool> *near = nullptr; // run(..., near): see there
        bool near_told = false;                  // the caller was woken for `near`
    };
    void loop();

    std::mutex m_;
    std::condition_variable work_;   // proxy waits here when idle
    std::condition_variable done_;   // callers wait here for their job
    std::list<Job *> jobs_;
    std::atomic<uint64_t> queued_{0}; // jobs ever queued (read without the lock while spinning)
    bool prewoken_ = false;            // prewake() asked for a spin (under m_)
    uint64_t near_wakes_ = 0, prewake_spins_ = 0; // under m_ (tests)
    std::thread thread_;
    bool stopping_ = false, stopped_ = false;
    uint64_t jobs_done_ = 0;
};

} // namespace twohop

#endif
