/*
 * twohop_comm_setup: the collective set-up of one communicator, on its first allreduce.
 *
 *   step  who            what
 *   1     all            allgather {node key, process key, pid, token, parameters}
 *   2     all            build the topology; check parameters are valid and equal everywhere
 *   3     node leaders   create the node's shm segment (exclusive, 0600)      -> agree
 *   4     other ranks    attach to it                                          -> agree
 *   5     node leaders   unlink its name (nothing left in /dev/shm afterwards)
 *   6     all (>1 node)  UCX worker -> agree; if any rank lacks a cached endpoint (agreed),
 *                        exchange worker addresses; connect rail neighbours -> agree
 * Each "agree" is a logical OR of failure flags, so every rank takes the same decision.
 */
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <unistd.h>

#include "comm_state.h"
#include "rc_settings.h"
#include "segment_plan.h"
#include "virtual_nodes.h"

namespace {

/* What every rank contributes in step 1. Plain, fixed size. */
struct RankInfo {
    uint64_t node_key;
    uint64_t proc_key;
    uint64_t token;
    int64_t pid;
    uint64_t segment_bytes, small_msg_bytes;
    int32_t depth, post_batch;
};

uint64_t g_token = 0; // per-process count of set-ups, makes shm names unique

void set_why(char *why, size_t len, const std::string &msg) {
    if (why && len) std::snprintf(why, len, "%s", msg.c_str());
}

/* Logical OR of `failed` over the communicator; returns the agreed flag (or 1 on error). */
int agree(const twohop_host &h, int failed) {
    int flag = failed ? 1 : 0;
    if (h.agree_or(h.ctx, &flag) != 0) return 1;
    return flag;
}

void collect_pair(const char *name, const char *value, void *arg) {
    static_cast<twohop::ucx::ConfigPairs *>(arg)->emplace_back(name, value);
}

/*
 * The UCP configuration of this process's worker: the validated RC parameters, with the
 * timeout staggered by local rank (rail) when coll_twohop_rc_stagger is set. A user's own
 * UCX_* environment variable wins; the conflict is logged once.
 */
int ucx_config(const twohop_comm *c, const twohop_params &p, twohop::ucx::ConfigPairs *out,
               std::string *err) {
    const twohop_rc_settings s = twohop_rc_from_params(&p);
    char msg[512] = "";
    int rc = twohop_rc_ucx_pairs(&s, c->topo.local_rank, c->topo.local_size(), collect_pair,
                                 out, msg, sizeof(msg));
    if (rc == TWOHOP_RC_NOTICE) {
        c->host.log(0, msg);
    } else if (rc != TWOHOP_RC_OK) {
        *err = msg;
        return TWOHOP_ERR_BAD_PARAM;
    }
    return TWOHOP_OK;
}

std::string validate(const twohop_params &p) {
    if (p.pipeline_depth < 1 || p.pipeline_depth > 8) {
        return "coll_twohop_pipeline_depth " + std::to_string(p.pipeline_depth) +
               " out of range 1..8";
    }
    if (p.post_batch < 1 || p.post_batch > 64) {
        return "coll_twohop_post_batch " + std::to_string(p.post_batch) + " out of range 1..64";
    }
    if (p.segment_bytes < 4096 || p.segment_bytes > (uint64_t(1) << 30)) {
        return "coll_twohop_segment_bytes " + std::to_string(p.segment_bytes) +
               " out of range 4096..1073741824";
    }
    return "";
}

/* Communicator rank of the right-hand neighbour on the rail of shard s. */
int right_neighbour(const twohop_comm *c, int s) {
    const std::vector<int> members = c->topo.rail(s);
    return members[(c->topo.my_node + 1) % static_cast<int>(members.size())];
}

/*
 * Connects this rank to the right-hand neighbour of every rail it is on. Worker addresses are
 * exchanged (two allgathers) only when some rank lacks a cached endpoint, so a communicator
 * over processes already connected (a dup or split of one set up before) exchanges nothing.
 */
int connect_rails(twohop_comm *c, const std::vector<RankInfo> &info, std::string *err) {
    int missing = 0;
    for (int s : c->my_shards) {
        if (!c->worker->connected(info[right_neighbour(c, s)].proc_key)) missing = 1;
    }
    const int p = c->topo.size;
    std::vector<uint64_t> lens(p, 0);
    std::vector<uint8_t> all;
    uint64_t maxlen = 0;
    if (agree(c->host, missing)) {
        // Address exchange: lengths first, then blobs padded to the longest one.
        const auto &mine = c->worker->address();
        uint64_t len = mine.size();
        if (c->host.allgather(c->host.ctx, &len, lens.data(), sizeof(len)) != 0) {
            *err = "allgather of UCX address lengths failed";
            return TWOHOP_ERR_HOST;
        }
        maxlen = *std::max_element(lens.begin(), lens.end());
        std::vector<uint8_t> padded(maxlen, 0);
        all.resize(maxlen * p);
        std::copy(mine.begin(), mine.end(), padded.begin());
        if (c->host.allgather(c->host.ctx, padded.data(), all.data(), maxlen) != 0) {
            *err = "allgather of UCX worker addresses failed";
            return TWOHOP_ERR_HOST;
        }
    }
    for (int s : c->my_shards) {
        twohop_rail rail;
        rail.shard = s;
        rail.n = c->topo.n_nodes();
        rail.pos = c->topo.my_node;
        const int right = right_neighbour(c, s);
        const uint8_t *addr = all.empty() ? nullptr : &all[right * maxlen];
        int rc = c->worker->connect(info[right].proc_key, addr, lens[right], &rail.right, err);
        if (rc != TWOHOP_OK) return rc;
        c->rails.push_back(rail);
    }
    c->rings.resize(c->depth * c->rails.size());
    c->scratch.resize(c->depth * c->rails.size() * c->slot_bytes);
    return TWOHOP_OK;
}

} // namespace

extern "C" int twohop_comm_setup(const twohop_comm_args *a, twohop_comm **out, char *why,
                                 size_t whylen) {
    *out = nullptr;
    const twohop_params &prm = *a->params;
    // Owned here until set-up succeeds; every early return releases it.
    std::unique_ptr<twohop_comm> owner(new twohop_comm());
    twohop_comm *c = owner.get();
    c->host = a->host;
    c->comm_id = a->comm_id;

    // 0. Node key: the host, or the virtual node of the testing aid.
    uint64_t node_key = a->host_key;
    std::string vn_error;
    if (a->virtual_nodes && a->virtual_nodes[0]) {
        std::vector<long> node_of;
        if (twohop::parse_virtual_nodes(a->virtual_nodes, a->world_size, &node_of, &vn_error)) {
            node_key = (uint64_t(1) << 63) | static_cast<uint64_t>(node_of[a->world_rank]);
        }
    }
    if (agree(c->host, !vn_error.empty())) {
        set_why(why, whylen, vn_error.empty() ? "bad coll_twohop_virtual_nodes on another rank"
                                              : vn_error);
        return TWOHOP_ERR_BAD_PARAM;
    }
    // 1. Exchange what each rank knows.
    RankInfo me{node_key, a->proc_key, ++g_token, static_cast<int64_t>(getpid()),
                prm.segment_bytes, prm.small_msg_bytes, prm.pipeline_depth, prm.post_batch};
    std::vector<RankInfo> info(a->size);
    if (a->host.allgather(a->host.ctx, &me, info.data(), sizeof(RankInfo)) != 0) {
        set_why(why, whylen, "allgather of rank information failed");
        return TWOHOP_ERR_HOST;
    }
    // 2. Topology and parameters (decided from allgathered data only: same on every rank).
    std::vector<uint64_t> keys(a->size);
    for (int r = 0; r < a->size; ++r) keys[r] = info[r].node_key;
    c->topo = twohop::build_topology(keys, a->rank);
    for (int r = 1; r < a->size; ++r) {
        if (info[r].segment_bytes != info[0].segment_bytes ||
            info[r].small_msg_bytes != info[0].small_msg_bytes ||
            info[r].depth != info[0].depth || info[r].post_batch != info[0].post_batch) {
            set_why(why, whylen, "coll_twohop_* algorithm parameters differ between ranks 0 and " +
                                     std::to_string(r));
                return TWOHOP_ERR_BAD_PARAM;
        }
    }
    std::string bad = validate(prm);
    if (!bad.empty()) {
        set_why(why, whylen, bad);
        return TWOHOP_ERR_BAD_PARAM;
    }
    c->depth = prm.pipeline_depth;
    c->post_batch = prm.post_batch;
    c->slot_bytes = twohop::ShmLayout::align_up(prm.segment_bytes);
    c->small_bytes = prm.small_msg_bytes;
    c->stream_bytes = prm.stream_copy_bytes;
    c->my_shards = c->topo.my_shards();

    // 3-5. The node's shared-memory segment.
    twohop::ShmLayout layout;
    layout.local_size = c->topo.local_size();
    layout.depth = c->depth;
    layout.slot_bytes = c->slot_bytes;
    const int leader = c->topo.node_ranks[c->topo.my_node][0];
    const RankInfo &li = info[leader];
    const std::string name = "/twohop-" + std::to_string(li.proc_key) + "-" +
                             std::to_string(li.pid) + "-" + std::to_string(li.token);
    std::string err;
    const bool is_leader = c->topo.local_rank == 0;
    int failed = is_leader ? !c->shm.create(name, layout, &err) : 0;
    if (agree(c->host, failed)) {
        set_why(why, whylen, err.empty() ? "shared-memory segment creation failed on another rank"
                                         : err);
        return TWOHOP_ERR_NO_MEMORY;
    }
    failed = is_leader ? 0 : !c->shm.attach(name, layout, &err);
    if (agree(c->host, failed)) {
        set_why(why, whylen, err.empty() ? "shared-memory attach failed on another rank" : err);
        return TWOHOP_ERR_NO_MEMORY;
    }
    c->shm.unlink();

    // 6. Rails.
    if (c->topo.n_nodes() > 1) {
        twohop::ucx::ConfigPairs config;
        int rc = ucx_config(c, prm, &config, &err);
        if (rc == TWOHOP_OK) rc = twohop::ucx::Worker::instance(config, a->thread_multiple != 0,
                                                               &c->worker, &err);
        if (agree(c->host, rc != TWOHOP_OK)) {
            set_why(why, whylen, err.empty() ? "UCX start-up failed on another rank" : err);
                return TWOHOP_ERR_TRANSPORT;
        }
        rc = connect_rails(c, info, &err);
        if (agree(c->host, rc != TWOHOP_OK)) {
            set_why(why, whylen, err.empty() ? "hop-2 connection failed on another rank" : err);
                return TWOHOP_ERR_TRANSPORT;
        }
    }
    if (c->host.log) {
        char msg[256];
        std::snprintf(msg, sizeof(msg),
                      "comm set up: rank %d of %d, %d node(s), node %d local rank %d of %d, "
                      "%d shard(s), shm %llu bytes",
                      a->rank, a->size, c->topo.n_nodes(), c->topo.my_node, c->topo.local_rank,
                      c->topo.local_size(), c->topo.n_shards(),
                      static_cast<unsigned long long>(layout.total_bytes()));
        c->host.log(2, msg);
    }
    *out = owner.release();
    return TWOHOP_OK;
}

extern "C" void twohop_comm_free(twohop_comm *c) { delete c; }

extern "C" const char *twohop_comm_cannot_serve(const twohop_comm *c, uint64_t count,
                                                size_t item_bytes) {
    (void)count;
    if (item_bytes > c->slot_bytes) return "datatype size larger than coll_twohop_segment_bytes";
    return nullptr;
}

extern "C" int twohop_comm_nodes(const twohop_comm *c) { return c->topo.n_nodes(); }

extern "C" void twohop_core_finalize(void) { twohop::ucx::Worker::shutdown(); }
