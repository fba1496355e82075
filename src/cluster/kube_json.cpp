// Readers of Kubernetes JSON objects: see kube_json.hpp.
#include "kube_json.hpp"

#include <cctype>

#include "vramkit/cluster/memory_request.hpp"

namespace vramkit::cluster::kube_json {

using json = nlohmann::json;

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

const json* at_path(const json& j, std::initializer_list<const char*> keys) {
  const json* cur = &j;
  for (const char* k : keys) {
    if (!cur->is_object()) return nullptr;
    auto it = cur->find(k);
    if (it == cur->end()) return nullptr;
    cur = &*it;
  }
  return cur;
}

std::string string_at(const json& j, std::initializer_list<const char*> keys) {
  const json* v = at_path(j, keys);
  return v && v->is_string() ? v->get<std::string>() : std::string();
}

std::optional<std::uint64_t> quantity(const json& v) {
  if (v.is_string()) return parse_kube_quantity(v.get<std::string>());
  if (v.is_number_unsigned()) return v.get<std::uint64_t>();
  if (v.is_number_integer() && v.get<std::int64_t>() >= 0) return v.get<std::uint64_t>();
  return std::nullopt;
}

}  // namespace vramkit::cluster::kube_json
