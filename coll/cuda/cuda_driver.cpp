#include "cuda_driver.h"

#include <atomic>
#include <cstdio>
#include <cstring>
#include <dlfcn.h>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <tuple>

#ifdef TWOHOP_HAVE_CUDA
#include <cuda.h>
#endif

namespace twohop {
namespace cuda {

#ifdef TWOHOP_HAVE_CUDA
namespace {

struct Driver {
    CUresult (*mem_get_address_range)(CUdeviceptr *, size_t *, CUdeviceptr);
    CUresult (*ipc_get_mem_handle)(CUipcMemHandle *, CUdeviceptr);
    CUresult (*ipc_open_mem_handle)(CUdeviceptr *, CUipcMemHandle, unsigned int);
    CUresult (*device_get_pci_bus_id)(char *, int, CUdevice);
    CUresult (*device_get_by_pci_bus_id)(CUdevice *, const char *);
    CUresult (*device_can_access_peer)(int *, CUdevice, CUdevice);
    CUresult (*module_load_data)(CUmodule *, const void *);
    CUresult (*module_get_function)(CUfunction *, CUmodule, const char *);
    CUresult (*launch_kernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                              unsigned, unsigned, CUstream, void **, void **);
    CUresult (*stream_create)(CUstream *, unsigned int);
    CUresult (*stream_destroy)(CUstream);
    CUresult (*mem_alloc)(CUdeviceptr *, size_t);
    CUresult (*ipc_close_mem_handle)(CUdeviceptr);
    CUresult (*mem_host_register)(void *, size_t, unsigned int);
    CUresult (*mem_host_unregister)(void *);
    CUresult (*mem_host_get_device_pointer)(CUdeviceptr *, void *, unsigned int);
    CUresult (*mem_free)(CUdeviceptr);
    CUresult (*pointer_get_attributes)(unsigned, CUpointer_attribute *, void **, CUdeviceptr);
    CUresult (*memcpy)(CUdeviceptr, CUdeviceptr, size_t);
    CUresult (*ctx_get_current)(CUcontext *);
    CUresult (*ctx_push)(CUcontext);
    CUresult (*ctx_pop)(CUcontext *);
    CUresult (*device_get)(CUdevice *, int);
    CUresult (*primary_ctx_retain)(CUcontext *, CUdevice);
    CUresult (*stream_synchronize)(CUstream);
    CUresult (*memcpy_async)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
    CUresult (*memset_d8_async)(CUdeviceptr, unsigned char, size_t, CUstream);
    CUresult (*event_create)(CUevent *, unsigned int);
    CUresult (*event_record)(CUevent, CUstream);
    CUresult (*event_query)(CUevent);
    CUresult (*event_destroy)(CUevent);
    CUresult (*stream_write_value64)(CUstream, CUdeviceptr, cuuint64_t, unsigned int);
    CUresult (*stream_wait_value64)(CUstream, CUdeviceptr, cuuint64_t, unsigned int);
    CUresult (*device_get_attribute)(int *, CUdevice_attribute, CUdevice);
    CUresult (*stream_get_ctx)(CUstream, CUcontext *);
    CUresult (*ctx_get_device)(CUdevice *);
    CUresult (*stream_is_capturing)(CUstream, CUstreamCaptureStatus *); // optional
    CUresult (*func_load)(CUfunction);                                   // optional (12.4+)
    CUresult (*occupancy_max_active_blocks)(int *, CUfunction, int, size_t);
};

Driver g_drv;
thread_local const char *t_last_error = "";
CUresult (*g_error_name)(CUresult, const char **) = nullptr;

/* Records a failed driver call's name for last_error(); returns true on success. */
bool ok(CUresult r, const char *call) {
    if (r == CUDA_SUCCESS) return true;
    static thread_local char buf[160];
    const char *name = "?";
    if (g_error_name) g_error_name(r, &name);
    std::snprintf(buf, sizeof(buf), "%s: %s", call, name);
    t_last_error = buf;
    return false;
}
bool g_loaded = false;
std::once_flag g_once;
std::string g_why;

template <class F> bool sym(void *h, const char *name, F *out) {
    *out = reinterpret_cast<F>(dlsym(h, name));
    if (!*out) g_why = std::string("libcuda.so.1 has no ") + name;
    return *out != nullptr;
}

void do_load() {
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        g_why = "no CUDA driver (libcuda.so.1 not found)";
        return;
    }
    g_loaded = sym(h, "cuPointerGetAttributes", &g_drv.pointer_get_attributes) &&
               sym(h, "cuMemcpy", &g_drv.memcpy) &&
               sym(h, "cuCtxGetCurrent", &g_drv.ctx_get_current) &&
               sym(h, "cuCtxPushCurrent_v2", &g_drv.ctx_push) &&
               sym(h, "cuCtxPopCurrent_v2", &g_drv.ctx_pop) &&
               sym(h, "cuDeviceGet", &g_drv.device_get) &&
               sym(h, "cuDevicePrimaryCtxRetain", &g_drv.primary_ctx_retain) &&
               sym(h, "cuStreamSynchronize", &g_drv.stream_synchronize) &&
               sym(h, "cuMemGetAddressRange_v2", &g_drv.mem_get_address_range) &&
               sym(h, "cuIpcGetMemHandle", &g_drv.ipc_get_mem_handle) &&
               sym(h, "cuIpcOpenMemHandle_v2", &g_drv.ipc_open_mem_handle) &&
               sym(h, "cuDeviceGetPCIBusId", &g_drv.device_get_pci_bus_id) &&
               sym(h, "cuDeviceGetByPCIBusId", &g_drv.device_get_by_pci_bus_id) &&
               sym(h, "cuDeviceCanAccessPeer", &g_drv.device_can_access_peer) &&
               sym(h, "cuModuleLoadData", &g_drv.module_load_data) &&
               sym(h, "cuModuleGetFunction", &g_drv.module_get_function) &&
               sym(h, "cuLaunchKernel", &g_drv.launch_kernel) &&
               sym(h, "cuStreamCreate", &g_drv.stream_create) &&
               sym(h, "cuStreamDestroy_v2", &g_drv.stream_destroy) &&
               sym(h, "cuMemAlloc_v2", &g_drv.mem_alloc) &&
               sym(h, "cuMemFree_v2", &g_drv.mem_free) &&
               sym(h, "cuIpcCloseMemHandle", &g_drv.ipc_close_mem_handle) &&
               sym(h, "cuMemHostRegister_v2", &g_drv.mem_host_register) &&
               sym(h, "cuMemHostUnregister", &g_drv.mem_host_unregister) &&
               sym(h, "cuMemHostGetDevicePointer_v2", &g_drv.mem_host_get_device_pointer) &&
               sym(h, "cuMemcpyAsync", &g_drv.memcpy_async) &&
               sym(h, "cuMemsetD8Async", &g_drv.memset_d8_async) &&
               sym(h, "cuOccupancyMaxActiveBlocksPerMultiprocessor",
                   &g_drv.occupancy_max_active_blocks) &&
               sym(h, "cuEventCreate", &g_drv.event_create) &&
               sym(h, "cuEventRecord", &g_drv.event_record) &&
               sym(h, "cuEventQuery", &g_drv.event_query) &&
               sym(h, "cuEventDestroy_v2", &g_drv.event_destroy) &&
               sym(h, "cuStreamWriteValue64_v2", &g_drv.stream_write_value64) &&
               sym(h, "cuStreamWaitValue64_v2", &g_drv.stream_wait_value64) &&
               sym(h, "cuDeviceGetAttribute", &g_drv.device_get_attribute) &&
               sym(h, "cuStreamGetCtx", &g_drv.stream_get_ctx) &&
               sym(h, "cuCtxGetDevice", &g_drv.ctx_get_device);
    g_drv.stream_is_capturing = reinterpret_cast<CUresult (*)(CUstream, CUstreamCaptureStatus *)>(
        dlsym(h, "cuStreamIsCapturing"));
    g_drv.func_load = reinterpret_cast<CUresult (*)(CUfunction)>(dlsym(h, "cuFuncLoad"));
    g_error_name = reinterpret_cast<CUresult (*)(CUresult, const char **)>(dlsym(h, "cuGetErrorName"));
}

/* Memory type and device ordinal of p; false when the driver does not know p. */
bool attributes(const void *p, unsigned *type, int *ordinal, int *managed,
                unsigned long long *id = nullptr) {
    CUpointer_attribute a[4] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                CU_POINTER_ATTRIBUTE_IS_MANAGED, CU_POINTER_ATTRIBUTE_BUFFER_ID};
    unsigned t = 0;
    int dev = -1;
    unsigned m = 0;
    unsigned long long bid = 0;
    void *v[4] = {&t, &dev, &m, &bid};
    if (g_drv.pointer_get_attributes(id ? 4 : 3, a, v, reinterpret_cast<CUdeviceptr>(p)) !=
        CUDA_SUCCESS) {
        return false;
    }
    if (id) *id = bid;
    *type = t;
    *ordinal = dev;
    *managed = m != 0;
    return true;
}

/* The primary context of device `dev`, retained once per process (never released: it lives
 * as long as the driver does). nullptr on error. */
CUcontext primary_context(int dev) {
    static std::mutex m;
    static CUcontext ctx[256];
    if (dev < 0 || dev >= 256) return nullptr;
    std::lock_guard<std::mutex> lock(m);
    if (ctx[dev] == nullptr) {
        CUdevice d;
        CUcontext c;
        if (g_drv.device_get(&d, dev) != CUDA_SUCCESS ||
            g_drv.primary_ctx_retain(&c, d) != CUDA_SUCCESS) {
            return nullptr;
        }
        ctx[dev] = c;
    }
    return ctx[dev];
}

} // namespace

bool load(std::string *why) {
    std::call_once(g_once, do_load);
    if (!g_loaded && why) *why = g_why;
    return g_loaded;
}

bool is_device_memory(const void *p) {
    if (!g_loaded) return false;
    unsigned type;
    int dev, managed;
    if (!attributes(p, &type, &dev, &managed)) return false; // unknown to CUDA: host memory
    return managed || type == CU_MEMORYTYPE_DEVICE;
}

bool copy(void *dst, const void *src, std::size_t n) {
    if (!g_loaded) return false;
    if (n == 0) return true;
    CUcontext cur = nullptr;
    bool pushed = false;
    if (g_drv.ctx_get_current(&cur) != CUDA_SUCCESS || cur == nullptr) {
        // No context in this thread: use the primary context of the device side's device.
        unsigned type;
        int dev = -1, managed;
        if (!attributes(src, &type, &dev, &managed) || dev < 0) {
            if (!attributes(dst, &type, &dev, &managed) || dev < 0) return false;
        }
        CUcontext ctx = primary_context(dev);
        if (ctx == nullptr || g_drv.ctx_push(ctx) != CUDA_SUCCESS) return false;
        pushed = true;
    }
    bool done = ok(g_drv.memcpy(reinterpret_cast<CUdeviceptr>(dst),
                                reinterpret_cast<CUdeviceptr>(src), n), "cuMemcpy");
    // A copy from pageable host memory may return before the DMA finished: wait for it so the
    // application's next kernel, on any stream, sees the data.
    if (done) done = ok(g_drv.stream_synchronize(CU_STREAM_LEGACY), "cuStreamSynchronize");
    if (pushed) {
        CUcontext popped;
        g_drv.ctx_pop(&popped);
    }
    return done;
}

/* Makes `device`'s primary context current for the scope (when another one, or none, is). */
class CtxScope {
  public:
    explicit CtxScope(int device) {
        CUcontext cur = nullptr, want = primary_context(device);
        ok_ = want != nullptr;
        if (ok_ && (g_drv.ctx_get_current(&cur) != CUDA_SUCCESS || cur != want)) {
            ok_ = g_drv.ctx_push(want) == CUDA_SUCCESS;
            pushed_ = ok_;
        }
    }
    ~CtxScope() {
        CUcontext c;
        if (pushed_) g_drv.ctx_pop(&c);
    }
    bool ok() const { return ok_; }

  private:
    bool ok_ = false, pushed_ = false;
};

/*
 * What twohop learnt about an allocation, by buffer id (ids are never reused, so an entry never
 * goes stale; the table is cleared when it grows past kMaxAllocations).
 */
struct AllocationInfo {
    char *base;
    size_t size;
    bool exported, export_failed;
    unsigned char handle[kIpcHandleBytes];
};
constexpr size_t kMaxAllocations = 4096;
std::mutex g_alloc_mutex;
std::map<unsigned long long, AllocationInfo> g_allocs;

bool pointer_info(const void *p, PointerInfo *info) {
    if (!g_loaded) return false;
    unsigned type;
    int dev, managed;
    if (!attributes(p, &type, &dev, &managed, &info->buffer_id)) return false;
    if (!managed && type != CU_MEMORYTYPE_DEVICE) return false;
    info->device = dev;
    info->managed = managed != 0;
    {
        std::lock_guard<std::mutex> lock(g_alloc_mutex);
        auto it = g_allocs.find(info->buffer_id);
        if (it != g_allocs.end()) {
            info->base = it->second.base;
            info->size = it->second.size;
            return true;
        }
    }
    CtxScope ctx(dev);
    CUdeviceptr base = 0;
    size_t size = 0;
    if (!ctx.ok() || g_drv.mem_get_address_range(&base, &size,
                                                 reinterpret_cast<CUdeviceptr>(p)) != CUDA_SUCCESS) {
        return false;
    }
    info->base = reinterpret_cast<char *>(base);
    info->size = size;
    std::lock_guard<std::mutex> lock(g_alloc_mutex);
    if (g_allocs.size() >= kMaxAllocations) g_allocs.clear();
    AllocationInfo ai{};
    ai.base = info->base;
    ai.size = size;
    g_allocs[info->buffer_id] = ai;
    return true;
}

bool ipc_export(const PointerInfo &info, unsigned char handle[kIpcHandleBytes]) {
    {
        std::lock_guard<std::mutex> lock(g_alloc_mutex);
        auto it = g_allocs.find(info.buffer_id);
        if (it != g_allocs.end() && it->second.exported) {
            std::memcpy(handle, it->second.handle, kIpcHandleBytes);
            return true;
        }
        if (it != g_allocs.end() && it->second.export_failed) return false;
    }
    const bool done = ipc_export(info.base, handle);
    std::lock_guard<std::mutex> lock(g_alloc_mutex);
    auto it = g_allocs.find(info.buffer_id);
    if (it != g_allocs.end()) {
        it->second.exported = done;
        it->second.export_failed = !done;
        if (done) std::memcpy(it->second.handle, handle, kIpcHandleBytes);
    }
    return done;
}

bool ipc_export(const void *base, unsigned char handle[kIpcHandleBytes]) {
    CUipcMemHandle h;
    if (g_drv.ipc_get_mem_handle(&h, reinterpret_cast<CUdeviceptr>(base)) != CUDA_SUCCESS) {
        return false;
    }
    static_assert(sizeof(h) == kIpcHandleBytes, "CU_IPC_HANDLE_SIZE");
    std::memcpy(handle, &h, kIpcHandleBytes);
    return true;
}

namespace {
struct Mapping {
    unsigned long long buffer_id;
    CUdeviceptr local;
    unsigned long long size; // of the peer's allocation (0: unknown)
};
std::mutex g_ipc_m;
std::map<std::tuple<int, long long, unsigned long long>, Mapping> g_ipc_cache;
} // namespace

void *ipc_open(int device, const PeerAllocation &a, const unsigned char handle[kIpcHandleBytes]) {
    auto &m = g_ipc_m;
    auto &cache = g_ipc_cache;
    std::lock_guard<std::mutex> lock(m);
    const auto key = std::make_tuple(device, a.pid, a.base);
    auto it = cache.find(key);
    if (it != cache.end() && it->second.buffer_id == a.buffer_id) {
        return reinterpret_cast<void *>(it->second.local);
    }
    CtxScope ctx(device);
    if (!ctx.ok()) return nullptr;
    if (it != cache.end()) { // the peer freed that allocation: drop the stale mapping
        g_drv.ipc_close_mem_handle(it->second.local);
        cache.erase(it);
    }
    CUipcMemHandle h;
    std::memcpy(&h, handle, kIpcHandleBytes);
    CUdeviceptr p = 0;
    CUresult r = g_drv.ipc_open_mem_handle(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
    // A stale mapping of this peer overlaps the new allocation at another address: close the
    // cached mappings of the peer on this device that overlap it (freed memory) and retry;
    // failing that (sizes unknown), every mapping of the peer, and retry once more.
    for (int pass = 0; r == CUDA_ERROR_ALREADY_MAPPED && pass < 2; ++pass) {
        for (auto i = cache.begin(); i != cache.end();) {
            const unsigned long long b = std::get<2>(i->first), n = i->second.size;
            const bool overlaps = n != 0 && a.size != 0 && b < a.base + a.size && a.base < b + n;
            if (std::get<0>(i->first) == device && std::get<1>(i->first) == a.pid &&
                (overlaps || pass == 1)) {
                g_drv.ipc_close_mem_handle(i->second.local);
                i = cache.erase(i);
            } else {
                ++i;
            }
        }
        r = g_drv.ipc_open_mem_handle(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
    }
    if (!ok(r, "cuIpcOpenMemHandle")) return nullptr;
    cache[key] = Mapping{a.buffer_id, p, a.size};
    return reinterpret_cast<void *>(p);
}

namespace {
/* With g_ipc_m held: whether cache entry e (another key than a's) must be closed before a is
 * opened: a mapping of the same peer on the same device overlapping a (freed memory); with a
 * size unknown, `unknown` (ipc_open's second pass may close every mapping of the peer). */
bool stale_for(const std::pair<const std::tuple<int, long long, unsigned long long>, Mapping> &e,
               int device, const PeerAllocation &a, bool unknown) {
    const unsigned long long b = std::get<2>(e.first), n = e.second.size;
    if (std::get<0>(e.first) != device || std::get<1>(e.first) != a.pid) return false;
    if (n == 0 || a.size == 0) return unknown;
    return b < a.base + a.size && a.base < b + n;
}
} // namespace

bool ipc_open_closes(int device, const PeerAllocation &a) {
    std::lock_guard<std::mutex> lock(g_ipc_m);
    const auto key = std::make_tuple(device, a.pid, a.base);
    auto it = g_ipc_cache.find(key);
    if (it != g_ipc_cache.end()) return it->second.buffer_id != a.buffer_id;
    for (const auto &e : g_ipc_cache) {
        if (stale_for(e, device, a, true)) return true;
    }
    return false;
}
// (A stale entry at a's address also makes the mappings overlapping a stale: ipc_close_stale
// closes both kinds, so that ipc_open then finds nothing mapped over the new allocation.)

void ipc_close_stale(int device, const PeerAllocation &a) {
    std::lock_guard<std::mutex> lock(g_ipc_m);
    const auto key = std::make_tuple(device, a.pid, a.base);
    auto it = g_ipc_cache.find(key);
    if (it != g_ipc_cache.end() && it->second.buffer_id == a.buffer_id) return; // current
    CtxScope ctx(device);
    if (!ctx.ok()) return;
    if (it != g_ipc_cache.end()) {
        g_drv.ipc_close_mem_handle(it->second.local);
        g_ipc_cache.erase(it);
    }
    for (auto i = g_ipc_cache.begin(); i != g_ipc_cache.end();) {
        // Not the peer's mappings of unknown size: they may be another call's, in use.
        if (stale_for(*i, device, a, false)) {
            g_drv.ipc_close_mem_handle(i->second.local);
            i = g_ipc_cache.erase(i);
        } else {
            ++i;
        }
    }
}

// Device identities and peer access do not change while the process runs: cached.
std::mutex g_dev_mutex;
std::map<int, std::string> g_pci_of;
std::map<std::string, int> g_dev_of;
std::map<std::pair<int, int>, bool> g_access;

bool pci_bus_id(int device, char *buf, int len) {
    std::lock_guard<std::mutex> lock(g_dev_mutex);
    auto it = g_pci_of.find(device);
    if (it == g_pci_of.end()) {
        CUdevice d;
        char id[64] = "";
        if (g_drv.device_get(&d, device) != CUDA_SUCCESS ||
            g_drv.device_get_pci_bus_id(id, sizeof(id), d) != CUDA_SUCCESS) {
            return false;
        }
        it = g_pci_of.emplace(device, id).first;
    }
    std::snprintf(buf, static_cast<size_t>(len), "%s", it->second.c_str());
    return true;
}

int device_by_pci(const char *bus_id) {
    std::lock_guard<std::mutex> lock(g_dev_mutex);
    auto it = g_dev_of.find(bus_id);
    if (it != g_dev_of.end()) return it->second;
    CUdevice d;
    const int dev = g_drv.device_get_by_pci_bus_id(&d, bus_id) == CUDA_SUCCESS
                        ? static_cast<int>(d) // CUdevice is the ordinal
                        : -1;
    g_dev_of.emplace(bus_id, dev);
    return dev;
}

bool can_access(int device, int peer) {
    if (device == peer) return true;
    std::lock_guard<std::mutex> lock(g_dev_mutex);
    auto it = g_access.find({device, peer});
    if (it != g_access.end()) return it->second;
    int ok = 0;
    const bool yes = g_drv.device_can_access_peer(&ok, device, peer) == CUDA_SUCCESS && ok;
    g_access.emplace(std::make_pair(device, peer), yes);
    return yes;
}

#ifdef TWOHOP_HAVE_GPU_KERNELS
extern "C" const unsigned char twohop_gpu_fatbin[];
bool kernels_available() { return g_loaded; }

/* twohop's own non-blocking stream on `device` (created once; the caller's context scope must
 * hold `device`'s primary context). nullptr on failure. */
CUstream own_stream(int device) {
    static std::mutex m;
    static std::map<int, CUstream> streams;
    std::lock_guard<std::mutex> lock(m);
    auto &s = streams[device];
    if (s == nullptr && !ok(g_drv.stream_create(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate")) {
        s = nullptr;
    }
    return s;
}

namespace {
/* twohop's kernel `name` on `device` (the current context), loaded on first use; nullptr on
 * failure. */
CUfunction function(int device, const char *name) {
    static std::mutex m;
    static std::map<std::pair<int, std::string>, CUfunction> funcs;
    static std::map<int, CUmodule> modules;
    std::lock_guard<std::mutex> lock(m);
    auto &mod = modules[device];
    if (mod == nullptr && !ok(g_drv.module_load_data(&mod, twohop_gpu_fatbin),
                              "cuModuleLoadData")) {
        mod = nullptr;
        return nullptr;
    }
    auto &fn = funcs[{device, name}];
    if (fn == nullptr && !ok(g_drv.module_get_function(&fn, mod, name),
                             "cuModuleGetFunction")) {
        fn = nullptr;
        return nullptr;
    }
    return fn;
}
} // namespace

bool preload(int device, const char *name) {
    CtxScope ctx(device);
    if (!ctx.ok()) return false;
    CUfunction f = function(device, name);
    if (f == nullptr || own_stream(device) == nullptr) return false;
    // Under lazy loading (CUDA_MODULE_LOADING=LAZY, the default since CUDA 12.2) a kernel is
    // loaded at its first use, which may synchronise the context (CUDA C++ Programming Guide,
    // "Lazy Loading": possible deadlocks when kernels wait on each other). Once per kernel:
    // callers preload on every call.
    static std::mutex m;
    static std::set<CUfunction> loaded;
    {
        std::lock_guard<std::mutex> lock(m);
        if (loaded.count(f)) return true;
    }
    if (g_drv.func_load != nullptr && !ok(g_drv.func_load(f), "cuFuncLoad")) return false;
    std::lock_guard<std::mutex> lock(m);
    loaded.insert(f);
    return true;
}

bool launch_grid(int device, const char *name, const void *args, std::size_t arg_bytes,
                 unsigned blocks, unsigned threads, void *stream) {
    CtxScope ctx(device);
    if (!ctx.ok()) return false;
    CUfunction f = function(device, name);
    if (f == nullptr) return false;
    CUstream st = stream ? static_cast<CUstream>(stream) : own_stream(device);
    if (st == nullptr) return false;
    void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, const_cast<void *>(args),
                     CU_LAUNCH_PARAM_BUFFER_SIZE, &arg_bytes, CU_LAUNCH_PARAM_END};
    return ok(g_drv.launch_kernel(f, blocks, 1, 1, threads, 1, 1, 0, st, nullptr, extra),
              "cuLaunchKernel");
}

bool launch(int device, const char *name, const void *args, std::size_t arg_bytes,
            unsigned long long n, void *stream) {
    if (n == 0) return true;
    const unsigned block = 256;
    unsigned long long blocks = (n + block - 1) / block;
    if (blocks > 4096) blocks = 4096; // grid-stride loop covers the rest
    return launch_grid(device, name, args, arg_bytes, static_cast<unsigned>(blocks), block,
                       stream);
}

int resident_blocks(int device, const char *name, unsigned threads) {
    // A property of the kernel and the device: asked once (callers ask on every call).
    static std::mutex m;
    static std::map<std::tuple<int, std::string, unsigned>, int> known;
    const auto key = std::make_tuple(device, std::string(name), threads);
    {
        std::lock_guard<std::mutex> lock(m);
        auto it = known.find(key);
        if (it != known.end()) return it->second;
    }
    CtxScope ctx(device);
    if (!ctx.ok()) return 0;
    CUfunction f = function(device, name);
    int per_sm = 0, sms = 0;
    if (f == nullptr ||
        !ok(g_drv.occupancy_max_active_blocks(&per_sm, f, static_cast<int>(threads), 0),
            "cuOccupancyMaxActiveBlocksPerMultiprocessor") ||
        !ok(g_drv.device_get_attribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device),
            "cuDeviceGetAttribute")) {
        return 0;
    }
    std::lock_guard<std::mutex> lock(m);
    known[key] = per_sm * sms;
    return per_sm * sms;
}

bool launch_and_wait(int device, const char *name, const void *args, std::size_t arg_bytes,
                     unsigned long long n, void *stream) {
    if (!launch(device, name, args, arg_bytes, n, stream)) return false;
    CtxScope ctx(device);
    CUstream st = !ctx.ok() ? nullptr : stream ? static_cast<CUstream>(stream) : own_stream(device);
    return st && ok(g_drv.stream_synchronize(st), "cuStreamSynchronize (kernel)");
}
#else
bool kernels_available() { return false; }
bool launch(int, const char *, const void *, std::size_t, unsigned long long, void *) {
    return false;
}
bool preload(int, const char *) { return false; }
bool launch_grid(int, const char *, const void *, std::size_t, unsigned, unsigned, void *) {
    return false;
}
int resident_blocks(int, const char *, unsigned) { return 0; }
bool launch_and_wait(int, const char *, const void *, std::size_t, unsigned long long, void *) {
    return false;
}
#endif

bool zero_device(int device, void *p, std::size_t bytes) {
    CtxScope ctx(device);
    if (!ctx.ok()) return false;
    // A stream of its own (non-blocking, empty): the wait is for the memset alone, never for
    // a call kernel on twohop's stream that waits for the proxy.
    CUstream st = nullptr;
    if (!ok(g_drv.stream_create(&st, CU_STREAM_NON_BLOCKING), "cuStreamCreate")) return false;
    const bool done =
        ok(g_drv.memset_d8_async(reinterpret_cast<CUdeviceptr>(p), 0, bytes, st),
           "cuMemsetD8Async") &&
        ok(g_drv.stream_synchronize(st), "cuStreamSynchronize (memset)");
    g_drv.stream_destroy(st);
    return done;
}

void *stream_create(int device) {
    CtxScope ctx(device);
    CUstream st = nullptr;
    if (!ctx.ok() || !ok(g_drv.stream_create(&st, CU_STREAM_NON_BLOCKING), "cuStreamCreate")) {
        return nullptr;
    }
    return st;
}

void stream_destroy(int device, void *stream) {
    CtxScope ctx(device);
    if (ctx.ok() && stream) g_drv.stream_destroy(static_cast<CUstream>(stream));
}

void *device_alloc(int device, std::size_t bytes) {
    CtxScope ctx(device);
    CUdeviceptr p = 0;
    if (!ctx.ok() || g_drv.mem_alloc(&p, bytes ? bytes : 1) != CUDA_SUCCESS) return nullptr;
    return reinterpret_cast<void *>(p);
}

void device_free(int device, void *p) {
    CtxScope ctx(device);
    if (ctx.ok() && p) g_drv.mem_free(reinterpret_cast<CUdeviceptr>(p));
}

const char *last_error() { return t_last_error; }

void *host_register(int device, void *p, std::size_t bytes) {
    CtxScope ctx(device);
    if (!ctx.ok() ||
        !ok(g_drv.mem_host_register(p, bytes, CU_MEMHOSTREGISTER_DEVICEMAP |
                                                  CU_MEMHOSTREGISTER_PORTABLE),
            "cuMemHostRegister")) {
        return nullptr;
    }
    CUdeviceptr d = 0;
    if (!ok(g_drv.mem_host_get_device_pointer(&d, p, 0), "cuMemHostGetDevicePointer")) {
        g_drv.mem_host_unregister(p);
        return nullptr;
    }
    return reinterpret_cast<void *>(d);
}

void host_unregister(int device, void *p) {
    CtxScope ctx(device);
    if (ctx.ok()) g_drv.mem_host_unregister(p);
}

bool sync_input(int device) {
    CtxScope ctx(device);
    return ctx.ok() && g_drv.stream_synchronize(CU_STREAM_LEGACY) == CUDA_SUCCESS;
}

bool copy_async(int device, void *dst, const void *src, std::size_t n, void *stream) {
    if (n == 0) return true;
    CtxScope ctx(device);
    CUstream st = !ctx.ok() ? nullptr : stream ? static_cast<CUstream>(stream) : own_stream(device);
    return st && ok(g_drv.memcpy_async(reinterpret_cast<CUdeviceptr>(dst),
                                       reinterpret_cast<CUdeviceptr>(src), n, st),
                    "cuMemcpyAsync");
}

Fence::~Fence() {
    if (event_ && g_loaded) {
        CtxScope ctx(device_);
        if (ctx.ok()) g_drv.event_destroy(static_cast<CUevent>(event_));
    }
}

bool Fence::record(int device, void *stream) {
    CtxScope ctx(device);
    if (!ctx.ok()) return false;
    if (event_ && device_ != device) {
        g_drv.event_destroy(static_cast<CUevent>(event_));
        event_ = nullptr;
    }
    if (event_ == nullptr) {
        CUevent e;
        if (!ok(g_drv.event_create(&e, CU_EVENT_DISABLE_TIMING), "cuEventCreate")) return false;
        event_ = e;
        device_ = device;
    }
    CUstream st = stream ? static_cast<CUstream>(stream) : own_stream(device);
    return st && ok(g_drv.event_record(static_cast<CUevent>(event_), st), "cuEventRecord");
}

bool write_flag(int device, void *stream, void *flag, unsigned long long value) {
    CtxScope ctx(device);
    if (!ctx.ok()) return false;
    if (stream == nullptr && (stream = own_stream(device)) == nullptr) return false;
    return ok(g_drv.stream_write_value64(static_cast<CUstream>(stream),
                                                     reinterpret_cast<CUdeviceptr>(flag), value, 0),
                          "cuStreamWriteValue64");
}

bool wait_flag(int device, void *stream, void *flag, unsigned long long value) {
    CtxScope ctx(device);
    if (!ctx.ok()) return false;
    if (stream == nullptr && (stream = own_stream(device)) == nullptr) return false;
    return ok(g_drv.stream_wait_value64(static_cast<CUstream>(stream),
                                                    reinterpret_cast<CUdeviceptr>(flag), value,
                                                    CU_STREAM_WAIT_VALUE_GEQ),
                          "cuStreamWaitValue64");
}

bool flag_ops_supported(int device) {
    if (!g_loaded || device < 0 || device >= 256) return false;
    static std::atomic<int> known[256]; // 0 not asked yet, 1 yes, 2 no (a device property)
    int k = known[device].load(std::memory_order_relaxed);
    if (k == 0) {
        CUdevice d;
        int v = 0;
        const bool yes = g_drv.device_get(&d, device) == CUDA_SUCCESS &&
                         g_drv.device_get_attribute(
                             &v, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, d) ==
                             CUDA_SUCCESS &&
                         v != 0;
        k = yes ? 1 : 2;
        known[device].store(k, std::memory_order_relaxed);
    }
    return k == 1;
}

bool stream_sync(int device, void *stream) {
    CtxScope ctx(device);
    return ctx.ok() && ok(g_drv.stream_synchronize(stream ? static_cast<CUstream>(stream)
                                                          : CU_STREAM_LEGACY),
                          "cuStreamSynchronize");
}

void *legacy_stream() { return CU_STREAM_LEGACY; }

bool sync_current() {
    if (!g_loaded) return true; // no driver: nothing can have been enqueued
    CUcontext cur = nullptr;
    if (g_drv.ctx_get_current(&cur) != CUDA_SUCCESS || cur == nullptr) return true;
    return ok(g_drv.stream_synchronize(CU_STREAM_LEGACY), "cuStreamSynchronize");
}

int stream_capturing(void *stream) {
    if (!g_loaded || g_drv.stream_is_capturing == nullptr) return 0;
    if (stream == nullptr || stream == CU_STREAM_LEGACY) { // a thread without a context has none
        CUcontext cur = nullptr;
        if (g_drv.ctx_get_current(&cur) != CUDA_SUCCESS || cur == nullptr) return 0;
    }
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    if (!ok(g_drv.stream_is_capturing(static_cast<CUstream>(stream), &st), "cuStreamIsCapturing")) {
        return -1;
    }
    return st == CU_STREAM_CAPTURE_STATUS_NONE ? 0 : 1;
}

int stream_device(void *stream) {
    if (!g_loaded || stream == nullptr) return -1;
    CUcontext ctx = nullptr, popped;
    if (g_drv.stream_get_ctx(static_cast<CUstream>(stream), &ctx) != CUDA_SUCCESS || !ctx) {
        return -1;
    }
    CUdevice d = -1;
    if (g_drv.ctx_push(ctx) != CUDA_SUCCESS) return -1;
    const bool got = g_drv.ctx_get_device(&d) == CUDA_SUCCESS;
    g_drv.ctx_pop(&popped);
    return got ? static_cast<int>(d) : -1;
}

int Fence::query() const {
    if (event_ == nullptr) return 1;
    const CUresult r = g_drv.event_query(static_cast<CUevent>(event_));
    if (r == CUDA_ERROR_NOT_READY) return 0;
    return ok(r, "cuEventQuery") ? 1 : -1;
}

#else // built without CUDA headers: host memory only

bool load(std::string *why) {
    if (why) *why = "twohop was built without CUDA support";
    return false;
}
bool is_device_memory(const void *) { return false; }
bool copy(void *, const void *, std::size_t) { return false; }
bool pointer_info(const void *, PointerInfo *) { return false; }
bool ipc_export(const void *, unsigned char *) { return false; }
bool ipc_export(const PointerInfo &, unsigned char *) { return false; }
void *ipc_open(int, const PeerAllocation &, const unsigned char *) { return nullptr; }
bool ipc_open_closes(int, const PeerAllocation &) { return false; }
void ipc_close_stale(int, const PeerAllocation &) {}
bool pci_bus_id(int, char *, int) { return false; }
int device_by_pci(const char *) { return -1; }
bool can_access(int, int) { return false; }
bool kernels_available() { return false; }
bool launch(int, const char *, const void *, std::size_t, unsigned long long, void *) {
    return false;
}
bool preload(int, const char *) { return false; }
bool launch_grid(int, const char *, const void *, std::size_t, unsigned, unsigned, void *) {
    return false;
}
int resident_blocks(int, const char *, unsigned) { return 0; }
bool launch_and_wait(int, const char *, const void *, std::size_t, unsigned long long, void *) {
    return false;
}
bool sync_input(int) { return false; }
bool copy_async(int, void *, const void *, std::size_t, void *) { return false; }
bool write_flag(int, void *, void *, unsigned long long) { return false; }
bool wait_flag(int, void *, void *, unsigned long long) { return false; }
bool flag_ops_supported(int) { return false; }
bool stream_sync(int, void *) { return false; }
int stream_device(void *) { return -1; }
int stream_capturing(void *) { return 0; }
void *legacy_stream() { return nullptr; }
bool sync_current() { return true; }
Fence::~Fence() {}
bool Fence::record(int, void *) { return false; }
int Fence::query() const { return -1; }
void *device_alloc(int, std::size_t) { return nullptr; }
void *stream_create(int) { return nullptr; }
void stream_destroy(int, void *) {}
bool zero_device(int, void *, std::size_t) { return false; }
const char *last_error() { return "no CUDA support"; }
void *host_register(int, void *, std::size_t) { return nullptr; }
void host_unregister(int, void *) {}
void device_free(int, void *) {}

#endif

} // namespace cuda
} // namespace twohop
