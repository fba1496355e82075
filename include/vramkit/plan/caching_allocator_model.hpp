// A model of PyTorch's CUDACachingAllocator (c10/cuda/CUDACachingAllocator.cpp) for one stream.
// Requests <= 1 MiB come from 2 MiB segments, 1-10 MiB from 20 MiB ones, larger ones from
// segments rounded up to 2 MiB, each placed below the last (as cudaMalloc placed them on the
// H200); best fit by (size, address) within a pool; a split leaves >= 512 B (small pool) or > 1
// MiB (large); frees merge with free neighbours of their segment; under memory pressure every
// wholly free segment is released first (release_cached_blocks). Shared parts and thread-safety:
// allocator_model_base.hpp.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "vramkit/plan/allocator_model_base.hpp"

namespace vramkit::plan {

/// Replays malloc/free and tracks allocated and reserved bytes as torch.cuda.memory_stats would.
class caching_allocator_model : public detail::allocator_model_base {
 public:
  static constexpr std::uint64_t min_large_alloc = 10u << 20;
  static constexpr std::uint64_t round_large = 2u << 20;

  /// Size of the segment cudaMalloc'd for a request of `rounded` bytes when no cached block fits.
  static constexpr std::uint64_t segment_size(std::uint64_t rounded) noexcept {
    if (rounded <= small_size) return small_buffer;
    if (rounded < min_large_alloc) return large_buffer;
    return (rounded + round_large - 1) / round_large * round_large;
  }

  /// Allocates `bytes`; returns a handle for free(). Zero-byte requests get a handle and no block.
  std::uint32_t malloc(std::uint64_t bytes);
  /// malloc(bytes) immediately followed by its free, without the block bookkeeping: the state
  /// after it is the same (the block merges back whole; a segment created for it stays cached).
  /// Returns the bytes the block would have counted as allocated.
  std::uint64_t transient(std::uint64_t bytes);
  /// Frees a handle returned by malloc (a handle freed twice is a logic_error).
  void free(std::uint32_t handle);

  [[nodiscard]] std::size_t segment_count() const noexcept { return segments_; }
  // The capacity (set_capacity: the GPU's memory less the CUDA context) bounds the bytes held in
  // segments; a segment that would go past it first flushes the cache (every wholly free segment
  // is released).
  /// The allocator's state: every block of every segment (address, size, and free or the handle
  /// of the allocation in it) plus the counters. Two equal states evolve identically under equal
  /// malloc/free sequences, which lets a caller skip repeated identical work.
  [[nodiscard]] std::vector<std::uint64_t> state() const;
  /// Base address of the segment holding live allocation `handle`, 0 if none (a linear search,
  /// for diagnostics).
  [[nodiscard]] std::uint64_t segment_of(std::uint32_t handle) const;
  /// Address of the block holding live allocation `handle`, 0 if none (a linear search, for
  /// diagnostics).
  [[nodiscard]] std::uint64_t address_of(std::uint32_t handle) const;
  /// Back to the state of a new model, keeping the memory of its containers for the next replay.
  void clear() noexcept;
  /// Restarts the peaks at the current figures (torch.cuda.reset_peak_memory_stats).
  void reset_peaks() noexcept {
    peak_allocated_ = allocated_;
    peak_reserved_ = reserved_;
  }

 private:
  struct block {
    std::uint64_t addr = 0, size = 0;
    std::int32_t prev = -1, next = -1;    ///< neighbours in the segment, by address
    std::int32_t fprev = -1, fnext = -1;  ///< neighbours in the free pool's bin list
    std::uint32_t owner = 0;              ///< handle of the live allocation in it
    std::uint16_t bin = 0;                ///< the free pool bin it is listed in
    bool free = false, small = false, live = false;
  };
  /// Free blocks of one pool, searched in PyTorch's order: smallest size >= the request, then
  /// lowest address (BlockComparatorSize). Sizes map to 64 bins per power of two (two-level
  /// segregated fit: the bin index is monotone in size); each bin is a list of blocks linked
  /// through the blocks themselves and kept in ascending (size, address) order, and a two-level
  /// bitmap finds the next non-empty bin in constant time. The best fit is the first block >= the
  /// request in its own bin, else the head of the next non-empty bin. Removal needs no search; a
  /// sorted insert goes first or last in its bin when it can (most inserts), else closes in from
  /// the block the bin listed last and the bin's head or tail at once, since a bin can hold
  /// dozens of equal-size blocks (one per layer) and consecutive frees and splits land close
  /// together.
  class free_pool {
   public:
    free_pool() noexcept {
      for (auto& h : head_) h = -1;
      for (auto& h : hint_) h = -1;
      for (auto& h : tail_) h = -1;
    }
    /// The best-fitting block for `size`, left in place; -1 if none.
    [[nodiscard]] std::int32_t peek_best(const std::vector<block>& blocks,
                                         std::uint64_t size) const;
    /// As peek_best, and removed from the pool.
    std::int32_t take_best(std::vector<block>& blocks, std::uint64_t size);
    /// Lists block `b` (its size and address set).
    void insert(std::vector<block>& blocks, std::int32_t b);
    /// Unlists block `b`, which must be listed.
    void erase(std::vector<block>& blocks, std::int32_t b);
    void clear() noexcept;

   private:
    static constexpr int sub_bits = 6;  ///< 64 bins per power of two
    static constexpr int levels = 64;
    static constexpr unsigned bin_count = levels << sub_bits;
    static unsigned bin_of(std::uint64_t size) noexcept;
    void mark(unsigned bin, bool on) noexcept;
    std::int32_t head_[bin_count];         ///< first (smallest) block of each bin, or -1
    std::int32_t hint_[bin_count];         ///< the block of each bin listed last, or -1
    std::int32_t tail_[bin_count];         ///< last (largest) block of each bin, or -1
    std::uint64_t level_bits_ = 0;         ///< bit l: some bin of level l is non-empty
    std::uint64_t bin_bits_[levels] = {};  ///< per level, bit k: bin (l, k) non-empty
  };
  std::int32_t new_segment(std::uint64_t size, bool small);
  static bool splits(bool small, std::uint64_t remaining) noexcept;
  void insert_free(std::int32_t b);
  void erase_free(std::int32_t b);

  detail::block_list<block> blocks_;
  /// Model addresses count down from here (each new segment below the last, as cudaMalloc's).
  static constexpr std::uint64_t address_top = std::uint64_t{1} << 62;
  std::vector<std::int32_t> segment_heads_;  ///< first block of each segment, in creation order
  free_pool small_pool_, large_pool_;
  std::uint64_t next_addr_ = 0;
  std::size_t segments_ = 0;
  void release_cached();
};

}  // namespace vramkit::plan
