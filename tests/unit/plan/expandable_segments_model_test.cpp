// The model of PyTorch's expandable segments on small hand-checked sequences: pages mapped on
// growth, the best-fit rule that counts the unmapped space a block borders, and growth through
// holes that the out-of-memory path unmapped.
#include "vramkit/plan/expandable_segments_model.hpp"

#include <gtest/gtest.h>

#include "vramkit/core/error.hpp"
#include "vramkit/core/units.hpp"

namespace vramkit::plan {
namespace {

TEST(ExpandableSegmentsModel, MapsPagesOnGrowthAndSplitsEverywhere) {
  expandable_segments_model m;
  const auto a = m.malloc(3 * MiB);  // large pool: one 20 MiB page
  EXPECT_EQ(m.reserved_bytes(), 20 * MiB);
  const auto b = m.malloc(1000);  // small pool, its own segment: one 2 MiB page
  EXPECT_EQ(m.reserved_bytes(), 22 * MiB);
  EXPECT_EQ(m.segment_count(), 2u);
  m.malloc(17 * MiB);  // fits the rest of the first page exactly
  EXPECT_EQ(m.reserved_bytes(), 22 * MiB);
  m.free(a);
  m.free(b);
  EXPECT_EQ(m.reserved_bytes(), 22 * MiB);  // nothing is unmapped without memory pressure
  EXPECT_THROW(m.free(a), logic_error);
}

// PyTorch's get_free_block takes the best fit by (size, address) but counts a block as the size it
// could grow to: the free block at the top of the mapped range (with the unmapped rest above it)
// loses to the next larger one. Here a 9 MiB request goes to the 12 MiB block at the bottom, so
// the next 12 MiB request has to grow the 10 MiB top block by a page.
TEST(ExpandableSegmentsModel, BestFitPassesOverTheBlockThatBordersUnmappedSpace) {
  expandable_segments_model m;
  const auto a = m.malloc(12 * MiB);  // page 0: [a 12][free 8]
  m.malloc(10 * MiB);                 // page 1 mapped: [a 12][b 10][free 18]
  m.malloc(8 * MiB);                  // [a 12][b 10][c 8][top 10]
  m.free(a);                          // [free 12][b 10][c 8][top 10]
  EXPECT_EQ(m.reserved_bytes(), 40 * MiB);
  m.malloc(9 * MiB);  // the 12 MiB block, not the 10 MiB top one
  EXPECT_EQ(m.reserved_bytes(), 40 * MiB);
  m.malloc(12 * MiB);  // 3 MiB and 10 MiB free: the top grows by a page
  EXPECT_EQ(m.reserved_bytes(), 60 * MiB);
  EXPECT_EQ(m.pages_mapped(), 3u);
}

// After the out-of-memory path unmapped a free page, growth maps the hole and merges the free
// blocks on both sides of it: here they hold the request, so nothing more is mapped.
TEST(ExpandableSegmentsModel, GrowthThroughAHoleCountsTheFreeBlockAboveIt) {
  expandable_segments_model m;
  m.set_capacity(100 * MiB);
  m.malloc(10 * MiB);                 // page 0: [a 10][free 10]
  const auto b = m.malloc(10 * MiB);  // [a][b]
  const auto c = m.malloc(20 * MiB);  // page 1
  const auto d = m.malloc(20 * MiB);  // page 2
  m.free(b);
  m.free(c);  // free [10, 40)
  // 60 MiB more would pass the capacity: page 1, wholly free, is unmapped first (a hole), then
  // pages 3-5 are mapped above d.
  const auto x = m.malloc(60 * MiB);
  EXPECT_EQ(m.cache_flushes(), 1u);
  EXPECT_EQ(m.out_of_memory_count(), 0u);
  EXPECT_EQ(m.reserved_bytes(), 100 * MiB);
  m.free(x);
  m.free(d);  // [a 10][free 10][hole 20][free 80][unmapped]
  m.set_capacity(0);
  m.malloc(105 * MiB);  // 10 + 20 (the hole, mapped again) + 80 = 110 holds it
  EXPECT_EQ(m.reserved_bytes(), 120 * MiB);
  EXPECT_EQ(m.pages_mapped(), 7u);
  EXPECT_EQ(m.pages_unmapped(), 1u);
}

}  // namespace
}  // namespace vramkit::plan
