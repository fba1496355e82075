// Prometheus text format parsing and the exporter metrics -> GPU state mapping.
#include "vramkit/cluster/prometheus_text.hpp"

#include <cmath>

#include <gtest/gtest.h>

#include "vramkit/core/error.hpp"
#include "vramkit/core/units.hpp"

namespace vramkit::cluster {
namespace {

TEST(PrometheusText, ParsesCommentsLabelsValuesAndTimestamps) {
  const char* text =
      "# HELP vramkit_gpu_memory_total_bytes Total device memory in bytes.\n"
      "# TYPE vramkit_gpu_memory_total_bytes gauge\n"
      "\n"
      "vramkit_gpu_memory_total_bytes{gpu=\"0\",uuid=\"GPU-a\",name=\"NVIDIA H200\"} 1.5e+11\n"
      "  plain_metric 42 1700000000123\r\n"
      "escaped{path=\"C:\\\\dir\",quote=\"say \\\"hi\\\"\",nl=\"a\\nb\",} -3.5\n"
      "spaces { a = \"1\" , b=\"2\" }\t7\n"
      "empty_set{} 1\n"
      "special{k=\"v\"} NaN\n"
      "special{k=\"w\"} +Inf\n"
      "special{k=\"x\"} -Inf\n"
      "with:colon 0\n";
  const auto s = parse_prometheus_text(text);
  ASSERT_EQ(s.size(), 9u);
  EXPECT_EQ(s[0].name, "vramkit_gpu_memory_total_bytes");
  ASSERT_EQ(s[0].labels.size(), 3u);
  EXPECT_EQ(*s[0].label("name"), "NVIDIA H200");
  EXPECT_EQ(s[0].label("missing"), nullptr);
  EXPECT_DOUBLE_EQ(s[0].value, 1.5e11);
  EXPECT_FALSE(s[0].timestamp_ms.has_value());
  EXPECT_EQ(s[1].name, "plain_metric");
  EXPECT_EQ(s[1].timestamp_ms, 1700000000123);
  EXPECT_EQ(*s[2].label("path"), "C:\\dir");
  EXPECT_EQ(*s[2].label("quote"), "say \"hi\"");
  EXPECT_EQ(*s[2].label("nl"), "a\nb");
  EXPECT_DOUBLE_EQ(s[2].value, -3.5);
  EXPECT_EQ(*s[3].label("a"), "1");
  EXPECT_EQ(*s[3].label("b"), "2");
  EXPECT_DOUBLE_EQ(s[3].value, 7);
  EXPECT_TRUE(s[4].labels.empty());
  EXPECT_TRUE(std::isnan(s[5].value));
  EXPECT_TRUE(std::isinf(s[6].value) && s[6].value > 0);
  EXPECT_TRUE(std::isinf(s[7].value) && s[7].value < 0);
  EXPECT_EQ(s[8].name, "with:colon");
}

TEST(PrometheusText, LabelValuesMayHoldBracesCommasAndHashes) {
  const auto s = parse_prometheus_text("m{a=\"x}, y=\\\"z\\\" # not a comment\"} 1\n");
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(*s[0].label("a"), "x}, y=\"z\" # not a comment");
}

TEST(PrometheusText, MalformedLinesNameTheLine) {
  for (const char* bad :
       {"m{a=\"1\" 1", "m{a=1} 1", "m{a=\"1\"} x", "m 1 2 3", "m{a=\"\\q\"} 1", "1m 2", "m",
        "m{=\"1\"} 1", "m{a=\"unterminated} 1", "m 0x10", "m 1 1.5"}) {
    try {
      (void)parse_prometheus_text(std::string("# ok\n") + bad + "\n");
      ADD_FAILURE() << "accepted: " << bad;
    } catch (const invalid_input& e) {
      EXPECT_EQ(std::string(e.what()).rfind("metrics line 2:", 0), 0u) << e.what();
    }
  }
}

TEST(PrometheusText, MapsExporterMetricsToGpus) {
  const char* text =
      "# TYPE vramkit_gpu_up gauge\n"
      "vramkit_gpu_up{gpu=\"0\",uuid=\"GPU-0\",name=\"NVIDIA H200\"} 1\n"
      "vramkit_gpu_up{gpu=\"1\",uuid=\"GPU-1\",name=\"NVIDIA H200\"} 0\n"
      "vramkit_gpu_memory_total_bytes{gpu=\"1\",uuid=\"GPU-1\",name=\"NVIDIA H200\"} 151397597184\n"
      "vramkit_gpu_memory_total_bytes{gpu=\"0\",uuid=\"GPU-0\",name=\"NVIDIA H200\"} 151397597184\n"
      "vramkit_gpu_memory_used_bytes{gpu=\"0\",uuid=\"GPU-0\",name=\"NVIDIA H200\"} 10737418240\n"
      "vramkit_gpu_memory_free_bytes{gpu=\"0\",uuid=\"GPU-0\",name=\"NVIDIA H200\"} 140660178944\n"
      "vramkit_gpu_memory_reserved_bytes{gpu=\"0\",uuid=\"GPU-0\",name=\"NVIDIA H200\"} 536870912\n"
      "vramkit_gpu_memory_used_bytes{gpu=\"1\",uuid=\"GPU-1\",name=\"NVIDIA H200\"} 1073741824\n"
      "vramkit_gpu_memory_total_bytes{gpu=\"2\"} 1000\n"
      "vramkit_host_memory_total_bytes 1e12\n"
      "vramkit_gpu_temperature_celsius{gpu=\"3\"} 40\n";
  const auto gpus = gpus_from_metrics(parse_prometheus_text(text));
  ASSERT_EQ(gpus.size(), 3u);  // gpu 3 has no total: not a GPU we can place on
  EXPECT_EQ(gpus[0].index, 0);
  EXPECT_EQ(gpus[0].uuid, "GPU-0");
  EXPECT_EQ(gpus[0].name, "NVIDIA H200");
  EXPECT_EQ(gpus[0].total_bytes, 151397597184u);
  EXPECT_EQ(gpus[0].used_bytes, 10 * GiB);
  EXPECT_EQ(gpus[0].free_bytes, 140660178944u);
  EXPECT_EQ(gpus[0].reserved_bytes, GiB / 2);
  EXPECT_TRUE(gpus[0].up);
  EXPECT_FALSE(gpus[1].up);
  EXPECT_EQ(gpus[1].free_bytes, 151397597184u - GiB);  // derived: total - used
  EXPECT_EQ(gpus[2].total_bytes, 1000u);
  EXPECT_EQ(gpus[2].free_bytes, 1000u);
}

TEST(PrometheusText, RejectsANonNumericGpuLabel) {
  EXPECT_THROW((void)gpus_from_metrics(
                   parse_prometheus_text("vramkit_gpu_memory_total_bytes{gpu=\"a\"} 1\n")),
               invalid_input);
}

}  // namespace
}  // namespace vramkit::cluster
