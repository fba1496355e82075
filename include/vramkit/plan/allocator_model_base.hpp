// What the models of PyTorch's caching allocator (caching_allocator_model,
// expandable_segments_model) share: the 512 B rounding and 1 MiB small-request bound, the
// allocated and reserved counters with their peaks, the capacity that makes a model release
// cached memory, the handles of its allocations, and the blocks of its segments linked by
// address. Not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "vramkit/core/error.hpp"

namespace vramkit::plan::detail {

/// Counters, capacity and allocation handles of an allocator model.
class allocator_model_base {
 public:
  static constexpr std::uint64_t min_block = 512;
  static constexpr std::uint64_t small_size = 1u << 20;
  /// PyTorch's kSmallBuffer and kLargeBuffer: the segment sizes of the small pool and of requests
  /// below 10 MiB, and the page sizes of expandable segments.
  static constexpr std::uint64_t small_buffer = 2u << 20;
  static constexpr std::uint64_t large_buffer = 20u << 20;

  /// Size a request is rounded to (multiple of 512, at least 512).
  static constexpr std::uint64_t round_size(std::uint64_t bytes) noexcept {
    return bytes < min_block ? min_block : (bytes + min_block - 1) / min_block * min_block;
  }

  [[nodiscard]] std::uint64_t allocated_bytes() const noexcept { return allocated_; }
  [[nodiscard]] std::uint64_t reserved_bytes() const noexcept { return reserved_; }
  [[nodiscard]] std::uint64_t peak_allocated_bytes() const noexcept { return peak_allocated_; }
  [[nodiscard]] std::uint64_t peak_reserved_bytes() const noexcept { return peak_reserved_; }

  /// Bytes the model may reserve; 0 means no limit. Memory that would go past it first makes the
  /// model release what it caches; if it still does not fit, the request counts as out of
  /// memory and is served anyway so that the rest of the replay can still be measured.
  void set_capacity(std::uint64_t bytes) noexcept { capacity_ = bytes; }
  [[nodiscard]] std::size_t cache_flushes() const noexcept { return flushes_; }
  [[nodiscard]] std::size_t out_of_memory_count() const noexcept { return ooms_; }

 protected:
  /// The handle the next add_handle returns.
  [[nodiscard]] std::uint32_t next_handle() const noexcept {
    return static_cast<std::uint32_t>(handle_block_.size());
  }
  /// A new handle naming block `b` (-1: a zero-byte request, no block) of `bytes`, counted as
  /// allocated.
  std::uint32_t add_handle(std::int32_t b, std::uint64_t bytes) {
    const std::uint32_t h = next_handle();
    handle_block_.push_back(b);
    allocated_ += bytes;
    if (allocated_ > peak_allocated_) peak_allocated_ = allocated_;
    return h;
  }
  /// The block of handle `h` (-1 for a zero-byte request), now marked freed; logic_error naming
  /// `model` for a handle it never gave or one freed twice.
  std::int32_t take_handle(std::uint32_t h, const char* model) {
    if (h >= handle_block_.size()) throw logic_error(std::string(model) + ": unknown handle");
    const std::int32_t b = handle_block_[h];
    if (b == freed) throw logic_error(std::string(model) + ": handle freed twice");
    handle_block_[h] = freed;
    return b;
  }
  /// Counts `bytes` more reserved.
  void reserve(std::uint64_t bytes) noexcept {
    reserved_ += bytes;
    if (reserved_ > peak_reserved_) peak_reserved_ = reserved_;
  }
  /// Back to the counters of a new model.
  void reset_counters() noexcept {
    handle_block_.clear();
    allocated_ = reserved_ = peak_allocated_ = peak_reserved_ = 0;
    capacity_ = 0;
    flushes_ = ooms_ = 0;
  }

  static constexpr std::int32_t freed = -2;
  std::vector<std::int32_t> handle_block_;
  std::uint64_t allocated_ = 0, reserved_ = 0, peak_allocated_ = 0, peak_reserved_ = 0;
  std::uint64_t capacity_ = 0;
  std::size_t flushes_ = 0, ooms_ = 0;
};

/// The blocks of an allocator model's segments in one vector, each linked to its neighbours by
/// address (Block has addr, size, prev and next), with the slots of merged blocks reused.
template <class Block>
class block_list {
 public:
  Block& operator[](std::int32_t b) noexcept { return blocks_[static_cast<std::size_t>(b)]; }
  const Block& operator[](std::int32_t b) const noexcept {
    return blocks_[static_cast<std::size_t>(b)];
  }
  [[nodiscard]] std::size_t size() const noexcept { return blocks_.size(); }
  std::vector<Block>& all() noexcept { return blocks_; }

  /// A new default block, unlinked.
  std::int32_t make() {
    if (!spare_.empty()) {
      const std::int32_t b = spare_.back();
      spare_.pop_back();
      blocks_[static_cast<std::size_t>(b)] = Block{};
      return b;
    }
    blocks_.emplace_back();
    return static_cast<std::int32_t>(blocks_.size() - 1);
  }
  /// Gives back the slot of a block no longer linked.
  void recycle(std::int32_t b) { spare_.push_back(b); }

  /// Cuts block `b` after its first `size` bytes: `b` keeps them, and the new block returned
  /// (linked after it; its other fields default) holds the rest.
  std::int32_t split(std::int32_t b, std::uint64_t size) {
    const std::int32_t r = make();
    Block& x = (*this)[b];
    Block& y = (*this)[r];
    y.addr = x.addr + size;
    y.size = x.size - size;
    y.prev = b;
    y.next = x.next;
    if (x.next >= 0) (*this)[x.next].prev = r;
    x.next = r;
    x.size = size;
    return r;
  }
  /// Joins the block after `b` into `b` and gives back its slot.
  void absorb_next(std::int32_t b) {
    Block& x = (*this)[b];
    const std::int32_t n = x.next;
    x.size += (*this)[n].size;
    x.next = (*this)[n].next;
    if (x.next >= 0) (*this)[x.next].prev = b;
    recycle(n);
  }

  void clear() noexcept {
    blocks_.clear();
    spare_.clear();
  }

 private:
  std::vector<Block> blocks_;
  std::vector<std::int32_t> spare_;
};

}  // namespace vramkit::plan::detail
