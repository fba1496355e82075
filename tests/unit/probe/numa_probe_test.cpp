// The host sections on a described topology in which this machine's NUMA node 0 is a memory-only
// node (an hwloc XML plus a sysfs tree, tests/data/probe/{hwloc,sysfs}/memory-only-node0) and its
// CPUs sit on a node 1 that has no memory here. Binding and pinning act on this machine, so the
// memory-only node's bandwidth and latency are measured for real, from the CPUs nearest to it; the
// node that does not exist gets no figures, only the reason.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "probe/host_probe_detail.hpp"
#include "probe/host_topology.hpp"
#include "vramkit/core/units.hpp"

namespace vramkit::probe::detail {
namespace {

const measurement* find(const probe_report& r, const std::string& key) {
  for (const auto& m : r.results)
    if (m.key == key) return &m;
  return nullptr;
}

const skipped* find_skip(const probe_report& r, const std::string& key) {
  for (const auto& s : r.skips)
    if (s.key == key) return &s;
  return nullptr;
}

TEST(NumaProbe, AMemoryOnlyNodeIsMeasuredFromTheNearestCpusAndAMissingNodeSaysWhy) {
  const std::string data = std::string(VRAMKIT_SOURCE_DIR) + "/tests/data/probe";
  const host_topology topo(data + "/sysfs/memory-only-node0",
                           data + "/hwloc/memory-only-node0.xml");
  if (topo.backend().rfind("hwloc", 0) != 0) GTEST_SKIP() << "built without hwloc";
  // A machine with a real node 1 would bind there: this test is about one that has none.
  if (std::filesystem::exists("/sys/devices/system/node/node1"))
    GTEST_SKIP() << "this machine has a NUMA node 1";
  ASSERT_EQ(topo.numa_nodes().size(), 2u);
  const auto& n0 = topo.numa_nodes()[0].os_index == 0 ? topo.numa_nodes()[0] : topo.numa_nodes()[1];
  const auto& n1 = &n0 == &topo.numa_nodes()[0] ? topo.numa_nodes()[1] : topo.numa_nodes()[0];
  EXPECT_EQ(classify(n0), numa_kind::memory_only);
  ASSERT_FALSE(n1.pus.empty());
  EXPECT_EQ(nearest_cpu_node(topo.numa_nodes(), 0)->os_index, 1);

  probe_options o;
  o.only = {"host", "latency"};
  o.host_buffer_bytes = 4 * MiB;
  o.max_latency_bytes = 256 * KiB;
  o.host_repetitions = 2;
  o.host_one_thread = false;
  o.host_memory_bytes = 256 * MiB;  // the DRAM chase then takes a quarter: 64 MiB
  probe_report r;
  run_host_sections(topo, o, r);

  // The memory-only node: all four kernels, from node 1's CPUs, on memory found on node 0.
  for (const char* k : {"read", "write", "copy", "triad"}) {
    const auto* m = find(r, std::string("host.numa0.bw.") + k + ".all_threads");
    ASSERT_NE(m, nullptr) << k;
    EXPECT_TRUE(m->verified);
    EXPECT_GT(m->stats.median, 0.1) << k;
    EXPECT_NE(m->title.find("memory-only; threads on node 1"), std::string::npos) << m->title;
    EXPECT_EQ(m->extra.at("host_numa_node"), 0);
  }
  // Far memory: threads on node 1, memory on node 0.
  ASSERT_NE(find(r, "host.numa1->numa0.bw.copy.all_threads"), nullptr);
  // Node 1 has no memory on this machine: no figures, a reason.
  EXPECT_EQ(find(r, "host.numa1.bw.copy.all_threads"), nullptr);
  const auto* s = find_skip(r, "host.numa1.bw");
  ASSERT_NE(s, nullptr);
  EXPECT_NE(s->reason.find("NUMA node 1"), std::string::npos) << s->reason;

  // DRAM latency with the memory on the memory-only node, the thread on node 1.
  const auto* lat = find(r, "host.numa0.latency.dram");
  ASSERT_NE(lat, nullptr);
  EXPECT_EQ(lat->extra.at("memory_only_node"), 1);
  EXPECT_EQ(lat->extra.at("thread_numa_node"), 1);
  EXPECT_EQ(lat->size_bytes, 64 * MiB);
  EXPECT_GT(lat->stats.median, 1.0);  // ns: past every cache
  EXPECT_NE(lat->title.find("memory-only"), std::string::npos) << lat->title;
  EXPECT_EQ(find(r, "host.numa1.latency.dram"), nullptr);
  ASSERT_NE(find_skip(r, "host.numa1.latency.dram"), nullptr);
}

}  // namespace
}  // namespace vramkit::probe::detail
