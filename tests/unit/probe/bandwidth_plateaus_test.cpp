// Reading the GPU cache levels off a bandwidth-over-working-set curve.
#include "vramkit/probe/detail/bandwidth_plateaus.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <utility>
#include <vector>

namespace vramkit::probe::detail {
namespace {

constexpr double KiB = 1024, MiB = 1024 * 1024;

std::vector<curve::point> curve_of(const std::vector<std::pair<double, double>>& xy) {
  std::vector<curve::point> pts;
  for (auto [x, y] : xy) {
    curve::point p;
    p.x = x;
    p.samples = {y * 0.99, y, y * 1.01};
    p.y = sample_stats::of(p.samples);
    pts.push_back(p);
  }
  return pts;
}

// Shaped like an H100/H200-class GPU: L1 ~ 30 TB/s to 128 KiB, L2 ~ 10 TB/s to ~30 MiB, a far-L2
// run ~ 7.5 TB/s to ~60 MiB, device memory ~ 3.9 TB/s.
std::vector<curve::point> three_levels() {
  std::vector<std::pair<double, double>> xy;
  for (double x = 16 * KiB; x <= 128 * KiB; x *= 2) xy.emplace_back(x, 30000);
  xy.emplace_back(256 * KiB, 18000);  // transition
  for (double x = 512 * KiB; x <= 24 * MiB; x *= 2)
    xy.emplace_back(x, 10000 + (x > 4 * MiB ? -300 : 200));
  xy.emplace_back(32 * MiB, 9500);
  xy.emplace_back(40 * MiB, 7600);
  xy.emplace_back(48 * MiB, 7400);
  xy.emplace_back(56 * MiB, 7300);
  xy.emplace_back(64 * MiB, 4300);
  for (double x = 96 * MiB; x <= 256 * MiB; x *= 1.5) xy.emplace_back(x, 3900);
  return curve_of(xy);
}

TEST(BandwidthPlateaus, FindsEachFlatRunAndDropsTransitions) {
  const auto pts = three_levels();
  auto p = find_bandwidth_plateaus(pts);
  ASSERT_EQ(p.size(), 4u);
  EXPECT_NEAR(p[0].bandwidth, 30000, 1);
  EXPECT_NEAR(p[1].bandwidth, 10000, 400);
  EXPECT_NEAR(p[2].bandwidth, 7400, 200);
  EXPECT_NEAR(p[3].bandwidth, 3900, 100);
  EXPECT_EQ(p[3].end_x, 0);
}

TEST(BandwidthPlateaus, EndIsWhereTheCurveCrossesHalfwayDown) {
  const auto pts = three_levels();
  auto p = find_bandwidth_plateaus(pts);
  ASSERT_EQ(p.size(), 4u);
  // L1 -> L2: 30000 -> ~10000, midpoint ~20000, crossed between 128 KiB (30000) and 256 KiB
  // (18000).
  EXPECT_GT(p[0].end_x, 128 * KiB);
  EXPECT_LT(p[0].end_x, 256 * KiB);
  // far L2 -> HBM: midpoint ~5650, crossed between 56 MiB (7300) and 64 MiB (4300).
  EXPECT_GT(p[2].end_x, 56 * MiB);
  EXPECT_LT(p[2].end_x, 64 * MiB);
}

TEST(BandwidthPlateaus, NamesTheLevelsAgainstTheReportedL2) {
  const auto pts = three_levels();
  auto p = find_bandwidth_plateaus(pts);
  name_gpu_cache_plateaus(p, pts, static_cast<std::uint64_t>(60 * MiB));
  ASSERT_EQ(p.size(), 4u);
  EXPECT_EQ(p[0].name, "L1");
  EXPECT_EQ(p[1].name, "L2 near");
  EXPECT_EQ(p[2].name, "L2");
  EXPECT_EQ(p[3].name, "HBM");
}

TEST(BandwidthPlateaus, OneL2WithoutANearPart) {
  std::vector<std::pair<double, double>> xy;
  for (double x = 16 * KiB; x <= 64 * KiB; x *= 2) xy.emplace_back(x, 20000);
  for (double x = 256 * KiB; x <= 4 * MiB; x *= 2) xy.emplace_back(x, 5000);
  for (double x = 8 * MiB; x <= 32 * MiB; x *= 2) xy.emplace_back(x, 1500);
  const auto pts = curve_of(xy);
  auto p = find_bandwidth_plateaus(pts);
  ASSERT_EQ(p.size(), 3u);
  name_gpu_cache_plateaus(p, pts, static_cast<std::uint64_t>(6 * MiB));
  EXPECT_EQ(p[0].name, "L1");
  EXPECT_EQ(p[1].name, "L2");
  EXPECT_EQ(p[2].name, "HBM");
  // Midpoint 3250 between 4 MiB (5000) and 8 MiB (1500): half way in log x, about 5.7 MiB.
  EXPECT_NEAR(p[1].end_x / MiB, 4 * std::exp2(0.5), 0.05);
}

TEST(BandwidthPlateaus, NoisyButFlatIsOnePlateau) {
  std::vector<std::pair<double, double>> xy;
  double y = 1000;
  for (double x = 16 * KiB; x <= 16 * MiB; x *= 2, y = y == 1000 ? 1080 : 1000)
    xy.emplace_back(x, y);
  const auto p = find_bandwidth_plateaus(curve_of(xy));
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].first, 0u);
  EXPECT_EQ(p[0].last, xy.size() - 1);
}

TEST(BandwidthPlateaus, EmptyCurveHasNone) { EXPECT_TRUE(find_bandwidth_plateaus({}).empty()); }

}  // namespace
}  // namespace vramkit::probe::detail
