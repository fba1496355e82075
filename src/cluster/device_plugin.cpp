// The device plugin's decisions: see device_plugin.hpp.
#include "vramkit/cluster/device_plugin.hpp"

#include <algorithm>
#include <cmath>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "kube_json.hpp"
#include "vramkit/cluster/extender_bind.hpp"
#include "vramkit/cluster/memory_request.hpp"
#include "vramkit/core/error.hpp"

namespace vramkit::cluster {
namespace {

using json = nlohmann::json;

// The GPU part of an advertised ID ("<uuid>-<k>" -> "<uuid>"); the ID itself when it has no "-k".
std::string gpu_of(const std::string& id) {
  const auto dash = id.rfind('-');
  if (dash == std::string::npos || dash + 1 == id.size()) return id;
  const bool digits = std::all_of(id.begin() + static_cast<std::ptrdiff_t>(dash) + 1, id.end(),
                                  [](char c) { return c >= '0' && c <= '9'; });
  return digits ? id.substr(0, dash) : id;
}

using kube_json::string_at;

// The container's count of `resource` in limits (device-plugin resources need limits == requests).
std::uint64_t container_units(const json& container, const std::string& resource) {
  for (const char* where : {"limits", "requests"}) {
    const json* q = kube_json::at_path(container, {"resources", where});
    if (q == nullptr || !q->is_object()) continue;
    auto it = q->find(resource);
    if (it == q->end()) continue;
    if (const auto units = kube_json::quantity(*it)) return *units;
  }
  return 0;
}

}  // namespace

std::vector<std::string> advertised_device_ids(const std::vector<gpu_state>& gpus,
                                               std::uint64_t unit_bytes) {
  if (unit_bytes == 0) throw invalid_input("the device plugin's unit must be above zero bytes");
  std::vector<std::string> ids;
  for (const gpu_state& g : gpus) {
    if (g.uuid.empty())
      throw invalid_input(fmt::format("GPU {} has no UUID: device IDs need one", g.index));
    const std::uint64_t n = g.total_bytes / unit_bytes;
    for (std::uint64_t k = 0; k < n; ++k) ids.push_back(fmt::format("{}-{}", g.uuid, k));
  }
  return ids;
}

std::vector<std::string> preferred_device_ids(const std::vector<std::string>& available,
                                              const std::vector<std::string>& must_include,
                                              int size) {
  std::vector<std::string> out;
  std::set<std::string> taken;
  for (const std::string& id : must_include) {
    if (static_cast<int>(out.size()) >= size) break;
    if (taken.insert(id).second) out.push_back(id);
  }
  // Count what is left per GPU; fill from the GPU with the most, then the next.
  std::map<std::string, std::size_t> per_gpu;
  std::vector<std::string> gpu_order;
  for (const std::string& id : available) {
    if (taken.count(id) != 0) continue;
    const std::string g = gpu_of(id);
    if (per_gpu[g]++ == 0) gpu_order.push_back(g);
  }
  std::stable_sort(
      gpu_order.begin(), gpu_order.end(),
      [&](const std::string& a, const std::string& b) { return per_gpu[a] > per_gpu[b]; });
  for (const std::string& g : gpu_order) {
    for (const std::string& id : available) {
      if (static_cast<int>(out.size()) >= size) return out;
      if (gpu_of(id) == g && taken.insert(id).second) out.push_back(id);
    }
  }
  return out;
}

std::optional<allocation> find_allocation(std::string_view pod_list_json, std::uint64_t units,
                                          const std::set<std::string>& allocated,
                                          const device_plugin_options& options) {
  json doc;
  try {
    doc = json::parse(pod_list_json);
  } catch (const json::exception& e) {
    throw invalid_input(fmt::format("pod list is not JSON: {}", e.what()));
  }
  const json* items = kube_json::at_path(doc, {"items"});
  if (items == nullptr || !items->is_array())
    throw invalid_input("pod list has no 'items' array (not a v1 PodList)");
  struct candidate {
    allocation a;
    std::uint64_t assume_ns = 0;
  };
  std::vector<candidate> found;
  for (const json& pod : *items) {
    if (!options.node_name.empty() && string_at(pod, {"spec", "nodeName"}) != options.node_name)
      continue;
    const std::string phase = string_at(pod, {"status", "phase"});
    if (phase == "Succeeded" || phase == "Failed") continue;
    if (kube_json::at_path(pod, {"metadata", "deletionTimestamp"}) != nullptr) continue;
    const json* ann = kube_json::at_path(pod, {"metadata", "annotations"});
    if (ann == nullptr || !ann->is_object()) continue;
    auto uuid = ann->find(std::string(annotation_gpu_uuid));
    if (uuid == ann->end() || !uuid->is_string()) continue;
    candidate c;
    c.a.pod_namespace = string_at(pod, {"metadata", "namespace"});
    c.a.pod_name = string_at(pod, {"metadata", "name"});
    c.a.pod_uid = string_at(pod, {"metadata", "uid"});
    c.a.gpu_uuid = uuid->get<std::string>();
    if (auto idx = ann->find(std::string(annotation_gpu_index));
        idx != ann->end() && idx->is_string()) {
      try {
        c.a.gpu_index = std::stoi(idx->get<std::string>());
      } catch (const std::exception&) {
        c.a.gpu_index = -1;
      }
    }
    if (auto t = ann->find(std::string(annotation_assume_time));
        t != ann->end() && t->is_string()) {
      try {
        c.assume_ns = std::stoull(t->get<std::string>());
      } catch (const std::exception&) {
        c.assume_ns = 0;
      }
    }
    std::set<std::string> done;  // containers the plugin already allocated (its annotation)
    if (auto d = ann->find(std::string(annotation_allocated_containers));
        d != ann->end() && d->is_string()) {
      const std::string list = d->get<std::string>();
      std::size_t start = 0;
      while (start <= list.size()) {
        const std::size_t comma = std::min(list.find(',', start), list.size());
        if (comma > start) done.insert(list.substr(start, comma - start));
        start = comma + 1;
      }
    }
    const json* containers = kube_json::at_path(pod, {"spec", "containers"});
    if (containers == nullptr || !containers->is_array()) continue;
    // The planner's estimate (the plan annotation) is the plan of the pod's one GPU container;
    // with several, each container's plan is its own request.
    std::optional<std::uint64_t> pod_plan;
    if (auto pa = ann->find(options.plan_annotation); pa != ann->end() && pa->is_string()) {
      try {
        pod_plan = request_from_plan_json(pa->get<std::string>(), options.plan_annotation);
      } catch (const std::exception&) {
        pod_plan.reset();  // the extender refused such a pod already; no plan to pass on
      }
    }
    int gpu_containers = 0;
    for (const json& ct : *containers) {
      try {
        gpu_containers += container_units(ct, options.resource_name) > 0 ? 1 : 0;
      } catch (const std::exception&) {
        continue;
      }
    }
    for (const json& ct : *containers) {
      const std::string name = string_at(ct, {"name"});
      std::uint64_t n = 0;
      try {
        n = container_units(ct, options.resource_name);
      } catch (const std::exception&) {
        continue;  // a quantity the API server would not have accepted
      }
      if (n != units || done.count(name) != 0 || allocated.count(c.a.pod_uid + "/" + name) != 0)
        continue;
      candidate one = c;
      one.a.allocated_before.assign(done.begin(), done.end());
      one.a.container = name;
      one.a.cap_bytes = units * options.unit_bytes;
      one.a.planned_bytes =
          pod_plan && gpu_containers == 1 ? std::min(*pod_plan, one.a.cap_bytes) : one.a.cap_bytes;
      found.push_back(std::move(one));
      break;  // one container per pod per call: the kubelet allocates containers one by one
    }
  }
  if (found.empty()) return std::nullopt;
  const auto best = std::min_element(found.begin(), found.end(), [](const auto& x, const auto& y) {
    return x.assume_ns != y.assume_ns ? x.assume_ns < y.assume_ns : x.a.pod_uid < y.a.pod_uid;
  });
  return best->a;
}

std::map<std::string, std::string> allocation_environment(const allocation& a,
                                                          std::uint64_t gpu_total_bytes,
                                                          const device_plugin_options& options) {
  std::map<std::string, std::string> env;
  env["CUDA_VISIBLE_DEVICES"] = a.gpu_uuid;
  env["NVIDIA_VISIBLE_DEVICES"] = a.gpu_uuid;
  env["VRAMKIT_POOL_MAXIMUM"] = std::to_string(a.cap_bytes);
  if (a.planned_bytes > 0) env["VRAMKIT_PLANNED_BYTES"] = std::to_string(a.planned_bytes);
  if (gpu_total_bytes > 0) {
    // Rounded down to 4 digits, so that the fraction never grants more than the cap.
    const double fraction = std::floor(std::min(1.0, static_cast<double>(a.cap_bytes) /
                                                         static_cast<double>(gpu_total_bytes)) *
                                       1e4) /
                            1e4;
    env["PYTORCH_CUDA_ALLOC_CONF"] = fmt::format("per_process_memory_fraction:{:.4f}", fraction);
  }
  if (options.mps_limit)
    env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = fmt::format("0={}M", a.cap_bytes >> 20);
  return env;
}

}  // namespace vramkit::cluster
