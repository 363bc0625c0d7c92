#include "virtual_nodes.h"

#include <cerrno>
#include <cstdlib>

namespace twohop {
namespace {

/* Parses a comma-separated list of non-negative integers below 2^31. */
bool parse_list(const std::string &s, std::vector<long> *out) {
    out->clear();
    size_t pos = 0;
    while (pos <= s.size()) {
        size_t comma = s.find(',', pos);
        if (comma == std::string::npos) comma = s.size();
        std::string tok = s.substr(pos, comma - pos);
        if (tok.empty() || tok.find_first_not_of("0123456789") != std::string::npos ||
            tok.size() > 10) {
            return false;
        }
        long v = std::strtol(tok.c_str(), nullptr, 10);
        if (v > 2147483647L) return false;
        out->push_back(v);
        pos = comma + 1;
    }
    return !out->empty();
}

} // namespace

bool parse_virtual_nodes(const std::string &spec, int world_size, std::vector<long> *node_of,
                         std::string *error) {
    auto fail = [&](const std::string &why) {
        *error = "coll_twohop_virtual_nodes '" + spec + "': " + why;
        return false;
    };
    if (world_size < 1) return fail("world size must be >= 1");
    size_t colon = spec.find(':');
    if (colon == std::string::npos) return fail("expected block:K, rr:K, sizes:A,B,... or list:...");
    const std::string kind = spec.substr(0, colon);
    std::vector<long> args;
    if (!parse_list(spec.substr(colon + 1), &args)) {
        return fail("arguments must be a comma-separated list of non-negative integers");
    }
    node_of->assign(world_size, 0);
    if (kind == "block" || kind == "rr") {
        if (args.size() != 1 || args[0] < 1) return fail("K must be one integer >= 1");
        const long k = args[0];
        if (k > world_size) return fail("K larger than the world size " + std::to_string(world_size));
        for (int r = 0; r < world_size; ++r) {
            if (kind == "rr") {
                (*node_of)[r] = r % k;
            } else {
                // Even blocks: the first world_size % k nodes get one rank more.
                const long base = world_size / k, rem = world_size % k;
                const long big = rem * (base + 1);
                (*node_of)[r] = r < big ? r / (base + 1) : rem + (r - big) / base;
            }
        }
        return true;
    }
    if (kind == "sizes") {
        long sum = 0;
        for (long a : args) {
            if (a < 1) return fail("every size must be >= 1");
            sum += a;
        }
        if (sum != world_size) {
            return fail("sizes add up to " + std::to_string(sum) + ", world size is " +
                        std::to_string(world_size));
        }
        int r = 0;
        for (size_t n = 0; n < args.size(); ++n) {
            for (long i = 0; i < args[n]; ++i) (*node_of)[r++] = static_cast<long>(n);
        }
        return true;
    }
    if (kind == "list") {
        if (args.size() != static_cast<size_t>(world_size)) {
            return fail("list has " + std::to_string(args.size()) + " entries, world size is " +
                        std::to_string(world_size));
        }
        *node_of = args;
        return true;
    }
    return fail("unknown placement '" + kind + "'");
}

} // namespace twohop
