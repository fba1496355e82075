// The probe report's JSON form round-trips and rejects what is not a report.
#include "vramkit/probe/report_json.hpp"

#include <limits>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "vramkit/core/error.hpp"

namespace vramkit::probe {
namespace {

probe_report sample_report() {
  probe_report r;
  r.header["hostname"] = "node-7";
  r.header["gpu.0.name"] = "NVIDIA H200";
  auto m = make_measurement("gpu0.h2d.pinned", "h2d", "pinned H2D, 1 GiB", "gpu0", "GB/s",
                            {55.1, 55.4, 54.9});
  m.convention = byte_convention::copied_once;
  m.size_bytes = 1ull << 30;
  m.peak = 63.0;
  m.peak_basis = "PCIe gen 5 x16";
  m.verified = true;
  m.note = "checksum ok";
  m.verdict = verdict_kind::normal;
  m.verdict_reason = "within range";
  m.extra["host_numa_node"] = 1;
  r.results.push_back(m);
  measurement h;
  h.key = "host.latency.l1d";
  h.section = "latency";
  h.unit = "ns";
  h.samples = {1.1};
  h.stats = sample_stats::of(h.samples);
  r.results.push_back(h);
  curve c = make_curve("host.latency", "latency", "latency", "bytes", "ns", true);
  c.points.push_back({4096, {1, 1.1, 1.2}, {1, 1.1, 1.2}});
  c.points.push_back({8192, {1, 1.2, 1.3}, {1.3, 1.2, 1}});
  r.curves.push_back(c);
  r.levels.push_back({"L1d", "host", 1.1, 32768, 32768});
  r.levels.push_back({"DRAM", "host", 90, 0, std::nullopt});
  r.skips.push_back({"gpu", "no CUDA driver", false});
  r.skips.push_back({"host.bw.copy.one_thread", "checksum mismatch", true});
  return r;
}

TEST(ReportJson, RoundTripsEveryField) {
  const auto r = sample_report();
  const auto j = nlohmann::json::parse(to_json(r));
  EXPECT_EQ(j.at("schema_version"), schema_version);
  const auto back = report_from_json(j.dump());
  EXPECT_EQ(to_json(back), j.dump(2));
  ASSERT_EQ(back.results.size(), 2u);
  EXPECT_EQ(back.results[0].convention, byte_convention::copied_once);
  EXPECT_EQ(back.results[0].peak, 63.0);
  EXPECT_EQ(back.results[0].samples, r.results[0].samples);
  EXPECT_FALSE(back.results[1].peak.has_value());
  EXPECT_EQ(back.levels[0].reported_size_bytes, 32768u);
  EXPECT_FALSE(back.levels[1].reported_size_bytes.has_value());
  EXPECT_TRUE(back.skips[1].failed);
  EXPECT_EQ(back.header.at("gpu.0.name"), "NVIDIA H200");
}

TEST(ReportJson, EveryResultCarriesUnitConventionAndSpread) {
  const auto j = nlohmann::json::parse(to_json(sample_report()));
  for (const auto& r : j.at("results")) {
    for (const char* f : {"key", "unit", "convention", "size_bytes", "repetitions", "samples",
                          "stats", "percent_of_peak", "verdict", "verified"}) {
      EXPECT_TRUE(r.contains(f)) << f;
    }
    EXPECT_TRUE(r.at("stats").contains("median"));
  }
  EXPECT_DOUBLE_EQ(j.at("results")[0].at("percent_of_peak").get<double>(), 100.0 * 55.1 / 63.0);
}

TEST(ReportJson, NonFiniteNumbersBecomeNull) {
  auto r = sample_report();
  r.results[0].samples.push_back(std::numeric_limits<double>::infinity());
  const auto j = nlohmann::json::parse(to_json(r));
  EXPECT_TRUE(j.at("results")[0].at("samples")[3].is_null());
  EXPECT_NO_THROW(report_from_json(j.dump()));
}

// Found by fuzzing (tests/fuzz/regressions/probe_report/): an "extra" value that is not a number
// let json's type_error escape; a count beyond its type (1e30, -1) was converted with undefined
// behaviour or wrapped. Each is now a one-line invalid_input naming the field.
TEST(ReportJson, FieldsOfTheWrongTypeOrRangeAreRefused) {
  const auto good = nlohmann::json::parse(to_json(sample_report()));
  const std::pair<const char*, nlohmann::json> cases[] = {
      {"extra", nlohmann::json{{"threads", "many"}}},
      {"extra", "0.1.0"},
      {"size_bytes", 1e30},
      {"size_bytes", -1},
      {"repetitions", 1e30},
      {"samples", nlohmann::json::array({1.0, "x"})}};
  for (const auto& [field, value] : cases) {
    auto j = good;
    j["results"][0][field] = value;
    try {
      (void)report_from_json(j.dump());
      ADD_FAILURE() << field << " = " << value.dump() << " was accepted";
    } catch (const invalid_input& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
  }
  EXPECT_NO_THROW((void)report_from_json(good.dump()));
}

TEST(ReportJson, RejectsWhatIsNotAReport) {
  EXPECT_THROW(report_from_json("[]"), invalid_input);
  EXPECT_THROW(report_from_json(R"({"schema_version":1e999})"), invalid_input);  // out_of_range
  EXPECT_THROW(report_from_json(R"({"results": []})"), invalid_input);
  auto j = nlohmann::json::parse(to_json(sample_report()));
  j["schema_version"] = schema_version + 1;
  EXPECT_THROW(report_from_json(j.dump()), invalid_input);
  j = nlohmann::json::parse(to_json(sample_report()));
  j["results"][0]["convention"] = "twice";
  EXPECT_THROW(report_from_json(j.dump()), invalid_input);
  j = nlohmann::json::parse(to_json(sample_report()));
  j["results"][0].erase("unit");
  try {
    report_from_json(j.dump());
    FAIL();
  } catch (const invalid_input& e) {
    EXPECT_NE(std::string(e.what()).find("unit"), std::string::npos);
  }
}

}  // namespace
}  // namespace vramkit::probe
