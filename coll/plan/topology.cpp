#include "topology.h"

#include <algorithm>
#include <unordered_map>

namespace twohop {

Topology build_topology(const std::vector<uint64_t> &keys, int my_rank) {
    Topology t;
    t.size = static_cast<int>(keys.size());
    t.rank = my_rank;
    t.node_of.assign(t.size, -1);
    t.local_of.assign(t.size, -1);
    std::unordered_map<uint64_t, int> node_index;
    // Scanning ranks in increasing order numbers nodes by their lowest rank and lists each
    // node's ranks in increasing order.
    for (int r = 0; r < t.size; ++r) {
        auto it = node_index.find(keys[r]);
        int node;
        if (it == node_index.end()) {
            node = static_cast<int>(t.node_ranks.size());
            node_index.emplace(keys[r], node);
            t.node_ranks.emplace_back();
        } else {
            node = it->second;
        }
        t.node_of[r] = node;
        t.local_of[r] = static_cast<int>(t.node_ranks[node].size());
        t.node_ranks[node].push_back(r);
    }
    t.my_node = t.node_of[my_rank];
    t.local_rank = t.local_of[my_rank];
    t.my_node_size = t.node_size(t.my_node);
    for (const auto &n : t.node_ranks) {
        t.max_node_size = std::max(t.max_node_size, static_cast<int>(n.size()));
    }
    return t;
}

std::vector<int> Topology::my_shards() const {
    std::vector<int> out;
    const int l = local_size();
    for (int s = local_rank; s < n_shards(); s += l) out.push_back(s);
    return out;
}

std::vector<int> Topology::rail(int s) const {
    std::vector<int> out;
    for (int n = 0; n < n_nodes(); ++n) out.push_back(node_ranks[n][shard_owner(n, s)]);
    return out;
}

} // namespace twohop
