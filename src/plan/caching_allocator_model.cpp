// Caching-allocator model: free blocks in (size, address) order per size bin, split and merge rules
// as in c10/cuda/CUDACachingAllocator.cpp (single stream, default configuration).
#include "vramkit/plan/caching_allocator_model.hpp"

#include <algorithm>

#include "vramkit/core/error.hpp"

namespace vramkit::plan {

unsigned caching_allocator_model::free_pool::bin_of(std::uint64_t size) noexcept {
  // Sizes are multiples of 512 (>= 2^9), so the level always has sub_bits bits below its top bit.
  const int level = 63 - __builtin_clzll(size);
  const auto sub = static_cast<unsigned>((size >> (level - sub_bits)) & ((1u << sub_bits) - 1));
  return (static_cast<unsigned>(level) << sub_bits) | sub;
}

inline void caching_allocator_model::free_pool::mark(unsigned bin, bool on) noexcept {
  const unsigned level = bin >> sub_bits;
  const std::uint64_t bit = std::uint64_t{1} << (bin & ((1u << sub_bits) - 1));
  if (on) {
    bin_bits_[level] |= bit;
    level_bits_ |= std::uint64_t{1} << level;
  } else {
    bin_bits_[level] &= ~bit;
    if (bin_bits_[level] == 0) level_bits_ &= ~(std::uint64_t{1} << level);
  }
}

std::int32_t caching_allocator_model::free_pool::peek_best(const std::vector<block>& blocks,
                                                           std::uint64_t size) const {
  const unsigned bin = bin_of(size);
  // Ascending order: the first block that fits is the best of its bin.
  for (std::int32_t i = head_[bin]; i >= 0; i = blocks[i].fnext)
    if (blocks[i].size >= size) return i;
  // The next non-empty bin above: same level first, then higher levels. Everything there fits;
  // its head is the best.
  const unsigned level = bin >> sub_bits;
  const unsigned sub = bin & ((1u << sub_bits) - 1);
  const std::uint64_t above =
      sub + 1 < 64 ? bin_bits_[level] & (~std::uint64_t{0} << (sub + 1)) : 0;
  if (above != 0) return head_[(level << sub_bits) | static_cast<unsigned>(__builtin_ctzll(above))];
  const std::uint64_t higher =
      level + 1 < 64 ? level_bits_ & (~std::uint64_t{0} << (level + 1)) : 0;
  if (higher == 0) return -1;
  const auto l = static_cast<unsigned>(__builtin_ctzll(higher));
  return head_[(l << sub_bits) | static_cast<unsigned>(__builtin_ctzll(bin_bits_[l]))];
}

std::int32_t caching_allocator_model::free_pool::take_best(std::vector<block>& blocks,
                                                           std::uint64_t size) {
  const std::int32_t b = peek_best(blocks, size);
  if (b >= 0) erase(blocks, b);
  return b;
}

void caching_allocator_model::free_pool::insert(std::vector<block>& blocks, std::int32_t b) {
  auto& nb = blocks[b];
  const unsigned bin = bin_of(nb.size);
  nb.bin = static_cast<std::uint16_t>(bin);
  const auto before = [&](std::int32_t i) {  // is block i ahead of b in (size, address) order?
    const auto& c = blocks[i];
    return c.size < nb.size || (c.size == nb.size && c.addr < nb.addr);
  };
  std::int32_t prev = -1, next = -1;
  if (const std::int32_t h = hint_[bin]; h < 0) {
    mark(bin, true);
  } else if (!before(head_[bin])) {
    next = head_[bin];  // the most common place: a new smallest or lowest block
  } else if (before(tail_[bin])) {
    prev = tail_[bin];  // a new largest or highest block
  } else {
    // Else between a block ahead of b and one not: the block listed last and the bin's head or
    // tail (a bin can hold dozens of equal-size blocks, one per layer, and frees and splits tend
    // to land next to the previous one). The walk closes in from both ends at once.
    std::int32_t lo = head_[bin], hi = tail_[bin];
    if (before(h))
      lo = h;
    else
      hi = h;
    for (;;) {
      const std::int32_t up = blocks[lo].fnext;
      if (up == hi || !before(up)) {
        prev = lo;
        next = up;
        break;
      }
      lo = up;
      const std::int32_t down = blocks[hi].fprev;
      if (down == lo || before(down)) {
        prev = down;
        next = hi;
        break;
      }
      hi = down;
    }
  }
  nb.fprev = prev;
  nb.fnext = next;
  if (next >= 0)
    blocks[next].fprev = b;
  else
    tail_[bin] = b;
  if (prev >= 0)
    blocks[prev].fnext = b;
  else
    head_[bin] = b;
  hint_[bin] = b;
}

void caching_allocator_model::free_pool::erase(std::vector<block>& blocks, std::int32_t b) {
  auto& ob = blocks[b];
  if (ob.fprev >= 0) {
    blocks[ob.fprev].fnext = ob.fnext;
  } else {
    if (head_[ob.bin] != b)
      throw logic_error("caching_allocator_model: free block not in its pool");
    head_[ob.bin] = ob.fnext;
    if (ob.fnext < 0) mark(ob.bin, false);
  }
  if (ob.fnext >= 0)
    blocks[ob.fnext].fprev = ob.fprev;
  else
    tail_[ob.bin] = ob.fprev;
  if (hint_[ob.bin] == b) hint_[ob.bin] = ob.fnext >= 0 ? ob.fnext : ob.fprev;
  ob.fprev = ob.fnext = -1;
}

void caching_allocator_model::free_pool::clear() noexcept {
  for (unsigned level = 0; level < levels; ++level) {
    for (std::uint64_t bits = bin_bits_[level]; bits != 0; bits &= bits - 1) {
      const unsigned bin = (level << sub_bits) | static_cast<unsigned>(__builtin_ctzll(bits));
      head_[bin] = hint_[bin] = tail_[bin] = -1;
    }
    bin_bits_[level] = 0;
  }
  level_bits_ = 0;
}

void caching_allocator_model::clear() noexcept {
  blocks_.clear();
  segment_heads_.clear();
  small_pool_.clear();
  large_pool_.clear();
  next_addr_ = 0;
  segments_ = 0;
  reset_counters();
}

void caching_allocator_model::insert_free(std::int32_t b) {
  auto& bl = blocks_[b];
  bl.free = true;
  (bl.small ? small_pool_ : large_pool_).insert(blocks_.all(), b);
}

void caching_allocator_model::erase_free(std::int32_t b) {
  auto& bl = blocks_[b];
  (bl.small ? small_pool_ : large_pool_).erase(blocks_.all(), b);
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

std::uint64_t caching_allocator_model::segment_of(std::uint32_t handle) const {
  for (const std::int32_t head : segment_heads_)
    for (std::int32_t i = head; i >= 0; i = blocks_[i].next)
      if (!blocks_[i].free && blocks_[i].owner == handle) return blocks_[head].addr;
  return 0;
}

std::uint64_t caching_allocator_model::address_of(std::uint32_t handle) const {
  for (const std::int32_t head : segment_heads_)
    for (std::int32_t i = head; i >= 0; i = blocks_[i].next)
      if (!blocks_[i].free && blocks_[i].owner == handle) return blocks_[i].addr;
  return 0;
}

void caching_allocator_model::release_cached() {
  ++flushes_;
  std::size_t kept = 0;
  for (const std::int32_t head : segment_heads_) {
    auto& bl = blocks_[head];
    if (bl.free && bl.next < 0) {  // the segment is one free block
      erase_free(head);
      reserved_ -= bl.size;
      --segments_;
      blocks_.recycle(head);
    } else {
      segment_heads_[kept++] = head;
    }
  }
  segment_heads_.resize(kept);
}

std::int32_t caching_allocator_model::new_segment(std::uint64_t size, bool small) {
  const std::uint64_t seg = segment_size(size);
  if (capacity_ != 0 && reserved_ + seg > capacity_) {
    release_cached();
    if (reserved_ + seg > capacity_) ++ooms_;
  }
  const std::int32_t b = blocks_.make();
  auto& bl = blocks_[b];
  // Each new segment lies below the previous one, as cudaMalloc placed them on the H200 (driver
  // 580, CUDA 13): free blocks of equal size are taken lowest address first, so the order decides
  // which segment a request splits. Replayed against PyTorch 2.11 on
  // tests/data/mr/llama_step.trace, descending addresses reproduce peak reserved exactly (1.0503 x
  // requested on the first pass, 1.0778 once repeated) where ascending ones gave 1.0395 and 1.0946.
  // A gap keeps segments apart: blocks of different segments never merge.
  next_addr_ += seg + round_large;
  bl.addr = address_top - next_addr_;
  bl.size = seg;
  bl.small = small;
  reserve(seg);
  ++segments_;
  segment_heads_.push_back(b);
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
  std::int32_t b = pool.peek_best(blocks_.all(), size);
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
  if (bytes == 0) return add_handle(-1, 0);
  const std::uint64_t size = round_size(bytes);
  const bool small = size <= small_size;
  auto& pool = small ? small_pool_ : large_pool_;
  std::int32_t b = pool.take_best(blocks_.all(), size);
  if (b >= 0) {
    blocks_[b].free = false;
  } else {
    b = new_segment(size, small);
  }
  const std::uint64_t remaining = blocks_[b].size - size;
  if (splits(small, remaining)) {
    const auto r = blocks_.split(b, size);
    blocks_[r].small = small;
    insert_free(r);
  }
  blocks_[b].live = true;
  blocks_[b].owner = next_handle();
  return add_handle(b, blocks_[b].size);
}

void caching_allocator_model::free(std::uint32_t handle) {
  std::int32_t b = take_handle(handle, "caching_allocator_model");
  if (b < 0) return;
  allocated_ -= blocks_[b].size;
  blocks_[b].live = false;
  // Merge with free neighbours of the same segment.
  if (const auto p = blocks_[b].prev; p >= 0 && blocks_[p].free) {
    erase_free(p);
    blocks_.absorb_next(p);
    b = p;
  }
  if (const auto nx = blocks_[b].next; nx >= 0 && blocks_[nx].free) {
    erase_free(nx);
    blocks_.absorb_next(b);
  }
  insert_free(b);
}

}  // namespace vramkit::plan
