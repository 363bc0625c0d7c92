/*
 * twohop_comm_setup: the collective set-up of one communicator, on its first allreduce. All
 * traffic is point-to-point with twohop's private tag (setup_exchange.h).
 *
 *   step  who            what
 *   1     all            allgather {magic, node key, process key, pid, pid namespace, shm
 *                        nonce, parameters, virtual-node parse result}
 *   2     all            topology and bounds; parameters valid and equal everywhere (decided
 *                        from the allgathered data: the same on every rank, no agreement)
 *   3     all            agree a twohop-private communicator id (comm_ids.h)
 *   4     node leaders   create the node's shm segment (exclusive, 0600)      -> agree
 *   5     other ranks    attach to it                                          -> agree
 *   6     node leaders   unlink its name (nothing left in /dev/shm afterwards)
 *   7     all (>1 node)  UCX worker -> agree; if any rank lacks a cached endpoint (agreed),
 *                        exchange worker addresses; connect rail neighbours -> agree
 * Each "agree" is a logical OR of failure flags, so every rank takes the same decision. A
 * failing exchange (a rank does not take part) is an error, not a fallback.
 */
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <dirent.h>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unistd.h>

#include "comm_ids.h"
#include "schedule/engine.h"
#include "schedule/stream_call.h"
#include "cuda_driver.h"
#include "gpu_kernel_list.h"
#include "gpu_node.h"
#include "proxy.h"
#include "shm_cache.h"
#include "memory_kind.h"
#include "param_table.h"
#include "rc_settings.h"
#include "rd_plan.h"
#include "rhd_plan.h"
#include "segment_plan.h"
#include "setup_exchange.h"
#include "virtual_nodes.h"

namespace {

constexpr uint64_t kMagic = 0x74776f686f700006ULL; // "twohop", set-up record version 6

/* What every rank contributes in step 1. Plain, fixed size. */
struct RankInfo {
    uint64_t magic;
    uint64_t node_key;
    uint64_t proc_key;
    uint64_t shm_nonce;
    uint64_t pidns;
    int64_t pid;
    uint64_t agreed[twohop::kAgreedParams]; // the TWOHOP_AGREED parameters (param_table.h)
    int32_t vnode_shm, reserved;
    uint64_t host_key; // the real host (virtual_nodes replaces node_key)
    int32_t vn_error; // this rank could not parse coll_twohop_virtual_nodes
    int32_t gpu;      // this process has the CUDA driver and twohop's device kernels
    twohop::ShmOffer offer[twohop::kShmOffers]; // segments this rank retained (shm_cache.h)
};

void set_why(char *why, size_t len, const std::string &msg) {
    if (why && len) std::snprintf(why, len, "%s", msg.c_str());
}

void collect_pair(const char *name, const char *value, void *arg) {
    static_cast<twohop::ucx::ConfigPairs *>(arg)->emplace_back(name, value);
}

/*
 * The UCP configuration of this process's worker: the validated RC parameters, with the
 * timeout staggered by local rank when coll_twohop_rc_stagger is set. Every name is checked
 * against the loaded UCX's configuration listing (an unknown name is an error), and only pairs
 * an open transport reads are applied, so hosts without RC get no RC key (and no UCX warning).
 * A user's own UCX_* environment variable wins; the conflict is logged once.
 */
int ucx_config(const twohop_comm *c, const twohop_params &p, twohop::ucx::ConfigPairs *out,
               std::string *err) {
    const twohop_rc_settings s = twohop_rc_from_params(&p);
    char msg[512] = "";
    twohop::ucx::ConfigPairs pairs;
    int rc = twohop_rc_ucx_pairs_checked(&s, c->topo.local_rank, c->topo.local_size(),
                                         collect_pair, &pairs, msg, sizeof(msg));
    if (rc == TWOHOP_RC_NOTICE) {
        c->host.log(1, msg);
    } else if (rc == TWOHOP_RC_NOT_APPLIED) {
        c->host.log(2, msg);
    } else if (rc != TWOHOP_RC_OK) {
        *err = msg;
        return TWOHOP_ERR_BAD_PARAM;
    }
    *out = std::move(pairs);
    return TWOHOP_OK;
}

/* Communicator rank of the neighbour at ring offset `dir` (+1 right, -1 left) on rail s. */
int neighbour(const twohop_comm *c, int s, int dir) {
    const std::vector<int> members = c->topo.rail(s);
    const int n = static_cast<int>(members.size());
    return members[(c->topo.my_node + dir + n) % n];
}

/*
 * Connects this rank to both neighbours of every rail it is on (right for sending, left so a
 * failed sender is detected). Worker addresses are exchanged only when some rank lacks a
 * cached endpoint, so a communicator over processes already connected exchanges nothing.
 */
int connect_rails(twohop_comm *c, twohop::Exchange &ex, const std::vector<RankInfo> &info,
                  int *agreed_fail, std::string *err) {
    // The node leader also talks to its recursive-doubling partners on the rail of shard 0.
    const std::vector<int> rail0 = c->topo.rail(0);
    std::vector<int> rd_partners;
    if (c->topo.local_rank == 0 && c->latency_hop2 == 0) {
        rd_partners = twohop::rd_partners(c->topo.n_nodes(), c->topo.my_node);
    }
    // With Rabenseifner every rail also talks to its halving/doubling partners.
    const bool may_rhd = c->hop2_alg == 1 ||
                         (c->hop2_alg == 2 && c->topo.n_nodes() >= c->rhd_min_nodes);
    const std::vector<int> rhd = may_rhd
                                     ? twohop::rhd_partners(c->topo.n_nodes(), c->topo.my_node)
                                     : std::vector<int>();
    int missing = 0;
    for (int s : c->my_shards) {
        for (int dir : {1, -1}) {
            if (!c->worker->connected(info[neighbour(c, s, dir)].proc_key)) missing = 1;
        }
        const std::vector<int> members = c->topo.rail(s);
        for (int q : rhd) {
            if (!c->worker->connected(info[members[q]].proc_key)) missing = 1;
        }
    }
    for (int q : rd_partners) {
        if (!c->worker->connected(info[rail0[q]].proc_key)) missing = 1;
    }
    const int p = c->topo.size;
    std::vector<uint64_t> lens(p, 0);
    std::vector<uint8_t> all;
    uint64_t maxlen = 0;
    int need = 0;
    int rc = ex.agree_or(missing, &need, err);
    if (rc != TWOHOP_OK) return rc;
    if (need) {
        const auto &mine = c->worker->address();
        uint64_t len = mine.size();
        if ((rc = ex.allgather(&len, lens.data(), sizeof(len), err)) != TWOHOP_OK) return rc;
        maxlen = *std::max_element(lens.begin(), lens.end());
        std::vector<uint8_t> padded(maxlen, 0);
        all.resize(maxlen * p);
        std::copy(mine.begin(), mine.end(), padded.begin());
        if ((rc = ex.allgather(padded.data(), all.data(), maxlen, err)) != TWOHOP_OK) return rc;
    }
    int failed = 0;
    std::string local_err;
    // Endpoint to communicator rank `peer` (cached per process); nullptr once one failed.
    auto connect_to = [&](int peer) -> const twohop::ucx::Endpoint * {
        const uint8_t *addr = all.empty() ? nullptr : &all[peer * maxlen];
        const twohop::ucx::Endpoint *ep = nullptr;
        if (!failed && c->worker->connect(info[peer].proc_key, addr, lens[peer], &ep,
                                          &local_err) != TWOHOP_OK) {
            failed = 1;
        }
        return ep;
    };
    for (int s : c->my_shards) {
        twohop_rail rail;
        rail.shard = s;
        rail.n = c->topo.n_nodes();
        rail.pos = c->topo.my_node;
        rail.right = connect_to(neighbour(c, s, 1));
        rail.left = connect_to(neighbour(c, s, -1));
        if (!rhd.empty()) {
            const std::vector<int> members = c->topo.rail(s);
            rail.peers.assign(rail.n, nullptr);
            for (int q : rhd) rail.peers[q] = connect_to(members[q]);
        }
        c->rails.push_back(rail);
    }
    c->rd_peers.assign(c->topo.n_nodes(), nullptr);
    for (int q : rd_partners) c->rd_peers[q] = connect_to(rail0[q]);
    if ((rc = ex.agree_or(failed, agreed_fail, err)) != TWOHOP_OK) return rc;
    if (*agreed_fail) {
        *err = local_err.empty() ? "hop-2 connection failed on another rank" : local_err;
        return TWOHOP_OK;
    }
    c->hop2.resize(c->depth * c->rails.size());
    c->scratch.resize(c->depth * c->rails.size() * c->slot_bytes);
    return c->post_abort_recv();
}

/* Removes, once per process, segments left in /dev/shm by dead twohop leaders. */
void clean_stale_once(const twohop_host &h, uint64_t pidns) {
    static std::once_flag once;
    std::call_once(once, [&] {
        uint64_t bytes = 0;
        const int n = twohop::remove_stale_segments("/dev/shm", pidns, &bytes);
        if (n > 0) {
            char msg[160];
            std::snprintf(msg, sizeof(msg),
                          "removed %d shared-memory segment(s) of dead twohop processes from "
                          "/dev/shm (%.1f MiB)", n, bytes / 1048576.0);
            h.log(0, msg);
        }
    });
}

} // namespace

extern "C" int twohop_comm_setup(const twohop_comm_args *a, twohop_comm **out, int *resource,
                                 char *why, size_t whylen) {
    *out = nullptr;
    *resource = 0;
    const twohop_params &prm = *a->params;
    // Owned here until set-up succeeds; every early return releases it.
    std::unique_ptr<twohop_comm> owner(new twohop_comm());
    twohop_comm *c = owner.get();
    c->host = a->host;
    c->timeout_s = prm.timeout;
    c->gpu_hop1.settle_timeout_s = prm.timeout;
    c->async_progress = prm.async_progress != 0;
    c->posted_nonblocking = prm.posted_nonblocking;
    c->async_start_bytes = prm.async_start_bytes;
    c->stream_on_device = prm.enqueue_on_device;
    c->stream_on_device_min = prm.enqueue_on_device_min_bytes;
    c->stream_stage_kernel_max = prm.enqueue_stage_kernel_max_bytes;
    c->posted_proxy_min_bytes = prm.posted_proxy_min_bytes;
    c->posted_wake_early = prm.posted_wake_early;
    c->posted_wake_lead_us = prm.posted_wake_lead_us;
    c->posted_wake_spin_us = prm.posted_wake_spin_us;
    c->posted_wake_quantile = prm.posted_wake_quantile;
    { // every size class's wake lead (gpu_node.h), from these parameters
        const float start = static_cast<float>(std::max(prm.posted_wake_lead_us, 0));
        const float target = static_cast<float>(prm.posted_wake_spin_us);
        for (twohop::WakeLead &w : c->gpu_hop1.wake) {
            w = twohop::WakeLead(start, target, 4.0f * std::max({start, 50.0f, target}),
                                 prm.posted_wake_quantile);
        }
    }
    c->verbose = prm.verbose;
    twohop::Exchange ex(c->host, a->rank, a->size, prm.timeout);
    std::string err;
    auto exchange_failed = [&](int rc) {
        set_why(why, whylen, err);
        return rc;
    };

    // 0. Node key: the host, or the virtual node of the testing aid.
    uint64_t node_key = a->host_key;
    std::string vn_error;
    if (a->virtual_nodes && a->virtual_nodes[0]) {
        std::vector<long> node_of;
        if (twohop::parse_virtual_nodes(a->virtual_nodes, a->world_size, &node_of, &vn_error)) {
            node_key = (uint64_t(1) << 63) | static_cast<uint64_t>(node_of[a->world_rank]);
        }
    }
    // 1. Exchange what each rank knows.
    const uint64_t pidns = twohop::pid_namespace();
    RankInfo me{};
    me.magic = kMagic;
    me.node_key = node_key;
    me.proc_key = a->proc_key;
    me.shm_nonce = twohop::random_nonce();
    me.pidns = pidns;
    me.pid = static_cast<int64_t>(getpid());
    me.host_key = a->host_key;
    me.vnode_shm = prm.vnode_shm_transport != 0 && a->virtual_nodes && a->virtual_nodes[0];
    twohop::agreed_words(prm, me.agreed);
    me.vn_error = !vn_error.empty();
    me.gpu = gpu_node_capable() ? 1 : 0;
    // Segments retained from freed communicators: taken out of the cache (a concurrent set-up
    // cannot offer them too) and offered; those not reused are unmapped below.
    std::vector<twohop::RetainedShm> retained = twohop::ShmCache::process().take();
    for (size_t i = 0; i < retained.size() && i < size_t(twohop::kShmOffers); ++i) {
        me.offer[i] = retained[i].offer;
    }
    std::vector<RankInfo> info(a->size);
    int rc = ex.allgather(&me, info.data(), sizeof(RankInfo), &err);
    if (rc != TWOHOP_OK) return exchange_failed(rc);

    // 2. Decisions from the allgathered data only: the same on every rank.
    for (int r = 0; r < a->size; ++r) {
        if (info[r].magic != kMagic) {
            set_why(why, whylen, "rank " + std::to_string(r) + " runs another twohop version");
            return TWOHOP_ERR_MISMATCH;
        }
        if (info[r].vn_error) {
            set_why(why, whylen, r == a->rank ? vn_error
                                              : "bad coll_twohop_virtual_nodes on rank " +
                                                    std::to_string(r));
            return TWOHOP_ERR_BAD_PARAM;
        }
    }
    for (int r = 1; r < a->size; ++r) {
        // Every rank reads the same allgathered words: all fail alike, naming the parameter.
        std::string differs = twohop::agreed_mismatch(info[0].agreed, info[r].agreed, 0, r);
        if (differs.empty() && info[r].vnode_shm != info[0].vnode_shm) {
            differs = "coll_twohop_vnode_shm_transport (with coll_twohop_virtual_nodes) differs "
                      "between ranks 0 and " + std::to_string(r);
        }
        if (!differs.empty()) {
            set_why(why, whylen, differs);
            return TWOHOP_ERR_BAD_PARAM;
        }
    }
    std::string bad = twohop::param_range_error(prm);
    if (!bad.empty()) {
        set_why(why, whylen, bad);
        return TWOHOP_ERR_BAD_PARAM;
    }
    if (prm.posted_wake_spin_us > 0 && prm.posted_wake_quantile > 0 && a->rank == 0) {
        c->host.log(1, ("coll_twohop_posted_wake_spin_us " +
                        std::to_string(prm.posted_wake_spin_us) +
                        " has no effect while coll_twohop_posted_wake_quantile is " +
                        std::to_string(prm.posted_wake_quantile) + " (set that to 0 for the "
                        "spin target)").c_str());
    }
    std::vector<uint64_t> keys(a->size);
    for (int r = 0; r < a->size; ++r) keys[r] = info[r].node_key;
    c->topo = twohop::build_topology(keys, a->rank);
    if (c->topo.n_shards() > kMaxShards || c->topo.n_nodes() > kMaxNodes) {
        set_why(why, whylen, "more than " + std::to_string(kMaxShards) + " ranks on a node or " +
                                 std::to_string(kMaxNodes) +
                                 " nodes (hop-2 tag fields would overflow)");
        return TWOHOP_ERR_BAD_PARAM;
    }
    c->depth = prm.pipeline_depth;
    c->post_batch = prm.post_batch;
    c->latency_hop2 = prm.latency_hop2;
    c->gpu_posted = prm.gpu_posted != 0;
    c->gpu_one_kernel_bytes = prm.gpu_one_kernel_max_bytes;
    c->gpu_hop3_gather = prm.gpu_hop3_gather;
    c->gather_min_bytes = prm.gpu_hop3_gather_min_bytes;
    c->posted_wide_bytes = prm.posted_kernel_wide_bytes;
    c->hop2_alg = prm.hop2_algorithm;
    c->rhd_max_bytes = prm.hop2_rabenseifner_max_bytes;
    c->rhd_min_nodes = prm.hop2_rabenseifner_min_nodes;
    c->posted_batch = prm.posted_batch;
    c->posted_kernel_blocks = prm.posted_kernel_blocks;
    c->slot_bytes = twohop::ShmLayout::align_up(prm.segment_bytes);
    c->small_bytes = prm.small_msg_bytes;
    c->stream_bytes = prm.stream_copy_bytes;
    c->my_shards = c->topo.my_shards();
    // (n_shards is the largest node's rank count: the same on every rank, so every node runs
    // the rounds, and consumes their sequence number, alike.)
    c->gpu_round = c->topo.n_shards() <= TWOHOP_GPU_MAX_RANKS;
    for (int r = 0; r < a->size; ++r) c->gpu_round = c->gpu_round && info[r].gpu;
    // Local peers whose liveness can be checked: same pid namespace as mine. With hop 2 over
    // shared memory between virtual nodes (no UCX peer-failure handling), every rank of the
    // communicator: they share the host.
    c->vnode_shm = info[0].vnode_shm != 0;
    if (c->vnode_shm) {
        for (int r = 0; r < a->size; ++r) {
            if (info[r].host_key != info[0].host_key) {
                set_why(why, whylen, "coll_twohop_vnode_shm_transport needs every rank on one "
                                     "host (testing aid for virtual nodes)");
                return TWOHOP_ERR_BAD_PARAM;
            }
        }
    }
    for (int r = 0; r < a->size; ++r) {
        const bool watched = c->vnode_shm ? r != a->rank
                                          : c->topo.node_of[r] == c->topo.my_node;
        if (watched) c->local_pids.push_back(info[r].pidns == pidns && pidns != 0 ? info[r].pid : 0);
    }

    // 3. The private communicator id for hop-2 tags.
    rc = twohop::agree_comm_id(ex, twohop::process_comm_ids(), &c->comm_id, &err);
    if (rc == TWOHOP_ERR_NO_MEMORY) {
        *resource = 1;
        set_why(why, whylen, "no free twohop communicator id (more than " +
                                 std::to_string(twohop::kMaxCommIds) + " live communicators)");
        return rc;
    }
    if (rc != TWOHOP_OK) return exchange_failed(rc);
    c->id_reserved = true;

    // 4-6. The node's shared-memory segment: a retained one every local rank kept (decided for
    // every node from the allgathered offers, so all ranks agree), else a new one.
    auto layout_of = [&](int node) {
        twohop::ShmLayout l;
        l.local_size = static_cast<int>(c->topo.node_ranks[node].size());
        l.depth = c->depth;
        l.slot_bytes = c->slot_bytes;
        return l;
    };
    const twohop::ShmLayout layout = layout_of(c->topo.my_node);
    uint64_t my_token = 0, seq_base = 0;
    bool all_reuse = true;
    for (int n = 0; n < c->topo.n_nodes(); ++n) {
        std::vector<uint64_t> members;
        std::vector<const twohop::ShmOffer *> offers;
        for (int r : c->topo.node_ranks[n]) {
            members.push_back(info[r].proc_key);
            offers.push_back(info[r].offer);
        }
        const uint64_t shape = twohop::shm_shape(layout_of(n), members);
        const uint64_t token = twohop::choose_reuse(offers, shape);
        all_reuse = all_reuse && token != 0;
        for (int r : c->topo.node_ranks[n]) { // sequence numbers start above every reused one
            for (const twohop::ShmOffer &o : info[r].offer) {
                if (token != 0 && o.token == token) seq_base = std::max(seq_base, o.final_seq);
            }
        }
        if (n == c->topo.my_node) {
            my_token = token;
            c->shm_shape = shape;
        }
    }
    for (auto &r : retained) {
        if (my_token != 0 && r.offer.token == my_token && r.shm) c->shm = std::move(*r.shm);
    }
    retained.clear(); // the offers not reused: unmapped now, before a new segment is created
    const bool reuse = my_token != 0 && c->shm.mapped();
    const int leader = c->topo.node_ranks[c->topo.my_node][0];
    const RankInfo &li = info[leader];
    const std::string name = twohop::shm_name(li.pidns, li.pid, li.shm_nonce);
    const bool is_leader = c->topo.local_rank == 0;
    int failed = 0, agreed = 0;
    std::string local_err;
    if (!all_reuse) { // some node creates: two agreement rounds over the whole communicator
        if (is_leader && !reuse) clean_stale_once(c->host, pidns);
        failed = is_leader && !reuse ? !c->shm.create(name, layout, &err) : 0;
        local_err = err;
        if ((rc = ex.agree_or(failed, &agreed, &err)) != TWOHOP_OK) return exchange_failed(rc);
        if (agreed) {
            *resource = 1;
            set_why(why, whylen, failed ? local_err
                                        : "shared-memory segment creation failed on a node leader");
            return TWOHOP_ERR_NO_MEMORY;
        }
        failed = is_leader || reuse ? 0 : !c->shm.attach(name, layout, &err);
        local_err = err;
        if ((rc = ex.agree_or(failed, &agreed, &err)) != TWOHOP_OK) return exchange_failed(rc);
        if (agreed) {
            *resource = 1;
            set_why(why, whylen, failed ? local_err : "shared-memory attach failed on another rank");
            return TWOHOP_ERR_NO_MEMORY;
        }
        c->shm.unlink();
    } else if (!reuse) { // every rank agreed this node reuses, so this rank kept it: unreachable
        set_why(why, whylen, "a retained shared-memory segment vanished");
        return TWOHOP_ERR_NO_MEMORY;
    }
    c->shm_token = twohop::shm_token(c->shm.name());
    c->seq.start_at(seq_base);
    c->shm_reused = reuse;
    if (seq_base > 0) {
        // Every wait of this communicator targets a sequence number above seq_base; my flags
        // move up to it (from an old communicator's values or from 0), so waits for segments
        // "before" this communicator hold on every node. Single writer, monotonic: a peer that
        // reads my line before this store waits a little longer, never wrongly less.
        twohop::RankFlags &f = c->shm.flags(c->topo.local_rank);
        f.arrived.store(seq_base, std::memory_order_release);
        f.reduced.store(seq_base, std::memory_order_release);
        f.done.store(seq_base, std::memory_order_release);
        for (auto &w : f.ready) w.store(seq_base, std::memory_order_release);
        f.vote.store(seq_base << 1, std::memory_order_release);
        f.desc_seq.store(seq_base, std::memory_order_release);
        f.gathered.store(seq_base, std::memory_order_release);
    }

    // 7. Rails.
    if (c->topo.n_nodes() > 1) {
        twohop::ucx::ConfigPairs config;
        err.clear();
        rc = ucx_config(c, prm, &config, &err);
        // The proxy thread's progress of calls in flight shares the worker with the calling
        // thread: serialise UCX calls then too.
        if (rc == TWOHOP_OK) {
            rc = twohop::ucx::Worker::instance(config,
                                               a->thread_multiple != 0 || c->async_progress,
                                               !c->vnode_shm, &c->worker, &err);
        }
        local_err = err;
        int xrc = ex.agree_or(rc != TWOHOP_OK, &agreed, &err);
        if (xrc != TWOHOP_OK) return exchange_failed(xrc);
        if (agreed) {
            set_why(why, whylen, rc != TWOHOP_OK ? local_err : "UCX start-up failed on another rank");
            return TWOHOP_ERR_TRANSPORT;
        }
        err.clear();
        xrc = connect_rails(c, ex, info, &agreed, &err);
        if (xrc != TWOHOP_OK) return exchange_failed(xrc);
        if (agreed) {
            set_why(why, whylen, err);
            return TWOHOP_ERR_TRANSPORT;
        }
    }
    if (c->host.log) {
        char msg[512];
        std::snprintf(msg, sizeof(msg),
                      "comm set up: rank %d of %d, %d node(s), node %d local rank %d of %d, "
                      "%d shard(s), id %u, shm %llu bytes%s%s%s%s%s",
                      a->rank, a->size, c->topo.n_nodes(), c->topo.my_node, c->topo.local_rank,
                      c->topo.local_size(), c->topo.n_shards(), c->comm_id,
                      static_cast<unsigned long long>(layout.total_bytes()),
                      c->shm_reused ? " (reused from a freed communicator)" : "",
                      c->gpu_round ? ", GPU path for device buffers" : "",
                      c->topo.n_nodes() < 2 ? ""
                      : c->latency_hop2 == 0 ? ", latency path between nodes: recursive doubling"
                                             : ", latency path between nodes: ring",
                      c->topo.n_nodes() < 2 ? ""
                      : c->hop2_alg == 0    ? ", pipeline between nodes: ring"
                      : c->hop2_alg == 1    ? ", pipeline between nodes: Rabenseifner"
                      : c->topo.n_nodes() >= c->rhd_min_nodes
                          ? ", pipeline between nodes: Rabenseifner for small shards, ring above"
                          : ", pipeline between nodes: ring (too few nodes for Rabenseifner)",
                      c->worker == nullptr ? ""
                      : c->worker->cuda_memory()
                          ? ", UCX reports CUDA memory support (hop 2 still runs from host "
                            "shared memory)"
                          : ", UCX without CUDA memory support (hop 2 runs from host shared "
                            "memory)");
        c->host.log(2, msg);
    }
    *out = owner.release();
    return TWOHOP_OK;
}

extern "C" void twohop_comm_free(twohop_comm *c) {
    if (c == nullptr) return;
    // Stream-ordered calls still queued (they have no request that keeps the communicator
    // alive) complete first: their streams wait for them.
    if (!c->queue.empty() || !c->completed.empty() || c->has_incoming.load()) {
        twohop::lock_engine(c);
        twohop::drain_queue(c);
        twohop::unlock_engine(c);
    }
    twohop::forget_comm(c);
    delete c;
}

extern "C" const char *twohop_comm_cannot_serve(const twohop_comm *c, uint64_t count,
                                                size_t item_bytes) {
    (void)count;
    if (item_bytes > c->slot_bytes) return "datatype size larger than coll_twohop_segment_bytes";
    return nullptr;
}

extern "C" int twohop_comm_nodes(const twohop_comm *c) { return c->topo.n_nodes(); }

extern "C" uint32_t twohop_comm_id(const twohop_comm *c) { return c->comm_id; }

extern "C" void twohop_core_finalize(void) {
    twohop::Proxy::instance().stop(); // GPU-posted mode's progress thread, if it ever started
    twohop::ShmCache::process().clear();
    twohop::ucx::Worker::shutdown();
}

extern "C" void twohop_core_quiet_signals(void) { twohop::ucx::restore_signal_handlers(); }

extern "C" int twohop_memory_kind(const void *p) {
    return static_cast<int>(twohop::memory_kind(p));
}

extern "C" int twohop_kind_to_host(int kind, void *host, const void *user, size_t n) {
    return twohop::mem_ops(static_cast<twohop::MemoryKind>(kind)).to_host(host, user, n);
}

extern "C" int twohop_kind_from_host(int kind, void *user, const void *host, size_t n) {
    return twohop::mem_ops(static_cast<twohop::MemoryKind>(kind)).from_host(user, host, n, false);
}

extern "C" int twohop_memory_kinds_init(int poison_testing, char *why, size_t whylen) {
    twohop::set_poisoned_memory_testing(poison_testing != 0);
    std::string w;
    const bool ok = twohop::cuda::load(&w);
    if (!ok && why && whylen) std::snprintf(why, whylen, "%s", w.c_str());
    return ok ? 1 : 0;
}
