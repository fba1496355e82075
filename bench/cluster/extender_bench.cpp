// Cost of one extender request over 1,000 nodes x 8 GPUs with cached node states: placement alone,
// and the full filter and prioritize verbs (JSON in, JSON out). Baseline printed beside them: one
// place_on_node call, the per-node unit the verbs repeat.
#include <benchmark/benchmark.h>
#include <nlohmann/json.hpp>

#include "vramkit/cluster/extender.hpp"
#include "vramkit/cluster/placement.hpp"
#include "vramkit/core/units.hpp"

namespace {

using namespace vramkit;
using namespace vramkit::cluster;

std::vector<node_state> make_cluster(int nodes) {
  static constexpr std::uint64_t totals[] = {150754820096ULL, 85520809984ULL, 85899345920ULL,
                                             42949672960ULL};
  static constexpr const char* names[] = {"NVIDIA H200", "NVIDIA H100 80GB HBM3",
                                          "NVIDIA A100-SXM4-80GB", "NVIDIA A100-SXM4-40GB"};
  std::vector<node_state> out;
  std::uint64_t seed = 42;
  for (int n = 0; n < nodes; ++n) {
    node_state node{"node-" + std::to_string(n), {}};
    const int type = n % 4;
    for (int g = 0; g < 8; ++g) {
      seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
      gpu_state s;
      s.index = g;
      s.name = names[type];
      s.total_bytes = totals[type];
      s.used_bytes = (seed >> 33) % s.total_bytes;
      s.free_bytes = s.total_bytes - s.used_bytes;
      node.gpus.push_back(s);
    }
    out.push_back(std::move(node));
  }
  return out;
}

std::string args_body(int nodes) {
  nlohmann::json pod = {
      {"metadata", {{"name", "p"}}},
      {"spec",
       {{"containers",
         {{{"name", "c"}, {"resources", {{"limits", {{"vramkit.io/gpu-memory", "24Gi"}}}}}}}}}}};
  nlohmann::json names = nlohmann::json::array();
  for (int n = 0; n < nodes; ++n) names.push_back("node-" + std::to_string(n));
  return nlohmann::json{{"Pod", pod}, {"NodeNames", names}}.dump();
}

node_lookup cached_lookup(const std::vector<node_state>& cluster) {
  auto by_name = std::make_shared<std::unordered_map<std::string, node_state_ptr>>();
  for (const auto& n : cluster) by_name->emplace(n.name, std::make_shared<const node_state>(n));
  return [by_name](const std::vector<std::string>& names) {
    node_states out;
    out.reserve(names.size());
    for (const auto& n : names) out.emplace(n, by_name->at(n));
    return out;
  };
}

void BM_PlaceOnNode(benchmark::State& state) {
  const auto cluster = make_cluster(1);
  for (auto _ : state) benchmark::DoNotOptimize(place_on_node(24 * GiB, cluster[0], {}));
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_PlaceOnNode);

void BM_PlaceOverCluster(benchmark::State& state) {
  const auto cluster = make_cluster(static_cast<int>(state.range(0)));
  for (auto _ : state) {
    double best = -1;
    for (const auto& n : cluster) best = std::max(best, place_on_node(24 * GiB, n, {}).score);
    benchmark::DoNotOptimize(best);
  }
  state.SetLabel("nodes x 8 GPUs, placement only");
}
BENCHMARK(BM_PlaceOverCluster)->Arg(1000)->Unit(benchmark::kMicrosecond);

void BM_ExtenderFilter(benchmark::State& state) {
  const int nodes = static_cast<int>(state.range(0));
  const auto lookup = cached_lookup(make_cluster(nodes));
  const std::string body = args_body(nodes);
  const extender_config config;
  for (auto _ : state) benchmark::DoNotOptimize(extender_filter(body, lookup, config));
  state.SetLabel("JSON in/out, cached node states");
}
BENCHMARK(BM_ExtenderFilter)->Arg(1000)->Unit(benchmark::kMicrosecond);

void BM_ExtenderPrioritize(benchmark::State& state) {
  const int nodes = static_cast<int>(state.range(0));
  const auto lookup = cached_lookup(make_cluster(nodes));
  const std::string body = args_body(nodes);
  const extender_config config;
  for (auto _ : state) benchmark::DoNotOptimize(extender_prioritize(body, lookup, config));
  state.SetLabel("JSON in/out, cached node states");
}
BENCHMARK(BM_ExtenderPrioritize)->Arg(1000)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
