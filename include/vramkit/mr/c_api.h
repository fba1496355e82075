/* c_api.h: the C ABI of vramkit's device memory pool, one pool per device, for PyTorch's
 * CUDAPluggableAllocator and any C caller. Streams are cudaStream_t passed as void* (no CUDA
 * headers here). Nothing but vramkit_torch_malloc throws across this boundary: allocation failure
 * returns NULL after printing the message (with the pool's summary) to stderr. The pool's options
 * come from environment variables read at the first call for a device (see
 * docs/torch-allocator.md). All functions are thread-safe. */
#ifndef VRAMKIT_MR_C_API_H
#define VRAMKIT_MR_C_API_H

#include <stddef.h>
#include <sys/types.h>

#if defined(__GNUC__)
#define VRAMKIT_C_API __attribute__((visibility("default")))
#else
#define VRAMKIT_C_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Allocates `size` bytes on `device`, ordered on `stream`; NULL for size <= 0 or on failure. */
VRAMKIT_C_API void* vramkit_malloc(ssize_t size, int device, void* stream);
/* For PyTorch's CUDAPluggableAllocator, not for C callers: as vramkit_malloc, but a failure throws
 * a C++ exception instead of returning NULL (PyTorch keeps a NULL as a tensor's data pointer).
 * Out of memory throws c10::OutOfMemoryError (built from the libc10 loaded in the process), which
 * PyTorch raises as torch.OutOfMemoryError with the message and the pool's summary; without
 * libc10, and for other failures, a std::exception that PyTorch raises as RuntimeError. `device`
 * must be the calling thread's current device (PyTorch always passes it). */
VRAMKIT_C_API void* vramkit_torch_malloc(ssize_t size, int device, void* stream);
/* The message of the most recent failed allocation of the process (any thread, any device),
 * empty if none; same buffer rules as vramkit_memory_summary. */
VRAMKIT_C_API size_t vramkit_last_error(char* buf, size_t cap);
/* Frees memory from vramkit_malloc or vramkit_torch_malloc; `size` and `stream` as at allocation
 * (PyTorch passes them). */
VRAMKIT_C_API void vramkit_free(void* ptr, ssize_t size, int device, void* stream);
/* Writes the memory_summary() table of the device's pool into buf (NUL-terminated, truncated to
 * cap - 1) and returns its full length, as snprintf does. */
VRAMKIT_C_API size_t vramkit_memory_summary(int device, char* buf, size_t cap);
/* The same figures as JSON (keys after torch.cuda.memory_stats()); same buffer rules. */
VRAMKIT_C_API size_t vramkit_memory_stats_json(int device, char* buf, size_t cap);
/* torch.cuda.memory._snapshot()'s structure as JSON: the device's segments with their blocks, and
 * device_count device traces (the device's from VRAMKIT_TRACE_FILE's tracer when it is on, else
 * empty); same buffer rules. */
VRAMKIT_C_API size_t vramkit_memory_snapshot_json(int device, int device_count, char* buf,
                                                  size_t cap);
/* Sets every peak figure of the device's pool to its current value. */
VRAMKIT_C_API void vramkit_reset_peak(int device);
/* Returns the device's wholly free cached memory to the driver (the vmm pool: every free granule;
 * the classic pool: its wholly free chunks, after synchronizing the device when they came from
 * cudaMallocAsync); 0 on success, -1 on failure. */
VRAMKIT_C_API int vramkit_trim(int device);

#ifdef __cplusplus
}
#endif

#endif /* VRAMKIT_MR_C_API_H */
