// pinned_host_pool: a size-classed cache of pinned (page-locked) host memory for staging copies.
// Pinning costs milliseconds per MiB (cudaHostAlloc), so freed blocks are kept and reused; a block
// freed on a stream is reused only after an event recorded there at the free has completed (the
// copy that used it is done). A byte cap bounds what the pool holds. Thread-safe (one mutex; the
// upstream is called without it).
#pragma once

#include <memory>

#include "vramkit/core/units.hpp"
#include "vramkit/mr/detail/pimpl_resource.hpp"
#include "vramkit/mr/memory_resource.hpp"
#include "vramkit/mr/memory_summary.hpp"

namespace vramkit::mr {

namespace pimpl {
struct pinned_host_pool_state;  // defined in the source file
}

struct pinned_pool_options {
  /// Most bytes held (in use + cached); past it cached blocks are released, then out_of_memory.
  std::size_t byte_cap = 4 * GiB;
  /// Size classes are powers of two from 512 B up to this, then multiples of `large_granularity`.
  std::size_t pow2_max = 4 * MiB;
  std::size_t large_granularity = 2 * MiB;
};

/// Example:
///   auto dev = vramkit::cuda_device_api();   // or a host_sim_device in tests
///   pinned_host_pool pinned(std::make_shared<device_api_resource>(*dev, memory_kind::pinned_host),
///                           *dev, {.byte_cap = 2 * GiB});
///   void* staging = pinned.allocate(8 * MiB);  ...  pinned.deallocate(staging, 8 * MiB, 256,
///   copy_stream);
class pinned_host_pool final
    : public detail::pimpl_resource<memory_resource, pimpl::pinned_host_pool_state> {
 public:
  /// `upstream` serves pinned host memory; `api` records the free events (null: reuse at once).
  pinned_host_pool(std::shared_ptr<memory_resource> upstream, std::shared_ptr<device_api> api,
                   pinned_pool_options options = {});
  ~pinned_host_pool() override;

  [[nodiscard]] memory_kind kind() const noexcept override { return memory_kind::pinned_host; }
  [[nodiscard]] std::string name() const override;
  [[nodiscard]] const memory_resource* upstream() const noexcept override;
  void describe(summary_builder& builder) const override;
  void reset_peak() const noexcept override;

  /// The size class (bytes actually held) serving a request of `bytes`.
  [[nodiscard]] std::size_t class_size(std::size_t bytes) const noexcept;
  /// Releases every cached block whose free has completed (waits on the host for pending ones).
  std::size_t trim();
  [[nodiscard]] pool_report report() const;
  /// Bytes cached (freed, kept for reuse).
  [[nodiscard]] std::size_t cached_bytes() const;

 private:
  void* do_allocate(std::size_t bytes, std::size_t alignment, stream_view stream) override;
  void do_deallocate(void* ptr, std::size_t bytes, std::size_t alignment,
                     stream_view stream) noexcept override;
};

}  // namespace vramkit::mr
