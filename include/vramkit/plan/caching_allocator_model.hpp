// A model of PyTorch's CUDACachingAllocator (c10/cuda/CUDACachingAllocator.cpp) for one stream:
// 512 B rounding; requests <= 1 MiB served from 2 MiB segments, 1-10 MiB from 20 MiB segments,
// larger ones from segments rounded up to 2 MiB; best fit by (size, address) among cached free
// blocks of the same pool, each new segment placed below the previous one (as cudaMalloc placed
// them on the H200); a block is split when the remainder is >= 512 B (small pool) or
// > 1 MiB (large pool); freed blocks merge only with free neighbours of the same segment; segments
// are released only under memory pressure: with a capacity set, a segment that would not fit
// makes the model free every cached segment that is wholly free first (release_cached_blocks,
// which PyTorch runs before it reports out of memory). Not thread-safe.
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
  static constexpr std::uint64_t round_size(std::uint64_t bytes) noexcept {
    return bytes < min_block ? min_block : (bytes + min_block - 1) / min_block * min_block;
  }
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

  [[nodiscard]] std::uint64_t allocated_bytes() const noexcept { return allocated_; }
  [[nodiscard]] std::uint64_t reserved_bytes() const noexcept { return reserved_; }
  [[nodiscard]] std::uint64_t peak_allocated_bytes() const noexcept { return peak_allocated_; }
  [[nodiscard]] std::uint64_t peak_reserved_bytes() const noexcept { return peak_reserved_; }
  [[nodiscard]] std::size_t segment_count() const noexcept { return segments_; }

  /// Bytes the allocator may hold in segments (the GPU's memory less the CUDA context); 0 means
  /// no limit. A segment that would go past it first flushes the cache (every wholly free
  /// segment is released); if it still does not fit, the request counts as out of memory and is
  /// served anyway so that the rest of the step can still be measured.
  void set_capacity(std::uint64_t bytes) noexcept { capacity_ = bytes; }
  [[nodiscard]] std::size_t cache_flushes() const noexcept { return flushes_; }
  [[nodiscard]] std::size_t out_of_memory_count() const noexcept { return ooms_; }
  /// The allocator's state: every block of every segment (address, size, and free or the handle
  /// of the allocation in it) plus the counters. Two equal states evolve identically under equal
  /// malloc/free sequences, which lets a caller skip repeated identical work.
  [[nodiscard]] std::vector<std::uint64_t> state() const;
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
  /// sorted insert walks from the block the bin listed last, since a bin can hold dozens of
  /// equal-size blocks (one per layer) and consecutive frees and splits land close together.
  class free_pool {
   public:
    free_pool() noexcept {
      for (auto& h : head_) h = -1;
      for (auto& h : hint_) h = -1;
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
    std::uint64_t level_bits_ = 0;         ///< bit l: some bin of level l is non-empty
    std::uint64_t bin_bits_[levels] = {};  ///< per level, bit k: bin (l, k) non-empty
  };
  std::int32_t new_block();
  std::int32_t new_segment(std::uint64_t size, bool small);
  static bool splits(bool small, std::uint64_t remaining) noexcept;
  void insert_free(std::int32_t b);
  void erase_free(std::int32_t b);

  std::vector<block> blocks_;
  /// Model addresses count down from here (each new segment below the last, as cudaMalloc's).
  static constexpr std::uint64_t address_top = std::uint64_t{1} << 62;
  std::vector<std::int32_t> segment_heads_;  ///< first block of each segment, in creation order
  std::vector<std::int32_t> spare_;
  std::vector<std::int32_t> handle_block_;
  free_pool small_pool_, large_pool_;
  std::uint64_t next_addr_ = 0;
  std::uint64_t allocated_ = 0, reserved_ = 0, peak_allocated_ = 0, peak_reserved_ = 0;
  std::size_t segments_ = 0;
  std::uint64_t capacity_ = 0;
  std::size_t flushes_ = 0, ooms_ = 0;
  void release_cached();
};

}  // namespace vramkit::plan
