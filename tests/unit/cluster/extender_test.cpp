// Extender verbs against golden fixtures written from k8s.io/kube-scheduler/extender/v1, plus
// malformed input (400, never a crash) and the request sources (extended resource, plan
// annotation).
#include "vramkit/cluster/extender.hpp"

#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "vramkit/core/error.hpp"
#include "vramkit/core/units.hpp"

namespace vramkit::cluster {
namespace {

using json = nlohmann::json;

std::string fixture(const std::string& name) {
  const std::string path = std::string(VRAMKIT_SOURCE_DIR) + "/tests/data/cluster/extender/" + name;
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Node states from nodes.json; a node not there answers as an unreachable exporter would.
node_lookup fixture_lookup(int* calls = nullptr) {
  const json nodes = json::parse(fixture("nodes.json"));
  return [nodes, calls](const std::vector<std::string>& names) {
    if (calls != nullptr) ++*calls;
    node_states out;
    for (const std::string& n : names) {
      if (nodes.contains(n)) {
        out.emplace(n, std::make_shared<const node_state>(
                           node_state{n, gpus_from_fixture_json(nodes[n].dump(), n)}));
      } else {
        out.emplace(n, unavailable{unavailable_kind::failed, n + ": connection refused"});
      }
    }
    return out;
  };
}

extender_config config(placement_policy policy = placement_policy::pack) {
  extender_config c;
  c.placement.policy = policy;
  return c;
}

TEST(Extender, FilterWithNodeNamesMatchesGolden) {
  const extender_response r =
      extender_filter(fixture("filter_node_names_request.json"), fixture_lookup(), config());
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body), json::parse(fixture("filter_node_names_response.json"))) << r.body;
}

TEST(Extender, FilterWithNodeListMatchesGolden) {
  const extender_response r =
      extender_filter(fixture("filter_node_list_request.json"), fixture_lookup(), config());
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body), json::parse(fixture("filter_node_list_response.json"))) << r.body;
}

TEST(Extender, PrioritizeMatchesGoldenForPackAndSpread) {
  const std::string body = fixture("prioritize_request.json");
  const extender_response pack =
      extender_prioritize(body, fixture_lookup(), config(placement_policy::pack));
  ASSERT_EQ(pack.status, 200) << pack.body;
  EXPECT_EQ(json::parse(pack.body), json::parse(fixture("prioritize_pack_response.json")))
      << pack.body;
  const extender_response spread =
      extender_prioritize(body, fixture_lookup(), config(placement_policy::spread));
  ASSERT_EQ(spread.status, 200) << spread.body;
  EXPECT_EQ(json::parse(spread.body), json::parse(fixture("prioritize_spread_response.json")))
      << spread.body;
}

TEST(Extender, ResponsesUseTheGoFieldNames) {
  const extender_response r =
      extender_filter(fixture("filter_node_names_request.json"), fixture_lookup(), config());
  const json j = json::parse(r.body);
  for (const char* key :
       {"Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_EQ(j.size(), 5u);
  // The upstream wire example decodes into exactly these fields.
  const json upstream = json::parse(fixture("upstream_filter_result.json"));
  for (auto it = upstream.begin(); it != upstream.end(); ++it)
    EXPECT_TRUE(j.contains(it.key())) << it.key();
  const json list = json::parse(
      extender_prioritize(fixture("prioritize_request.json"), fixture_lookup(), config()).body);
  const json upstream_list = json::parse(fixture("upstream_host_priority_list.json"));
  ASSERT_TRUE(list.is_array());
  for (const json& e : list) {
    EXPECT_EQ(e.size(), upstream_list[0].size());
    EXPECT_TRUE(e["Host"].is_string());
    EXPECT_TRUE(e["Score"].is_number_integer());
    EXPECT_GE(e["Score"].get<int>(), 0);
    EXPECT_LE(e["Score"].get<int>(), 10);
  }
}

TEST(Extender, AcceptsLowerCaseFieldNamesAsGoDecodingDoes) {
  json args = json::parse(fixture("filter_node_names_request.json"));
  json lower = {{"pod", args["Pod"]}, {"nodenames", args["NodeNames"]}};
  const extender_response r = extender_filter(lower.dump(), fixture_lookup(), config());
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body)["NodeNames"],
            json::parse(fixture("filter_node_names_response.json"))["NodeNames"]);
}

TEST(Extender, MalformedRequestsGet400WithAMessage) {
  const json pod = json::parse(fixture("filter_node_names_request.json"))["Pod"];
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "not JSON"},
      {"{", "not JSON"},
      {"[]", "JSON object"},
      {"null", "JSON object"},
      {R"({"NodeNames": ["a"]})", "no Pod"},
      {R"({"Pod": "x", "NodeNames": ["a"]})", "no Pod"},
      {json{{"Pod", pod}}.dump(), "neither NodeNames nor Nodes"},
      {json{{"Pod", pod}, {"NodeNames", "a"}}.dump(), "NodeNames must be an array"},
      {json{{"Pod", pod}, {"NodeNames", {1, 2}}}.dump(), "NodeNames must be an array"},
      {json{{"Pod", pod}, {"Nodes", 5}}.dump(), "NodeList"},
      {json{{"Pod", pod}, {"Nodes", {{"items", 3}}}}.dump(), "items must be an array"},
      {json{{"Pod", pod}, {"Nodes", {{"items", {{{"metadata", json::object()}}}}}}}.dump(),
       "no metadata.name"},
  };
  int calls = 0;
  const node_lookup lookup = fixture_lookup(&calls);
  for (const auto& [body, message] : cases) {
    for (auto* verb : {&extender_filter, &extender_prioritize}) {
      const extender_response r = (*verb)(body, lookup, config());
      EXPECT_EQ(r.status, 400) << body;
      EXPECT_NE(r.body.find(message), std::string::npos) << body << " -> " << r.body;
      EXPECT_EQ(r.content_type.rfind("text/plain", 0), 0u);
    }
  }
  EXPECT_EQ(calls, 0) << "a malformed request must not scrape nodes";
}

TEST(Extender, PodWithoutARequestPassesEveryNodeAndScoresZero) {
  json args = json::parse(fixture("filter_node_names_request.json"));
  args["Pod"]["spec"]["containers"][0]["resources"] = json::object();
  int calls = 0;
  const extender_response f = extender_filter(args.dump(), fixture_lookup(&calls), config());
  ASSERT_EQ(f.status, 200);
  EXPECT_EQ(json::parse(f.body)["NodeNames"], args["NodeNames"]);
  const extender_response p = extender_prioritize(args.dump(), fixture_lookup(&calls), config());
  for (const json& e : json::parse(p.body)) EXPECT_EQ(e["Score"], 0);
  EXPECT_EQ(calls, 0);
}

TEST(Extender, BadQuantityOrPlanFailsTheAttemptWithTheReason) {
  json args = json::parse(fixture("filter_node_names_request.json"));
  args["Pod"]["spec"]["containers"][0]["resources"]["limits"]["vramkit.io/gpu-memory"] = "lots";
  const extender_response f = extender_filter(args.dump(), fixture_lookup(), config());
  ASSERT_EQ(f.status, 200);
  const json j = json::parse(f.body);
  EXPECT_TRUE(j["NodeNames"].empty());
  EXPECT_NE(j["Error"].get<std::string>().find("invalid quantity 'lots'"), std::string::npos);
  EXPECT_EQ(extender_prioritize(args.dump(), fixture_lookup(), config()).status, 400);
}

TEST(Extender, PodRequestSumsContainersAndTakesTheLargestInitContainer) {
  const extender_config c = config();
  json pod = {
      {"spec",
       {{"containers",
         {{{"name", "a"}, {"resources", {{"limits", {{"vramkit.io/gpu-memory", "10Gi"}}}}}},
          {{"name", "b"}, {"resources", {{"requests", {{"vramkit.io/gpu-memory", "6Gi"}}}}}},
          {{"name", "c"}}}},
        {"initContainers",
         {{{"name", "i"}, {"resources", {{"limits", {{"vramkit.io/gpu-memory", "4Gi"}}}}}}}}}}};
  EXPECT_EQ(pod_memory_request(pod.dump(), c), 16 * GiB);
  pod["spec"]["initContainers"][0]["resources"]["limits"]["vramkit.io/gpu-memory"] = "20Gi";
  EXPECT_EQ(pod_memory_request(pod.dump(), c), 20 * GiB);
}

TEST(Extender, PodRequestFromAPlanAnnotation) {
  const extender_config c = config();
  json pod = {
      {"metadata", {{"annotations", {{"vramkit.io/plan", R"({"device_peak_bytes": 12345})"}}}}},
      {"spec", {{"containers", {{{"name", "a"}}}}}}};
  EXPECT_EQ(pod_memory_request(pod.dump(), c), 12345u);
  // The extended resource wins over the annotation.
  pod["spec"]["containers"][0]["resources"]["limits"]["vramkit.io/gpu-memory"] = "1Ki";
  EXPECT_EQ(pod_memory_request(pod.dump(), c), 1024u);
  json bad = {{"metadata", {{"annotations", {{"vramkit.io/plan", "{}"}}}}}};
  EXPECT_THROW((void)pod_memory_request(bad.dump(), c), invalid_input);
  EXPECT_EQ(pod_memory_request(R"({"spec": {}})", c), std::nullopt);
}

TEST(Extender, HeadroomTurnsAFitIntoAMisfit) {
  extender_config c = config();
  c.placement.safety = headroom{20 * GiB, 0.0};  // node-a GPU 1: 40 free - 20 kept < 24
  const extender_response r =
      extender_filter(fixture("filter_node_names_request.json"), fixture_lookup(), c);
  EXPECT_EQ(json::parse(r.body)["NodeNames"], json({"node-b"}));
}

TEST(Extender, EmptyNodeListIsAnsweredWithoutLookup) {
  json args = json::parse(fixture("filter_node_names_request.json"));
  args["NodeNames"] = json::array();
  int calls = 0;
  const extender_response r = extender_filter(args.dump(), fixture_lookup(&calls), config());
  ASSERT_EQ(r.status, 200);
  EXPECT_TRUE(json::parse(r.body)["NodeNames"].empty());
  EXPECT_EQ(calls, 0);
}

}  // namespace
}  // namespace vramkit::cluster
