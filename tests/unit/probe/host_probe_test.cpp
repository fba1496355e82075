// The host probe at small sizes: every bandwidth figure is verified and sane, the latency curve
// rises from L1 to past L2, the header describes the machine. (Sanity only: speed targets live in
// bench/probe.)
#include "vramkit/probe/host_probe.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "vramkit/core/units.hpp"
#include "vramkit/probe/gpu_probe.hpp"

namespace vramkit::probe {
namespace {

const measurement* find(const probe_report& r, const std::string& key) {
  for (const auto& m : r.results) {
    if (m.key == key) return &m;
  }
  return nullptr;
}

TEST(HostProbe, BandwidthFiguresAreVerifiedAndSane) {
  probe_options o;
  o.quick = true;
  o.only = {"host"};
  o.host_buffer_bytes = 8 * MiB;
  o.host_threads = 2;
  o.host_repetitions = 2;
  probe_report r;
  run_host_probe(o, r);
  for (const auto& s : r.skips) EXPECT_FALSE(s.failed) << s.key << ": " << s.reason;
  for (const char* kind : {"read", "write", "copy", "triad"}) {
    for (const char* mode : {"one_thread", "all_threads"}) {
      const std::string key = std::string("host.bw.") + kind + "." + mode;
      const measurement* m = find(r, key);
      ASSERT_NE(m, nullptr) << key;
      EXPECT_TRUE(m->verified) << key;
      EXPECT_EQ(m->section, "host");
      EXPECT_EQ(m->unit, "GB/s");
      EXPECT_EQ(m->size_bytes, 8 * MiB);
      EXPECT_EQ(m->repetitions, 2);
      ASSERT_EQ(m->samples.size(), 2u) << key;
      EXPECT_GT(m->stats.median, 0.1) << key;
      EXPECT_LE(m->stats.min, m->stats.median);
      EXPECT_LE(m->stats.median, m->stats.max);
      EXPECT_FALSE(m->peak.has_value()) << "host DRAM peak is not known";
    }
  }
  EXPECT_EQ(find(r, "host.bw.copy.all_threads")->convention, byte_convention::read_plus_written);
  EXPECT_EQ(find(r, "host.bw.read.all_threads")->convention, byte_convention::read);
  EXPECT_EQ(find(r, "host.bw.write.one_thread")->convention, byte_convention::written);
  EXPECT_TRUE(r.curves.empty()) << "latency was not asked for";
}

TEST(HostProbe, HostKernelsAndOneThreadNarrowTheBandwidthRun) {
  probe_options o;
  o.only = {"host"};
  o.host_buffer_bytes = 4 * MiB;
  o.host_threads = 2;
  o.host_repetitions = 2;
  o.host_kernels = {"copy", "triad"};
  o.host_one_thread = false;
  probe_report r;
  run_host_probe(o, r);
  std::vector<std::string> keys;
  for (const auto& m : r.results) {
    if (m.section == "host") keys.push_back(m.key);
  }
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(keys,
            (std::vector<std::string>{"host.bw.copy.all_threads", "host.bw.triad.all_threads"}));
  EXPECT_TRUE(find(r, "host.bw.copy.all_threads")->verified);

  o.host_kernels = {"copy", "memset"};
  probe_report bad;
  try {
    run_host_probe(o, bad);
    FAIL() << "an unknown host kernel was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'memset'"), std::string::npos) << e.what();
  }
}

TEST(HostProbe, LatencyRisesFromL1ToPastL2) {
  probe_options o;
  o.quick = true;
  o.only = {"latency"};
  o.max_latency_bytes = 64 * MiB;  // past any L2 (and most L3 slices a single thread sees)
  o.host_repetitions = 3;
  probe_report r;
  run_host_probe(o, r);
  for (const auto& s : r.skips) EXPECT_FALSE(s.failed) << s.key << ": " << s.reason;
  ASSERT_EQ(r.curves.size(), 1u);
  const curve& c = r.curves.front();
  EXPECT_EQ(c.key, "host.latency");
  EXPECT_EQ(c.y_unit, "ns");
  ASSERT_GE(c.points.size(), 10u);
  EXPECT_EQ(c.points.front().x, 4096);
  EXPECT_EQ(c.points.back().x, 64.0 * MiB);
  for (const auto& p : c.points) {
    EXPECT_GT(p.y.median, 0) << p.x;
    EXPECT_EQ(p.samples.size(), 3u);
  }
  // At 4 KiB the chase stays in L1; at 64 MiB it misses L1 and L2 on every load.
  EXPECT_GT(c.points.back().y.median, 2.0 * c.points.front().y.median);
  ASSERT_FALSE(r.levels.empty());
  EXPECT_FALSE(r.results.empty());
  for (const auto& m : r.results) {
    EXPECT_EQ(m.section, "latency");
    EXPECT_EQ(m.unit, "ns");
    EXPECT_TRUE(m.verified);
  }
  EXPECT_TRUE(r.header.count("host.latency.pages"));
}

TEST(HostProbe, HeaderDescribesTheMachine) {
  probe_options o;
  o.command_line = "vramkit probe --quick";
  probe_report r;
  fill_host_header(o, r);
  for (const char* key :
       {"vramkit.version", "command_line", "date", "hostname", "host.cpu.model", "host.cpu.cores",
        "host.cpu.threads", "host.numa.nodes", "host.os.kernel"}) {
    EXPECT_TRUE(r.header.count(key)) << key;
  }
  EXPECT_EQ(r.header["command_line"], "vramkit probe --quick");
  EXPECT_GE(std::stoi(r.header["host.cpu.threads"]), 1);
}

// Neither side of the probe measures or skips anything for sections that were not asked for
// (the GPU side without touching a device: this runs on machines with and without one).
TEST(HostProbe, SectionsNotAskedForDoNothing) {
  using probe_side = void (*)(const probe_options&, probe_report&);
  const std::pair<probe_side, const char*> cases[] = {{run_host_probe, "h2d"},
                                                      {run_gpu_probe, "host"}};
  for (const auto& [run, section] : cases) {
    probe_options o;
    o.only = {section};
    probe_report r;
    run(o, r);
    EXPECT_TRUE(r.skips.empty()) << section;
    EXPECT_TRUE(r.results.empty()) << section;
    EXPECT_TRUE(r.curves.empty()) << section;
  }
}

}  // namespace
}  // namespace vramkit::probe
