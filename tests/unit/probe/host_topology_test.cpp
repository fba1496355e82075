// NUMA nodes read from sysfs trees in the kernel's format (fixtures under tests/data/probe/sysfs):
// which nodes are memory-only, their memory and distances, and the nearest node with CPUs.
#include "probe/host_topology.hpp"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

namespace vramkit::probe::detail {
namespace {

std::string fixture(const std::string& name) {
  return std::string(VRAMKIT_SOURCE_DIR) + "/tests/data/probe/sysfs/" + name;
}

TEST(NumaSysfs, TwoSocketsAndACxlExpander) {
  const auto nodes = numa_nodes_from_sysfs(fixture("two-socket-cxl"));
  ASSERT_EQ(nodes.size(), 3u);
  EXPECT_EQ(nodes[0].os_index, 0);
  EXPECT_EQ(nodes[0].pus.size(), 32u);
  EXPECT_EQ(nodes[1].pus.front(), 16);
  EXPECT_EQ(classify(nodes[0]), numa_kind::cpus_and_memory);
  EXPECT_EQ(classify(nodes[1]), numa_kind::cpus_and_memory);
  EXPECT_EQ(classify(nodes[2]), numa_kind::memory_only);
  EXPECT_STREQ(to_string(classify(nodes[2])), "memory-only");
  EXPECT_EQ(nodes[2].memory_bytes, 134217728ull * 1024);
  EXPECT_EQ(nodes[2].distances, (std::vector<int>{14, 24, 10}));
  // The expander hangs off socket 0 (distance 14 against 24).
  const auto* near = nearest_cpu_node(nodes, 2);
  ASSERT_NE(near, nullptr);
  EXPECT_EQ(near->os_index, 0);
  EXPECT_EQ(nearest_cpu_node(nodes, 1)->os_index, 1);
}

TEST(NumaSysfs, HbmOnlyNodesBesideDdr) {
  const auto nodes = numa_nodes_from_sysfs(fixture("ddr-plus-hbm"));
  ASSERT_EQ(nodes.size(), 4u);
  EXPECT_EQ(classify(nodes[2]), numa_kind::memory_only);
  EXPECT_EQ(classify(nodes[3]), numa_kind::memory_only);
  EXPECT_EQ(nearest_cpu_node(nodes, 2)->os_index, 0);
  EXPECT_EQ(nearest_cpu_node(nodes, 3)->os_index, 1);
}

TEST(NumaSysfs, OneNodeAndNoTree) {
  const auto one = numa_nodes_from_sysfs(fixture("one-node"));
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(classify(one[0]), numa_kind::cpus_and_memory);
  EXPECT_EQ(one[0].pus, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_TRUE(numa_nodes_from_sysfs(fixture("no-such-tree")).empty());
}

TEST(NumaSysfs, ATopologyBuiltOnTheFixtureTakesItsMemoryOnlyNodes) {
  // hwloc (when present) describes this machine; the fixture's nodes only refine the nodes that
  // exist on both, so this checks the constructor accepts a root and keeps a usable topology.
  host_topology topo(fixture("two-socket-cxl"));
  EXPECT_FALSE(topo.numa_nodes().empty());
  EXPECT_GT(topo.pu_count(), 0);
}

TEST(Cpulist, ParsesTheKernelFormat) {
  EXPECT_EQ(parse_cpulist("0-3,8,10-11\n"), (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_TRUE(parse_cpulist("").empty());
  EXPECT_TRUE(parse_cpulist("\n").empty());
  EXPECT_EQ(parse_cpulist("5"), (std::vector<int>{5}));
  EXPECT_THROW(parse_cpulist("3-1"), std::invalid_argument);
  EXPECT_THROW(parse_cpulist("0-"), std::invalid_argument);
  EXPECT_THROW(parse_cpulist("a,b"), std::invalid_argument);
  EXPECT_THROW(parse_cpulist("1;2"), std::invalid_argument);
}

TEST(NumaKind, CpusWithoutMemory) {
  numa_node_info n;
  n.pus = {0, 1};
  n.memory_bytes = 0;
  EXPECT_EQ(classify(n), numa_kind::cpus_only);
}

}  // namespace
}  // namespace vramkit::probe::detail

namespace vramkit::probe::detail {
namespace {

// tests/data/probe/hwloc/one-socket-cxl.xml: hwloc 2.9's XML of a two-CPU machine with a second
// NUMA node added under the socket (64 GiB, the socket's cpuset, as hwloc describes a CXL
// expander). hwloc alone lists the socket's CPUs for both nodes.
TEST(NumaHwloc, ACpuLessNodeFromAnHwlocTopologyIsMemoryOnly) {
  const std::string xml =
      std::string(VRAMKIT_SOURCE_DIR) + "/tests/data/probe/hwloc/one-socket-cxl.xml";
  host_topology topo(fixture("no-such-tree"), xml);
  if (topo.backend().rfind("hwloc", 0) != 0) GTEST_SKIP() << "built without hwloc";
  const auto& nodes = topo.numa_nodes();
  ASSERT_EQ(nodes.size(), 2u);
  EXPECT_EQ(classify(nodes[0]), numa_kind::cpus_and_memory);
  EXPECT_EQ(nodes[0].pus, (std::vector<int>{0, 1}));
  EXPECT_EQ(classify(nodes[1]), numa_kind::memory_only);
  EXPECT_EQ(nodes[1].memory_bytes, 68719476736ull);
  EXPECT_EQ(nearest_cpu_node(nodes, 1)->os_index, 0);
}

TEST(NumaHwloc, TheKernelsListWinsWhereBothSpeak) {
  // The sysfs fixture says node 1 has CPUs 16-31 and 48-63; this process cannot use them, so the
  // hwloc view (none of its own) stands; node 0 keeps the CPUs the process may use.
  const std::string xml =
      std::string(VRAMKIT_SOURCE_DIR) + "/tests/data/probe/hwloc/one-socket-cxl.xml";
  host_topology topo(fixture("two-socket-cxl"), xml);
  if (topo.backend().rfind("hwloc", 0) != 0) GTEST_SKIP() << "built without hwloc";
  ASSERT_EQ(topo.numa_nodes().size(), 2u);
  EXPECT_EQ(topo.numa_nodes()[0].pus, (std::vector<int>{0, 1}));
  EXPECT_TRUE(topo.numa_nodes()[1].pus.empty());
  EXPECT_EQ(topo.numa_nodes()[1].distances, (std::vector<int>{21, 10, 24}));
}

}  // namespace
}  // namespace vramkit::probe::detail
