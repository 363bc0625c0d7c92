/*
 * The Open MPI adapter's blocking and stream-ordered allreduce (twohop_adapter.h): the route
 * (route_call: coll/front/policy.h over the facts route_signature reads, then the set-up's
 * agreed outcome), the fallback to the previous module (device buffers staged), the call into
 * the core, failure reports, and the entry points MPI_Allreduce and
 * mca_coll_twohop_allreduce_enqueue reach.
 */
#include "ompi_config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpi.h"
#include "ompi/communicator/communicator.h"
#include "ompi/datatype/ompi_datatype.h"
#include "ompi/errhandler/errhandler.h"
#include "ompi/mca/coll/coll.h"
#include "ompi/op/op.h"
#include "opal/util/output.h"

#include "twohop_adapter.h"
#include "twohop_core.h"

/* ------------------------------------------------------------- allreduce ---- */

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
                            twohop_comm_label(m, label, sizeof(label)),
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
    if (state == -1 && __atomic_load_n(&m->fallback_window, __ATOMIC_RELAXED)) {
        if (defer) {
            *why = "non-blocking and persistent allreduce fail on this communicator until its "
                   "next blocking MPI_Allreduce: its set-up, started by a non-blocking or "
                   "persistent call, ended in a fallback, and a call another rank started before "
                   "its set-up ended cannot be handed to the previous component any more";
            return CALL_FAILED;
        }
        /* A blocking call: every rank has seen the set-up's end by this call (it finished the
         * set-up above, or earlier), so from here every rank hands calls back alike. */
        __atomic_store_n(&m->fallback_window, 0, __ATOMIC_RELAXED);
    }
    return route_setup(m, count, a, why, state);
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
    opal_output(0, "coll:twohop: %s: allreduce failed: %s", twohop_comm_label(m, label, sizeof(label)),
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
    char fail_why[256];
    fail_why[0] = '\0'; /* (not "" as initialiser: that zeroes all 256 bytes per call) */
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

int twohop_allreduce_self(const void *sbuf, void *rbuf, int count,
                                 ompi_datatype_t *dtype, ompi_op_t *op,
                                 ompi_communicator_t *comm, mca_coll_base_module_t *module) {
    (void)op;
    (void)comm;
    (void)module;
    return self_copy(sbuf, rbuf, count, dtype);
}

int twohop_allreduce(const void *sbuf, void *rbuf, int count, ompi_datatype_t *dtype,
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

