// What a probe run says about the sections it was asked for: unmeasured_section, which gives
// `vramkit probe` its exit code 3.
#include <gtest/gtest.h>

#include <algorithm>

#include "vramkit/probe/gpu_probe.hpp"
#include "vramkit/probe/probe.hpp"

namespace vramkit::probe {
namespace {

probe_report with_one_result() {
  probe_report r;
  r.results.emplace_back();
  return r;
}

// A GPU section other than "gpu" itself (each GPU case has one).
std::string a_gpu_section() {
  const auto sections = gpu_probe_sections();
  const auto it = std::find_if(sections.begin(), sections.end(),
                               [](const std::string& s) { return s != "gpu"; });
  return it == sections.end() ? std::string("gpu") : *it;
}

TEST(UnmeasuredSection, NamesTheRequestedSectionThatWasSkippedWhole) {
  auto r = with_one_result();
  r.skips.push_back({"host.latency", "no hugepages", false});
  EXPECT_EQ(unmeasured_section(r, {"latency"}), "section 'latency' was skipped: no hugepages");
  EXPECT_EQ(unmeasured_section(r, {"host"}), std::nullopt);
}

TEST(UnmeasuredSection, ASkipOfTheWholeGpuCoversEveryGpuSection) {
  auto r = with_one_result();
  r.skips.push_back({"gpu", "no CUDA device", false});
  const std::string section = a_gpu_section();
  EXPECT_EQ(unmeasured_section(r, {section}),
            "section '" + section + "' was skipped: no CUDA device");
  EXPECT_EQ(unmeasured_section(r, {"latency"}), std::nullopt);
}

TEST(UnmeasuredSection, MatchesTheSectionAfterTheDeviceTag) {
  auto r = with_one_result();
  const std::string section = a_gpu_section();
  r.skips.push_back({"gpu0." + section, "one GPU only", false});
  EXPECT_EQ(unmeasured_section(r, {section}),
            "section '" + section + "' was skipped: one GPU only");
}

TEST(UnmeasuredSection, AFailureIsNotASkip) {
  auto r = with_one_result();
  r.skips.push_back({"gpu", "GPU probe failed: bad checksum", true});
  EXPECT_EQ(unmeasured_section(r, {"gpu"}), std::nullopt);
}

TEST(UnmeasuredSection, AReportWithNothingInItIsTheWholeProbe) {
  EXPECT_EQ(unmeasured_section(probe_report{}, {}), "the probe");
  probe_report curve_only;
  curve_only.curves.emplace_back();
  EXPECT_EQ(unmeasured_section(curve_only, {}), std::nullopt);
}

}  // namespace
}  // namespace vramkit::probe
