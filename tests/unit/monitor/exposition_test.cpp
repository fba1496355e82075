// Prometheus exposition checked line by line: HELP/TYPE per family, contiguous families, base
// units, label escaping, and the agreed metric names.
#include "vramkit/monitor/exposition.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "vramkit/core/testing/fake_nvml.hpp"
#include "vramkit/monitor/sampler.hpp"

namespace vramkit::monitor {
namespace {

using vramkit::testing::fake_gpu;
using vramkit::testing::fake_nvml;

const std::filesystem::path data = std::filesystem::path(VRAMKIT_SOURCE_DIR) / "tests/data/monitor";

sample fixture_sample() {
  auto fake = fake_nvml::from_file(data / "fake_gpus.json");
  sampler_options o;
  o.host_root = data / "host";
  sampler s(std::shared_ptr<nvml_api>(fake), o);
  return s.take();
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string l;
  while (std::getline(in, l)) out.push_back(l);
  return out;
}

TEST(Exposition, EscapesLabelValuesAndHelp) {
  EXPECT_EQ(escape_label_value("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
  EXPECT_EQ(escape_help("x\\y\nz \"q\""), "x\\\\y\\nz \"q\"");
  EXPECT_EQ(format_metric_value(150754820096.0), "150754820096");
  EXPECT_EQ(format_metric_value(0.87), "0.87");
  EXPECT_EQ(format_metric_value(std::nan("")), "NaN");
  EXPECT_EQ(format_metric_value(-1.0 / 0.0), "-Inf");
}

TEST(Exposition, EveryLineIsWellFormedAndFamiliesAreContiguous) {
  std::string text = render_metrics(fixture_sample(), {7, 3});
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(text.back(), '\n');
  const std::regex help(R"(# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) .+)");
  const std::regex type(R"(# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (gauge|counter))");
  // Values as Prometheus reads them; a sample that took microseconds is written 9.2628e-05.
  const std::regex sample_line(
      R"(([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\\n]|\\.)*",?)*\})? (-?[0-9.]+(e[+-]?[0-9]+)?|NaN|[+-]Inf))");
  std::set<std::string> seen_families;
  std::string current;
  bool expect_type = false;
  for (const auto& l : lines_of(text)) {
    std::smatch m;
    if (std::regex_match(l, m, help)) {
      EXPECT_FALSE(expect_type) << l;
      current = m[1];
      EXPECT_TRUE(seen_families.insert(current).second) << "family written twice: " << current;
      expect_type = true;
    } else if (std::regex_match(l, m, type)) {
      EXPECT_TRUE(expect_type) << "TYPE without HELP: " << l;
      EXPECT_EQ(m[1], current);
      if (m[2] == "counter") {
        EXPECT_TRUE(current.size() > 6 && current.compare(current.size() - 6, 6, "_total") == 0)
            << current;
      }
      expect_type = false;
    } else {
      ASSERT_TRUE(std::regex_match(l, m, sample_line)) << "malformed line: " << l;
      EXPECT_EQ(m[1], current) << "sample outside its family: " << l;
    }
  }
  for (const char* name :
       {"vramkit_gpu_memory_total_bytes", "vramkit_gpu_memory_used_bytes",
        "vramkit_gpu_memory_free_bytes", "vramkit_gpu_memory_reserved_bytes", "vramkit_gpu_up",
        "vramkit_gpu_process_memory_used_bytes", "vramkit_gpu_utilization_ratio",
        "vramkit_gpu_pcie_rx_bytes_per_second", "vramkit_gpu_pcie_tx_bytes_per_second",
        "vramkit_gpu_temperature_celsius", "vramkit_gpu_power_watts",
        "vramkit_host_memory_total_bytes", "vramkit_host_memory_available_bytes",
        "vramkit_host_numa_memory_free_bytes", "vramkit_process_resident_memory_bytes",
        "vramkit_exporter_scrapes_total", "vramkit_exporter_sample_duration_seconds"}) {
    EXPECT_TRUE(seen_families.count(name)) << "missing family " << name;
  }
}

TEST(Exposition, ValuesAreInBaseUnitsWithTheAgreedLabels) {
  std::string text = render_metrics(fixture_sample(), {7, 3});
  auto has = [&](const std::string& line) {
    auto ls = lines_of(text);
    return std::find(ls.begin(), ls.end(), line) != ls.end();
  };
  const std::string gpu0 =
      R"(gpu="0",uuid="GPU-00000000-1111-2222-3333-444444444444",name="NVIDIA H200")";
  EXPECT_TRUE(has("vramkit_gpu_memory_total_bytes{" + gpu0 + "} 150754820096")) << text;
  EXPECT_TRUE(has("vramkit_gpu_memory_used_bytes{" + gpu0 + "} 40802189312"));
  EXPECT_TRUE(
      has("vramkit_gpu_memory_free_bytes{" + gpu0 + "} 109354942464"));  // total - used - reserved
  EXPECT_TRUE(has("vramkit_gpu_memory_reserved_bytes{" + gpu0 + "} 597688320"));
  EXPECT_TRUE(has("vramkit_gpu_utilization_ratio{" + gpu0 + "} 0.87"));
  EXPECT_TRUE(has("vramkit_gpu_up{" + gpu0 + "} 1"));
  EXPECT_TRUE(has("vramkit_gpu_power_watts{" + gpu0 + "} 412.5"));
  EXPECT_TRUE(has("vramkit_gpu_sm_clock_hertz{" + gpu0 + "} 1980000000"));
  EXPECT_TRUE(has("vramkit_gpu_process_memory_used_bytes{" + gpu0 +
                  R"(,pid="4343",command="vllm serve model,\"x\"",namespace="",pod="",)"
                  R"(container="",pod_uid="",slurm_job=""} 34359738368)"))
      << text;
  EXPECT_TRUE(has(
      R"(vramkit_process_resident_memory_bytes{pid="4242",command="python3 train.py --batch-size 8"} 8589934592)"));
  EXPECT_TRUE(has(R"(vramkit_host_numa_memory_free_bytes{node="1"} 962560000000)"));
  EXPECT_TRUE(has("vramkit_host_memory_total_bytes 2164117798912"));
  EXPECT_TRUE(has("vramkit_cgroup_memory_limit_bytes 68719476736"));
  EXPECT_TRUE(has("vramkit_exporter_scrapes_total 7"));
}

TEST(Exposition, ALostDeviceIsDownWithoutMemorySeries) {
  auto fake = std::make_shared<fake_nvml>(
      fake_nvml::parse(R"({"gpus":[{"uuid":"GPU-x","memory_total_bytes":10,"lost":true}]})"));
  sampler_options o;
  o.read_host = false;
  sampler s(std::shared_ptr<nvml_api>(fake), o);
  std::string text = render_metrics(s.take(), {});
  EXPECT_NE(text.find("vramkit_gpu_up{gpu=\"0\",uuid=\"\",name=\"\"} 0"), std::string::npos)
      << text;
}

TEST(Exposition, ADeviceLostLaterKeepsItsUuidLabel) {
  auto fake = std::make_shared<fake_nvml>(
      fake_nvml::parse(R"({"gpus":[{"name":"N","uuid":"GPU-x","memory_total_bytes":10}]})"));
  sampler_options o;
  o.read_host = false;
  sampler s(std::shared_ptr<nvml_api>(fake), o);
  s.take();
  fake->edit_gpu(0, [](fake_gpu& g) { g.lost = true; });
  std::string text = render_metrics(s.take(), {});
  EXPECT_NE(text.find("vramkit_gpu_up{gpu=\"0\",uuid=\"GPU-x\",name=\"N\"} 0"), std::string::npos)
      << text;
  EXPECT_EQ(text.find("vramkit_gpu_memory_used_bytes"), std::string::npos);
}

TEST(Exposition, ProcessesCarryTheirOwnerAndWorkloadsTheirPlanUse) {
  sample s;
  gpu_sample g;
  g.index = 0;
  g.uuid = "GPU-a";
  g.name = "N";
  g.memory_total_bytes = 100;
  auto proc = [](std::uint32_t pid, std::uint64_t used, process_owner o) {
    gpu_process p;
    p.pid = pid;
    p.used_bytes = used;
    p.command = "c";
    p.owner = std::move(o);
    return p;
  };
  process_owner pod;
  pod.pod_namespace = "ml";
  pod.pod = "train-0";
  pod.container = "main";
  pod.pod_uid = "u-1";
  pod.planned_bytes = 40;
  pod.planned_from = plan_source::planned;
  process_owner job;
  job.slurm_job = "42";
  g.processes = {proc(1, 30, pod), proc(2, 6, pod), proc(3, 10, job), proc(4, 5, {})};
  s.gpus.push_back(g);
  const std::string text = render_metrics(s, {});
  auto has = [&](const std::string& line) { return text.find(line + "\n") != std::string::npos; };
  const std::string p1 =
      R"({gpu="0",uuid="GPU-a",name="N",pid="1",command="c",namespace="ml",pod="train-0",)"
      R"(container="main",pod_uid="u-1",slurm_job=""})";
  EXPECT_TRUE(has("vramkit_gpu_process_memory_used_bytes" + p1 + " 30")) << text;
  EXPECT_TRUE(has("vramkit_gpu_process_memory_planned_bytes" + p1 + " 40")) << text;
  EXPECT_TRUE(has("vramkit_gpu_process_memory_plan_ratio" + p1 + " 0.75")) << text;
  EXPECT_TRUE(has(R"(vramkit_gpu_process_memory_used_bytes{gpu="0",uuid="GPU-a",name="N",pid="4",)"
                  R"(command="c",namespace="",pod="",container="",pod_uid="",slurm_job=""} 5)"))
      << text;
  // Processes without a plan have no planned or ratio series.
  EXPECT_EQ(
      text.find(
          R"(vramkit_gpu_process_memory_planned_bytes{gpu="0",uuid="GPU-a",name="N",pid="3")"),
      std::string::npos);
  // Per workload and GPU: the pod's two processes summed against its plan; the job without a plan
  // has a use but no ratio; the host process none.
  const std::string w =
      R"({gpu="0",uuid="GPU-a",name="N",namespace="ml",pod="train-0",container="main",pod_uid="u-1",slurm_job=""})";
  EXPECT_TRUE(has("vramkit_workload_gpu_memory_used_bytes" + w + " 36")) << text;
  EXPECT_TRUE(has("vramkit_workload_gpu_memory_planned_bytes" + w + " 40")) << text;
  EXPECT_TRUE(has("vramkit_workload_gpu_memory_plan_ratio" + w + " 0.9")) << text;
  EXPECT_TRUE(
      has(R"(vramkit_workload_gpu_memory_used_bytes{gpu="0",uuid="GPU-a",name="N",namespace="",)"
          R"(pod="",container="",pod_uid="",slurm_job="42"} 10)"))
      << text;
  EXPECT_EQ(text.find("slurm_job=\"42\"} 0."), std::string::npos);
  // The page a scrape serves is the sample's page plus its counter, and nothing else.
  EXPECT_EQ(text, render_sample_metrics(s, 0) + render_scrape_counter(0));
}

}  // namespace
}  // namespace vramkit::monitor
