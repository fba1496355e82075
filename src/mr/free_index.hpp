// free_index: the free blocks of one stream and class of a pool, in TLSF-style size bins
// (internal to src/mr; shared by pool_resource and vmm_pool_resource). Not thread-safe: the pool's
// lock guards it. Block needs members size, bin, free_prev and free_next.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace vramkit::mr::detail {

// Free blocks of one stream and class, in size bins (64 per power of two, as TLSF) with a bitmap of
// the non-empty ones: insert and erase are O(1) without allocation, find scans at most two bins.
// find returns the smallest block that fits (among equal sizes the most recently freed).
template <typename Block>
class free_index {
 public:
  static constexpr int sub_bits = 6;
  static constexpr int bins = 64 << sub_bits;

  static std::uint32_t bin_of(std::size_t s) noexcept {
    const int fl = 63 - std::countl_zero(static_cast<std::uint64_t>(s | 1));
    if (fl < sub_bits) return static_cast<std::uint32_t>(s);
    const auto sl = static_cast<std::uint32_t>((s >> (fl - sub_bits)) & ((1u << sub_bits) - 1));
    return static_cast<std::uint32_t>((fl - sub_bits + 1) << sub_bits) + sl;
  }

  void insert(Block* b) noexcept {
    const std::uint32_t i = bin_of(b->size);
    b->bin = i;
    b->free_prev = nullptr;
    b->free_next = heads_[i];
    if (heads_[i] != nullptr) heads_[i]->free_prev = b;
    heads_[i] = b;
    bits_[i / 64] |= std::uint64_t{1} << (i % 64);
    ++count_;
  }

  void erase(Block* b) noexcept {
    if (b->free_prev != nullptr) {
      b->free_prev->free_next = b->free_next;
    } else {
      heads_[b->bin] = b->free_next;
      if (b->free_next == nullptr) bits_[b->bin / 64] &= ~(std::uint64_t{1} << (b->bin % 64));
    }
    if (b->free_next != nullptr) b->free_next->free_prev = b->free_prev;
    b->free_prev = b->free_next = nullptr;
    --count_;
  }

  Block* find(std::size_t size) const noexcept {
    const std::uint32_t i = bin_of(size);
    Block* best = nullptr;
    for (Block* b = heads_[i]; b != nullptr; b = b->free_next) {
      if (b->size < size) continue;
      if (best == nullptr || b->size < best->size) {
        best = b;
        if (b->size == size) return b;  // nothing fits better
      }
    }
    if (best != nullptr) return best;
    // Every block of a higher bin fits, and they differ by less than 1/64 of their size: the
    // most recently freed one (the head) is as good as the smallest and costs no scan.
    const int j = next_bin(i + 1);
    return j < 0 ? nullptr : heads_[j];
  }

  [[nodiscard]] std::size_t largest() const noexcept {
    for (int w = bins / 64 - 1; w >= 0; --w) {
      if (bits_[w] == 0) continue;
      const int j = w * 64 + 63 - std::countl_zero(bits_[w]);
      std::size_t m = 0;
      for (Block* b = heads_[j]; b != nullptr; b = b->free_next) m = std::max(m, b->size);
      return m;
    }
    return 0;
  }

  // Removes and returns every block.
  std::vector<Block*> take_all() {
    std::vector<Block*> out;
    out.reserve(count_);
    for (int w = 0; w < bins / 64; ++w) {
      for (std::uint64_t bits = bits_[w]; bits != 0; bits &= bits - 1) {
        const int j = w * 64 + std::countr_zero(bits);
        for (Block* b = heads_[j]; b != nullptr; b = b->free_next) out.push_back(b);
        heads_[j] = nullptr;
      }
      bits_[w] = 0;
    }
    count_ = 0;
    return out;
  }

  [[nodiscard]] std::size_t size() const noexcept { return count_; }

 private:
  int next_bin(std::uint32_t from) const noexcept {
    if (from >= static_cast<std::uint32_t>(bins)) return -1;
    std::uint32_t w = from / 64;
    std::uint64_t bits = bits_[w] & (~std::uint64_t{0} << (from % 64));
    for (;;) {
      if (bits != 0) return static_cast<int>(w * 64 + std::countr_zero(bits));
      if (++w >= static_cast<std::uint32_t>(bins / 64)) return -1;
      bits = bits_[w];
    }
  }

  std::array<Block*, bins> heads_{};
  std::array<std::uint64_t, bins / 64> bits_{};
  std::size_t count_ = 0;
};

}  // namespace vramkit::mr::detail
