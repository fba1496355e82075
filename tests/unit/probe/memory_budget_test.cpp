// The probe's host memory budget over fixture trees shaped like real hosts (file formats as the
// kernel writes them: meminfo, mountinfo, cgroup v1 and v2 memory files), the sizes fitted into
// it, and run_probe refusing a requested size that does not fit.
#include "vramkit/probe/memory_budget.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "vramkit/core/error.hpp"
#include "vramkit/core/units.hpp"
#include "vramkit/probe/probe.hpp"

namespace vramkit::probe {
namespace {

namespace fs = std::filesystem;

class fixture_root {
 public:
  fixture_root()
      : root_(fs::temp_directory_path() / ("vramkit_budget_" + std::to_string(::getpid()) + "_" +
                                           std::to_string(next_serial()))) {
    fs::create_directories(root_);
  }
  ~fixture_root() { fs::remove_all(root_); }
  fixture_root(const fixture_root&) = delete;
  fixture_root& operator=(const fixture_root&) = delete;
  void write(const std::string& path, const std::string& text) const {
    const fs::path p = root_ / fs::path(path).relative_path();
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
  }
  /// The process's view: /proc/meminfo, /proc/self/mountinfo and /proc/self/cgroup.
  void process(const std::string& meminfo, const std::string& mountinfo,
               const std::string& cgroup) const {
    write("/proc/meminfo", meminfo);
    write("/proc/self/mountinfo", mountinfo);
    write("/proc/self/cgroup", cgroup);
  }
  /// One cgroup level's limit and usage: `limit_file` and `usage_file` under `dir`.
  void level(const std::string& dir, const char* limit_file, const std::string& limit,
             const char* usage_file, const std::string& usage) const {
    write(dir + limit_file, limit + "\n");
    write(dir + usage_file, usage + "\n");
  }
  void v1_level(const std::string& dir, const std::string& limit, const std::string& usage) const {
    level(dir, "memory.limit_in_bytes", limit, "memory.usage_in_bytes", usage);
  }
  void v2_level(const std::string& dir, const std::string& max, const std::string& current) const {
    level(dir, "memory.max", max, "memory.current", current);
  }
  [[nodiscard]] const fs::path& path() const { return root_; }

 private:
  static int next_serial() {
    static int serial = 0;
    return ++serial;
  }
  fs::path root_;
};

constexpr const char* meminfo_20g =
    "MemTotal:       24684084 kB\n"
    "MemFree:         1104724 kB\n"
    "MemAvailable:   20954900 kB\n"
    "Buffers:          412344 kB\n";

// A cgroup v1 host (memory controller in its own hierarchy), as on a Slurm node or a container
// runtime without cgroup v2: the job's cgroup and its parent both limit.
TEST(MemoryBudget, CgroupV1JobAndParentLimitsAndTheTightestWins) {
  fixture_root f;
  f.process(meminfo_20g,
            "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
            "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
            "38 31 0:35 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n",
            "9:name=systemd:/\n4:memory:/slurm/uid_1000/job_42\n0::/\n");
  const std::string job = "/sys/fs/cgroup/memory/slurm/uid_1000/job_42/";
  f.v1_level(job, "2147483648", "805306368");
  f.write(job + "memory.stat", "cache 300000000\ninactive_file 1\ntotal_inactive_file 268435456\n");
  f.v1_level("/sys/fs/cgroup/memory/slurm/uid_1000/", "4294967296", "3758096384");
  f.v1_level("/sys/fs/cgroup/memory/slurm/", "9223372036854771712", "3758096384");
  const auto b = read_memory_budget(f.path(), std::nullopt);
  ASSERT_EQ(b.limits.size(), 3u);  // MemAvailable, the job, its parent (slurm/ is unlimited)
  // The job: 2 GiB, 768 MiB in use of which 256 MiB inactive page cache: 1.5 GiB left. The parent
  // leaves 512 MiB: the tightest.
  EXPECT_EQ(b.limits[1].source, "cgroup v1 /slurm/uid_1000/job_42");
  EXPECT_EQ(b.limits[1].left(), 2 * GiB - 512 * MiB);
  EXPECT_EQ(b.limits[2].source, "cgroup v1 /slurm/uid_1000");
  ASSERT_TRUE(b.available_bytes());
  EXPECT_EQ(*b.available_bytes(), 512 * MiB);
  EXPECT_EQ(b.describe(),
            "512.00 MiB available (cgroup v1 /slurm/uid_1000: limit 4.00 GiB, 3.50 GiB in use)");
}

// cgroup v2 inside a container with its own cgroup namespace: /proc/self/cgroup says "0::/" and
// the mount's root is the container's cgroup.
TEST(MemoryBudget, CgroupV2NamespacedContainer) {
  fixture_root f;
  f.process(meminfo_20g,
            "612 587 0:26 / /sys/fs/cgroup ro,nosuid,nodev,noexec,relatime - cgroup2 cgroup "
            "rw,nsdelegate,memory_recursiveprot\n",
            "0::/\n");
  f.v2_level("/sys/fs/cgroup/", "2147483648", "104857600");
  f.write("/sys/fs/cgroup/memory.stat", "anon 90000000\nfile 14857600\ninactive_file 4857600\n");
  const auto b = read_memory_budget(f.path(), std::nullopt);
  ASSERT_EQ(b.limits.size(), 2u);
  EXPECT_EQ(b.limits[1].source, "cgroup v2 /");
  EXPECT_EQ(*b.available_bytes(), 2 * GiB - (104857600 - 4857600));
}

// cgroup v2 on a systemd host seen without a namespace: the mount root is "/" and the process sits
// in a slice several levels down; "max" levels do not limit.
TEST(MemoryBudget, CgroupV2SystemdSliceWalksUpToTheRoot) {
  fixture_root f;
  f.process("MemTotal: 16000000 kB\nMemAvailable: 1048576 kB\n",
            "29 23 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 "
            "cgroup2 rw,nsdelegate,memory_recursiveprot\n",
            "0::/user.slice/user-1000.slice/session-3.scope\n");
  const std::string base = "/sys/fs/cgroup/user.slice/";
  f.v2_level(base, "max", "5000000000");
  f.v2_level(base + "user-1000.slice/", "8589934592", "1073741824");
  f.v2_level(base + "user-1000.slice/session-3.scope/", "max", "1000");
  const auto b = read_memory_budget(f.path(), std::nullopt);
  ASSERT_EQ(b.limits.size(), 2u);
  EXPECT_EQ(b.limits[1].source, "cgroup v2 /user.slice/user-1000.slice");
  // MemAvailable (1 GiB) is tighter than the slice's 7 GiB.
  EXPECT_EQ(*b.available_bytes(), GiB);
  EXPECT_EQ(b.describe(), "1.00 GiB available (MemAvailable)");
}

TEST(MemoryBudget, AddressSpaceLimitCountsWhatIsMappedAndTheReserve) {
  fixture_root f;
  f.write("/proc/meminfo", meminfo_20g);
  f.write("/proc/self/status", "Name:\tvramkit\nVmPeak:\t  700000 kB\nVmSize:\t  524288 kB\n");
  const auto b = read_memory_budget(f.path(), GiB, 128 * MiB);
  ASSERT_EQ(b.limits.size(), 2u);
  EXPECT_EQ(b.limits[1].source, "RLIMIT_AS");
  EXPECT_EQ(*b.available_bytes(), GiB - 512 * MiB - 128 * MiB);
}

TEST(MemoryBudget, NothingReadableMeansNoCap) {
  fixture_root f;
  const auto b = read_memory_budget(f.path(), std::nullopt);
  EXPECT_FALSE(b.available_bytes());
  EXPECT_EQ(fit_in_budget(b.available_bytes(), 3 * GiB, 3, 0.5, 0), 3 * GiB);
}

TEST(MemoryBudget, FitTakesAFractionForEveryBuffer) {
  // Three arrays in half of 600 MiB: 100 MiB each; whole MiB.
  EXPECT_EQ(fit_in_budget(600 * MiB, GiB, 3, 0.5, 0, MiB), 100 * MiB);
  EXPECT_EQ(fit_in_budget(600 * MiB, 64 * MiB, 3, 0.5, 0, MiB), 64 * MiB);  // fits as asked
  EXPECT_EQ(fit_in_budget(1 * MiB, GiB, 3, 0.5, 16 * MiB, MiB), 0u);        // below the floor
}

// The library refuses a requested host size that cannot fit before measuring anything, naming the
// flag, what it needs and what there is; sizes it picks itself shrink to fit.
TEST(MemoryBudget, RunProbeRefusesARequestedSizeThatDoesNotFit) {
  probe_options o;
  o.quick = true;
  o.only = {"host"};
  o.host_memory_bytes = 48 * MiB;
  o.host_buffer_bytes = 32 * MiB;
  try {
    (void)run_probe(o);
    FAIL() << "no exception";
  } catch (const invalid_input& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("--size 32.00 MiB"), std::string::npos) << what;
    EXPECT_NE(what.find("96.00 MiB"), std::string::npos) << what;  // three arrays
    EXPECT_NE(what.find("48.00 MiB available (set by the caller)"), std::string::npos) << what;
    EXPECT_NE(what.find("at most 14.38 MiB fits"), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << "one line";
  }
  o.host_buffer_bytes = 0;
  o.max_latency_bytes = 64 * MiB;
  o.only = {"latency"};
  EXPECT_THROW((void)run_probe(o), invalid_input);
}

TEST(MemoryBudget, RunProbeSizesTheBandwidthArraysFromTheBudget) {
  probe_options o;
  o.quick = true;
  o.only = {"host"};
  o.host_kernels = {"copy"};
  o.host_one_thread = false;
  o.host_repetitions = 2;
  o.host_memory_bytes = 48 * MiB;
  const probe_report r = run_probe(o);
  // Half of 48 MiB for three arrays: 8 MiB each.
  EXPECT_EQ(r.header.at("host.bw.array_bytes").rfind("8.00 MiB (auto", 0), 0u)
      << r.header.at("host.bw.array_bytes");
  EXPECT_NE(r.header.at("host.bw.array_bytes").find("limited to half of the 48.00 MiB"),
            std::string::npos);
  EXPECT_EQ(r.header.at("host.memory.available"), "48.00 MiB available (set by the caller)");
  bool copy = false;
  for (const auto& m : r.results) copy = copy || m.key == "host.bw.copy.all_threads";
  EXPECT_TRUE(copy);
}

}  // namespace
}  // namespace vramkit::probe
