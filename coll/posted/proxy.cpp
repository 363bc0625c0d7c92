#include "proxy.h"

#include <pthread.h>
#include <sys/prctl.h>
#include <time.h>

#include <vector>

namespace twohop {

Proxy &Proxy::instance() {
    static Proxy p;
    return p;
}

int Proxy::run(std::function<int()> step) { return run(std::move(step), nullptr); }

namespace {
/*
 * Polls `done` in naps of nap_us microseconds until it holds or `until` passed. The thread's
 * timer slack (prctl PR_SET_TIMERSLACK; Linux's default is 50 us, which would stretch every
 * nap to about that) is lowered to Proxy::kNapSlack for the naps and restored after.
 */
template <typename Done>
void nap_until(const Done &done, std::chrono::steady_clock::time_point until, int nap_us) {
    const int old_slack = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
    const bool lowered =
        old_slack > 0 && prctl(PR_SET_TIMERSLACK,
                               static_cast<unsigned long>(Proxy::kNapSlack.count()), 0, 0, 0) == 0;
    const timespec nap{0, static_cast<long>(nap_us) * 1000};
    while (!done() && std::chrono::steady_clock::now() < until) nanosleep(&nap, nullptr);
    if (lowered) (void)prctl(PR_SET_TIMERSLACK, static_cast<unsigned long>(old_slack), 0, 0, 0);
}
} // namespace

int Proxy::run(std::function<int()> step, const std::function<bool()> &alongside) {
    return run(std::move(step), alongside, nullptr);
}

int Proxy::run(std::function<int()> step, const std::function<bool()> &alongside,
               const std::atomic<bool> *near, std::chrono::steady_clock::time_point *woke,
               const std::function<bool()> &idle, int near_nap_us) {
    Job job;
    job.step = std::move(step);
    job.near = near;
    std::unique_lock<std::mutex> lock(m_);
    if (stopping_ || stopped_) return kStopped;
    if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
    jobs_.push_back(&job);
    queued_.fetch_add(1, std::memory_order_release);
    work_.notify_one();
    lock.unlock();
    bool busy = false; // idle() asked to be called again soon
    for (bool more = static_cast<bool>(alongside);
         more && !job.finished.load(std::memory_order_acquire);) {
        more = alongside();
        if (idle) busy = idle();
        if (more) std::this_thread::sleep_for(kAlongsidePause);
    }
    auto finished = [&job] { return job.finished.load(std::memory_order_acquire); };
    // Sleeps until `until` holds, waking for idle() (lock held on entry and exit).
    auto sleep = [&](const std::function<bool()> &until) {
        if (!idle) {
            done_.wait(lock, until);
            return;
        }
        while (!done_.wait_for(lock, busy ? kIdleBusyPeriod : kIdlePeriod, until)) {
            lock.unlock();
            busy = idle();
            lock.lock();
        }
    };
    if (near == nullptr) {
        const auto until = std::chrono::steady_clock::now() + kSpin;
        while (!finished() && std::chrono::steady_clock::now() < until) {
        }
    } else {
        lock.lock();
        sleep([&] { return finished() || near->load(std::memory_order_acquire); });
        lock.unlock();
        if (woke != nullptr) *woke = std::chrono::steady_clock::now();
        const auto until = std::chrono::steady_clock::now() + kNearSpin;
        if (near_nap_us > 0) {
            nap_until(finished, until, near_nap_us);
        } else {
            while (!finished() && std::chrono::steady_clock::now() < until) {
            }
        }
    }
    lock.lock();
    sleep(finished);
    return job.status;
}

void Proxy::prewake() {
    // Also when the proxy is awake: one spinning after its last job sees prewoken_ when it
    // would go to sleep, and spins again (back-to-back calls).
    std::lock_guard<std::mutex> lock(m_);
    if (!thread_.joinable() || stopping_ || stopped_) return;
    prewoken_ = true;
    work_.notify_one();
}

bool Proxy::submit(std::function<int()> step) {
    Job *job = new Job();
    job->step = std::move(step);
    job->detached = true;
    std::lock_guard<std::mutex> lock(m_);
    if (stopping_ || stopped_) {
        delete job;
        return false;
    }
    if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
    jobs_.push_back(job);
    queued_.fetch_add(1, std::memory_order_release);
    work_.notify_one();
    return true;
}

namespace {
thread_local bool t_on_proxy = false;
} // namespace

bool Proxy::on_proxy_thread() { return t_on_proxy; }

void Proxy::loop() {
    t_on_proxy = true;
    // Named, so that tools (top -H, gdb, /proc/<pid>/task/*/comm) tell it from the application's
    // threads; names are at most 15 characters.
    (void)pthread_setname_np(pthread_self(), "twohop-proxy");
    std::vector<Job *> batch;
    std::unique_lock<std::mutex> lock(m_);
    for (;;) {
        if (jobs_.empty() && !stopping_) { // spin a little before sleeping: see proxy.h
            const uint64_t seen = queued_.load(std::memory_order_acquire);
            const auto spin = prewoken_ ? kPrewakeSpin : kSpin;
            if (prewoken_) ++prewake_spins_;
            prewoken_ = false;
            lock.unlock();
            const auto until = std::chrono::steady_clock::now() + spin;
            while (queued_.load(std::memory_order_acquire) == seen &&
                   std::chrono::steady_clock::now() < until) {
            }
            lock.lock();
        }
        work_.wait(lock, [this] { return stopping_ || !jobs_.empty() || prewoken_; });
        if (stopping_) break;
        if (jobs_.empty()) continue; // prewoken: spin for the job that is coming
        batch.assign(jobs_.begin(), jobs_.end());
        lock.unlock();
        // Steps run without the lock: a new job can be queued meanwhile.
        std::vector<Job *> finished;
        for (Job *j : batch) {
            int st;
            {
                FpEnvScope env(j->env); // host reductions round as on the submitting thread
                st = j->step();
            }
            if (st != kPending) {
                j->status = st;
                finished.push_back(j);
            }
        }
        lock.lock();
        bool wake = !finished.empty();
        for (Job *j : batch) { // callers sleeping until their job's `near` (run(..., near))
            if (j->near != nullptr && !j->near_told &&
                j->near->load(std::memory_order_acquire)) {
                j->near_told = true;
                ++near_wakes_;
                wake = true;
            }
        }
        for (Job *j : finished) {
            jobs_.remove(j);
            ++jobs_done_;
            if (j->detached) {
                delete j;
            } else {
                j->finished.store(true, std::memory_order_release);
            }
        }
        if (wake) done_.notify_all();
    }
    for (Job *j : jobs_) { // abandoned: their callers get kStopped
        if (j->detached) {
            delete j;
            continue;
        }
        j->status = kStopped;
        j->finished.store(true, std::memory_order_release);
    }
    jobs_.clear();
    done_.notify_all();
}

void Proxy::stop() {
    std::thread t;
    {
        std::lock_guard<std::mutex> lock(m_);
        if (stopped_) return;
        stopping_ = true;
        work_.notify_all();
        t = std::move(thread_);
    }
    if (t.joinable()) t.join();
    std::lock_guard<std::mutex> lock(m_);
    stopped_ = true;
    stopping_ = false;
}

bool Proxy::running() {
    std::lock_guard<std::mutex> lock(m_);
    return thread_.joinable();
}

std::thread::native_handle_type Proxy::handle() {
    std::lock_guard<std::mutex> lock(m_);
    return thread_.joinable() ? thread_.native_handle() : std::thread::native_handle_type();
}

uint64_t Proxy::jobs_done() {
    std::lock_guard<std::mutex> lock(m_);
    return jobs_done_;
}

uint64_t Proxy::near_wakes() {
    std::lock_guard<std::mutex> lock(m_);
    return near_wakes_;
}

uint64_t Proxy::prewake_spins() {
    std::lock_guard<std::mutex> lock(m_);
    return prewake_spins_;
}

} // namespace twohop
