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
    int active;  /* started, result not copied back yet */
    int claimed; /* a thread is in a completion call on it (staged_lock) */
    struct staged_req *next;
} staged_req;
static staged_req *staged_list;
static int n_staged; /* entries in staged_list (atomic: the wrappers' fast path) */
static pthread_mutex_t staged_lock = PTHREAD_MUTEX_INITIALIZER;

static int any_staged(void) { return __atomic_load_n(&n_staged, __ATOMIC_RELAXED) != 0; }

/*
 * The staged request with handle r, claimed for the calling thread's completion call; NULL
 * when r is not staged, or when its entry is claimed already: MPI lets one thread at a time
 * complete a request, so a claimed entry is one whose request another thread has just
 * completed, and r (the same value, handed out again by the MPI) names another request.
 */
static staged_req *claim(MPI_Request r) {
    if (r == MPI_REQUEST_NULL) return NULL;
    pthread_mutex_lock(&staged_lock);
    staged_req *found = NULL;
    for (staged_req *e = staged_list; e; e = e->next) {
        if (e->req == r && !e->claimed) {
            e->claimed = 1;
            found = e;
            break;
        }
    }
    pthread_mutex_unlock(&staged_lock);
    return found;
}

static void release(staged_req *s) {
    pthread_mutex_lock(&staged_lock);
    s->claimed = 0;
    pthread_mutex_unlock(&staged_lock);
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
    stage_free(&s->sin);
    stage_free(&s->sout);
    free(s);
}

/*
 * A new request got handle r from the MPI: an entry with the same handle is stale -- its
 * request was completed by a thread still in its completion call (claimed: that thread frees
 * it), or by a binding the library does not wrap (freed here). It must never match r.
 */
static void drop_stale(MPI_Request r) {
    pthread_mutex_lock(&staged_lock);
    for (staged_req **pp = &staged_list; *pp;) {
        staged_req *e = *pp;
        if (e->req != r) {
            pp = &e->next;
            continue;
        }
        *pp = e->next;
        __atomic_sub_fetch(&n_staged, 1, __ATOMIC_RELAXED);
        if (!e->claimed) destroy(e);
    }
    pthread_mutex_unlock(&staged_lock);
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
    if (rc == TWOHOP_OK) rc = stage_own_type(&s->sout); /* copied back after the start returns */
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
    } else {
        release(s);
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
    drop_stale(s->req);
    s->active = 1;
    insert(s);
    *request = s->req;
    return MPI_SUCCESS;
}

/* The staged requests among reqs[0..n), claimed: map[i] (NULL when not staged). Returns the
 * number found. */
static int map_staged(int n, const MPI_Request reqs[], staged_req **map) {
    int found = 0;
    for (int i = 0; i < n; ++i) {
        map[i] = claim(reqs[i]);
        found += map[i] != NULL;
    }
    return found;
}

/* After a completion call: entry s (its handle now `handle` in the application's array)
 * completed when a non-persistent request's handle became MPI_REQUEST_NULL, or when a
 * persistent one was reported complete (`reported`); `ok`: without an error. Completed:
 * finish (copy back when ok); otherwise the claim is released. Returns an MPI error code. */
static int settle(staged_req *s, MPI_Request handle, int reported, int ok) {
    const int completed = s->persistent ? reported : handle == MPI_REQUEST_NULL;
    if (!completed) {
        release(s);
        return MPI_SUCCESS;
    }
    return finish(s, ok);
}

/* The claim map and, for the array forms, statuses: the application's array, or (with
 * MPI_STATUSES_IGNORE) the library's, so that MPI_ERR_IN_STATUS is told apart per request. */
#define ON_STACK 64
#define WITH_ARRAYS(n, statuses)                                                               \
    staged_req *stack_map_[ON_STACK];                                                          \
    MPI_Status stack_st_[ON_STACK];                                                            \
    staged_req **map = (n) <= ON_STACK ? stack_map_ : malloc(sizeof(*map) * (size_t)(n));      \
    MPI_Status *st = (statuses) != MPI_STATUSES_IGNORE ? (statuses)                            \
                     : (n) <= ON_STACK ? stack_st_ : malloc(sizeof(*st) * (size_t)(n));        \
    if (map == NULL || st == NULL) {                                                           \
        if (map && map != stack_map_) free(map);                                               \
        if (st && st != stack_st_ && st != (statuses)) free(st);                               \
        return MPI_ERR_NO_MEM;                                                                 \
    }
#define FREE_ARRAYS(statuses)                                                                  \
    do {                                                                                       \
        if (map != stack_map_) free(map);                                                      \
        if (st != stack_st_ && st != (statuses)) free(st);                                     \
    } while (0)

/* Whether request i of an array form completed without an error, from the call's code. */
static int entry_ok(int err, const MPI_Status *st, int i) {
    return err == MPI_SUCCESS || (err == MPI_ERR_IN_STATUS && st[i].MPI_ERROR == MPI_SUCCESS);
}
/* Whether it was reported complete (MPI_ERR_PENDING: still pending, Open MPI). */
static int entry_reported(int err, const MPI_Status *st, int i) {
    return err == MPI_SUCCESS || (err == MPI_ERR_IN_STATUS && st[i].MPI_ERROR != MPI_ERR_PENDING);
}

EXPORT int MPI_Wait(MPI_Request *request, MPI_Status *status) {
    staged_req *s = any_staged() && request ? claim(*request) : NULL;
    if (s == NULL) return PMPI_Wait(request, status);
    int err = PMPI_Wait(request, status);
    const int ferr = settle(s, *request, err == MPI_SUCCESS, err == MPI_SUCCESS);
    return err != MPI_SUCCESS ? err : ferr;
}

EXPORT int MPI_Test(MPI_Request *request, int *flag, MPI_Status *status) {
    staged_req *s = any_staged() && request ? claim(*request) : NULL;
    if (s == NULL) return PMPI_Test(request, flag, status);
    *flag = 0;
    int err = PMPI_Test(request, flag, status);
    const int ferr = settle(s, *request, err == MPI_SUCCESS && *flag, err == MPI_SUCCESS);
    return err != MPI_SUCCESS ? err : ferr;
}

EXPORT int MPI_Request_get_status(MPI_Request request, int *flag, MPI_Status *status) {
    staged_req *s = any_staged() ? claim(request) : NULL;
    int err = PMPI_Request_get_status(request, flag, status);
    /* Complete: the application may read its buffer now; the request stays (a later
     * completion call finds the result already copied). */
    if (s && err == MPI_SUCCESS && *flag && s->active) {
        if (stage_out(&s->sout, s->kout) != TWOHOP_OK) err = MPI_ERR_OTHER;
        s->active = 0;
    }
    if (s) release(s);
    return err;
}

/*
 * The array forms share one body per family; the Wait form is the Test form that always
 * reports done (the shims below). MPI's own function is called with the library's status
 * array when the application ignores statuses (MPI_ERR_IN_STATUS is then told apart per
 * request), and with *index / *outcount preset (not written on an argument error).
 */
typedef int (*all_fn)(int, MPI_Request[], int *, MPI_Status[]);
typedef int (*any_fn)(int, MPI_Request[], int *, int *, MPI_Status *);
typedef int (*some_fn)(int, MPI_Request[], int *, int[], MPI_Status[]);

static int wait_all_shim(int n, MPI_Request reqs[], int *flag, MPI_Status st[]) {
    *flag = 1;
    return PMPI_Waitall(n, reqs, st);
}
static int wait_any_shim(int n, MPI_Request reqs[], int *index, int *flag, MPI_Status *st) {
    *flag = 1;
    return PMPI_Waitany(n, reqs, index, st);
}

static int staged_all(all_fn fn, int n, MPI_Request reqs[], int *flag, MPI_Status statuses[]) {
    if (!any_staged() || n <= 0) return fn(n, reqs, flag, statuses);
    WITH_ARRAYS(n, statuses)
    if (map_staged(n, reqs, map) == 0) {
        FREE_ARRAYS(statuses);
        return fn(n, reqs, flag, statuses);
    }
    *flag = 0;
    int err = fn(n, reqs, flag, st);
    int ferr = MPI_SUCCESS;
    for (int i = 0; i < n; ++i) {
        if (!map[i]) continue;
        const int e = settle(map[i], reqs[i], *flag && entry_reported(err, st, i),
                             entry_ok(err, st, i));
        if (ferr == MPI_SUCCESS) ferr = e;
    }
    FREE_ARRAYS(statuses);
    return err != MPI_SUCCESS ? err : ferr;
}

/* Only reqs[*index] can have completed; the other claims go. */
static int staged_any(any_fn fn, int n, MPI_Request reqs[], int *index, int *flag,
                      MPI_Status *status) {
    if (!any_staged() || n <= 0) return fn(n, reqs, index, flag, status);
    WITH_ARRAYS(n, MPI_STATUSES_IGNORE)
    if (map_staged(n, reqs, map) == 0) {
        FREE_ARRAYS(MPI_STATUSES_IGNORE);
        return fn(n, reqs, index, flag, status);
    }
    *index = MPI_UNDEFINED;
    *flag = 0;
    int err = fn(n, reqs, index, flag, status);
    int ferr = MPI_SUCCESS;
    for (int i = 0; i < n; ++i) {
        if (!map[i]) continue;
        if (i == *index) {
            ferr = settle(map[i], reqs[i], *flag && err == MPI_SUCCESS, err == MPI_SUCCESS);
        } else {
            release(map[i]);
        }
    }
    FREE_ARRAYS(MPI_STATUSES_IGNORE);
    return err != MPI_SUCCESS ? err : ferr;
}

/* The completed entries are indices[0..outcount), st[k] the status of indices[k]; the other
 * claims go. */
static int staged_some(some_fn fn, int n, MPI_Request reqs[], int *outcount, int indices[],
                       MPI_Status statuses[]) {
    if (!any_staged() || n <= 0) return fn(n, reqs, outcount, indices, statuses);
    WITH_ARRAYS(n, statuses)
    if (map_staged(n, reqs, map) == 0) {
        FREE_ARRAYS(statuses);
        return fn(n, reqs, outcount, indices, statuses);
    }
    *outcount = MPI_UNDEFINED;
    int err = fn(n, reqs, outcount, indices, st);
    int ferr = MPI_SUCCESS;
    const int valid = (err == MPI_SUCCESS || err == MPI_ERR_IN_STATUS) &&
                      *outcount != MPI_UNDEFINED && *outcount >= 0 && *outcount <= n;
    for (int k = 0; valid && k < *outcount; ++k) {
        const int i = indices[k];
        if (i < 0 || i >= n || map[i] == NULL) continue;
        const int e = settle(map[i], reqs[i], entry_reported(err, st, k), entry_ok(err, st, k));
        map[i] = NULL;
        if (ferr == MPI_SUCCESS) ferr = e;
    }
    for (int i = 0; i < n; ++i) {
        if (map[i]) release(map[i]);
    }
    FREE_ARRAYS(statuses);
    return err != MPI_SUCCESS ? err : ferr;
}

EXPORT int MPI_Waitall(int n, MPI_Request reqs[], MPI_Status statuses[]) {
    int flag;
    return staged_all(wait_all_shim, n, reqs, &flag, statuses);
}
EXPORT int MPI_Testall(int n, MPI_Request reqs[], int *flag, MPI_Status statuses[]) {
    return staged_all(PMPI_Testall, n, reqs, flag, statuses);
}
EXPORT int MPI_Waitany(int n, MPI_Request reqs[], int *index, MPI_Status *status) {
    int flag;
    return staged_any(wait_any_shim, n, reqs, index, &flag, status);
}
EXPORT int MPI_Testany(int n, MPI_Request reqs[], int *index, int *flag, MPI_Status *status) {
    return staged_any(PMPI_Testany, n, reqs, index, flag, status);
}
EXPORT int MPI_Waitsome(int n, MPI_Request reqs[], int *outcount, int indices[],
                        MPI_Status statuses[]) {
    return staged_some(PMPI_Waitsome, n, reqs, outcount, indices, statuses);
}
EXPORT int MPI_Testsome(int n, MPI_Request reqs[], int *outcount, int indices[],
                        MPI_Status statuses[]) {
    return staged_some(PMPI_Testsome, n, reqs, outcount, indices, statuses);
}

#if MPI_VERSION > 4 || (MPI_VERSION == 4 && MPI_SUBVERSION >= 1)
/* MPI 4.1's non-destructive tests of several requests: complete staged ones (every entry when
 * `all`, else done_idx[0..ndone)) get their result copied back, as with
 * MPI_Request_get_status; every claim is released. */
static int peek_done(staged_req **map, int n, const int *done_idx, int ndone, int all) {
    int err = MPI_SUCCESS;
    for (int k = 0; k < (all ? n : ndone); ++k) {
        const int i = all ? k : done_idx[k];
        if (i < 0 || i >= n) continue;
        staged_req *s = map[i];
        if (s == NULL || !s->active) continue;
        if (stage_out(&s->sout, s->kout) != TWOHOP_OK) err = MPI_ERR_OTHER;
        s->active = 0;
    }
    for (int i = 0; i < n; ++i) {
        if (map[i]) release(map[i]);
    }
    return err;
}

EXPORT int MPI_Request_get_status_all(int n, const MPI_Request reqs[], int *flag,
                                      MPI_Status statuses[]) {
    if (!any_staged() || n <= 0) return PMPI_Request_get_status_all(n, reqs, flag, statuses);
    WITH_ARRAYS(n, MPI_STATUSES_IGNORE)
    (void)map_staged(n, reqs, map);
    *flag = 0;
    int err = PMPI_Request_get_status_all(n, reqs, flag, statuses);
    const int ferr = peek_done(map, n, NULL, 0, err == MPI_SUCCESS && *flag);
    FREE_ARRAYS(MPI_STATUSES_IGNORE);
    return err != MPI_SUCCESS ? err : ferr;
}

EXPORT int MPI_Request_get_status_any(int n, const MPI_Request reqs[], int *index, int *flag,
                                      MPI_Status *status) {
    if (!any_staged() || n <= 0) return PMPI_Request_get_status_any(n, reqs, index, flag, status);
    WITH_ARRAYS(n, MPI_STATUSES_IGNORE)
    (void)map_staged(n, reqs, map);
    *index = MPI_UNDEFINED;
    *flag = 0;
    int err = PMPI_Request_get_status_any(n, reqs, index, flag, status);
    const int one = *index;
    const int ferr = peek_done(map, n, &one, err == MPI_SUCCESS && *flag ? 1 : 0, 0);
    FREE_ARRAYS(MPI_STATUSES_IGNORE);
    return err != MPI_SUCCESS ? err : ferr;
}

EXPORT int MPI_Request_get_status_some(int n, const MPI_Request reqs[], int *outcount,
                                       int indices[], MPI_Status statuses[]) {
    if (!any_staged() || n <= 0) {
        return PMPI_Request_get_status_some(n, reqs, outcount, indices, statuses);
    }
    WITH_ARRAYS(n, MPI_STATUSES_IGNORE)
    (void)map_staged(n, reqs, map);
    *outcount = MPI_UNDEFINED;
    int err = PMPI_Request_get_status_some(n, reqs, outcount, indices, statuses);
    const int nd = err == MPI_SUCCESS && *outcount != MPI_UNDEFINED ? *outcount : 0;
    const int ferr = peek_done(map, n, indices, nd, 0);
    FREE_ARRAYS(MPI_STATUSES_IGNORE);
    return err != MPI_SUCCESS ? err : ferr;
}
#endif

EXPORT int MPI_Request_free(MPI_Request *request) {
    staged_req *s = any_staged() && request ? claim(*request) : NULL;
    if (s == NULL) return PMPI_Request_free(request);
    if (s->active) {
        /* Erroneous in MPI; refused so that the host copies outlive the MPI's call. */
        release(s);
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
    drop_stale(s->req);
    insert(s);
    *request = s->req;
    return MPI_SUCCESS;
}

/* One start of a staged persistent request: copy in and start; completion copies back. */
static int start_staged(staged_req *s, MPI_Request *request) {
    if (s->active) {
        /* Erroneous in MPI; refused before the copy-in overwrites the input of the call in
         * flight. */
        fprintf(stderr, "twohop: MPI_Start of an active allreduce request (erroneous: complete "
                        "it first)\n");
        return MPI_ERR_REQUEST;
    }
    int err = copy_in(s);
    if (err == MPI_SUCCESS) err = PMPI_Start(request);
    if (err == MPI_SUCCESS) s->active = 1;
    return err;
}

EXPORT int MPI_Start(MPI_Request *request) {
    staged_req *s = any_staged() && request ? claim(*request) : NULL;
    if (s == NULL) return PMPI_Start(request);
    const int err = start_staged(s, request);
    release(s);
    return err;
}

EXPORT int MPI_Startall(int n, MPI_Request requests[]) {
    if (!any_staged() || n < 0 || requests == NULL) return PMPI_Startall(n, requests);
    /* An erroneous array starts nothing (the MPI checks it whole first): let it say so. */
    for (int i = 0; i < n; ++i) {
        if (requests[i] == MPI_REQUEST_NULL) return PMPI_Startall(n, requests);
    }
    for (int i = 0; i < n; ++i) { /* in order, as MPI_Startall starts them */
        int err = MPI_Start(&requests[i]);
        if (err != MPI_SUCCESS) return err;
    }
    return MPI_SUCCESS;
}
#endif
