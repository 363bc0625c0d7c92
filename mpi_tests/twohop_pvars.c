/*
 * MPI_T lookup of twohop's counters. MPI_T_pvar_get_index is deliberately not used (the
 * contract says find by name through get_num/get_info, which also works on MPI 3.0 libraries).
 * Under the PMPI library (libtwohop_pmpi.so, any MPI) the same counters are read through its
 * twohop_pmpi_counter(), found with dlsym: it takes precedence when present.
 */
#include "twohop_pvars.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

typedef int (*pmpi_counter_fn)(const char *, unsigned long long *);

/* libtwohop_pmpi.so's counter reader, or NULL when the library is not loaded. */
static pmpi_counter_fn pmpi_counter(void) {
    void *sym = dlsym(RTLD_DEFAULT, "twohop_pmpi_counter");
    pmpi_counter_fn fn;
    memcpy(&fn, &sym, sizeof fn); /* object to function pointer, as POSIX allows */
    return fn;
}

static unsigned long long pmpi_read(const char *name) {
    unsigned long long v = 0;
    pmpi_counter_fn fn = pmpi_counter();
    if (fn) fn(name, &v);
    return v;
}

#define SERVED_NAME "coll_twohop_allreduce_calls"
#define FALLBACK_NAME "coll_twohop_fallback_calls"

/*
 * Finds pvar `want` by name; returns its index or -1 and explains a mismatch in why[].
 */
static int find_pvar(const char *want, char *why, size_t why_len) {
    int num = 0;
    if (MPI_T_pvar_get_num(&num) != MPI_SUCCESS) {
        snprintf(why, why_len, "MPI_T_pvar_get_num failed");
        return -1;
    }
    for (int i = 0; i < num; i++) {
        char name[256], desc[1024];
        int name_len = sizeof name, desc_len = sizeof desc;
        int verbosity, var_class, bind, readonly, continuous, atomic;
        MPI_Datatype dtype;
        MPI_T_enum enumtype;
        if (MPI_T_pvar_get_info(i, name, &name_len, &verbosity, &var_class, &dtype, &enumtype, desc,
                                &desc_len, &bind, &readonly, &continuous, &atomic) != MPI_SUCCESS) {
            continue;
        }
        if (strcmp(name, want) != 0) {
            continue;
        }
        if (var_class != MPI_T_PVAR_CLASS_COUNTER || dtype != MPI_UNSIGNED_LONG_LONG ||
            bind != MPI_T_BIND_NO_OBJECT || !continuous) {
            snprintf(why, why_len,
                     "pvar %s found but not a continuous no-object unsigned long long counter "
                     "(class %d, bind %d, continuous %d)",
                     want, var_class, bind, continuous);
            return -1;
        }
        return i;
    }
    snprintf(why, why_len, "pvar %s not found (is mca_coll_twohop.so loaded?)", want);
    return -1;
}

bool twohop_pvars_open(struct twohop_pvars *pv) {
    memset(pv, 0, sizeof *pv);
    if (pmpi_counter() != NULL) {
        pv->pmpi = true;
        pv->found = true;
        return true;
    }
    int provided;
    /* Ask MPI_T for the level MPI runs at: Open MPI 4.1's MPI_T_init_thread overwrites the
     * process's MPI thread level with the one requested here. */
    int level = MPI_THREAD_SINGLE;
    MPI_Query_thread(&level);
    if (MPI_T_init_thread(level, &provided) != MPI_SUCCESS) {
        snprintf(pv->why, sizeof pv->why, "MPI_T_init_thread failed");
        return false;
    }
    int served_idx = find_pvar(SERVED_NAME, pv->why, sizeof pv->why);
    int fallback_idx = served_idx < 0 ? -1 : find_pvar(FALLBACK_NAME, pv->why, sizeof pv->why);
    if (served_idx < 0 || fallback_idx < 0) {
        return false;
    }
    int n;
    if (MPI_T_pvar_session_create(&pv->session) != MPI_SUCCESS ||
        MPI_T_pvar_handle_alloc(pv->session, served_idx, NULL, &pv->served, &n) != MPI_SUCCESS ||
        n != 1 ||
        MPI_T_pvar_handle_alloc(pv->session, fallback_idx, NULL, &pv->fallback, &n) !=
            MPI_SUCCESS ||
        n != 1) {
        snprintf(pv->why, sizeof pv->why, "MPI_T session/handle allocation failed");
        return false;
    }
    char ignored[256];
    int gpu_idx = find_pvar("coll_twohop_gpu_path_calls", ignored, sizeof ignored);
    pv->has_gpu = gpu_idx >= 0 &&
                  MPI_T_pvar_handle_alloc(pv->session, gpu_idx, NULL, &pv->gpu, &n) == MPI_SUCCESS;
    int hop1_idx = find_pvar("coll_twohop_gpu_hop1_calls", ignored, sizeof ignored);
    pv->has_hop1 = hop1_idx >= 0 && MPI_T_pvar_handle_alloc(pv->session, hop1_idx, NULL,
                                                            &pv->hop1, &n) == MPI_SUCCESS;
    int enq_idx = find_pvar("coll_twohop_enqueued_calls", ignored, sizeof ignored);
    pv->has_enq = enq_idx >= 0 && MPI_T_pvar_handle_alloc(pv->session, enq_idx, NULL, &pv->enq,
                                                          &n) == MPI_SUCCESS;
    int posted_idx = find_pvar("coll_twohop_gpu_posted_calls", ignored, sizeof ignored);
    pv->has_posted = posted_idx >= 0 && MPI_T_pvar_handle_alloc(pv->session, posted_idx, NULL,
                                                                &pv->posted, &n) == MPI_SUCCESS;
    int bells_idx = find_pvar("coll_twohop_doorbells", ignored, sizeof ignored);
    pv->has_bells = bells_idx >= 0 && MPI_T_pvar_handle_alloc(pv->session, bells_idx, NULL,
                                                              &pv->bells, &n) == MPI_SUCCESS;
    int nb_idx = find_pvar("coll_twohop_nonblocking_calls", ignored, sizeof ignored);
    pv->has_nb = nb_idx >= 0 && MPI_T_pvar_handle_alloc(pv->session, nb_idx, NULL, &pv->nb,
                                                        &n) == MPI_SUCCESS;
    int pers_idx = find_pvar("coll_twohop_persistent_starts", ignored, sizeof ignored);
    pv->has_pers = pers_idx >= 0 && MPI_T_pvar_handle_alloc(pv->session, pers_idx, NULL,
                                                            &pv->pers, &n) == MPI_SUCCESS;
    int mn_idx = find_pvar("coll_twohop_enqueued_multinode_calls", ignored, sizeof ignored);
    pv->has_enq_mn = mn_idx >= 0 && MPI_T_pvar_handle_alloc(pv->session, mn_idx, NULL,
                                                            &pv->enq_mn, &n) == MPI_SUCCESS;
    int half_idx = find_pvar("coll_twohop_half_calls", ignored, sizeof ignored);
    pv->has_half = half_idx >= 0 && MPI_T_pvar_handle_alloc(pv->session, half_idx, NULL,
                                                            &pv->half, &n) == MPI_SUCCESS;
    pv->found = true;
    return true;
}

struct twohop_counts twohop_pvars_read(const struct twohop_pvars *pv) {
    struct twohop_counts c;
    memset(&c, 0, sizeof c);
    if (pv->pmpi) {
        c.served = pmpi_read("coll_twohop_allreduce_calls");
        c.fallback = pmpi_read("coll_twohop_fallback_calls");
        c.gpu = pmpi_read("coll_twohop_gpu_path_calls");
        c.gpu_hop1 = pmpi_read("coll_twohop_gpu_hop1_calls");
        c.enqueued = pmpi_read("coll_twohop_enqueued_calls");
        c.posted = pmpi_read("coll_twohop_gpu_posted_calls");
        c.doorbells = pmpi_read("coll_twohop_doorbells");
        c.nonblocking = pmpi_read("coll_twohop_nonblocking_calls");
        c.persistent = pmpi_read("coll_twohop_persistent_starts");
        c.enq_multinode = pmpi_read("coll_twohop_enqueued_multinode_calls");
        c.half = pmpi_read("coll_twohop_half_calls");
    } else if (pv->found) {
        MPI_T_pvar_read(pv->session, pv->served, &c.served);
        MPI_T_pvar_read(pv->session, pv->fallback, &c.fallback);
        if (pv->has_gpu) MPI_T_pvar_read(pv->session, pv->gpu, &c.gpu);
        if (pv->has_hop1) MPI_T_pvar_read(pv->session, pv->hop1, &c.gpu_hop1);
        if (pv->has_enq) MPI_T_pvar_read(pv->session, pv->enq, &c.enqueued);
        if (pv->has_posted) MPI_T_pvar_read(pv->session, pv->posted, &c.posted);
        if (pv->has_bells) MPI_T_pvar_read(pv->session, pv->bells, &c.doorbells);
        if (pv->has_nb) MPI_T_pvar_read(pv->session, pv->nb, &c.nonblocking);
        if (pv->has_pers) MPI_T_pvar_read(pv->session, pv->pers, &c.persistent);
        if (pv->has_enq_mn) MPI_T_pvar_read(pv->session, pv->enq_mn, &c.enq_multinode);
        if (pv->has_half) MPI_T_pvar_read(pv->session, pv->half, &c.half);
    }
    return c;
}

void twohop_pvars_close(struct twohop_pvars *pv) {
    if (pv->pmpi) {
        pv->pmpi = pv->found = false;
        return;
    }
    if (pv->found) {
        MPI_T_pvar_handle_free(pv->session, &pv->served);
        MPI_T_pvar_handle_free(pv->session, &pv->fallback);
        if (pv->has_gpu) MPI_T_pvar_handle_free(pv->session, &pv->gpu);
        if (pv->has_hop1) MPI_T_pvar_handle_free(pv->session, &pv->hop1);
        if (pv->has_enq) MPI_T_pvar_handle_free(pv->session, &pv->enq);
        if (pv->has_posted) MPI_T_pvar_handle_free(pv->session, &pv->posted);
        if (pv->has_bells) MPI_T_pvar_handle_free(pv->session, &pv->bells);
        if (pv->has_nb) MPI_T_pvar_handle_free(pv->session, &pv->nb);
        if (pv->has_enq_mn) MPI_T_pvar_handle_free(pv->session, &pv->enq_mn);
        if (pv->has_half) MPI_T_pvar_handle_free(pv->session, &pv->half);
        if (pv->has_pers) MPI_T_pvar_handle_free(pv->session, &pv->pers);
        MPI_T_pvar_session_free(&pv->session);
    }
    pv->found = false;
    MPI_T_finalize();
}
