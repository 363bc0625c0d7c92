/*
 * The Open MPI adapter's datatypes and ops (twohop_adapter.h): Open MPI's datatype and op
 * objects read into the facts the front ends' policy decides from (route_signature,
 * coll/front/policy.h); this rank's views of its buffers in the reduction's canonical layout
 * (direct, through Open MPI's convertor, or staged through host memory for memory the host must
 * not touch); user ops through ompi_op_reduce; the half-precision registration; the copy of a
 * single-rank communicator.
 */
#include "ompi_config.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpi.h"
#include "ompi/datatype/ompi_datatype.h"
#include "ompi/op/op.h"
#include "opal/datatype/opal_convertor.h"
#include "opal/util/output.h"

#include "twohop_adapter.h"
#include "twohop_core.h"

/* ------------------------------------------------------- datatype mapping ---- */

/* Calls served with twohop's half-precision kernels (pvar coll_twohop_half_calls). */
unsigned long long twohop_half_calls;

void twohop_count_half(const twohop_reduction *red) {
    if (red->dtype == TWOHOP_BF16 || red->dtype == TWOHOP_F16) {
        __atomic_add_fetch(&twohop_half_calls, 1, __ATOMIC_RELAXED);
    }
}

/*
 * Registers a half-precision datatype or op created by include/twohop_half.h, in the front
 * ends' shared registry (coll/front/mpi_handles.h: arguments, errors). Every rank creates them
 * with the same header calls, so the classification is the same on every rank.
 */
__attribute__((visibility("default"))) int
mca_coll_twohop_register_half(MPI_Datatype type, MPI_Op op, int kind, int half_op) {
    return twohop_half_register(type, op, kind, half_op);
}

/* ------------------------------------------------------------ memory kinds ---- */


static int kind_read(void *ctx, void *dst, uint64_t off, uint64_t len) {
    const kind_view *k = (const kind_view *)ctx;
    return twohop_kind_to_host(k->kind, dst, k->base + off, (size_t)len);
}

static int kind_write(void *ctx, const void *src, uint64_t off, uint64_t len) {
    const kind_view *k = (const kind_view *)ctx;
    return twohop_kind_from_host(k->kind, k->base + off, src, (size_t)len);
}


int stage_alloc(staging *st, const char *buf, ompi_datatype_t *dtype, size_t count) {
    ptrdiff_t lb, extent, true_lb, true_extent;
    ompi_datatype_get_extent(dtype, &lb, &extent);
    ompi_datatype_get_true_extent(dtype, &true_lb, &true_extent);
    st->true_lb = true_lb;
    st->bytes = count ? (size_t)true_extent + (count - 1) * (size_t)extent : 0;
    st->user_lo = (char *)buf + true_lb;
    st->dtype = dtype;
    st->count = count;
    st->host = (char *)malloc(st->bytes + 1);
    return st->host == NULL ? TWOHOP_ERR_NO_MEMORY : TWOHOP_OK;
}

int stage_copy_in(staging *st, int kind) {
    return twohop_kind_to_host(kind, st->host, st->user_lo, st->bytes);
}

int stage_in(staging *st, int kind, const char *buf, ompi_datatype_t *dtype, size_t count) {
    const int rc = stage_alloc(st, buf, dtype, count);
    return rc == TWOHOP_OK ? stage_copy_in(st, kind) : rc;
}

/* The buffer address to give MPI-level code for the staged copy. */
char *staged_buf(const staging *st) { return st->host - st->true_lb; }

/* Serialises the read-merge-write of stage_out (two calls in flight may have interleaved
 * buffers: each one's holes are the other's results). */
static opal_mutex_t stage_out_lock = OPAL_MUTEX_STATIC_INIT;

/*
 * Copies the result back into user memory: the type map's bytes only. A datatype with holes
 * spans bytes that belong to the application (and possibly to another call in flight whose
 * buffer interleaves with this one): they are read back first and written back unchanged.
 */
int stage_out(staging *st, int kind) {
    size_t tsize = 0;
    ompi_datatype_type_size(st->dtype, &tsize);
    if (st->bytes == 0 || tsize * st->count == st->bytes) { /* no holes */
        return twohop_kind_from_host(kind, st->user_lo, st->host, st->bytes);
    }
    char *cur = (char *)malloc(st->bytes + 1);
    if (cur == NULL) return TWOHOP_ERR_NO_MEMORY;
    opal_mutex_lock(&stage_out_lock);
    int rc = twohop_kind_to_host(kind, cur, st->user_lo, st->bytes);
    if (rc == TWOHOP_OK) {
        ompi_datatype_copy_content_same_ddt(st->dtype, st->count, cur - st->true_lb,
                                            st->host - st->true_lb);
        rc = twohop_kind_from_host(kind, st->user_lo, cur, st->bytes);
    }
    opal_mutex_unlock(&stage_out_lock);
    free(cur);
    return rc;
}

/* ------------------------------------------------ layouts and conversion ---- */


/* Packed signature bytes [off, off+len) of the view's buffer <-> mem. */
static int convert_packed(const layout_view *v, void *mem, uint64_t off, uint64_t len,
                          int pack) {
    opal_convertor_t conv;
    OBJ_CONSTRUCT(&conv, opal_convertor_t);
    int rc = pack ? opal_convertor_copy_and_prepare_for_send(ompi_mpi_local_convertor,
                                                            &v->dtype->super, v->count, v->buf,
                                                            0, &conv)
                  : opal_convertor_copy_and_prepare_for_recv(ompi_mpi_local_convertor,
                                                            &v->dtype->super, v->count, v->buf,
                                                            0, &conv);
    size_t pos = (size_t)off;
    if (rc == OPAL_SUCCESS) rc = opal_convertor_set_position(&conv, &pos);
    if (rc == OPAL_SUCCESS && pos != off) rc = OPAL_ERROR;
    if (rc == OPAL_SUCCESS) {
        struct iovec iov = {mem, (size_t)len};
        uint32_t n = 1;
        size_t max = (size_t)len;
        int r = pack ? opal_convertor_pack(&conv, &iov, &n, &max)
                     : opal_convertor_unpack(&conv, &iov, &n, &max);
        if (r < 0 || max != len) rc = OPAL_ERROR;
    }
    OBJ_DESTRUCT(&conv);
    return rc == OPAL_SUCCESS ? 0 : -1;
}

/* Canonical elements (base type, C layout) <-> packed signature bytes, for types with holes. */
static int convert_elements(ompi_datatype_t *base, size_t n, void *elems, void *packed,
                            int to_packed) {
    layout_view e = {base, n, (char *)elems, NULL, 0, 0};
    size_t bytes, size;
    ompi_datatype_type_size(base, &size);
    bytes = n * size;
    return convert_packed(&e, packed, 0, bytes, to_packed);
}

/* twohop_userbuf.read / write for a converted view. */
static int view_access(const layout_view *v, void *mem, uint64_t off, uint64_t len, int read) {
    if (v->base == NULL || v->base_size == v->base_extent) {
        return convert_packed(v, mem, off, len, read);
    }
    /* Element type with holes (MPI_DOUBLE_INT, ...): via packed bytes. */
    const size_t n = (size_t)(len / v->base_extent);
    char *tmp = (char *)malloc(n * v->base_size + 1);
    if (tmp == NULL) return -1;
    int rc;
    if (read) {
        rc = convert_packed(v, tmp, off / v->base_extent * v->base_size, n * v->base_size, 1);
        if (rc == 0) rc = convert_elements(v->base, n, mem, tmp, 0);
    } else {
        rc = convert_elements(v->base, n, mem, tmp, 1);
        if (rc == 0) rc = convert_packed(v, tmp, off / v->base_extent * v->base_size,
                                         n * v->base_size, 0);
    }
    free(tmp);
    return rc;
}

static int view_read(void *ctx, void *dst, uint64_t off, uint64_t len) {
    return view_access((const layout_view *)ctx, dst, off, len, 1);
}

static int view_write(void *ctx, const void *src, uint64_t off, uint64_t len) {
    return view_access((const layout_view *)ctx, (void *)src, off, len, 0);
}

/* True when `count` items of `d` at buf are exactly `bytes` consecutive bytes at buf. */
static bool layout_is_packed(ompi_datatype_t *d, size_t count) {
    ptrdiff_t lb, extent, true_lb, true_extent;
    ompi_datatype_get_extent(d, &lb, &extent);
    ompi_datatype_get_true_extent(d, &true_lb, &true_extent);
    return lb == 0 && true_lb == 0 && ompi_datatype_is_contiguous_memory_layout(d, count);
}

/* True when count items of dtype are the reduction's canonical layout, starting at buf. */
bool layout_is_canonical(ompi_datatype_t *dtype, size_t count, ompi_datatype_t *base,
                                size_t base_size, size_t base_extent) {
    return base ? (ompi_datatype_is_predefined(dtype) ||
                   (base_size == base_extent && layout_is_packed(dtype, count)))
                : layout_is_packed(dtype, count);
}

/*
 * Fills *ub for one host buffer of this rank (*v holds the convertor view when its layout is
 * not canonical), or, for canonical memory of another kind, a view through the kind's copies
 * (*kv). Non-canonical memory of another kind is staged by the caller first.
 */
static void make_userbuf(twohop_userbuf *ub, layout_view *v, kind_view *kv, int kind,
                         char *buf, ompi_datatype_t *dtype, size_t count, ompi_datatype_t *base,
                         size_t base_size, size_t base_extent) {
    memset(ub, 0, sizeof(*ub));
    if (layout_is_canonical(dtype, count, base, base_size, base_extent)) {
        if (kind == TWOHOP_KIND_HOST) {
            ub->direct = buf;
        } else {
            kv->kind = kind;
            kv->base = buf;
            if (kind == TWOHOP_KIND_CUDA) ub->device = buf;
            ub->ctx = kv;
            ub->read = kind_read;
            ub->write = kind_write;
        }
        return;
    }
    v->dtype = dtype;
    v->count = count;
    v->buf = buf;
    v->base = base;
    v->base_size = base_size;
    v->base_extent = base_extent;
    ub->ctx = v;
    ub->read = view_read;
    ub->write = view_write;
}


/*
 * The user's function works on items in the user's own layout: a rank whose layout is not
 * packed unpacks both operands into scratch laid out as its datatype, reduces there and
 * packs the result (at most 1 MiB of items at a time).
 */
static int user_reduce(void *ctx, const void *in, void *inout, size_t count) {
    user_op_ctx *u = (user_op_ctx *)ctx;
    if (u->packed) {
        ompi_op_reduce(u->op, (void *)in, inout, count, u->dtype);
        return 0;
    }
    size_t chunk = u->extent > 0 ? (size_t)(1 << 20) / (size_t)u->extent : 1;
    if (chunk == 0) chunk = 1;
    if (chunk > count) chunk = count;
    const size_t span = (size_t)u->true_extent + (chunk - 1) * (size_t)u->extent;
    char *mem = (char *)malloc(2 * span + 1);
    if (mem == NULL) return -1;
    int rc = 0;
    for (size_t done = 0; rc == 0 && done < count; done += chunk) {
        const size_t n = count - done < chunk ? count - done : chunk;
        layout_view a = {u->dtype, n, mem - u->true_lb, NULL, 0, 0};
        layout_view b = {u->dtype, n, mem + span - u->true_lb, NULL, 0, 0};
        const char *pin = (const char *)in + done * u->size;
        char *pio = (char *)inout + done * u->size;
        rc = convert_packed(&a, (void *)pin, 0, n * u->size, 0);
        if (rc == 0) rc = convert_packed(&b, pio, 0, n * u->size, 0);
        if (rc == 0) {
            ompi_op_reduce(u->op, a.buf, b.buf, n, u->dtype);
            rc = convert_packed(&b, pio, 0, n * u->size, 1);
        }
    }
    free(mem);
    return rc;
}

/*
 * The one predefined datatype the type signature of `t` consists of, or NULL when it has
 * several. Like Open MPI's ompi_datatype_get_single_predefined_type_from_args (it follows the
 * construction), except that blocks of a struct that add nothing to the signature (block length
 * 0, or a datatype of size 0) are ignored, as the signature ignores them: two ranks whose
 * datatypes have one signature are classified alike.
 */
static ompi_datatype_t *single_signature_type(ompi_datatype_t *t, int depth) {
    if (ompi_datatype_is_predefined(t)) return t;
    int32_t ci = 0, ca = 0, cd = 0, combiner = 0;
    if (depth > 32 ||
        ompi_datatype_get_args(t, 0, &ci, NULL, &ca, NULL, &cd, NULL, &combiner) != OMPI_SUCCESS ||
        cd < 1) {
        return ompi_datatype_get_single_predefined_type_from_args(t);
    }
    int32_t *iv = malloc(sizeof(int32_t) * (size_t)(ci > 0 ? ci : 1));
    ptrdiff_t *av = malloc(sizeof(ptrdiff_t) * (size_t)(ca > 0 ? ca : 1));
    ompi_datatype_t **dv = malloc(sizeof(*dv) * (size_t)cd);
    ompi_datatype_t *single = NULL;
    if (iv && av && dv &&
        ompi_datatype_get_args(t, 1, &ci, iv, &ca, av, &cd, dv, &combiner) == OMPI_SUCCESS) {
        bool ok = true;
        for (int32_t k = 0; k < cd && ok; ++k) {
            size_t sz = 0;
            ompi_datatype_type_size(dv[k], &sz);
            const bool empty = sz == 0 || (combiner == MPI_COMBINER_STRUCT && k + 1 < ci &&
                                           iv[1 + k] == 0);
            if (empty) continue;
            ompi_datatype_t *b = single_signature_type(dv[k], depth + 1);
            if (b == NULL || (single != NULL && b != single)) ok = false;
            else single = b;
        }
        if (!ok) single = NULL;
    } else {
        single = ompi_datatype_get_single_predefined_type_from_args(t);
    }
    free(iv);
    free(av);
    free(dv);
    return single;
}

/*
 * The predefined type the type signature of `count` items of dtype consists of (NULL when it
 * mixes several) and, in *n, how many of it the signature holds.
 */
ompi_datatype_t *signature_base(ompi_datatype_t *dtype, int count, uint64_t *n) {
    *n = 0;
    ompi_datatype_t *b = ompi_datatype_is_predefined(dtype) ? dtype : single_signature_type(dtype, 0);
    if (b == NULL || count <= 0) return b;
    size_t ts = 0, bs = 0;
    ompi_datatype_type_size(dtype, &ts);
    ompi_datatype_type_size(b, &bs);
    *n = bs ? (uint64_t)count * (ts / bs) : 0;
    return b;
}

/*
 * The half of route_call decided from the op and the type signature (twohop_adapter.h): the
 * facts coll/front/policy.h decides from, read through Open MPI's datatype and op objects;
 * then, for a served call, the canonical element (a->base, base_size, base_extent: the half
 * type itself for a half pair, the signature's predefined type for a predefined op, NULL for a
 * user op, whose canonical layout is the packed signature) and the user op's context.
 */
static call_route route_signature_uncached(int count, ompi_datatype_t *dtype, ompi_op_t *op,
                                           call_args *a, const char **why) {
    twohop_type_facts f;
    memset(&f, 0, sizeof(f));
    size_t size = 0;
    ompi_datatype_type_size(dtype, &size);
    f.type_size = size;
    f.half_dtype = f.op = f.base = TWOHOP_NO_KERNEL;
    ompi_datatype_t *base = NULL;
    /* The op and the signature are read only for a call that has one (a negative count is
     * erroneous, an empty call needs none): twohop_route_signature decides those first. */
    const bool nonempty = count > 0 && size > 0;
    twohop_dtype ht = TWOHOP_F32;
    twohop_op ho = TWOHOP_OP_SUM;
    if (nonempty && twohop_half_lookup(dtype, op, &ht, &ho)) {
        f.half_dtype = (int)ht;
        f.half_op = (int)ho;
    }
    if (nonempty) {
        f.op_predefined = ompi_op_is_intrinsic(op);
        f.op_commutes = ompi_op_is_commute(op);
        f.op = twohop_mpi_map_op(op);
    }
    if (nonempty && f.half_dtype < 0 && f.op >= 0) {
        base = ompi_datatype_is_predefined(dtype) ? dtype : single_signature_type(dtype, 0);
        f.base = base == NULL ? TWOHOP_BASE_MIXED : twohop_mpi_map_type(base);
        if (base != NULL) {
            ptrdiff_t blb, bext;
            size_t bsize;
            ompi_datatype_get_extent(base, &blb, &bext);
            ompi_datatype_type_size(base, &bsize);
            f.base_size = bsize;
            f.base_extent = (uint64_t)bext;
        }
    }
    uint64_t epi = 1;
    const call_route route = twohop_route_signature(count, &f, &a->red, &epi, why);
    a->base = NULL;
    a->base_size = a->base_extent = 0;
    a->elems_per_item = (size_t)epi;
    if (route != CALL_SERVE) return route;
    if (a->red.op == TWOHOP_OP_USER) {
        user_op_ctx *u = &a->uctx;
        u->op = op;
        u->dtype = dtype;
        u->size = size;
        ptrdiff_t lb;
        ompi_datatype_get_extent(dtype, &lb, &u->extent);
        ompi_datatype_get_true_extent(dtype, &u->true_lb, &u->true_extent);
        u->packed = false; /* set per call by prepare_buffers (depends on count) */
        a->red.user_fn = user_reduce;
        a->red.user_ctx = u;
    } else if (f.half_dtype >= 0) {
        a->base = dtype;
        a->base_size = a->base_extent = 2;
    } else {
        a->base = base;
        a->base_size = (size_t)f.base_size;
        a->base_extent = (size_t)f.base_extent;
    }
    return route;
}

/*
 * route_signature's answers for a predefined datatype with a predefined op and a positive
 * count, which depend on the pair alone (not on the count, the communicator or the rank): a
 * table filled on first use of each pair and never changed, read without a lock. Classifying a
 * call anew cost about 190 instructions, an eighth of a small blocking call (docs/perf.md).
 * Predefined datatypes and ops are objects of the MPI library that live until it is unloaded, so
 * their addresses never name a user's (freed and re-created) datatype or op; a pair registered
 * as half precision (mpi_handles.h) is asked of the registry first and never cached.
 */
#define SIG_SLOTS 256 /* a power of two; a full table caches no more pairs */
typedef struct {
    int ready; /* 1 once the entry is filled (release store), never cleared */
    ompi_datatype_t *dtype;
    ompi_op_t *op;
    call_route route;
    const char *why;
    twohop_reduction red;
    ompi_datatype_t *base;
    size_t base_size, base_extent, elems_per_item;
} sig_entry;
static sig_entry sig_cache[SIG_SLOTS];
static opal_mutex_t sig_lock = OPAL_MUTEX_STATIC_INIT;

static unsigned sig_slot(const ompi_datatype_t *dtype, const ompi_op_t *op) {
    /* Fibonacci hashing of both addresses (Knuth, TAOCP vol. 3, 6.4): the top 8 bits. */
    const uint64_t k = (uint64_t)(uintptr_t)dtype * 0x9E3779B97F4A7C15ull ^
                       (uint64_t)(uintptr_t)op * 0xC2B2AE3D27D4EB4Full;
    return (unsigned)(k >> 56);
}

/* The entry of (dtype, op), or NULL; with `insert` (sig_lock held) the free slot it would
 * take instead, or NULL when the table is full. */
static sig_entry *sig_probe(ompi_datatype_t *dtype, ompi_op_t *op, bool insert) {
    unsigned i = sig_slot(dtype, op);
    for (int n = 0; n < SIG_SLOTS; ++n, i = (i + 1) % SIG_SLOTS) {
        sig_entry *e = &sig_cache[i];
        if (!__atomic_load_n(&e->ready, __ATOMIC_ACQUIRE)) return insert ? e : NULL;
        if (e->dtype == dtype && e->op == op) return insert ? NULL : e;
    }
    return NULL;
}

call_route route_signature(int count, ompi_datatype_t *dtype, ompi_op_t *op, call_args *a,
                           const char **why) {
    twohop_dtype ht;
    twohop_op ho;
    const bool cacheable = count > 0 && ompi_datatype_is_predefined(dtype) &&
                           ompi_op_is_intrinsic(op) && !twohop_half_lookup(dtype, op, &ht, &ho);
    if (!cacheable) return route_signature_uncached(count, dtype, op, a, why);
    const sig_entry *hit = sig_probe(dtype, op, false);
    if (hit != NULL) {
        a->red = hit->red;
        a->base = hit->base;
        a->base_size = hit->base_size;
        a->base_extent = hit->base_extent;
        a->elems_per_item = hit->elems_per_item;
        *why = hit->why;
        return hit->route;
    }
    const call_route route = route_signature_uncached(count, dtype, op, a, why);
    opal_mutex_lock(&sig_lock);
    sig_entry *e = sig_probe(dtype, op, true);
    if (e != NULL) {
        e->dtype = dtype;
        e->op = op;
        e->route = route;
        e->why = *why;
        e->red = a->red;
        e->base = a->base;
        e->base_size = a->base_size;
        e->base_extent = a->base_extent;
        e->elems_per_item = a->elems_per_item;
        __atomic_store_n(&e->ready, 1, __ATOMIC_RELEASE);
    }
    opal_mutex_unlock(&sig_lock);
    return route;
}

/*
 * This rank's access to its buffers for a served call (layouts and memory kinds may differ
 * between ranks): fills a->in/out and a->n. Memory of another kind in a non-canonical layout
 * is staged whole through host memory (a->sin/sout, copied in here; the caller copies sout
 * back after the call). Returns a twohop_status.
 */
int prepare_buffers(call_args *a, const void *sbuf, void *rbuf, int count,
                    ompi_datatype_t *dtype) {
    const bool in_place = sbuf == MPI_IN_PLACE;
    const size_t cnt = (size_t)count;
    char *ibuf = (char *)(in_place ? rbuf : sbuf), *obuf = (char *)rbuf;
    int ki = a->kin, ko = a->kout;
    int rc = TWOHOP_OK;
    memset(&a->sin, 0, sizeof(a->sin));
    memset(&a->sout, 0, sizeof(a->sout));
    a->n = (uint64_t)count * a->elems_per_item;
    const bool canonical =
        layout_is_canonical(dtype, cnt, a->base, a->base_size, a->base_extent);
    if (ko != TWOHOP_KIND_HOST && !canonical) {
        rc = stage_in(&a->sout, ko, obuf, dtype, cnt);
        obuf = staged_buf(&a->sout);
        if (in_place) ibuf = obuf, ki = TWOHOP_KIND_HOST;
        ko = TWOHOP_KIND_HOST;
    }
    if (rc == TWOHOP_OK && ki != TWOHOP_KIND_HOST && !canonical) {
        rc = stage_in(&a->sin, ki, ibuf, dtype, cnt);
        ibuf = staged_buf(&a->sin);
        ki = TWOHOP_KIND_HOST;
    }
    make_userbuf(&a->out, &a->vout, &a->kvout, ko, obuf, dtype, cnt, a->base, a->base_size,
                 a->base_extent);
    make_userbuf(&a->in, &a->vin, &a->kvin, ki, ibuf, dtype, cnt, a->base, a->base_size,
                 a->base_extent);
    if (a->red.op == TWOHOP_OP_USER) a->uctx.packed = layout_is_packed(dtype, cnt);
    return rc;
}

/* Copies a staged output back (after a successful call) and frees the staging copies. */
int finish_buffers(call_args *a, int rc) {
    if (rc == TWOHOP_OK && a->sout.host) rc = stage_out(&a->sout, a->kout);
    free(a->sin.host);
    free(a->sout.host);
    a->sin.host = a->sout.host = NULL;
    return rc;
}

/*
 * Allreduce on a single-rank communicator: the result is the input (any op), copied in the
 * datatype's layout (holes untouched) as coll/self does -- through host copies when a buffer
 * is memory the host must not touch, so a device pointer never reaches a host memcpy.
 * Returns an MPI error code.
 */
int self_copy(const void *sbuf, void *rbuf, int count, ompi_datatype_t *dtype) {
    if (sbuf == MPI_IN_PLACE || count <= 0) return MPI_SUCCESS;
    const int kin = twohop_memory_kind(sbuf), kout = twohop_memory_kind(rbuf);
    if (kin == TWOHOP_KIND_HOST && kout == TWOHOP_KIND_HOST) {
        return ompi_datatype_copy_content_same_ddt(dtype, count, (char *)rbuf, (char *)sbuf);
    }
    staging sin = {0}, sout = {0};
    int rc = stage_in(&sout, kout, (const char *)rbuf, dtype, (size_t)count);
    if (rc == TWOHOP_OK) rc = stage_in(&sin, kin, (const char *)sbuf, dtype, (size_t)count);
    if (rc == TWOHOP_OK) {
        rc = ompi_datatype_copy_content_same_ddt(dtype, count, staged_buf(&sout),
                                                 staged_buf(&sin)) == OMPI_SUCCESS
                 ? TWOHOP_OK : TWOHOP_ERR_HOST;
    }
    if (rc == TWOHOP_OK) rc = stage_out(&sout, kout);
    free(sin.host);
    free(sout.host);
    if (rc != TWOHOP_OK) {
        opal_output(0, "coll:twohop: allreduce on a single-rank communicator: copying a device "
                    "buffer through host memory failed");
        return MPI_ERR_OTHER;
    }
    return MPI_SUCCESS;
}

