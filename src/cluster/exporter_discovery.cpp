// Exporter URLs from the exporter DaemonSet's pods.
#include "vramkit/cluster/exporter_discovery.hpp"

#include <cctype>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "vramkit/cluster/exporter_scraper.hpp"
#include "vramkit/core/error.hpp"

namespace vramkit::cluster {
namespace {

using json = nlohmann::json;

bool ready(const json& pod) {
  if (pod.value("/status/phase"_json_pointer, std::string()) != "Running") return false;
  const json* conditions = nullptr;
  if (auto s = pod.find("status"); s != pod.end() && s->is_object()) {
    if (auto c = s->find("conditions"); c != s->end() && c->is_array()) conditions = &*c;
  }
  if (conditions == nullptr) return false;
  for (const json& c : *conditions) {
    if (c.is_object() && c.value("type", "") == "Ready") return c.value("status", "") == "True";
  }
  return false;
}

// Percent-encodes a label selector for a query string.
std::string query_escape(std::string_view text) {
  std::string out;
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (std::isalnum(u) != 0 || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(c);
    } else {
      out += fmt::format("%{:02X}", static_cast<unsigned>(u));
    }
  }
  return out;
}

}  // namespace

std::map<std::string, std::string> exporters_from_pod_list(std::string_view json_text, int port) {
  json doc;
  try {
    doc = json::parse(json_text);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for 1e999
    throw invalid_input(fmt::format("pod list is not JSON: {}", e.what()));
  }
  if (!doc.is_object() || doc.value("kind", "") != "PodList" || !doc.contains("items") ||
      !(doc["items"].is_array() || doc["items"].is_null())) {
    throw invalid_input("pod list: expected a v1 PodList with items");
  }
  std::map<std::string, std::string> out;
  if (doc["items"].is_null()) return out;
  for (const json& pod : doc["items"]) {
    if (!pod.is_object() || !ready(pod)) continue;
    const std::string node = pod.value("/spec/nodeName"_json_pointer, std::string());
    const std::string ip = pod.value("/status/podIP"_json_pointer, std::string());
    if (node.empty() || ip.empty()) continue;
    const std::string host = ip.find(':') != std::string::npos ? "[" + ip + "]" : ip;
    out[node] = fmt::format("http://{}:{}/metrics", host, port);
  }
  return out;
}

result<std::map<std::string, std::string>> discover_exporters(const std::string& api_url,
                                                              const std::string& namespace_name,
                                                              const std::string& label_selector,
                                                              int port,
                                                              std::chrono::milliseconds timeout) {
  std::string base = api_url;
  while (!base.empty() && base.back() == '/') base.pop_back();
  const std::string url = fmt::format("{}/api/v1/namespaces/{}/pods?labelSelector={}", base,
                                      namespace_name, query_escape(label_selector));
  result<std::string> body = http_get(url, timeout);
  if (!body) return body.error();
  try {
    return exporters_from_pod_list(*body, port);
  } catch (const invalid_input& e) {
    return unavailable{unavailable_kind::failed, fmt::format("{}: {}", url, e.what())};
  }
}

}  // namespace vramkit::cluster
