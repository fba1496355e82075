// cuda_async_resource over a cudaMemPool_t of its own. Compiled only in CUDA builds.
#include "vramkit/mr/cuda_async_resource.hpp"

#include <cuda_runtime.h>

#include "common/cuda_check.hpp"
#include "vramkit/core/cuda_device_api.hpp"
#include "vramkit/core/error.hpp"
#include "vramkit/mr/memory_summary.hpp"

namespace vramkit::mr {

struct pimpl::cuda_async_state {
  cudaMemPool_t pool = nullptr;
  int device = 0;
};

cuda_async_resource::cuda_async_resource(cuda_async_options options) {
  auto status = cuda_runtime_status();
  if (!status) throw error("cuda_async_resource: " + status.error().reason);
  int device = 0;
  if (options.device) {
    device = *options.device;
  } else {
    VRAMKIT_CUDA_TRY(cudaGetDevice(&device));
  }
  int supported = 0;
  VRAMKIT_CUDA_TRY(cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, device));
  if (supported == 0) {
    throw error("cuda_async_resource: device " + std::to_string(device) +
                " does not support stream-ordered memory pools");
  }
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.handleTypes = cudaMemHandleTypeNone;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = device;
  VRAMKIT_CUDA_TRY(cudaMemPoolCreate(&impl_->pool, &props));
  impl_->device = device;
  unsigned long long threshold = options.release_threshold;
  VRAMKIT_CUDA_TRY(
      cudaMemPoolSetAttribute(impl_->pool, cudaMemPoolAttrReleaseThreshold, &threshold));
  if (options.initial_pool_size > 0) {
    void* p = nullptr;
    VRAMKIT_CUDA_TRY(cudaMallocFromPoolAsync(&p, options.initial_pool_size, impl_->pool, nullptr));
    VRAMKIT_CUDA_TRY(cudaFreeAsync(p, nullptr));
    VRAMKIT_CUDA_TRY(cudaStreamSynchronize(nullptr));
  }
}

cuda_async_resource::~cuda_async_resource() {
  if (impl_->pool != nullptr) {
    VRAMKIT_CUDA_ASSERT(cudaDeviceSynchronize());
    VRAMKIT_CUDA_ASSERT(cudaMemPoolDestroy(impl_->pool));
  }
}

void* cuda_async_resource::pool_handle() const noexcept { return impl_->pool; }

void cuda_async_resource::trim_to(std::size_t keep_bytes) {
  VRAMKIT_CUDA_TRY(cudaMemPoolTrimTo(impl_->pool, keep_bytes));
}

std::size_t cuda_async_resource::reserved_bytes() const {
  unsigned long long v = 0;
  VRAMKIT_CUDA_TRY(cudaMemPoolGetAttribute(impl_->pool, cudaMemPoolAttrReservedMemCurrent, &v));
  return static_cast<std::size_t>(v);
}

void* cuda_async_resource::do_allocate(std::size_t bytes, std::size_t alignment,
                                       stream_view stream) {
  if (bytes == 0) return nullptr;
  if (alignment > default_alignment) {
    throw logic_error("cuda_async: alignment " + std::to_string(alignment) +
                      " not supported (up to 256)");
  }
  void* p = nullptr;
  const cudaError_t st =
      cudaMallocFromPoolAsync(&p, bytes, impl_->pool, static_cast<cudaStream_t>(stream.handle));
  if (st == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    throw out_of_memory(bytes, "cuda_async", "cudaMallocFromPoolAsync: out of device memory");
  }
  VRAMKIT_CUDA_TRY(st);
  return p;
}

void cuda_async_resource::do_deallocate(void* ptr, std::size_t, std::size_t,
                                        stream_view stream) noexcept {
  if (ptr != nullptr) {
    VRAMKIT_CUDA_ASSERT(cudaFreeAsync(ptr, static_cast<cudaStream_t>(stream.handle)));
  }
}

void cuda_async_resource::describe(summary_builder& builder) const {
  builder.add_layer("cuda_async");
  unsigned long long reserved = 0;
  unsigned long long high = 0;
  unsigned long long used = 0;
  if (cudaMemPoolGetAttribute(impl_->pool, cudaMemPoolAttrReservedMemCurrent, &reserved) ==
          cudaSuccess &&
      cudaMemPoolGetAttribute(impl_->pool, cudaMemPoolAttrReservedMemHigh, &high) == cudaSuccess &&
      cudaMemPoolGetAttribute(impl_->pool, cudaMemPoolAttrUsedMemCurrent, &used) == cudaSuccess) {
    upstream_report r;
    r.resource = "cuda_async (CUDA memory pool)";
    r.reserved_bytes = reserved;
    r.reserved_peak_bytes = high;
    r.used_bytes = used;
    builder.add(r);
  } else {
    (void)cudaGetLastError();
  }
}

void cuda_async_resource::reset_peak() const noexcept {
  unsigned long long zero = 0;  // resets the high-water mark to the current value
  if (cudaMemPoolSetAttribute(impl_->pool, cudaMemPoolAttrReservedMemHigh, &zero) != cudaSuccess) {
    (void)cudaGetLastError();
  }
}

}  // namespace vramkit::mr
