/*
 * The PMPI library's non-blocking and persistent allreduce: device buffers must never reach an
 * MPI that is not CUDA-aware, and the library cannot hook a request's completion without
 * re-implementing the MPI_Wait/MPI_Test family, so:
 *   MPI_Iallreduce        host buffers: the MPI's own. Otherwise the call runs on host copies
 *                         of the buffers (PMPI_Iallreduce + PMPI_Wait), the result is copied
 *                         back, and a generalized request that is already complete is
 *                         returned: correct, but the call completes before it returns.
 *   MPI_Allreduce_init    (MPI >= 4) host buffers: the MPI's own. Otherwise the MPI's
 *                         persistent request over host copies; MPI_Start / MPI_Startall copy
 *                         the input in, start it, wait for it and copy the result back (the
 *                         application's MPI_Wait then finds it complete); MPI_Request_free
 *                         frees the copies.
 * Every rank makes the same MPI calls in the same order whatever its memory kind, so ranks
 * with host and device buffers match each other. Memory kinds decide only how a rank stages.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include <mpi.h>

#include "pmpi_staging.h"
#include "twohop_core.h"

#define EXPORT __attribute__((visibility("default")))

static int kinds(const void *sbuf, void *rbuf, int count, int *kin, int *kout) {
    *kout = count > 0 ? twohop_memory_kind(rbuf) : TWOHOP_KIND_HOST;
    *kin = sbuf == MPI_IN_PLACE || count <= 0 ? *kout : twohop_memory_kind(sbuf);
    return *kin != TWOHOP_KIND_HOST || *kout != TWOHOP_KIND_HOST;
}

static int done_query(void *extra, MPI_Status *status) {
    (void)extra;
    MPI_Status_set_elements(status, MPI_BYTE, 0);
    MPI_Status_set_cancelled(status, 0);
    status->MPI_SOURCE = MPI_UNDEFINED;
    status->MPI_TAG = MPI_UNDEFINED;
    return MPI_SUCCESS;
}
static int done_free(void *extra) {
    (void)extra;
    return MPI_SUCCESS;
}
static int done_cancel(void *extra, int complete) {
    (void)extra;
    (void)complete;
    return MPI_SUCCESS;
}

EXPORT int MPI_Iallreduce(const void *sbuf, void *rbuf, int count, MPI_Datatype dtype,
                          MPI_Op op, MPI_Comm comm, MPI_Request *request) {
    int kin, kout;
    if (!twohop_pmpi_active() || count <= 0 || rbuf == MPI_IN_PLACE || request == NULL ||
        !kinds(sbuf, rbuf, count, &kin, &kout)) {
        return PMPI_Iallreduce(sbuf, rbuf, count, dtype, op, comm, request);
    }
    int err = staged_allreduce(sbuf, rbuf, count, dtype, op, comm, kin, kout, 1);
    if (err != MPI_SUCCESS) return err;
    err = PMPI_Grequest_start(done_query, done_free, done_cancel, NULL, request);
    if (err == MPI_SUCCESS) err = PMPI_Grequest_complete(*request);
    return err;
}

#if MPI_VERSION >= 4
/* Persistent requests over host copies, found by their handle. */
typedef struct staged_req {
    MPI_Request req;
    staging sin, sout;
    int kin, kout, in_place;
    struct staged_req *next;
} staged_req;
static staged_req *staged_list;
static pthread_mutex_t staged_lock = PTHREAD_MUTEX_INITIALIZER;

static staged_req *find(MPI_Request r, int unlink) {
    pthread_mutex_lock(&staged_lock);
    staged_req **pp = &staged_list, *found = NULL;
    for (; *pp; pp = &(*pp)->next) {
        if ((*pp)->req == r) {
            found = *pp;
            if (unlink) *pp = found->next;
            break;
        }
    }
    pthread_mutex_unlock(&staged_lock);
    return found;
}

EXPORT int MPI_Allreduce_init(const void *sbuf, void *rbuf, int count, MPI_Datatype dtype,
                              MPI_Op op, MPI_Comm comm, MPI_Info info, MPI_Request *request) {
    int kin, kout;
    if (!twohop_pmpi_active() || count <= 0 || rbuf == MPI_IN_PLACE || request == NULL ||
        !kinds(sbuf, rbuf, count, &kin, &kout)) {
        return PMPI_Allreduce_init(sbuf, rbuf, count, dtype, op, comm, info, request);
    }
    staged_req *s = calloc(1, sizeof(*s));
    if (s == NULL) return MPI_ERR_NO_MEM;
    s->kin = kin;
    s->kout = kout;
    s->in_place = sbuf == MPI_IN_PLACE;
    int rc = stage_alloc(&s->sout, rbuf, dtype, (uint64_t)count);
    if (rc == TWOHOP_OK && !s->in_place) rc = stage_alloc(&s->sin, sbuf, dtype, (uint64_t)count);
    int err = rc == TWOHOP_OK
                  ? PMPI_Allreduce_init(s->in_place ? MPI_IN_PLACE : staged_buf(&s->sin),
                                        staged_buf(&s->sout), count, dtype, op, comm, info,
                                        &s->req)
                  : MPI_ERR_NO_MEM;
    if (err != MPI_SUCCESS) {
        free(s->sin.host);
        free(s->sout.host);
        free(s);
        return err;
    }
    *request = s->req;
    pthread_mutex_lock(&staged_lock);
    s->next = staged_list;
    staged_list = s;
    pthread_mutex_unlock(&staged_lock);
    return MPI_SUCCESS;
}

/* One start of a staged persistent request: copy in, start, wait, copy back. */
static int start_staged(staged_req *s, MPI_Request *request) {
    if (stage_copy_in(&s->sout, s->kout) != TWOHOP_OK ||
        (!s->in_place && stage_copy_in(&s->sin, s->kin) != TWOHOP_OK)) {
        return MPI_ERR_OTHER;
    }
    int err = PMPI_Start(request);
    if (err == MPI_SUCCESS) err = PMPI_Wait(request, MPI_STATUS_IGNORE);
    if (err == MPI_SUCCESS && stage_out(&s->sout, s->kout) != TWOHOP_OK) err = MPI_ERR_OTHER;
    return err;
}

EXPORT int MPI_Start(MPI_Request *request) {
    staged_req *s = request && staged_list ? find(*request, 0) : NULL;
    return s ? start_staged(s, request) : PMPI_Start(request);
}

EXPORT int MPI_Startall(int n, MPI_Request requests[]) {
    if (staged_list == NULL) return PMPI_Startall(n, requests);
    for (int i = 0; i < n; ++i) { /* in order, as MPI_Startall starts them */
        int err = MPI_Start(&requests[i]);
        if (err != MPI_SUCCESS) return err;
    }
    return MPI_SUCCESS;
}

EXPORT int MPI_Request_free(MPI_Request *request) {
    staged_req *s = request && staged_list ? find(*request, 1) : NULL;
    if (s) {
        free(s->sin.host);
        free(s->sout.host);
        free(s);
    }
    return PMPI_Request_free(request);
}
#endif
