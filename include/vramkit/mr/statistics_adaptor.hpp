// statistics_adaptor: counts what passes through it (current, peak and total bytes and
// allocations, split into small and large requests) and forwards to its upstream. Thread-safe.
#pragma once

#include <memory>
#include <mutex>

#include "vramkit/core/units.hpp"
#include "vramkit/mr/adaptor_resource.hpp"
#include "vramkit/mr/memory_summary.hpp"

namespace vramkit::mr {

/// Statistics of the requests made through this layer (requested bytes, before any rounding
/// below). Reserved memory is the pool's figure, reported by the pool's own layer. Example:
///   auto stats = std::make_shared<statistics_adaptor>(pool);
///   ...;  stats->report().bytes.all.peak
class statistics_adaptor final : public adaptor_resource {
 public:
  /// Requests up to `small_size` bytes count as small.
  explicit statistics_adaptor(std::shared_ptr<memory_resource> upstream,
                              std::size_t small_size = 1 * MiB);

  [[nodiscard]] std::string name() const override { return "statistics"; }
  void describe(summary_builder& builder) const override;
  void reset_peak() const noexcept override;

  /// A consistent snapshot of the counters.
  [[nodiscard]] statistics_report report() const;

 private:
  void* do_allocate(std::size_t bytes, std::size_t alignment, stream_view stream) override;
  void do_deallocate(void* ptr, std::size_t bytes, std::size_t alignment,
                     stream_view stream) noexcept override;

  std::size_t small_size_;
  mutable std::mutex mutex_;
  mutable statistics_report stats_;
};

}  // namespace vramkit::mr
