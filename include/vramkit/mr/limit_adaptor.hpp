// limit_adaptor: a byte budget in front of an upstream. A request that would take the bytes in use
// through this layer past the limit throws vramkit::out_of_memory whose message carries the
// memory_summary() of the stack. Thread-safe (one atomic counter on the hot path).
#pragma once

#include <atomic>
#include <memory>

#include "vramkit/mr/adaptor_resource.hpp"
#include "vramkit/mr/memory_summary.hpp"

namespace vramkit::mr {

/// Charges each request rounded up to 256 bytes. Example:
///   limit_adaptor budget(pool, 8 * GiB);   // budget.allocate(9 * GiB) throws out_of_memory
class limit_adaptor final : public adaptor_resource {
 public:
  limit_adaptor(std::shared_ptr<memory_resource> upstream, std::size_t limit_bytes);

  [[nodiscard]] std::string name() const override;
  void describe(summary_builder& builder) const override;
  void reset_peak() const noexcept override;

  [[nodiscard]] std::size_t limit_bytes() const noexcept { return limit_; }
  [[nodiscard]] std::size_t used_bytes() const noexcept { return used_.load(); }

 private:
  void* do_allocate(std::size_t bytes, std::size_t alignment, stream_view stream) override;
  void do_deallocate(void* ptr, std::size_t bytes, std::size_t alignment,
                     stream_view stream) noexcept override;

  std::size_t limit_;
  std::atomic<std::size_t> used_{0};
  mutable std::atomic<std::size_t> peak_{0};
  std::atomic<std::uint64_t> rejections_{0};
};

}  // namespace vramkit::mr
