// PyTorch's allocator under PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (Note [Expandable
// Segments] in c10/cuda/CUDACachingAllocator.cpp): one growable segment per pool and stream,
// mapped in 2 MiB pages (small pool) or 20 MiB pages (large). Best fit counts a block bordering
// unmapped space at the size it could grow to (get_free_block); any split leaving 512 B is made;
// with no fit, the lowest unmapped range that can hold the request (with the free block below
// it) gets just enough pages; free merges with neighbours mapped alike; free pages are unmapped
// only under memory pressure. Shared parts and thread-safety: allocator_model_base.hpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <vector>

#include "vramkit/plan/allocator_model_base.hpp"

namespace vramkit::plan {

/// Replays malloc/free and tracks allocated and reserved (mapped) bytes.
class expandable_segments_model : public detail::allocator_model_base {
 public:
  /// Allocates `bytes` on `stream`; returns a handle for free(). Zero-byte requests get a handle
  /// and no block.
  std::uint32_t malloc(std::uint64_t bytes, std::uint32_t stream = 0);
  /// Frees a handle of malloc (a handle freed twice is a logic_error).
  void free(std::uint32_t handle);

  /// Expandable segments created (one per pool and stream that ever allocated).
  [[nodiscard]] std::size_t segment_count() const noexcept { return segments_.size(); }
  /// Pages mapped and unmapped so far.
  [[nodiscard]] std::uint64_t pages_mapped() const noexcept { return pages_mapped_; }
  [[nodiscard]] std::uint64_t pages_unmapped() const noexcept { return pages_unmapped_; }
  // The capacity (set_capacity) bounds the mapped bytes; a mapping past it first unmaps every
  // free page.

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
  void list_free(std::int32_t b);
  void unlist_free(std::int32_t b);
  std::int32_t merge(std::int32_t b);
  std::int32_t split(std::int32_t b, std::uint64_t size);
  bool map_pages(std::uint32_t seg, std::uint64_t from, std::uint64_t to);
  void release_free_pages();
  /// Size of the free mapped block at `addr` plus the unmapped range right after it.
  [[nodiscard]] std::uint64_t growable_size(std::uint64_t addr) const;

  detail::block_list<block> blocks_;
  std::vector<segment> segments_;
  std::map<std::uint64_t, std::uint32_t> segment_of_key_;  ///< (stream << 1 | small) -> segment
  std::vector<std::set<size_key>> free_mapped_;            ///< per segment
  std::vector<std::map<std::uint64_t, std::int32_t>> unmapped_;  ///< per segment, by address
  std::map<std::uint64_t, std::int32_t> by_addr_;                ///< free mapped, by address
  std::uint64_t pages_mapped_ = 0, pages_unmapped_ = 0;
};

}  // namespace vramkit::plan
