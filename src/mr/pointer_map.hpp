// pointer_map: the live blocks of a pool by address (internal to src/mr; shared by pool_resource
// and vmm_pool_resource). Not thread-safe: the pool's lock guards it.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace vramkit::mr::detail {

// Open addressing with linear probing over a power-of-two table, at most half full, and
// backward-shift deletion (no tombstones): a lookup is one multiply and, at that load, one or two
// adjacent slots; inserting allocates nothing until the table doubles. It replaced a
// std::unordered_map (a node allocated per block, a division per lookup): a cached allocate + free
// of the replayed LLaMA step through the C API went from 112 to 73 ns on the development host
// (bench/mr/pool_bench.cpp --device=sim: 170 -> 120 ns median with the clock reads). Keys are
// non-zero addresses; 0 marks an empty slot.
template <typename Value>
class pointer_map {
 public:
  explicit pointer_map(std::size_t capacity = 4096) {
    rehash(std::bit_ceil(capacity < 16 ? 16 : capacity));
  }

  /// Adds key -> value; the key must not be present.
  void insert(std::uintptr_t key, Value* value) {
    if (2 * (size_ + 1) > slots_.size()) rehash(2 * slots_.size());
    std::size_t i = home(key);
    while (slots_[i].key != 0) i = (i + 1) & mask_;
    slots_[i] = {key, value};
    ++size_;
  }

  static constexpr std::size_t npos = ~std::size_t{0};

  /// The slot holding key (valid until the next insert or erase), or npos.
  [[nodiscard]] std::size_t find(std::uintptr_t key) const noexcept {
    for (std::size_t i = home(key);; i = (i + 1) & mask_) {
      if (slots_[i].key == key) return i;
      if (slots_[i].key == 0) return npos;
    }
  }
  /// The value in a slot find returned.
  [[nodiscard]] Value* at(std::size_t slot) const noexcept { return slots_[slot].value; }

  /// Empties a slot find returned.
  void erase_at(std::size_t i) noexcept {
    // Shift back every later entry of the run that may sit in the hole (its home is not in
    // (i, j]), so that lookups never meet a false empty slot.
    for (std::size_t j = (i + 1) & mask_; slots_[j].key != 0; j = (j + 1) & mask_) {
      const std::size_t h = home(slots_[j].key);
      if (((j - h) & mask_) >= ((j - i) & mask_)) {
        slots_[i] = slots_[j];
        i = j;
      }
    }
    slots_[i] = {};
    --size_;
  }

  [[nodiscard]] std::size_t size() const noexcept { return size_; }

 private:
  struct slot {
    std::uintptr_t key = 0;
    Value* value = nullptr;
  };

  [[nodiscard]] std::size_t home(std::uintptr_t key) const noexcept {
    // Fibonacci hashing: pool addresses are multiples of 256, so the low bits carry nothing.
    return static_cast<std::size_t>((static_cast<std::uint64_t>(key) * 0x9E3779B97F4A7C15ull) >>
                                    shift_);
  }

  void rehash(std::size_t n) {
    std::vector<slot> old(n);
    old.swap(slots_);
    mask_ = n - 1;
    shift_ = 64 - std::countr_zero(n);
    size_ = 0;
    for (const slot& s : old) {
      if (s.key == 0) continue;
      std::size_t i = home(s.key);
      while (slots_[i].key != 0) i = (i + 1) & mask_;
      slots_[i] = s;
      ++size_;
    }
  }

  std::vector<slot> slots_;
  std::size_t mask_ = 0;
  int shift_ = 64;
  std::size_t size_ = 0;
};

}  // namespace vramkit::mr::detail
