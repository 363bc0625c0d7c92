#include "proxy.h"

#include <vector>

namespace twohop {

Proxy &Proxy::instance() {
    static Proxy p;
    return p;
}

int Proxy::run(std::function<int()> step) { return run(std::move(step), nullptr); }

int Proxy::run(std::function<int()> step, const std::function<bool()> &alongside) {
    Job job;
    job.step = std::move(step);
    std::unique_lock<std::mutex> lock(m_);
    if (stopping_ || stopped_) return kStopped;
    if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
    jobs_.push_back(&job);
    queued_.fetch_add(1, std::memory_order_release);
    work_.notify_one();
    lock.unlock();
    for (bool more = static_cast<bool>(alongside);
         more && !job.finished.load(std::memory_order_acquire);) {
        more = alongside();
        if (more) std::this_thread::sleep_for(kAlongsidePause);
    }
    const auto until = std::chrono::steady_clock::now() + kSpin;
    while (!job.finished.load(std::memory_order_acquire) &&
           std::chrono::steady_clock::now() < until) {
    }
    lock.lock();
    done_.wait(lock, [&job] { return job.finished.load(std::memory_order_acquire); });
    return job.status;
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

void Proxy::loop() {
    std::vector<Job *> batch;
    std::unique_lock<std::mutex> lock(m_);
    for (;;) {
        if (jobs_.empty() && !stopping_) { // spin a little before sleeping: see proxy.h
            const uint64_t seen = queued_.load(std::memory_order_acquire);
            lock.unlock();
            const auto until = std::chrono::steady_clock::now() + kSpin;
            while (queued_.load(std::memory_order_acquire) == seen &&
                   std::chrono::steady_clock::now() < until) {
            }
            lock.lock();
        }
        work_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
        if (stopping_) break;
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
        for (Job *j : finished) {
            jobs_.remove(j);
            ++jobs_done_;
            if (j->detached) {
                delete j;
            } else {
                j->finished.store(true, std::memory_order_release);
            }
        }
        if (!finished.empty()) done_.notify_all();
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

} // namespace twohop
