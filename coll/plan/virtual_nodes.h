/*
 * Parser for the testing aid coll_twohop_virtual_nodes: maps MPI_COMM_WORLD ranks to virtual
 * node ids so multi-node behaviour can be tested on one host. Pure C++ (unit-tested).
 *
 * Grammar (whitespace not allowed):
 *   block:K          K nodes, consecutive ranks, sizes as even as possible (first ones larger)
 *   rr:K             rank r on node r % K
 *   sizes:A,B,...    consecutive blocks of A, B, ... ranks (must add up to the world size)
 *   list:N0,N1,...   node id of every rank (exactly world-size entries, ids 0..2^31-1)
 */
#ifndef TWOHOP_VIRTUAL_NODES_H
#define TWOHOP_VIRTUAL_NODES_H

#include <string>
#include <vector>

namespace twohop {

/*
 * Fills node_of[r] for r in [0, world_size). Returns true on success; on failure returns false
 * and sets *error to a message naming the bad spec and why.
 */
bool parse_virtual_nodes(const std::string &spec, int world_size, std::vector<long> *node_of,
                         std::string *error);

} // namespace twohop

#endif
