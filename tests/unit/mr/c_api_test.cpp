// The C API over the simulated device: allocate, free, summary, JSON stats, peak reset, trim,
// failures returned as NULL (vramkit_malloc) or thrown as PyTorch's out-of-memory error
// (vramkit_torch_malloc), and the last error.
#include "vramkit/mr/c_api.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <exception>
#include <nlohmann/json.hpp>
#include <string>
#include <typeinfo>

#include "mr/c_api_testing.hpp"
#include "vramkit/core/error.hpp"
#include "vramkit/core/host_sim_device.hpp"
#include "vramkit/core/units.hpp"

namespace vramkit::mr {
namespace {

class CApi : public ::testing::Test {
 protected:
  void SetUp() override {
    host_sim_options o;
    o.device_count = 2;
    o.device_memory_bytes = 256 * MiB;
    dev = std::make_shared<host_sim_device>(o);
    detail::set_c_api_device_api(dev);
  }
  void TearDown() override {
    detail::set_c_api_device_api(nullptr);
    unsetenv("VRAMKIT_POOL_ROUNDING");
  }
  std::string summary(int device) {
    std::string s(vramkit_memory_summary(device, nullptr, 0), '\0');
    vramkit_memory_summary(device, s.data(), s.size() + 1);
    return s;
  }
  nlohmann::json stats(int device) {
    std::string s(vramkit_memory_stats_json(device, nullptr, 0), '\0');
    vramkit_memory_stats_json(device, s.data(), s.size() + 1);
    return nlohmann::json::parse(s);
  }
  std::shared_ptr<host_sim_device> dev;
};

TEST_F(CApi, AllocatesFreesAndReports) {
  void* p = vramkit_malloc(3 << 20, 0, nullptr);
  ASSERT_NE(p, nullptr);
  EXPECT_TRUE(dev->is_device_pointer(p));
  auto j = stats(0);
  EXPECT_EQ(j["requested_bytes.all.current"], 3 << 20);
  vramkit_free(p, 3 << 20, 0, nullptr);
  j = stats(0);
  EXPECT_EQ(j["allocated_bytes.all.current"], 0);
  EXPECT_EQ(j["allocated_bytes.all.peak"], 3 << 20);
  vramkit_reset_peak(0);
  EXPECT_EQ(stats(0)["allocated_bytes.all.peak"], 0);
  EXPECT_NE(summary(0).find("vramkit memory summary, device 0"), std::string::npos);
  EXPECT_EQ(vramkit_trim(0), 0);
  EXPECT_EQ(stats(0)["reserved_bytes.all.current"], 0);
}

TEST_F(CApi, TruncatesIntoSmallBuffersAndReportsTheFullLength) {
  char buf[16];
  const std::size_t n = vramkit_memory_summary(1, buf, sizeof buf);
  EXPECT_GT(n, sizeof buf);
  EXPECT_EQ(std::string(buf).size(), sizeof buf - 1);
  EXPECT_EQ(stats(1)["pools"].size(), 0u);  // no pool before the first allocation
}

TEST_F(CApi, ReturnsNullInsteadOfThrowing) {
  EXPECT_EQ(vramkit_malloc(0, 0, nullptr), nullptr);
  EXPECT_EQ(vramkit_malloc(-5, 0, nullptr), nullptr);
  EXPECT_EQ(vramkit_malloc(1024, 99, nullptr), nullptr);  // bad ordinal
  EXPECT_EQ(vramkit_malloc(1024, -1, nullptr), nullptr);
  EXPECT_EQ(vramkit_malloc(std::int64_t{1} << 40, 0, nullptr), nullptr);  // out of memory
  EXPECT_EQ(stats(0)["num_ooms"], 1);
  vramkit_free(nullptr, 0, 0, nullptr);
}

std::string last_error() {
  std::string s(vramkit_last_error(nullptr, 0), '\0');
  vramkit_last_error(s.data(), s.size() + 1);
  return s;
}

TEST_F(CApi, KeepsTheLastErrorWithTheSummary) {
  EXPECT_EQ(vramkit_malloc(std::int64_t{1} << 40, 0, nullptr), nullptr);
  const std::string e = last_error();
  EXPECT_NE(e.find("vramkit_malloc(1099511627776 bytes, device 0) failed: out of memory"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("vramkit memory summary"), std::string::npos) << e;
}

// The PyTorch entry point never returns NULL for a failure (PyTorch would keep it as a tensor's
// data): without libc10 it throws vramkit's out_of_memory; once a libc10 is loaded (RTLD_LOCAL,
// as Python loads PyTorch's), a c10::OutOfMemoryError that the caller catches by libc10's own
// type_info, carrying the message and the summary.
TEST_F(CApi, TorchEntryPointThrowsC10OutOfMemoryWhenLibc10IsLoaded) {
  EXPECT_EQ(vramkit_torch_malloc(0, 0, nullptr), nullptr);
  void* p = vramkit_torch_malloc(4096, 0, nullptr);
  ASSERT_NE(p, nullptr);
  vramkit_free(p, 4096, 0, nullptr);
  EXPECT_THROW(vramkit_torch_malloc(std::int64_t{1} << 40, 0, nullptr), vramkit::out_of_memory);
  setenv("VRAMKIT_POOL_ROUNDING", "lots", 1);  // a failure that is not out of memory
  EXPECT_THROW(vramkit_torch_malloc(100, 1, nullptr), vramkit::invalid_input);
  unsetenv("VRAMKIT_POOL_ROUNDING");
  EXPECT_NE(last_error().find("VRAMKIT_POOL_ROUNDING"), std::string::npos);

  void* c10 = dlopen(VRAMKIT_FAKE_C10, RTLD_NOW | RTLD_LOCAL);  // kept loaded: symbols are cached
  ASSERT_NE(c10, nullptr) << dlerror();
  const auto* oom_type =
      static_cast<const std::type_info*>(dlsym(c10, "_ZTIN3c1016OutOfMemoryErrorE"));
  ASSERT_NE(oom_type, nullptr);
  bool caught = false;
  try {
    (void)vramkit_torch_malloc(std::int64_t{1} << 40, 0, nullptr);
  } catch (const vramkit::out_of_memory&) {
    ADD_FAILURE() << "vramkit's own error, not c10's";
  } catch (const std::exception& e) {
    caught = true;
    EXPECT_TRUE(typeid(e) == *oom_type) << typeid(e).name();
    const std::string what = e.what();
    EXPECT_NE(what.find("vramkit_malloc(1099511627776 bytes, device 0) failed: out of memory"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("vramkit memory summary"), std::string::npos) << what;
    EXPECT_NE(what.find("(raised from vramkit_torch_malloc)"), std::string::npos) << what;
  }
  EXPECT_TRUE(caught);
  EXPECT_EQ(stats(0)["num_ooms"], 2);
  p = vramkit_torch_malloc(4096, 0, nullptr);  // the pool still serves after the error
  ASSERT_NE(p, nullptr);
  vramkit_free(p, 4096, 0, nullptr);
}

nlohmann::json snapshot(int device, int device_count) {
  std::string s(vramkit_memory_snapshot_json(device, device_count, nullptr, 0), '\0');
  vramkit_memory_snapshot_json(device, device_count, s.data(), s.size() + 1);
  return nlohmann::json::parse(s);
}

// What torch.cuda._memory_viz relies on: blocks tile each segment (segsum asserts it), the
// segment's allocated size is its active blocks', and device traces carry the addresses.
void expect_consistent(const nlohmann::json& snap, std::size_t active_blocks) {
  std::size_t active = 0;
  for (const auto& seg : snap["segments"]) {
    std::size_t sum = 0;
    std::size_t allocated = 0;
    std::uint64_t next = seg["address"];
    for (const auto& b : seg["blocks"]) {
      EXPECT_EQ(b["address"], next);
      next += b["size"].get<std::uint64_t>();
      sum += b["size"].get<std::size_t>();
      if (b["state"] == "active_allocated") {
        allocated += b["size"].get<std::size_t>();
        EXPECT_LE(b["requested_size"].get<std::size_t>(), b["size"].get<std::size_t>());
        ++active;
      } else {
        EXPECT_EQ(b["state"], "inactive");
      }
      EXPECT_TRUE(b["frames"].is_array());
    }
    EXPECT_EQ(sum, seg["total_size"]);
    EXPECT_EQ(allocated, seg["allocated_size"]);
    EXPECT_TRUE(seg["segment_type"] == "small" || seg["segment_type"] == "large");
  }
  EXPECT_EQ(active, active_blocks);
}

TEST_F(CApi, MemorySnapshotHasPyTorchsStructureForBothPools) {
  for (const char* kind : {"pool", "vmm"}) {
    SCOPED_TRACE(kind);
    detail::set_c_api_device_api(dev);  // fresh pools
    setenv("VRAMKIT_POOL_KIND", kind, 1);
    void* a = vramkit_malloc(1000, 0, nullptr);
    void* b = vramkit_malloc(3 << 20, 0, nullptr);
    void* c = vramkit_malloc(30 << 20, 0, nullptr);
    ASSERT_TRUE(a != nullptr && b != nullptr && c != nullptr);
    vramkit_free(b, 3 << 20, 0, nullptr);
    const auto snap = snapshot(0, 2);
    ASSERT_EQ(snap["device_traces"].size(), 2u);
    EXPECT_TRUE(snap["device_traces"][0].empty());  // no tracer on this device
    expect_consistent(snap, 2);
    std::size_t reserved = 0;
    for (const auto& seg : snap["segments"]) reserved += seg["total_size"].get<std::size_t>();
    EXPECT_EQ(reserved, stats(0)["reserved_bytes.all.current"]);
    bool found = false;
    for (const auto& seg : snap["segments"]) {
      for (const auto& blk : seg["blocks"]) {
        if (blk["address"] == reinterpret_cast<std::uintptr_t>(c)) {
          found = true;
          EXPECT_EQ(blk["requested_size"], 30 << 20);
          EXPECT_EQ(seg["is_expandable"], std::string(kind) == "vmm");
        }
      }
    }
    EXPECT_TRUE(found);
    vramkit_free(a, 1000, 0, nullptr);
    vramkit_free(c, 30 << 20, 0, nullptr);
    expect_consistent(snapshot(0, 1), 0);
  }
  unsetenv("VRAMKIT_POOL_KIND");
}

TEST_F(CApi, MemorySnapshotTracesAllocationsWhenTracing) {
  const std::string path = ::testing::TempDir() + "vramkit_snapshot_test.trace";
  setenv("VRAMKIT_TRACE_FILE", path.c_str(), 1);
  void* p = vramkit_malloc(5000, 0, nullptr);
  ASSERT_NE(p, nullptr);
  vramkit_free(p, 5000, 0, nullptr);
  unsetenv("VRAMKIT_TRACE_FILE");
  const auto snap = snapshot(0, 1);
  const auto& t = snap["device_traces"][0];
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t[0]["action"], "alloc");
  EXPECT_EQ(t[1]["action"], "free_requested");
  EXPECT_EQ(t[2]["action"], "free_completed");
  for (const auto& e : t) {
    EXPECT_EQ(e["addr"], reinterpret_cast<std::uintptr_t>(p));
    EXPECT_EQ(e["size"], 5000);
  }
  EXPECT_LE(t[0]["time_us"].get<std::int64_t>(), t[2]["time_us"].get<std::int64_t>());
}

std::string pool_name(const nlohmann::json& stats) {
  return stats["pools"].empty() ? "" : stats["pools"][0]["resource"].get<std::string>();
}

// The default pool is the virtual-memory pool; VRAMKIT_POOL_KIND=pool chooses the classic one, and
// a device without virtual memory management gets the classic one unless vmm is asked for.
TEST_F(CApi, DefaultsToTheVirtualMemoryPoolAndFallsBackWithoutIt) {
  void* p = vramkit_malloc(1 << 20, 0, nullptr);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(pool_name(stats(0)).rfind("vmm_pool(", 0), 0u) << stats(0).dump();
  vramkit_free(p, 1 << 20, 0, nullptr);

  detail::set_c_api_device_api(dev);
  setenv("VRAMKIT_POOL_KIND", "pool", 1);
  p = vramkit_malloc(1 << 20, 0, nullptr);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(pool_name(stats(0)).rfind("pool(", 0), 0u) << stats(0).dump();
  vramkit_free(p, 1 << 20, 0, nullptr);
  unsetenv("VRAMKIT_POOL_KIND");

  host_sim_options o;
  o.device_memory_bytes = 64 * MiB;
  o.vmm_granularity = 0;  // no virtual memory management
  detail::set_c_api_device_api(std::make_shared<host_sim_device>(o));
  p = vramkit_malloc(1 << 20, 0, nullptr);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(pool_name(stats(0)).rfind("pool(", 0), 0u) << stats(0).dump();
  vramkit_free(p, 1 << 20, 0, nullptr);
  detail::set_c_api_device_api(std::make_shared<host_sim_device>(o));
  setenv("VRAMKIT_POOL_KIND", "vmm", 1);  // asked for explicitly: refused, not replaced
  EXPECT_EQ(vramkit_malloc(1 << 20, 0, nullptr), nullptr);
  EXPECT_NE(last_error().find("no virtual memory management"), std::string::npos) << last_error();
  unsetenv("VRAMKIT_POOL_KIND");
}

// A variable of the classic pool is refused under the default pool, naming the way to choose it.
TEST_F(CApi, ClassicPoolVariablesNeedTheClassicPool) {
  setenv("VRAMKIT_POOL_INITIAL", "64MiB", 1);
  EXPECT_EQ(vramkit_malloc(4096, 0, nullptr), nullptr);
  EXPECT_NE(last_error().find("VRAMKIT_POOL_INITIAL applies to the classic pool only: set "
                              "VRAMKIT_POOL_KIND=pool"),
            std::string::npos)
      << last_error();
  setenv("VRAMKIT_POOL_KIND", "pool", 1);
  void* p = vramkit_malloc(4 << 20, 0, nullptr);  // served from the initial 64 MiB chunk
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(stats(0)["reserved_bytes.all.current"], 64 << 20);
  vramkit_free(p, 4 << 20, 0, nullptr);
  unsetenv("VRAMKIT_POOL_KIND");
  unsetenv("VRAMKIT_POOL_INITIAL");
}

// VRAMKIT_POOL_SLACK: a fraction ("0.02" or "2%") for the vmm pool; refused when malformed or
// with the classic pool.
TEST_F(CApi, ReadsTheGrowthSlackAndRefusesItWhereItDoesNotApply) {
  setenv("VRAMKIT_POOL_SLACK", "5%", 1);
  void* p = vramkit_malloc(4096, 0, nullptr);
  ASSERT_NE(p, nullptr);
  vramkit_free(p, 4096, 0, nullptr);
  setenv("VRAMKIT_POOL_SLACK", "lots", 1);
  EXPECT_EQ(vramkit_malloc(4096, 1, nullptr), nullptr);
  EXPECT_NE(last_error().find("VRAMKIT_POOL_SLACK: expected a fraction such as 0.02 or 2% (got "
                              "'lots')"),
            std::string::npos)
      << last_error();
  setenv("VRAMKIT_POOL_SLACK", "-1", 1);
  EXPECT_EQ(vramkit_malloc(4096, 1, nullptr), nullptr);
  setenv("VRAMKIT_POOL_SLACK", "0", 1);
  setenv("VRAMKIT_POOL_KIND", "pool", 1);
  EXPECT_EQ(vramkit_malloc(4096, 1, nullptr), nullptr);
  EXPECT_NE(last_error().find("VRAMKIT_POOL_SLACK applies to the virtual-memory pool only"),
            std::string::npos)
      << last_error();
  unsetenv("VRAMKIT_POOL_KIND");
  unsetenv("VRAMKIT_POOL_SLACK");
}

// VRAMKIT_POOL_SLACK_MAX (a fraction) and VRAMKIT_POOL_REMAP_REPEATS (a count): refused when
// malformed, and with the classic pool.
TEST_F(CApi, RefusesBadRemapSettingsAndThemWhereTheyDoNotApply) {
  setenv("VRAMKIT_POOL_SLACK_MAX", "much", 1);
  EXPECT_EQ(vramkit_malloc(4096, 1, nullptr), nullptr);
  EXPECT_NE(last_error().find("VRAMKIT_POOL_SLACK_MAX: expected a fraction"), std::string::npos)
      << last_error();
  unsetenv("VRAMKIT_POOL_SLACK_MAX");
  for (const char* bad : {"-1", "two", "3x", "99999999999"}) {
    SCOPED_TRACE(bad);
    setenv("VRAMKIT_POOL_REMAP_REPEATS", bad, 1);
    EXPECT_EQ(vramkit_malloc(4096, 1, nullptr), nullptr);
    EXPECT_NE(last_error().find("VRAMKIT_POOL_REMAP_REPEATS: expected a count such as 0 or 2"),
              std::string::npos)
        << last_error();
  }
  setenv("VRAMKIT_POOL_REMAP_REPEATS", "0", 1);
  setenv("VRAMKIT_POOL_KIND", "pool", 1);
  EXPECT_EQ(vramkit_malloc(4096, 1, nullptr), nullptr);
  EXPECT_NE(last_error().find("VRAMKIT_POOL_REMAP_REPEATS applies to the virtual-memory pool only"),
            std::string::npos)
      << last_error();
  unsetenv("VRAMKIT_POOL_KIND");
  unsetenv("VRAMKIT_POOL_REMAP_REPEATS");
}

TEST_F(CApi, ReadsPoolOptionsFromTheEnvironmentAndRejectsBadOnes) {
  setenv("VRAMKIT_POOL_ROUNDING", "4KiB", 1);
  void* p = vramkit_malloc(100, 0, nullptr);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(stats(0)["allocated_bytes.all.current"], 4096);
  vramkit_free(p, 100, 0, nullptr);
  setenv("VRAMKIT_POOL_ROUNDING", "lots", 1);
  EXPECT_EQ(vramkit_malloc(100, 1, nullptr), nullptr);  // device 1's pool cannot be built
  unsetenv("VRAMKIT_POOL_ROUNDING");
  setenv("VRAMKIT_NVTX", "yes", 1);
  EXPECT_EQ(vramkit_malloc(100, 1, nullptr), nullptr);
  EXPECT_NE(last_error().find("VRAMKIT_NVTX must be '0' or '1' (got 'yes')"), std::string::npos)
      << last_error();
  setenv("VRAMKIT_NVTX", "0", 1);
  void* q = vramkit_malloc(100, 1, nullptr);
  EXPECT_NE(q, nullptr);
  vramkit_free(q, 100, 1, nullptr);
  unsetenv("VRAMKIT_NVTX");
}

}  // namespace
}  // namespace vramkit::mr
