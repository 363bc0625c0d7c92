/* Host staging of device buffers for the PMPI library (pmpi_staging.h). */
#include "pmpi_staging.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "mpi_types.h"
#include "twohop_core.h"

int stage_alloc(staging *st, const void *buf, MPI_Datatype dtype, uint64_t count) {
    twohop_mpi_span(dtype, count, &st->true_lb, &st->bytes);
    st->user_lo = (char *)buf + st->true_lb;
    st->dtype = dtype;
    st->count = count;
    st->own_type = 0;
    int tsize = 0;
    PMPI_Type_size(dtype, &tsize);
    st->dense = st->bytes == 0 || (uint64_t)tsize * count == st->bytes;
    st->host = (char *)malloc((size_t)st->bytes + 1);
    return st->host == NULL ? TWOHOP_ERR_NO_MEMORY : TWOHOP_OK;
}

int stage_copy_in(const staging *st, int kind) {
    return twohop_kind_to_host(kind, st->host, st->user_lo, (size_t)st->bytes);
}

int stage_in(staging *st, int kind, const void *buf, MPI_Datatype dtype, uint64_t count) {
    const int rc = stage_alloc(st, buf, dtype, count);
    return rc == TWOHOP_OK ? stage_copy_in(st, kind) : rc;
}

char *staged_buf(const staging *st) { return st->host - st->true_lb; }

int stage_own_type(staging *st) {
    if (st->dense || st->own_type) return TWOHOP_OK;
    MPI_Datatype dup;
    if (PMPI_Type_dup(st->dtype, &dup) != MPI_SUCCESS) return TWOHOP_ERR_HOST;
    st->dtype = dup;
    st->own_type = 1;
    return TWOHOP_OK;
}

void stage_free(staging *st) {
    free(st->host);
    st->host = NULL;
    if (st->own_type) PMPI_Type_free(&st->dtype);
    st->own_type = 0;
}

/* Serialises stage_out's read-merge-write (calls in flight may interleave their buffers). */
static pthread_mutex_t stage_out_lock = PTHREAD_MUTEX_INITIALIZER;

int stage_out(const staging *st, int kind) {
    if (st->dense) {
        return twohop_kind_from_host(kind, st->user_lo, st->host, (size_t)st->bytes);
    }
    /* Holes: they belong to the application (or to another call in flight whose buffer
     * interleaves with this one). Read user memory back, put the result's type map into it
     * (MPI_Pack of the host copy, MPI_Unpack over the current bytes), write it all back. */
    int psize = 0;
    if (PMPI_Pack_size((int)st->count, st->dtype, MPI_COMM_SELF, &psize) != MPI_SUCCESS) {
        return TWOHOP_ERR_HOST;
    }
    char *cur = (char *)malloc((size_t)st->bytes + 1), *packed = (char *)malloc((size_t)psize + 1);
    int rc = cur && packed ? TWOHOP_OK : TWOHOP_ERR_NO_MEMORY;
    pthread_mutex_lock(&stage_out_lock);
    if (rc == TWOHOP_OK) rc = twohop_kind_to_host(kind, cur, st->user_lo, (size_t)st->bytes);
    int pos = 0;
    if (rc == TWOHOP_OK &&
        (PMPI_Pack(staged_buf(st), (int)st->count, st->dtype, packed, psize, &pos,
                   MPI_COMM_SELF) != MPI_SUCCESS ||
         (pos = 0, PMPI_Unpack(packed, psize, &pos, cur - st->true_lb, (int)st->count, st->dtype,
                               MPI_COMM_SELF)) != MPI_SUCCESS)) {
        rc = TWOHOP_ERR_HOST;
    }
    if (rc == TWOHOP_OK) rc = twohop_kind_from_host(kind, st->user_lo, cur, (size_t)st->bytes);
    pthread_mutex_unlock(&stage_out_lock);
    free(cur);
    free(packed);
    return rc;
}

int staged_allreduce(const void *sbuf, void *rbuf, int count, MPI_Datatype dtype, MPI_Op op,
                     MPI_Comm comm, int kin, int kout, int nonblocking) {
    const int staged = kin != TWOHOP_KIND_HOST || kout != TWOHOP_KIND_HOST;
    if (!staged || count <= 0) return PMPI_Allreduce(sbuf, rbuf, count, dtype, op, comm);
    staging sin = {0}, sout = {0};
    const int in_place = sbuf == MPI_IN_PLACE;
    int rc = stage_in(&sout, kout, rbuf, dtype, (uint64_t)count);
    if (rc == TWOHOP_OK && !in_place) rc = stage_in(&sin, kin, sbuf, dtype, (uint64_t)count);
    int mpi_rc = MPI_ERR_NO_MEM;
    if (rc == TWOHOP_OK && nonblocking) {
        MPI_Request inner;
        mpi_rc = PMPI_Iallreduce(in_place ? MPI_IN_PLACE : staged_buf(&sin), staged_buf(&sout),
                                 count, dtype, op, comm, &inner);
        if (mpi_rc == MPI_SUCCESS) mpi_rc = PMPI_Wait(&inner, MPI_STATUS_IGNORE);
    } else if (rc == TWOHOP_OK) {
        mpi_rc = PMPI_Allreduce(in_place ? MPI_IN_PLACE : staged_buf(&sin), staged_buf(&sout),
                                count, dtype, op, comm);
    }
    if (rc == TWOHOP_OK) {
        if (mpi_rc == MPI_SUCCESS && stage_out(&sout, kout) != TWOHOP_OK) mpi_rc = MPI_ERR_OTHER;
    } else {
        fprintf(stderr, "twohop: staging a device buffer through host memory failed\n");
    }
    free(sin.host);
    free(sout.host);
    return mpi_rc;
}
