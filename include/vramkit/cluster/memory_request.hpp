// Where a job's GPU memory request comes from: a user's declaration ("24GiB"), a planner JSON
// (`vramkit plan ... --json`, its device_peak_bytes), or a Kubernetes quantity ("24Gi").
// Pure functions; thread-safe; bad input throws invalid_input with one line naming what is wrong.
#pragma once

#include <cstdint>
#include <string_view>

namespace vramkit::cluster {

/// A declared per-GPU request: "24GiB", "24 GiB", "80GB" (decimal), "1.5G" (= GiB), or bytes.
/// Zero is refused: a job that needs no GPU memory should not ask for a GPU.
[[nodiscard]] std::uint64_t parse_memory_request(std::string_view text);

/// The per-GPU request of a planner JSON document: its `device_peak_bytes` (a non-negative
/// integer). Throws invalid_input naming `origin` when the text is not JSON or lacks the field.
[[nodiscard]] std::uint64_t request_from_plan_json(std::string_view json_text,
                                                   std::string_view origin = "plan");

/// A Kubernetes resource quantity in bytes, rounded up to a whole byte as the API server does:
/// "24Gi", "24G", "25769803776", "1.5Gi", "1e9", "500Mi", "100m" (milli). Throws invalid_input on
/// negative values, unknown suffixes, or values beyond 2^63.
[[nodiscard]] std::uint64_t parse_kube_quantity(std::string_view text);

}  // namespace vramkit::cluster
