// Reading the loaded-latency curve: where latency doubles as the streamed bandwidth grows.
#include <gtest/gtest.h>

#include "vramkit/probe/detail/latency_curve.hpp"

namespace vramkit::probe::detail {
namespace {

curve::point pt(double gbps, double ns) {
  curve::point p;
  p.x = gbps;
  p.samples = {ns};
  p.y = sample_stats::of(p.samples);
  return p;
}

TEST(LoadedLatency, BandwidthWhereLatencyDoubles) {
  // Idle 80 ns at 0.5 GB/s; 160 ns is crossed between 100 GB/s (120 ns) and 120 GB/s (200 ns).
  const std::vector<curve::point> c = {pt(120, 200), pt(0.5, 80), pt(50, 90), pt(100, 120)};
  const auto at = bandwidth_at_latency(c, 2.0);
  ASSERT_TRUE(at.has_value());
  EXPECT_NEAR(*at, 110.0, 1e-9);
}

TEST(LoadedLatency, NeverDoublingHasNoAnswer) {
  EXPECT_FALSE(bandwidth_at_latency({pt(1, 80), pt(50, 100), pt(90, 150)}, 2.0).has_value());
  EXPECT_FALSE(bandwidth_at_latency({pt(1, 80)}, 2.0).has_value());
}

TEST(LoadedLatency, DelaysGoFromLightToFullSpeed) {
  for (bool quick : {true, false}) {
    const auto d = loaded_latency_delays(quick);
    ASSERT_GE(d.size(), 3u);
    EXPECT_EQ(d.back(), 0u);
    for (std::size_t i = 1; i < d.size(); ++i) EXPECT_LT(d[i], d[i - 1]);
  }
}

}  // namespace
}  // namespace vramkit::probe::detail
