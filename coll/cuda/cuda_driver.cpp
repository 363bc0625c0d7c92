#include "cuda_driver.h"

#include <dlfcn.h>
#include <mutex>

#ifdef TWOHOP_HAVE_CUDA
#include <cuda.h>
#endif

namespace twohop {
namespace cuda {

#ifdef TWOHOP_HAVE_CUDA
namespace {

struct Driver {
    CUresult (*pointer_get_attributes)(unsigned, CUpointer_attribute *, void **, CUdeviceptr);
    CUresult (*memcpy)(CUdeviceptr, CUdeviceptr, size_t);
    CUresult (*ctx_get_current)(CUcontext *);
    CUresult (*ctx_push)(CUcontext);
    CUresult (*ctx_pop)(CUcontext *);
    CUresult (*device_get)(CUdevice *, int);
    CUresult (*primary_ctx_retain)(CUcontext *, CUdevice);
    CUresult (*stream_synchronize)(CUstream);
};

Driver g_drv;
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
               sym(h, "cuStreamSynchronize", &g_drv.stream_synchronize);
}

/* Memory type and device ordinal of p; false when the driver does not know p. */
bool attributes(const void *p, unsigned *type, int *ordinal, int *managed) {
    CUpointer_attribute a[3] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                CU_POINTER_ATTRIBUTE_IS_MANAGED};
    unsigned t = 0;
    int dev = -1;
    unsigned m = 0;
    void *v[3] = {&t, &dev, &m};
    if (g_drv.pointer_get_attributes(3, a, v, reinterpret_cast<CUdeviceptr>(p)) != CUDA_SUCCESS) {
        return false;
    }
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
    bool ok = g_drv.memcpy(reinterpret_cast<CUdeviceptr>(dst), reinterpret_cast<CUdeviceptr>(src),
                           n) == CUDA_SUCCESS;
    // A copy from pageable host memory may return before the DMA finished: wait for it so the
    // application's next kernel, on any stream, sees the data.
    if (ok) ok = g_drv.stream_synchronize(CU_STREAM_LEGACY) == CUDA_SUCCESS;
    if (pushed) {
        CUcontext popped;
        g_drv.ctx_pop(&popped);
    }
    return ok;
}

#else // built without CUDA headers: host memory only

bool load(std::string *why) {
    if (why) *why = "twohop was built without CUDA support";
    return false;
}
bool is_device_memory(const void *) { return false; }
bool copy(void *, const void *, std::size_t) { return false; }

#endif

} // namespace cuda
} // namespace twohop
