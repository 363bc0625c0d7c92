/* Datatype classification and layout conversion through the MPI standard (mpi_types.h). */
#include "mpi_types.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "reduce_types.h"

/* The construction of t: counts, combiner and contents (types to release with contents_free).
 * False for predefined types and when MPI cannot tell. */
typedef struct contents {
    int ni, na, nd, combiner;
    int *iv;
    MPI_Aint *av;
    MPI_Datatype *dv;
} contents;

static bool is_named(MPI_Datatype t) {
    int ni, na, nd, combiner;
    return PMPI_Type_get_envelope(t, &ni, &na, &nd, &combiner) == MPI_SUCCESS &&
           combiner == MPI_COMBINER_NAMED;
}

static void contents_free(contents *c) {
    for (int k = 0; c->dv && k < c->nd; ++k) {
        if (c->dv[k] != MPI_DATATYPE_NULL && !is_named(c->dv[k])) PMPI_Type_free(&c->dv[k]);
    }
    free(c->iv);
    free(c->av);
    free(c->dv);
    memset(c, 0, sizeof(*c));
}

static bool contents_get(MPI_Datatype t, contents *c) {
    memset(c, 0, sizeof(*c));
    if (PMPI_Type_get_envelope(t, &c->ni, &c->na, &c->nd, &c->combiner) != MPI_SUCCESS ||
        c->combiner == MPI_COMBINER_NAMED) {
        return false;
    }
    c->iv = (int *)calloc((size_t)c->ni + 1, sizeof(int));
    c->av = (MPI_Aint *)calloc((size_t)c->na + 1, sizeof(MPI_Aint));
    c->dv = (MPI_Datatype *)calloc((size_t)c->nd + 1, sizeof(MPI_Datatype));
    if (!c->iv || !c->av || !c->dv ||
        PMPI_Type_get_contents(t, c->ni, c->na, c->nd, c->iv, c->av, c->dv) != MPI_SUCCESS) {
        free(c->dv);
        c->dv = NULL;
        contents_free(c);
        return false;
    }
    return true;
}

static MPI_Count type_size(MPI_Datatype t) {
    MPI_Count s = 0;
    PMPI_Type_size_x(t, &s);
    return s;
}

static MPI_Datatype single_type(MPI_Datatype t, int depth) {
    if (is_named(t)) return t;
    contents c;
    if (depth > 32 || !contents_get(t, &c)) return MPI_DATATYPE_NULL;
    MPI_Datatype single = MPI_DATATYPE_NULL;
    bool ok = c.nd > 0;
    for (int k = 0; k < c.nd && ok; ++k) {
        const bool empty = type_size(c.dv[k]) == 0 ||
                           (c.combiner == MPI_COMBINER_STRUCT && k + 1 < c.ni && c.iv[1 + k] == 0);
        if (empty) continue;
        MPI_Datatype b = single_type(c.dv[k], depth + 1);
        if (b == MPI_DATATYPE_NULL || (single != MPI_DATATYPE_NULL && b != single)) ok = false;
        else single = b;
    }
    contents_free(&c);
    return ok ? single : MPI_DATATYPE_NULL;
}

MPI_Datatype twohop_mpi_single_type(MPI_Datatype t) { return single_type(t, 0); }

static bool in_order(MPI_Datatype t, int depth);

/* Blocks of `bl[i]` children at byte displacement disp(i) are consecutive and in order. */
static bool blocks_in_order(int n, const int *bl, int bl_stride, MPI_Aint (*disp)(const contents *, int),
                            const contents *c, MPI_Datatype child) {
    MPI_Aint lb, ext;
    PMPI_Type_get_extent(child, &lb, &ext);
    MPI_Aint next = 0;
    for (int i = 0; i < n; ++i) {
        const int len = bl[i * bl_stride];
        if (len == 0) continue;
        if (disp(c, i) != next) return false;
        next += (MPI_Aint)len * ext;
    }
    return in_order(child, 1);
}

static MPI_Aint disp_indexed(const contents *c, int i) {
    MPI_Aint lb, ext;
    PMPI_Type_get_extent(c->dv[0], &lb, &ext);
    return (MPI_Aint)c->iv[1 + c->iv[0] + i] * ext;
}
static MPI_Aint disp_hindexed(const contents *c, int i) { return c->av[i]; }
static MPI_Aint disp_indexed_block(const contents *c, int i) {
    MPI_Aint lb, ext;
    PMPI_Type_get_extent(c->dv[0], &lb, &ext);
    return (MPI_Aint)c->iv[2 + i] * ext;
}

static bool in_order(MPI_Datatype t, int depth) {
    MPI_Count size = 0, lb = 0, extent = 0, tlb = 0, textent = 0;
    PMPI_Type_size_x(t, &size);
    PMPI_Type_get_extent_x(t, &lb, &extent);
    PMPI_Type_get_true_extent_x(t, &tlb, &textent);
    if (lb != 0 || tlb != 0 || extent != size || textent != size) return false;
    if (is_named(t)) return true;
    contents c;
    if (depth > 32 || !contents_get(t, &c)) return false;
    bool ok = false;
    switch (c.combiner) {
    case MPI_COMBINER_DUP:
    case MPI_COMBINER_CONTIGUOUS:
        ok = in_order(c.dv[0], depth + 1);
        break;
    case MPI_COMBINER_VECTOR: /* count, blocklength, stride (in extents) */
        ok = (c.iv[0] <= 1 || c.iv[2] == c.iv[1]) && in_order(c.dv[0], depth + 1);
        break;
    case MPI_COMBINER_HVECTOR: { /* count, blocklength; stride in bytes */
        MPI_Aint clb, cext;
        PMPI_Type_get_extent(c.dv[0], &clb, &cext);
        ok = (c.iv[0] <= 1 || c.av[0] == (MPI_Aint)c.iv[1] * cext) && in_order(c.dv[0], depth + 1);
        break;
    }
    case MPI_COMBINER_INDEXED: /* count, blocklengths[count], displacements[count] */
        ok = blocks_in_order(c.iv[0], c.iv + 1, 1, disp_indexed, &c, c.dv[0]);
        break;
    case MPI_COMBINER_HINDEXED: /* count, blocklengths[count]; displacements (bytes) */
        ok = blocks_in_order(c.iv[0], c.iv + 1, 1, disp_hindexed, &c, c.dv[0]);
        break;
    case MPI_COMBINER_INDEXED_BLOCK: /* count, blocklength, displacements[count] */
        ok = blocks_in_order(c.iv[0], c.iv + 1, 0, disp_indexed_block, &c, c.dv[0]);
        break;
    case MPI_COMBINER_HINDEXED_BLOCK: /* count, blocklength; displacements (bytes) */
        ok = blocks_in_order(c.iv[0], c.iv + 1, 0, disp_hindexed, &c, c.dv[0]);
        break;
    case MPI_COMBINER_STRUCT: { /* count, blocklengths[count]; displacements; types */
        MPI_Aint next = 0;
        ok = true;
        for (int i = 0; ok && i < c.iv[0]; ++i) {
            const MPI_Count s = type_size(c.dv[i]);
            if (c.iv[1 + i] == 0 || s == 0) continue;
            ok = c.av[i] == next && in_order(c.dv[i], depth + 1);
            next += (MPI_Aint)c.iv[1 + i] * (MPI_Aint)s;
        }
        break;
    }
    case MPI_COMBINER_RESIZED:
        ok = in_order(c.dv[0], depth + 1);
        break;
    default: /* subarray, darray, Fortran parameterised types: convert */
        ok = false;
        break;
    }
    contents_free(&c);
    return ok;
}

bool twohop_mpi_packed_in_order(MPI_Datatype t) { return in_order(t, 0); }

void twohop_mpi_span(MPI_Datatype t, uint64_t count, ptrdiff_t *true_lb, uint64_t *bytes) {
    MPI_Count lb, extent, tlb, textent;
    PMPI_Type_get_extent_x(t, &lb, &extent);
    PMPI_Type_get_true_extent_x(t, &tlb, &textent);
    *true_lb = (ptrdiff_t)tlb;
    *bytes = count ? (uint64_t)textent + (count - 1) * (uint64_t)extent : 0;
}

/* Items per MPI_Pack/MPI_Unpack call: about 64 MiB of packed bytes, at least one item, and
 * within int's range for every count and position. */
static uint64_t chunk_items(MPI_Count size, uint64_t elems_per_item) {
    const uint64_t target = (uint64_t)64 << 20;
    uint64_t n = size > 0 ? target / (uint64_t)size : 1;
    if (n == 0) n = 1;
    if (n * (elems_per_item ? elems_per_item : 1) > INT_MAX) n = INT_MAX / (elems_per_item ? elems_per_item : 1);
    return n ? n : 1;
}

/* Converts between the user's layout and canonical bytes; to_canon selects the direction. */
static int convert(char *user, MPI_Datatype dtype, uint64_t count, MPI_Datatype base,
                   uint64_t elems_per_item, char *canon, bool to_canon) {
    const MPI_Count size = type_size(dtype);
    MPI_Count lb, extent;
    PMPI_Type_get_extent_x(dtype, &lb, &extent);
    MPI_Aint blb = 0, bext = 0;
    if (base != MPI_DATATYPE_NULL) PMPI_Type_get_extent(base, &blb, &bext);
    const uint64_t chunk = chunk_items(size, elems_per_item);
    if ((uint64_t)size * chunk > INT_MAX) return -1; /* one item beyond 2 GiB */
    int packed_bytes = 0;
    if (PMPI_Pack_size((int)chunk, dtype, MPI_COMM_SELF, &packed_bytes) != MPI_SUCCESS) return -1;
    char *tmp = base != MPI_DATATYPE_NULL ? (char *)malloc((size_t)packed_bytes + 1) : NULL;
    if (base != MPI_DATATYPE_NULL && tmp == NULL) return -1;
    int rc = 0;
    for (uint64_t done = 0; rc == 0 && done < count; done += chunk) {
        const uint64_t n = count - done < chunk ? count - done : chunk;
        char *u = user + (ptrdiff_t)(done * (uint64_t)extent);
        const int nb = (int)(n * elems_per_item);
        int pos = 0;
        if (base == MPI_DATATYPE_NULL) { /* canonical = packed bytes */
            char *c = canon + done * (uint64_t)size;
            const int cap = (int)(n * (uint64_t)size);
            rc = to_canon ? PMPI_Pack(u, (int)n, dtype, c, cap, &pos, MPI_COMM_SELF)
                          : PMPI_Unpack(c, cap, &pos, u, (int)n, dtype, MPI_COMM_SELF);
            if (rc == MPI_SUCCESS && pos != cap) rc = -1;
            continue;
        }
        char *c = canon + done * elems_per_item * (uint64_t)bext;
        if (to_canon) {
            rc = PMPI_Pack(u, (int)n, dtype, tmp, packed_bytes, &pos, MPI_COMM_SELF);
            int upos = 0;
            if (rc == MPI_SUCCESS) rc = PMPI_Unpack(tmp, pos, &upos, c, nb, base, MPI_COMM_SELF);
        } else {
            rc = PMPI_Pack(c, nb, base, tmp, packed_bytes, &pos, MPI_COMM_SELF);
            int upos = 0;
            if (rc == MPI_SUCCESS) rc = PMPI_Unpack(tmp, pos, &upos, u, (int)n, dtype, MPI_COMM_SELF);
        }
    }
    free(tmp);
    return rc == MPI_SUCCESS ? 0 : -1;
}

int twohop_mpi_to_canonical(const void *user, MPI_Datatype dtype, uint64_t count, MPI_Datatype base,
                            uint64_t elems_per_item, void *canon) {
    return convert((char *)user, dtype, count, base, elems_per_item, (char *)canon, true);
}

int twohop_mpi_from_canonical(void *user, MPI_Datatype dtype, uint64_t count, MPI_Datatype base,
                              uint64_t elems_per_item, const void *canon) {
    return convert((char *)user, dtype, count, base, elems_per_item, (char *)canon, false);
}
