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

TEST_F(CApi, ReadsPoolOptionsFromTheEnvironmentAndRejectsBadOnes) {
  setenv("VRAMKIT_POOL_ROUNDING", "4KiB", 1);
  void* p = vramkit_malloc(100, 0, nullptr);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(stats(0)["allocated_bytes.all.current"], 4096);
  vramkit_free(p, 100, 0, nullptr);
  setenv("VRAMKIT_POOL_ROUNDING", "lots", 1);
  EXPECT_EQ(vramkit_malloc(100, 1, nullptr), nullptr);  // device 1's pool cannot be built
}

}  // namespace
}  // namespace vramkit::mr
