// detail::pointer_map against std::unordered_map under random inserts and erases (the erase's
// backward shift must never hide a key), across several doublings of the table.
#include "mr/pointer_map.hpp"

#include <gtest/gtest.h>

#include <random>
#include <unordered_map>
#include <vector>

namespace vramkit::mr {
namespace {

TEST(PointerMap, AgreesWithUnorderedMapUnderRandomInsertsAndErases) {
  detail::pointer_map<int> m(16);
  std::unordered_map<std::uintptr_t, int*> ref;
  std::vector<int> values(1);
  std::vector<std::uintptr_t> keys;
  std::mt19937_64 rng(11);
  for (int i = 0; i < 200000; ++i) {
    const bool add = keys.empty() || rng() % 100 < (i < 100000 ? 60 : 40);
    if (add) {
      // Pool-like keys: multiples of 256, often close together.
      std::uintptr_t k = 0;
      do {
        k = (0x7f0000000000ull + (rng() % 65536) * 256) * (1 + rng() % 2);
      } while (ref.count(k) != 0);
      m.insert(k, &values[0]);
      ref[k] = &values[0];
      keys.push_back(k);
    } else {
      const std::size_t j = rng() % keys.size();
      const std::size_t slot = m.find(keys[j]);
      ASSERT_NE(slot, detail::pointer_map<int>::npos) << "op " << i;
      EXPECT_EQ(m.at(slot), ref.at(keys[j]));
      m.erase_at(slot);
      ref.erase(keys[j]);
      keys[j] = keys.back();
      keys.pop_back();
    }
    ASSERT_EQ(m.size(), ref.size());
    if (i % 1000 == 0) {
      for (const auto k : keys) ASSERT_NE(m.find(k), detail::pointer_map<int>::npos) << "op " << i;
      EXPECT_EQ(m.find(0x100), detail::pointer_map<int>::npos);
    }
  }
}

}  // namespace
}  // namespace vramkit::mr
