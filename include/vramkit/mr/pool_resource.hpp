// pool_resource: a stream-ordered caching pool over an upstream resource (after RMM's pool and
// PyTorch's caching allocator). Best fit over free blocks (the smallest that fits; among equal
// sizes the most recently freed), kept in TLSF-style size bins with O(1) insert and erase,
// splitting and coalescing of neighbours inside a chunk, a small class (requests <= 1 MiB packed
// into 2 MiB chunks) and a large class, chunks taken from the upstream as needed and given back by
// trim(). One free list per stream: a block freed on stream S is reusable on S at once; another
// stream takes it only after waiting (on the device, never the host) for an event recorded on S.
// Thread-safe: one mutex, never held across an upstream allocate/free or a host synchronization.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>

#include "vramkit/core/units.hpp"
#include "vramkit/mr/caching_pool.hpp"
#include "vramkit/mr/detail/stream_pool_resource.hpp"
#include "vramkit/mr/memory_resource.hpp"
#include "vramkit/mr/memory_summary.hpp"
#include "vramkit/mr/pool_layout.hpp"

namespace vramkit::mr {

namespace pimpl {
struct pool_resource_state;  // defined in the source file
}

/// What deallocate found wrong. Deallocate is noexcept, so misuse is reported, never thrown.
struct misuse_report {
  enum class kind_t { foreign_pointer, wrong_size } kind = kind_t::foreign_pointer;
  const void* ptr = nullptr;
  std::size_t bytes = 0;           ///< size passed to deallocate
  std::size_t expected_bytes = 0;  ///< size of the allocation (wrong_size only)
  std::string resource;
  /// One line: "vramkit pool(host_sim): deallocate of 0x... (1024 bytes): pointer not owned ...".
  [[nodiscard]] std::string message() const;
};

/// Called (outside the pool's lock) for each misuse; the default prints message() to stderr.
/// The pool stays intact: a foreign pointer is ignored, a wrong-size free leaves the block
/// allocated (leaked rather than corrupted).
using misuse_handler = std::function<void(const misuse_report&)>;

/// Settings of a pool. Sizes in bytes.
struct pool_options {
  std::size_t rounding = 512;        ///< every request is rounded up to a multiple (power of 2)
  std::size_t small_size = 1 * MiB;  ///< requests up to this are "small"
  std::size_t small_chunk_size = 2 * MiB;  ///< small requests are packed into chunks of this size
  std::size_t large_chunk_size =
      20 * MiB;                     ///< first chunk for large requests below large_exact_size
  double large_chunk_growth = 1.0;  ///< each further such chunk is this much larger ...
  std::size_t large_chunk_max = 64 * MiB;   ///< ... up to this
  std::size_t large_exact_size = 10 * MiB;  ///< requests from here get a chunk of their own size
  std::size_t chunk_rounding = 2 * MiB;     ///< chunk sizes are multiples of this
  /// A large block is split only when at least this much would remain (smaller tails stay attached,
  /// as PyTorch does); small blocks split whenever `rounding` bytes remain.
  std::size_t large_min_split_remainder = 1 * MiB;
  /// Blocks of this size or more are never split and serve only requests of this size or more
  /// that waste less than max_oversize_waste (PyTorch's max_split_size_mb).
  std::size_t max_split = std::numeric_limits<std::size_t>::max();
  std::size_t max_oversize_waste = 20 * MiB;
  /// Before taking a new chunk, return wholly free chunks of the same class to the upstream,
  /// each freed on the stream whose list holds it: up to the new chunk's size (`release_on_grow`),
  /// or none. Only for stream-ordered upstreams (cudaMallocAsync), whose free needs no host
  /// synchronization and whose own pool hands the memory out again.
  enum class growth_policy { keep_cached, release_on_grow } growth = growth_policy::keep_cached;
  /// Taken from the upstream at construction (one large chunk), 0 = none.
  std::size_t initial_size = 0;
  /// Upper bound on the bytes held from the upstream.
  std::size_t maximum_size = std::numeric_limits<std::size_t>::max();
  misuse_handler on_misuse;  ///< empty = print to stderr
};

/// The pool. `api` orders reuse across streams (events, stream waits) and must be the device API
/// whose streams callers pass; it may be null only when the memory is never used by stream work
/// (plain host memory). Alignment up to 256 bytes is honoured; more throws vramkit::logic_error.
/// Example:
///   auto dev = std::make_shared<vramkit::host_sim_device>();
///   auto pool = std::make_shared<pool_resource>(std::make_shared<device_api_resource>(dev), dev);
///   void* p = pool->allocate(1000, 256, s);  ...  pool->deallocate(p, 1000, 256, s);
class pool_resource final : public detail::stream_pool_resource<pimpl::pool_resource_state> {
 public:
  pool_resource(std::shared_ptr<memory_resource> upstream, std::shared_ptr<device_api> api,
                pool_options options = {});
  /// Synchronizes the device and returns every chunk to the upstream; blocks still allocated are
  /// lost.
  ~pool_resource() override;

  [[nodiscard]] memory_kind kind() const noexcept override;
  [[nodiscard]] const memory_resource* upstream() const noexcept override;

  /// Returns every chunk with no allocated block to the upstream, after synchronizing the device
  /// (so pending frees on every stream have completed).
  std::size_t trim() override;
  /// One segment per chunk.
  [[nodiscard]] std::vector<pool_segment_info> layout() const override;
  /// The free blocks of each chunk, in address order; for tests of coalescing.
  [[nodiscard]] std::size_t free_block_count() const;
  [[nodiscard]] std::size_t chunk_count() const;
  [[nodiscard]] const pool_options& options() const noexcept;

 private:
  void* do_allocate(std::size_t bytes, std::size_t alignment, stream_view stream) override;
};

// Instantiated in the pool's source file, where its state is complete.
extern template class detail::stream_pool_resource<pimpl::pool_resource_state>;

}  // namespace vramkit::mr
