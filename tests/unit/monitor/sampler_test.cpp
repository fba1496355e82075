// The sampler over fake_nvml: devices that fail, disappear or come back, and the join with host
// processes from a fixture tree; and over the stand-in NVML library, the PCIe counters.
#include "vramkit/monitor/sampler.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <thread>

#include "vramkit/core/error.hpp"
#include "vramkit/core/testing/fake_nvml.hpp"

namespace vramkit::monitor {
namespace {

using vramkit::testing::fake_gpu;
using vramkit::testing::fake_nvml;

const std::filesystem::path data = std::filesystem::path(VRAMKIT_SOURCE_DIR) / "tests/data/monitor";

fake_gpu gpu(const std::string& uuid, std::uint64_t used) {
  fake_gpu g;
  g.name = "Fake H200";
  g.uuid = uuid;
  g.memory_total_bytes = 100ULL << 30;
  g.memory_used_bytes = used;
  g.utilization = nvml_utilization{50, 0};
  return g;
}

sampler_options fixture_host() {
  sampler_options o;
  o.host_root = data / "host";
  std::int64_t t = 1'700'000'000'000;
  o.clock_ms = [t]() mutable { return t += 1000; };
  return o;
}

TEST(Sampler, ReadsEveryDeviceAndJoinsHostProcesses) {
  auto fake = std::make_shared<fake_nvml>(fake_nvml::parse(R"({"gpus":[
    {"name":"A","uuid":"GPU-a","memory_total_bytes":1000,"memory_used_bytes":400,"memory_reserved_bytes":10,
     "processes":[{"pid":4242,"used_bytes":300,"name":"fallback"},{"pid":777777,"used_bytes":50,"name":"ghost"}]}]})"));
  sampler s(std::shared_ptr<nvml_api>(fake), fixture_host());
  auto smp = s.take();
  ASSERT_EQ(smp.gpus.size(), 1U);
  const auto& g = smp.gpus[0];
  EXPECT_EQ(g.state, device_state::ok);
  EXPECT_EQ(g.memory_used_bytes, 400U);
  EXPECT_EQ(g.memory_free_bytes, 590U);  // total - used - reserved
  EXPECT_EQ(g.memory_reserved_bytes, 10U);
  ASSERT_EQ(g.processes.size(), 2U);
  EXPECT_EQ(g.processes[0].command, "python3 train.py --batch-size 8");  // from the host tree
  EXPECT_EQ(g.processes[0].user, "alice");
  EXPECT_EQ(g.processes[0].host_rss_bytes, 8388608ULL * 1024);
  EXPECT_EQ(g.processes[1].command, "ghost");  // not visible on the host: the driver's name stays
  EXPECT_FALSE(g.processes[1].host_rss_bytes);
  EXPECT_EQ(g.unavailable.at("utilization"), "not_supported");
  ASSERT_TRUE(smp.host.memory);
  EXPECT_EQ(smp.host.numa.size(), 2U);
  ASSERT_TRUE(smp.host.cgroup);
  EXPECT_EQ(smp.host.cgroup->limit_bytes, 64ULL << 30);
}

TEST(Sampler, MarksAFailingDeviceAndKeepsReadingTheOthers) {
  auto fake = std::make_shared<fake_nvml>(
      std::vector<fake_gpu>{gpu("GPU-0", 1), gpu("GPU-1", 2), gpu("GPU-2", 3)});
  fake->edit_gpu(1, [](fake_gpu& g) { g.failures["memory"] = nvml_status::no_permission; });
  fake->edit_gpu(2, [](fake_gpu& g) { g.failures["temperature"] = nvml_status::error; });
  sampler s(std::shared_ptr<nvml_api>(fake), fixture_host());
  auto smp = s.take();
  ASSERT_EQ(smp.gpus.size(), 3U);
  EXPECT_EQ(smp.gpus[0].state, device_state::ok);
  EXPECT_EQ(smp.gpus[1].state, device_state::error);
  EXPECT_NE(smp.gpus[1].state_reason.find("no_permission"), std::string::npos)
      << smp.gpus[1].state_reason;
  EXPECT_FALSE(smp.gpus[1].memory_used_bytes);
  EXPECT_EQ(smp.gpus[2].state, device_state::ok)
      << "a failing optional query only marks that field";
  EXPECT_EQ(smp.gpus[2].unavailable.at("temperature"), "error");
  EXPECT_EQ(smp.gpus[2].memory_used_bytes, 3U);
}

TEST(Sampler, ADeviceThatDisappearsIsMarkedLostAndComesBack) {
  auto fake = std::make_shared<fake_nvml>(std::vector<fake_gpu>{gpu("GPU-0", 1), gpu("GPU-1", 2)});
  auto opts = fixture_host();
  opts.devices = {0, 1};
  sampler s(std::shared_ptr<nvml_api>(fake), opts);
  EXPECT_EQ(s.take().gpus[1].state, device_state::ok);

  fake->edit_gpu(1, [](fake_gpu& g) { g.lost = true; });
  auto lost = s.take();
  ASSERT_EQ(lost.gpus.size(), 2U);
  EXPECT_EQ(lost.gpus[1].state, device_state::lost);
  EXPECT_EQ(lost.gpus[0].state, device_state::ok);

  fake->remove_gpu(1);  // gone from the bus entirely: NVML renumbers
  auto gone = s.take();
  ASSERT_EQ(gone.gpus.size(), 2U);
  EXPECT_EQ(gone.gpus[1].state, device_state::lost);
  EXPECT_NE(gone.gpus[1].state_reason.find("no longer present"), std::string::npos);

  fake->add_gpu(gpu("GPU-1", 5));
  auto back = s.take();
  EXPECT_EQ(back.gpus[1].state, device_state::ok);
  EXPECT_EQ(back.gpus[1].memory_used_bytes, 5U);
}

TEST(Sampler, NvmlFailingEntirelyStillGivesHostFigures) {
  auto fake = std::make_shared<fake_nvml>(std::vector<fake_gpu>{gpu("GPU-0", 1)});
  fake->fail_all(nvml_status::uninitialized);
  sampler s(std::shared_ptr<nvml_api>(fake), fixture_host());
  auto smp = s.take();
  EXPECT_TRUE(smp.gpus.empty());
  EXPECT_NE(smp.gpu_unavailable_reason.find("device count failed"), std::string::npos);
  EXPECT_TRUE(smp.host.memory);
  fake->fail_all(std::nullopt);
  EXPECT_EQ(s.take().gpus.size(), 1U);
}

TEST(Sampler, NoDriverRecordsTheReasonAndReadsTheHost) {
  sampler s(unavailable{unavailable_kind::no_driver, "no NVIDIA driver found (test)"},
            fixture_host());
  EXPECT_FALSE(s.has_gpus());
  auto smp = s.take();
  EXPECT_EQ(smp.gpu_unavailable_reason, "no NVIDIA driver found (test)");
  EXPECT_TRUE(smp.host.memory);
}

TEST(Sampler, UnknownDeviceIsAUsageErrorNamingTheRange) {
  auto fake = std::make_shared<fake_nvml>(std::vector<fake_gpu>{gpu("GPU-0", 1), gpu("GPU-1", 2)});
  auto opts = fixture_host();
  opts.devices = {5};
  sampler s(std::shared_ptr<nvml_api>(fake), opts);
  try {
    s.validate_devices();
    FAIL() << "expected invalid_input";
  } catch (const invalid_input& e) {
    EXPECT_NE(std::string(e.what()).find("unknown device 5"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("0..1"), std::string::npos) << e.what();
  }
}

TEST(Sampler, TimestampsComeFromTheInjectedClock) {
  auto fake = std::make_shared<fake_nvml>(std::vector<fake_gpu>{gpu("GPU-0", 1)});
  sampler s(std::shared_ptr<nvml_api>(fake), fixture_host());
  auto a = s.take();
  auto b = s.take();
  EXPECT_EQ(b.timestamp_ms - a.timestamp_ms, 1000);
}

TEST(FakeNvml, ReloadsItsFileWhenItChanges) {
  auto path = std::filesystem::temp_directory_path() /
              ("vramkit_fake_" + std::to_string(getpid()) + ".json");
  {
    std::ofstream(path)
        << R"({"gpus":[{"name":"A","uuid":"GPU-a","memory_total_bytes":100,"memory_used_bytes":10}]})";
  }
  auto fake = fake_nvml::from_file(path);
  EXPECT_EQ(fake->memory(0).value.used, 10U);
  {
    std::ofstream(path)
        << R"({"gpus":[{"name":"A","uuid":"GPU-a","memory_total_bytes":100,"memory_used_bytes":77},
                                       {"name":"B","uuid":"GPU-b","memory_total_bytes":100,"memory_used_bytes":1}]})";
  }
  // The size changed, so the reload does not depend on the file system's time resolution.
  EXPECT_EQ(fake->device_count().value, 2U);
  EXPECT_EQ(fake->memory(0).value.used, 77U);
  { std::ofstream(path) << "{ not json"; }
  EXPECT_EQ(fake->device_count().value, 2U) << "a broken edit keeps the previous figures";
  std::filesystem::remove(path);
}

TEST(FakeNvml, RejectsBadFixturesWithAClearMessage) {
  EXPECT_THROW(fake_nvml::parse("[]"), invalid_input);
  EXPECT_THROW(fake_nvml::parse(R"({"gpus":[{"name":"x"}]})"), invalid_input);
  EXPECT_THROW(fake_nvml::parse(R"({"gpus":[{"memory_total_bytes":1,"memory_used_bytes":2}]})"),
               invalid_input);
  EXPECT_THROW(fake_nvml::from_file("/no/such/fixture.json"), invalid_input);
  auto gpus =
      fake_nvml::parse(R"({"gpus":[{"memory_total_bytes":5,"fail":{"power":"no_permission"}}]})");
  EXPECT_EQ(gpus[0].failures.at("power"), nvml_status::no_permission);
}

// Over the stand-in NVML library (tests/unit/core/stub_nvml.c), the real loader's counters.
TEST(SamplerOverStubNvml, PcieRatesComeFromCountersAfterTheFirstSample) {
  auto api = load_nvml(VRAMKIT_STUB_NVML);
  ASSERT_TRUE(api) << api.error().reason;
  sampler_options o;
  o.read_host = false;
  std::int64_t t = 1'000'000;
  o.clock_ms = [&t] { return t += 1000; };
  sampler s(api, o);
  auto first = s.take();
  // First sample: no previous counters, so the driver's windowed rate (stub: 2000 / 1000 KB/s).
  EXPECT_EQ(first.gpus[0].pcie_rx_bytes_per_second, 2000.0 * 1024);
  auto second = s.take();
  // The stub's counters grow by 2 MB (rx) and 1 MB (tx) per read, one second apart.
  EXPECT_EQ(second.gpus[0].pcie_rx_bytes_per_second, 2e6);
  EXPECT_EQ(second.gpus[0].pcie_tx_bytes_per_second, 1e6);
  // Device 1 has no counters: it keeps using the windowed rate.
  EXPECT_EQ(second.gpus[1].pcie_tx_bytes_per_second, 1000.0 * 1024);
  EXPECT_EQ(second.gpus[2].state, device_state::lost);
}

TEST(ParseInterval, AcceptsUnitsAndRejectsNonsense) {
  EXPECT_EQ(parse_interval("1s").count(), 1000);
  EXPECT_EQ(parse_interval("250ms").count(), 250);
  EXPECT_EQ(parse_interval("2").count(), 2000);
  EXPECT_EQ(parse_interval("1m").count(), 60000);
  EXPECT_THROW(parse_interval("fast"), invalid_input);
  // The range's own bound is accepted (it was refused as an unknown unit while the message named
  // it as the limit); past it, the message says why.
  EXPECT_EQ(parse_interval("1h").count(), 3600000);
  EXPECT_THROW(parse_interval("2h"), invalid_input);
  EXPECT_THROW(parse_interval("1ms"), invalid_input);
  try {
    (void)parse_interval("90m");
    ADD_FAILURE() << "90m accepted";
  } catch (const invalid_input& e) {
    EXPECT_NE(std::string(e.what()).find("between 10ms and 1h"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace vramkit::monitor
