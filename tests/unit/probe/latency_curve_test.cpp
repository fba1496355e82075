// Tests of the pointer-chase permutation, the latency sweep sizes and the reading of levels off a
// latency curve.
#include "vramkit/probe/detail/latency_curve.hpp"

#include <algorithm>
#include <numeric>

#include <gtest/gtest.h>

namespace vramkit::probe::detail {
namespace {

TEST(CyclicPermutation, IsOneFullCycleForManySizesAndSeeds) {
  std::vector<std::size_t> sizes;
  for (std::size_t n = 1; n <= 70; ++n) sizes.push_back(n);
  for (std::size_t n : {127u, 128u, 129u, 1000u, 4096u, 4097u, 65536u, 100003u}) sizes.push_back(n);
  for (std::size_t n : sizes) {
    for (std::uint64_t seed = 0; seed < 12; ++seed) {
      const auto next = make_cyclic_permutation(n, seed * 0x9E3779B97F4A7C15ull + n);
      ASSERT_EQ(next.size(), n);
      // A permutation of 0..n-1 ...
      std::vector<std::uint32_t> sorted = next;
      std::sort(sorted.begin(), sorted.end());
      for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(sorted[i], i) << "n=" << n << " seed=" << seed;
      // ... that is a single cycle through every index, from any start.
      ASSERT_EQ(cycle_length(next, 0), n) << "n=" << n << " seed=" << seed;
      ASSERT_EQ(cycle_length(next, static_cast<std::uint32_t>(n / 2)), n);
      if (n > 1) {
        for (std::size_t i = 0; i < n; ++i) ASSERT_NE(next[i], i) << "fixed point at " << i;
      }
    }
  }
}

TEST(CyclicPermutation, IsDeterministicPerSeedAndDiffersAcrossSeeds) {
  EXPECT_EQ(make_cyclic_permutation(5000, 7), make_cyclic_permutation(5000, 7));
  EXPECT_NE(make_cyclic_permutation(5000, 7), make_cyclic_permutation(5000, 8));
  EXPECT_TRUE(make_cyclic_permutation(0, 1).empty());
}

TEST(CyclicPermutation, OrderIsNotSequential) {
  // A chase that walks lines in address order would let the prefetcher hide the latency.
  const auto next = make_cyclic_permutation(1 << 16, 3);
  std::size_t sequential = 0;
  for (std::size_t i = 0; i < next.size(); ++i) sequential += next[i] == i + 1;
  EXPECT_LT(sequential, 50u);
}

TEST(CycleLength, RejectsSeveralCyclesAndOutOfRange) {
  EXPECT_EQ(cycle_length({1, 0, 3, 2}, 0), 2u);  // two 2-cycles: not one through all four
  EXPECT_EQ(cycle_length({1, 5, 0}, 0), 0u);
  EXPECT_EQ(cycle_length({1, 2, 0}, 0), 3u);
  EXPECT_EQ(cycle_length({}, 0), 0u);
}

TEST(LatencySizes, CoverTheRangeInAscendingSteps) {
  const auto full = latency_sizes(4096, 1 << 20, true);
  EXPECT_EQ(full.front(), 4096u);
  EXPECT_EQ(full.back(), 1u << 20);
  EXPECT_TRUE(std::is_sorted(full.begin(), full.end()));
  EXPECT_NE(std::find(full.begin(), full.end(), 6144u), full.end());
  for (auto s : full) EXPECT_EQ(s % 64, 0u);
  const auto quick = latency_sizes(4096, 1 << 20, false);
  EXPECT_EQ(quick.size(), 9u);  // 4 KiB .. 1 MiB in powers of two
  const auto odd = latency_sizes(4096, 5000 * 64, false);
  EXPECT_EQ(odd.back(), 5000u * 64);
}

std::vector<curve::point> synthetic_curve() {
  // L1 32 KiB at 1 ns, L2 512 KiB at 4 ns, L3 16 MiB at 12 ns, DRAM at 90 ns.
  std::vector<curve::point> pts;
  for (std::uint64_t s : latency_sizes(4096, 512ull << 20, false)) {
    double y = s <= (32 << 10) ? 1.0 : s <= (512 << 10) ? 4.0 : s <= (16 << 20) ? 12.0 : 90.0;
    if (s == (32 << 20)) y = 60;  // part way between L3 and DRAM
    curve::point p;
    p.x = static_cast<double>(s);
    p.y = {y * 0.98, y, y * 1.03};
    p.samples = {y * 0.98, y, y * 1.03};
    pts.push_back(p);
  }
  return pts;
}

TEST(FindLevels, ReadsReportedCacheLevelsOffTheCurve) {
  const auto levels = find_levels(synthetic_curve(),
                                  {{"L1d", 32 << 10}, {"L2", 512 << 10}, {"L3", 16 << 20}}, "host");
  ASSERT_EQ(levels.size(), 4u);
  EXPECT_EQ(levels[0].name, "L1d");
  EXPECT_DOUBLE_EQ(levels[0].latency_ns, 1.0);
  EXPECT_EQ(levels[0].measured_size_bytes, 32u << 10);
  EXPECT_EQ(levels[0].reported_size_bytes, 32u << 10);
  EXPECT_EQ(levels[1].name, "L2");
  EXPECT_DOUBLE_EQ(levels[1].latency_ns, 4.0);
  EXPECT_EQ(levels[1].measured_size_bytes, 512u << 10);
  EXPECT_EQ(levels[2].name, "L3");
  EXPECT_DOUBLE_EQ(levels[2].latency_ns, 12.0);
  EXPECT_EQ(levels[2].measured_size_bytes, 16u << 20);
  EXPECT_EQ(levels[3].name, "DRAM");
  EXPECT_DOUBLE_EQ(levels[3].latency_ns, 90.0);
  EXPECT_EQ(levels[3].device, "host");
}

TEST(FindLevels, FindsPlateausWithoutTopology) {
  const auto levels = find_levels(synthetic_curve(), {}, "host");
  ASSERT_EQ(levels.size(), 4u);
  EXPECT_EQ(levels[0].name, "L1");
  EXPECT_EQ(levels[0].measured_size_bytes, 32u << 10);
  EXPECT_DOUBLE_EQ(levels[1].latency_ns, 4.0);
  EXPECT_EQ(levels[2].measured_size_bytes, 16u << 20);
  EXPECT_EQ(levels[3].name, "DRAM");
  EXPECT_FALSE(levels[3].reported_size_bytes.has_value());
}

TEST(FindLevels, TrustsTheCurveOverAnInflatedReportedCache) {
  // A virtual machine that reports the host's 300 MiB L3 while a thread sees an L3 step at 8 MiB
  // (figures from a probe run on such a machine).
  const double ns[] = {1.68, 1.69, 1.71, 1.74,  5.39,  5.37,  5.40,  5.39,  5.40,  7.40,
                       46.5, 51.7, 78.6, 113.5, 119.4, 119.6, 126.2, 128.2, 122.6, 132.8};
  std::vector<curve::point> pts;
  std::uint64_t size = 4096;
  for (double v : ns) {
    pts.push_back({static_cast<double>(size), {v, v, v}, {v}});
    size *= 2;
  }
  const auto levels =
      find_levels(pts, {{"L1d", 48 << 10}, {"L2", 2 << 20}, {"L3", 300ull << 20}}, "host");
  ASSERT_EQ(levels.size(), 4u);
  EXPECT_EQ(levels[0].name, "L1d");
  EXPECT_EQ(levels[0].measured_size_bytes, 32u << 10);
  EXPECT_EQ(levels[1].name, "L2");
  EXPECT_EQ(levels[1].measured_size_bytes, 2u << 20);  // 7.4 ns at 2 MiB is still near L2
  EXPECT_EQ(levels[2].name, "L3");
  EXPECT_NEAR(levels[2].latency_ns, 49.1, 0.1);
  EXPECT_EQ(levels[2].measured_size_bytes, 8u << 20);
  EXPECT_EQ(levels[2].reported_size_bytes, 300ull << 20);
  EXPECT_EQ(levels[3].name, "DRAM");
  EXPECT_GT(levels[3].latency_ns, 110);
}

TEST(FindLevels, SweepThatStopsInsideTheCachesHasNoDram) {
  std::vector<curve::point> pts;
  for (std::uint64_t s = 4096; s <= (1 << 20); s *= 2) {
    const double v = s <= (32 << 10) ? 1.0 : 4.0;
    pts.push_back({static_cast<double>(s), {v, v, v}, {v}});
  }
  const auto levels =
      find_levels(pts, {{"L1d", 32 << 10}, {"L2", 2 << 20}, {"L3", 32 << 20}}, "host");
  ASSERT_EQ(levels.size(), 2u);
  EXPECT_EQ(levels[0].name, "L1d");
  EXPECT_EQ(levels[1].name, "L2");
}

TEST(FindLevels, EmptyCurveGivesNoLevels) { EXPECT_TRUE(find_levels({}, {}, "host").empty()); }

}  // namespace
}  // namespace vramkit::probe::detail
