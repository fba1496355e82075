// The bind verb: fit re-checked under a per-node lock, GPU chosen, reservation recorded, Binding
// written.
#include "vramkit/cluster/extender_bind.hpp"

#include <cctype>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "kube_json.hpp"
#include "vramkit/core/error.hpp"

namespace vramkit::cluster {
namespace {

using json = nlohmann::json;

// A string member of ExtenderBindingArgs, matched case-insensitively as Go does; "" when absent.
std::string string_field(const json& object, std::string_view name) {
  const json* v = kube_json::find_field(object, name);
  if (v == nullptr) return {};
  if (!v->is_string())
    throw invalid_input(fmt::format("ExtenderBindingArgs.{} must be a string", name));
  return v->get<std::string>();
}

std::string result_body(const std::string& error) { return json{{"Error", error}}.dump(); }

}  // namespace

bind_service::bind_service(node_lookup lookup, std::shared_ptr<reservation_table> table,
                           extender_config config, binding_writer writer,
                           std::chrono::milliseconds request_ttl)
    : lookup_(std::move(lookup)),
      table_(std::move(table)),
      config_(std::move(config)),
      writer_(std::move(writer)),
      request_ttl_(request_ttl) {}

void bind_service::remember(const std::string& pod_uid, std::uint64_t bytes) {
  if (pod_uid.empty()) return;
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard lock(mutex_);
  // Forget pods whose filter call is long past: they were bound by now, or deleted.
  for (auto it = pending_.begin(); it != pending_.end();) {
    it = now - it->second.seen > request_ttl_ ? pending_.erase(it) : std::next(it);
  }
  auto& p = pending_[pod_uid];
  p.bytes = bytes;
  p.seen = now;
}

node_lookup bind_service::effective_lookup() const {
  return [lookup = lookup_, table = table_](const std::vector<std::string>& names) {
    return table->effective(lookup(names));
  };
}

extender_response bind_service::bind(std::string_view body) {
  bind_decision d;
  try {
    json doc = json::parse(body);
    if (!doc.is_object()) throw invalid_input("request body must be a JSON object");
    d.pod_name = string_field(doc, "PodName");
    d.pod_namespace = string_field(doc, "PodNamespace");
    d.pod_uid = string_field(doc, "PodUID");
    d.node = string_field(doc, "Node");
  } catch (const json::exception& e) {  // parse_error, or out_of_range for 1e999
    return {400, fmt::format("request body is not JSON: {}\n", e.what()), "text/plain"};
  } catch (const invalid_input& e) {
    return {400, std::string(e.what()) + "\n", "text/plain"};
  }
  if (d.pod_uid.empty() || d.node.empty() || d.pod_name.empty()) {
    return {400, "ExtenderBindingArgs needs PodName, PodUID and Node\n", "text/plain"};
  }
  const std::string pod = d.pod_namespace + "/" + d.pod_name;
  {
    std::lock_guard lock(mutex_);
    auto it = pending_.find(d.pod_uid);
    if (it == pending_.end()) {
      return {200, result_body(fmt::format(
                       "vramkit: no filter call seen for pod {} (uid {}); it will be retried", pod,
                       d.pod_uid))};
    }
    // kube-scheduler may time out on a bind that went through and send it again.
    if (it->second.bound_node == d.node) return {200, result_body("")};
    // Bound elsewhere already: a Binding is final, so the reservation there must stay.
    if (!it->second.bound_node.empty()) {
      return {200, result_body(fmt::format("vramkit: pod {} is already bound to {}", pod,
                                           it->second.bound_node))};
    }
    d.bytes = it->second.bytes;
  }

  {
    auto node_lock = table_->lock_node(d.node);
    const node_states states = lookup_({d.node});
    auto it = states.find(d.node);
    if (it == states.end() || !it->second) {
      return {200, result_body(fmt::format(
                       "vramkit: no live GPU figures for node {}: {}", d.node,
                       it == states.end() ? "not looked up" : it->second.error().reason))};
    }
    const node_state& observed = **it->second;
    // The pod's own older reservation (a bind retried on another node) must not count against it.
    table_->release(d.pod_uid);
    const node_state effective = table_->effective(observed);
    const placement p = place_on_node(d.bytes, effective, config_.placement);
    if (!p.fits) {
      return {200, result_body(
                       fmt::format("vramkit: node {} has no room for pod {} any more: {}", d.node,
                                   pod, describe_misfit(d.bytes, effective, config_.placement)))};
    }
    d.gpu_index = p.gpu_index;
    for (const gpu_state& g : effective.gpus) {
      if (g.index == p.gpu_index) d.gpu_uuid = g.uuid;
    }
    table_->add(reservation{d.pod_uid, pod, d.node, d.gpu_index, d.bytes, {}, false}, observed);
  }

  // The API call runs outside the node lock: the reservation already holds the memory.
  const std::string failure = writer_ ? writer_(d) : std::string("no binding writer configured");
  if (!failure.empty()) {
    table_->release(d.pod_uid);
    return {200, result_body(fmt::format("vramkit: binding pod {} to {} failed: {}", pod, d.node,
                                         failure))};
  }
  std::lock_guard lock(mutex_);
  pending_[d.pod_uid].bound_node = d.node;
  return {200, result_body("")};
}

}  // namespace vramkit::cluster
