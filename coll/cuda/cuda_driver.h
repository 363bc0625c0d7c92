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

} // namespace cuda
} // namespace twohop

#endif
