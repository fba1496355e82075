// Caching-allocator model: block pools keyed by (size, address), split and merge rules as in
// c10/cuda/CUDACachingAllocator.cpp (single stream, no memory pressure, default configuration).
#include "vramkit/plan/caching_allocator_model.hpp"

#include <algorithm>

#include "vramkit/core/error.hpp"

namespace vramkit::plan {

std::uint64_t caching_allocator_model::round_size(std::uint64_t bytes) noexcept {
  if (bytes < min_block) return min_block;
  return (bytes + min_block - 1) / min_block * min_block;
}

std::uint64_t caching_allocator_model::segment_size(std::uint64_t rounded) noexcept {
  if (rounded <= small_size) return small_buffer;
  if (rounded < min_large_alloc) return large_buffer;
  return (rounded + round_large - 1) / round_large * round_large;
}

std::int32_t caching_allocator_model::new_block() {
  if (!spare_.empty()) {
    const auto b = spare_.back();
    spare_.pop_back();
    blocks_[b] = block{};
    return b;
  }
  blocks_.emplace_back();
  return static_cast<std::int32_t>(blocks_.size() - 1);
}

void caching_allocator_model::insert_free(std::int32_t b) {
  auto& bl = blocks_[b];
  bl.free = true;
  auto& pool = bl.small ? small_pool_ : large_pool_;
  const entry e{bl.size, bl.addr, b};
  pool.insert(std::lower_bound(pool.begin(), pool.end(), e), e);
}

void caching_allocator_model::erase_free(std::int32_t b) {
  auto& bl = blocks_[b];
  auto& pool = bl.small ? small_pool_ : large_pool_;
  const entry e{bl.size, bl.addr, b};
  const auto it = std::lower_bound(pool.begin(), pool.end(), e);
  if (it != pool.end() && it->block == b) pool.erase(it);
  bl.free = false;
}

std::uint32_t caching_allocator_model::malloc(std::uint64_t bytes) {
  const auto handle = static_cast<std::uint32_t>(handle_block_.size());
  if (bytes == 0) {
    handle_block_.push_back(-1);
    return handle;
  }
  const std::uint64_t size = round_size(bytes);
  const bool small = size <= small_size;
  auto& pool = small ? small_pool_ : large_pool_;
  std::int32_t b;
  const auto it = std::lower_bound(pool.begin(), pool.end(), entry{size, 0, -1});
  if (it != pool.end()) {
    b = it->block;
    pool.erase(it);
    blocks_[b].free = false;
  } else {
    const std::uint64_t seg = segment_size(size);
    b = new_block();
    auto& bl = blocks_[b];
    bl.addr = next_addr_;
    bl.size = seg;
    bl.small = small;
    // A gap keeps segments apart: blocks of different segments never merge.
    next_addr_ += seg + round_large;
    reserved_ += seg;
    ++segments_;
    peak_reserved_ = std::max(peak_reserved_, reserved_);
  }
  const std::uint64_t remaining = blocks_[b].size - size;
  const bool split = small ? remaining >= min_block : remaining > small_size;
  if (split) {
    const auto r = new_block();
    auto& rem = blocks_[r];
    auto& bl = blocks_[b];
    rem.addr = bl.addr + size;
    rem.size = remaining;
    rem.small = bl.small;
    rem.prev = b;
    rem.next = bl.next;
    if (bl.next >= 0) blocks_[bl.next].prev = r;
    bl.next = r;
    bl.size = size;
    insert_free(r);
  }
  blocks_[b].live = true;
  allocated_ += blocks_[b].size;
  peak_allocated_ = std::max(peak_allocated_, allocated_);
  handle_block_.push_back(b);
  return handle;
}

void caching_allocator_model::free(std::uint32_t handle) {
  if (handle >= handle_block_.size()) throw logic_error("caching_allocator_model: unknown handle");
  std::int32_t b = handle_block_[handle];
  if (b == -2) throw logic_error("caching_allocator_model: handle freed twice");
  handle_block_[handle] = -2;
  if (b < 0) return;
  allocated_ -= blocks_[b].size;
  blocks_[b].live = false;
  // Merge with free neighbours of the same segment.
  const auto p = blocks_[b].prev;
  if (p >= 0 && blocks_[p].free) {
    erase_free(p);
    blocks_[p].size += blocks_[b].size;
    blocks_[p].next = blocks_[b].next;
    if (blocks_[b].next >= 0) blocks_[blocks_[b].next].prev = p;
    spare_.push_back(b);
    b = p;
  }
  const auto nx = blocks_[b].next;
  if (nx >= 0 && blocks_[nx].free) {
    erase_free(nx);
    blocks_[b].size += blocks_[nx].size;
    blocks_[b].next = blocks_[nx].next;
    if (blocks_[nx].next >= 0) blocks_[blocks_[nx].next].prev = b;
    spare_.push_back(nx);
  }
  insert_free(b);
}

}  // namespace vramkit::plan
