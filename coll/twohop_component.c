/*
 * The Open MPI adapter of twohop: the only file that includes Open MPI internal headers.
 * It owns the component structure, the MCA parameters (from params.def) and performance
 * variables, communicator query/enable, the fallback decision, and the translation of MPI
 * datatypes and ops into the core's twohop_reduction. The C++ core sits behind twohop_core.h.
 *
 * Selection: priority coll_twohop_priority (default 45, above tuned 30 and han 0); twohop
 * provides MPI_Allreduce, and MPI_Iallreduce and persistent allreduce where the module below
 * provides them (twohop_requests.c). At enable time the previously selected allreduce (function and
 * module) is saved and retained; every call twohop does not serve goes there, with the reason
 * at coll_twohop_verbose >= 1. Every decision depends only on what MPI requires to be equal on
 * all ranks -- the op and the type signature of the message (its predefined element types
 * and their number) -- or on a result the ranks agreed at set-up. Datatype layouts (extent,
 * lower bound, holes) may differ between ranks: a rank whose layout is not the reduction's
 * canonical one reaches its buffers through Open MPI's convertor (twohop_userbuf), never by a
 * decision of its own.
 */
#include "ompi_config.h"

#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpi.h"
#include "ompi/communicator/communicator.h"
#include "ompi/datatype/ompi_datatype.h"
#include "ompi/errhandler/errhandler.h"
#include "ompi/mca/coll/base/base.h"
#include "ompi/mca/coll/base/coll_tags.h"
#include "ompi/mca/coll/coll.h"
#include "ompi/mca/pml/pml.h"
#include "ompi/op/op.h"
#include "ompi/proc/proc.h"
#include "ompi/request/request.h"
#include "opal/datatype/opal_convertor.h"
#include "opal/mca/base/mca_base_pvar.h"
#include "opal/runtime/opal_progress.h"
#include "opal/util/output.h"
#include "opal/util/proc.h"

#include "rc_settings.h"
#include "twohop_adapter.h"
#include "twohop_core.h"

/*
 * Open MPI 4.1 and 5.0 (docs/stacks/ompi5.md). The one difference the adapter selects here:
 * the coll framework's version (5.0's 2.4.0 module drops ft_event and adds coll_agree/iagree;
 * twohop sets none of them). Everything else it uses is the same in both -- the allreduce
 * signature, the coll_allreduce/coll_allreduce_module pair, coll_base_comm_select (module_enable
 * runs before the module's functions are copied in, so c_coll still holds the previous
 * allreduce), MCA variables and pvars, datatypes, convertor, PML and requests -- except
 * ompi_comm_get_cid(), gone in 5.0 and no longer used (comm_label()).
 * Building against 5.0 needs <pmix.h> and headers packages lack (meson.build).
 */
#if OMPI_MAJOR_VERSION >= 5
#define TWOHOP_COLL_VERSION MCA_COLL_BASE_VERSION_2_4_0
#else
#define TWOHOP_COLL_VERSION MCA_COLL_BASE_VERSION_2_0_0
#endif

_Static_assert(sizeof(MPI_Fint) == sizeof(int), "fint_2_int shim assumes 4-byte Fortran INTEGER");

/*
 * Open MPI 4.1 may finish a communicator's activation -- coll selection, so twohop_comm_query
 * and module_enable -- inside a request callback run by whichever thread drives progress, and
 * hands the communicator to the creating thread through its own (uninstrumented) request
 * completion. Under ThreadSanitizer that happens-before edge is made explicit on the module.
 */
#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#define TWOHOP_HANDOFF_RELEASE(p) __tsan_release(p)
#define TWOHOP_HANDOFF_ACQUIRE(p) __tsan_acquire(p)
#else
#define TWOHOP_HANDOFF_RELEASE(p) ((void)(p))
#define TWOHOP_HANDOFF_ACQUIRE(p) ((void)(p))
#endif

/* ---------------------------------------------------------------- state ---- */

struct twohop_params twohop_adapter_params;
int twohop_adapter_output = -1;
unsigned long long twohop_served_calls;   /* pvar coll_twohop_allreduce_calls */
unsigned long long twohop_fallback_calls; /* pvar coll_twohop_fallback_calls */
static struct twohop_rc_report *rc_report;  /* port counters at MPI_Init (rc_report=1) */
/* MPI_THREAD_MULTIPLE was granted, as told at init_query. Recorded then because Open MPI 4.1's
 * MPI_T_init_thread() later overwrites the process's thread level (ompi_mpi_thread_provided,
 * MPI_Query_thread) with the level asked for MPI_T. */
static bool mpi_threads;


static void module_construct(twohop_module *m) {
    m->prev_allreduce = NULL;
    m->prev_allreduce_module = NULL;
    m->prev_iallreduce = NULL;
    m->prev_iallreduce_module = NULL;
    m->prev_allreduce_init = NULL;
    m->prev_allreduce_init_module = NULL;
    m->comm = NULL;
    m->core = NULL;
    m->setup_state = 0;
    m->setup_failure[0] = '\0';
    m->last_reason = NULL;
    m->error_reported = 0;
    m->setup_fiber = NULL;
    m->deferred_state = 0;
    m->pending_head = m->pending_tail = NULL;
    m->next_deferred = NULL;
    OBJ_CONSTRUCT(&m->setup_lock, opal_mutex_t);
}

static void module_destruct(twohop_module *m) {
    twohop_deferred_setup_forget(m);
    OBJ_DESTRUCT(&m->setup_lock);
    twohop_comm_free(m->core);
    m->core = NULL;
    if (m->prev_allreduce_module) {
        OBJ_RELEASE(m->prev_allreduce_module);
        m->prev_allreduce_module = NULL;
    }
    if (m->prev_iallreduce_module) {
        OBJ_RELEASE(m->prev_iallreduce_module);
        m->prev_iallreduce_module = NULL;
    }
    if (m->prev_allreduce_init_module) {
        OBJ_RELEASE(m->prev_allreduce_init_module);
        m->prev_allreduce_init_module = NULL;
    }
}

static OBJ_CLASS_INSTANCE(twohop_module, mca_coll_base_module_t, module_construct,
                          module_destruct);

/* ------------------------------------------------------------ host services ---- */

static void host_log(int level, const char *msg) {
    if (level <= 0) {
        opal_output(0, "coll:twohop: %s", msg);
    } else {
        opal_output_verbose(level, twohop_adapter_output, "coll:twohop: %s", msg);
    }
}

/*
 * twohop's private point-to-point tag for set-up traffic. Negative like every coll tag, so no
 * user message can match it, and distinct from the tags of Open MPI's own collectives
 * (coll_tags.h). Its magnitude is below 2^23 so that it survives pml/ucx's 24-bit tag field
 * unchanged; libnbc would reach it only after about four million non-blocking collectives
 * on one communicator.
 */
#define TWOHOP_SETUP_TAG (-(1 << 22) - 77)

typedef struct p2p_req {
    ompi_request_t *req;
    int is_recv;
    size_t bytes;
} p2p_req;

static int host_post(void *ctx, void *buf, size_t bytes, int peer, int is_recv, void **out) {
    twohop_module *m = (twohop_module *)ctx;
    if (bytes > INT_MAX) return TWOHOP_ERR_HOST;
    p2p_req *r = (p2p_req *)malloc(sizeof(*r));
    if (r == NULL) return TWOHOP_ERR_NO_MEMORY;
    r->is_recv = is_recv;
    r->bytes = bytes;
    int rc = is_recv ? MCA_PML_CALL(irecv(buf, (int)bytes, MPI_BYTE, peer, TWOHOP_SETUP_TAG,
                                          m->comm, &r->req))
                     : MCA_PML_CALL(isend(buf, (int)bytes, MPI_BYTE, peer, TWOHOP_SETUP_TAG,
                                          MCA_PML_BASE_SEND_STANDARD, m->comm, &r->req));
    if (rc != OMPI_SUCCESS) {
        free(r);
        return TWOHOP_ERR_HOST;
    }
    *out = r;
    return TWOHOP_OK;
}

static int host_isend(void *ctx, const void *buf, size_t bytes, int peer, void **req) {
    return host_post(ctx, (void *)buf, bytes, peer, 0, req);
}

static int host_irecv(void *ctx, void *buf, size_t bytes, int peer, void **req) {
    return host_post(ctx, buf, bytes, peer, 1, req);
}

static int host_test(void *ctx, void *req, int *done) {
    (void)ctx;
    p2p_req *r = (p2p_req *)req;
    ompi_status_public_t st;
    int flag = 0;
    *done = 0;
    int rc = ompi_request_test(&r->req, &flag, &st);
    if (rc != OMPI_SUCCESS && !flag && rc != MPI_ERR_TRUNCATE) return TWOHOP_ERR_HOST;
    if (rc == MPI_ERR_TRUNCATE) flag = 1;
    if (!flag) return TWOHOP_OK;
    *done = 1;
    int status = TWOHOP_OK;
    /* (Single-completion tests do not set MPI_ERROR: the return code carries errors.) */
    if (rc == MPI_ERR_TRUNCATE || (r->is_recv && st._ucount != r->bytes)) {
        status = TWOHOP_ERR_MISMATCH;
    } else if (rc != OMPI_SUCCESS) {
        status = TWOHOP_ERR_HOST;
    }
    free(r);
    return status;
}

static void host_cancel(void *ctx, void *req) {
    (void)ctx;
    p2p_req *r = (p2p_req *)req;
    if (r->is_recv) {
        ompi_request_cancel(r->req);
        ompi_request_wait(&r->req, MPI_STATUS_IGNORE);
    } else {
        ompi_request_free(&r->req); /* released when it completes */
    }
    free(r);
}

/* Open MPI's own allreduce implementations talk with these tags (tuned, basic = reduce+bcast). */
static int host_foreign_pending(void *ctx, int peer) {
    static const int tags[] = {MCA_COLL_BASE_TAG_ALLREDUCE, MCA_COLL_BASE_TAG_REDUCE,
                               MCA_COLL_BASE_TAG_BCAST};
    twohop_module *m = (twohop_module *)ctx;
    for (size_t i = 0; i < sizeof(tags) / sizeof(tags[0]); ++i) {
        int flag = 0;
        if (MCA_PML_CALL(iprobe(peer, tags[i], m->comm, &flag, MPI_STATUS_IGNORE)) ==
                OMPI_SUCCESS && flag) {
            return 1;
        }
    }
    return 0;
}

/*
 * Open MPI's progress, for the core's waits. Below MPI_THREAD_MULTIPLE only the thread that
 * initialised MPI may call into Open MPI: a call from any other thread (the proxy thread must
 * only ever progress UCX and shared memory) is refused and counted (MPI_T
 * coll_twohop_foreign_thread_progress, which the tests require to stay 0).
 */
static pthread_t mpi_init_thread;
static unsigned long long foreign_progress_calls;
static void host_progress(void) {
    if (!mpi_threads && !pthread_equal(pthread_self(), mpi_init_thread)) {
        __atomic_add_fetch(&foreign_progress_calls, 1, __ATOMIC_RELAXED);
        return;
    }
    opal_progress();
}

/* ------------------------------------------------------- datatype mapping ---- */

/* Calls served with twohop's half-precision kernels (pvar coll_twohop_half_calls). */
static unsigned long long twohop_half_calls;

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
static bool layout_is_canonical(ompi_datatype_t *dtype, size_t count, ompi_datatype_t *base,
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

/* ------------------------------------------------------------- allreduce ---- */

static uint64_t fnv1a(const char *s) {
    uint64_t h = 1469598103934665603ULL; /* FNV-1a 64-bit offset basis and prime */
    for (; s && *s; ++s) h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return h;
}

/*
 * "comm NAME", with twohop's communicator id once set up (twohop_comm_id: agreed by the ranks,
 * so the same in every rank's messages). Open MPI's own id is not used: 4.1's
 * ompi_comm_get_cid() is gone in 5.0, whose ompi_comm_get_local_cid() differs between ranks.
 */
static const char *comm_label(const twohop_module *m, char *buf, size_t len) {
    if (m->core) {
        snprintf(buf, len, "comm %s (twohop id %u)", m->comm->c_name,
                 (unsigned)twohop_comm_id(m->core));
    } else {
        snprintf(buf, len, "comm %s", m->comm->c_name);
    }
    return buf;
}

/* Resource-caused fallbacks are printed once per process at the default verbosity. */
static int resource_warned;

int twohop_module_setup(twohop_module *m, int *state) {
    twohop_comm_args a;
    memset(&a, 0, sizeof(a));
    a.rank = ompi_comm_rank(m->comm);
    a.size = ompi_comm_size(m->comm);
    a.thread_multiple = mpi_threads;
    a.host_key = fnv1a(opal_process_info.nodename);
    a.virtual_nodes = twohop_adapter_params.virtual_nodes;
    a.world_rank = ompi_comm_rank(&ompi_mpi_comm_world.comm);
    a.world_size = ompi_comm_size(&ompi_mpi_comm_world.comm);
    const opal_process_name_t *me = &ompi_proc_local()->super.proc_name;
    a.proc_key = ((uint64_t)me->jobid << 32) | me->vpid;
    a.params = &twohop_adapter_params;
    a.host.ctx = m;
    a.host.isend = host_isend;
    a.host.irecv = host_irecv;
    a.host.test = host_test;
    a.host.cancel = host_cancel;
    a.host.foreign_pending = host_foreign_pending;
    a.host.progress = host_progress;
    a.host.log = host_log;
    int resource = 0;
    int rc = twohop_comm_setup(&a, &m->core, &resource, m->setup_failure,
                               sizeof(m->setup_failure));
    if (rc == TWOHOP_OK) {
        *state = 1;
    } else if (rc == TWOHOP_ERR_MISMATCH || rc == TWOHOP_ERR_TIMEOUT || rc == TWOHOP_ERR_HOST) {
        *state = -2;
        char label[MPI_MAX_OBJECT_NAME + 32];
        opal_output(0, "coll:twohop: %s: set-up failed: %s",
                    comm_label(m, label, sizeof(label)), m->setup_failure);
    } else {
        *state = -1;
        if (resource && !__atomic_exchange_n(&resource_warned, 1, __ATOMIC_RELAXED)) {
            opal_output(0, "coll:twohop: comm %s: twohop does not serve this communicator: %s "
                        "(its allreduce falls back to the previous component; further notices "
                        "at coll_twohop_verbose 1)", m->comm->c_name, m->setup_failure);
        } else {
            char label[MPI_MAX_OBJECT_NAME + 32];
            opal_output_verbose(1, twohop_adapter_output, "coll:twohop: %s: set-up failed: %s",
                                comm_label(m, label, sizeof(label)), m->setup_failure);
        }
    }
    return rc;
}

int to_mpi_error(int rc) {
    switch (rc) {
    case TWOHOP_OK: return MPI_SUCCESS;
    case TWOHOP_ERR_NO_MEMORY: return OMPI_ERR_OUT_OF_RESOURCE;
    case TWOHOP_ERR_BAD_PARAM: return OMPI_ERR_BAD_PARAM;
    case TWOHOP_ERR_MISMATCH: return MPI_ERR_TRUNCATE;
    default: return OMPI_ERROR;
    }
}

/* Says why a call falls back (at verbose 1, once per change of reason) and counts it. */
void log_fallback(twohop_module *m, const char *why, bool staged) {
    if (why != m->last_reason) {
        char label[MPI_MAX_OBJECT_NAME + 32];
        opal_output_verbose(1, twohop_adapter_output, "coll:twohop: %s: allreduce falls back%s: %s",
                            comm_label(m, label, sizeof(label)),
                            staged ? " (buffers staged through host memory)" : "", why);
        m->last_reason = why;
    }
    __atomic_add_fetch(&twohop_fallback_calls, 1, __ATOMIC_RELAXED);
}

/*
 * Hands the call to the previously selected module. Buffers the host must not touch (device
 * memory, the poisoned testing kind) are staged through host copies first: a device pointer
 * never reaches a host-only module. Kinds only decide how this rank stages, never whether it
 * falls back.
 */
static int fallback(twohop_module *m, const char *why, const void *sbuf, void *rbuf, int count,
                    ompi_datatype_t *dtype, ompi_op_t *op, int kin, int kout) {
    const bool staged = kin != TWOHOP_KIND_HOST || kout != TWOHOP_KIND_HOST;
    log_fallback(m, why, staged);
    if (!staged || count <= 0) {
        return m->prev_allreduce(sbuf, rbuf, count, dtype, op, m->comm, m->prev_allreduce_module);
    }
    staging sin = {0}, sout = {0};
    const bool in_place = sbuf == MPI_IN_PLACE;
    int rc = stage_in(&sout, kout, (const char *)rbuf, dtype, (size_t)count);
    if (rc == TWOHOP_OK && !in_place) rc = stage_in(&sin, kin, (const char *)sbuf, dtype, (size_t)count);
    int mpi_rc = OMPI_ERR_OUT_OF_RESOURCE;
    if (rc == TWOHOP_OK) {
        mpi_rc = m->prev_allreduce(in_place ? MPI_IN_PLACE : staged_buf(&sin), staged_buf(&sout),
                                   count, dtype, op, m->comm, m->prev_allreduce_module);
        if (mpi_rc == MPI_SUCCESS && stage_out(&sout, kout) != TWOHOP_OK) mpi_rc = OMPI_ERROR;
    } else {
        opal_output(0, "coll:twohop: comm %s: staging a device buffer through host memory "
                    "failed", m->comm->c_name);
    }
    free(sin.host);
    free(sout.host);
    return mpi_rc;
}

/*
 * A stream-ordered call (twohop_allreduce_enqueue) about to take a blocking path: waits for
 * the application's stream first, so the inputs are complete, and turns the call into a plain
 * blocking one. False when the stream reported an error.
 */
static bool join_stream(bool *enqueue, void *stream) {
    if (!*enqueue) return true;
    *enqueue = false;
    return twohop_stream_sync(stream) == 0;
}

/*
 * The half of route_call decided from the op and the type signature (twohop_adapter.h): the
 * facts coll/front/policy.h decides from, read through Open MPI's datatype and op objects;
 * then, for a served call, the canonical element (a->base, base_size, base_extent: the half
 * type itself for a half pair, the signature's predefined type for a predefined op, NULL for a
 * user op, whose canonical layout is the packed signature) and the user op's context.
 */
call_route route_signature(int count, ompi_datatype_t *dtype, ompi_op_t *op, call_args *a,
                           const char **why) {
    twohop_type_facts f;
    memset(&f, 0, sizeof(f));
    size_t size = 0;
    ompi_datatype_type_size(dtype, &size);
    f.type_size = size;
    twohop_dtype ht = TWOHOP_F32;
    twohop_op ho = TWOHOP_OP_SUM;
    f.half_dtype = twohop_half_lookup(dtype, op, &ht, &ho) ? (int)ht : TWOHOP_NO_KERNEL;
    f.half_op = (int)ho;
    f.op_predefined = ompi_op_is_intrinsic(op);
    f.op_commutes = ompi_op_is_commute(op);
    f.op = twohop_mpi_map_op(op);
    ompi_datatype_t *base = NULL;
    f.base = TWOHOP_NO_KERNEL;
    if (count > 0 && size > 0 && f.half_dtype < 0 && f.op >= 0) {
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

/* The half of route_call decided from the set-up's agreed outcome `state`. */
call_route route_setup(twohop_module *m, int count, const call_args *a, const char **why,
                       int state) {
    return twohop_route_setup(
        state, state == 1 ? twohop_comm_cannot_serve(m->core, (uint64_t)count, a->red.item_bytes)
                          : NULL,
        why);
}

/*
 * How a call is served, decided from the op, the type signature and the agreed set-up only
 * (identical on every rank); fills a->red and the canonical element description for
 * CALL_SERVE and sets *why for CALL_FALLBACK. Runs the communicator's set-up on first use,
 * or with `defer` leaves it to a fiber (CALL_DEFER; twohop_requests.c).
 */
call_route route_call(twohop_module *m, int count, ompi_datatype_t *dtype, ompi_op_t *op,
                      call_args *a, const char **why, bool defer) {
    const call_route r = route_signature(count, dtype, op, a, why);
    if (r != CALL_SERVE) return r;
    if (defer && (*why = twohop_deferrable_refusal(a->red.item_bytes)) != NULL) {
        return CALL_FALLBACK; /* the same route before and after the set-up ends (policy.h) */
    }
    int state = __atomic_load_n(&m->setup_state, __ATOMIC_ACQUIRE);
    if (state == 0 || state == 2) {
        if (defer) return CALL_DEFER;
        if (state == 2) twohop_deferred_setup_finish(m); /* and the calls that waited start */
        if (m->setup_state == 0) (void)twohop_module_setup(m, &m->setup_state);
        state = m->setup_state;
    }
    return route_setup(m, count, a, why, state);
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

/* Logs a served call at verbose 3 (`form`: "allreduce", "iallreduce", ...). */
void log_call(twohop_module *m, const char *form, const call_args *a, bool in_place) {
    if (OPAL_LIKELY(twohop_adapter_params.verbose < 3)) return;
    opal_output_verbose(3, twohop_adapter_output,
                        "coll:twohop: comm %s: %s of %llu x %zu bytes, %s %s%s%s%s",
                        m->comm->c_name, form, (unsigned long long)a->n, a->red.item_bytes,
                        a->red.op == TWOHOP_OP_USER ? "user type" : twohop_dtype_name(a->red.dtype),
                        twohop_op_name(a->red.op), in_place ? ", in place" : "",
                        a->in.direct && a->out.direct ? "" : ", converted layout",
                        a->kin != TWOHOP_KIND_HOST || a->kout != TWOHOP_KIND_HOST
                            ? ", device memory" : "");
}

/* Reports a served call's failure at the default verbosity, once per communicator. */
void report_failure(twohop_module *m, const char *why) {
    if (__atomic_exchange_n(&m->error_reported, 1, __ATOMIC_RELAXED)) return;
    char label[MPI_MAX_OBJECT_NAME + 32];
    opal_output(0, "coll:twohop: %s: allreduce failed: %s", comm_label(m, label, sizeof(label)),
                why);
}

/*
 * MPI_Allreduce through twohop (enqueue false) or its stream-ordered form (enqueue true,
 * `stream` the application's CUstream): every path that falls back, stages or runs on the
 * host first joins the stream (join_stream), so only the node's GPU path is asynchronous.
 */
static int allreduce_impl(const void *sbuf, void *rbuf, int count, ompi_datatype_t *dtype,
                          ompi_op_t *op, twohop_module *m, bool enqueue, void *stream) {
    call_args a;
    const bool in_place = sbuf == MPI_IN_PLACE;
    /* How this rank reaches its buffers: never part of a decision. */
    a.kout = count > 0 ? twohop_memory_kind(rbuf) : TWOHOP_KIND_HOST;
    a.kin = in_place || count <= 0 ? a.kout : twohop_memory_kind(sbuf);
    const char *why;
    const call_route route = route_call(m, count, dtype, op, &a, &why, false);
    if (route == CALL_EMPTY) return MPI_SUCCESS;
    if (route == CALL_BROKEN) return MPI_ERR_OTHER;
    /* A stream being captured into a CUDA graph: refused before any staging or wait on the
     * stream (either would invalidate the capture). A served call fails on every rank
     * (twohop_comm_refuse_capture); a call twohop does not serve fails here alone. */
    if (enqueue && twohop_stream_capturing(stream)) {
        if (route == CALL_SERVE) {
            char cwhy[256];
            (void)twohop_comm_refuse_capture(m->core, cwhy, sizeof(cwhy));
            report_failure(m, cwhy);
        } else {
            /* Rank-invariant route, but whether a rank captures is not, and ranks may mix
             * this form with MPI_Allreduce: no extra collective can tell the others. */
            opal_output(0, "coll:twohop: comm %s: twohop_allreduce_enqueue on a stream being "
                        "captured into a CUDA graph is refused (this call is not served by "
                        "twohop: %s; the other ranks are not told)", m->comm->c_name, why);
        }
        return MPI_ERR_OTHER;
    }
    /* Only device buffers of the canonical layout can stay on the stream. */
    if (enqueue &&
        !twohop_stays_on_stream(route, a.kin, a.kout,
                                route == CALL_SERVE &&
                                    layout_is_canonical(dtype, (size_t)count, a.base,
                                                        a.base_size, a.base_extent))) {
        if (!join_stream(&enqueue, stream)) {
            opal_output(0, "coll:twohop: comm %s: twohop_allreduce_enqueue: waiting for the "
                        "application's CUDA stream failed (the stream or its device is in an "
                        "error state)", m->comm->c_name);
            return MPI_ERR_OTHER;
        }
    }
    if (route == CALL_FALLBACK) {
        return fallback(m, why, sbuf, rbuf, count, dtype, op, a.kin, a.kout);
    }
    int rc = prepare_buffers(&a, sbuf, rbuf, count, dtype);
    log_call(m, enqueue ? "stream-ordered allreduce" : "allreduce", &a, in_place);
    char fail_why[256] = "";
    if (rc == TWOHOP_OK && enqueue) { /* stays on the stream, or completes blocking */
        int enqueued = 0;
        rc = twohop_comm_allreduce_enqueue(m->core, &a.in, &a.out, a.n, &a.red, stream,
                                           &enqueued, fail_why, sizeof(fail_why));
    } else if (rc == TWOHOP_OK) {
        rc = twohop_comm_allreduce(m->core, &a.in, &a.out, a.n, &a.red, fail_why,
                                   sizeof(fail_why));
    } else {
        snprintf(fail_why, sizeof(fail_why), "staging a device buffer through host memory failed");
        twohop_comm_abort(m->core, rc, fail_why); /* the others must not wait for this rank */
    }
    rc = finish_buffers(&a, rc);
    __atomic_add_fetch(&twohop_served_calls, 1, __ATOMIC_RELAXED);
    twohop_count_half(&a.red);
    if (rc != TWOHOP_OK) report_failure(m, fail_why[0] ? fail_why : "staging a device buffer back failed");
    return to_mpi_error(rc);
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

static int twohop_allreduce_self(const void *sbuf, void *rbuf, int count,
                                 ompi_datatype_t *dtype, ompi_op_t *op,
                                 ompi_communicator_t *comm, mca_coll_base_module_t *module) {
    (void)op;
    (void)comm;
    (void)module;
    return self_copy(sbuf, rbuf, count, dtype);
}

static int twohop_allreduce(const void *sbuf, void *rbuf, int count, ompi_datatype_t *dtype,
                            ompi_op_t *op, ompi_communicator_t *comm,
                            mca_coll_base_module_t *module) {
    twohop_module *m = (twohop_module *)module;
    TWOHOP_HANDOFF_ACQUIRE(m);
    (void)comm;
    return allreduce_impl(sbuf, rbuf, count, dtype, op, m, false, NULL);
}

/*
 * The stream-ordered allreduce behind include/twohop.h's twohop_allreduce_enqueue (found there
 * with dlsym: Open MPI loads components RTLD_GLOBAL). MPI_Allreduce's argument checks and
 * error handler; calls are matched in program order per communicator, like MPI_Allreduce.
 * When twohop does not serve the communicator, waits for the stream and calls MPI_Allreduce.
 */
__attribute__((visibility("default"))) int
mca_coll_twohop_allreduce_enqueue(const void *sbuf, void *rbuf, int count, MPI_Datatype dtype,
                                  MPI_Op op, MPI_Comm comm, void *stream) {
    static const char fn[] = "twohop_allreduce_enqueue";
    if (ompi_comm_invalid(comm)) {
        return OMPI_ERRHANDLER_INVOKE(&ompi_mpi_comm_world.comm, MPI_ERR_COMM, fn);
    }
    int err = MPI_SUCCESS;
    if (count < 0) {
        err = MPI_ERR_COUNT;
    } else if (dtype == NULL || dtype == MPI_DATATYPE_NULL || !opal_datatype_is_committed(&dtype->super)) {
        err = MPI_ERR_TYPE;
    } else if (op == NULL || op == MPI_OP_NULL) {
        err = MPI_ERR_OP;
    } else if (rbuf == MPI_IN_PLACE || (sbuf == rbuf && count > 0)) {
        err = MPI_ERR_BUFFER; /* aliased buffers must be passed as MPI_IN_PLACE */
    }
    if (err != MPI_SUCCESS) return OMPI_ERRHANDLER_INVOKE(comm, err, fn);
    if (comm->c_coll->coll_allreduce != twohop_allreduce) {
        /* Waiting would end a capture: an empty call reads nothing (no wait), any other is
         * refused on this rank alone (twohop cannot tell the others: see twohop.h). */
        const bool capturing = twohop_stream_capturing(stream) != 0;
        if (capturing && count > 0) {
            opal_output(0, "coll:twohop: comm %s: twohop_allreduce_enqueue on a stream being "
                        "captured into a CUDA graph is refused (twohop does not serve this "
                        "communicator)", comm->c_name);
            return OMPI_ERRHANDLER_INVOKE(comm, MPI_ERR_OTHER, fn);
        }
        if (!capturing && twohop_stream_sync(stream) != 0) {
            return OMPI_ERRHANDLER_INVOKE(comm, MPI_ERR_OTHER, fn);
        }
        return MPI_Allreduce(sbuf, rbuf, count, dtype, op, comm);
    }
    twohop_module *m = (twohop_module *)comm->c_coll->coll_allreduce_module;
    TWOHOP_HANDOFF_ACQUIRE(m);
    err = allreduce_impl(sbuf, rbuf, count, dtype, op, m, true, stream);
    return err == MPI_SUCCESS ? err : OMPI_ERRHANDLER_INVOKE(comm, err, fn);
}

/* -------------------------------------------------------- module, query ---- */

static int twohop_module_enable(mca_coll_base_module_t *module, ompi_communicator_t *comm) {
    twohop_module *m = (twohop_module *)module;
    m->comm = comm;
    m->prev_allreduce = comm->c_coll->coll_allreduce;
    m->prev_allreduce_module = comm->c_coll->coll_allreduce_module;
    if (m->prev_allreduce == NULL || m->prev_allreduce_module == NULL) {
        opal_output_verbose(1, twohop_adapter_output,
                            "coll:twohop: comm %s: no allreduce selected below twohop to fall "
                            "back to; twohop disabled on it", comm->c_name);
        return OMPI_ERROR;
    }
    OBJ_RETAIN(m->prev_allreduce_module);
    /* Non-blocking and persistent forms only where the module below provides them too (the
     * calls twohop does not serve go there); the function table is copied after enable. */
    m->prev_iallreduce = comm->c_coll->coll_iallreduce;
    m->prev_iallreduce_module = comm->c_coll->coll_iallreduce_module;
    if (m->prev_iallreduce && m->prev_iallreduce_module) {
        OBJ_RETAIN(m->prev_iallreduce_module);
    } else {
        m->prev_iallreduce = NULL;
        m->prev_iallreduce_module = NULL;
        m->super.coll_iallreduce = NULL;
    }
    m->prev_allreduce_init = comm->c_coll->coll_allreduce_init;
    m->prev_allreduce_init_module = comm->c_coll->coll_allreduce_init_module;
    if (m->prev_allreduce_init && m->prev_allreduce_init_module) {
        OBJ_RETAIN(m->prev_allreduce_init_module);
    } else {
        m->prev_allreduce_init = NULL;
        m->prev_allreduce_init_module = NULL;
        m->super.coll_allreduce_init = NULL;
    }
    TWOHOP_HANDOFF_RELEASE(m);
    return OMPI_SUCCESS;
}

/* twohop's priority on single-rank communicators: above coll/self's default 75. */
enum { kSelfPriority = 90 };

static mca_coll_base_module_t *twohop_comm_query(ompi_communicator_t *comm, int *priority) {
    *priority = twohop_adapter_params.priority;
    if (twohop_adapter_params.priority < 0) return NULL;
    if (OMPI_COMM_IS_INTER(comm)) {
        opal_output_verbose(2, twohop_adapter_output,
                            "coll:twohop: comm %s: intercommunicator, not selected", comm->c_name);
        return NULL;
    }
    twohop_module *m = OBJ_NEW(twohop_module);
    if (m == NULL) return NULL;
    m->super.coll_module_enable = twohop_module_enable;
    m->super.coll_allreduce = twohop_allreduce;
    if (ompi_comm_size(comm) < 2) {
        /* Single-rank communicators: coll/self (priority 75) copies with a host memcpy, which
         * crashes on device buffers; twohop takes the allreduce forms over there with a copy
         * that respects memory kinds (self_copy), and leaves every other collective to it. */
        *priority = kSelfPriority;
        m->super.coll_allreduce = twohop_allreduce_self;
    }
    m->super.coll_iallreduce = twohop_iallreduce;
    m->super.coll_allreduce_init = twohop_allreduce_init;
    return &m->super;
}

static int twohop_init_query(bool enable_progress_threads, bool enable_mpi_threads) {
    (void)enable_progress_threads;
    mpi_threads = enable_mpi_threads;
    mpi_init_thread = pthread_self(); /* MPI_Init runs init_query on the initialising thread */
    /* The first rank of each node snapshots the InfiniBand port counters for the job report. */
    if (twohop_adapter_params.rc_report && rc_report == NULL && opal_process_info.my_local_rank == 0) {
        rc_report = twohop_rc_report_begin(NULL, NULL);
    }
    return OMPI_SUCCESS;
}

/* ------------------------------------------------------ component, twohop_adapter_params ---- */

static int get_counter(const struct mca_base_pvar_t *pvar, void *value, void *obj) {
    (void)obj;
    *(unsigned long long *)value = *(const unsigned long long *)pvar->ctx;
    return OPAL_SUCCESS;
}

/* Registers the read-only, continuous MPI_T counter coll_twohop_<name> reading *value. */
static void register_counter(const mca_base_component_t *c, const char *name, const char *doc,
                             const unsigned long long *value) {
    (void)mca_base_component_pvar_register(
        c, name, doc, OPAL_INFO_LVL_4, MCA_BASE_PVAR_CLASS_COUNTER,
        MCA_BASE_VAR_TYPE_UNSIGNED_LONG_LONG, NULL, MCA_BASE_VAR_BIND_NO_OBJECT,
        MCA_BASE_PVAR_FLAG_READONLY | MCA_BASE_PVAR_FLAG_CONTINUOUS, get_counter, NULL, NULL,
        (void *)value);
}

static int twohop_register(void);
static int twohop_open(void);
static int twohop_close(void);

mca_coll_base_component_t mca_coll_twohop_component
    __attribute__((visibility("default"))) = {
        .collm_version =
            {
                TWOHOP_COLL_VERSION,
                .mca_component_name = "twohop",
                MCA_BASE_MAKE_VERSION(component, 0, 1, 0),
                .mca_open_component = twohop_open,
                .mca_close_component = twohop_close,
                .mca_register_component_params = twohop_register,
            },
        .collm_data = {MCA_BASE_METADATA_PARAM_CHECKPOINT},
        .collm_init_query = twohop_init_query,
        .collm_comm_query = twohop_comm_query,
};

static int twohop_register(void) {
    const mca_base_component_t *c = &mca_coll_twohop_component.collm_version;
#define TWOHOP_VAR_INT MCA_BASE_VAR_TYPE_INT
#define TWOHOP_VAR_SIZE MCA_BASE_VAR_TYPE_SIZE_T
#define TWOHOP_VAR_BOOL MCA_BASE_VAR_TYPE_BOOL
#define TWOHOP_VAR_STRING MCA_BASE_VAR_TYPE_STRING
#define TWOHOP_PARAM(name, kind, def, level, doc)                                              \
    twohop_adapter_params.name = def;                                                                         \
    (void)mca_base_component_var_register(c, #name, doc, TWOHOP_VAR_##kind, NULL, 0, 0,       \
                                          (mca_base_var_info_lvl_t)(OPAL_INFO_LVL_1 + (level)-1), \
                                          MCA_BASE_VAR_SCOPE_READONLY, &twohop_adapter_params.name);
#include "params.def"
#undef TWOHOP_PARAM
    register_counter(c, "allreduce_calls",
                     "MPI_Allreduce calls (and stream-ordered calls) executed by twohop's own "
                     "algorithm; the other forms have counters of their own",
                     &twohop_served_calls);
    register_counter(c, "fallback_calls",
                     "Allreduce calls twohop handed to the previously selected module (a "
                     "persistent allreduce handed over counts once, at its initialisation; "
                     "the few-MPI_INT MIN/MAX MPI_Iallreduce calls of Open MPI's communicator "
                     "construction before a communicator's set-up are not counted)",
                     &twohop_fallback_calls);
    register_counter(c, "nonblocking_calls",
                     "MPI_Iallreduce calls executed by twohop's own algorithm (Open MPI's own "
                     "communicator construction issues some on the parent communicator)",
                     &twohop_nonblocking_calls);
    register_counter(c, "half_calls",
                     "Allreduces (any form; every start of a persistent one) of "
                     "include/twohop_half.h's bfloat16/float16 types and ops that twohop served "
                     "with its own kernels", &twohop_half_calls);
    register_counter(c, "persistent_starts",
                     "Starts of persistent allreduces (MPI_Allreduce_init, MPIX_Allreduce_init) "
                     "executed by twohop's own algorithm", &twohop_persistent_starts);
    register_counter(c, "foreign_thread_progress",
                     "Calls of Open MPI's progress from a thread other than the one that "
                     "initialised MPI below MPI_THREAD_MULTIPLE, refused (an invariant: twohop's "
                     "proxy thread progresses UCX and shared memory only; must stay 0)",
                     &foreign_progress_calls);
    /* The core's counters, one per row of counters.def. */
#define TWOHOP_COUNTER(id, name, doc)                                                          \
    register_counter(c, #name, doc, twohop_core_counter(TWOHOP_COUNTER_##id));
#include "counters.def"
#undef TWOHOP_COUNTER
    return OMPI_SUCCESS;
}

/*
 * Declines when the Open MPI this process runs is not the release twohop was compiled
 * against: internal structure layouts may differ between 4.1.x releases.
 */
static int twohop_open(void) {
    twohop_adapter_output = opal_output_open(NULL);
    opal_output_set_verbosity(twohop_adapter_output, twohop_adapter_params.verbose);
    char version[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0, major = -1, minor = -1, release = -1;
    MPI_Get_library_version(version, &len);
    const char *v = strstr(version, "Open MPI v");
    if (v) sscanf(v, "Open MPI v%d.%d.%d", &major, &minor, &release);
    if (major != OMPI_MAJOR_VERSION || minor != OMPI_MINOR_VERSION ||
        release != OMPI_RELEASE_VERSION) {
        opal_output_verbose(1, twohop_adapter_output,
                            "coll:twohop: built against Open MPI %d.%d.%d but running in %d.%d.%d;"
                            " declining (rebuild twohop against this Open MPI)",
                            OMPI_MAJOR_VERSION, OMPI_MINOR_VERSION, OMPI_RELEASE_VERSION, major,
                            minor, release);
        return OMPI_ERR_NOT_AVAILABLE;
    }
    /* Invalid RC values are reported loudly here; the decision to fall back is taken
     * collectively at communicator set-up (a per-rank decline could deadlock). */
    struct twohop_rc_settings rc = twohop_rc_from_params(&twohop_adapter_params);
    char err[512];
    if (twohop_rc_validate(&rc, err, sizeof(err)) != TWOHOP_RC_OK) {
        opal_output(0, "coll:twohop: %s; multi-node communicators will fall back", err);
    }
    /* Loading twohop must not change how the application's crashes are reported. */
    twohop_core_quiet_signals();
    char why[256] = "";
    if (!twohop_memory_kinds_init(twohop_adapter_params.test_poisoned_memory, why, sizeof(why))) {
        opal_output_verbose(2, twohop_adapter_output, "coll:twohop: device buffers not served: %s", why);
    }
    return OMPI_SUCCESS;
}

static int twohop_close(void) {
    twohop_requests_finalize();
    if (rc_report) {
        (void)twohop_rc_report_end(rc_report, stdout);
        rc_report = NULL;
    }
    twohop_core_finalize();
    if (twohop_adapter_output >= 0) opal_output_close(twohop_adapter_output);
    twohop_adapter_output = -1;
    return OMPI_SUCCESS;
}
