// Verdicts on synthetic reports: ranges, causes read from the header, unknown devices, and the
// shipped reference table's consistency with the probe's keys.
#include "vramkit/probe/verdict.hpp"

#include <algorithm>

#include <gtest/gtest.h>

#include "vramkit/core/error.hpp"
#include "vramkit/probe/probe.hpp"

namespace vramkit::probe {
namespace {

measurement gpu_figure(const std::string& key, double median, const std::string& unit = "GB/s") {
  measurement m;
  m.key = key;
  m.device = key.substr(0, key.find('.'));
  m.unit = unit;
  m.samples = {median};
  m.stats = sample_stats::of(m.samples);
  return m;
}

probe_report h200(int gen, int width) {
  probe_report r;
  r.header["gpu.0.name"] = "NVIDIA H200";
  r.header["gpu.0.pcie.gen.current"] = std::to_string(gen);
  r.header["gpu.0.pcie.gen.max"] = "5";
  r.header["gpu.0.pcie.width.current"] = std::to_string(width);
  r.header["gpu.0.pcie.width.max"] = "16";
  return r;
}

// The verdict on one figure of an H200 whose link trained at gen `gen` x`width`.
measurement judged(int gen, int width, const std::string& key, double median) {
  auto r = h200(gen, width);
  r.results.push_back(gpu_figure(key, median));
  apply_verdicts(r);
  return r.results[0];
}

TEST(Verdict, Gen4LinkOnGen5CardIsLowWithThatReason) {
  const auto m = judged(4, 16, "gpu0.h2d.pinned", 26.0);
  EXPECT_EQ(m.verdict, verdict_kind::low);
  EXPECT_NE(m.verdict_reason.find("PCIe link trained at gen 4 x16, below its maximum gen 5 x16"),
            std::string::npos)
      << m.verdict_reason;
}

TEST(Verdict, NarrowLinkIsNamed) {
  const auto m = judged(5, 8, "gpu0.d2h.pinned", 27.0);
  EXPECT_EQ(m.verdict, verdict_kind::low);
  EXPECT_NE(m.verdict_reason.find("x8"), std::string::npos);
}

TEST(Verdict, HealthyLinkInRangeIsNormal) {
  const auto m = judged(5, 16, "gpu0.h2d.pinned", 55.5);
  EXPECT_EQ(m.verdict, verdict_kind::normal);
}

TEST(Verdict, LowWithoutCauseSaysSo) {
  const auto m = judged(5, 16, "gpu0.h2d.pinned", 30);
  EXPECT_EQ(m.verdict, verdict_kind::low);
  EXPECT_NE(m.verdict_reason.find("no likely cause"), std::string::npos);
}

TEST(Verdict, FarNumaBufferAndClocksAreNamed) {
  auto r = h200(5, 16);
  r.header["gpu.0.numa_node"] = "0";
  r.header["gpu.0.clock.sm.current"] = "1200";
  r.header["gpu.0.clock.sm.max"] = "1980";
  auto m = gpu_figure("gpu0.h2d.pinned", 35);
  m.extra["host_numa_node"] = 1;
  r.results.push_back(m);
  apply_verdicts(r);
  EXPECT_EQ(r.results[0].verdict, verdict_kind::low);
  EXPECT_NE(r.results[0].verdict_reason.find("far NUMA node"), std::string::npos);
  EXPECT_NE(r.results[0].verdict_reason.find("sm clock 1200 MHz"), std::string::npos);
}

TEST(Verdict, PercentOfPeakAndHigh) {
  auto r = h200(5, 16);
  auto read =
      gpu_figure("gpu0.device.read", 4600);  // 93.6 % of peak: inside the measured H200 range
  read.peak = 4915;                          // from memory clock x bus width
  r.results.push_back(read);
  auto write = gpu_figure("gpu0.device.write", 4950);  // no peak: datasheet 4800 GB/s is used
  r.results.push_back(write);
  apply_verdicts(r);
  EXPECT_EQ(r.results[0].verdict, verdict_kind::normal) << r.results[0].verdict_reason;
  EXPECT_EQ(r.results[1].verdict, verdict_kind::high) << r.results[1].verdict_reason;
}

TEST(Verdict, UnknownDeviceAndUnknownKey) {
  probe_report r;
  r.header["gpu.0.name"] = "Imaginary GPU 9000";
  r.header["gpu.1.name"] = "NVIDIA H200";
  r.results.push_back(gpu_figure("gpu0.h2d.pinned", 50));
  r.results.push_back(gpu_figure("gpu1.alloc.cuda_malloc", 30, "us"));
  apply_verdicts(r);
  EXPECT_EQ(r.results[0].verdict, verdict_kind::unknown);
  EXPECT_EQ(r.results[0].verdict_reason, "no reference for Imaginary GPU 9000");
  EXPECT_EQ(r.results[1].verdict, verdict_kind::unknown);
}

TEST(Verdict, FarNumaHostCopyIsComparedWithLocal) {
  probe_report r;
  measurement local;
  local.key = "host.numa0.bw.copy.all_threads";
  local.device = "numa0";
  local.stats.median = 100;
  measurement far = local;
  far.key = "host.numa0->numa1.bw.copy.all_threads";
  far.stats.median = 60;
  r.results = {local, far};
  apply_verdicts(r);
  EXPECT_EQ(r.results[0].verdict, verdict_kind::unknown);
  EXPECT_EQ(r.results[1].verdict, verdict_kind::low);
  EXPECT_NE(r.results[1].verdict_reason.find("far NUMA node"), std::string::npos);
}

TEST(ReferenceTable, MatchesDeviceNames) {
  const auto& t = reference_table::embedded();
  auto name_of = [&](const std::string& dev) {
    const auto* m = t.find(dev);
    return m ? m->name : std::string("none");
  };
  EXPECT_EQ(name_of("NVIDIA H200"), "NVIDIA H200");
  EXPECT_EQ(name_of("NVIDIA H100 PCIe"), "NVIDIA H100 PCIe");
  EXPECT_EQ(name_of("NVIDIA H100 80GB HBM3"), "NVIDIA H100 SXM");
  EXPECT_EQ(name_of("NVIDIA A100-SXM4-80GB"), "NVIDIA A100 80GB SXM");
  EXPECT_EQ(name_of("NVIDIA A100-SXM4-40GB"), "NVIDIA A100 40GB SXM");
  EXPECT_EQ(name_of("NVIDIA A100 80GB PCIe"), "NVIDIA A100 80GB PCIe");
  EXPECT_EQ(name_of("NVIDIA A100-PCIE-40GB"), "NVIDIA A100 40GB PCIe");
  EXPECT_EQ(name_of("NVIDIA L40S"), "NVIDIA L40S");
  EXPECT_EQ(name_of("NVIDIA GeForce RTX 4090"), "NVIDIA GeForce RTX 4090");
  EXPECT_EQ(name_of("Tesla V100-SXM2-16GB"), "none");
}

TEST(ReferenceTable, EveryRangeNamesAKeyTheProbeProduces) {
  std::vector<std::string> keys;
  for (const auto& [k, d] : probe_keys()) {
    std::string inst = k;
    for (auto [from, to] : {std::pair{"{N}", "0"}, {"{A}", "0"}, {"{B}", "1"}}) {
      for (auto p = inst.find(from); p != std::string::npos; p = inst.find(from))
        inst.replace(p, 3, to);
    }
    keys.push_back(inst);
  }
  for (const auto& model : reference_table::embedded().models) {
    EXPECT_GT(model.datasheet.count("memory_bandwidth_gbs"), 0u) << model.name;
    EXPECT_FALSE(model.datasheet_source.empty()) << model.name;
    for (const auto& range : model.ranges) {
      EXPECT_FALSE(range.source.empty());
      const bool used = std::any_of(keys.begin(), keys.end(), [&](const std::string& k) {
        return key_matches(range.key_pattern, k);
      });
      EXPECT_TRUE(used) << model.name << ": " << range.key_pattern << " matches no probe key";
    }
  }
}

TEST(ReferenceTable, RejectsMalformedTables) {
  EXPECT_THROW(reference_table::from_json(nlohmann::json::object()), invalid_input);
  auto bad = nlohmann::json::parse(R"({"models":[{"name":"x","match":[["x"]],"ranges":[
      {"key":"gpu{N}.h2d.pinned","unit":"GB/s","min":5,"max":1,"kind":"measured","source":"s"}]}]})");
  EXPECT_THROW(reference_table::from_json(bad), invalid_input);
}

TEST(KeyMatches, Placeholders) {
  EXPECT_TRUE(key_matches("gpu{N}.h2d.pinned", "gpu12.h2d.pinned"));
  EXPECT_FALSE(key_matches("gpu{N}.h2d.pinned", "gpu0.h2d.pinned.sweep"));
  EXPECT_TRUE(key_matches("gpu{A}->gpu{B}.p2p.ce.unidir", "gpu0->gpu3.p2p.ce.unidir"));
  EXPECT_FALSE(key_matches("gpu{N}.h2d.pinned", "gpuX.h2d.pinned"));
  EXPECT_TRUE(key_matches("gpu{N}.h2d.*", "gpu1.h2d.pageable"));
}

}  // namespace
}  // namespace vramkit::probe

namespace vramkit::probe {
namespace {

// Regression: the H200 ranges are our own measurements; a read at 83 % of peak is below them.
TEST(Verdict, H200ReadFarBelowMeasuredRangeIsLow) {
  auto r = h200(5, 16);
  auto read = gpu_figure("gpu0.device.read", 4100);
  read.peak = 4915;
  r.results.push_back(read);
  apply_verdicts(r);
  EXPECT_EQ(r.results[0].verdict, verdict_kind::low) << r.results[0].verdict_reason;
}

}  // namespace
}  // namespace vramkit::probe
