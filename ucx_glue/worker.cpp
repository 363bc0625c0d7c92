#include "worker.h"

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>

extern "C" void ucs_debug_disable_signals(void) __attribute__((weak));

namespace twohop {
namespace ucx {

void restore_signal_handlers() {
#if defined(__SANITIZE_THREAD__)
    // ThreadSanitizer builds keep UCX's handlers: libucs takes a spinlock here that TSan cannot
    // see (libucs is not instrumented) and then reports the unlock as a misuse.
    return;
#endif
    if (std::getenv("UCX_HANDLE_ERRORS") == nullptr && ucs_debug_disable_signals != nullptr) {
        ucs_debug_disable_signals();
    }
}

namespace {

Worker *g_worker = nullptr;
std::mutex g_worker_mutex;

std::string describe(const char *call, ucs_status_t s) {
    return std::string("ucx: ") + call + " failed: " + ucs_status_string(s);
}

/* Completion callbacks: the request handle is freed here, the user's slot is marked done. */
void send_done(void *request, ucs_status_t status, void *user) {
    auto *r = static_cast<Request *>(user);
    r->handle = nullptr;
    r->status = status;
    r->done.store(true, std::memory_order_release);
    ucp_request_free(request);
}

void recv_done(void *request, ucs_status_t status, const ucp_tag_recv_info_t *info, void *user) {
    auto *r = static_cast<Request *>(user);
    r->handle = nullptr;
    r->status = status;
    r->received = (status == UCS_OK && info) ? info->length : 0;
    r->sender_tag = (status == UCS_OK && info) ? info->sender_tag : 0;
    r->done.store(true, std::memory_order_release);
    ucp_request_free(request);
}

/* Settles r for a post that returned req: NULL = completed in place, an error pointer = failed,
 * otherwise the completion callback will set r->done. */
int settle(ucs_status_ptr_t req, Request *r) {
    if (req == nullptr) {
        r->done = true;
    } else if (UCS_PTR_IS_ERR(req)) {
        r->status = UCS_PTR_STATUS(req);
        r->done = true;
        return TWOHOP_ERR_TRANSPORT;
    } else if (!r->done.load(std::memory_order_acquire)) {
        r->handle = req; // the callback has not run yet (it clears this under the same lock)
    }
    return TWOHOP_OK;
}

} // namespace

int Worker::instance(const ConfigPairs &config, bool thread_multi, bool peer_failure,
                     Worker **out, std::string *err) {
    std::lock_guard<std::mutex> lock(g_worker_mutex);
    if (g_worker) {
        *out = g_worker;
        return TWOHOP_OK;
    }
    auto *w = new Worker();
    ucp_config_t *cfg = nullptr;
    ucs_status_t s = ucp_config_read(nullptr, nullptr, &cfg);
    if (s != UCS_OK) {
        *err = describe("ucp_config_read", s);
        delete w;
        return TWOHOP_ERR_TRANSPORT;
    }
    for (const auto &kv : config) {
        s = ucp_config_modify(cfg, kv.first.c_str(), kv.second.c_str());
        if (s != UCS_OK) {
            *err = describe(("ucp_config_modify " + kv.first + "=" + kv.second).c_str(), s);
            ucp_config_release(cfg);
            delete w;
            return TWOHOP_ERR_TRANSPORT;
        }
    }
    ucp_params_t params;
    std::memset(&params, 0, sizeof(params));
    params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
    params.features = UCP_FEATURE_TAG;
    params.mt_workers_shared = 0;
    s = ucp_init(&params, cfg, &w->context_);
    ucp_config_release(cfg);
    if (s != UCS_OK) {
        *err = describe("ucp_init", s);
        delete w;
        return TWOHOP_ERR_TRANSPORT;
    }
    ucp_context_attr_t ca;
    std::memset(&ca, 0, sizeof(ca));
    ca.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
    w->cuda_memory_ = ucp_context_query(w->context_, &ca) == UCS_OK &&
                      (ca.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) != 0;
    ucp_worker_params_t wp;
    std::memset(&wp, 0, sizeof(wp));
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    // UCX's own locking is not relied on (see worker.h): the worker is used under mt_mutex_.
    wp.thread_mode = thread_multi ? UCS_THREAD_MODE_SERIALIZED : UCS_THREAD_MODE_SINGLE;
    s = ucp_worker_create(w->context_, &wp, &w->worker_);
    if (s != UCS_OK) {
        *err = describe("ucp_worker_create", s);
        delete w;
        return TWOHOP_ERR_TRANSPORT;
    }
    w->mt_ = thread_multi;
    w->peer_failure_ = peer_failure;
    ucp_address_t *addr = nullptr;
    size_t len = 0;
    s = ucp_worker_get_address(w->worker_, &addr, &len);
    if (s != UCS_OK) {
        *err = describe("ucp_worker_get_address", s);
        delete w;
        return TWOHOP_ERR_TRANSPORT;
    }
    const auto *bytes = reinterpret_cast<const uint8_t *>(addr);
    w->address_.assign(bytes, bytes + len);
    ucp_worker_release_address(w->worker_, addr);
    g_worker = w;
    *out = w;
    return TWOHOP_OK;
}

namespace {
std::atomic<bool> g_keep_alive{false};
} // namespace

void Worker::keep_alive() { g_keep_alive.store(true, std::memory_order_release); }

void Worker::shutdown() {
    std::lock_guard<std::mutex> lock(g_worker_mutex);
    // Operations a quarantined communicator leaked may still hold registered memory: UCX's
    // cleanup would abort on them (rcache "destroying inuse region"). The process ends anyway.
    if (!g_keep_alive.load(std::memory_order_acquire)) delete g_worker;
    g_worker = nullptr;
}

Worker::~Worker() {
    // Consume messages nobody will receive any more (a peer's abort notice that arrived after
    // the communicator was freed): UCX would otherwise warn about each at cleanup.
    for (int i = 0; worker_ && i < 10000; ++i) {
        ucp_worker_progress(worker_);
        ucp_tag_recv_info_t info;
        ucp_tag_message_h msg = ucp_tag_probe_nb(worker_, 0, 0, 1, &info);
        if (msg == nullptr) break;
        std::vector<char> sink(info.length + 1);
        ucp_request_param_t p;
        std::memset(&p, 0, sizeof(p));
        ucs_status_ptr_t req = ucp_tag_msg_recv_nbx(worker_, sink.data(), info.length, msg, &p);
        if (UCS_PTR_IS_PTR(req)) {
            while (ucp_request_check_status(req) == UCS_INPROGRESS) ucp_worker_progress(worker_);
            ucp_request_free(req);
        }
    }
    // Force-close: at finalize no operation is outstanding, and a flush would wait on peers
    // that may already be gone.
    for (auto &kv : eps_) {
        ucp_request_param_t p;
        std::memset(&p, 0, sizeof(p));
        p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
        p.flags = UCP_EP_CLOSE_FLAG_FORCE;
        ucs_status_ptr_t req = ucp_ep_close_nbx(kv.second->ep, &p);
        if (UCS_PTR_IS_PTR(req)) {
            while (ucp_request_check_status(req) == UCS_INPROGRESS) ucp_worker_progress(worker_);
            ucp_request_free(req);
        }
    }
    eps_.clear();
    if (worker_) ucp_worker_destroy(worker_);
    if (context_) ucp_cleanup(context_);
}

void Worker::on_ep_error(void *arg, ucp_ep_h, ucs_status_t) {
    static_cast<Endpoint *>(arg)->failed.store(true, std::memory_order_release);
}

bool Worker::connected(uint64_t peer_key) {
    std::lock_guard<std::mutex> lock(eps_mutex_);
    auto it = eps_.find(peer_key);
    return it != eps_.end() && !it->second->failed.load(std::memory_order_acquire);
}

int Worker::connect(uint64_t peer_key, const uint8_t *addr, std::size_t len,
                    const Endpoint **ep, std::string *err) {
    std::lock_guard<std::mutex> lock(eps_mutex_);
    std::unique_lock<std::mutex> mt_lock(mt_mutex_, std::defer_lock);
    if (mt_) mt_lock.lock();
    auto it = eps_.find(peer_key);
    if (it != eps_.end() && !it->second->failed.load(std::memory_order_acquire)) {
        *ep = it->second.get();
        return TWOHOP_OK;
    }
    // A failed endpoint stays alive (communicators may still point at it) under another key.
    if (it != eps_.end()) {
        std::unique_ptr<Endpoint> dead = std::move(it->second);
        eps_.erase(it);
        eps_.emplace(~uint64_t(0) - eps_.size(), std::move(dead));
    }
    if (!addr || len == 0) {
        *err = "ucx: no worker address for peer " + std::to_string(peer_key);
        return TWOHOP_ERR_TRANSPORT;
    }
    ucp_ep_params_t p;
    std::memset(&p, 0, sizeof(p));
    p.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                   UCP_EP_PARAM_FIELD_ERR_HANDLER;
    p.address = reinterpret_cast<const ucp_address_t *>(addr);
    // Peer-failure handling rules out UCX's shared-memory transports (they cannot detect a
    // dead peer): only the virtual-node testing aid turns it off.
    p.err_mode = peer_failure_ ? UCP_ERR_HANDLING_MODE_PEER : UCP_ERR_HANDLING_MODE_NONE;
    auto rec = std::make_unique<Endpoint>();
    rec->peer_key = peer_key;
    p.err_handler.cb = &Worker::on_ep_error;
    p.err_handler.arg = rec.get();
    ucs_status_t s = ucp_ep_create(worker_, &p, &rec->ep);
    if (s != UCS_OK) {
        *err = describe(("ucp_ep_create to peer " + std::to_string(peer_key)).c_str(), s);
        return TWOHOP_ERR_TRANSPORT;
    }
    *ep = rec.get();
    eps_[peer_key] = std::move(rec);
    return TWOHOP_OK;
}

bool Worker::cancel(Request *r, double max_wait_s) {
    {
        std::unique_lock<std::mutex> lock(mt_mutex_, std::defer_lock);
        if (mt_) lock.lock();
        if (r->done.load(std::memory_order_acquire)) return true;
        if (r->handle) ucp_request_cancel(worker_, r->handle);
    }
    const auto start = std::chrono::steady_clock::now();
    while (!r->done.load(std::memory_order_acquire)) {
        progress();
        if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() >
            max_wait_s) {
            return false;
        }
    }
    return true;
}

bool Worker::progress() {
    if (!mt_) return ucp_worker_progress(worker_) != 0;
    std::unique_lock<std::mutex> lock(mt_mutex_, std::try_to_lock);
    return lock.owns_lock() && ucp_worker_progress(worker_) != 0;
}

int Worker::send(ucp_ep_h ep, const void *buf, std::size_t bytes, uint64_t tag, Request *r) {
    std::unique_lock<std::mutex> lock(mt_mutex_, std::defer_lock);
    if (mt_) lock.lock();
    r->done = false;
    r->status = UCS_OK;
    ucp_request_param_t p;
    std::memset(&p, 0, sizeof(p));
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    p.cb.send = send_done;
    p.user_data = r;
    return settle(ucp_tag_send_nbx(ep, buf, bytes, tag, &p), r);
}

int Worker::recv(void *buf, std::size_t bytes, uint64_t tag, Request *r, uint64_t mask) {
    std::unique_lock<std::mutex> lock(mt_mutex_, std::defer_lock);
    if (mt_) lock.lock();
    r->done = false;
    r->status = UCS_OK;
    r->received = 0;
    ucp_request_param_t p;
    std::memset(&p, 0, sizeof(p));
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                     UCP_OP_ATTR_FIELD_RECV_INFO;
    ucp_tag_recv_info_t info;
    info.sender_tag = 0;
    // UCX 1.13 does not always fill `info` when the receive completes in place: then only a
    // longer message is detected (UCS_ERR_MESSAGE_TRUNCATED), a shorter one is taken as full.
    info.length = SIZE_MAX;
    p.recv_info.tag_info = &info;
    p.cb.recv = recv_done;
    p.user_data = r;
    info.sender_tag = tag;
    ucs_status_ptr_t req = ucp_tag_recv_nbx(worker_, buf, bytes, tag, mask, &p);
    if (req == nullptr) {
        r->received = info.length == SIZE_MAX ? bytes : info.length;
        r->sender_tag = info.length == SIZE_MAX ? tag : info.sender_tag;
    }
    return settle(req, r);
}

} // namespace ucx
} // namespace twohop
