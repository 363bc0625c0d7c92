/*
 * Shared state of the allreduce_matrix driver (allreduce_matrix.c: options, shapes, the matrix,
 * reporting; matrix_special.c: the random-float and > 2 GiB cases).
 */
#ifndef MATRIX_DRIVER_H
#define MATRIX_DRIVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <mpi.h>

#include "matrix_types.h"
#include "twohop_pvars.h"

/* Failure bits of one case. */
enum {
    F_MPI = 1 << 0,
    F_VALUE = 1 << 1,
    F_CANARY = 1 << 2,
    F_GAP = 1 << 3,
    F_SENDBUF = 1 << 4,
    F_REPEAT = 1 << 5,
    F_PVAR = 1 << 6,
    F_BITEQ = 1 << 7,
    F_TOL = 1 << 8,
    F_NBITS = 9
};
extern const char *const fail_names[F_NBITS];

#define GUARD 64      /* canary bytes on each side of a receive buffer */
#define CANARY 0xA5   /* canary byte */
#define GAPFILL 0x5A  /* byte in the holes of non-contiguous elements */
#define RECVFILL 0xEE /* garbage in a receive buffer before a non-in-place call */
#define NSLOTS 8      /* count slots per (shape, type, op) */
#define DEFAULT_SEGMENT 1048576
#define DEFAULT_SMALL 8192
#define RANDOM_COUNT 100003 /* random-float cases: several default segments of floats */
#define MAX_SHAPES 8

/* Command line. */
struct options {
    bool expect_twohop; /* --expect twohop (default) | none */
    bool quick;
    bool big;
    bool verbose;
    int timeout_s;
    double big_gib;          /* --big message size in GiB */
    const char *vnodes;      /* virtual node spec for the interleaved shape */
    const char *only_type;   /* --type SUBSTR */
    const char *only_shape;  /* --shape NAME */
    bool tolerate_ompi_bugs; /* --tolerate-ompi-bugs: known 4.1.4 value bugs are not failures */
    const char *inject;      /* --inject value|canary|sendbuf|gap: harness self-test */
    bool poison;             /* --poison: user buffers PROT_NONE during each served call */
    int form;                /* --form: FORM_BLOCKING, FORM_NONBLOCKING or FORM_PERSISTENT */
};

enum { FORM_BLOCKING, FORM_NONBLOCKING, FORM_PERSISTENT };

/* The persistent allreduce of this MPI (allreduce_init.h); undefined when it has none. */
#include "allreduce_init.h"
#ifdef TEST_ALLREDUCE_INIT
#define MATRIX_ALLREDUCE_INIT TEST_ALLREDUCE_INIT
#endif

/* One communicator shape of the matrix. */
struct shape {
    const char *name;
    MPI_Comm comm;
    bool owned;
    int group; /* MPI_COMM_WORLD rank of this communicator's rank 0 */
    unsigned long long exp_served, got_served, exp_fb, got_fb;
};

/* What one case left for rank 0 (identical case order on every rank). */
struct record {
    uint64_t hash;
    int64_t count;
    int32_t fail;
    int32_t group;
    int16_t shape, type;
    int8_t op, inplace;
};

/* Run-wide state. */
struct ctx {
    struct options opt;
    int wrank, wsize;
    struct twohop_pvars pv;
    struct shape shapes[MAX_SHAPES];
    int nshapes;
    struct record *recs;
    size_t nrecs, caprecs;
    size_t segment_bytes, small_bytes;
    int details_printed;
    /* Reference cache (packed base elements) keyed by (type, op, count, p). */
    void *ref;
    int ref_type, ref_op, ref_p;
    long long ref_count;
    /* Scratch buffers, grown on demand. */
    void *scratch[6];
    size_t scratch_len[6];
};

/* What the watchdog prints as "running: ..."; set before every case. */
extern char watchdog_case[512];

/* Returns scratch buffer `slot` (0..5) with at least len bytes (aborts when out of memory). */
void *scratch(struct ctx *cx, int slot, size_t len);

/* Appends a zeroed record to cx->recs and returns it. */
struct record *new_record(struct ctx *cx);

/* Prints one rank-local detail line about a failed check (first few per rank, or all with -v). */
void detail(struct ctx *cx, const struct shape *s, int t, int op, long long count, int inplace,
            const char *what);

/* True when all len bytes equal v. */
bool all_bytes(const unsigned char *p, size_t len, unsigned char v);

/*
 * Random float (dbl false) or double SUM on shape si: relative tolerance against a long double
 * reference and full bit-equality across ranks (gather + memcmp).
 */
void run_random(struct ctx *cx, int si, bool dbl, int inplace);

/* --big: one > 2 GiB message on shape 0 (world), not in place and in place. */
void run_big(struct ctx *cx);

#endif
