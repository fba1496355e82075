// kube_json: readers of Kubernetes JSON objects shared by the extender verbs and the device plugin
// (private to the cluster library). Pure functions; none throws except where said.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace vramkit::cluster::kube_json {

/// The member `name` of `object`, matched case-insensitively as Go's encoding/json does
/// (kube-scheduler sends "Pod", a hand-written client "pod"); null when absent or not an object.
[[nodiscard]] const nlohmann::json* find_field(const nlohmann::json& object, std::string_view name);

/// The value at `keys` below `j` ({"spec", "containers"}); null when any step is missing.
[[nodiscard]] const nlohmann::json* at_path(const nlohmann::json& j,
                                            std::initializer_list<const char*> keys);

/// The string at `keys`, or "" when it is missing or not a string.
[[nodiscard]] std::string string_at(const nlohmann::json& j,
                                    std::initializer_list<const char*> keys);

/// A resource quantity as Kubernetes writes it ("8Gi", "8589934592" or 8589934592) in bytes or
/// units; nothing when `v` is neither a quantity string nor a non-negative integer. Throws
/// invalid_input for a string that is not a quantity.
[[nodiscard]] std::optional<std::uint64_t> quantity(const nlohmann::json& v);

}  // namespace vramkit::cluster::kube_json
