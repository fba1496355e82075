// fake_nvml: the fixture keys of the queries the probe shares with the monitor (PCIe link, maximum
// clocks, bus width, lookup by PCI bus id), and their absence read as not_supported.
#include "vramkit/core/testing/fake_nvml.hpp"

#include <gtest/gtest.h>

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

  auto max_clocks = fake.max_clocks(1);
  ASSERT_TRUE(max_clocks.ok());
  EXPECT_EQ(max_clocks.value.memory_mhz, 3201U);
  EXPECT_EQ(fake.memory_bus_width_bits(1).value, 5120U);
  EXPECT_EQ(fake.pcie_link(1).value.generation, 1U);
  EXPECT_EQ(fake.max_pcie_link(1).value.generation, 5U);
  EXPECT_EQ(fake.max_pcie_link(1).value.width, 16U);

  for (const auto& st : {fake.max_clocks(0).status, fake.memory_bus_width_bits(0).status,
                         fake.pcie_link(0).status, fake.max_pcie_link(0).status}) {
    EXPECT_EQ(st, nvml_status::not_supported);
  }
}

TEST(FakeNvml, FailsTheNewQueriesOnRequest) {
  fake_gpu g;
  g.memory_total_bytes = 1000;
  g.max_pcie_link = nvml_pcie_link{5, 16};
  g.failures["max_pcie_link"] = nvml_status::no_permission;
  fake_nvml fake({g});
  EXPECT_EQ(fake.max_pcie_link(0).status, nvml_status::no_permission);
  fake.fail_all(nvml_status::uninitialized);
  EXPECT_EQ(fake.device_index_by_pci_bus_id("0000:1b:00.0").status, nvml_status::uninitialized);
}

}  // namespace
}  // namespace vramkit::monitor
