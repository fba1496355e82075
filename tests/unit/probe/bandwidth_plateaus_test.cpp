// Reading the GPU cache levels off a bandwidth-over-working-set curve.
#include "vramkit/probe/detail/bandwidth_plateaus.hpp"
#include "vramkit/core/units.hpp"
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

using vramkit::KiB;
using vramkit::MiB;

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

// The plateaus of an L2 sweep over `xy`, named for an L2 of `l2_bytes`.
std::vector<bandwidth_plateau> l2_sweep_levels(const std::vector<std::pair<double, double>>& xy,
                                               double l2_bytes) {
  const auto pts = curve_of(xy);
  auto p = find_bandwidth_plateaus(pts);
  name_l2_sweep_plateaus(p, pts, static_cast<std::uint64_t>(l2_bytes));
  return p;
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

// Shaped like an L2 sweep (sets from an eighth of the L2 up, L1 bypassed) on a GPU whose L2 has a
// near partition: a faster run to half the L2, the L2 to its size, device memory past it.
TEST(BandwidthPlateaus, NamesTheLevelsOfAnL2Sweep) {
  std::vector<std::pair<double, double>> xy;
  for (double x = 7.5 * MiB; x <= 22.5 * MiB; x += 7.5 * MiB) xy.emplace_back(x, 13000);
  for (double x = 30 * MiB; x <= 60 * MiB; x += 3.75 * MiB) xy.emplace_back(x, 10000);
  xy.emplace_back(63.75 * MiB, 6500);
  for (double x = 67.5 * MiB; x <= 240 * MiB; x *= 1.5) xy.emplace_back(x, 4700);
  const auto p = l2_sweep_levels(xy, 60 * MiB);
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[0].name, "L2 near");
  EXPECT_EQ(p[1].name, "L2");
  EXPECT_EQ(p[2].name, "HBM");
  // The L2's band edge 8800 lies 1200/3500 of the way (log x) from 60 MiB to 63.75 MiB.
  EXPECT_NEAR(p[1].end_x / MiB, 60 * std::pow(63.75 / 60, 1200.0 / 3500), 0.01);
}

TEST(BandwidthPlateaus, AnL2SweepCutShortBeforeDeviceMemoryHasOnlyAnL2) {
  std::vector<std::pair<double, double>> xy;
  for (double x = 4 * MiB; x <= 28 * MiB; x += 4 * MiB) xy.emplace_back(x, 9000);
  const auto p = l2_sweep_levels(xy, 32 * MiB);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].name, "L2");
  EXPECT_EQ(p[0].end_x, 0);  // no size: the curve never left it
  // Past the L2 from its first point: no L2 level at all.
  const auto q = l2_sweep_levels(xy, 2 * MiB);
  EXPECT_TRUE(q[0].name.empty());
}

TEST(BandwidthPlateaus, OneL2WithoutANearPart) {
  std::vector<std::pair<double, double>> xy;
  for (double x = 0.5 * MiB; x <= 4 * MiB; x *= 2) xy.emplace_back(x, 5000);
  for (double x = 8 * MiB; x <= 32 * MiB; x *= 2) xy.emplace_back(x, 1500);
  const auto p = l2_sweep_levels(xy, 6 * MiB);
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].name, "L2");
  EXPECT_EQ(p[1].name, "HBM");
  // The band's edge 0.88 x 5000 = 4400 lies 600/3500 of the way from 4 MiB (5000) to 8 MiB
  // (1500), in log x: 4 MiB x 2^(6/35), about 4.5 MiB.
  EXPECT_NEAR(p[0].end_x / MiB, 4 * std::exp2(600.0 / 3500), 0.01);
}

// A descent from the L2 to device memory slow enough to read as a run of its own (a GPU whose
// clocks still climb, a replacement policy that keeps part of a larger set): that run starts at
// the L2 size and is neither the L2 nor device memory; the L2 is the run before it.
TEST(BandwidthPlateaus, ARunBetweenTheL2AndDeviceMemoryIsNeither) {
  std::vector<std::pair<double, double>> xy;
  for (double x = 7.5 * MiB; x <= 52.5 * MiB; x += 7.5 * MiB) xy.emplace_back(x, 8800);
  xy.emplace_back(60 * MiB, 6300);
  xy.emplace_back(67.5 * MiB, 5800);
  xy.emplace_back(75 * MiB, 5500);
  for (double x = 82.5 * MiB; x <= 120 * MiB; x += 7.5 * MiB) xy.emplace_back(x, 4700);
  xy.emplace_back(180 * MiB, 4650);
  xy.emplace_back(240 * MiB, 4640);
  const auto pts = curve_of(xy);
  auto p = find_bandwidth_plateaus(pts);
  name_l2_sweep_plateaus(p, pts, static_cast<std::uint64_t>(60 * MiB));
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[0].name, "L2");
  EXPECT_TRUE(p[1].name.empty());
  EXPECT_EQ(pts[p[1].first].x, 60 * MiB);
  EXPECT_EQ(p[2].name, "HBM");
  EXPECT_EQ(why_no_l2_plateau(p, pts, static_cast<std::uint64_t>(60 * MiB)), "");
  // The L2's band edge 0.88 x 8800 = 7744 lies 1056/2500 of the way (log x) from 52.5 to 60 MiB.
  EXPECT_NEAR(p[0].end_x / MiB, 52.5 * std::pow(60 / 52.5, 1056.0 / 2500), 0.01);
}

// A lone point is no level: a curve whose only run below the L2 size is its first point has no
// L2, and the reason names the plateaus, the reported size and the curve's spread.
TEST(BandwidthPlateaus, NoL2SaysWhyWithThePlateausFound) {
  std::vector<std::pair<double, double>> xy = {{7.5 * MiB, 9000}};
  for (double x = 37.5 * MiB; x <= 120 * MiB; x += 7.5 * MiB) xy.emplace_back(x, 4700);
  const auto pts = curve_of(xy);
  auto p = find_bandwidth_plateaus(pts);
  name_l2_sweep_plateaus(p, pts, static_cast<std::uint64_t>(60 * MiB));
  ASSERT_EQ(p.size(), 2u);
  EXPECT_TRUE(p[0].name.empty());
  EXPECT_EQ(p[1].name, "HBM");
  EXPECT_EQ(why_no_l2_plateau(p, pts, static_cast<std::uint64_t>(60 * MiB)),
            "no plateau before device memory both starts below the reported L2 size (60.00 MiB) "
            "and spans 1.25x in working set: plateaus 7.50 MiB at 9000 GB/s; 37.50 "
            "MiB-120.00 MiB at 4700 GB/s (HBM); the curve spans 4700 to 9000 GB/s (1.91x)");
  // A sweep that starts past the L2 says so.
  const auto far = curve_of({{64 * MiB, 4700}, {128 * MiB, 4690}});
  auto q = find_bandwidth_plateaus(far);
  name_l2_sweep_plateaus(q, far, static_cast<std::uint64_t>(60 * MiB));
  EXPECT_EQ(
      why_no_l2_plateau(q, far, static_cast<std::uint64_t>(60 * MiB))
          .rfind("the sweep starts at 64.00 MiB, not below the reported L2 size (60.00 MiB): ", 0),
      0u);
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

// A point past the run that reads faster than the plateau (a set re-read sooner than the sweep
// intends: blocks trailing each other, L1 hits) neither extends the plateau nor ends it: the end
// lies between the last point inside the band and the first one below it.
TEST(BandwidthPlateaus, AFasterPointPastTheRunNeitherExtendsNorEndsIt) {
  std::vector<std::pair<double, double>> xy;
  for (double x = 1 * MiB; x <= 32 * MiB; x *= 2) xy.emplace_back(x, 9000);
  xy.emplace_back(40 * MiB, 11000);
  xy.emplace_back(48 * MiB, 6000);
  for (double x = 64 * MiB; x <= 256 * MiB; x *= 2) xy.emplace_back(x, 4800);
  const auto pts = curve_of(xy);
  const auto p = find_bandwidth_plateaus(pts);
  ASSERT_EQ(p.size(), 2u);
  // Edge 7920: (9000 - 7920) / 3000 of the way from 32 to 48 MiB in log x.
  EXPECT_NEAR(p[0].end_x / MiB, 32 * std::pow(48.0 / 32, 1080.0 / 3000), 0.01);
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

probe_report read_fixture(const std::string& name) {
  std::ifstream in(std::string(VRAMKIT_SOURCE_DIR) + "/tests/data/probe/cache/" + name);
  EXPECT_TRUE(in) << name;
  std::stringstream text;
  text << in.rdbuf();
  return report_from_json(text.str());
}

// The first H200 sweep of 2026-12-01 (driver 580.159.04, tests/data/probe/cache): every block read
// the whole set up to the reported L2 (60 MiB), then the blocks shared it: L1/shared about 19 TB/s
// to half a MiB, one L2 plateau about 9 TB/s from 1.5 to 60 MiB, then 11.5 TB/s at 64 MiB (the
// first set read the other way, its per-multiprocessor share partly in L1) before device memory.
TEST(BandwidthPlateaus, MeasuredH200Sweep) {
  const probe_report r = read_fixture("h200-2026-12-01.json");
  ASSERT_EQ(r.curves.size(), 1u);
  const auto& pts = r.curves[0].points;
  const auto p = find_bandwidth_plateaus(pts);
  ASSERT_EQ(p.size(), 3u);
  const auto &l1 = p[0], &l2 = p[1], &hbm = p[2];
  EXPECT_NEAR(l1.bandwidth, 18926, 50);  // the median of 11 points, 16 KiB to 0.5 MiB
  EXPECT_NEAR(l2.bandwidth, 9035, 100);
  EXPECT_NEAR(hbm.bandwidth, 4782, 10);
  EXPECT_EQ(pts[l2.first].x, 1.5 * MiB);
  EXPECT_EQ(pts[l2.last].x, 60 * MiB);
  // The L1 level leaves its band (0.88 x the median) between 0.5 MiB and 0.75 MiB.
  EXPECT_GT(l1.end_x, 0.5 * MiB);
  EXPECT_LT(l1.end_x, 0.75 * MiB);
  // The L2 band's edge (0.88 x the plateau) is crossed between 60 MiB (8674, the last point inside
  // the band: 64 MiB is above it) and 67.5 MiB (7083): 63.3 MiB = 1.06 x the reported 60 MiB.
  const double edge = 0.88 * l2.bandwidth;
  EXPECT_NEAR(l2.end_x / MiB, 60 * std::pow(67.5 / 60, (8674.1 - edge) / (8674.1 - 7082.5)), 0.05);
  EXPECT_NEAR(l2.end_x / MiB, 63.3, 0.3);
  EXPECT_EQ(hbm.end_x, 0);
}

// The second H200 sweep of 2026-12-01 (same GPU and driver): every block read the whole set up to
// 1.5x the L2. Its plateau used to be read as ending at 88.1 MiB = 1.47x the reported 60 MiB: the
// point at 82.5 MiB reads faster than the plateau (10852 GB/s: blocks trailing each other re-read
// lines a leading block just fetched, in L2 and in L1) and counted as inside it. Now the end is
// where the curve first falls below the band, between 71.25 MiB (7923) and 75 MiB (7361): 72.0
// MiB. Still 1.2x the L2: with every block reading the whole set the L2 answers well past its
// size, which is why the size now comes from a sweep in which the grid reads the set once a pass
// with L1 bypassed (cache.l2_sweep).
TEST(BandwidthPlateaus, SecondH200SweepEndsBeforeItsFasterPoint) {
  const probe_report r = read_fixture("h200-2026-12-01-second-run.json");
  ASSERT_EQ(r.curves.size(), 1u);
  const auto& pts = r.curves[0].points;
  const auto l2_bytes = std::stod(r.header.at("gpu.0.l2_bytes"));
  const auto p = find_bandwidth_plateaus(pts);
  ASSERT_EQ(p.size(), 3u);
  const auto& l2 = p[1];
  EXPECT_NEAR(l2.bandwidth, 8878, 30);
  EXPECT_EQ(pts[l2.first].x, 1.5 * MiB);
  EXPECT_EQ(pts[l2.last].x, 71.25 * MiB);
  const double edge = 0.88 * l2.bandwidth;
  EXPECT_NEAR(l2.end_x / MiB, 71.25 * std::pow(75.0 / 71.25, (7923.0 - edge) / (7923.0 - 7360.8)),
              0.05);
  EXPECT_NEAR(l2.end_x / MiB, 72.0, 0.3);
  EXPECT_LT(l2.end_x, 82.5 * MiB);
  EXPECT_GT(l2.end_x / l2_bytes, 1.15);  // the whole-set read's overestimate, kept in view
}

// An L2 sweep of the H200 (2026-12-01, driver 580.159.04, full sizes: sixteenths and thirty-seconds
// of the L2 near its size): about 8.8 TB/s from 7.5 to 54.4 MiB, a short step at 7.2 TB/s at
// 56.3-58.1 MiB on the way down, device memory from 61.9 MiB. That run read the step as the L2
// (7.2 TB/s, 59.5 MiB); the L2 is the wide run before it, and its size where the curve leaves it:
// between 54.375 MiB (8069) and 56.25 MiB (7212), 0.92x the reported 60 MiB.
TEST(BandwidthPlateaus, MeasuredH200L2SweepSkipsTheStepOfTheDescent) {
  const probe_report r = read_fixture("h200-2026-12-01-l2-sweep.json");
  ASSERT_EQ(r.curves.size(), 1u);
  const auto& pts = r.curves[0].points;
  const auto l2_bytes = std::stoull(r.header.at("gpu.0.l2_bytes"));
  auto p = find_bandwidth_plateaus(pts);
  name_l2_sweep_plateaus(p, pts, l2_bytes);
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[0].name, "L2");
  EXPECT_TRUE(p[1].name.empty());
  EXPECT_EQ(p[2].name, "HBM");
  EXPECT_EQ(pts[p[0].first].x, 7.5 * MiB);
  EXPECT_EQ(pts[p[0].last].x, 54.375 * MiB);
  EXPECT_NEAR(p[0].bandwidth, 8774, 1);
  EXPECT_NEAR(p[2].bandwidth, 4763, 1);
  const double edge = 0.88 * p[0].bandwidth;
  EXPECT_NEAR(p[0].end_x / MiB,
              54.375 * std::pow(56.25 / 54.375, (8069.4 - edge) / (8069.4 - 7211.7)), 0.01);
  EXPECT_NEAR(p[0].end_x / double(l2_bytes), 0.92, 0.01);
  // Its quick sizes (eighths of the L2) read the same level and size band.
  std::vector<curve::point> quick;
  for (const auto& pt : pts)
    if (std::fmod(pt.x, 7.5 * MiB) == 0) quick.push_back(pt);
  auto q = find_bandwidth_plateaus(quick);
  name_l2_sweep_plateaus(q, quick, l2_bytes);
  ASSERT_EQ(q.size(), 2u);
  EXPECT_EQ(q[0].name, "L2");
  EXPECT_EQ(q[1].name, "HBM");
  EXPECT_GT(q[0].end_x, 52.5 * MiB);
  EXPECT_LT(q[0].end_x, 60 * MiB);
}

TEST(BandwidthPlateaus, EmptyCurveHasNone) { EXPECT_TRUE(find_bandwidth_plateaus({}).empty()); }

}  // namespace
}  // namespace vramkit::probe::detail
