/*
 * Reducer: combines ranges of items for one allreduce, through twohop's own kernel table or,
 * for user-defined ops, through the user function supplied by the adapter.
 */
#ifndef TWOHOP_REDUCER_H
#define TWOHOP_REDUCER_H

#include <cstdint>

#include "reduce_kernels.h"
#include "reduce_types.h"

namespace twohop {

class Reducer {
  public:
    /* red must describe a supported reduction (kernel present or op == USER). */
    explicit Reducer(const twohop_reduction &red);

    /*
     * out = a op b for `items` items (out may alias a or b). Returns TWOHOP_OK or
     * TWOHOP_ERR_REDUCE when the user function failed.
     */
    int combine(const void *a, const void *b, void *out, uint64_t items) const;
    uint64_t item_bytes() const { return red_.item_bytes; }
    /* The reduction this reducer was made for. */
    const twohop_reduction &raw() const { return red_; }

  private:
    twohop_reduction red_;
    KernelFn kernel_ = nullptr;
};

} // namespace twohop

#endif
