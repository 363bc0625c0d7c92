#include "reducer.h"

#include <climits>
#include <cstring>

#include "twohop_status.h"

namespace twohop {

Reducer::Reducer(const twohop_reduction &red) : red_(red) {
    if (red.op != TWOHOP_OP_USER) kernel_ = find_kernel(red.dtype, red.op);
}

int Reducer::combine(const void *a, const void *b, void *out, uint64_t items) const {
    if (items == 0) return TWOHOP_OK;
    if (kernel_) {
        kernel_(a, b, out, items * red_.elems_per_item);
        return TWOHOP_OK;
    }
    // MPI user functions compute inout = in op inout; the op is commutative (else twohop
    // falls back), so any operand order is a valid result, and each element is combined on
    // exactly one rank, so all ranks still see the same bits.
    const void *in = a;
    if (out == a) {
        in = b;
    } else if (out != b) {
        std::memmove(out, b, items * red_.item_bytes);
    }
    const uint64_t step = INT_MAX;
    for (uint64_t done = 0; done < items; done += step) {
        const uint64_t n = items - done < step ? items - done : step;
        const uint64_t off = done * red_.item_bytes;
        if (red_.user_fn(red_.user_ctx, static_cast<const char *>(in) + off,
                         static_cast<char *>(out) + off, n) != 0) {
            return TWOHOP_ERR_REDUCE;
        }
    }
    return TWOHOP_OK;
}

} // namespace twohop
