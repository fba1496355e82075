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
  /// Frees a handle returned by malloc (a handle freed twice is a logic_error).
  void free(std::uint32_t handle);

  [[nodiscard]] std::uint64_t allocated_bytes() const noexcept { return allocated_; }
  [[nodiscard]] std::uint64_t reserved_bytes() const noexcept { return reserved_; }
  [[nodiscard]] std::uint64_t peak_allocated_bytes() const noexcept { return peak_allocated_; }
  [[nodiscard]] std::uint64_t peak_reserved_bytes() const noexcept { return peak_reserved_; }
  [[nodiscard]] std::size_t segment_count() const noexcept { return segments_; }
  /// Restarts the peaks at the current figures (torch.cuda.reset_peak_memory_stats).
  void reset_peaks() noexcept {
    peak_allocated_ = allocated_;
    peak_reserved_ = reserved_;
  }

 private:
  struct block {
    std::uint64_t addr = 0, size = 0;
    std::int32_t prev = -1, next = -1;
    bool free = false, small = false, live = false;
  };
  /// Free block ordered by (size, address) like PyTorch's BlockComparatorSize. Pools are sorted
  /// vectors: they hold at most a few hundred free blocks, where a vector beats a tree.
  struct entry {
    std::uint64_t size, addr;
    std::int32_t block;
    bool operator<(const entry& o) const noexcept { return size != o.size ? size < o.size : addr < o.addr; }
  };
  std::int32_t new_block();
  void insert_free(std::int32_t b);
  void erase_free(std::int32_t b);

  std::vector<block> blocks_;
  std::vector<std::int32_t> spare_;
  std::vector<std::int32_t> handle_block_;
  std::vector<entry> small_pool_, large_pool_;
  std::uint64_t next_addr_ = 0;
  std::uint64_t allocated_ = 0, reserved_ = 0, peak_allocated_ = 0, peak_reserved_ = 0;
  std::size_t segments_ = 0;
};

}  // namespace vramkit::plan
