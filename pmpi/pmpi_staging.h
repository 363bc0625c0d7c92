/*
 * Host copies of user buffers the host must not touch (device memory, the poisoned testing
 * kind) for the PMPI library: the MPI underneath only ever sees host memory. A staging copy
 * spans the whole type map of `count` items (holes included), so the MPI's own datatype
 * handling works on it unchanged. Also the library's non-blocking and persistent entry points
 * (pmpi_requests.c), which stage the same way.
 */
#ifndef TWOHOP_PMPI_STAGING_H
#define TWOHOP_PMPI_STAGING_H

#include <stddef.h>
#include <stdint.h>

#include <mpi.h>

typedef struct staging {
    char *user_lo, *host;
    uint64_t bytes;
    ptrdiff_t true_lb;
    MPI_Datatype dtype; /* the type map stage_out copies back (only its bytes) */
    uint64_t count;
    int dense;          /* the type map covers the whole span (no holes): copied back whole */
    int own_type;       /* dtype is the library's duplicate (stage_own_type) */
} staging;

/* Allocates st's host copy of `count` items of dtype at buf; 0 or TWOHOP_ERR_NO_MEMORY. */
int stage_alloc(staging *st, const void *buf, MPI_Datatype dtype, uint64_t count);
/* User memory of `kind` -> the host copy, and back (the type map's bytes only: a datatype's
 * holes keep what user memory holds when stage_out runs); 0 or a twohop_status. */
int stage_copy_in(const staging *st, int kind);
int stage_out(const staging *st, int kind);
/* For a copy-back after the call that made st returned (non-blocking, persistent): st keeps
 * a duplicate of its datatype when it has holes (the application may free its handle while
 * the call is in flight). 0 or TWOHOP_ERR_HOST. */
int stage_own_type(staging *st);
/* Frees st's host copy and its duplicate datatype. */
void stage_free(staging *st);
/* stage_alloc + stage_copy_in. */
int stage_in(staging *st, int kind, const void *buf, MPI_Datatype dtype, uint64_t count);
/* The buffer address MPI-level code gets for the host copy. */
char *staged_buf(const staging *st);

/*
 * PMPI_Allreduce (nonblocking: PMPI_Iallreduce + PMPI_Wait) with the buffers of kinds kin/kout
 * (twohop_memory_kind) staged through host copies when either is not host memory (else the
 * plain PMPI_Allreduce); returns an MPI error code (messages on stderr).
 */
int staged_allreduce(const void *sbuf, void *rbuf, int count, MPI_Datatype dtype, MPI_Op op,
                     MPI_Comm comm, int kin, int kout, int nonblocking);

/* 1 while the library serves allreduce (settings agreed at MPI_Init, priority >= 0). */
int twohop_pmpi_active(void);

#endif
