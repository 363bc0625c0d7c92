/*
 * The plain C interface between the Open MPI adapter (twohop_component.c, the only file that
 * includes Open MPI internal headers) and the C++ core. Nothing here throws; every function
 * returns 0 (TWOHOP_OK) or a twohop_status code, and writes a human-readable reason where a
 * `why` buffer is given.
 */
#ifndef TWOHOP_CORE_H
#define TWOHOP_CORE_H

#include <stddef.h>
#include <stdint.h>

#include "params.h"
#include "twohop_status.h"
#include "reduce_types.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Services the adapter provides to the core for one communicator. The collectives run on the
 * communicator through the coll module that was selected before twohop (never twohop itself).
 */
typedef struct twohop_host {
    void *ctx;
    /* Gathers `bytes` from every rank into rbuf (rank-major, size * bytes). */
    int (*allgather)(void *ctx, const void *sbuf, void *rbuf, size_t bytes);
    /* In-place logical OR of one int across the communicator (for collective agreement). */
    int (*agree_or)(void *ctx, int *flag);
    /* Drives Open MPI progress; yields the CPU when Open MPI runs oversubscribed. */
    void (*progress)(void);
    /* Logs msg at verbosity `level` through coll_twohop_verbose's output stream. */
    void (*log)(int level, const char *msg);
} twohop_host;

/* What the adapter knows about this process when a communicator is set up. */
typedef struct twohop_comm_args {
    int rank, size;       /* in the communicator */
    uint64_t host_key;    /* equal on ranks sharing memory: a hash of the host name */
    const char *virtual_nodes; /* testing aid coll_twohop_virtual_nodes ("" or NULL: off) */
    int world_rank, world_size; /* in MPI_COMM_WORLD, for virtual_nodes */
    uint64_t proc_key;    /* unique per process across the job (MPI_COMM_WORLD rank) */
    int thread_multiple;  /* the application initialised MPI_THREAD_MULTIPLE */
    uint32_t comm_id;     /* identical on all ranks, unique among this process's communicators */
    const struct twohop_params *params;
    twohop_host host;
} twohop_comm_args;

typedef struct twohop_comm twohop_comm;

/*
 * Collective over the communicator: exchanges topology, maps the node's shared-memory
 * segment and, with more than one node, connects the rails. On every rank either all
 * succeed (*out set) or all return the same non-zero status with *out NULL (the decision is
 * agreed through host.agree_or), so a failed setup becomes an identical fallback everywhere.
 */
int twohop_comm_setup(const twohop_comm_args *args, twohop_comm **out, char *why, size_t whylen);

/* Releases everything the communicator state owns (not collective). NULL is allowed. */
void twohop_comm_free(twohop_comm *c);

/*
 * Allreduce of `count` items (red->item_bytes each) from sbuf into rbuf. sbuf == rbuf means
 * MPI_IN_PLACE. count may exceed 2^31; sizes are 64-bit throughout. Returns a twohop_status.
 */
int twohop_comm_allreduce(twohop_comm *c, const void *sbuf, void *rbuf, uint64_t count,
                          const twohop_reduction *red);

/*
 * Reason this communicator cannot serve an allreduce of `count` items of `item_bytes`
 * (NULL if it can). Depends only on values identical on all ranks.
 */
const char *twohop_comm_cannot_serve(const twohop_comm *c, uint64_t count, size_t item_bytes);

/* Topology facts for verbose output. */
int twohop_comm_nodes(const twohop_comm *c);

/* Releases process-wide resources (UCX worker and endpoints). Called at component close. */
void twohop_core_finalize(void);

#ifdef __cplusplus
}
#endif

#endif
