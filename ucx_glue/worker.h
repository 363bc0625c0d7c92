/*
 * ucx_glue::Worker: the process's one UCP context and worker for twohop's inter-node hop,
 * created lazily on first use from one place that builds the UCP configuration (the RC
 * parameters of rc_tuning/ are applied there), plus a cache of endpoints keyed by peer
 * process, kept across communicators and released at finalize.
 *
 * Messages use the UCP tag API. Every wait loop in twohop calls Worker::progress().
 * Thread model: under MPI_THREAD_MULTIPLE (allreduces on different communicators may run
 * concurrently) every UCX call on the worker is serialised by this class's own mutex: a UCX
 * built without --enable-mt (Debian's) reports UCS_THREAD_MODE_MULTI from ucp_worker_query but
 * compiles its locks out. Creation and the endpoint cache are guarded too.
 */
#ifndef TWOHOP_UCX_WORKER_H
#define TWOHOP_UCX_WORKER_H

#include <cstddef>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <ucp/api/ucp.h>

#include "twohop_status.h"

namespace twohop {
namespace ucx {

/* Completion slot of one non-blocking send or receive. */
struct Request {
    std::atomic<bool> done{true}; // set (release) by the completion callback, any thread
    ucs_status_t status = UCS_OK;
    std::size_t received = 0; // bytes, for receives
    uint64_t sender_tag = 0;  // the matched message's tag, for receives
    void *handle = nullptr;   // UCX request while in flight (for cancel), else nullptr

    Request() = default;
    // Copies only make idle slots (containers are sized at set-up, before any transfer).
    Request(const Request &) {}
    Request &operator=(const Request &) = delete;
};

/*
 * Outcome of one step of a transfer schedule whose send and/or receive completed:
 * TWOHOP_ERR_MISMATCH when the receive was truncated or the caller's check of what arrived
 * (`recv_matches`: length, call word, tag bits) failed, TWOHOP_ERR_TRANSPORT when a transfer
 * failed, else TWOHOP_OK.
 */
inline int step_outcome(bool sending, const Request &send, bool receiving, const Request &recv,
                        bool recv_matches) {
    if (receiving && (recv.status == UCS_ERR_MESSAGE_TRUNCATED ||
                      (recv.status == UCS_OK && !recv_matches))) {
        return TWOHOP_ERR_MISMATCH;
    }
    if ((sending && send.status != UCS_OK) || (receiving && recv.status != UCS_OK)) {
        return TWOHOP_ERR_TRANSPORT;
    }
    return TWOHOP_OK;
}

/*
 * One cached endpoint to a peer process. `failed` is set by UCX's error callback (peer
 * process gone, connection lost) and never cleared: the communicators using this endpoint
 * fail their calls, other communicators of the process are not affected.
 */
struct Endpoint {
    ucp_ep_h ep = nullptr;
    uint64_t peer_key = 0;
    std::atomic<bool> failed{false};
};

/* UCP configuration entries (name without the UCX_ prefix, value), applied in order. */
using ConfigPairs = std::vector<std::pair<std::string, std::string>>;

class Worker {
  public:
    /*
     * The process-wide worker, created on the first call with `config` applied to the UCP
     * configuration (later calls ignore `config`). Returns TWOHOP_OK or TWOHOP_ERR_TRANSPORT
     * with *err naming the failing UCX call and its message.
     */
    /* peer_failure: endpoints with UCX peer-failure handling (UCP_ERR_HANDLING_MODE_PEER);
     * false only for the virtual-node testing aid (twohop watches the peers itself). Decided
     * by the first caller (process-wide, like the rest of the configuration). */
    static int instance(const ConfigPairs &config, bool thread_multi, bool peer_failure,
                        Worker **out,
                        std::string *err);
    /* Closes every endpoint, the worker and the context. Safe to call when never created. */
    static void shutdown();
    /* Makes shutdown() leave the worker and its context alive (never cleaned up): called when
     * a communicator was quarantined, i.e. UCX may still own its operations' memory. */
    static void keep_alive();

    /*
     * True when the UCP context reports CUDA device memory among the memory types its transports
     * can send from and receive into (ucp_context_query, UCP_ATTR_FIELD_MEMORY_TYPES): a UCX
     * built with CUDA support and its cuda_copy/cuda_ipc/gdr_copy transports available.
     */
    bool cuda_memory() const { return cuda_memory_; }

    /* This worker's address blob, to be exchanged with peers. */
    const std::vector<uint8_t> &address() const { return address_; }

    /*
     * Endpoint to the process `peer_key` whose worker address is addr[0..len); cached, so a
     * second call for the same peer returns the same endpoint and ignores addr. The returned
     * object lives until shutdown().
     */
    int connect(uint64_t peer_key, const uint8_t *addr, std::size_t len, const Endpoint **ep,
                std::string *err);
    /* True when a healthy endpoint to peer_key exists already. */
    bool connected(uint64_t peer_key);

    /* Posts a tagged send of `bytes` bytes; r->done turns true at completion. */
    int send(ucp_ep_h ep, const void *buf, std::size_t bytes, uint64_t tag, Request *r);
    /* Posts a tagged receive matching `tag` on the bits of `mask` (all by default), into buf
     * of capacity `bytes`; r->sender_tag tells the matched message's full tag. */
    int recv(void *buf, std::size_t bytes, uint64_t tag, Request *r, uint64_t mask = ~uint64_t(0));
    /* Drives UCX; returns true when some event was processed. Under MPI_THREAD_MULTIPLE a
     * thread that finds another one progressing returns at once (that one serves both). */
    bool progress();
    /*
     * Cancels r if still in flight and progresses until its completion callback ran, for at
     * most `max_wait_s` seconds. Returns true when r is settled (its buffer is free again),
     * false when UCX still owns the buffer (the caller must keep the memory alive).
     */
    bool cancel(Request *r, double max_wait_s);
    /* Both of a step's transfers (see cancel above): true when both are settled. */
    bool cancel(Request *a, Request *b, double max_wait_s) {
        const bool ok = cancel(a, max_wait_s);
        return cancel(b, max_wait_s) && ok;
    }

  private:
    Worker() = default;
    ~Worker();
    static void on_ep_error(void *arg, ucp_ep_h ep, ucs_status_t status);

    ucp_context_h context_ = nullptr;
    ucp_worker_h worker_ = nullptr;
    std::vector<uint8_t> address_;
    std::unordered_map<uint64_t, std::unique_ptr<Endpoint>> eps_;
    std::mutex eps_mutex_;
    bool mt_ = false;       // serialise UCX calls with mt_mutex_ (MPI_THREAD_MULTIPLE)
    bool peer_failure_ = true; // endpoints with UCP_ERR_HANDLING_MODE_PEER
    bool cuda_memory_ = false;
    std::mutex mt_mutex_;
};

/*
 * Undoes the error-signal handlers libucs installs when it is loaded (UCX_HANDLE_ERRORS
 * default "bt"), unless UCX_HANDLE_ERRORS is set in the environment. Uses libucs's exported
 * ucs_debug_disable_signals when the loaded UCX has it; otherwise does nothing.
 */
void restore_signal_handlers();

} // namespace ucx
} // namespace twohop

#endif
