// JSON Lines and CSV round trips, and the reader's handling of damaged recordings.
#include "vramkit/monitor/recording.hpp"

#include <gtest/gtest.h>

#include "vramkit/core/error.hpp"
#include "vramkit/core/testing/fake_nvml.hpp"
#include "vramkit/monitor/metrics_schema.hpp"
#include "vramkit/monitor/sampler.hpp"

namespace vramkit::monitor {
namespace {

using vramkit::testing::fake_gpu;
using vramkit::testing::fake_nvml;

const std::filesystem::path data = std::filesystem::path(VRAMKIT_SOURCE_DIR) / "tests/data/monitor";

sample fixture_sample(std::int64_t t) {
  auto fake = fake_nvml::from_file(data / "fake_gpus.json");
  sampler_options o;
  o.host_root = data / "host";
  o.clock_ms = [t] { return t; };
  sampler s(std::shared_ptr<nvml_api>(fake), o);
  return s.take();
}

TEST(Recording, JsonLineRoundTripsEveryField) {
  sample s = fixture_sample(1'700'000'000'123);
  std::string line = to_json_line(s);
  EXPECT_EQ(line.find('\n'), std::string::npos);
  sample back = sample_from_json(line);
  EXPECT_EQ(to_json_line(back), line);
  EXPECT_EQ(back.timestamp_ms, 1'700'000'000'123);
  ASSERT_EQ(back.gpus.size(), 2U);
  EXPECT_EQ(back.gpus[0].memory_reserved_bytes, 597688320U);
  EXPECT_EQ(back.gpus[0].processes[1].command, "vllm serve model,\"x\"");
  EXPECT_NE(line.find("\"timestamp\":\"2023-11-14T22:13:20.123Z\""), std::string::npos)
      << line.substr(0, 200);
}

TEST(Recording, WorkloadOfTheSamplerRoundTripsThroughJson) {
  auto fake = fake_nvml::from_file(data / "fake_gpus.json");
  sampler_options o;
  o.host_root = data / "host";
  o.workload_of = [](std::uint32_t pid) {
    process_owner w;
    if (pid == 4242) {
      w.slurm_job = "7";
      w.slurm_step = "batch";
      w.planned_bytes = 8589934592U;
      w.planned_from = plan_source::planned;
    }
    return w;
  };
  sample s = sampler(std::shared_ptr<nvml_api>(fake), o).take();
  ASSERT_EQ(s.gpus[0].processes.size(), 2U);
  EXPECT_EQ(s.gpus[0].processes[0].workload, "slurm job 7");
  EXPECT_EQ(s.gpus[0].processes[1].workload, "");
  sample back = sample_from_json(to_json_line(s));
  EXPECT_EQ(back.gpus[0].processes[0].workload, "slurm job 7");
  EXPECT_EQ(back.gpus[0].processes[0].owner.slurm_step, "batch");
  EXPECT_EQ(back.gpus[0].processes[0].owner.planned_bytes, 8589934592U);
  EXPECT_EQ(back.gpus[0].processes[0].owner.planned_from, plan_source::planned);
  EXPECT_EQ(back.gpus[0].processes[1].workload, "");
  EXPECT_TRUE(back.gpus[0].processes[1].owner.empty());
}

TEST(Recording, CsvRoundTripsTheDeviceColumns) {
  sample s = fixture_sample(1'700'000'000'000);
  std::string text = csv_header() + "\n";
  for (const auto& l : to_csv_lines(s)) text += l + "\n";
  auto rec = parse_recording(text);
  EXPECT_TRUE(rec.errors.empty()) << rec.errors[0].message;
  EXPECT_EQ(rec.format, "csv");
  ASSERT_EQ(rec.samples.size(), 1U);
  const auto& g = rec.samples[0].gpus[0];
  EXPECT_EQ(g.uuid, s.gpus[0].uuid);
  EXPECT_EQ(g.memory_used_bytes, s.gpus[0].memory_used_bytes);
  EXPECT_EQ(g.memory_total_bytes, s.gpus[0].memory_total_bytes);
  EXPECT_EQ(g.memory_reserved_bytes, s.gpus[0].memory_reserved_bytes);
  EXPECT_EQ(g.power_watts, s.gpus[0].power_watts);
  EXPECT_EQ(rec.samples[0].host.memory->available_bytes, s.host.memory->available_bytes);
}

// Regression: CSV wrote doubles with six significant digits, so 1048576000 B/s came back as
// 1048580000 ("1.04858e+09") and 1/3 lost its tail.
TEST(Recording, CsvNumbersRoundTripExactly) {
  sample s;
  s.timestamp_ms = 1'700'000'000'000;
  gpu_sample g;
  g.uuid = "GPU-0";
  g.memory_total_bytes = 150754820096;
  g.memory_used_bytes = 40802189312;
  g.memory_free_bytes = 0;
  g.memory_reserved_bytes = 597688320;
  g.pcie_rx_bytes_per_second = 1048576000.0;
  g.pcie_tx_bytes_per_second = 1e20;
  g.utilization_gpu_percent = 100.0 / 3.0;
  g.utilization_memory_percent = 0.1;
  g.temperature_celsius = -12.25;
  g.power_watts = 412.5;
  g.sm_clock_mhz = 1980;
  g.memory_clock_mhz = 4294967295U;
  s.gpus.push_back(g);
  const auto lines = to_csv_lines(s);
  ASSERT_EQ(lines.size(), 1U);
  EXPECT_NE(lines[0].find(",1048576000,"), std::string::npos) << lines[0];
  EXPECT_EQ(lines[0].find("e+09"), std::string::npos) << lines[0];
  auto rec = parse_recording(csv_header() + "\n" + lines[0] + "\n");
  ASSERT_TRUE(rec.errors.empty()) << rec.errors[0].message;
  ASSERT_EQ(rec.samples.size(), 1U);
  const gpu_sample& back = rec.samples[0].gpus.at(0);
  // Every CSV column of the schema reads back to the value written, to the bit.
  for (const gpu_field* f : gpu_csv_fields())
    EXPECT_EQ(field_value(back, *f), field_value(g, *f)) << f->key;
  EXPECT_EQ(back.utilization_gpu_percent, 100.0 / 3.0);
  EXPECT_EQ(back.pcie_tx_bytes_per_second, 1e20);
}

TEST(Recording, JsonKeysAndCsvColumnsComeFromTheSchema) {
  sample s = fixture_sample(1'700'000'000'000);
  const std::string line = to_json_line(s);
  const std::string header = csv_header();
  for (const auto& f : gpu_fields()) {
    if (field_value(s.gpus[0], f)) {
      EXPECT_NE(line.find("\"" + std::string(f.key) + "\":"), std::string::npos) << f.key;
    }
    EXPECT_EQ(header.find(std::string(f.key)) != std::string::npos, f.csv_column >= 0) << f.key;
  }
}

TEST(Recording, CsvQuotesNamesWithCommasAndQuotes) {
  sample s;
  s.timestamp_ms = 1000;
  gpu_sample g;
  g.name = "odd, \"name\"";
  g.memory_used_bytes = 5;
  s.gpus.push_back(g);
  auto rec = parse_recording(csv_header() + "\n" + to_csv_lines(s)[0] + "\n");
  ASSERT_TRUE(rec.errors.empty()) << rec.errors[0].message;
  EXPECT_EQ(rec.samples[0].gpus[0].name, "odd, \"name\"");
}

TEST(Recording, MalformedJsonLinesAreReportedByLineAndSkipped) {
  std::string good1 = to_json_line(fixture_sample(1000));
  std::string good2 = to_json_line(fixture_sample(2000));
  auto rec = parse_recording(good1 + "\n{\"schema_version\":1,\"timestamp_ms\":\n\n" + good2 +
                             "\n{\"schema_version\":99}\n");
  ASSERT_EQ(rec.samples.size(), 2U);
  EXPECT_EQ(rec.samples[1].timestamp_ms, 2000);
  ASSERT_EQ(rec.errors.size(), 2U);
  EXPECT_EQ(rec.errors[0].line, 2U);
  EXPECT_EQ(rec.errors[1].line, 5U);
  EXPECT_NE(rec.errors[1].message.find("schema_version 99"), std::string::npos)
      << rec.errors[1].message;
}

TEST(Recording, MalformedCsvLinesAreReportedByLineAndSkipped) {
  sample s = fixture_sample(1000);
  auto lines = to_csv_lines(s);
  std::string text = csv_header() + "\n" + lines[0] + "\n" +
                     "2023-01-01T00:00:00.000Z,notanumber,0\n" + lines[1] + "\n" +
                     "\"unterminated\n";
  auto rec = parse_recording(text);
  ASSERT_EQ(rec.samples.size(), 1U);
  EXPECT_EQ(rec.samples[0].gpus.size(), 2U);
  ASSERT_EQ(rec.errors.size(), 2U);
  EXPECT_EQ(rec.errors[0].line, 3U);
  EXPECT_EQ(rec.errors[1].line, 5U);
}

// Found by tests/fuzz (recording): a header naming a column twice has fewer distinct columns than
// fields, and rows with that many fields were read past their end.
TEST(Recording, CsvHeaderRepeatingAColumnIsReportedNotRead) {
  const std::string text =
      "epoch_ms,device,name,name\n"
      "1000,0,a\n";
  const auto rec = parse_recording(text);
  ASSERT_FALSE(rec.errors.empty());
  EXPECT_EQ(rec.errors[0].line, 1U);
  EXPECT_NE(rec.errors[0].message.find("repeats column name"), std::string::npos)
      << rec.errors[0].message;
  EXPECT_TRUE(rec.samples.empty());
}

// Found by fuzzing (tests/fuzz/regressions/recording/): a timestamp or schema version beyond its
// type (1.79612e+21 ms) was converted with undefined behaviour (UBSan float-cast-overflow); now
// the line is reported and skipped, as any malformed line.
TEST(Recording, NumbersBeyondTheirTypeAreReportedNotConverted) {
  for (
      const char* line :
      {R"({"schema_version":1,"timestamp_ms":1.79612e21,"gpus":[]})",
       R"({"schema_version":1e30,"timestamp_ms":1000,"gpus":[]})",
       R"({"schema_version":1,"timestamp_ms":1000,"gpus":[{"index":0,"mig":[{"gpu_instance_id":-1}]}]})",
       R"({"schema_version":1,"timestamp_ms":1000,"sample_duration_seconds":"slow","gpus":[]})"}) {
    EXPECT_THROW((void)sample_from_json(line), invalid_input) << line;
    const auto rec = parse_recording(std::string(line) + "\n");
    EXPECT_TRUE(rec.samples.empty()) << line;
    EXPECT_EQ(rec.errors.size(), 1U) << line;
  }
  const auto s = sample_from_json(R"({"schema_version":1,"timestamp_ms":1000,"gpus":[]})");
  EXPECT_EQ(s.timestamp_ms, 1000);
}

TEST(Recording, UnreadableFileIsAUsageError) {
  EXPECT_THROW(read_recording("/no/such/recording.jsonl"), invalid_input);
  EXPECT_THROW(read_recording(data), invalid_input) << "a directory is not a recording";
}

TEST(Recording, FormatsIso8601InUtc) {
  EXPECT_EQ(format_iso8601_ms(0), "1970-01-01T00:00:00.000Z");
  EXPECT_EQ(format_iso8601_ms(1'700'000'000'007), "2023-11-14T22:13:20.007Z");
}

}  // namespace
}  // namespace vramkit::monitor
