/* The front ends' one policy (policy.h). */
#include "policy.h"

#include <string.h>

#include "twohop_core.h"

const char *twohop_classify(const twohop_type_facts *f, twohop_reduction *red,
                            uint64_t *elems_per_item) {
    memset(red, 0, sizeof(*red));
    *elems_per_item = 1;
    if (f->half_dtype == TWOHOP_BF16 || f->half_dtype == TWOHOP_F16) {
        /* include/twohop_half.h: twohop's kernels, the ops' own arithmetic */
        red->dtype = (twohop_dtype)f->half_dtype;
        red->op = (twohop_op)f->half_op;
        red->item_bytes = 2;
        red->elems_per_item = 1;
        return NULL;
    }
    if (!f->op_predefined) {
        if (!f->op_commutes) return "user-defined op is not commutative";
        red->op = TWOHOP_OP_USER;
        red->item_bytes = (size_t)f->type_size;
        red->elems_per_item = 1;
        return NULL;
    }
    if (f->op < 0) return "op is not one of the predefined reduction ops";
    if (f->base == TWOHOP_BASE_MIXED) return "derived datatype mixes several predefined types";
    if (f->base < 0) return "no twohop kernel for this predefined datatype";
    if (f->base_extent != twohop_dtype_size((twohop_dtype)f->base) || f->base_size == 0 ||
        f->type_size % f->base_size != 0) {
        return "datatype layout differs from twohop's element layout";
    }
    if (!twohop_kernel_supported((twohop_dtype)f->base, (twohop_op)f->op)) {
        return "MPI does not define this op for this datatype";
    }
    red->dtype = (twohop_dtype)f->base;
    red->op = (twohop_op)f->op;
    red->item_bytes = (size_t)f->base_extent;
    red->elems_per_item = 1;
    *elems_per_item = f->type_size / f->base_size;
    return NULL;
}

call_route twohop_route_signature(int64_t count, const twohop_type_facts *f,
                                  twohop_reduction *red, uint64_t *elems_per_item,
                                  const char **why) {
    *why = NULL;
    if (count <= 0 || f->type_size == 0) { /* nothing to classify (twohop_classify zeroes else) */
        memset(red, 0, sizeof(*red));
        *elems_per_item = 1;
        if (count < 0) {
            *why = "negative count";
            return CALL_FALLBACK;
        }
        return CALL_EMPTY; /* empty signature on every rank */
    }
    *why = twohop_classify(f, red, elems_per_item);
    return *why ? CALL_FALLBACK : CALL_SERVE;
}

call_route twohop_route_setup(int state, const char *cannot_serve, const char **why) {
    *why = NULL;
    if (state == -2) return CALL_BROKEN; /* reported once in set-up */
    if (state < 0) {
        *why = "set-up failed";
        return CALL_FALLBACK;
    }
    if (state != 1) { /* not an outcome (a caller's error): never served */
        *why = "the communicator's set-up has not ended";
        return CALL_FALLBACK;
    }
    *why = cannot_serve;
    return cannot_serve ? CALL_FALLBACK : CALL_SERVE;
}

const char *twohop_deferrable_refusal(uint64_t item_bytes) {
    if (item_bytes <= TWOHOP_MIN_SEGMENT_BYTES) return NULL;
    return "non-blocking or persistent call with items larger than 4 KiB (user op on a large "
           "datatype)";
}

bool twohop_stays_on_stream(call_route route, int kin, int kout, bool canonical) {
    return route == CALL_SERVE && kin == TWOHOP_KIND_CUDA && kout == TWOHOP_KIND_CUDA &&
           canonical;
}
