/*
 * The PMPI library's non-blocking and persistent allreduce. Host buffers go to the MPI's own
 * MPI_Iallreduce / MPI_Allreduce_init. Device buffers (any memory the host must not touch:
 * twohop_memory_kind) must never reach an MPI that is not CUDA-aware, so the MPI's call runs
 * on host copies of them -- a *staged request*:
 *   start       (MPI_Iallreduce, or MPI_Start / MPI_Startall of a request made by
 *               MPI_Allreduce_init, MPI >= 4) copies the buffers in and starts the MPI's own
 *               call on the copies; it returns at once, as a non-blocking start must (a rank
 *               may start the call and then communicate with a peer that starts it later).
 *   completion  the application holds the MPI's request on the copies. Every C function that
 *               can report a request complete is wrapped here (MPI_Wait, MPI_Test and their
 *               -all/-any/-some forms, MPI_Request_get_status and its MPI 4.1 forms): when it
 *               reports a staged request complete, the result is copied back into the user's
 *               buffer before the function returns, and a non-persistent request's copies are
 *               freed. Requests that are not staged pass through untouched; while no staged
 *               request exists the wrappers cost one relaxed load.
 *   free        MPI_Request_free of an inactive persistent staged request frees its copies;
 *               of an active staged request it returns MPI_ERR_REQUEST and leaves the request
 *               valid (MPI: freeing or cancelling a request of a non-blocking or an active
 *               persistent collective is erroneous; the copies must outlive the MPI's call).
 * Every rank makes the same MPI calls in the same order whatever its memory kind, so ranks
 * with host and device buffers match each other: memory kinds decide only how a rank stages.
 * Not wrapped: the Fortran bindings of MPICH (which do not pass through the C functions; see
 * docs/stacks/pmpi.md) and Open MPI 4.1's MPIX_Allreduce_init.
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

/* One staged request: the MPI's request on the host copies, found by its handle. */
typedef struct staged_req {
    MPI_Request req; /* the handle the application holds (MPI_REQUEST_NULL once completed) */
    staging sin, sout;
    int kin, kout, in_place;
    int persistent;
    int active; /* started, result not copied back yet */
    struct staged_req *next;
} staged_req;
static staged_req *staged_list;
static int n_staged; /* entries in staged_list (atomic: the wrappers' fast path) */
static pthread_mutex_t staged_lock = PTHREAD_MUTEX_INITIALIZER;

static int any_staged(void) { return __atomic_load_n(&n_staged, __ATOMIC_RELAXED) != 0; }

static staged_req *find(MPI_Request r, int unlink) {
    if (r == MPI_REQUEST_NULL) return NULL;
    pthread_mutex_lock(&staged_lock);
    staged_req **pp = &staged_list, *found = NULL;
    for (; *pp; pp = &(*pp)->next) {
        if ((*pp)->req == r) {
            found = *pp;
            if (unlink) {
                *pp = found->next;
                __atomic_sub_fetch(&n_staged, 1, __ATOMIC_RELAXED);
            }
            break;
        }
    }
    pthread_mutex_unlock(&staged_lock);
    return found;
}

/* Takes s out of the list (by identity: its handle may already name a newer request). */
static void unlink_staged(staged_req *s) {
    pthread_mutex_lock(&staged_lock);
    for (staged_req **pp = &staged_list; *pp; pp = &(*pp)->next) {
        if (*pp == s) {
            *pp = s->next;
            __atomic_sub_fetch(&n_staged, 1, __ATOMIC_RELAXED);
            break;
        }
    }
    pthread_mutex_unlock(&staged_lock);
}

static void destroy(staged_req *s) {
    free(s->sin.host);
    free(s->sout.host);
    free(s);
}

static void insert(staged_req *s) {
    pthread_mutex_lock(&staged_lock);
    s->next = staged_list;
    staged_list = s;
    __atomic_add_fetch(&n_staged, 1, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&staged_lock);
}

/* Host copies of the buffers of a staged request (not filled yet); NULL on failure. */
static staged_req *make_staged(const void *sbuf, void *rbuf, int count, MPI_Datatype dtype,
                               int kin, int kout, int persistent) {
    staged_req *s = calloc(1, sizeof(*s));
    if (s == NULL) return NULL;
    s->kin = kin;
    s->kout = kout;
    s->in_place = sbuf == MPI_IN_PLACE;
    s->persistent = persistent;
    int rc = stage_alloc(&s->sout, rbuf, dtype, (uint64_t)count);
    if (rc == TWOHOP_OK && !s->in_place) rc = stage_alloc(&s->sin, sbuf, dtype, (uint64_t)count);
    if (rc != TWOHOP_OK) {
        destroy(s);
        return NULL;
    }
    return s;
}

/* Copies the user's buffers into the host copies (the output too: in place, and the
 * datatype's holes, which the MPI leaves as they are). */
static int copy_in(staged_req *s) {
    if (stage_copy_in(&s->sout, s->kout) != TWOHOP_OK ||
        (!s->in_place && stage_copy_in(&s->sin, s->kin) != TWOHOP_OK)) {
        fprintf(stderr, "twohop: staging a device buffer through host memory failed\n");
        return MPI_ERR_OTHER;
    }
    return MPI_SUCCESS;
}

/*
 * The MPI reported s complete: copies the result back (when the call succeeded: `ok`) and
 * ends the start; a non-persistent request leaves the list and is freed. Returns an MPI error
 * code (MPI_ERR_OTHER when the copy back failed).
 */
static int finish(staged_req *s, int ok) {
    int err = MPI_SUCCESS;
    if (ok && s->active && stage_out(&s->sout, s->kout) != TWOHOP_OK) {
        fprintf(stderr, "twohop: copying a staged allreduce result back failed\n");
        err = MPI_ERR_OTHER;
    }
    s->active = 0;
    if (!s->persistent) {
        unlink_staged(s);
        destroy(s);
    }
    return err;
}

EXPORT int MPI_Iallreduce(const void *sbuf, void *rbuf, int count, MPI_Datatype dtype,
                          MPI_Op op, MPI_Comm comm, MPI_Request *request) {
    int kin, kout;
    if (!twohop_pmpi_active() || count <= 0 || rbuf == MPI_IN_PLACE || request == NULL ||
        !kinds(sbuf, rbuf, count, &kin, &kout)) {
        return PMPI_Iallreduce(sbuf, rbuf, count, dtype, op, comm, request);
    }
    staged_req *s = make_staged(sbuf, rbuf, count, dtype, kin, kout, 0);
    if (s == NULL) return MPI_ERR_NO_MEM;
    int err = copy_in(s);
    if (err == MPI_SUCCESS) {
        err = PMPI_Iallreduce(s->in_place ? MPI_IN_PLACE : staged_buf(&s->sin),
                              staged_buf(&s->sout), count, dtype, op, comm, &s->req);
    }
    if (err != MPI_SUCCESS) {
        destroy(s);
        return err;
    }
    /* A handle of a request completed behind the library's back (a binding it does not
     * wrap) may come back: such a stale entry must never match this request. */
    staged_req *stale = find(s->req, 1);
    if (stale) destroy(stale);
    s->active = 1;
    insert(s);
    *request = s->req;
    return MPI_SUCCESS;
}

/* The staged requests among reqs[0..n): map[i] (NULL when not staged); allocated when n is
 * large. Returns the number found, or -1 when the map could not be allocated. */
static int map_staged(int n, const MPI_Request reqs[], staged_req **map) {
    int found = 0;
    for (int i = 0; i < n; ++i) {
        map[i] = find(reqs[i], 0);
        found += map[i] != NULL;
    }
    return found;
}

#define MAP_ON_STACK 64
#define WITH_MAP(n, reqs, body_none)                                                           \
    staged_req *stack_map_[MAP_ON_STACK];                                                      \
    staged_req **map = (n) <= MAP_ON_STACK ? stack_map_ : malloc(sizeof(*map) * (size_t)(n));  \
    if (map == NULL) return MPI_ERR_NO_MEM;                                                    \
    if (map_staged((n), (reqs), map) == 0) {                                                   \
        if (map != stack_map_) free(map);                                                      \
        body_none;                                                                             \
    }

/* Status error of entry i (MPI_ERR_IN_STATUS): whether that request succeeded. */
static int status_ok(int err, const MPI_Status *statuses, int i) {
    if (err == MPI_SUCCESS) return 1;
    if (err != MPI_ERR_IN_STATUS || statuses == MPI_STATUSES_IGNORE) return 0;
    return statuses[i].MPI_ERROR == MPI_SUCCESS;
}

EXPORT int MPI_Wait(MPI_Request *request, MPI_Status *status) {
    staged_req *s = any_staged() && request ? find(*request, 0) : NULL;
    if (s == NULL) return PMPI_Wait(request, status);
    int err = PMPI_Wait(request, status);
    const int ferr = finish(s, err == MPI_SUCCESS);
    return err != MPI_SUCCESS ? err : ferr;
}

EXPORT int MPI_Test(MPI_Request *request, int *flag, MPI_Status *status) {
    staged_req *s = any_staged() && request ? find(*request, 0) : NULL;
    if (s == NULL) return PMPI_Test(request, flag, status);
    int err = PMPI_Test(request, flag, status);
    if (err != MPI_SUCCESS || !*flag) return err;
    return finish(s, 1);
}

EXPORT int MPI_Request_get_status(MPI_Request request, int *flag, MPI_Status *status) {
    staged_req *s = any_staged() ? find(request, 0) : NULL;
    int err = PMPI_Request_get_status(request, flag, status);
    /* Complete: the application may read its buffer now; the request stays (a later
     * completion call finds the result already copied). */
    if (s && err == MPI_SUCCESS && *flag && s->active) {
        if (stage_out(&s->sout, s->kout) != TWOHOP_OK) err = MPI_ERR_OTHER;
        s->active = 0;
    }
    return err;
}

EXPORT int MPI_Waitall(int n, MPI_Request reqs[], MPI_Status statuses[]) {
    if (!any_staged() || n <= 0) return PMPI_Waitall(n, reqs, statuses);
    WITH_MAP(n, reqs, return PMPI_Waitall(n, reqs, statuses))
    int err = PMPI_Waitall(n, reqs, statuses);
    int ferr = MPI_SUCCESS;
    for (int i = 0; i < n; ++i) {
        if (map[i]) {
            const int e = finish(map[i], status_ok(err, statuses, i));
            if (ferr == MPI_SUCCESS) ferr = e;
        }
    }
    if (map != stack_map_) free(map);
    return err != MPI_SUCCESS ? err : ferr;
}

EXPORT int MPI_Testall(int n, MPI_Request reqs[], int *flag, MPI_Status statuses[]) {
    if (!any_staged() || n <= 0) return PMPI_Testall(n, reqs, flag, statuses);
    WITH_MAP(n, reqs, return PMPI_Testall(n, reqs, flag, statuses))
    int err = PMPI_Testall(n, reqs, flag, statuses);
    int ferr = MPI_SUCCESS;
    const int done = (err == MPI_SUCCESS || err == MPI_ERR_IN_STATUS) && *flag;
    for (int i = 0; done && i < n; ++i) {
        if (map[i]) {
            const int e = finish(map[i], status_ok(err, statuses, i));
            if (ferr == MPI_SUCCESS) ferr = e;
        }
    }
    if (map != stack_map_) free(map);
    return err != MPI_SUCCESS ? err : ferr;
}

EXPORT int MPI_Waitany(int n, MPI_Request reqs[], int *index, MPI_Status *status) {
    if (!any_staged() || n <= 0) return PMPI_Waitany(n, reqs, index, status);
    WITH_MAP(n, reqs, return PMPI_Waitany(n, reqs, index, status))
    int err = PMPI_Waitany(n, reqs, index, status);
    int ferr = MPI_SUCCESS;
    if (*index != MPI_UNDEFINED && *index >= 0 && *index < n && map[*index]) {
        ferr = finish(map[*index], err == MPI_SUCCESS);
    }
    if (map != stack_map_) free(map);
    return err != MPI_SUCCESS ? err : ferr;
}

EXPORT int MPI_Testany(int n, MPI_Request reqs[], int *index, int *flag, MPI_Status *status) {
    if (!any_staged() || n <= 0) return PMPI_Testany(n, reqs, index, flag, status);
    WITH_MAP(n, reqs, return PMPI_Testany(n, reqs, index, flag, status))
    int err = PMPI_Testany(n, reqs, index, flag, status);
    int ferr = MPI_SUCCESS;
    if (err == MPI_SUCCESS && *flag && *index != MPI_UNDEFINED && *index >= 0 && *index < n && map[*index]) {
        ferr = finish(map[*index], err == MPI_SUCCESS);
    }
    if (map != stack_map_) free(map);
    return err != MPI_SUCCESS ? err : ferr;
}

/* MPI_Waitsome / MPI_Testsome: the completed entries are indices[0..*outcount). */
static int finish_some(int err, staged_req **map, int n, int outcount, const int indices[],
                       const MPI_Status statuses[]) {
    int ferr = MPI_SUCCESS;
    for (int k = 0; outcount != MPI_UNDEFINED && k < outcount; ++k) {
        const int i = indices[k];
        if (i < 0 || i >= n || map[i] == NULL) continue;
        const int e = finish(map[i], status_ok(err, statuses, k));
        if (ferr == MPI_SUCCESS) ferr = e;
    }
    return ferr;
}

EXPORT int MPI_Waitsome(int n, MPI_Request reqs[], int *outcount, int indices[],
                        MPI_Status statuses[]) {
    if (!any_staged() || n <= 0) return PMPI_Waitsome(n, reqs, outcount, indices, statuses);
    WITH_MAP(n, reqs, return PMPI_Waitsome(n, reqs, outcount, indices, statuses))
    int err = PMPI_Waitsome(n, reqs, outcount, indices, statuses);
    const int ferr = finish_some(err, map, n, *outcount, indices, statuses);
    if (map != stack_map_) free(map);
    return err != MPI_SUCCESS ? err : ferr;
}

EXPORT int MPI_Testsome(int n, MPI_Request reqs[], int *outcount, int indices[],
                        MPI_Status statuses[]) {
    if (!any_staged() || n <= 0) return PMPI_Testsome(n, reqs, outcount, indices, statuses);
    WITH_MAP(n, reqs, return PMPI_Testsome(n, reqs, outcount, indices, statuses))
    int err = PMPI_Testsome(n, reqs, outcount, indices, statuses);
    const int ferr = finish_some(err, map, n, *outcount, indices, statuses);
    if (map != stack_map_) free(map);
    return err != MPI_SUCCESS ? err : ferr;
}

#if MPI_VERSION > 4 || (MPI_VERSION == 4 && MPI_SUBVERSION >= 1)
/* MPI 4.1's non-destructive tests of several requests: complete staged ones get their result
 * copied back (as MPI_Request_get_status). */
static int peek_done(staged_req **map, int n, int flag_all, const int *flags) {
    int err = MPI_SUCCESS;
    for (int i = 0; i < n; ++i) {
        staged_req *s = map[i];
        if (s == NULL || !s->active || !(flag_all || (flags && flags[i]))) continue;
        if (stage_out(&s->sout, s->kout) != TWOHOP_OK) err = MPI_ERR_OTHER;
        s->active = 0;
    }
    return err;
}

EXPORT int MPI_Request_get_status_all(int n, const MPI_Request reqs[], int *flag,
                                      MPI_Status statuses[]) {
    if (!any_staged() || n <= 0) return PMPI_Request_get_status_all(n, reqs, flag, statuses);
    WITH_MAP(n, reqs, return PMPI_Request_get_status_all(n, reqs, flag, statuses))
    int err = PMPI_Request_get_status_all(n, reqs, flag, statuses);
    const int ferr = err == MPI_SUCCESS && *flag ? peek_done(map, n, 1, NULL) : MPI_SUCCESS;
    if (map != stack_map_) free(map);
    return err != MPI_SUCCESS ? err : ferr;
}

EXPORT int MPI_Request_get_status_any(int n, const MPI_Request reqs[], int *index, int *flag,
                                      MPI_Status *status) {
    if (!any_staged() || n <= 0) return PMPI_Request_get_status_any(n, reqs, index, flag, status);
    WITH_MAP(n, reqs, return PMPI_Request_get_status_any(n, reqs, index, flag, status))
    int err = PMPI_Request_get_status_any(n, reqs, index, flag, status);
    int ferr = MPI_SUCCESS;
    if (err == MPI_SUCCESS && *flag && *index >= 0 && *index < n && map[*index]) {
        staged_req *one[1] = {map[*index]};
        ferr = peek_done(one, 1, 1, NULL);
    }
    if (map != stack_map_) free(map);
    return err != MPI_SUCCESS ? err : ferr;
}

EXPORT int MPI_Request_get_status_some(int n, const MPI_Request reqs[], int *outcount,
                                       int indices[], MPI_Status statuses[]) {
    if (!any_staged() || n <= 0) {
        return PMPI_Request_get_status_some(n, reqs, outcount, indices, statuses);
    }
    WITH_MAP(n, reqs, return PMPI_Request_get_status_some(n, reqs, outcount, indices, statuses))
    int err = PMPI_Request_get_status_some(n, reqs, outcount, indices, statuses);
    int ferr = MPI_SUCCESS;
    for (int k = 0; err == MPI_SUCCESS && *outcount != MPI_UNDEFINED && k < *outcount; ++k) {
        const int i = indices[k];
        if (i < 0 || i >= n || map[i] == NULL) continue;
        staged_req *one[1] = {map[i]};
        const int e = peek_done(one, 1, 1, NULL);
        if (ferr == MPI_SUCCESS) ferr = e;
    }
    if (map != stack_map_) free(map);
    return err != MPI_SUCCESS ? err : ferr;
}
#endif

EXPORT int MPI_Request_free(MPI_Request *request) {
    staged_req *s = any_staged() && request ? find(*request, 0) : NULL;
    if (s == NULL) return PMPI_Request_free(request);
    if (s->active) {
        /* Erroneous in MPI; refused so that the host copies outlive the MPI's call. */
        fprintf(stderr, "twohop: MPI_Request_free of an active allreduce request (erroneous: "
                        "complete it first); the request stays valid\n");
        return MPI_ERR_REQUEST;
    }
    unlink_staged(s);
    destroy(s);
    return PMPI_Request_free(request);
}

#if MPI_VERSION >= 4
EXPORT int MPI_Allreduce_init(const void *sbuf, void *rbuf, int count, MPI_Datatype dtype,
                              MPI_Op op, MPI_Comm comm, MPI_Info info, MPI_Request *request) {
    int kin, kout;
    if (!twohop_pmpi_active() || count <= 0 || rbuf == MPI_IN_PLACE || request == NULL ||
        !kinds(sbuf, rbuf, count, &kin, &kout)) {
        return PMPI_Allreduce_init(sbuf, rbuf, count, dtype, op, comm, info, request);
    }
    staged_req *s = make_staged(sbuf, rbuf, count, dtype, kin, kout, 1);
    if (s == NULL) return MPI_ERR_NO_MEM;
    const int err = PMPI_Allreduce_init(s->in_place ? MPI_IN_PLACE : staged_buf(&s->sin),
                                        staged_buf(&s->sout), count, dtype, op, comm, info,
                                        &s->req);
    if (err != MPI_SUCCESS) {
        destroy(s);
        return err;
    }
    staged_req *stale = find(s->req, 1);
    if (stale) destroy(stale);
    insert(s);
    *request = s->req;
    return MPI_SUCCESS;
}

/* One start of a staged persistent request: copy in and start; completion copies back. */
static int start_staged(staged_req *s, MPI_Request *request) {
    int err = copy_in(s);
    if (err == MPI_SUCCESS) err = PMPI_Start(request);
    if (err == MPI_SUCCESS) s->active = 1;
    return err;
}

EXPORT int MPI_Start(MPI_Request *request) {
    staged_req *s = any_staged() && request ? find(*request, 0) : NULL;
    return s ? start_staged(s, request) : PMPI_Start(request);
}

EXPORT int MPI_Startall(int n, MPI_Request requests[]) {
    if (!any_staged()) return PMPI_Startall(n, requests);
    for (int i = 0; i < n; ++i) { /* in order, as MPI_Startall starts them */
        int err = MPI_Start(&requests[i]);
        if (err != MPI_SUCCESS) return err;
    }
    return MPI_SUCCESS;
}
#endif
