/*
 * twohop's public extension: a stream-ordered MPI_Allreduce for CUDA applications.
 *
 *   #include <cuda_runtime.h>
 *   #include <twohop.h>
 *   twohop_allreduce_enqueue(sendbuf, recvbuf, count, datatype, op, comm, stream);
 *
 * Enqueues the allreduce on `stream` and, where twohop can, returns at once: a kernel enqueued
 * on `stream` before the call produces the input, one enqueued after it reads the result, and
 * the host never waits for the GPU (the shape of MPICH's MPIX_Allreduce_enqueue). Same
 * arguments, datatypes, ops, MPI_IN_PLACE and error rules as MPI_Allreduce (errors go to the
 * communicator's error handler); calls on one communicator are matched in program order with
 * each other and with MPI_Allreduce, as collectives are. Every rank of the communicator must
 * call it (a rank may pass NULL for the legacy default stream).
 *
 * Stays on the stream: communicators on one node whose ranks all pass device memory (cudaMalloc,
 * stream-ordered pools, managed) in the datatype's canonical layout, with an op and type the GPU
 * path reduces (every predefined op on the predefined types except long double), on GPUs that
 * reach each other and support 64-bit stream memory operations; the stream must belong to the
 * buffers' GPU. On communicators of several nodes, each rank whose buffers are device memory of
 * the canonical layout with a predefined op, on such a GPU, stays on the stream while twohop's
 * proxy thread runs the allreduce's host side: calls of 64 KiB or more whose node agrees
 * (every local rank's buffers shareable through CUDA IPC) stay on the device buffers (one
 * GPU-posted kernel on the stream); other calls stage the message through a host copy (one
 * small kernel on the stream up to 64 KiB). On several nodes at most 4 calls are in flight per
 * communicator (device buffers or host copy): a fifth waits for the first to complete. A call
 * that returned MPI_SUCCESS and stayed on the stream can still fail later (a peer gone, a
 * timeout, another rank's refusal): its recvbuf is then undefined, the communicator is poisoned
 * and the next call on it returns the error. A call on a stream
 * being captured into a CUDA graph is refused on any communicator twohop serves: it fails with
 * an error on every rank (a rank whose part already stayed on the stream sees it at its next
 * call on the communicator, and its recvbuf is undefined; later calls on the communicator fail
 * too). A call twohop does not serve (a user-defined op on a datatype it declines, a
 * communicator it is not selected on) fails on the capturing rank alone: with
 * MPI_ERRORS_ARE_FATAL the job ends, with MPI_ERRORS_RETURN the other ranks wait in
 * MPI_Allreduce (so does the fallback below without twohop, whose cudaStreamSynchronize fails
 * on a capturing stream). Anything else (host memory,
 * user-defined ops, twohop not loaded) waits for the stream and runs MPI_Allreduce: correct,
 * not asynchronous. An event recorded on the stream after the call completes once the result
 * is in recvbuf.
 *
 * Two communicators used on one stream must be used in the same order on every rank (as with
 * NCCL): an allreduce waits on the GPU for the other ranks' part of the same call. Calls on
 * one communicator may sit on different, unordered streams: on several nodes each call's start
 * handshake has its own flag (RankFlags::ready, 8 in rotation), and the calls complete in
 * call order whatever order their streams reach the GPU in.
 *
 * Header only: it finds twohop at run time (Open MPI loads its components RTLD_GLOBAL; under
 * another MPI, libtwohop_pmpi.so is preloaded or linked), so the application links against MPI
 * and the CUDA runtime, plus -ldl on older C libraries.
 */
#ifndef TWOHOP_H
#define TWOHOP_H

#include <dlfcn.h>
#include <mpi.h>
#include <string.h>

#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef int (*twohop_allreduce_enqueue_fn)(const void *, void *, int, MPI_Datatype, MPI_Op,
                                           MPI_Comm, void *);

/* twohop's entry point (the Open MPI component's, else the PMPI library's), or NULL before
 * MPI_Init or when twohop is not loaded. */
static inline twohop_allreduce_enqueue_fn twohop_enqueue_entry(void) {
    static twohop_allreduce_enqueue_fn cached;
    twohop_allreduce_enqueue_fn fn = __atomic_load_n(&cached, __ATOMIC_ACQUIRE);
    if (fn == NULL) {
        void *self = dlopen(NULL, RTLD_LAZY);
        if (self != NULL) {
            void *sym = dlsym(self, "mca_coll_twohop_allreduce_enqueue");
            if (sym == NULL) sym = dlsym(self, "twohop_pmpi_allreduce_enqueue"); /* any MPI */
            memcpy(&fn, &sym, sizeof fn); /* object to function pointer, as POSIX allows */
            dlclose(self);
        }
        if (fn != NULL) __atomic_store_n(&cached, fn, __ATOMIC_RELEASE);
    }
    return fn;
}

/*
 * Stream-ordered MPI_Allreduce (see above). Returns MPI_SUCCESS or an MPI error class (after
 * the communicator's error handler ran). Without twohop: cudaStreamSynchronize(stream), then
 * MPI_Allreduce (with a NULL stream on a machine without a usable GPU there is nothing to wait
 * for: the allreduce runs).
 */
static inline int twohop_allreduce_enqueue(const void *sendbuf, void *recvbuf, int count,
                                           MPI_Datatype datatype, MPI_Op op, MPI_Comm comm,
                                           cudaStream_t stream) {
    twohop_allreduce_enqueue_fn fn = twohop_enqueue_entry();
    if (fn != NULL) return fn(sendbuf, recvbuf, count, datatype, op, comm, (void *)stream);
    const cudaError_t e = cudaStreamSynchronize(stream);
    if (e != cudaSuccess) {
        (void)cudaGetLastError(); /* not sticky: clear it */
        if (stream != NULL || (e != cudaErrorNoDevice && e != cudaErrorInsufficientDriver)) {
            return MPI_ERR_OTHER;
        }
    }
    return MPI_Allreduce(sendbuf, recvbuf, count, datatype, op, comm);
}

#ifdef __cplusplus
}
#endif

#endif
