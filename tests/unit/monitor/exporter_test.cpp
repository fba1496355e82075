// The exporter in-process: endpoints, scrapes that never sample, a busy port, and the snapshot
// table of `watch --once`.
#include "vramkit/monitor/exporter.hpp"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <thread>

#include "vramkit/core/error.hpp"
#include "vramkit/core/testing/fake_nvml.hpp"
#include "vramkit/monitor/terminal_view.hpp"

#if defined(VRAMKIT_TEST_HTTP)
#include <httplib.h>
#endif

namespace vramkit::monitor {
namespace {

using vramkit::testing::fake_gpu;
using vramkit::testing::fake_nvml;

const std::filesystem::path data = std::filesystem::path(VRAMKIT_SOURCE_DIR) / "tests/data/monitor";

std::unique_ptr<sampler> fixture_sampler(std::shared_ptr<fake_nvml> fake) {
  sampler_options o;
  o.host_root = data / "host";
  return std::make_unique<sampler>(std::shared_ptr<nvml_api>(std::move(fake)), o);
}

TEST(Snapshot, ListsDevicesProcessesAndHost) {
  auto s = fixture_sampler(fake_nvml::from_file(data / "fake_gpus.json"))->take();
  std::string text = format_snapshot(s);
  EXPECT_NE(text.find("NVIDIA H200"), std::string::npos) << text;
  EXPECT_NE(text.find("38.00 GiB"), std::string::npos) << text;  // GPU 0 used
  EXPECT_NE(text.find("python3 train.py --batch-size 8"), std::string::npos);
  EXPECT_NE(text.find("NUMA node 1"), std::string::npos);
  EXPECT_NE(text.find("cgroup v2"), std::string::npos);
  // Largest device memory first.
  EXPECT_LT(text.find("vllm serve"), text.find("python3 train.py"));
}

TEST(Snapshot, SaysWhyThereAreNoGpus) {
  sampler_options o;
  o.host_root = data / "host";
  sampler s(unavailable{unavailable_kind::no_driver, "no NVIDIA driver found (x)"}, o);
  std::string text = format_snapshot(s.take());
  EXPECT_NE(text.find("no NVIDIA driver found (x): showing host memory only"), std::string::npos)
      << text;
}

TEST(Exporter, MetricsAndHistoryComeFromTheBackgroundSampler) {
  auto fake = fake_nvml::from_file(data / "fake_gpus.json");
  exporter_options eo;
  eo.interval = std::chrono::milliseconds(20);
  exporter ex(fixture_sampler(fake), eo);
  // Rendering twice without the sampler running reads the same sample: a scrape never samples.
  if (!exporter_built()) {
    EXPECT_THROW(ex.start(), error);
    GTEST_SKIP() << "built without cpp-httplib: the HTTP part is not in this build";
  }
  eo.port = 0;
  exporter ex0(fixture_sampler(fake), eo);
  int port = ex0.start();
  ASSERT_GT(port, 0);
  auto calls_before = fake->calls();
  std::string m1 = ex0.metrics();
  EXPECT_NE(m1.find("vramkit_gpu_memory_used_bytes{gpu=\"0\""), std::string::npos);
  // Wait (bounded) for the sampler to add samples to the history.
  for (int i = 0; i < 200 && ex0.history().size() < 3; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_GE(ex0.history().size(), 3U);
  EXPECT_GT(fake->calls(), calls_before);
  std::string j = ex0.samples_json(0);
  EXPECT_NE(j.find("\"latest\""), std::string::npos);
  EXPECT_NE(j.find("\"used\":40802189312"), std::string::npos);
  // The live page's history: every figure, the top processes by memory, each NUMA node.
  auto doc = nlohmann::json::parse(j);
  const auto& first = doc.at("samples").at(0);
  const auto& g0 = first.at("gpus").at(0);
  EXPECT_EQ(g0.at("temp"), 54);
  EXPECT_EQ(g0.at("power"), 412.5);
  EXPECT_EQ(g0.at("rx"), 1048576000.0);
  ASSERT_EQ(g0.at("procs").size(), 2U);
  EXPECT_EQ(g0.at("procs").at(0).at("pid"), 4343);  // largest first
  EXPECT_EQ(g0.at("procs").at(0).at("used"), 34359738368ULL);
  EXPECT_EQ(g0.at("procs").at(1).at("pid"), 4242);
  ASSERT_EQ(first.at("numa").size(), 2U);
  EXPECT_EQ(first.at("numa").at(1).at("node"), 1);
  ex0.stop();
  ex0.stop();  // idempotent
}

#if defined(VRAMKIT_TEST_HTTP)
// The body of GET `path`, a test failure when no response came or its status is not `status`.
std::string body_of(httplib::Client& cli, const char* path, int status = 200) {
  auto r = cli.Get(path);
  EXPECT_TRUE(r) << path;
  if (!r) return {};
  EXPECT_EQ(r->status, status) << path;
  return r->body;
}

TEST(Exporter, ServesEveryEndpointOverHttp) {
  exporter_options eo;
  eo.port = 0;
  eo.interval = std::chrono::milliseconds(50);
  exporter ex(fixture_sampler(fake_nvml::from_file(data / "fake_gpus.json")), eo);
  int port = ex.start();
  httplib::Client cli("127.0.0.1", port);
  auto m = cli.Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->status, 200);
  EXPECT_EQ(m->get_header_value("Content-Type"), exposition_content_type);
  EXPECT_NE(m->body.find("# TYPE vramkit_gpu_memory_total_bytes gauge"), std::string::npos);
  (void)body_of(cli, "/healthz");
  EXPECT_NE(body_of(cli, "/").find("<script src=\"/monitor.js\">"), std::string::npos);
  EXPECT_NE(body_of(cli, "/monitor.js").find("/api/samples"), std::string::npos);
  (void)body_of(cli, "/api/samples?since=0");
  (void)body_of(cli, "/api/samples?since=yesterday", 400);
  EXPECT_EQ(cli.Get("/nothing-here")->status, 404);

  // A second exporter on the same port fails with one clear line.
  exporter_options same = eo;
  same.port = port;
  exporter clash(fixture_sampler(fake_nvml::from_file(data / "fake_gpus.json")), same);
  try {
    clash.start();
    FAIL() << "expected the port to be in use";
  } catch (const error& e) {
    EXPECT_NE(std::string(e.what()).find("address already in use"), std::string::npos) << e.what();
  }
  ex.stop();
}
// A GPU that falls off the bus, then NVML failing entirely, while serve runs: every scrape still
// answers 200, the device is marked down by its uuid, host figures stay, and it comes back.
TEST(Exporter, KeepsServingWhileADeviceIsLostOrNvmlFails) {
  fake_gpu g;
  g.name = "Fake H200";
  g.uuid = "GPU-lost";
  g.memory_total_bytes = 100ULL << 30;
  g.memory_used_bytes = 7;
  auto fake = std::make_shared<fake_nvml>(std::vector<fake_gpu>{g});
  exporter_options eo;
  eo.port = 0;
  eo.interval = std::chrono::milliseconds(20);
  exporter ex(fixture_sampler(fake), eo);
  httplib::Client cli("127.0.0.1", ex.start());
  auto scrape_until = [&](const std::string& needle) {
    std::string body;
    for (int i = 0; i < 200; ++i) {
      auto r = cli.Get("/metrics");
      EXPECT_TRUE(r && r->status == 200);
      if (r) body = r->body;
      if (body.find(needle) != std::string::npos) return body;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ADD_FAILURE() << "never saw " << needle << " in\n" << body;
    return body;
  };
  scrape_until(R"(vramkit_gpu_up{gpu="0",uuid="GPU-lost",name="Fake H200"} 1)");
  fake->edit_gpu(0, [](fake_gpu& x) { x.lost = true; });
  auto lost = scrape_until(R"(vramkit_gpu_up{gpu="0",uuid="GPU-lost",name="Fake H200"} 0)");
  EXPECT_NE(lost.find("vramkit_host_memory_total_bytes"), std::string::npos);
  auto health = cli.Get("/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  fake->fail_all(vramkit::nvml_status::error);
  for (int i = 0; i < 10; ++i) {
    auto r = cli.Get("/metrics");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
    EXPECT_NE(r->body.find("vramkit_host_memory_total_bytes"), std::string::npos);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  fake->fail_all(std::nullopt);
  fake->edit_gpu(0, [](fake_gpu& x) { x.lost = false; });
  scrape_until(R"(vramkit_gpu_up{gpu="0",uuid="GPU-lost",name="Fake H200"} 1)");
  ex.stop();
}
#endif

}  // namespace
}  // namespace vramkit::monitor
