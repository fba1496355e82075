// vmm_pool_resource: a stream-ordered caching pool on the device's virtual memory management
// (cuMemAddressReserve / cuMemCreate / cuMemMap). Two address ranges (small requests <= 1 MiB, and
// the rest) are reserved once and grow in place, granule by granule, so segments never multiply.
// When a request fits no free block, growth creates granules while the pool holds less than
// growth_slack above its highest allocation; past that it first unmaps the physical granules that
// lie wholly in free space anywhere in the pool and maps them where the request needs them
// (remapping instead of reserving more); only the shortfall is created. Remaps that recur stop:
// those that move memory back to where an earlier remap took it from, or move it a second time,
// raise the allowance granule by granule up to growth_slack_max, and a growth remapped at the same
// point of a repeated step max_repeated_remaps times creates its granules from then on, so that a
// training loop's steps stop mapping after a few (docs/mr.md). Free blocks, best
// fit, per-stream lists and cross-stream reuse through events work as in pool_resource, whose fast
// path this shares. Thread-safe: one mutex; released only around host synchronization.
#pragma once

#include <cstddef>
#include <limits>
#include <memory>
#include <string>

#include "vramkit/core/units.hpp"
#include "vramkit/mr/caching_pool.hpp"
#include "vramkit/mr/detail/stream_pool_resource.hpp"
#include "vramkit/mr/memory_resource.hpp"
#include "vramkit/mr/memory_summary.hpp"
#include "vramkit/mr/pool_layout.hpp"
#include "vramkit/mr/pool_resource.hpp"

namespace vramkit::mr {

namespace pimpl {
struct vmm_pool_state;  // defined in the source file
}

/// Settings of a virtual-memory pool. Sizes in bytes.
struct vmm_pool_options {
  std::size_t rounding = 512;        ///< every request is rounded up to a multiple (power of 2)
  std::size_t small_size = 1 * MiB;  ///< requests up to this use the small range
  /// Address space reserved for each of the two ranges; 0 = twice the device's memory.
  std::size_t address_space_bytes = 0;
  /// Upper bound on physical memory held (mapped or cached); past it allocation throws
  /// out_of_memory (VRAMKIT_POOL_MAXIMUM in the C API and the PyTorch allocator).
  std::size_t maximum_size = std::numeric_limits<std::size_t>::max();
  /// Physical memory the pool may hold above the most it ever handed out at once, as a fraction,
  /// before a growth unmaps free granules elsewhere (remaps) instead of creating new ones. 0 keeps
  /// the pool tightest and remaps most; 0.02 (VRAMKIT_POOL_SLACK) removed the remapping that a
  /// repeated training step otherwise pays on every step, for at most 2% more memory.
  double growth_slack = 0.02;
  /// Most slack the allowance reaches when remaps recur (VRAMKIT_POOL_SLACK_MAX): every granule
  /// a remap moves back or moves again adds one granule to growth_slack, up to this fraction of
  /// the highest allocation (trim() restarts it). At or below growth_slack: no adaptation.
  double growth_slack_max = 0.03;
  /// Times the same growth (a request of the same size arriving with the same bytes allocated and
  /// about the same memory held: the same point of a repeated step) is met by remapping; past
  /// that, growth there creates granules when the pool stays within growth_slack + growth_slack_max
  /// of its highest allocation or the growth alone exceeds growth_slack
  /// (VRAMKIT_POOL_REMAP_REPEATS). 0 = no limit. trim() and reaching maximum_size start remapping
  /// again.
  unsigned max_repeated_remaps = 3;
  misuse_handler on_misuse;  ///< empty = print to stderr
};

/// The pool; memory comes straight from `api`'s virtual-memory calls (throws vramkit::logic_error
/// when api is null or reports granularity 0). Alignment up to 256 bytes is honoured. Example:
///   auto dev = std::make_shared<vramkit::host_sim_device>();
///   vramkit::mr::vmm_pool_resource pool(dev);
///   void* p = pool.allocate(1000, 256, s);  ...  pool.deallocate(p, 1000, 256, s);
class vmm_pool_resource final : public detail::stream_pool_resource<pimpl::vmm_pool_state> {
 public:
  explicit vmm_pool_resource(std::shared_ptr<device_api> api, vmm_pool_options options = {});
  /// Synchronizes the device, unmaps and releases everything; blocks still allocated are lost.
  ~vmm_pool_resource() override;

  [[nodiscard]] memory_kind kind() const noexcept override { return memory_kind::device; }

  /// Synchronizes the device, unmaps every granule lying wholly in free space and releases it
  /// with every cached granule (physical bytes).
  std::size_t trim() override;
  /// The segments: maximal runs of mapped granules, small range first.
  [[nodiscard]] std::vector<pool_segment_info> layout() const override;
  /// Granules currently mapped, and cached unmapped (for tests of the accounting).
  [[nodiscard]] std::size_t mapped_granules() const;
  [[nodiscard]] std::size_t cached_granules() const;
  /// Maximal runs of mapped granules (the pool's segments).
  [[nodiscard]] std::size_t segment_count() const;
  [[nodiscard]] std::size_t granularity() const noexcept;
  [[nodiscard]] const vmm_pool_options& options() const noexcept;

 private:
  void* do_allocate(std::size_t bytes, std::size_t alignment, stream_view stream) override;
};

// Instantiated in the pool's source file, where its state is complete.
extern template class detail::stream_pool_resource<pimpl::vmm_pool_state>;

}  // namespace vramkit::mr
