// A model of PyTorch's CUDACachingAllocator with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
// (c10/cuda/CUDACachingAllocator.cpp, Note [Expandable Segments]): one growable segment per
// (pool, stream), the small pool (requests <= 1 MiB) mapping 2 MiB pages and the large pool 20 MiB
// pages; 512 B rounding; best fit by (size, address) among free mapped blocks of the pool and
// stream, where a block bordering unmapped space counts as the size it could grow to (as
// get_free_block does), split whenever 512 B remain; with no fit, the lowest unmapped range (with
// the free block just below it) that can hold the request gets just enough pages mapped; free
// merges with free neighbours that are mapped alike; pages are unmapped only under memory pressure:
// with a capacity set, a mapping that would not fit first unmaps every page lying wholly in free
// space (release_cached_blocks). Not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <vector>

namespace vramkit::plan {

/// Replays malloc/free and tracks allocated and reserved (mapped) bytes.
class expandable_segments_model {
 public:
  static constexpr std::uint64_t min_block = 512;
  static constexpr std::uint64_t small_size = 1u << 20;
  static constexpr std::uint64_t small_page = 2u << 20;
  static constexpr std::uint64_t large_page = 20u << 20;

  /// Allocates `bytes` on `stream`; returns a handle for free(). Zero-byte requests get a handle
  /// and no block.
  std::uint32_t malloc(std::uint64_t bytes, std::uint32_t stream = 0);
  /// Frees a handle of malloc (a handle freed twice is a logic_error).
  void free(std::uint32_t handle);

  [[nodiscard]] std::uint64_t allocated_bytes() const noexcept { return allocated_; }
  [[nodiscard]] std::uint64_t reserved_bytes() const noexcept { return reserved_; }
  [[nodiscard]] std::uint64_t peak_allocated_bytes() const noexcept { return peak_allocated_; }
  [[nodiscard]] std::uint64_t peak_reserved_bytes() const noexcept { return peak_reserved_; }
  /// Expandable segments created (one per pool and stream that ever allocated).
  [[nodiscard]] std::size_t segment_count() const noexcept { return segments_.size(); }
  /// Pages mapped and unmapped so far.
  [[nodiscard]] std::uint64_t pages_mapped() const noexcept { return pages_mapped_; }
  [[nodiscard]] std::uint64_t pages_unmapped() const noexcept { return pages_unmapped_; }

  /// Bytes the allocator may map; 0 = no limit. A mapping past it first unmaps every free page;
  /// if it still does not fit the request counts as out of memory and is served anyway, so the
  /// rest of the trace can be measured.
  void set_capacity(std::uint64_t bytes) noexcept { capacity_ = bytes; }
  [[nodiscard]] std::size_t cache_flushes() const noexcept { return flushes_; }
  [[nodiscard]] std::size_t out_of_memory_count() const noexcept { return ooms_; }

 private:
  struct block {
    std::uint64_t addr = 0, size = 0;
    std::int32_t prev = -1, next = -1;
    std::uint32_t segment = 0;
    bool free = true, mapped = false;
  };
  struct segment {
    std::uint64_t page = 0;
    std::uint64_t base = 0;
    std::vector<bool> pages;  ///< mapped pages
    std::int32_t first = -1;
  };
  using size_key = std::pair<std::uint64_t, std::uint64_t>;  ///< (size, addr)

  std::uint32_t segment_for(bool small, std::uint32_t stream);
  std::int32_t new_block();
  void list_free(std::int32_t b);
  void unlist_free(std::int32_t b);
  std::int32_t merge(std::int32_t b);
  std::int32_t split(std::int32_t b, std::uint64_t size);
  bool map_pages(std::uint32_t seg, std::uint64_t from, std::uint64_t to);
  void release_free_pages();
  /// Size of the free mapped block at `addr` plus the unmapped range right after it.
  [[nodiscard]] std::uint64_t growable_size(std::uint64_t addr) const;

  std::vector<block> blocks_;
  std::vector<std::int32_t> spare_;
  std::vector<segment> segments_;
  std::map<std::uint64_t, std::uint32_t> segment_of_key_;  ///< (stream << 1 | small) -> segment
  std::vector<std::set<size_key>> free_mapped_;            ///< per segment
  std::vector<std::map<std::uint64_t, std::int32_t>> unmapped_;  ///< per segment, by address
  std::map<std::uint64_t, std::int32_t> by_addr_;                ///< free mapped, by address
  std::vector<std::int32_t> handle_block_;
  std::uint64_t allocated_ = 0, reserved_ = 0, peak_allocated_ = 0, peak_reserved_ = 0;
  std::uint64_t pages_mapped_ = 0, pages_unmapped_ = 0;
  std::uint64_t capacity_ = 0;
  std::size_t flushes_ = 0, ooms_ = 0;
};

}  // namespace vramkit::plan
