// Fuzzes the kube-scheduler extender verbs (filter, prioritize, bind) and the pod request reader
// with request bodies, against fixed node states; bind has seen pod "uid-1" in a filter call. Each
// verb answers 200 with JSON or 400 with a line, never throws.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>

#include "fuzz_input.hpp"
#include "vramkit/cluster/extender.hpp"
#include "vramkit/cluster/extender_bind.hpp"

namespace {

using namespace vramkit::cluster;

gpu_state gpu(int index, std::uint64_t total_gib, std::uint64_t used_gib) {
  gpu_state g;
  g.index = index;
  g.name = "NVIDIA H200";
  g.total_bytes = total_gib << 30;
  g.used_bytes = used_gib << 30;
  g.free_bytes = derived_free_bytes(g.total_bytes, g.used_bytes);
  return g;
}

// node-a: two GPUs, one nearly full; node-b: one empty GPU; node-c: a GPU that is down; any
// other name: an exporter that does not answer.
node_states lookup(const std::vector<std::string>& names) {
  node_states out;
  for (const std::string& n : names) {
    node_state s{n, {}};
    if (n == "node-a") {
      s.gpus = {gpu(0, 80, 70), gpu(1, 80, 40)};
    } else if (n == "node-b") {
      s.gpus = {gpu(0, 141, 0)};
    } else if (n == "node-c") {
      s.gpus = {gpu(0, 141, 0)};
      s.gpus[0].up = false;
    } else {
      out.emplace(n, vramkit::unavailable{vramkit::unavailable_kind::failed, n + ": refused"});
      continue;
    }
    out.emplace(n, std::make_shared<const node_state>(std::move(s)));
  }
  return out;
}

void check(const extender_response& r) {
  if (r.status == 200) {
    if (!nlohmann::json::accept(r.body)) {
      vramkit::fuzz::property_failed("a 200 answer whose body is not JSON");
    }
  } else if (r.status != 400) {
    vramkit::fuzz::property_failed("an answer that is neither 200 nor 400");
  }
}

}  // namespace

// The entry point libFuzzer calls (its name is libFuzzer's).
// NOLINTNEXTLINE(readability-identifier-naming)
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string body = vramkit::fuzz::as_text(data, size);
  extender_config config;
  config.placement.policy = size % 2 == 0 ? placement_policy::pack : placement_policy::spread;
  check(extender_filter(body, lookup, config));
  check(extender_prioritize(body, lookup, config));
  vramkit::fuzz::expect_clean([&] { (void)pod_memory_request(body, config); });
  bind_service binder(lookup, std::make_shared<reservation_table>(), config,
                      [](const bind_decision&) { return std::string(); });
  binder.remember("uid-1", std::uint64_t{8} << 30);
  check(binder.bind(body));
  return 0;
}
