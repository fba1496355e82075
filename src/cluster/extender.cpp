// kube-scheduler extender verbs over JSON: ExtenderArgs -> ExtenderFilterResult / HostPriorityList.
#include "vramkit/cluster/extender.hpp"

#include <cctype>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "vramkit/cluster/memory_request.hpp"
#include "vramkit/core/error.hpp"

namespace vramkit::cluster {
namespace {

using json = nlohmann::json;

// Go's encoding/json matches field names case-insensitively; kube-scheduler sends "Pod", "Nodes",
// "NodeNames", but a hand-written client may send "pod".
const json* find_field(const json& object, std::string_view name) {
  if (!object.is_object()) return nullptr;
  if (auto it = object.find(std::string(name)); it != object.end()) return &*it;
  for (auto it = object.begin(); it != object.end(); ++it) {
    const std::string& key = it.key();
    if (key.size() != name.size()) continue;
    bool same = true;
    for (std::size_t i = 0; i < key.size() && same; ++i) {
      same = std::tolower(static_cast<unsigned char>(key[i])) ==
             std::tolower(static_cast<unsigned char>(name[i]));
    }
    if (same) return &*it;
  }
  return nullptr;
}

const json* path(const json& j, std::initializer_list<const char*> keys) {
  const json* cur = &j;
  for (const char* k : keys) {
    if (!cur->is_object()) return nullptr;
    auto it = cur->find(k);
    if (it == cur->end()) return nullptr;
    cur = &*it;
  }
  return cur;
}

// The container's amount of `resource`: limits first (extended resources need limits == requests).
std::uint64_t container_request(const json& container, const std::string& resource) {
  for (const char* where : {"limits", "requests"}) {
    const json* q = path(container, {"resources", where});
    if (q == nullptr || !q->is_object()) continue;
    auto it = q->find(resource);
    if (it == q->end()) continue;
    if (it->is_string()) return parse_kube_quantity(it->get<std::string>());
    if (it->is_number_unsigned()) return it->get<std::uint64_t>();
    if (it->is_number_integer() && it->get<std::int64_t>() >= 0) return it->get<std::uint64_t>();
    throw usage_error(fmt::format("{} of {} is not a quantity", where, resource));
  }
  return 0;
}

std::optional<std::uint64_t> request_of(const json& pod, const extender_config& config) {
  std::uint64_t sum = 0;
  bool found = false;
  if (const json* containers = path(pod, {"spec", "containers"}); containers && containers->is_array()) {
    for (const json& c : *containers) {
      const std::uint64_t r = container_request(c, config.resource_name);
      found = found || r > 0;
      sum += r;
    }
  }
  if (const json* inits = path(pod, {"spec", "initContainers"}); inits && inits->is_array()) {
    for (const json& c : *inits) {
      const std::uint64_t r = container_request(c, config.resource_name);
      found = found || r > 0;
      sum = std::max(sum, r);
    }
  }
  if (found) return sum;
  if (const json* ann = path(pod, {"metadata", "annotations"}); ann && ann->is_object()) {
    auto it = ann->find(config.plan_annotation);
    if (it != ann->end()) {
      if (!it->is_string()) throw usage_error(fmt::format("annotation {} is not a string", config.plan_annotation));
      return request_from_plan_json(it->get<std::string>(), fmt::format("annotation {}", config.plan_annotation));
    }
  }
  return std::nullopt;
}

struct parsed_args {
  json pod;
  std::vector<std::string> names;
  bool node_cache_capable = false;
  json node_list;                // the NodeList as sent, when !node_cache_capable
  std::vector<const json*> items; // node objects, parallel to names
};

// Throws usage_error on anything kube-scheduler would never send.
parsed_args parse_args(std::string_view body, json& doc) {
  try {
    doc = json::parse(body);
  } catch (const json::parse_error& e) {
    throw usage_error(fmt::format("request body is not JSON: {}", e.what()));
  }
  if (!doc.is_object()) throw usage_error("request body must be a JSON object (ExtenderArgs)");
  parsed_args args;
  const json* pod = find_field(doc, "Pod");
  if (pod == nullptr || !pod->is_object()) throw usage_error("ExtenderArgs has no Pod object");
  args.pod = *pod;
  const json* names = find_field(doc, "NodeNames");
  const json* nodes = find_field(doc, "Nodes");
  if (names != nullptr && !names->is_null()) {
    if (!names->is_array()) throw usage_error("ExtenderArgs.NodeNames must be an array of strings");
    for (const json& n : *names) {
      if (!n.is_string()) throw usage_error("ExtenderArgs.NodeNames must be an array of strings");
      args.names.push_back(n.get<std::string>());
    }
    args.node_cache_capable = true;
    return args;
  }
  if (nodes != nullptr && !nodes->is_null()) {
    if (!nodes->is_object()) throw usage_error("ExtenderArgs.Nodes must be a NodeList object");
    args.node_list = *nodes;
    const json* items = path(args.node_list, {"items"});
    if (items != nullptr && !items->is_null()) {
      if (!items->is_array()) throw usage_error("ExtenderArgs.Nodes.items must be an array");
      for (const json& item : *items) {
        const json* name = path(item, {"metadata", "name"});
        if (name == nullptr || !name->is_string()) {
          throw usage_error("a node in ExtenderArgs.Nodes.items has no metadata.name");
        }
        args.names.push_back(name->get<std::string>());
        args.items.push_back(&item);
      }
    }
    return args;
  }
  throw usage_error("ExtenderArgs has neither NodeNames nor Nodes");
}

extender_response bad_request(const std::string& message) {
  return extender_response{400, message + "\n", "text/plain; charset=utf-8"};
}

json filter_result(const parsed_args& args, const std::vector<bool>& keep, json failed, json unresolvable,
                   const std::string& error) {
  json out = json::object();
  if (args.node_cache_capable) {
    json names = json::array();
    for (std::size_t i = 0; i < args.names.size(); ++i) {
      if (keep[i]) names.push_back(args.names[i]);
    }
    out["Nodes"] = nullptr;
    out["NodeNames"] = std::move(names);
  } else {
    json list = json::object();
    for (auto it = args.node_list.begin(); it != args.node_list.end(); ++it) {
      if (it.key() != "items") list[it.key()] = it.value();
    }
    if (!list.contains("metadata")) list["metadata"] = json::object();
    json items = json::array();
    for (std::size_t i = 0; i < args.items.size(); ++i) {
      if (keep[i]) items.push_back(*args.items[i]);
    }
    list["items"] = std::move(items);
    out["Nodes"] = std::move(list);
    out["NodeNames"] = nullptr;
  }
  out["FailedNodes"] = std::move(failed);
  out["FailedAndUnresolvableNodes"] = std::move(unresolvable);
  out["Error"] = error;
  return out;
}

}  // namespace

std::optional<std::uint64_t> pod_memory_request(std::string_view pod_json, const extender_config& config) {
  json pod;
  try {
    pod = json::parse(pod_json);
  } catch (const json::parse_error& e) {
    throw usage_error(fmt::format("pod is not JSON: {}", e.what()));
  }
  return request_of(pod, config);
}

extender_response extender_filter(std::string_view body, const node_lookup& lookup,
                                  const extender_config& config) {
  json doc;
  parsed_args args;
  try {
    args = parse_args(body, doc);
  } catch (const usage_error& e) {
    return bad_request(e.what());
  }
  std::vector<bool> keep(args.names.size(), true);
  json failed = json::object();
  json unresolvable = json::object();
  std::optional<std::uint64_t> request;
  try {
    request = request_of(args.pod, config);
  } catch (const usage_error& e) {
    // The pod, not the protocol, is wrong: fail this scheduling attempt with the reason.
    std::fill(keep.begin(), keep.end(), false);
    return {200, filter_result(args, keep, failed, unresolvable, fmt::format("vramkit: {}", e.what())).dump()};
  }
  if (request && !args.names.empty()) {
    const node_states states = lookup(args.names);
    for (std::size_t i = 0; i < args.names.size(); ++i) {
      const std::string& name = args.names[i];
      auto it = states.find(name);
      if (it == states.end() || !it->second) {
        keep[i] = false;
        failed[name] = fmt::format("vramkit: no live GPU figures: {}",
                                   it == states.end() ? "node not looked up" : it->second.error().reason);
        continue;
      }
      const placement p = place_on_node(*request, *it->second, config.placement);
      if (p.fits) continue;
      keep[i] = false;
      const std::string reason = "vramkit: " + describe_misfit(*request, *it->second, config.placement);
      if (p.why == misfit::too_large) unresolvable[name] = reason;
      else failed[name] = reason;
    }
  }
  return {200, filter_result(args, keep, std::move(failed), std::move(unresolvable), "").dump()};
}

extender_response extender_prioritize(std::string_view body, const node_lookup& lookup,
                                      const extender_config& config) {
  json doc;
  parsed_args args;
  std::optional<std::uint64_t> request;
  try {
    args = parse_args(body, doc);
    request = request_of(args.pod, config);
  } catch (const usage_error& e) {
    return bad_request(e.what());
  }
  json out = json::array();
  node_states states;
  if (request && !args.names.empty()) states = lookup(args.names);
  for (const std::string& name : args.names) {
    std::int64_t score = 0;
    if (request) {
      auto it = states.find(name);
      if (it != states.end() && it->second) {
        score = extender_priority(place_on_node(*request, *it->second, config.placement));
      }
    }
    out.push_back(json{{"Host", name}, {"Score", score}});
  }
  return {200, out.dump()};
}

}  // namespace vramkit::cluster
