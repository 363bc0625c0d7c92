/*
 * The front ends' one policy: whether twohop serves an allreduce, and as which reduction. The
 * Open MPI adapter (coll/ompi/) and the PMPI library (pmpi/) read their MPI's datatype and op
 * into twohop_type_facts, each through its own API
 * (Open MPI's internals; the MPI standard's envelope and contents), and both decide here, from
 * those facts, the count and the set-up's agreed outcome. Pure C, no MPI: unit-tested
 * (tests/test_policy.cpp).
 *
 * Every decision is rank-invariant: the facts are functions of the op and the type signature
 * (identical on every rank by MPI's rules) and the set-up outcome is agreed. For a user-defined
 * op they include the datatype's own size (the item the user function combines): MPI requires
 * the same datatype argument on every rank of a reduction (MPI-4.1 6.9.1), so a program that
 * passes contiguous(k, T) on one rank and T on another with a user op is erroneous; twohop then
 * fails the blocking call on every rank (node peers compare item sizes), but the deferral rule
 * (twohop_deferrable_refusal) can route such a non-blocking call differently on different ranks. Layout, memory
 * kind and buffer addresses never enter, except in twohop_stays_on_stream, which only chooses
 * between the stream-ordered and the blocking form of the same served call on this rank.
 */
#ifndef TWOHOP_FRONT_POLICY_H
#define TWOHOP_FRONT_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "reduce_types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Marks twohop_type_facts::base when the signature has no single predefined type. */
#define TWOHOP_BASE_MIXED (-2)
/* Marks twohop_type_facts::base / ::op when twohop has no kernel element / op for it. */
#define TWOHOP_NO_KERNEL (-1)

/*
 * What a front end read about (datatype, op). Sizes in bytes.
 *   type_size      MPI_Type_size of the datatype (the bytes of its signature)
 *   half_dtype     TWOHOP_BF16 or TWOHOP_F16 when (datatype, op) is a pair registered by
 *                  include/twohop_half.h; TWOHOP_NO_KERNEL otherwise (then half_op is ignored)
 *   half_op        that pair's op (TWOHOP_OP_SUM, _PROD, _MAX or _MIN)
 *   op_predefined  the op is one MPI predefines (MPI_REPLACE and MPI_NO_OP included)
 *   op_commutes    a user-defined op was created commutative (ignored for predefined ops)
 *   op             twohop_op of a predefined reduction op; TWOHOP_NO_KERNEL for the others
 *   base           twohop_dtype of the one predefined type of the signature; TWOHOP_BASE_MIXED
 *                  when the signature mixes several; TWOHOP_NO_KERNEL when twohop has no
 *                  element type for it. Needed only for a predefined op (ignored otherwise).
 *   base_size      MPI_Type_size of that predefined type
 *   base_extent    its extent (twohop's element must be laid out exactly so)
 */
typedef struct twohop_type_facts {
    uint64_t type_size;
    int half_dtype;
    int half_op;
    bool op_predefined;
    bool op_commutes;
    int op;
    int base;
    uint64_t base_size, base_extent;
} twohop_type_facts;

/*
 * Fills *red (user_fn and user_ctx left NULL: the front end sets them for TWOHOP_OP_USER) and
 * *elems_per_item (canonical elements per user item: the core's count is count times it), or
 * returns why twohop cannot serve the pair (a constant string; then *red is zeroed).
 * The canonical element: the half type for a registered pair; the packed item (item_bytes =
 * type_size) for a commutative user op; else the signature's predefined type, which must be
 * one twohop has a kernel for, laid out at its C size, with the op defined on it by MPI.
 */
const char *twohop_classify(const twohop_type_facts *f, twohop_reduction *red,
                            uint64_t *elems_per_item);

/*
 * A call's route. EMPTY: nothing to do on any rank (count 0 or an empty signature). SERVE:
 * twohop runs it. FALLBACK: the previous allreduce (the MPI's own) runs it, *why says why.
 * BROKEN: the ranks could not agree at set-up; every call is an error (reported once there).
 * DEFER: twohop serves it once the communicator's set-up, running in a fiber, has ended
 * (Open MPI adapter's non-blocking and persistent calls).
 */
/* CALL_FAILED: the call fails with an MPI error on every rank (the Open MPI adapter's calls after
 * a deferred set-up's fallback, twohop_requests.c; the shared policy never returns it). */
typedef enum {
    CALL_EMPTY,
    CALL_SERVE,
    CALL_FALLBACK,
    CALL_BROKEN,
    CALL_DEFER,
    CALL_FAILED
} call_route;

/*
 * The half of the route decided from the count and the facts: FALLBACK for a negative count
 * ("negative count"), EMPTY for count 0 or type_size 0, else twohop_classify's answer (SERVE,
 * or FALLBACK with *why). *red and *elems_per_item as twohop_classify; *why NULL unless
 * FALLBACK.
 */
call_route twohop_route_signature(int64_t count, const twohop_type_facts *f,
                                  twohop_reduction *red, uint64_t *elems_per_item,
                                  const char **why);

/*
 * The half decided from the set-up's agreed outcome `state` (1 served, -1 every call falls
 * back, -2 broken) and, when it is 1, the core's answer for this count (`cannot_serve`: what
 * twohop_comm_cannot_serve returned, NULL or why not; read only when state is 1, since no
 * core exists otherwise).
 */
call_route twohop_route_setup(int state, const char *cannot_serve, const char **why);

/*
 * A non-blocking or persistent call may be routed before this rank's set-up has ended or
 * after; its route must not depend on which. Items larger than the smallest possible slot
 * (TWOHOP_MIN_SEGMENT_BYTES) might not fit the agreed one -- a fallback known only at the
 * set-up's end, too late for a started call -- so such calls are always handed back: returns
 * why, or NULL when item_bytes allows the call.
 */
const char *twohop_deferrable_refusal(uint64_t item_bytes);

/*
 * Whether a stream-ordered call (twohop_allreduce_enqueue) may stay on the application's
 * stream on this rank: a served call on device memory (kind TWOHOP_KIND_CUDA) for both buffers
 * in the canonical layout. Otherwise the rank waits for the stream and runs the blocking form
 * (the core's vote keeps the ranks matched either way).
 */
bool twohop_stays_on_stream(call_route route, int kin, int kout, bool canonical);

#ifdef __cplusplus
}
#endif

#endif
