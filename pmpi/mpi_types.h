/*
 * MPI datatypes and ops as twohop's reductions, through the MPI standard only (envelope and
 * contents, extents, MPI_Pack/MPI_Unpack): the PMPI library's counterpart of the datatype part
 * of the Open MPI adapter. Decisions here depend only on the type signature and the op, which
 * MPI requires to be identical on every rank; layouts only tell a rank how to reach its buffers.
 */
#ifndef TWOHOP_PMPI_MPI_TYPES_H
#define TWOHOP_PMPI_MPI_TYPES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <mpi.h>

#include "mpi_handles.h"

/* The handle tables (twohop_mpi_map_type, _map_op, _op_is_predefined) are the front ends' shared
 * coll/front/mpi_handles.h. */

/*
 * The one predefined datatype the type signature of t consists of, or MPI_DATATYPE_NULL when it
 * has several (or the construction cannot be read). Follows the construction (envelope and
 * contents); blocks of a struct that add nothing to the signature (block length 0, or a type of
 * size 0) are ignored, as the signature ignores them.
 */
MPI_Datatype twohop_mpi_single_type(MPI_Datatype t);

/*
 * True when `count` items of t are their type signature's bytes laid out consecutively and in
 * order from the buffer's address (lb 0, no holes, extent equal to size, every block in order).
 * Conservative: a construction it cannot prove so (subarray, darray, ...) answers false, and the
 * caller then converts through MPI_Pack/MPI_Unpack, which is always correct.
 */
bool twohop_mpi_packed_in_order(MPI_Datatype t);

/* First byte of the type map relative to the buffer address, and the bytes `count` items span
 * from it (holes included): what a rank copies to stage the buffer whole. */
void twohop_mpi_span(MPI_Datatype t, uint64_t count, ptrdiff_t *true_lb, uint64_t *bytes);

/*
 * Canonical bytes <-> user layout: `count` items of `dtype` at `user` are converted to/from
 * `canon`, which holds them as an array of `base` (a predefined type: elems_per_item elements
 * per item, at base's own extent) or, with base MPI_DATATYPE_NULL, as their packed bytes
 * (item = type size bytes; the MPI's native packing must produce exactly that, else -1).
 * Works in chunks of whole items (at most about 64 MiB at a time), so counts beyond 2^31 and
 * buffers beyond 2 GiB are fine. Returns 0, or -1 on an MPI error or no memory.
 */
int twohop_mpi_to_canonical(const void *user, MPI_Datatype dtype, uint64_t count, MPI_Datatype base,
                            uint64_t elems_per_item, void *canon);
int twohop_mpi_from_canonical(void *user, MPI_Datatype dtype, uint64_t count, MPI_Datatype base,
                              uint64_t elems_per_item, const void *canon);

#endif
