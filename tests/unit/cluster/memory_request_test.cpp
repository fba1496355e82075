// Requests from declarations, planner JSON and Kubernetes quantities.
#include "vramkit/cluster/memory_request.hpp"

#include <gtest/gtest.h>

#include "vramkit/core/error.hpp"
#include "vramkit/core/units.hpp"

namespace vramkit::cluster {
namespace {

TEST(MemoryRequest, ParsesDeclarations) {
  EXPECT_EQ(parse_memory_request("24GiB"), 24 * GiB);
  EXPECT_EQ(parse_memory_request("24 GiB"), 24 * GiB);
  EXPECT_EQ(parse_memory_request("80GB"), 80'000'000'000ULL);
  EXPECT_EQ(parse_memory_request("1.5G"), 3 * GiB / 2);
  EXPECT_THROW((void)parse_memory_request("0"), invalid_input);
  EXPECT_THROW((void)parse_memory_request("-1GiB"), invalid_input);
  EXPECT_THROW((void)parse_memory_request("lots"), invalid_input);
}

TEST(MemoryRequest, ReadsDevicePeakFromPlanJson) {
  const char* plan =
      R"({"schema_version": 1, "allocated_peak_bytes": 100, "reserved_peak_bytes": 200,
                         "device_peak_bytes": 25769803776, "host_peak_bytes": 0, "components": []})";
  EXPECT_EQ(request_from_plan_json(plan), 24 * GiB);
}

TEST(MemoryRequest, RejectsBadPlans) {
  try {
    (void)request_from_plan_json("{\"allocated_peak_bytes\": 5}", "plan.json");
    FAIL() << "no throw";
  } catch (const invalid_input& e) {
    EXPECT_STREQ(e.what(), "plan.json: has no device_peak_bytes");
  }
  EXPECT_THROW((void)request_from_plan_json("not json"), invalid_input);
  EXPECT_THROW((void)request_from_plan_json("[1]"), invalid_input);
  EXPECT_THROW((void)request_from_plan_json("{\"device_peak_bytes\": -4}"), invalid_input);
  EXPECT_THROW((void)request_from_plan_json("{\"device_peak_bytes\": \"24GiB\"}"), invalid_input);
}

TEST(KubeQuantity, BinaryAndDecimalSuffixes) {
  EXPECT_EQ(parse_kube_quantity("24Gi"), 24 * GiB);
  EXPECT_EQ(parse_kube_quantity("512Mi"), 512 * MiB);
  EXPECT_EQ(parse_kube_quantity("1Ki"), 1024u);
  EXPECT_EQ(parse_kube_quantity("2Ti"), 2 * TiB);
  EXPECT_EQ(parse_kube_quantity("24G"), 24'000'000'000ULL);
  EXPECT_EQ(parse_kube_quantity("5k"), 5000u);
  EXPECT_EQ(parse_kube_quantity("3M"), 3'000'000u);
  EXPECT_EQ(parse_kube_quantity("25769803776"), 24 * GiB);
  EXPECT_EQ(parse_kube_quantity("+7"), 7u);
  EXPECT_EQ(parse_kube_quantity("0"), 0u);
}

TEST(KubeQuantity, FractionsAndExponentsRoundUpToWholeBytes) {
  EXPECT_EQ(parse_kube_quantity("1.5Gi"), 3 * GiB / 2);
  EXPECT_EQ(parse_kube_quantity("1e9"), 1'000'000'000u);
  EXPECT_EQ(parse_kube_quantity("1E3"), 1000u);
  EXPECT_EQ(parse_kube_quantity("15e-1"), 2u);  // 1.5 -> 2
  EXPECT_EQ(parse_kube_quantity("100m"), 1u);   // 0.1 -> 1
  EXPECT_EQ(parse_kube_quantity("1000m"), 1u);
  EXPECT_EQ(parse_kube_quantity("1001m"), 2u);
  EXPECT_EQ(parse_kube_quantity(".5Ki"), 512u);
  EXPECT_EQ(parse_kube_quantity("0.1"), 1u);
  EXPECT_EQ(parse_kube_quantity("1e-30"), 1u);
  EXPECT_EQ(parse_kube_quantity("0e-30"), 0u);
}

TEST(KubeQuantity, RejectsMalformedAndHugeValues) {
  for (const char* bad : {"", "Gi", "-1Gi", "24GB", "24gi", "1.2.3", "1e", "1e+", "1ex", "24 Gi",
                          "9Ei", "1e40", "99999999999999999999999999999999"}) {
    EXPECT_THROW((void)parse_kube_quantity(bad), invalid_input) << bad;
  }
  EXPECT_EQ(parse_kube_quantity("7Ei"), 7ULL << 60);
}

}  // namespace
}  // namespace vramkit::cluster
