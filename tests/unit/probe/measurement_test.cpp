// Tests of the result model's helpers and of the probe's section checking.
#include "vramkit/probe/measurement.hpp"

#include <algorithm>
#include <set>

#include <gtest/gtest.h>

#include "vramkit/core/error.hpp"
#include "vramkit/probe/probe.hpp"

namespace vramkit::probe {
namespace {

TEST(SampleStats, MedianOfOddAndEvenCounts) {
  auto s = sample_stats::of({5, 1, 3});
  EXPECT_DOUBLE_EQ(s.min, 1);
  EXPECT_DOUBLE_EQ(s.median, 3);
  EXPECT_DOUBLE_EQ(s.max, 5);
  s = sample_stats::of({4, 1, 3, 2});
  EXPECT_DOUBLE_EQ(s.median, 2.5);
  s = sample_stats::of({});
  EXPECT_DOUBLE_EQ(s.median, 0);
}

TEST(ByteConvention, Names) {
  EXPECT_STREQ(to_string(byte_convention::read_plus_written), "read_plus_written");
  EXPECT_STREQ(to_string(byte_convention::copied_once), "copied_once");
  EXPECT_STREQ(to_string(verdict_kind::low), "low");
}

TEST(Measurement, PercentOfPeak) {
  measurement m;
  m.stats.median = 45;
  EXPECT_FALSE(m.percent_of_peak().has_value());
  m.peak = 60;
  EXPECT_DOUBLE_EQ(*m.percent_of_peak(), 75);
}

TEST(ProbeSections, KnowsHostAndGpuSections) {
  const auto s = probe_sections();
  for (const char* name : {"host", "latency", "gpu", "h2d", "device", "p2p"}) {
    EXPECT_NE(std::find(s.begin(), s.end(), name), s.end()) << name;
  }
  EXPECT_NO_THROW(check_sections({"host", "h2d"}));
  try {
    check_sections({"host", "warp-drive"});
    FAIL() << "no invalid_input";
  } catch (const invalid_input& e) {
    EXPECT_NE(std::string(e.what()).find("warp-drive"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("latency"), std::string::npos);
  }
}

TEST(ProbeKeys, ListsHostAndGpuKeysOnce) {
  const auto keys = probe_keys();
  std::set<std::string> seen;
  for (const auto& [k, d] : keys) {
    EXPECT_TRUE(seen.insert(k).second) << "duplicate key " << k;
    EXPECT_FALSE(d.empty()) << k;
  }
  EXPECT_TRUE(seen.count("host.bw.copy.all_threads"));
  EXPECT_TRUE(seen.count("host.latency.{level}"));
  EXPECT_TRUE(seen.count("gpu{N}.h2d.pinned"));
}

}  // namespace
}  // namespace vramkit::probe
