/*
 * Reads twohop's MPI_T performance variables (coll_twohop_allreduce_calls and
 * coll_twohop_fallback_calls) so tests and the benchmark can prove which algorithm served a call.
 * Plain MPI_T; no Open MPI internals. Under libtwohop_pmpi.so (any MPI) the same counters come
 * from the library's twohop_pmpi_counter() instead.
 */
#ifndef TWOHOP_PVARS_H
#define TWOHOP_PVARS_H

#include <stdbool.h>

#include <mpi.h>

/* Snapshot of both counters of this process. */
struct twohop_counts {
    unsigned long long served;   /* coll_twohop_allreduce_calls */
    unsigned long long fallback; /* coll_twohop_fallback_calls */
    unsigned long long gpu;      /* coll_twohop_gpu_path_calls (0 when absent) */
    unsigned long long gpu_hop1; /* coll_twohop_gpu_hop1_calls (0 when absent) */
    unsigned long long enqueued; /* coll_twohop_enqueued_calls (0 when absent) */
    unsigned long long posted;   /* coll_twohop_gpu_posted_calls (0 when absent) */
    unsigned long long doorbells; /* coll_twohop_doorbells (0 when absent) */
    unsigned long long nonblocking; /* coll_twohop_nonblocking_calls (0 when absent) */
    unsigned long long persistent;  /* coll_twohop_persistent_starts (0 when absent) */
    unsigned long long enq_multinode; /* coll_twohop_enqueued_multinode_calls (0 when absent) */
    unsigned long long half;        /* coll_twohop_half_calls (0 when absent) */
};

/* Handles for reading the two counters; `found` is false when twohop is not loaded. */
struct twohop_pvars {
    bool found;
    bool pmpi;     /* read through libtwohop_pmpi.so's twohop_pmpi_counter(), not MPI_T */
    char why[256]; /* why found is false (for messages) */
    MPI_T_pvar_session session;
    MPI_T_pvar_handle served;
    MPI_T_pvar_handle fallback;
    bool has_gpu, has_hop1, has_enq, has_posted, has_bells, has_nb, has_pers, has_enq_mn, has_half;
    MPI_T_pvar_handle gpu, hop1, enq, posted, bells, nb, pers, enq_mn, half;
};

/*
 * Looks the two counters (and, where present, coll_twohop_gpu_path_calls) up by name (MPI_T_pvar_get_num + MPI_T_pvar_get_info), checks their
 * class, datatype and binding against the contract, and allocates read handles. Call after
 * MPI_Init. Returns pv->found; on false pv->why says why.
 */
bool twohop_pvars_open(struct twohop_pvars *pv);

/* Reads both counters; zeros when the pvars were not found. */
struct twohop_counts twohop_pvars_read(const struct twohop_pvars *pv);

/* Frees the handles and the session and finalizes MPI_T (call before MPI_Finalize). */
void twohop_pvars_close(struct twohop_pvars *pv);

#endif
