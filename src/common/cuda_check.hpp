// CUDA return-code checks for vramkit's own CUDA code (internal; includes cuda_runtime.h).
// VRAMKIT_CUDA_TRY throws vramkit::cuda_error (or out_of_memory for cudaErrorMemoryAllocation);
// VRAMKIT_CUDA_ASSERT is the destructor-safe form: it reports to stderr and carries on.
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <string>

#include "vramkit/core/error.hpp"

namespace vramkit::detail {

[[noreturn]] inline void throw_cuda_error(cudaError_t status, const char* call, const char* file,
                                          int line) {
  (void)cudaGetLastError();  // clear the sticky state of a non-fatal error
  std::string message = std::string("CUDA error ") + cudaGetErrorName(status) + " (" +
                        cudaGetErrorString(status) + ") in " + call + " at " + file + ":" +
                        std::to_string(line);
  if (status == cudaErrorMemoryAllocation) throw out_of_memory(0, call, message);
  throw cuda_error(static_cast<int>(status), message);
}

inline void report_cuda_error(cudaError_t status, const char* call, const char* file,
                              int line) noexcept {
  (void)cudaGetLastError();
  std::fprintf(stderr, "vramkit: CUDA error %s in %s at %s:%d\n", cudaGetErrorName(status), call,
               file, line);
}

}  // namespace vramkit::detail

#define VRAMKIT_CUDA_TRY(call)                                                         \
  do {                                                                                 \
    const cudaError_t vramkit_status_ = (call);                                        \
    if (vramkit_status_ != cudaSuccess)                                                \
      ::vramkit::detail::throw_cuda_error(vramkit_status_, #call, __FILE__, __LINE__); \
  } while (0)

#define VRAMKIT_CUDA_ASSERT(call)                                                       \
  do {                                                                                  \
    const cudaError_t vramkit_status_ = (call);                                         \
    if (vramkit_status_ != cudaSuccess)                                                 \
      ::vramkit::detail::report_cuda_error(vramkit_status_, #call, __FILE__, __LINE__); \
  } while (0)
