/*
 * MPI handles as twohop's element types and ops, through the MPI standard's public handles
 * only: one table for both front ends. The file is compiled into each front end against its
 * MPI's mpi.h (Open MPI's handles are addresses of its predefined objects, MPICH's are
 * constants): the Open MPI adapter and the PMPI library map the same datatypes and ops.
 *
 * Also the registry of include/twohop_half.h's half-precision handles (the datatypes and ops
 * it creates with MPI_Type_contiguous and MPI_Op_create, registered through
 * mca_coll_twohop_register_half or twohop_pmpi_register_half): every rank creates them with
 * the same header calls, so a lookup answers alike on every rank.
 */
#ifndef TWOHOP_FRONT_MPI_HANDLES_H
#define TWOHOP_FRONT_MPI_HANDLES_H

#include <stdbool.h>

#include <mpi.h>

#include "reduce_types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* twohop element type (twohop_dtype) of a predefined datatype; -1 for any other handle. */
int twohop_mpi_map_type(MPI_Datatype d);

/* twohop op (twohop_op) of a predefined reduction op; -1 for any other op (user-defined ops,
 * MPI_REPLACE, MPI_NO_OP). */
int twohop_mpi_map_op(MPI_Op op);

/* True for the ops MPI predefines (MPI_REPLACE and MPI_NO_OP included). */
bool twohop_mpi_op_is_predefined(MPI_Op op);

/*
 * Registers a half-precision datatype (op MPI_OP_NULL, half_op -1) or op (half_op 0 sum,
 * 1 prod, 2 max, 3 min) of `kind` (1 bfloat16, 2 binary16). Returns MPI_SUCCESS, MPI_ERR_ARG
 * for a bad kind or op, MPI_ERR_NO_MEM when the table (64 entries) is full: the handle then
 * runs through its host function, not twohop's kernels. Thread-safe.
 */
int twohop_half_register(MPI_Datatype type, MPI_Op op, int kind, int half_op);

/* Whether (dtype, op) is a registered half-precision pair: then *t (TWOHOP_BF16 or
 * TWOHOP_F16) and *o (sum, prod, max or min). Lock-free; safe against a concurrent register. */
bool twohop_half_lookup(MPI_Datatype dtype, MPI_Op op, twohop_dtype *t, twohop_op *o);

#ifdef __cplusplus
}
#endif

#endif
