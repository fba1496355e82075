// The step as a schedule of tensor lifetimes: an ordered list of alloc/free events of named
// tensors (forward layer by layer, loss, backward in reverse with what autograd saves and frees,
// gradient accumulation, optimizer step with lazily created states and foreach temporaries).
// Built per request; plain values, not synchronised.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "vramkit/plan/model_description.hpp"
#include "vramkit/plan/plan_request.hpp"

namespace vramkit::plan {

/// What a tensor is, for the breakdown at the peak.
enum class component : std::uint8_t {
  weights,
  gradients,
  optimizer_states,
  autocast_weight_cache,  ///< low-precision copies of weights made by autocast
  activations,            ///< tensors autograd saved for backward
  logits_and_loss,        ///< logits, their fp32 copy, log-softmax and their gradients
  activation_gradients,   ///< gradients flowing through backward
  temporaries,            ///< short-lived forward/optimizer intermediates
  kv_cache,
  inputs,
  workspace,  ///< library workspaces taken from the caching allocator (cuBLAS)
  count_
};
const char* to_string(component c) noexcept;
inline constexpr int component_count = static_cast<int>(component::count_);

/// Phase of the step an event belongs to.
enum class phase : std::uint8_t {
  setup,
  forward,
  loss,
  backward,
  optimizer,
  prefill,
  decode,
  count_
};
const char* to_string(phase p) noexcept;

/// One allocation or free. `tensor` indexes schedule::tensors; the tensor's size and component
/// are repeated here so that a replay reads the events alone.
struct tensor_event {
  std::uint64_t bytes = 0;
  std::uint32_t tensor = 0;
  component comp = component::activations;
  bool alloc = true;
};

/// A tensor's size and what it is. Sizes are bytes as requested from the allocator.
struct tensor_info {
  std::uint64_t bytes = 0;
  component comp = component::activations;
  phase ph = phase::forward;
  std::int16_t layer = -1;  ///< transformer layer / CNN stage, -1 outside layers
  std::int16_t step = 0;    ///< training step (0-based)
  const char* label = "";   ///< static string: what the tensor is ("qkv", "logits fp32", ...)
};

/// Events in program order. Tensors alive before the first event (weights, inputs) are listed
/// with alloc events at the start.
struct schedule {
  std::vector<tensor_info> tensors;
  std::vector<tensor_event> events;
  int steps = 0;
  /// Bytes allocated outside PyTorch's caching allocator and kept to the end (the paged
  /// optimizer states of bitsandbytes, in CUDA managed memory).
  std::uint64_t managed_bytes = 0;
  /// Parameters that receive gradients (all of them, or the LoRA adapters).
  std::uint64_t trainable_parameters = 0;
};

/// Watches the schedule while it is built. At the end of each unit of a repeated sequence (level
/// 0: a training step; level 1: a group of micro-batches inside a step) the walker asks whether
/// the rest may be skipped. The observer replays the events so far and compares its state with
/// the state at its previous call of the same level, i.e. just before the unit began. With
/// `comparable` true the unit's events are exactly those of every later unit of its level; a
/// deterministic replay that came back to the same state will then repeat the same states and
/// peaks for each of them, so skipping them changes no figure.
class schedule_observer {
 public:
  virtual ~schedule_observer() = default;
  /// Returns true to skip the remaining units identical to the one just finished.
  virtual bool repeat_point(const schedule& s, int level, bool comparable) = 0;
  /// Asked after each forward, backward and optimizer step of training: true ends the schedule
  /// there (a search that already knows the run does not fit needs no more of it).
  virtual bool stop(const schedule& s) {
    (void)s;
    return false;
  }
};

/// Builds the schedule for one GPU (the most loaded rank) of the request. The request must be
/// validated. Throws logic_error for combinations the walker does not model. `out` is cleared
/// first (its capacity is reused). With an observer, repeated units may be left out (above).
void build_schedule(const model_description& m, const plan_request& r, schedule& out,
                    schedule_observer* observer = nullptr);
/// The whole schedule, every unit included.
schedule build_schedule(const model_description& m, const plan_request& r);

}  // namespace vramkit::plan
