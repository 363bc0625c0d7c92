/*
 * The CUDA driver API as twohop uses it, resolved at run time: the component never links
 * libcuda, so the same mca_coll_twohop.so loads and serves host buffers on machines without a
 * GPU or driver. At component open `load()` tries dlopen("libcuda.so.1"); when that fails (or
 * twohop was built without CUDA headers) every query answers "host memory" and no device
 * operation is ever attempted.
 *
 * Loading libcuda initialises nothing: until the application itself initialises CUDA,
 * cuPointerGetAttributes answers CUDA_ERROR_NOT_INITIALIZED and the buffer is host memory.
 */
#ifndef TWOHOP_CUDA_DRIVER_H
#define TWOHOP_CUDA_DRIVER_H

#include <cstddef>
#include <string>

namespace twohop {
namespace cuda {

/* Resolves the driver entry points once; returns true when device memory can be handled.
 * *why says what is missing otherwise. Thread-safe, idempotent. */
bool load(std::string *why);

/*
 * True when p is device memory of a CUDA device: cudaMalloc, cudaMallocManaged (managed),
 * cudaMallocAsync pools (default or custom). Registered/pinned host memory and plain host
 * memory answer false (the host may access them directly).
 */
bool is_device_memory(const void *p);

/*
 * Synchronous copy of n bytes between any two addresses (unified addressing), in the context
 * of the device owning the device side (made current for the copy when the calling thread has
 * none). The data is visible to the destination's consumers on return. False on a driver error.
 */
bool copy(void *dst, const void *src, std::size_t n);

/* What the driver knows of a device pointer. */
struct PointerInfo {
    int device = -1;        // ordinal in this process
    bool managed = false;
    char *base = nullptr;   // start of the allocation
    std::size_t size = 0;   // its size in bytes
    unsigned long long buffer_id = 0; // process-wide unique per allocation, never reused
};

/* Fills *info for device memory p; false for host memory or on a driver error. */
bool pointer_info(const void *p, PointerInfo *info);

constexpr std::size_t kIpcHandleBytes = 64; // CU_IPC_HANDLE_SIZE

/* CUDA IPC handle of the allocation starting at `base` (cudaMalloc memory; pools and managed
 * memory cannot be exported this way). */
bool ipc_export(const void *base, unsigned char handle[kIpcHandleBytes]);
/* The same for the allocation `info` describes, exported once per allocation (cached by
 * buffer id, as is the allocation's range: pointer_info then costs one driver call). */
bool ipc_export(const PointerInfo &info, unsigned char handle[kIpcHandleBytes]);
/* Identity of a peer's exported allocation: which process, where it lives there, which one. */
struct PeerAllocation {
    long long pid;                  // the exporting process
    unsigned long long base;        // the allocation's address in that process
    unsigned long long buffer_id;   // its CU_POINTER_ATTRIBUTE_BUFFER_ID there (never reused)
    unsigned long long size = 0;    // its size in bytes (0: unknown)
};

/*
 * The local address of a peer process's allocation, opened in `device`'s primary context with
 * lazy peer access. Cached per (device, pid, base): a hit with the same buffer id is reused; a
 * new buffer id at the same address (the peer freed and re-allocated) closes the stale mapping
 * first, so a cached mapping never outlives the allocation it shows. When the driver still
 * holds a stale mapping of the peer elsewhere that overlaps the new allocation
 * (CUDA_ERROR_ALREADY_MAPPED), only cached mappings whose range overlaps it are closed (they
 * show freed memory: the peer's live allocations never overlap its new one), so calls of other
 * communicators in flight keep theirs; only if that does not clear it, every mapping of the
 * peer on `device`. nullptr on failure.
 */
void *ipc_open(int device, const PeerAllocation &a, const unsigned char handle[kIpcHandleBytes]);
/*
 * Whether ipc_open(device, a, ...) would first close a cached mapping: a stale one at the same
 * address of the peer, or one of the peer overlapping the allocation elsewhere (freed memory).
 * cuIpcCloseMemHandle waits for the process's GPU work: on the H200 it blocked while a
 * GPU-posted call kernel of another communicator waited for another node (docs/design.md),
 * so a vote asks this first (gpu/vote.cpp, vote_publish).
 */
bool ipc_open_closes(int device, const PeerAllocation &a);
/* Closes now the cached mappings ipc_open(device, a, ...) would close first (none when a is
 * mapped and current), so that the later ipc_open only opens. Waits for the process's GPU
 * work (cuIpcCloseMemHandle): only where no kernel that waits for other ranks may exist. */
void ipc_close_stale(int device, const PeerAllocation &a);

/* PCI bus id of `device` ("0000:1b:00.0"), and the ordinal of a bus id in this process
 * (-1 when that GPU is not visible here). */
bool pci_bus_id(int device, char *buf, int len);
int device_by_pci(const char *bus_id);
/* True when kernels on `device` can access memory of `peer` (same device, or peer access). */
bool can_access(int device, int peer);

/* True when the device kernels (gpu_kernels.cu) are built in and the driver is loaded. */
bool kernels_available();
/* Loads twohop's kernel `name` on `device` now (and twohop's stream), so that a later launch
 * from a thread the application's stream may be waiting for never loads it lazily. False on
 * failure. */
bool preload(int device, const char *name);

/*
 * Enqueues kernel `name` of the embedded module on `device` (on `stream`, a CUstream of the
 * device's primary context, or by default twohop's own non-blocking stream there) with the
 * by-value argument `args` (arg_bytes bytes) over n elements; returns at once. False on a
 * driver error.
 */
bool launch(int device, const char *name, const void *args, std::size_t arg_bytes,
            unsigned long long n, void *stream = nullptr);
/* launch with an explicit grid: `blocks` blocks of `threads` threads (the GPU-posted call
 * kernel, posted_call.h, whose blocks must all be resident at once). False on a driver error. */
bool launch_grid(int device, const char *name, const void *args, std::size_t arg_bytes,
                 unsigned blocks, unsigned threads, void *stream = nullptr);
/* How many blocks of `threads` threads of kernel `name` the GPU `device` holds at once (blocks
 * per multiprocessor, cuOccupancyMaxActiveBlocksPerMultiprocessor, times multiprocessors;
 * asked once per kernel and device); 0 on a driver error. */
int resident_blocks(int device, const char *name, unsigned threads);
/* A new non-blocking stream of `device`'s primary context (a communicator's own, for work
 * that waits on the host: gpu/), or nullptr; stream_destroy releases it (nullptr: no
 * effect). */
void *stream_create(int device);
void stream_destroy(int device, void *stream);
/* launch on `stream` (default: twohop's stream on `device`), then waits for that stream. */
bool launch_and_wait(int device, const char *name, const void *args, std::size_t arg_bytes,
                     unsigned long long n, void *stream = nullptr);
/*
 * Enqueues a copy of n bytes (unified addresses; host memory must be registered or pinned for
 * the copy to be asynchronous) on twohop's stream on `device`, after the work launched there.
 * False on a driver error.
 */
bool copy_async(int device, void *dst, const void *src, std::size_t n, void *stream = nullptr);

/*
 * Stream memory operations on 64-bit flags in registered host memory (`flag` is the device
 * address of the flag, from host_register; `stream` nullptr: twohop's own stream): write_flag enqueues `*flag = value` after the
 * stream's earlier work (with a memory barrier: that work's writes are visible first);
 * wait_flag makes the stream wait until (int64_t)(*flag - value) >= 0 (cuStreamWaitValue64,
 * CU_STREAM_WAIT_VALUE_GEQ). False on a driver error.
 */
bool write_flag(int device, void *stream, void *flag, unsigned long long value);
bool wait_flag(int device, void *stream, void *flag, unsigned long long value);
/* True when `device` supports 64-bit stream memory operations
 * (CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS). */
bool flag_ops_supported(int device);
/* Waits for everything enqueued on `stream` (nullptr: the legacy default stream) of the
 * device whose primary context owns it. False on a driver error. */
bool stream_sync(int device, void *stream);
/* Waits for the legacy default stream of the calling thread's current context (true when the
 * thread has none, or there is no driver: nothing can have been enqueued there). */
bool sync_current();
/* The legacy default stream (CU_STREAM_LEGACY), for callers that pass no stream. */
void *legacy_stream();
/* 1 when `stream` is being captured into a CUDA graph (cuStreamIsCapturing), 0 when not (or
 * the driver lacks the call, or there is no driver, or -- the legacy stream -- the calling
 * thread has no current context), -1 on a driver error. */
int stream_capturing(void *stream);
/* The device ordinal of the context `stream` belongs to, or -1 (an unknown stream). */
int stream_device(void *stream);

/*
 * Completion of the work enqueued so far on twohop's stream on one device (a CUDA event,
 * created on first use, reused). query() lets the caller poll (and keep other transfers
 * moving) instead of blocking in a stream synchronisation.
 */
class Fence {
  public:
    Fence() = default;
    Fence(const Fence &) = delete;
    Fence &operator=(const Fence &) = delete;
    ~Fence();
    /* Marks the current end of `stream` (default: twohop's stream) on `device`. False on a
     * driver error. */
    bool record(int device, void *stream = nullptr);
    /* 1 when everything before the mark completed (or nothing was marked), 0 while pending,
     * -1 on a driver error (the stream's work failed). */
    int query() const;

  private:
    void *event_ = nullptr; // CUevent
    int device_ = -1;
};
/*
 * Device memory twohop allocates itself (cuMemAlloc, IPC-exportable) in `device`'s primary
 * context, for ranks whose buffers cannot be exported (stream-ordered pools, managed memory).
 * nullptr on failure. Released with device_free.
 */
void *device_alloc(int device, std::size_t bytes);
void device_free(int device, void *p);
/* Sets `bytes` of device memory at p to zero and waits for it, on a new non-blocking stream:
 * no wait for the application's streams or twohop's. False on a driver error. */
bool zero_device(int device, void *p, std::size_t bytes);

/*
 * Makes host memory [p, p + bytes) (the node's shared-memory segment) accessible to kernels on
 * every device (cuMemHostRegister, DEVICEMAP | PORTABLE) and returns its device address
 * (nullptr on failure). host_unregister undoes it.
 */
void *host_register(int device, void *p, std::size_t bytes);
void host_unregister(int device, void *p);

/* The name of the last driver error any call here saw in this thread ("" when none). */
const char *last_error();

/* Waits for the work on `device`'s legacy default stream (the application's input). */
bool sync_input(int device);

} // namespace cuda
} // namespace twohop

#endif
