// The planner's answer for one request: replays the schedule of tensor lifetimes, finds the
// allocated peak (when it happens and what is live then), feeds the same stream through the
// caching-allocator model for reserved bytes, and adds the CUDA context for the device figure.
// Pure function of its inputs; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "vramkit/plan/device_overheads.hpp"
#include "vramkit/plan/model_description.hpp"
#include "vramkit/plan/plan_request.hpp"
#include "vramkit/plan/training_schedule.hpp"

namespace vramkit::plan {

/// Version of the JSON object written by to_json (docs/plan.md). Bump on any change.
inline constexpr int plan_schema_version = 1;

/// Where a byte figure lives. `managed`: CUDA managed memory (paged optimizer states), resident
/// on the device while it fits and paged to host memory under pressure.
enum class memory_where { device, host, managed };
const char* to_string(memory_where w) noexcept;

/// One line of the breakdown at the peak.
struct plan_component {
  std::string name;
  std::uint64_t bytes = 0;
  memory_where where = memory_where::device;
};

/// Everything a plan reports. Device figures are for the most loaded GPU.
struct plan_result {
  model_description model;
  plan_request request;  ///< as validated (defaults filled in)
  std::uint64_t parameters = 0;
  std::uint64_t trainable_parameters = 0;  ///< receive gradients (LoRA: the adapters only)
  std::uint64_t allocated_peak_bytes = 0;  ///< torch.cuda.max_memory_allocated
  std::uint64_t reserved_peak_bytes = 0;   ///< torch.cuda.max_memory_reserved
  std::uint64_t device_peak_bytes = 0;     ///< nvidia-smi used: reserved + context
  std::uint64_t host_peak_bytes = 0;       ///< per node: pinned offload buffers, host copies
  /// CUDA managed memory outside PyTorch's allocator (paged optimizer states) and the part of it
  /// the device holds at the peak: all of it without a capacity, else what the capacity leaves
  /// beside the reserved peak and the context (the rest is paged to host memory and counted in
  /// host_peak_bytes). The resident part is in device_peak_bytes.
  std::uint64_t managed_bytes = 0;
  std::uint64_t managed_resident_bytes = 0;
  std::string peak_phase;                  ///< e.g. "backward", "optimizer"
  int peak_step = 0;                       ///< training step (0-based) of the peak
  int peak_layer = -1;                     ///< layer being processed at the peak (-1: none)
  std::string peak_tensor;                 ///< the allocation that set the peak
  std::vector<plan_component> components;  ///< live at the allocated peak, then host parts
  device_overheads overheads;
  std::uint64_t context_bytes = 0;
  std::size_t events = 0;  ///< allocation events replayed
  /// With request.device_capacity_bytes: times the allocator had to flush its cache to find
  /// room (each one synchronizes the device), and allocations that failed even then.
  std::size_t cache_flushes = 0;
  std::size_t out_of_memory = 0;
  /// True when no capacity was given, or the run fits it (no allocation failed).
  [[nodiscard]] bool fits() const noexcept { return out_of_memory == 0; }
};

/// Plans one request (validated here; throws invalid_input for bad requests).
plan_result make_plan(const model_description& m, plan_request r,
                      const device_overheads& o = default_overheads());

/// How much of a request to plan: all of it, or (for searches) a training run under a capacity
/// only until the replay sees an allocation fail, checked after each forward, backward and
/// optimizer step; such a plan has fits() false and figures of the part replayed only.
enum class plan_scope { whole, until_out_of_memory };
plan_result make_plan(const model_description& m, plan_request r, const device_overheads& o,
                      plan_scope scope);

/// One JSON object: the figures, peak_phase, components [{name, bytes, where}], the inputs
/// echoed, schema_version.
std::string to_json(const plan_result& p);

/// The human breakdown table.
std::string to_table(const plan_result& p);

}  // namespace vramkit::plan
