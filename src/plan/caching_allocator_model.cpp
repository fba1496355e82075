// Caching-allocator model: block pools keyed by (size, address), split and merge rules as in
// c10/cuda/CUDACachingAllocator.cpp (single stream, no memory pressure, default configuration).
#include "vramkit/plan/caching_allocator_model.hpp"

#include <algorithm>
#include <functional>

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

std::vector<caching_allocator_model::free_pool::bucket>::iterator caching_allocator_model::free_pool::find(
    std::uint64_t size) {
  // Requests repeat sizes in runs (the same shapes layer after layer): try the last answer first.
  if (hint_ < buckets_.size() && buckets_[hint_].size >= size && (hint_ == 0 || buckets_[hint_ - 1].size < size))
    return buckets_.begin() + static_cast<std::ptrdiff_t>(hint_);
  const auto it = std::lower_bound(buckets_.begin(), buckets_.end(), size,
                                   [](const bucket& b, std::uint64_t s) { return b.size < s; });
  hint_ = static_cast<std::size_t>(it - buckets_.begin());
  return it;
}

void caching_allocator_model::free_pool::drop(std::vector<bucket>::iterator it) {
  heaps_[it->heap].clear();
  spare_heaps_.push_back(it->heap);
  buckets_.erase(it);
}

template <typename Valid>
std::int32_t caching_allocator_model::free_pool::peek_best(std::uint64_t size, Valid&& valid) {
  const auto it = find(size);
  if (it == buckets_.end()) return -1;
  auto& heap = heaps_[it->heap];
  // count > 0 guarantees a valid entry in the heap: drop the stale ones above it.
  while (!valid(heap.front().block, it->size, heap.front().addr)) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<>{});
    heap.pop_back();
  }
  return heap.front().block;
}

template <typename Valid>
std::int32_t caching_allocator_model::free_pool::take_best(std::uint64_t size, Valid&& valid) {
  const std::int32_t b = peek_best(size, valid);
  if (b < 0) return b;
  const auto it = find(size);
  auto& heap = heaps_[it->heap];
  std::pop_heap(heap.begin(), heap.end(), std::greater<>{});
  heap.pop_back();
  if (--it->count == 0) drop(it);
  return b;
}

void caching_allocator_model::free_pool::insert(std::uint64_t size, std::uint64_t addr, std::int32_t b) {
  auto it = find(size);
  if (it == buckets_.end() || it->size != size) {
    std::uint32_t h;
    if (!spare_heaps_.empty()) {
      h = spare_heaps_.back();
      spare_heaps_.pop_back();
    } else {
      h = static_cast<std::uint32_t>(heaps_.size());
      heaps_.emplace_back();
    }
    it = buckets_.insert(it, bucket{size, h, 0});
  }
  auto& heap = heaps_[it->heap];
  heap.push_back(item{addr, b});
  std::push_heap(heap.begin(), heap.end(), std::greater<>{});
  ++it->count;
}

void caching_allocator_model::free_pool::erase(std::uint64_t size) {
  const auto it = find(size);
  if (it == buckets_.end() || it->size != size || it->count == 0)
    throw logic_error("caching_allocator_model: free block not in its pool");
  if (--it->count == 0) drop(it);
}

void caching_allocator_model::insert_free(std::int32_t b) {
  auto& bl = blocks_[b];
  bl.free = true;
  (bl.small ? small_pool_ : large_pool_).insert(bl.size, bl.addr, b);
}

void caching_allocator_model::erase_free(std::int32_t b) {
  auto& bl = blocks_[b];
  (bl.small ? small_pool_ : large_pool_).erase(bl.size);
  bl.free = false;
}

std::vector<std::uint64_t> caching_allocator_model::state() const {
  std::vector<std::uint64_t> out{allocated_, reserved_, next_addr_, segments_};
  out.reserve(4 + 3 * blocks_.size());
  for (const std::int32_t head : segment_heads_) {
    for (std::int32_t i = head; i >= 0; i = blocks_[i].next) {
      const auto& bl = blocks_[i];
      out.push_back(bl.addr);
      out.push_back(bl.size);
      out.push_back(bl.free ? ~std::uint64_t{0} : bl.owner);
    }
  }
  return out;
}

bool caching_allocator_model::is_free_block(std::int32_t i, std::uint64_t size, std::uint64_t addr) const noexcept {
  const auto& c = blocks_[i];
  return c.free && c.size == size && c.addr == addr;
}

std::int32_t caching_allocator_model::new_segment(std::uint64_t size, bool small) {
  const std::uint64_t seg = segment_size(size);
  const std::int32_t b = new_block();
  auto& bl = blocks_[b];
  bl.addr = next_addr_;
  bl.size = seg;
  bl.small = small;
  // A gap keeps segments apart: blocks of different segments never merge.
  next_addr_ += seg + round_large;
  reserved_ += seg;
  ++segments_;
  segment_heads_.push_back(b);
  peak_reserved_ = std::max(peak_reserved_, reserved_);
  return b;
}

bool caching_allocator_model::splits(bool small, std::uint64_t remaining) noexcept {
  return small ? remaining >= min_block : remaining > small_size;
}

std::uint64_t caching_allocator_model::transient(std::uint64_t bytes) {
  if (bytes == 0) return 0;
  const std::uint64_t size = round_size(bytes);
  const bool small = size <= small_size;
  auto& pool = small ? small_pool_ : large_pool_;
  const auto valid = [this](std::int32_t i, std::uint64_t sz, std::uint64_t addr) { return is_free_block(i, sz, addr); };
  std::int32_t b = pool.peek_best(size, valid);
  if (b < 0) {
    // malloc would cut the block from a new segment and free would merge it back whole.
    b = new_segment(size, small);
    insert_free(b);
  }
  const std::uint64_t block = blocks_[b].size;
  const std::uint64_t charged = splits(small, block - size) ? size : block;
  peak_allocated_ = std::max(peak_allocated_, allocated_ + charged);
  return charged;
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
  std::int32_t b = pool.take_best(
      size, [this](std::int32_t i, std::uint64_t sz, std::uint64_t addr) { return is_free_block(i, sz, addr); });
  if (b >= 0) {
    blocks_[b].free = false;
  } else {
    b = new_segment(size, small);
  }
  const std::uint64_t remaining = blocks_[b].size - size;
  if (splits(small, remaining)) {
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
  blocks_[b].owner = handle;
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
