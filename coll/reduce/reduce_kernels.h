/*
 * Host reduction kernels: out[i] = a[i] op b[i] for n elements (n counts elements of the
 * kernel's type, not bytes). `out` may alias `a` or `b`; other overlap is not allowed.
 */
#ifndef TWOHOP_REDUCE_KERNELS_H
#define TWOHOP_REDUCE_KERNELS_H

#include <cstddef>

#include "reduce_types.h"

namespace twohop {

using KernelFn = void (*)(const void *a, const void *b, void *out, std::size_t n);

/* The kernel for (t, op), or nullptr when MPI does not allow op on t (or op is USER). */
KernelFn find_kernel(twohop_dtype t, twohop_op op);

} // namespace twohop

#endif
