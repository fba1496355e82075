// The hierarchy at a glance, from a report with GPU, host and NUMA figures.
#include "vramkit/probe/hierarchy.hpp"

#include <gtest/gtest.h>

#include "vramkit/probe/report_html.hpp"
#include "vramkit/probe/report_table.hpp"

namespace vramkit::probe {
namespace {

measurement fig(const std::string& key, const std::string& device, const std::string& unit,
                double v, verdict_kind verdict = verdict_kind::normal) {
  measurement m;
  m.key = key;
  m.device = device;
  m.unit = unit;
  m.samples = {v};
  m.stats = sample_stats::of(m.samples);
  m.verdict = verdict;
  return m;
}

probe_report sample_report() {
  probe_report r;
  r.header["gpu.0.l2_bytes"] = std::to_string(60ull << 20);
  r.header["gpu.0.memory_total"] = std::to_string(141ull << 30);
  r.header["host.numa.nodes"] = "3";
  r.header["host.numa.0.memory"] = "250 GiB";
  r.header["host.numa.0.kind"] = "CPUs and memory";
  r.header["host.numa.1.memory"] = "250 GiB";
  r.header["host.numa.1.kind"] = "CPUs and memory";
  r.header["host.numa.2.memory"] = "128 GiB";
  r.header["host.numa.2.kind"] = "memory-only";
  auto l2 = fig("gpu0.cache.l2", "gpu0", "GB/s", 9800);
  l2.extra["measured_size_bytes"] = 58.0 * (1 << 20);
  r.results.push_back(l2);
  r.results.push_back(fig("gpu0.latency.l2", "gpu0", "ns", 260, verdict_kind::low));
  auto read = fig("gpu0.device.read", "gpu0", "GB/s", 4300);
  read.peak = 4800;
  r.results.push_back(read);
  r.results.push_back(fig("gpu0.latency.hbm", "gpu0", "ns", 640));
  r.results.push_back(fig("gpu0.h2d.pinned", "gpu0", "GB/s", 55));
  r.results.push_back(fig("gpu0.d2h.pinned", "gpu0", "GB/s", 53.5));
  r.results.push_back(fig("host.bw.read.all_threads", "host", "GB/s", 210));
  r.results.push_back(fig("host.latency.dram", "host", "ns", 110));
  r.results.push_back(fig("host.numa2.bw.copy.all_threads", "numa2", "GB/s", 40));
  r.results.push_back(fig("host.numa2.latency.dram", "numa2", "ns", 390));
  r.results.push_back(fig("host.numa0.bw.read.all_threads", "numa0", "GB/s", 105));
  return r;
}

TEST(Hierarchy, OneRowPerLevelFastestFirst) {
  const auto h = hierarchy(sample_report());
  ASSERT_EQ(h.size(), 6u);
  EXPECT_EQ(h[0].name, "L2");
  EXPECT_EQ(h[1].name, "HBM");
  EXPECT_EQ(h[2].name, "host link (H2D)");
  EXPECT_EQ(h[3].name, "host DRAM");
  EXPECT_EQ(h[4].name, "NUMA node 0");
  EXPECT_EQ(h[5].name, "far memory: NUMA 2 (memory-only)");
}

TEST(Hierarchy, CarriesBothFiguresPeakSizeAndTheWorseVerdict) {
  const auto h = hierarchy(sample_report());
  EXPECT_DOUBLE_EQ(*h[0].bandwidth_gbps, 9800);
  EXPECT_DOUBLE_EQ(*h[0].latency_ns, 260);
  EXPECT_EQ(*h[0].size_bytes, 58ull << 20);    // measured, not the driver's 60 MiB
  EXPECT_EQ(h[0].verdict, verdict_kind::low);  // the latency's verdict is worse
  EXPECT_NEAR(*h[1].percent_of_peak, 100.0 * 4300 / 4800, 1e-9);
  EXPECT_EQ(*h[1].size_bytes, 141ull << 30);
  EXPECT_NE(h[2].note.find("D2H 53.5 GB/s"), std::string::npos);
  EXPECT_FALSE(h[2].latency_ns.has_value());
  EXPECT_EQ(h[5].bandwidth_key, "host.numa2.bw.copy.all_threads");
  EXPECT_DOUBLE_EQ(*h[5].latency_ns, 390);
}

TEST(Hierarchy, EmptyReportHasNoLevels) { EXPECT_TRUE(hierarchy(probe_report{}).empty()); }

TEST(Hierarchy, TableAndPageOpenWithIt) {
  const auto r = sample_report();
  const std::string t = to_table(r);
  const auto summary = t.find("memory hierarchy at a glance");
  ASSERT_NE(summary, std::string::npos);
  EXPECT_LT(summary, t.find("gpu.0.l2_bytes"));  // before the machine header
  EXPECT_NE(t.find("far memory: NUMA 2 (memory-only)"), std::string::npos);
  const std::string h = to_html(r);
  const auto glance = h.find("The hierarchy at a glance");
  ASSERT_NE(glance, std::string::npos);
  EXPECT_LT(glance, h.find("<h2>Results</h2>"));
  EXPECT_LT(h.find("<h2>Results</h2>"), h.find("Machine keys"));  // folded at the end
  EXPECT_NE(h.find("class=\"hb low\""), std::string::npos);
}

}  // namespace
}  // namespace vramkit::probe
