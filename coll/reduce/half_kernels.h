/*
 * Host kernels for the half-precision types (TWOHOP_BF16, TWOHOP_F16) and the ops MPI-style
 * arithmetic allows on them (SUM, PROD, MAX, MIN): out[i] = a[i] op b[i] for n elements
 * (2-byte elements; n counts elements). Every variant computes exactly the bits of
 * twohop_bf16_combine / twohop_f16_combine (include/twohop_half_math.h), NaN results
 * included; `out` may alias `a` or `b`.
 *
 * Two variants: a portable one (plain C++ the compiler vectorises for the build's baseline ISA)
 * and one for x86-64 CPUs with AVX2 and F16C (binary16 conversions by the CPU's own VCVTPH2PS /
 * VCVTPS2PH). find_kernel() uses the x86 one where the CPU has those extensions. The choice is
 * per process and never changes results, so ranks on different CPUs still agree bit for bit.
 */
#ifndef TWOHOP_HALF_KERNELS_H
#define TWOHOP_HALF_KERNELS_H

#include "reduce_kernels.h"

namespace twohop {

/* The portable kernel for (t, op); nullptr unless t is a half type and op SUM/PROD/MAX/MIN. */
KernelFn half_kernel_portable(twohop_dtype t, twohop_op op);

/* The AVX2/F16C kernel for (t, op); nullptr as above, and also when the build is not for
 * x86-64 or the CPU lacks AVX2 or F16C. */
KernelFn half_kernel_avx2(twohop_dtype t, twohop_op op);

} // namespace twohop

#endif
