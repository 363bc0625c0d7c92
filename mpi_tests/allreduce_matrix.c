/*
 * allreduce_matrix: the one MPI-level correctness driver for MPI_Allreduce under twohop.
 *
 * Matrix: communicator shape x datatype x op x count x in-place. Every case calls MPI_Allreduce
 * twice and checks, on every rank:
 *   value     exact result against this program's own reference (never Open MPI's result)
 *   canary    guard bytes before and after the receive buffer untouched
 *   gap       holes of non-contiguous datatypes untouched
 *   sendbuf   the send buffer untouched
 *   repeat    the second call gives the same bits as the first
 *   pvar      (--expect twohop) coll_twohop_allreduce_calls / _fallback_calls moved by exactly
 *             the calls twohop must serve / hand back
 * and, on rank 0 after the run, bit-equality of the result across the ranks of each
 * communicator (a 64-bit hash of the significant bytes of every case is gathered; the random
 * float cases gather the full result and memcmp it).
 *
 * Forms (--form): blocking MPI_Allreduce (default); nonblocking MPI_Iallreduce, the first call
 * completed with MPI_Wait and the second with an MPI_Test loop; persistent
 * MPI_Allreduce_init / MPIX_Allreduce_init once per case, MPI_Start + MPI_Wait per call,
 * MPI_Request_free after both. The pvar check then counts served calls with
 * coll_twohop_nonblocking_calls / coll_twohop_persistent_starts (coll_twohop_allreduce_calls,
 * blocking calls only, must not move; a persistent allreduce handed back counts one fallback,
 * at its initialisation).
 *
 * Modes: default full matrix, --quick (smaller), --big (one > 2 GiB message). A SIGALRM
 * watchdog aborts the job after --timeout seconds, naming the case that was running.
 * Exit status: 0 when every check passed on every rank, 1 otherwise.
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <mpi.h>
#include <sys/mman.h>

#include "matrix_driver.h"

const char *const fail_names[F_NBITS] = {"mpi-error", "value",        "canary",
                                         "gap",       "sendbuf",      "repeat",
                                         "pvar",      "bit-equality", "tolerance"};

char watchdog_case[512] = "startup";
static int watchdog_timeout;

/* SIGALRM handler: the job hangs or is far too slow; say where and abort (async-signal-safe). */
static void watchdog(int sig) {
    (void)sig;
    char msg[768];
    int n = snprintf(msg, sizeof msg,
                     "allreduce_matrix: WATCHDOG: no completion after %d s; running: %s\n",
                     watchdog_timeout, watchdog_case);
    if (n > 0) {
        ssize_t w = write(2, msg, (size_t)n);
        (void)w;
    }
    abort();
}

/* Prints usage to stdout. */
static void usage(void) {
    printf(
        "usage: allreduce_matrix [--expect twohop|none] [--quick] [--big [--big-gib G]]\n"
        "                        [--timeout S] [--vnodes SPEC] [--type SUBSTR] [--shape NAME]\n"
        "                        [--tolerate-ompi-bugs] [--verbose]\n"
        "                        [--form blocking|nonblocking|persistent]\n"
        "  --expect twohop  require the twohop pvars and check exactly which calls twohop\n"
        "                   served / handed back (default); none: results only\n"
        "  --quick          smaller matrix (fewer shapes and counts)\n"
        "  --form F         blocking MPI_Allreduce (default), nonblocking MPI_Iallreduce\n"
        "                   (Wait, then a Test loop), persistent MPI_Allreduce_init\n"
        "                   (MPIX_ on Open MPI 4.1) started twice\n"
        "  --big            only the > 2 GiB case (MPI_Type_contiguous(256, MPI_INT), user_sum)\n"
        "  --big-gib G      its size in GiB (default 2.001)\n"
        "  --timeout S      watchdog: abort after S seconds (default 240)\n"
        "  --tolerate-ompi-bugs  value errors of Open MPI 4.1.4's own op tables (see\n"
        "                   known_ompi_bug) are listed as KNOWN, not failures (baselines)\n"
        "  --inject KIND    self-test of the checks: corrupt one result on the last rank\n"
        "                   (value, canary, sendbuf or gap); the run must then fail\n"
        "  --poison         send/receive buffers are mapped PROT_NONE during every call that\n"
        "                   reaches a coll component (run with the MCA parameter\n"
        "                   coll_twohop_test_poisoned_memory=1): any host access outside\n"
        "                   twohop's memory-kind copies crashes the run\n"
        "  --vnodes SPEC    node layout for the interleaved shape (default: the MCA param\n"
        "                   coll_twohop_virtual_nodes from the environment, else real hosts)\n");
}

/* Parses argv into o; returns 0, 1 for --help, -1 on a bad argument. */
static int parse_args(int argc, char **argv, struct options *o) {
    *o = (struct options){.expect_twohop = true, .timeout_s = 240, .big_gib = 2.001};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--expect") && v) {
            if (strcmp(v, "twohop") && strcmp(v, "none")) {
                return -1;
            }
            o->expect_twohop = !strcmp(v, "twohop");
            i++;
        } else if (!strcmp(a, "--quick")) {
            o->quick = true;
        } else if (!strcmp(a, "--big")) {
            o->big = true;
        } else if (!strcmp(a, "--inject") && v) {
            o->inject = argv[++i];
        } else if (!strcmp(a, "--tolerate-ompi-bugs")) {
            o->tolerate_ompi_bugs = true;
        } else if (!strcmp(a, "--poison")) {
            o->poison = true;
        } else if (!strcmp(a, "--form") && v) {
            if (!strcmp(v, "blocking")) {
                o->form = FORM_BLOCKING;
            } else if (!strcmp(v, "nonblocking")) {
                o->form = FORM_NONBLOCKING;
            } else if (!strcmp(v, "persistent")) {
#ifdef MATRIX_ALLREDUCE_INIT
                o->form = FORM_PERSISTENT;
#else
                fprintf(stderr, "allreduce_matrix: this MPI has no persistent allreduce\n");
                return -1;
#endif
            } else {
                return -1;
            }
            i++;
        } else if (!strcmp(a, "--verbose")) {
            o->verbose = true;
        } else if (!strcmp(a, "--timeout") && v) {
            o->timeout_s = atoi(argv[++i]);
        } else if (!strcmp(a, "--big-gib") && v) {
            o->big_gib = atof(argv[++i]);
        } else if (!strcmp(a, "--vnodes") && v) {
            o->vnodes = argv[++i];
        } else if (!strcmp(a, "--type") && v) {
            o->only_type = argv[++i];
        } else if (!strcmp(a, "--shape") && v) {
            o->only_shape = argv[++i];
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            return 1;
        } else {
            fprintf(stderr, "allreduce_matrix: bad argument '%s'\n", a);
            return -1;
        }
    }
    return 0;
}

/* twohop setting `name` from the environment: the MCA parameter coll_twohop_<name> (mpirun
 * exports --mca X Y as OMPI_MCA_X), else the PMPI library's TWOHOP_<NAME>; NULL when unset. */
static const char *twohop_setting_env(const char *name) {
    char var[128];
    snprintf(var, sizeof var, "OMPI_MCA_coll_twohop_%s", name);
    const char *s = getenv(var);
    if (s) return s;
    snprintf(var, sizeof var, "TWOHOP_%s", name);
    for (char *c = var + 7; *c; ++c) *c = (char)toupper((unsigned char)*c);
    return getenv(var);
}

/* A size_t twohop setting (twohop_setting_env), or dflt. */
static size_t env_size(const char *name, size_t dflt) {
    const char *s = twohop_setting_env(name);
    return s && *s ? (size_t)strtoull(s, NULL, 0) : dflt;
}

/* Slots of the MPI send and receive buffers (page-aligned mappings with --poison). */
#define SLOT_SEND 3
#define SLOT_RECV 4
static bool slot_mapped(const struct ctx *cx, int slot) {
    return cx->opt.poison && (slot == SLOT_SEND || slot == SLOT_RECV);
}

static void scratch_free(struct ctx *cx, int slot) {
    if (slot_mapped(cx, slot)) {
        if (cx->scratch[slot]) munmap(cx->scratch[slot], cx->scratch_len[slot]);
    } else {
        free(cx->scratch[slot]);
    }
    cx->scratch[slot] = NULL;
}

/* --poison: no host access to the MPI buffers (on) / back to normal (off). */
static void poison_buffers(struct ctx *cx, bool on) {
    for (int slot = SLOT_SEND; slot <= SLOT_RECV; slot++) {
        if (mprotect(cx->scratch[slot], cx->scratch_len[slot],
                     on ? PROT_NONE : PROT_READ | PROT_WRITE) != 0) {
            perror("allreduce_matrix: mprotect");
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
}

/* Returns scratch buffer `slot` with at least len bytes. */
void *scratch(struct ctx *cx, int slot, size_t len) {
    if (cx->scratch_len[slot] < len) {
        scratch_free(cx, slot);
        if (slot_mapped(cx, slot)) {
            const size_t page = (size_t)sysconf(_SC_PAGESIZE);
            len = (len + page - 1) / page * page;
            void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            cx->scratch[slot] = p == MAP_FAILED ? NULL : p;
        } else {
            cx->scratch[slot] = malloc(len);
        }
        if (!cx->scratch[slot]) {
            fprintf(stderr, "allreduce_matrix: out of memory (%zu bytes)\n", len);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        cx->scratch_len[slot] = len;
    }
    return cx->scratch[slot];
}

/* ------------------------------------------------------------------ node layout and shapes */

/*
 * Node id of every world rank from a coll_twohop_virtual_nodes spec (same grammar as the
 * component: block:K, rr:K, sizes:A,B,..., list:N0,N1,...). Returns false on a bad spec.
 */
static bool parse_vnodes(const char *spec, int n, long *node) {
    const char *colon = strchr(spec, ':');
    if (!colon) {
        return false;
    }
    size_t kl = (size_t)(colon - spec);
    const char *args = colon + 1;
    if ((kl == 5 && !strncmp(spec, "block", 5)) || (kl == 2 && !strncmp(spec, "rr", 2))) {
        long k = atol(args);
        if (k <= 0) {
            return false;
        }
        long base = n / k, rem = n % k, big = rem * (base + 1);
        for (int r = 0; r < n; r++) {
            if (kl == 2) {
                node[r] = r % k;
            } else {
                node[r] = r < big ? r / (base + 1) : rem + (r - big) / (base ? base : 1);
            }
        }
        return true;
    }
    bool sizes = kl == 5 && !strncmp(spec, "sizes", 5);
    bool list = kl == 4 && !strncmp(spec, "list", 4);
    if (!sizes && !list) {
        return false;
    }
    int r = 0;
    long id = 0;
    for (const char *p = args; *p;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p) {
            return false;
        }
        for (long j = 0; j < (sizes ? v : 1) && r < n; j++) {
            node[r++] = list ? v : id;
        }
        id++;
        p = *end == ',' ? end + 1 : end;
    }
    return r == n;
}

/*
 * Node id of every world rank: --vnodes, else OMPI_MCA_coll_twohop_virtual_nodes, else the
 * real shared-memory domain (the world rank of the first rank on each host).
 */
static void node_layout(struct ctx *cx, long *node) {
    const char *spec =
        cx->opt.vnodes ? cx->opt.vnodes : twohop_setting_env("virtual_nodes");
    if (spec && *spec && parse_vnodes(spec, cx->wsize, node)) {
        return;
    }
    if (spec && *spec && cx->wrank == 0) {
        fprintf(stderr, "allreduce_matrix: cannot parse virtual node spec '%s'; using hosts\n",
                spec);
    }
    MPI_Comm local;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local);
    long leader = cx->wrank;
    MPI_Bcast(&leader, 1, MPI_LONG, 0, local);
    MPI_Allgather(&leader, 1, MPI_LONG, node, 1, MPI_LONG, MPI_COMM_WORLD);
    MPI_Comm_free(&local);
}

/* Registers shape `name` over comm (owned = freed at the end). */
static void add_shape(struct ctx *cx, const char *name, MPI_Comm comm, bool owned) {
    if (cx->opt.only_shape && strcmp(cx->opt.only_shape, name) != 0) {
        if (owned) {
            MPI_Comm_free(&comm);
        }
        return;
    }
    struct shape *s = &cx->shapes[cx->nshapes++];
    memset(s, 0, sizeof *s);
    s->name = name;
    s->comm = comm;
    s->owned = owned;
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    MPI_Group wg, cg;
    int zero = 0;
    MPI_Comm_group(MPI_COMM_WORLD, &wg);
    MPI_Comm_group(comm, &cg);
    MPI_Group_translate_ranks(cg, 1, &zero, wg, &s->group);
    MPI_Group_free(&wg);
    MPI_Group_free(&cg);
}

/*
 * Builds the communicator shapes: world, half (two splits), reverse (keys reversed), odd_even,
 * dupdup (dup of a dup), interleaved (rank order alternates between nodes), self.
 * --quick keeps world, odd_even, interleaved and self.
 */
static void make_shapes(struct ctx *cx) {
    int r = cx->wrank, n = cx->wsize;
    MPI_Comm c, d;
    bool q = cx->opt.quick;
    add_shape(cx, "world", MPI_COMM_WORLD, false);
    if (cx->opt.big) {
        return; /* --big: world only */
    }
    if (!q) {
        MPI_Comm_split(MPI_COMM_WORLD, r < n / 2, r, &c);
        add_shape(cx, "half", c, true);
        MPI_Comm_split(MPI_COMM_WORLD, 0, n - 1 - r, &c);
        add_shape(cx, "reverse", c, true);
    }
    MPI_Comm_split(MPI_COMM_WORLD, r % 2, r, &c);
    add_shape(cx, "odd_even", c, true);
    if (!q) {
        MPI_Comm_dup(MPI_COMM_WORLD, &d);
        MPI_Comm_dup(d, &c);
        MPI_Comm_free(&d);
        add_shape(cx, "dupdup", c, true);
    }
    /* interleaved: key = (index of this rank inside its node) * nnodes + node index. */
    long *node = calloc((size_t)n, sizeof *node);
    node_layout(cx, node);
    int my_local = 0, node_idx = 0, nnodes = 0;
    for (int i = 0; i < n; i++) {
        bool first = true;
        for (int j = 0; j < i; j++) {
            first = first && node[j] != node[i];
        }
        if (first) {
            if (node[i] == node[r]) {
                node_idx = nnodes;
            }
            nnodes++;
        }
        if (i < r && node[i] == node[r]) {
            my_local++;
        }
    }
    free(node);
    MPI_Comm_split(MPI_COMM_WORLD, 0, my_local * nnodes + node_idx, &c);
    add_shape(cx, "interleaved", c, true);
    add_shape(cx, "self", MPI_COMM_SELF, false);
}

/* ------------------------------------------------------------------ one case */

/* Writes n packed base elements of type ty into an MPI-layout buffer (holes get GAPFILL). */
static void layout_put(const struct mt_type *ty, const void *packed, size_t count, void *buf) {
    size_t bsz = mt_ctype_size(ty->ct);
    if (ty->layout == L_PACKED) {
        memcpy(buf, packed, count * ty->extent);
        return;
    }
    const unsigned char *src = packed;
    unsigned char *dst = buf;
    for (size_t e = 0; e < count; e++) {
        memcpy(dst + e * 3 * bsz, src + (2 * e) * bsz, bsz);
        memset(dst + (e * 3 + 1) * bsz, GAPFILL, bsz);
        memcpy(dst + (e * 3 + 2) * bsz, src + (2 * e + 1) * bsz, bsz);
    }
}

/* Extracts packed base elements from an MPI-layout buffer; returns false if a hole != fill. */
static bool layout_get(const struct mt_type *ty, const void *buf, size_t count, void *packed,
                       unsigned char hole) {
    size_t bsz = mt_ctype_size(ty->ct);
    if (ty->layout == L_PACKED) {
        memcpy(packed, buf, count * ty->extent);
        return true;
    }
    const unsigned char *src = buf;
    unsigned char *dst = packed;
    bool ok = true;
    for (size_t e = 0; e < count; e++) {
        memcpy(dst + (2 * e) * bsz, src + e * 3 * bsz, bsz);
        memcpy(dst + (2 * e + 1) * bsz, src + (e * 3 + 2) * bsz, bsz);
        for (size_t b = 0; b < bsz; b++) {
            ok = ok && src[(e * 3 + 1) * bsz + b] == hole;
        }
    }
    return ok;
}

/* True when all len bytes equal v. */
bool all_bytes(const unsigned char *p, size_t len, unsigned char v) {
    for (size_t i = 0; i < len; i++) {
        if (p[i] != v) {
            return false;
        }
    }
    return true;
}

/*
 * --inject: corrupts, once per run and on the last world rank only, the first call of the first
 * suitable case (non-in-place, count >= 2, and for `gap` a non-contiguous datatype), so the
 * self-test tests can prove that the checks fire.
 */
static void inject_fault(struct ctx *cx, const struct mt_type *ty, unsigned char *sendb,
                         unsigned char *recvb, size_t bytes, long long count, int inplace) {
    static bool done;
    const char *k = cx->opt.inject;
    if (!k || done || cx->wrank != cx->wsize - 1 || inplace || count < 2) {
        return;
    }
    if (!strcmp(k, "value")) {
        recvb[GUARD] ^= 1;
    } else if (!strcmp(k, "canary")) {
        recvb[GUARD + bytes] ^= 1;
    } else if (!strcmp(k, "sendbuf")) {
        sendb[GUARD] ^= 1;
    } else if (!strcmp(k, "gap") && ty->layout == L_VECTOR) {
        recvb[GUARD + mt_ctype_size(ty->ct)] ^= 1;
    } else {
        return;
    }
    done = true;
}

/* Reference result (packed) of (type, op, count) over p ranks; cached for the last key. */
static const void *reference(struct ctx *cx, int t, int op, long long count, int p) {
    const struct mt_type *ty = &mt_types[t];
    size_t nbase = (size_t)count * (size_t)ty->nb, bytes = nbase * mt_ctype_size(ty->ct);
    if (cx->ref && cx->ref_type == t && cx->ref_op == op && cx->ref_count == count &&
        cx->ref_p == p) {
        return cx->ref;
    }
    free(cx->ref);
    cx->ref = malloc(bytes ? bytes : 1);
    void *tmp = scratch(cx, 5, bytes ? bytes : 1);
    mt_gen(ty->ct, op, 0, p, 0, nbase, cx->ref);
    for (int r = 1; r < p; r++) {
        mt_gen(ty->ct, op, r, p, 0, nbase, tmp);
        mt_combine(ty->ct, op, cx->ref, tmp, nbase);
    }
    cx->ref_type = t;
    cx->ref_op = op;
    cx->ref_count = count;
    cx->ref_p = p;
    return cx->ref;
}

/* Appends a record (grows the array). */
struct record *new_record(struct ctx *cx) {
    if (cx->nrecs == cx->caprecs) {
        cx->caprecs = cx->caprecs ? 2 * cx->caprecs : 4096;
        cx->recs = realloc(cx->recs, cx->caprecs * sizeof *cx->recs);
    }
    struct record *r = &cx->recs[cx->nrecs++];
    memset(r, 0, sizeof *r);
    return r;
}

/* Name of the datatype of a record (negative ids: the special cases). */
static const char *rec_type_name(int t) {
    switch (t) {
    case -1:
        return "random(MPI_FLOAT)";
    case -2:
        return "random(MPI_DOUBLE)";
    case -3:
        return "contig256(MPI_INT)";
    default:
        return mt_types[t].name;
    }
}

/* Prints one rank-local detail line about a failed check (first few per rank, or all with -v). */
void detail(struct ctx *cx, const struct shape *s, int t, int op, long long count, int inplace,
            const char *what) {
    if (!cx->opt.verbose && cx->details_printed >= 8) {
        return;
    }
    cx->details_printed++;
    fprintf(stderr, "  detail rank=%d shape=%s type=%s op=%s count=%lld inplace=%d: %s\n",
            cx->wrank, s->name, rec_type_name(t), mt_op_name(op), count, inplace, what);
}

/*
 * One allreduce in the matrix's form (call 0 or 1 of a case): MPI_Allreduce; MPI_Iallreduce
 * completed by MPI_Wait (call 0) or an MPI_Test loop (call 1); or MPI_Start + MPI_Wait of
 * the persistent request *preq. Returns the MPI error code.
 */
static int call_form(int form, int call, MPI_Request *preq, const void *sb, void *rb, int n,
                     MPI_Datatype dt, MPI_Op op, MPI_Comm comm) {
    if (form == FORM_BLOCKING) return MPI_Allreduce(sb, rb, n, dt, op, comm);
    if (form == FORM_PERSISTENT) {
        if (*preq == MPI_REQUEST_NULL) return MPI_ERR_REQUEST;
        int rc = MPI_Start(preq);
        return rc != MPI_SUCCESS ? rc : MPI_Wait(preq, MPI_STATUS_IGNORE);
    }
    MPI_Request req;
    int rc = MPI_Iallreduce(sb, rb, n, dt, op, comm, &req);
    if (rc != MPI_SUCCESS) return rc;
    if (call == 0) return MPI_Wait(&req, MPI_STATUS_IGNORE);
    int flag = 0;
    while (rc == MPI_SUCCESS && !flag) rc = MPI_Test(&req, &flag, MPI_STATUS_IGNORE);
    return rc;
}

/*
 * Runs one case (two allreduce calls in the matrix's form) and records its outcome.
 */
static void run_case(struct ctx *cx, int si, int t, int op, long long count, int inplace) {
    struct shape *s = &cx->shapes[si];
    const struct mt_type *ty = &mt_types[t];
    int p, rank;
    MPI_Comm_size(s->comm, &p);
    MPI_Comm_rank(s->comm, &rank);
    snprintf(watchdog_case, sizeof watchdog_case, "shape=%s type=%s op=%s count=%lld inplace=%d",
             s->name, ty->name, mt_op_name(op), count, inplace);

    size_t nbase = (size_t)count * (size_t)ty->nb;
    size_t pbytes = nbase * mt_ctype_size(ty->ct); /* packed */
    size_t bytes = (size_t)count * ty->extent;     /* MPI layout */
    bool reaches = p >= 2 && count > 0;
    bool fb = reaches && (ty->must_fallback || mt_op_must_fallback(op));
    const int form = cx->opt.form;
    /* Non-blocking and persistent calls whose type signature is at most 4 MPI_INT with MIN or
     * MAX go to the previous module uncounted (the shape of Open MPI's own communicator
     * construction; README "Non-blocking and persistent allreduce"). */
    const bool int_type = !strcmp(ty->name, "MPI_INT") || strstr(ty->name, "(MPI_INT)") ||
                          strstr(ty->name, ",MPI_INT)");
    const bool internal_shape = form != FORM_BLOCKING && reaches && int_type &&
                                (op == O_MIN || op == O_MAX) &&
                                (long long)ty->nb * count <= 4;
    unsigned long long exp_served = reaches && !fb && !internal_shape ? 2 : 0,
                       exp_fb = fb && !internal_shape ? 2 : 0;
    if (form == FORM_PERSISTENT && fb) exp_fb = 1; /* handed back once, at initialisation */

    const void *ref = reference(cx, t, op, count, p);
    unsigned char *in = scratch(cx, 0, pbytes + 1);
    unsigned char *out = scratch(cx, 1, pbytes + 1);
    unsigned char *sig = scratch(cx, 2, pbytes + 1);
    unsigned char *sendb = scratch(cx, 3, bytes + 2 * GUARD);
    unsigned char *recvb = scratch(cx, 4, bytes + 2 * GUARD);
    mt_gen(ty->ct, op, rank, p, 0, nbase, in);

    struct record *rec = new_record(cx);
    rec->count = count;
    rec->group = s->group;
    rec->shape = (int16_t)si;
    rec->type = (int16_t)t;
    rec->op = (int8_t)op;
    rec->inplace = (int8_t)inplace;

    uint64_t hashes[2] = {0, 0};
    char msg[MPI_MAX_ERROR_STRING + 64];
    struct twohop_counts c0 = twohop_pvars_read(&cx->pv);
    MPI_Request preq = MPI_REQUEST_NULL;
#ifdef MATRIX_ALLREDUCE_INIT
    if (form == FORM_PERSISTENT) {
        /* Poisoned memory is a memory kind: the buffers are that kind at initialisation too. */
        const bool poison_init = cx->opt.poison && count > 0;
        if (poison_init) poison_buffers(cx, true);
        int rc = MATRIX_ALLREDUCE_INIT(inplace ? MPI_IN_PLACE : sendb + GUARD, recvb + GUARD,
                                       (int)count, ty->dt, mt_op_for_type(t, op), s->comm,
                                       MPI_INFO_NULL, &preq);
        if (poison_init) poison_buffers(cx, false);
        if (rc != MPI_SUCCESS) {
            detail(cx, s, t, op, count, inplace, "persistent allreduce initialisation failed");
        }
    }
#endif
    for (int call = 0; call < 2; call++) {
        memset(sendb, 0, bytes + 2 * GUARD);
        memset(recvb, CANARY, GUARD);
        memset(recvb + GUARD + bytes, CANARY, GUARD);
        unsigned char hole = GAPFILL;
        if (inplace) {
            layout_put(ty, in, (size_t)count, recvb + GUARD);
        } else {
            memset(recvb + GUARD, RECVFILL, bytes);
            hole = RECVFILL;
            layout_put(ty, in, (size_t)count, sendb + GUARD);
        }
        uint64_t send_hash = mt_hash(sendb, bytes + 2 * GUARD, 1);
        /* Single-rank communicators reach twohop too (its memory-kind-aware copy). */
        const bool poisoned = cx->opt.poison && count > 0;
        if (poisoned) poison_buffers(cx, true);
        int rc = call_form(form, call, &preq, inplace ? MPI_IN_PLACE : sendb + GUARD,
                           recvb + GUARD, (int)count, ty->dt, mt_op_for_type(t, op), s->comm);
        if (poisoned) poison_buffers(cx, false);
        if (call == 0) {
            inject_fault(cx, ty, sendb, recvb, bytes, count, inplace);
        }
        if (rc != MPI_SUCCESS) {
            char es[MPI_MAX_ERROR_STRING];
            int el;
            MPI_Error_string(rc, es, &el);
            snprintf(msg, sizeof msg, "call %d: MPI error: %s", call, es);
            detail(cx, s, t, op, count, inplace, msg);
            rec->fail |= F_MPI;
            continue;
        }
        if (!all_bytes(recvb, GUARD, CANARY) || !all_bytes(recvb + GUARD + bytes, GUARD, CANARY)) {
            snprintf(msg, sizeof msg, "call %d: canary bytes around the receive buffer changed",
                     call);
            detail(cx, s, t, op, count, inplace, msg);
            rec->fail |= F_CANARY;
        }
        if (!inplace && mt_hash(sendb, bytes + 2 * GUARD, 1) != send_hash) {
            detail(cx, s, t, op, count, inplace, "send buffer modified");
            rec->fail |= F_SENDBUF;
        }
        if (!layout_get(ty, recvb + GUARD, (size_t)count, out, hole)) {
            detail(cx, s, t, op, count, inplace, "holes of the non-contiguous datatype written");
            rec->fail |= F_GAP;
        }
        if (call == 0) {
            size_t bad = mt_compare(ty->ct, out, ref, nbase, msg + 64, sizeof msg - 64);
            if (bad != (size_t)-1) {
                char head[64];
                snprintf(head, sizeof head, "value at element %zu: ", bad);
                memcpy(msg, head, strlen(head));
                memmove(msg + strlen(head), msg + 64, strlen(msg + 64) + 1);
                detail(cx, s, t, op, count, inplace, msg);
                rec->fail |= F_VALUE;
            }
        }
        size_t sl = mt_sig_pack(ty->ct, out, nbase, sig);
        hashes[call] = mt_hash(sig, sl, 7);
    }
    if (preq != MPI_REQUEST_NULL) MPI_Request_free(&preq);
    struct twohop_counts c2 = twohop_pvars_read(&cx->pv);
    const unsigned long long dform = form == FORM_NONBLOCKING ? c2.nonblocking - c0.nonblocking
                                     : form == FORM_PERSISTENT ? c2.persistent - c0.persistent
                                                               : 0;
    if (hashes[0] != hashes[1] && !(rec->fail & F_MPI)) {
        detail(cx, s, t, op, count, inplace, "second call gave different bits");
        rec->fail |= F_REPEAT;
    }
    rec->hash = hashes[0];
    /* Served calls of this form: coll_twohop_allreduce_calls counts blocking calls only. */
    if (form != FORM_BLOCKING && cx->opt.expect_twohop && c2.served != c0.served) {
        snprintf(msg, sizeof msg, "pvars: %llu blocking calls counted in a %s case",
                 c2.served - c0.served, form == FORM_NONBLOCKING ? "non-blocking" : "persistent");
        detail(cx, s, t, op, count, inplace, msg);
        rec->fail |= F_PVAR;
    }
    unsigned long long ds = form == FORM_BLOCKING ? c2.served - c0.served : dform,
                       df = c2.fallback - c0.fallback;
    s->exp_served += exp_served;
    s->exp_fb += exp_fb;
    s->got_served += ds;
    s->got_fb += df;
    if (cx->opt.expect_twohop && (ds != exp_served || df != exp_fb)) {
        snprintf(msg, sizeof msg,
                 "pvars: twohop served %llu (want %llu), fell back %llu (want %llu)", ds,
                 exp_served, df, exp_fb);
        detail(cx, s, t, op, count, inplace, msg);
        rec->fail |= F_PVAR;
    }
}

/* ------------------------------------------------------------------ the matrix */

/* Whether the case list runs (type t, op) on shape si at count slot `slot`. */
static bool selected(const struct ctx *cx, int si, int t, int op, int slot) {
    if (slot < 5) {
        return true; /* small counts: always */
    }
    /* Counts at and beyond the latency/pipeline threshold: every (type, op) on world and
     * interleaved (the node-crossing shapes); elsewhere only the first op of each type. */
    const char *n = cx->shapes[si].name;
    if (!strcmp(n, "world") || !strcmp(n, "interleaved")) {
        return true;
    }
    unsigned ops = mt_types[t].ops;
    return op == __builtin_ctz(ops);
}

/* The count of slot `slot` for a communicator of size p and element extent ext. */
static long long slot_count(const struct ctx *cx, int slot, int p, size_t ext) {
    long long thr = (long long)(cx->small_bytes / ext);
    switch (slot) {
    case 0:
        return 0;
    case 1:
        return 1;
    case 2:
        return p - 1;
    case 3:
        return p + 1;
    case 4:
        return 1031;
    case 5:
        return thr; /* exactly at the latency-path threshold */
    case 6:
        return thr + 1; /* first count past it */
    default:
        return (long long)(3 * cx->segment_bytes / ext + 7); /* three segments and a bit */
    }
}

/* Runs every selected case of the matrix. */
static void run_matrix(struct ctx *cx) {
    for (int t = 0; t < mt_num_types; t++) {
        if (cx->opt.only_type && !strstr(mt_types[t].name, cx->opt.only_type)) {
            continue;
        }
        for (int op = 0; op < O_NUM; op++) {
            if (!(mt_types[t].ops & (1u << op))) {
                continue;
            }
            for (int slot = 0; slot < NSLOTS; slot++) {
                if (cx->opt.quick && (slot == 2 || slot == 5)) {
                    continue;
                }
                for (int si = 0; si < cx->nshapes; si++) {
                    if (!selected(cx, si, t, op, slot)) {
                        continue;
                    }
                    int p;
                    MPI_Comm_size(cx->shapes[si].comm, &p);
                    long long count = slot_count(cx, slot, p, mt_types[t].extent);
                    for (int inplace = 0; inplace < 2; inplace++) {
                        run_case(cx, si, t, op, count, inplace);
                    }
                }
            }
        }
    }
    if (!cx->opt.only_type || strstr("random", cx->opt.only_type)) {
        for (int si = 0; si < cx->nshapes; si++) {
            for (int inplace = 0; inplace < 2; inplace++) {
                run_random(cx, si, false, inplace);
                run_random(cx, si, true, inplace);
            }
        }
    }
}

/* ------------------------------------------------------------------ reporting */

/*
 * Wrong results of Open MPI 4.1.4's own reductions seen with tuned (and basic) on x86-64:
 *   MPI_UNSIGNED_CHAR / MPI_UINT8_T / MPI_UNSIGNED_SHORT / MPI_UINT16_T SUM saturates instead of
 *     wrapping (op/avx; gone with --mca op ^avx);
 *   MPI_UNSIGNED_LONG MIN/MAX compare as signed, MPI_OFFSET MIN/MAX as unsigned (base op table).
 */
static bool known_ompi_bug(int t, int op) {
    if (t < 0) {
        return false;
    }
    const char *n = mt_types[t].name;
    if (op == O_SUM) {
        return !strcmp(n, "MPI_UNSIGNED_CHAR") || !strcmp(n, "MPI_UINT8_T") ||
               !strcmp(n, "MPI_UNSIGNED_SHORT") || !strcmp(n, "MPI_UINT16_T");
    }
    if (op == O_MIN || op == O_MAX) {
        return !strcmp(n, "MPI_UNSIGNED_LONG") || !strcmp(n, "MPI_OFFSET");
    }
    return false;
}

/*
 * Gathers every rank's records on rank 0, adds bit-equality across the ranks of each
 * communicator, prints one line per failed case. Returns the number of failed cases (all ranks).
 */
static long report(struct ctx *cx) {
    size_t n = cx->nrecs;
    unsigned long long nn = n, nmax = n;
    MPI_Allreduce(&nn, &nmax, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
    long failed = 0;
    if (nmax != n) { /* cannot happen unless the case lists diverged */
        fprintf(stderr, "allreduce_matrix: rank %d ran %zu cases, another rank %llu\n", cx->wrank,
                n, nmax);
        failed = 1;
    }
    struct record *all = NULL;
    size_t rb = n * sizeof(struct record);
    if (cx->wrank == 0) {
        all = malloc((size_t)cx->wsize * rb + 1);
    }
    if (!failed) {
        MPI_Gather(cx->recs, (int)rb, MPI_BYTE, all, (int)rb, MPI_BYTE, 0, MPI_COMM_WORLD);
    }
    if (cx->wrank == 0 && !failed) {
        for (size_t k = 0; k < n; k++) {
            int fail_union = 0;
            char ranks[512] = "";
            for (int r = 0; r < cx->wsize; r++) {
                struct record *x = &all[(size_t)r * n + k];
                /* First rank of the same communicator instance: bit-equality reference. */
                for (int q = 0; q < r; q++) {
                    struct record *y = &all[(size_t)q * n + k];
                    if (y->group == x->group) {
                        if (y->hash != x->hash && !((x->fail | y->fail) & F_MPI)) {
                            x->fail |= F_BITEQ;
                        }
                        break;
                    }
                }
                if (x->fail) {
                    size_t l = strlen(ranks);
                    snprintf(ranks + l, sizeof ranks - l, "%s%d", l ? "," : "", r);
                    fail_union |= x->fail;
                }
            }
            if (!fail_union) {
                continue;
            }
            const struct record *x = &all[k];
            bool known = cx->opt.tolerate_ompi_bugs && !(fail_union & ~(F_VALUE | F_BITEQ)) &&
                         known_ompi_bug(x->type, x->op);
            failed += !known;
            char checks[256] = "";
            for (int b = 0; b < F_NBITS; b++) {
                if (fail_union & (1 << b)) {
                    size_t l = strlen(checks);
                    snprintf(checks + l, sizeof checks - l, "%s%s", l ? "," : "", fail_names[b]);
                }
            }
            printf("%s shape=%s type=%s op=%s count=%lld inplace=%d checks=%s ranks=%s\n",
                   known ? "KNOWN-OMPI-BUG" : "FAIL",
                   x->type == -3 ? "world" : cx->shapes[x->shape].name, rec_type_name(x->type),
                   mt_op_name(x->op), (long long)x->count, x->inplace, checks, ranks);
        }
        free(all);
    }
    MPI_Bcast(&failed, 1, MPI_LONG, 0, MPI_COMM_WORLD);
    return failed;
}

/* Prints, per shape, the calls twohop should have served / handed back and what the pvars say. */
static void report_pvars(struct ctx *cx) {
    for (int si = 0; si < cx->nshapes; si++) {
        struct shape *s = &cx->shapes[si];
        unsigned long long v[4] = {s->exp_served, s->got_served, s->exp_fb, s->got_fb}, sum[4];
        MPI_Reduce(v, sum, 4, MPI_UNSIGNED_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
        if (cx->wrank == 0) {
            printf("# pvars shape=%-11s twohop served %8llu (expected %8llu)  fell back %6llu "
                   "(expected %6llu)%s\n",
                   s->name, sum[1], sum[0], sum[3], sum[2],
                   cx->opt.expect_twohop && (sum[0] != sum[1] || sum[2] != sum[3]) ? "  MISMATCH"
                                                                                   : "");
        }
    }
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    struct ctx cx;
    memset(&cx, 0, sizeof cx);
    MPI_Comm_rank(MPI_COMM_WORLD, &cx.wrank);
    MPI_Comm_size(MPI_COMM_WORLD, &cx.wsize);
    int pa = parse_args(argc, argv, &cx.opt);
    if (pa != 0) {
        if (cx.wrank == 0) {
            usage();
        }
        MPI_Finalize();
        return pa > 0 ? 0 : 2;
    }
    watchdog_timeout = cx.opt.timeout_s;
    signal(SIGALRM, watchdog);
    alarm((unsigned)cx.opt.timeout_s);
    double t0 = MPI_Wtime();
    cx.segment_bytes = env_size("segment_bytes", DEFAULT_SEGMENT);
    cx.small_bytes = env_size("small_msg_bytes", DEFAULT_SMALL);

    long setup_fail = 0;
    if (!twohop_pvars_open(&cx.pv) && cx.opt.expect_twohop) {
        if (cx.wrank == 0) {
            printf("FAIL setup: --expect twohop but %s\n", cx.pv.why);
        }
        setup_fail = 1;
    }
    if (mt_types_init() != 0) {
        setup_fail = 1;
    }
    long failed = setup_fail;
    if (!setup_fail) {
        make_shapes(&cx);
        if (cx.opt.big) {
            run_big(&cx);
        } else {
            run_matrix(&cx);
        }
        snprintf(watchdog_case, sizeof watchdog_case, "final report");
        failed = report(&cx);
        report_pvars(&cx);
    }
    unsigned long long total = cx.nrecs;
    struct twohop_counts c = twohop_pvars_read(&cx.pv), csum;
    MPI_Reduce(&c, &csum, 2, MPI_UNSIGNED_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (cx.wrank == 0) {
        printf("allreduce_matrix: np=%d mode=%s expect=%s: %llu cases, %ld failed; twohop "
               "served %llu calls, fell back %llu (all ranks); %.1f s\n",
               cx.wsize,
               cx.opt.big     ? "big"
               : cx.opt.quick ? "quick"
                              : "full",
               cx.opt.expect_twohop ? "twohop" : "none", total, failed, csum.served, csum.fallback,
               MPI_Wtime() - t0);
        printf("%s\n", failed ? "RESULT: FAIL" : "RESULT: PASS");
    }
    alarm(0);
    for (int si = 0; si < cx.nshapes; si++) {
        if (cx.shapes[si].owned) {
            MPI_Comm_free(&cx.shapes[si].comm);
        }
    }
    if (!setup_fail) {
        mt_types_fini();
    }
    twohop_pvars_close(&cx.pv);
    free(cx.recs);
    free(cx.ref);
    for (int i = 0; i < 6; i++) {
        scratch_free(&cx, i);
    }
    MPI_Finalize();
    return failed ? 1 : 0;
}
