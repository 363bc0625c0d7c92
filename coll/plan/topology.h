/*
 * Topology of one communicator as twohop sees it: which ranks share a node (a shared-memory
 * domain), local ranks, and the rails of hop 2. Pure C++ (unit-tested, no MPI).
 *
 * Conventions (identical on every rank, since they depend only on the allgathered keys):
 *   - Nodes are numbered by their lowest communicator rank; a node's ranks are listed in
 *     increasing communicator rank, their index is the local rank. Ranks of a node need not be
 *     consecutive in the communicator.
 *   - Every segment is cut into S = max local size shards. On a node with L ranks, local rank
 *     l owns the shards s with s % L == l (so with uneven nodes a rank may own several shards,
 *     and every rank of a node owns at least one).
 *   - The rail of shard s is the owner of s on every node, in node order: hop 2 allreduces
 *     shard s among those ranks.
 */
#ifndef TWOHOP_TOPOLOGY_H
#define TWOHOP_TOPOLOGY_H

#include <cstdint>
#include <vector>

namespace twohop {

struct Topology {
    int size = 0;       // communicator size
    int rank = 0;       // my communicator rank
    int my_node = 0;    // my node index
    int local_rank = 0; // my index within my node
    std::vector<std::vector<int>> node_ranks; // [node][local rank] -> communicator rank
    std::vector<int> node_of;                 // [communicator rank] -> node index
    std::vector<int> local_of;                // [communicator rank] -> local rank
    int my_node_size = 0;  // node_size(my_node), kept by build_topology (asked on every call)
    int max_node_size = 0; // the largest node's rank count, kept by build_topology

    int n_nodes() const { return static_cast<int>(node_ranks.size()); }
    int local_size() const { return my_node_size; }
    int node_size(int node) const { return static_cast<int>(node_ranks[node].size()); }
    /* Shards per segment: the largest node's rank count. */
    int n_shards() const { return max_node_size; }
    /* Local rank on `node` that owns shard `s`. */
    int shard_owner(int node, int s) const { return s % node_size(node); }
    /* Shards I own, increasing. */
    std::vector<int> my_shards() const;
    /* Communicator ranks of the rail of shard s, one per node, in node order. */
    std::vector<int> rail(int s) const;
};

/*
 * Builds the topology from keys[r] (equal keys = same node) for r in [0, keys.size()).
 * my_rank must be a valid index. Never fails.
 */
Topology build_topology(const std::vector<uint64_t> &keys, int my_rank);

} // namespace twohop

#endif
