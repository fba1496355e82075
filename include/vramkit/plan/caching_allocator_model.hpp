// A model of PyTorch's CUDACachingAllocator (c10/cuda/CUDACachingAllocator.cpp) for one stream:
// 512 B rounding; requests <= 1 MiB served from 2 MiB segments, 1-10 MiB from 20 MiB segments,
// larger ones from segments rounded up to 2 MiB; best fit by (size, address) among cached free
// blocks of the same pool; a block is split when the remainder is >= 512 B (small pool) or
// > 1 MiB (large pool); freed blocks merge only with free neighbours of the same segment; segments
// are never released (no memory pressure modelled). Not thread-safe.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace vramkit::plan {

/// Replays malloc/free and tracks allocated and reserved bytes as torch.cuda.memory_stats would.
class caching_allocator_model {
 public:
  static constexpr std::uint64_t min_block = 512;
  static constexpr std::uint64_t small_size = 1u << 20;
  static constexpr std::uint64_t small_buffer = 2u << 20;
  static constexpr std::uint64_t min_large_alloc = 10u << 20;
  static constexpr std::uint64_t large_buffer = 20u << 20;
  static constexpr std::uint64_t round_large = 2u << 20;

  /// Size a request is rounded to (multiple of 512, at least 512).
  static std::uint64_t round_size(std::uint64_t bytes) noexcept;
  /// Size of the segment cudaMalloc'd for a request of `rounded` bytes when no cached block fits.
  static std::uint64_t segment_size(std::uint64_t rounded) noexcept;

  /// Allocates `bytes`; returns a handle for free(). Zero-byte requests get a handle and no block.
  std::uint32_t malloc(std::uint64_t bytes);
  /// malloc(bytes) immediately followed by its free, without the block bookkeeping: the state
  /// after it is the same (the block merges back whole; a segment created for it stays cached).
  /// Returns the bytes the block would have counted as allocated.
  std::uint64_t transient(std::uint64_t bytes);
  /// Frees a handle returned by malloc (a handle freed twice is a logic_error).
  void free(std::uint32_t handle);

  [[nodiscard]] std::uint64_t allocated_bytes() const noexcept { return allocated_; }
  [[nodiscard]] std::uint64_t reserved_bytes() const noexcept { return reserved_; }
  [[nodiscard]] std::uint64_t peak_allocated_bytes() const noexcept { return peak_allocated_; }
  [[nodiscard]] std::uint64_t peak_reserved_bytes() const noexcept { return peak_reserved_; }
  [[nodiscard]] std::size_t segment_count() const noexcept { return segments_; }
  /// The allocator's state: every block of every segment (address, size, and free or the handle
  /// of the allocation in it) plus the counters. Two equal states evolve identically under equal
  /// malloc/free sequences, which lets a caller skip repeated identical work.
  [[nodiscard]] std::vector<std::uint64_t> state() const;
  /// Restarts the peaks at the current figures (torch.cuda.reset_peak_memory_stats).
  void reset_peaks() noexcept {
    peak_allocated_ = allocated_;
    peak_reserved_ = reserved_;
  }

 private:
  struct block {
    std::uint64_t addr = 0, size = 0;
    std::int32_t prev = -1, next = -1;
    std::uint32_t owner = 0;  ///< handle of the live allocation in it
    bool free = false, small = false, live = false;
  };
  /// Free blocks of one pool ordered by (size, address) like PyTorch's BlockComparatorSize.
  /// Blocks of one size share a bucket; a plan has few distinct sizes (tens) and up to a hundred
  /// blocks of each, so buckets sit in a vector sorted by size and each holds a min-heap of
  /// addresses. Removing a block that merged with a neighbour only lowers its bucket's count: its
  /// heap entry goes stale and is dropped when it surfaces (entries are checked against the block).
  class free_pool {
   public:
    /// The lowest-address block of the smallest size >= `size`, left in place; -1 if none.
    /// `valid(block, size, addr)` says whether a heap entry still describes a free block.
    template <typename Valid>
    std::int32_t peek_best(std::uint64_t size, Valid&& valid);
    /// As peek_best, and removed from the pool.
    template <typename Valid>
    std::int32_t take_best(std::uint64_t size, Valid&& valid);
    void insert(std::uint64_t size, std::uint64_t addr, std::int32_t b);
    /// Forgets one free block of `size` (its heap entry is left to go stale).
    void erase(std::uint64_t size);

   private:
    struct item {
      std::uint64_t addr;
      std::int32_t block;
      bool operator>(const item& o) const noexcept { return addr > o.addr; }
    };
    struct bucket {
      std::uint64_t size;
      std::uint32_t heap;   ///< index into heaps_
      std::uint32_t count;  ///< free blocks of this size (heap entries may be more: stale ones)
    };
    std::vector<bucket>::iterator find(std::uint64_t size);
    void drop(std::vector<bucket>::iterator it);
    std::vector<bucket> buckets_;            ///< ascending size, none empty
    std::vector<std::vector<item>> heaps_;   ///< per bucket, min-heap on address
    std::vector<std::uint32_t> spare_heaps_;
    std::size_t hint_ = 0;  ///< position find() returned last
  };
  std::int32_t new_block();
  std::int32_t new_segment(std::uint64_t size, bool small);
  static bool splits(bool small, std::uint64_t remaining) noexcept;
  [[nodiscard]] bool is_free_block(std::int32_t i, std::uint64_t size, std::uint64_t addr) const noexcept;
  void insert_free(std::int32_t b);
  void erase_free(std::int32_t b);

  std::vector<block> blocks_;
  std::vector<std::int32_t> segment_heads_;  ///< first block of each segment, in address order
  std::vector<std::int32_t> spare_;
  std::vector<std::int32_t> handle_block_;
  free_pool small_pool_, large_pool_;
  std::uint64_t next_addr_ = 0;
  std::uint64_t allocated_ = 0, reserved_ = 0, peak_allocated_ = 0, peak_reserved_ = 0;
  std::size_t segments_ = 0;
};

}  // namespace vramkit::plan
