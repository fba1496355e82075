// Reading the GPU cache levels off a bandwidth-over-working-set curve.
#include "vramkit/probe/detail/bandwidth_plateaus.hpp"
#include "vramkit/probe/report_json.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
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

TEST(BandwidthPlateaus, EndIsTheLastWorkingSetWithinTheBand) {
  const auto pts = three_levels();
  auto p = find_bandwidth_plateaus(pts);
  ASSERT_EQ(p.size(), 4u);
  // L1 -> L2: the band's edge 0.88 x 30000 = 26400 is crossed 3600/12000 of the way (in log x)
  // from 128 KiB (30000) to 256 KiB (18000).
  EXPECT_NEAR(p[0].end_x / KiB, 128 * std::exp2(3600.0 / 12000), 0.5);
  // near L2 -> far L2: 32 MiB (9500) is still within 12% of ~10000; 40 MiB (7600) is not.
  EXPECT_GT(p[1].end_x, 32 * MiB);
  EXPECT_LT(p[1].end_x, 40 * MiB);
  // far L2 -> HBM: 56 MiB (7300) within 12% of 7400; 64 MiB (4300) not.
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
  // The band's edge 0.88 x 5000 = 4400 lies 600/3500 of the way from 4 MiB (5000) to 8 MiB
  // (1500), in log x: 4 MiB x 2^(6/35), about 4.5 MiB.
  EXPECT_NEAR(p[1].end_x / MiB, 4 * std::exp2(600.0 / 3500), 0.01);
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

// A point past the run that reads faster than the plateau (the first working set past the L2,
// where the sweep switches to blocks sharing the set) has not left it: the end lies past it.
TEST(BandwidthPlateaus, AFasterPointPastTheRunDoesNotEndIt) {
  std::vector<std::pair<double, double>> xy;
  for (double x = 1 * MiB; x <= 32 * MiB; x *= 2) xy.emplace_back(x, 9000);
  xy.emplace_back(40 * MiB, 11000);
  xy.emplace_back(48 * MiB, 6000);
  for (double x = 64 * MiB; x <= 256 * MiB; x *= 2) xy.emplace_back(x, 4800);
  const auto pts = curve_of(xy);
  const auto p = find_bandwidth_plateaus(pts);
  ASSERT_EQ(p.size(), 2u);
  // Edge 7920: (11000 - 7920) / 5000 of the way from 40 to 48 MiB in log x.
  EXPECT_NEAR(p[0].end_x / MiB, 40 * std::pow(48.0 / 40, 3080.0 / 5000), 0.01);
}

// A plateau that ends in a slow decline: the end is where it leaves the band, however far the
// next plateau is.
TEST(BandwidthPlateaus, AGradualDeclineEndsWhereItLeavesTheBand) {
  std::vector<std::pair<double, double>> xy;
  for (double x = 1 * MiB; x <= 16 * MiB; x *= 2) xy.emplace_back(x, 10000);
  xy.emplace_back(24 * MiB, 9500);
  xy.emplace_back(32 * MiB, 8900);
  xy.emplace_back(40 * MiB, 8000);
  xy.emplace_back(48 * MiB, 6500);
  for (double x = 64 * MiB; x <= 256 * MiB; x *= 2) xy.emplace_back(x, 4000);
  const auto p = find_bandwidth_plateaus(curve_of(xy));
  ASSERT_EQ(p.size(), 2u);
  // Edge 8800 (the median is 10000): between 32 MiB (8900) and 40 MiB (8000).
  EXPECT_NEAR(p[0].end_x / MiB, 32 * std::pow(40.0 / 32, 100.0 / 900), 0.01);
}

// The sweep as measured on an H200 (driver 580.159.04, tests/data/probe/cache): L1/shared about
// 19 TB/s to half a MiB, one L2 plateau about 9 TB/s from 1.5 to 60 MiB, then 11.5 TB/s at
// 64 MiB (the first set past the reported L2, read with blocks sharing it) before device memory.
TEST(BandwidthPlateaus, MeasuredH200Sweep) {
  std::ifstream in(std::string(VRAMKIT_SOURCE_DIR) +
                   "/tests/data/probe/cache/h200-2026-12-01.json");
  ASSERT_TRUE(in);
  std::stringstream text;
  text << in.rdbuf();
  const probe_report r = report_from_json(text.str());
  ASSERT_EQ(r.curves.size(), 1u);
  const auto& pts = r.curves[0].points;
  const auto l2_bytes = std::stoull(r.header.at("gpu.0.l2_bytes"));
  auto p = find_bandwidth_plateaus(pts);
  name_gpu_cache_plateaus(p, pts, l2_bytes);
  const bandwidth_plateau *l1 = nullptr, *l2 = nullptr, *hbm = nullptr;
  for (const auto& q : p) {
    if (q.name == "L1") l1 = &q;
    if (q.name == "L2") l2 = &q;
    if (q.name == "HBM") hbm = &q;
  }
  ASSERT_NE(l1, nullptr);
  ASSERT_NE(l2, nullptr);
  ASSERT_NE(hbm, nullptr);
  EXPECT_NEAR(l1->bandwidth, 18926, 50);  // the median of 11 points, 16 KiB to 0.5 MiB
  EXPECT_NEAR(l2->bandwidth, 9035, 100);
  EXPECT_NEAR(hbm->bandwidth, 4782, 10);
  EXPECT_EQ(pts[l2->first].x, 1.5 * MiB);
  EXPECT_EQ(pts[l2->last].x, 60 * MiB);
  // The L1 level leaves its band (0.88 x the median) between 0.5 MiB and 0.75 MiB.
  EXPECT_GT(l1->end_x, 0.5 * MiB);
  EXPECT_LT(l1->end_x, 0.75 * MiB);
  // The L2 band's edge (0.88 x 9035 = 7951 GB/s) is crossed between 64 MiB (11459) and 67.5 MiB
  // (7083): 3508/4376 of the way in log x, 66.8 MiB = 1.11 x the reported 60 MiB.
  EXPECT_NEAR(l2->end_x / MiB, 64 * std::pow(67.5 / 64, (11459 - 0.88 * l2->bandwidth) / 4376),
              0.05);
  EXPECT_NEAR(l2->end_x / MiB, 66.8, 0.2);
  EXPECT_EQ(hbm->end_x, 0);
}

TEST(BandwidthPlateaus, EmptyCurveHasNone) { EXPECT_TRUE(find_bandwidth_plateaus({}).empty()); }

}  // namespace
}  // namespace vramkit::probe::detail
