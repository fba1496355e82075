// cuda_async_resource: stream-ordered device memory from a CUDA memory pool of its own
// (cudaMemPoolCreate + cudaMallocFromPoolAsync / cudaFreeAsync), with a release threshold that
// keeps freed memory in the pool (default: never release at synchronization). Always declared; in
// a build without CUDA or on a machine without a usable GPU the constructor throws vramkit::error
// with the reason. Thread-safe.
#pragma once

#include <cstddef>
#include <limits>
#include <memory>
#include <optional>

#include "vramkit/mr/detail/pimpl_resource.hpp"
#include "vramkit/mr/memory_resource.hpp"

namespace vramkit::mr {

namespace pimpl {
struct cuda_async_state;  // defined in the source file
}

struct cuda_async_options {
  /// Bytes allocated and freed at construction so the first allocations are warm ("priming").
  std::size_t initial_pool_size = 0;
  /// cudaMemPoolAttrReleaseThreshold: memory the pool keeps across synchronizations.
  std::size_t release_threshold = std::numeric_limits<std::size_t>::max();
  /// Device ordinal; nullopt = the current device.
  std::optional<int> device;
};

/// cudaMallocFromPoolAsync on its own pool of the chosen device.
class cuda_async_resource final
    : public detail::pimpl_resource<memory_resource, pimpl::cuda_async_state> {
 public:
  /// Throws vramkit::error naming the reason when there is no usable GPU or no CUDA build.
  explicit cuda_async_resource(cuda_async_options options = {});
  ~cuda_async_resource() override;

  [[nodiscard]] memory_kind kind() const noexcept override { return memory_kind::device; }
  [[nodiscard]] std::string name() const override { return "cuda_async"; }
  /// The cudaMemPool_t, as an opaque handle.
  [[nodiscard]] void* pool_handle() const noexcept;
  /// Releases pooled memory above `keep_bytes` back to the driver (cudaMemPoolTrimTo).
  void trim_to(std::size_t keep_bytes);
  /// Bytes the CUDA pool holds (cudaMemPoolAttrReservedMemCurrent).
  [[nodiscard]] std::size_t reserved_bytes() const;
  /// Adds the CUDA pool's reserved (current, high-water) and used bytes to a summary.
  void describe(summary_builder& builder) const override;
  /// Resets the CUDA pool's reserved high-water mark.
  void reset_peak() const noexcept override;

 private:
  void* do_allocate(std::size_t bytes, std::size_t alignment, stream_view stream) override;
  void do_deallocate(void* ptr, std::size_t bytes, std::size_t alignment,
                     stream_view stream) noexcept override;
};

}  // namespace vramkit::mr
