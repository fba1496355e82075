// fake_nvml: the fixture keys of the queries the probe shares with the monitor (PCIe link, maximum
// clocks, bus width, lookup by PCI bus id), and their absence read as not_supported.
#include "vramkit/core/testing/fake_nvml.hpp"

#include <gtest/gtest.h>

#include <string>

#include "vramkit/core/error.hpp"

namespace vramkit::monitor {
namespace {

using vramkit::testing::fake_gpu;
using vramkit::testing::fake_nvml;

TEST(FakeNvml, ReadsLinkClocksAndBusWidthFromTheFixture) {
  fake_nvml fake(fake_nvml::parse(R"({"gpus":[
    {"memory_total_bytes":1000,"pci_bus_id":"0000:3B:00.0"},
    {"memory_total_bytes":1000,"pci_bus_id":"0000:1b:00.0","sm_clock_max_mhz":1980,
     "memory_clock_max_mhz":3201,"memory_bus_width_bits":5120,"pcie_link_generation":1,
     "pcie_link_width":16,"pcie_link_generation_max":5,"pcie_link_width_max":16}]})"));
  auto index = fake.device_index_by_pci_bus_id("0000:1b:00.0");
  ASSERT_TRUE(index.ok());
  EXPECT_EQ(index.value, 1U);
  EXPECT_EQ(fake.device_index_by_pci_bus_id("0000:3b:00.0").value, 0U) << "case is ignored";
  EXPECT_EQ(fake.device_index_by_pci_bus_id("0000:ff:00.0").status, nvml_status::not_found);

  auto max_clocks = fake.clocks(1, nvml_reading::max);
  ASSERT_TRUE(max_clocks.ok());
  EXPECT_EQ(max_clocks.value.memory_mhz, 3201U);
  EXPECT_EQ(fake.memory_bus_width_bits(1).value, 5120U);
  EXPECT_EQ(fake.pcie_link(1, nvml_reading::current).value.generation, 1U);
  EXPECT_EQ(fake.pcie_link(1, nvml_reading::max).value.generation, 5U);
  EXPECT_EQ(fake.pcie_link(1, nvml_reading::max).value.width, 16U);

  for (const auto& st :
       {fake.clocks(0, nvml_reading::max).status, fake.memory_bus_width_bits(0).status,
        fake.pcie_link(0, nvml_reading::current).status,
        fake.pcie_link(0, nvml_reading::max).status}) {
    EXPECT_EQ(st, nvml_status::not_supported);
  }
}

// A count or percentage beyond its type (1e30, 2^32, -1, 0.5) was converted with undefined
// behaviour (UBSan: float-cast-overflow) or wrapped, as the byte counts were before the fuzzing
// finding fixed there (inputs in tests/fuzz/regressions/fake_gpu_fixture/); now each is refused
// with a one-line error naming the key, and values in range still read.
TEST(FakeNvml, RefusesNumbersOutsideTheirType) {
  const char* bad[] = {R"({"gpus":[{"memory_total_bytes":1000,"utilization_gpu":1e30}]})",
                       R"({"gpus":[{"memory_total_bytes":1000,"utilization_gpu":-1}]})",
                       R"({"gpus":[{"memory_total_bytes":1000,"sm_clock_mhz":4294967296}]})",
                       R"({"gpus":[{"memory_total_bytes":1000,"pcie_link_width":0.5}]})",
                       R"({"gpus":[{"memory_total_bytes":1000,"temperature_celsius":"hot"}]})",
                       R"({"gpus":[{"memory_total_bytes":1000,"processes":[{"pid":-5e20}]}]})",
                       R"({"gpus":[{"memory_total_bytes":1000,"processes":[{"pid":4294967296}]}]})",
                       R"({"gpus":[{"memory_total_bytes":1000,"processes":[7]}]})"};
  for (const char* text : bad) {
    try {
      (void)fake_nvml::parse(text, "fixture.json");
      ADD_FAILURE() << "accepted " << text;
    } catch (const invalid_input& e) {
      EXPECT_NE(std::string(e.what()).find("fixture.json: gpus[0]: "), std::string::npos)
          << e.what();
    }
  }
  const auto gpus = fake_nvml::parse(
      R"({"gpus":[{"memory_total_bytes":1000,"utilization_gpu":100,"sm_clock_mhz":4294967295,
          "temperature_celsius":-5.5,"processes":[{"pid":4294967295}]}]})");
  ASSERT_EQ(gpus.size(), 1u);
  ASSERT_TRUE(gpus[0].utilization.has_value());
  EXPECT_EQ(gpus[0].utilization->gpu_percent, 100u);
  EXPECT_EQ(gpus[0].utilization->memory_percent, 0u) << "absent from the fixture: 0, as before";
  ASSERT_TRUE(gpus[0].clocks.has_value());
  EXPECT_EQ(gpus[0].clocks->sm_mhz, 4294967295u);
  EXPECT_FALSE(gpus[0].max_clocks.has_value());
  EXPECT_EQ(gpus[0].temperature_celsius, -5.5);
  ASSERT_EQ(gpus[0].processes.size(), 1u);
  EXPECT_EQ(gpus[0].processes[0].pid, 4294967295u);
}

TEST(FakeNvml, FailsTheNewQueriesOnRequest) {
  fake_gpu g;
  g.memory_total_bytes = 1000;
  g.max_pcie_link = nvml_pcie_link{5, 16};
  g.failures["max_pcie_link"] = nvml_status::no_permission;
  fake_nvml fake({g});
  EXPECT_EQ(fake.pcie_link(0, nvml_reading::max).status, nvml_status::no_permission);
  fake.fail_all(nvml_status::uninitialized);
  EXPECT_EQ(fake.device_index_by_pci_bus_id("0000:1b:00.0").status, nvml_status::uninitialized);
}

}  // namespace
}  // namespace vramkit::monitor
