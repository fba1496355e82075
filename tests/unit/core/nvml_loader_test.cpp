// The dlopen NVML loader: a missing library, a failing init, and the real ABI paths (struct
// versions, 24- and 32-byte process records, lookup by PCI bus id, per-call failures) against a
// stand-in library.
#include <gtest/gtest.h>

#include <cstdlib>

#include "vramkit/core/nvml_api.hpp"

namespace vramkit {
namespace {

TEST(NvmlLoader, MissingLibraryIsUnavailableWithReason) {
  auto api = load_nvml("libvramkit-no-such-nvml.so.1");
  ASSERT_FALSE(api);
  EXPECT_EQ(api.error().kind, unavailable_kind::no_driver);
  EXPECT_NE(api.error().reason.find("no NVIDIA driver found"), std::string::npos)
      << api.error().reason;
  EXPECT_NE(api.error().reason.find("libvramkit-no-such-nvml.so.1"), std::string::npos)
      << api.error().reason;
}

TEST(NvmlLoader, FailingInitIsUnavailableWithDriverMessage) {
  setenv("STUB_NVML_INIT_FAIL", "9", 1);
  auto api = load_nvml(VRAMKIT_STUB_NVML);
  unsetenv("STUB_NVML_INIT_FAIL");
  ASSERT_FALSE(api);
  EXPECT_NE(api.error().reason.find("Driver Not Loaded"), std::string::npos) << api.error().reason;
}

// The value of a query that must succeed (a test failure with the driver's reason when not).
template <class T>
T value_of(const nvml_value<T>& v) {
  EXPECT_TRUE(v.ok()) << v.detail;
  return v.value;
}

// NOLINTNEXTLINE(readability-identifier-naming): GoogleTest names the suite after the fixture.
class StubNvml : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    setenv("STUB_NVML_WIDE", GetParam() ? "1" : "0", 1);
    auto r = load_nvml(VRAMKIT_STUB_NVML);
    ASSERT_TRUE(r) << r.error().reason;
    api_ = *r;
  }
  void TearDown() override { unsetenv("STUB_NVML_WIDE"); }
  std::shared_ptr<nvml_api> api_;
};

TEST_P(StubNvml, ReadsMemoryV2WithReservedWhenVersionIsRight) {
  // The stub answers ARGUMENT_VERSION_MISMATCH unless version == sizeof | 2 << 24.
  auto m = api_->memory(0);
  ASSERT_TRUE(m.ok()) << m.detail;
  EXPECT_EQ(m.value.total, 80ULL << 30);
  EXPECT_EQ(m.value.used, 10ULL << 30);
  ASSERT_TRUE(m.value.reserved.has_value());
  EXPECT_EQ(*m.value.reserved, 512ULL << 20);
}

TEST_P(StubNvml, FallsBackToMemoryV1WhenV2IsNotSupported) {
  auto m = api_->memory(1);
  ASSERT_TRUE(m.ok()) << m.detail;
  EXPECT_EQ(m.value.total, 40ULL << 30);
  EXPECT_FALSE(m.value.reserved.has_value());
}

TEST_P(StubNvml, ReadsProcessesWithEitherRecordStride) {
  auto p = api_->processes(0);
  ASSERT_TRUE(p.ok()) << p.detail;
  ASSERT_EQ(p.value.size(), 2U);
  EXPECT_EQ(p.value[0].pid, 1000U);
  ASSERT_TRUE(p.value[0].used_bytes.has_value());
  EXPECT_EQ(*p.value[0].used_bytes, 3ULL << 30);
  EXPECT_EQ(p.value[0].kind, nvml_process_kind::compute_and_graphics);
  EXPECT_EQ(p.value[1].pid, 1001U);
  EXPECT_FALSE(p.value[1].used_bytes.has_value())
      << "NVML_VALUE_NOT_AVAILABLE must read as unknown";
}

TEST_P(StubNvml, MapsNotSupportedAndLostToStatuses) {
  auto power = api_->power_watts(1);
  EXPECT_EQ(power.status, nvml_status::not_supported);
  auto lost = api_->memory(2);
  EXPECT_EQ(lost.status, nvml_status::gpu_lost);
  EXPECT_NE(lost.detail.find("GPU is lost"), std::string::npos);
  auto ok_power = api_->power_watts(0);
  ASSERT_TRUE(ok_power.ok());
  EXPECT_DOUBLE_EQ(ok_power.value, 250.5);
}

TEST_P(StubNvml, ReadsTheOtherCounters) {
  auto u = api_->utilization(0);
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u.value.gpu_percent, 75U);
  auto pcie = api_->pcie_throughput(0);
  ASSERT_TRUE(pcie.ok());
  EXPECT_EQ(pcie.value.tx_bytes_per_second, 1000U * 1024U);
  EXPECT_EQ(pcie.value.rx_bytes_per_second, 2000U * 1024U);
  auto t = api_->temperature_celsius(0);
  ASSERT_TRUE(t.ok());
  EXPECT_DOUBLE_EQ(t.value, 48);
  auto c = api_->clocks(0, nvml_reading::current);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c.value.sm_mhz, 1980U);
  // No NVLink links, and symbols the stub does not export, are "not supported", not a crash.
  EXPECT_EQ(api_->nvlink_counters(0).status, nvml_status::not_supported);
  EXPECT_EQ(api_->ecc(0).status, nvml_status::not_supported);
  auto mig = api_->mig_instances(0);
  ASSERT_TRUE(mig.ok());
  EXPECT_TRUE(mig.value.empty());
  EXPECT_EQ(api_->device_count().value, 3U);
  EXPECT_EQ(api_->driver_version().value, "580.00.stub");
}

TEST_P(StubNvml, FindsDevicesByPciBusIdWhateverTheIndexOrder) {
  auto first = api_->device_index_by_pci_bus_id("0000:1b:00.0");
  ASSERT_TRUE(first.ok()) << first.detail;
  EXPECT_EQ(first.value, 2U);
  auto second = api_->device_index_by_pci_bus_id("0000:3b:00.0");
  ASSERT_TRUE(second.ok()) << second.detail;
  EXPECT_EQ(second.value, 0U);
  auto none = api_->device_index_by_pci_bus_id("0000:ff:00.0");
  EXPECT_EQ(none.status, nvml_status::not_found);
  EXPECT_FALSE(none.to_optional().has_value());
}

TEST_P(StubNvml, ReadsTheLinkClocksAndBusWidthTheProbeNeeds) {
  EXPECT_EQ(value_of(api_->pcie_link(0, nvml_reading::current)),
            (nvml_pcie_link{.generation = 1, .width = 16}));
  EXPECT_EQ(value_of(api_->pcie_link(0, nvml_reading::max)),
            (nvml_pcie_link{.generation = 5, .width = 16}));
  EXPECT_EQ(value_of(api_->clocks(0, nvml_reading::max)),
            (nvml_clocks{.sm_mhz = 1980, .memory_mhz = 3201}));
  EXPECT_EQ(value_of(api_->memory_bus_width_bits(0)), 5120U);
}

TEST_P(StubNvml, AnswersEachProbeQueryWithItsOwnStatus) {
  // Device 1: the current link reads, the maximum width does not, so the maximum link is
  // not_supported as a whole while the current one stays usable.
  EXPECT_TRUE(api_->pcie_link(1, nvml_reading::current).ok());
  EXPECT_EQ(api_->pcie_link(1, nvml_reading::max).status, nvml_status::not_supported);
  EXPECT_EQ(api_->memory_bus_width_bits(1).status, nvml_status::not_supported);
  EXPECT_TRUE(api_->clocks(1, nvml_reading::max).ok());
  // Device 2 is lost: every query says so, with the driver's words.
  for (const auto& st :
       {api_->pcie_link(2, nvml_reading::current).status,
        api_->pcie_link(2, nvml_reading::max).status, api_->clocks(2, nvml_reading::max).status,
        api_->memory_bus_width_bits(2).status}) {
    EXPECT_EQ(st, nvml_status::gpu_lost);
  }
  EXPECT_NE(api_->clocks(2, nvml_reading::max).detail.find("GPU is lost"), std::string::npos);
  // An index NVML does not have: the handle lookup's INVALID_ARGUMENT, not a crash.
  EXPECT_EQ(api_->pcie_link(7, nvml_reading::max).status, nvml_status::error);
}

INSTANTIATE_TEST_SUITE_P(RecordLayouts, StubNvml, ::testing::Values(false, true),
                         [](const auto& info) {
                           return info.param ? std::string("Wide32") : std::string("V3_24");
                         });

}  // namespace
}  // namespace vramkit
