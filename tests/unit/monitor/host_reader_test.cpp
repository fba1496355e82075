// Host readers on the fixture trees in tests/data/monitor.
#include "vramkit/monitor/host_reader.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

namespace vramkit::monitor {
namespace {

const std::filesystem::path data = std::filesystem::path(VRAMKIT_SOURCE_DIR) / "tests/data/monitor";

TEST(HostReader, ReadsMeminfoInBytes) {
  auto m = read_host_memory(data / "host");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->total_bytes, 2113396288ULL * 1024);
  EXPECT_EQ(m->available_bytes, 2000000000ULL * 1024);
  EXPECT_EQ(m->cached_bytes, 50000000ULL * 1024);
  EXPECT_EQ(m->hugepages_total, 16U);  // a count, no kB unit
  EXPECT_EQ(m->hugepage_size_bytes, 2048U * 1024);
  EXPECT_EQ(m->mlocked_bytes, 32768U * 1024);
  EXPECT_EQ(m->unevictable_bytes, 65536U * 1024);
}

TEST(HostReader, MeminfoWithoutTotalIsEmpty) {
  EXPECT_FALSE(parse_meminfo("MemFree: 10 kB\n"));
  EXPECT_FALSE(read_host_memory(data / "no-such-root"));
}

TEST(HostReader, ReadsNumaNodesSorted) {
  auto nodes = read_numa_memory(data / "host");
  ASSERT_EQ(nodes.size(), 2U);
  EXPECT_EQ(nodes[0].node, 0U);
  EXPECT_EQ(nodes[0].total_bytes, 1056698144ULL * 1024);
  EXPECT_EQ(nodes[1].free_bytes, 940000000ULL * 1024);
  EXPECT_TRUE(read_numa_memory(data / "host-v1").empty());
}

TEST(HostReader, ReadsProcessRssUserAndCommandLine) {
  auto p = read_host_process(data / "host", 4242);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->rss_bytes, 8388608ULL * 1024);
  EXPECT_EQ(p->pinned_bytes, 2097152ULL * 1024);
  EXPECT_EQ(p->user, "alice");
  EXPECT_EQ(p->command, "python3 train.py --batch-size 8");
  EXPECT_FALSE(read_host_process(data / "host", 999999));
}

TEST(HostReader, ParsesCgroupLimits) {
  EXPECT_EQ(parse_cgroup_limit("max\n"), std::nullopt);
  EXPECT_EQ(parse_cgroup_limit("9223372036854771712\n"), std::nullopt);  // v1 "unlimited"
  EXPECT_EQ(parse_cgroup_limit("68719476736\n"), 68719476736ULL);
  EXPECT_EQ(parse_cgroup_limit("garbage"), std::nullopt);
  EXPECT_EQ(parse_cgroup_limit(""), std::nullopt);
}

TEST(HostReader, ReadsCgroupV2LimitAndUsage) {
  auto c = read_cgroup_memory(data / "host");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->version, 2);
  EXPECT_EQ(c->path, "/system.slice/job.scope");
  EXPECT_EQ(c->limit_bytes, 64ULL << 30);
  EXPECT_EQ(c->usage_bytes, 1ULL << 30);
}

TEST(HostReader, ReadsCgroupV1WhenTheMemoryControllerIsV1) {
  auto c = read_cgroup_memory(data / "host-v1");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->version, 1);
  EXPECT_EQ(c->limit_bytes, std::nullopt);
  EXPECT_EQ(c->usage_bytes, 524288000U);
}

TEST(HostReader, ReadsTheLiveSystem) {
  auto m = read_host_memory("/");
  ASSERT_TRUE(m) << "/proc/meminfo must be readable on Linux";
  EXPECT_GT(m->total_bytes, 0U);
  auto self = read_host_process("/", static_cast<std::uint32_t>(getpid()));
  ASSERT_TRUE(self);
  EXPECT_GT(self->rss_bytes.value_or(0), 0U);
}

}  // namespace
}  // namespace vramkit::monitor
