// The fake-GPU fixture reader shared with `vramkit serve --fake-gpus`.
#include "vramkit/cluster/gpu_state.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "vramkit/core/error.hpp"

namespace vramkit::cluster {
namespace {

std::uint64_t byte_field(const nlohmann::json& gpu, const char* key, bool required,
                         std::string_view origin, std::size_t i) {
  const auto it = gpu.find(key);
  if (it == gpu.end() || it->is_null()) {
    if (required) throw usage_error(fmt::format("{}: gpus[{}] has no {}", origin, i, key));
    return 0;
  }
  if (it->is_number_unsigned()) return it->get<std::uint64_t>();
  if (it->is_number_integer() && it->get<std::int64_t>() >= 0) return it->get<std::uint64_t>();
  throw usage_error(fmt::format("{}: gpus[{}].{} must be a non-negative integer", origin, i, key));
}

std::string string_field(const nlohmann::json& g, const char* key, std::string_view origin,
                         std::size_t i) {
  const auto it = g.find(key);
  if (it == g.end()) return {};
  if (!it->is_string()) {
    throw usage_error(fmt::format("{}: gpus[{}].{} must be a string", origin, i, key));
  }
  return it->get<std::string>();
}

}  // namespace

std::vector<gpu_state> gpus_from_fixture_json(std::string_view json_text, std::string_view origin) {
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::exception& e) {
    throw usage_error(fmt::format("{}: not valid JSON ({})", origin, e.what()));
  }
  if (!doc.is_object() || !doc.contains("gpus") || !doc["gpus"].is_array()) {
    throw usage_error(fmt::format("{}: expected an object with a \"gpus\" array", origin));
  }
  std::vector<gpu_state> gpus;
  const auto& list = doc["gpus"];
  for (std::size_t i = 0; i < list.size(); ++i) {
    const auto& g = list[i];
    if (!g.is_object()) throw usage_error(fmt::format("{}: gpus[{}] is not an object", origin, i));
    gpu_state s;
    s.index = static_cast<int>(i);
    s.name = string_field(g, "name", origin, i);
    s.uuid = string_field(g, "uuid", origin, i);
    s.total_bytes = byte_field(g, "memory_total_bytes", true, origin, i);
    s.used_bytes = byte_field(g, "memory_used_bytes", false, origin, i);
    s.reserved_bytes = byte_field(g, "memory_reserved_bytes", false, origin, i);
    if (s.used_bytes > s.total_bytes) {
      throw usage_error(fmt::format("{}: gpus[{}] uses more than its total", origin, i));
    }
    s.free_bytes = derived_free_bytes(s.total_bytes, s.used_bytes);
    gpus.push_back(std::move(s));
  }
  return gpus;
}

}  // namespace vramkit::cluster
