/*
 * twohop_comm_setup: the collective set-up of one communicator, on its first allreduce. All
 * traffic is point-to-point with twohop's private tag (setup_exchange.h).
 *
 *   step  who            what                                                  function
 *   1     all            allgather {magic, node key, process key, pid, pid     exchange_info
 *                        namespace, shm nonce, parameters, virtual-node parse
 *                        result, retained segments offered}
 *   2     all            parameters valid and equal everywhere; topology and   check_agreement,
 *                        bounds (decided from the allgathered data: the same   build_shape
 *                        on every rank, no agreement)
 *   3     all            agree a twohop-private communicator id (comm_ids.h)   agree_id
 *   4     node leaders   create the node's shm segment (exclusive, 0600)       setup_shm
 *                        -> agree (or reuse a retained one every rank kept)
 *   5     other ranks    attach to it -> agree                                 setup_shm
 *   6     node leaders   unlink its name (nothing left in /dev/shm afterwards) setup_shm
 *   7     all (>1 node)  UCX worker -> agree; if any rank lacks a cached       start_rails
 *                        endpoint (agreed), exchange worker addresses; connect
 *                        rail neighbours -> agree
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

namespace {

/* One set-up in progress: its inputs, the communicator being built, the exchange all its
 * collective steps run over, and how a step reports its failure (fail: `why` for the caller). */
struct Setup {
    const twohop_comm_args *a;
    const twohop_params &prm;
    twohop_comm *c;
    twohop::Exchange ex;
    char *why;
    size_t whylen;
    int *resource;
    std::string err; // the exchange's or a step's own message
    uint64_t pidns = 0;
    std::string vn_error;            // this rank's coll_twohop_virtual_nodes parse error
    std::vector<RankInfo> info;      // step 1's allgather, indexed by communicator rank
    std::vector<twohop::RetainedShm> retained; // segments this rank offered (step 1)
    twohop::ShmLayout layout;        // this node's segment (steps 4-6)

    Setup(const twohop_comm_args *args, twohop_comm *comm, char *w, size_t wl, int *res)
        : a(args), prm(*args->params), c(comm),
          ex(comm->host, args->rank, args->size, args->params->timeout), why(w), whylen(wl),
          resource(res) {}
    int fail(int rc, const std::string &msg) {
        set_why(why, whylen, msg);
        return rc;
    }
    int exchange_failed(int rc) { return fail(rc, err); }
};

/* The communicator's settings from the parameters (validated in check_agreement; on failure
 * the communicator is destroyed unused). */
void apply_params(twohop_comm *c, const twohop_params &prm) {
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
    c->posted_wake_nap_us = prm.posted_wake_nap_us;
    { // every size class's wake lead (gpu_node.h), from these parameters
        const float start = static_cast<float>(std::max(prm.posted_wake_lead_us, 0));
        const float target = static_cast<float>(prm.posted_wake_spin_us);
        for (twohop::WakeLead &w : c->gpu_hop1.wake) {
            w = twohop::WakeLead(start, target, 4.0f * std::max({start, 50.0f, target}),
                                 prm.posted_wake_quantile);
        }
    }
    c->verbose = prm.verbose;
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
}

/* Step 1: what each rank knows, allgathered into s.info (with the node key: the host, or the
 * virtual node of the testing aid; and the retained segments this rank offers). */
int exchange_info(Setup &s) {
    const twohop_comm_args *a = s.a;
    uint64_t node_key = a->host_key;
    if (a->virtual_nodes && a->virtual_nodes[0]) {
        std::vector<long> node_of;
        if (twohop::parse_virtual_nodes(a->virtual_nodes, a->world_size, &node_of, &s.vn_error)) {
            node_key = (uint64_t(1) << 63) | static_cast<uint64_t>(node_of[a->world_rank]);
        }
    }
    s.pidns = twohop::pid_namespace();
    RankInfo me{};
    me.magic = kMagic;
    me.node_key = node_key;
    me.proc_key = a->proc_key;
    me.shm_nonce = twohop::random_nonce();
    me.pidns = s.pidns;
    me.pid = static_cast<int64_t>(getpid());
    me.host_key = a->host_key;
    me.vnode_shm = s.prm.vnode_shm_transport != 0 && a->virtual_nodes && a->virtual_nodes[0];
    twohop::agreed_words(s.prm, me.agreed);
    me.vn_error = !s.vn_error.empty();
    me.gpu = gpu_node_capable() ? 1 : 0;
    // Segments retained from freed communicators: taken out of the cache (a concurrent set-up
    // cannot offer them too) and offered; those not reused are unmapped in setup_shm.
    s.retained = twohop::ShmCache::process().take();
    for (size_t i = 0; i < s.retained.size() && i < size_t(twohop::kShmOffers); ++i) {
        me.offer[i] = s.retained[i].offer;
    }
    s.info.resize(a->size);
    const int rc = s.ex.allgather(&me, s.info.data(), sizeof(RankInfo), &s.err);
    return rc != TWOHOP_OK ? s.exchange_failed(rc) : TWOHOP_OK;
}

/* Step 2, the checks: one twohop version, valid and equal parameters everywhere -- decided
 * from the allgathered data only, so every rank fails alike, naming the parameter. */
int check_agreement(Setup &s) {
    const twohop_comm_args *a = s.a;
    for (int r = 0; r < a->size; ++r) {
        if (s.info[r].magic != kMagic) {
            return s.fail(TWOHOP_ERR_MISMATCH,
                          "rank " + std::to_string(r) + " runs another twohop version");
        }
        if (s.info[r].vn_error) {
            return s.fail(TWOHOP_ERR_BAD_PARAM,
                          r == a->rank ? s.vn_error
                                       : "bad coll_twohop_virtual_nodes on rank " +
                                             std::to_string(r));
        }
    }
    for (int r = 1; r < a->size; ++r) {
        std::string differs = twohop::agreed_mismatch(s.info[0].agreed, s.info[r].agreed, 0, r);
        if (differs.empty() && s.info[r].vnode_shm != s.info[0].vnode_shm) {
            differs = "coll_twohop_vnode_shm_transport (with coll_twohop_virtual_nodes) differs "
                      "between ranks 0 and " + std::to_string(r);
        }
        if (!differs.empty()) return s.fail(TWOHOP_ERR_BAD_PARAM, differs);
    }
    const std::string bad = twohop::param_range_error(s.prm);
    if (!bad.empty()) return s.fail(TWOHOP_ERR_BAD_PARAM, bad);
    if (s.prm.posted_wake_spin_us > 0 && s.prm.posted_wake_quantile > 0 && a->rank == 0) {
        s.c->host.log(1, ("coll_twohop_posted_wake_spin_us " +
                          std::to_string(s.prm.posted_wake_spin_us) +
                          " has no effect while coll_twohop_posted_wake_quantile is " +
                          std::to_string(s.prm.posted_wake_quantile) + " (set that to 0 for the "
                          "spin target)").c_str());
    }
    return TWOHOP_OK;
}

/* Step 2, the communicator's shape: topology and its bounds, the GPU rounds, the transport
 * between virtual nodes, and the local peers whose liveness this rank checks. */
int build_shape(Setup &s) {
    const twohop_comm_args *a = s.a;
    twohop_comm *c = s.c;
    std::vector<uint64_t> keys(a->size);
    for (int r = 0; r < a->size; ++r) keys[r] = s.info[r].node_key;
    c->topo = twohop::build_topology(keys, a->rank);
    if (c->topo.n_shards() > kMaxShards || c->topo.n_nodes() > kMaxNodes) {
        return s.fail(TWOHOP_ERR_BAD_PARAM,
                      "more than " + std::to_string(kMaxShards) + " ranks on a node or " +
                          std::to_string(kMaxNodes) + " nodes (hop-2 tag fields would overflow)");
    }
    c->my_shards = c->topo.my_shards();
    // (n_shards is the largest node's rank count: the same on every rank, so every node runs
    // the rounds, and consumes their sequence number, alike.)
    c->gpu_round = c->topo.n_shards() <= TWOHOP_GPU_MAX_RANKS;
    for (int r = 0; r < a->size; ++r) c->gpu_round = c->gpu_round && s.info[r].gpu;
    // Local peers whose liveness can be checked: same pid namespace as mine. With hop 2 over
    // shared memory between virtual nodes (no UCX peer-failure handling), every rank of the
    // communicator: they share the host.
    c->vnode_shm = s.info[0].vnode_shm != 0;
    if (c->vnode_shm) {
        for (int r = 0; r < a->size; ++r) {
            if (s.info[r].host_key != s.info[0].host_key) {
                return s.fail(TWOHOP_ERR_BAD_PARAM,
                              "coll_twohop_vnode_shm_transport needs every rank on one host "
                              "(testing aid for virtual nodes)");
            }
        }
    }
    for (int r = 0; r < a->size; ++r) {
        const bool watched = c->vnode_shm ? r != a->rank
                                          : c->topo.node_of[r] == c->topo.my_node;
        if (watched) {
            c->local_pids.push_back(s.info[r].pidns == s.pidns && s.pidns != 0 ? s.info[r].pid
                                                                               : 0);
        }
    }
    return TWOHOP_OK;
}

/* Step 3: the private communicator id for hop-2 tags. */
int agree_id(Setup &s) {
    const int rc = twohop::agree_comm_id(s.ex, twohop::process_comm_ids(), &s.c->comm_id, &s.err);
    if (rc == TWOHOP_ERR_NO_MEMORY) {
        *s.resource = 1;
        return s.fail(rc, "no free twohop communicator id (more than " +
                              std::to_string(twohop::kMaxCommIds) + " live communicators)");
    }
    if (rc != TWOHOP_OK) return s.exchange_failed(rc);
    s.c->id_reserved = true;
    return TWOHOP_OK;
}

/* Steps 4-6: the node's shared-memory segment -- a retained one every local rank kept
 * (decided for every node from the allgathered offers, so all ranks agree), else a new one --
 * and the sequence numbers' start above every reused segment's. */
int setup_shm(Setup &s) {
    twohop_comm *c = s.c;
    const std::vector<RankInfo> &info = s.info;
    auto layout_of = [&](int node) {
        twohop::ShmLayout l;
        l.local_size = static_cast<int>(c->topo.node_ranks[node].size());
        l.depth = c->depth;
        l.slot_bytes = c->slot_bytes;
        return l;
    };
    s.layout = layout_of(c->topo.my_node);
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
    for (auto &r : s.retained) {
        if (my_token != 0 && r.offer.token == my_token && r.shm) c->shm = std::move(*r.shm);
    }
    s.retained.clear(); // the offers not reused: unmapped now, before a new segment is created
    const bool reuse = my_token != 0 && c->shm.mapped();
    const int leader = c->topo.node_ranks[c->topo.my_node][0];
    const RankInfo &li = info[leader];
    const std::string name = twohop::shm_name(li.pidns, li.pid, li.shm_nonce);
    const bool is_leader = c->topo.local_rank == 0;
    if (!all_reuse) { // some node creates: two agreement rounds over the whole communicator
        if (is_leader && !reuse) clean_stale_once(c->host, s.pidns);
        int failed = is_leader && !reuse ? !c->shm.create(name, s.layout, &s.err) : 0;
        std::string local_err = s.err;
        int agreed = 0;
        int rc = s.ex.agree_or(failed, &agreed, &s.err);
        if (rc != TWOHOP_OK) return s.exchange_failed(rc);
        if (agreed) {
            *s.resource = 1;
            return s.fail(TWOHOP_ERR_NO_MEMORY,
                          failed ? local_err
                                 : "shared-memory segment creation failed on a node leader");
        }
        failed = is_leader || reuse ? 0 : !c->shm.attach(name, s.layout, &s.err);
        local_err = s.err;
        if ((rc = s.ex.agree_or(failed, &agreed, &s.err)) != TWOHOP_OK) {
            return s.exchange_failed(rc);
        }
        if (agreed) {
            *s.resource = 1;
            return s.fail(TWOHOP_ERR_NO_MEMORY,
                          failed ? local_err : "shared-memory attach failed on another rank");
        }
        c->shm.unlink();
    } else if (!reuse) { // every rank agreed this node reuses, so this rank kept it: unreachable
        return s.fail(TWOHOP_ERR_NO_MEMORY, "a retained shared-memory segment vanished");
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
    return TWOHOP_OK;
}

/* Step 7 (more than one node): the UCX worker, then the rails' endpoints; each agreed. */
int start_rails(Setup &s) {
    twohop_comm *c = s.c;
    if (c->topo.n_nodes() <= 1) return TWOHOP_OK;
    twohop::ucx::ConfigPairs config;
    s.err.clear();
    int rc = ucx_config(c, s.prm, &config, &s.err);
    // The proxy thread's progress of calls in flight shares the worker with the calling
    // thread: serialise UCX calls then too.
    if (rc == TWOHOP_OK) {
        rc = twohop::ucx::Worker::instance(config, s.a->thread_multiple != 0 || c->async_progress,
                                           !c->vnode_shm, &c->worker, &s.err);
    }
    const std::string local_err = s.err;
    int agreed = 0;
    int xrc = s.ex.agree_or(rc != TWOHOP_OK, &agreed, &s.err);
    if (xrc != TWOHOP_OK) return s.exchange_failed(xrc);
    if (agreed) {
        return s.fail(TWOHOP_ERR_TRANSPORT,
                      rc != TWOHOP_OK ? local_err : "UCX start-up failed on another rank");
    }
    s.err.clear();
    xrc = connect_rails(c, s.ex, s.info, &agreed, &s.err);
    if (xrc != TWOHOP_OK) return s.exchange_failed(xrc);
    if (agreed) return s.fail(TWOHOP_ERR_TRANSPORT, s.err);
    return TWOHOP_OK;
}

/* The set-up's outcome at verbose 2. */
void log_setup(const Setup &s) {
    const twohop_comm *c = s.c;
    if (!c->host.log) return;
    char msg[512];
    std::snprintf(msg, sizeof(msg),
                  "comm set up: rank %d of %d, %d node(s), node %d local rank %d of %d, "
                  "%d shard(s), id %u, shm %llu bytes%s%s%s%s%s",
                  s.a->rank, s.a->size, c->topo.n_nodes(), c->topo.my_node, c->topo.local_rank,
                  c->topo.local_size(), c->topo.n_shards(), c->comm_id,
                  static_cast<unsigned long long>(s.layout.total_bytes()),
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
                      ? ", UCX reports CUDA memory support (hop 2 still runs from host shared "
                        "memory)"
                      : ", UCX without CUDA memory support (hop 2 runs from host shared "
                        "memory)");
    c->host.log(2, msg);
}

} // namespace

extern "C" int twohop_comm_setup(const twohop_comm_args *a, twohop_comm **out, int *resource,
                                 char *why, size_t whylen) {
    *out = nullptr;
    *resource = 0;
    // Owned here until set-up succeeds; every early return releases it.
    std::unique_ptr<twohop_comm> owner(new twohop_comm());
    twohop_comm *c = owner.get();
    c->host = a->host;
    apply_params(c, *a->params);
    Setup s(a, c, why, whylen, resource);
    int rc;
    if ((rc = exchange_info(s)) != TWOHOP_OK) return rc;       // 1
    if ((rc = check_agreement(s)) != TWOHOP_OK) return rc;     // 2
    if ((rc = build_shape(s)) != TWOHOP_OK) return rc;         // 2
    if ((rc = agree_id(s)) != TWOHOP_OK) return rc;            // 3
    if ((rc = setup_shm(s)) != TWOHOP_OK) return rc;           // 4-6
    if ((rc = start_rails(s)) != TWOHOP_OK) return rc;         // 7
    log_setup(s);
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
