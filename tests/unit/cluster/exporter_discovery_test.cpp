// Exporter discovery from the DaemonSet's pods: a PodList as the API serves it
// (tests/data/cluster/discovery/exporter_pods.json), ready pods only, IPv6 in brackets.
#include "vramkit/cluster/exporter_discovery.hpp"

#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "vramkit/core/error.hpp"

namespace vramkit::cluster {
namespace {

TEST(ExporterDiscovery, ReadyDaemonSetPodsGiveTheNodeMap) {
  std::ifstream in(std::string(VRAMKIT_SOURCE_DIR) +
                   "/tests/data/cluster/discovery/exporter_pods.json");
  ASSERT_TRUE(in);
  std::ostringstream s;
  s << in.rdbuf();
  const auto m = exporters_from_pod_list(s.str(), 9410);
  EXPECT_EQ(
      m, (std::map<std::string, std::string>{{"gpu-node-01", "http://10.0.0.11:9410/metrics"},
                                             {"gpu-node-04", "http://[fd00::14]:9410/metrics"}}));
}

TEST(ExporterDiscovery, RefusesWhatIsNotAPodList) {
  EXPECT_THROW((void)exporters_from_pod_list("{", 9410), invalid_input);
  EXPECT_THROW((void)exporters_from_pod_list(R"({"kind":"NodeList","items":[]})", 9410),
               invalid_input);
  EXPECT_THROW((void)exporters_from_pod_list(R"({"kind":"PodList","items":5})", 9410),
               invalid_input);
  EXPECT_TRUE(exporters_from_pod_list(R"({"kind":"PodList","items":null})", 9410).empty());
  // A number beyond a double's range (json::parse throws out_of_range, not parse_error).
  EXPECT_THROW((void)exporters_from_pod_list(R"({"kind":"PodList","items":[],"x":1e999})", 9410),
               invalid_input);
}

TEST(ExporterDiscovery, UnreachableApiIsAReasonNotAThrow) {
  const auto r = discover_exporters("http://127.0.0.1:1", "kube-system", "app=vramkit-exporter",
                                    9410, std::chrono::milliseconds(200));
  EXPECT_FALSE(r);
}

}  // namespace
}  // namespace vramkit::cluster
