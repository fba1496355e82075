// kube-scheduler extender verbs over JSON: ExtenderArgs -> ExtenderFilterResult / HostPriorityList.
#include "vramkit/cluster/extender.hpp"

#include <algorithm>
#include <cctype>
#include <limits>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "kube_json.hpp"
#include "vramkit/cluster/memory_request.hpp"
#include "vramkit/core/error.hpp"

namespace vramkit::cluster {
namespace {

using json = nlohmann::json;

using kube_json::at_path;
using kube_json::find_field;

// The container's amount of `resource`: limits first (extended resources need limits == requests).
std::uint64_t container_request(const json& container, const std::string& resource) {
  for (const char* where : {"limits", "requests"}) {
    const json* q = at_path(container, {"resources", where});
    if (q == nullptr || !q->is_object()) continue;
    auto it = q->find(resource);
    if (it == q->end()) continue;
    if (const auto units = kube_json::quantity(*it)) return *units;
    throw invalid_input(fmt::format("{} of {} is not a quantity", where, resource));
  }
  return 0;
}

std::optional<std::uint64_t> request_of(const json& pod, const extender_config& config) {
  std::uint64_t sum = 0;
  bool found = false;
  if (const json* containers = at_path(pod, {"spec", "containers"});
      containers && containers->is_array()) {
    for (const json& c : *containers) {
      const std::uint64_t r = container_request(c, config.resource_name);
      found = found || r > 0;
      sum += r;
    }
  }
  if (const json* inits = at_path(pod, {"spec", "initContainers"}); inits && inits->is_array()) {
    for (const json& c : *inits) {
      const std::uint64_t r = container_request(c, config.resource_name);
      found = found || r > 0;
      sum = std::max(sum, r);
    }
  }
  if (found) {
    const std::uint64_t unit = std::max<std::uint64_t>(config.resource_unit_bytes, 1);
    if (sum > std::numeric_limits<std::uint64_t>::max() / unit)
      throw invalid_input(
          fmt::format("{} of {} units of {} bytes overflows", config.resource_name, sum, unit));
    return sum * unit;
  }
  if (const json* ann = at_path(pod, {"metadata", "annotations"}); ann && ann->is_object()) {
    auto it = ann->find(config.plan_annotation);
    if (it != ann->end()) {
      if (!it->is_string())
        throw invalid_input(fmt::format("annotation {} is not a string", config.plan_annotation));
      return request_from_plan_json(it->get<std::string>(),
                                    fmt::format("annotation {}", config.plan_annotation));
    }
  }
  return std::nullopt;
}

struct parsed_args {
  const json* pod = nullptr;  // into the parsed document
  std::vector<std::string> names;
  bool node_cache_capable = false;
  const json* node_list = nullptr;  // the NodeList as sent, when !node_cache_capable
  std::vector<const json*> items;   // node objects, parallel to names
};

// Throws invalid_input on anything kube-scheduler would never send. Pointers refer into `doc`.
parsed_args parse_args(std::string_view body, json& doc) {
  try {
    doc = json::parse(body);
  } catch (const json::exception& e) {
    throw invalid_input(fmt::format("request body is not JSON: {}", e.what()));
  }
  if (!doc.is_object()) throw invalid_input("request body must be a JSON object (ExtenderArgs)");
  parsed_args args;
  const json* pod = find_field(doc, "Pod");
  if (pod == nullptr || !pod->is_object()) throw invalid_input("ExtenderArgs has no Pod object");
  args.pod = pod;
  const json* names = find_field(doc, "NodeNames");
  const json* nodes = find_field(doc, "Nodes");
  if (names != nullptr && !names->is_null()) {
    if (!names->is_array())
      throw invalid_input("ExtenderArgs.NodeNames must be an array of strings");
    args.names.reserve(names->size());
    for (const json& n : *names) {
      if (!n.is_string()) throw invalid_input("ExtenderArgs.NodeNames must be an array of strings");
      args.names.push_back(n.get<std::string>());
    }
    args.node_cache_capable = true;
    return args;
  }
  if (nodes != nullptr && !nodes->is_null()) {
    if (!nodes->is_object()) throw invalid_input("ExtenderArgs.Nodes must be a NodeList object");
    args.node_list = nodes;
    const json* items = at_path(*nodes, {"items"});
    if (items != nullptr && !items->is_null()) {
      if (!items->is_array()) throw invalid_input("ExtenderArgs.Nodes.items must be an array");
      for (const json& item : *items) {
        const json* name = at_path(item, {"metadata", "name"});
        if (name == nullptr || !name->is_string()) {
          throw invalid_input("a node in ExtenderArgs.Nodes.items has no metadata.name");
        }
        args.names.push_back(name->get<std::string>());
        args.items.push_back(&item);
      }
    }
    return args;
  }
  throw invalid_input("ExtenderArgs has neither NodeNames nor Nodes");
}

// One line of printable ASCII: parse errors may quote the offending bytes, which need not be text.
extender_response bad_request(const std::string& message) {
  std::string line;
  for (const char c : message) {
    const auto u = static_cast<unsigned char>(c);
    line.push_back(u >= 0x20 && u < 0x7f ? c : '?');
  }
  return extender_response{400, line + "\n", "text/plain; charset=utf-8"};
}

// Responses are written by hand: with 1,000 nodes a DOM of small objects costs more than the
// placement itself.
void append_string(std::string& out, std::string_view text) {
  out.push_back('"');
  for (const char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += fmt::format("\\u{:04x}", static_cast<unsigned>(static_cast<unsigned char>(c)));
        } else {
          out.push_back(c);  // UTF-8 passes through unchanged
        }
    }
  }
  out.push_back('"');
}

void append_map(std::string& out, const std::map<std::string, std::string>& m) {
  out.push_back('{');
  bool first = true;
  for (const auto& [k, v] : m) {
    if (!first) out.push_back(',');
    first = false;
    append_string(out, k);
    out.push_back(':');
    append_string(out, v);
  }
  out.push_back('}');
}

std::string filter_result(const parsed_args& args, const std::vector<bool>& keep,
                          const std::map<std::string, std::string>& failed,
                          const std::map<std::string, std::string>& unresolvable,
                          const std::string& error) {
  std::string out;
  out.reserve(64 + 24 * args.names.size());
  if (args.node_cache_capable) {
    out += "{\"Nodes\":null,\"NodeNames\":[";
    bool first = true;
    for (std::size_t i = 0; i < args.names.size(); ++i) {
      if (!keep[i]) continue;
      if (!first) out.push_back(',');
      first = false;
      append_string(out, args.names[i]);
    }
    out += "]";
  } else {
    json list = json::object();
    for (auto it = args.node_list->begin(); it != args.node_list->end(); ++it) {
      if (it.key() != "items") list[it.key()] = it.value();
    }
    if (!list.contains("metadata")) list["metadata"] = json::object();
    json items = json::array();
    for (std::size_t i = 0; i < args.items.size(); ++i) {
      if (keep[i]) items.push_back(*args.items[i]);
    }
    list["items"] = std::move(items);
    out += "{\"Nodes\":";
    out += list.dump();
    out += ",\"NodeNames\":null";
  }
  out += ",\"FailedNodes\":";
  append_map(out, failed);
  out += ",\"FailedAndUnresolvableNodes\":";
  append_map(out, unresolvable);
  out += ",\"Error\":";
  append_string(out, error);
  out += "}";
  return out;
}

}  // namespace

std::optional<std::uint64_t> pod_memory_request(std::string_view pod_json,
                                                const extender_config& config) {
  json pod;
  try {
    pod = json::parse(pod_json);
  } catch (const json::exception& e) {
    throw invalid_input(fmt::format("pod is not JSON: {}", e.what()));
  }
  return request_of(pod, config);
}

extender_response extender_filter(std::string_view body, const node_lookup& lookup,
                                  const extender_config& config) {
  json doc;
  parsed_args args;
  try {
    args = parse_args(body, doc);
  } catch (const invalid_input& e) {
    return bad_request(e.what());
  }
  std::vector<bool> keep(args.names.size(), true);
  std::map<std::string, std::string> failed;
  std::map<std::string, std::string> unresolvable;
  std::optional<std::uint64_t> request;
  try {
    request = request_of(*args.pod, config);
  } catch (const invalid_input& e) {
    // The pod, not the protocol, is wrong: fail this scheduling attempt with the reason.
    std::fill(keep.begin(), keep.end(), false);
    return {200,
            filter_result(args, keep, failed, unresolvable, fmt::format("vramkit: {}", e.what()))};
  }
  if (request && config.on_request) {
    if (const json* uid = at_path(*args.pod, {"metadata", "uid"}); uid && uid->is_string()) {
      config.on_request(uid->get<std::string>(), *request);
    }
  }
  if (request && !args.names.empty()) {
    const node_states states = lookup(args.names);
    for (std::size_t i = 0; i < args.names.size(); ++i) {
      const std::string& name = args.names[i];
      auto it = states.find(name);
      if (it == states.end() || !it->second) {
        keep[i] = false;
        failed[name] =
            fmt::format("vramkit: no live GPU figures: {}",
                        it == states.end() ? "node not looked up" : it->second.error().reason);
        continue;
      }
      const node_state& node = **it->second;
      const placement p = place_on_node(*request, node, config.placement);
      if (p.fits) continue;
      keep[i] = false;
      std::string reason = "vramkit: " + describe_misfit(*request, node, config.placement);
      if (p.why == misfit::too_large)
        unresolvable[name] = std::move(reason);
      else
        failed[name] = std::move(reason);
    }
  }
  return {200, filter_result(args, keep, failed, unresolvable, "")};
}

extender_response extender_prioritize(std::string_view body, const node_lookup& lookup,
                                      const extender_config& config) {
  json doc;
  parsed_args args;
  std::optional<std::uint64_t> request;
  try {
    args = parse_args(body, doc);
    request = request_of(*args.pod, config);
  } catch (const invalid_input& e) {
    return bad_request(e.what());
  }
  node_states states;
  if (request && !args.names.empty()) states = lookup(args.names);
  std::string out;
  out.reserve(2 + 32 * args.names.size());
  out.push_back('[');
  for (std::size_t i = 0; i < args.names.size(); ++i) {
    const std::string& name = args.names[i];
    std::int64_t score = 0;
    if (request) {
      auto it = states.find(name);
      if (it != states.end() && it->second) {
        score = extender_priority(place_on_node(*request, **it->second, config.placement));
      }
    }
    if (i > 0) out.push_back(',');
    out += "{\"Host\":";
    append_string(out, name);
    out += ",\"Score\":";
    out += std::to_string(score);
    out.push_back('}');
  }
  out.push_back(']');
  return {200, std::move(out)};
}

}  // namespace vramkit::cluster
