// The fit search: enumerates micro-batch, checkpointing, precision, ZeRO stage, offload and
// tensor/pipeline degrees around a request, plans each, keeps those whose device peak fits the
// GPU with a margin, and ranks them by an estimated step time. Pure; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "vramkit/plan/device_overheads.hpp"
#include "vramkit/plan/gpu_catalogue.hpp"
#include "vramkit/plan/memory_model.hpp"

namespace vramkit::plan {

/// What the search may change and what it must fit into.
struct fit_options {
  std::uint64_t capacity_bytes = 0;  ///< device memory per GPU
  std::optional<gpu_spec> gpu;       ///< for the cost model; a generic H100-class GPU when absent
  double margin = 0.05;              ///< fraction of capacity kept free
  bool vary_precision = true;        ///< may move fp32 to amp-bf16 / bf16
  std::size_t max_results = 16;      ///< the fastest of each method first, then the rest by time
  unsigned threads = 0;              ///< configurations planned in parallel; 0 = hardware threads
};

/// One configuration that fits, with its cost and the reason for each choice.
struct fit_candidate {
  plan_request request;
  std::uint64_t device_peak_bytes = 0;
  std::uint64_t allocated_peak_bytes = 0;
  std::uint64_t host_peak_bytes = 0;
  double step_time_s = 0;  ///< estimated seconds per optimizer step (or per generate call)
  std::vector<std::string> reasons;  ///< one line per choice
  /// vramkit activation offload (fit_search_with_offload): one policy per block, empty otherwise.
  std::vector<std::string> activation_mix;
  std::string compress_activations;  ///< "none" or the fp8 modules; empty without offload
  bool optimizer_offload = false;    ///< Adam moments in pinned host memory (OffloadedAdamW)
  /// The offload engine settings the estimate assumes (offload_activations' arguments).
  std::uint64_t offload_max_inflight_bytes = 0;
  int offload_prefetch_blocks = 0;
};

/// Result of a search: ranked fits (cheapest first), how many configurations were planned, and
/// what was searched for.
struct fit_result {
  std::vector<fit_candidate> fits;
  std::size_t planned = 0;
  std::string model;                 ///< the model's name
  std::string gpu;                   ///< the catalogue GPU searched for; empty for a capacity
  std::uint64_t capacity_bytes = 0;  ///< memory per GPU searched for
};

/// Rates the step-time model divides work by: dense GEMMs at training shapes, the fused attention
/// kernel, and memory-bound kernels (bytes read plus written per second); each from the probe
/// file the overheads came from when it has the figure, else the GPU catalogue's datasheet rate
/// times a published efficiency (docs/plan.md, "Cost model").
struct kernel_rates {
  double gemm_flops = 0;
  double attention_flops = 0;
  double memory_bytes_per_s = 0;
  std::string source;  ///< "probe", "catalogue" or "probe and catalogue"
};

/// The rates for GEMMs in precision `p` (fp32: the catalogue's non-tensor rate).
kernel_rates kernel_rates_for(const gpu_spec& gpu, const device_overheads& o, precision p);

/// A training step of a transformer language model split into the parts the offload model
/// schedules, for one GPU's share of the work (seconds): GEMM FLOPs per block (with attention's
/// s^2 terms), its memory-bound kernels, the head and loss, and the optimizer's passes over its
/// states (docs/plan.md, "Cost model").
struct step_time_parts {
  double block_forward_s = 0;   ///< one block's forward, one micro-batch (mean over the blocks)
  double block_backward_s = 0;  ///< one block's backward without recompute
  /// Of block_forward_s, the memory-bound kernels (norms, casts, rotary, activation, residual
  /// adds): what selective checkpointing runs again in backward
  double block_memory_bound_s = 0;
  /// Bytes per micro-batch that a block's GEMMs and fused attention kernel output in its forward
  /// (0 with eager attention or a mixture-of-experts MLP: not modelled)
  double block_gemm_output_bytes = 0;
  double outside_s = 0;    ///< per micro-batch: embeddings, final norm, head and loss, both passes
  double recompute_s = 0;  ///< per micro-batch: what the request's checkpointing recomputes
  double optimizer_s = 0;  ///< per optimizer step: the update's passes over parameters and states
  double micro_batches = 1;  ///< per optimizer step and GPU
  int blocks = 0;
  kernel_rates rates;
  /// The whole step: micro_batches x (blocks x (forward + backward) + recompute + outside) +
  /// optimizer.
  [[nodiscard]] double step_s() const noexcept;
};

/// The parts of a training request of a transformer language model (throws invalid_input for
/// inference and vision models).
step_time_parts estimate_step_parts(const model_description& m, const plan_request& r,
                                    const gpu_spec& gpu, const device_overheads& o);

/// Estimated step time of a request on a GPU (docs/plan.md, "Cost model").
double estimate_step_time(const model_description& m, const plan_request& r, const gpu_spec& gpu,
                          const device_overheads& o);

/// The same for a planned request, adding the PCIe traffic of paged optimizer states that the
/// device cannot keep resident (in and out once per step).
double estimate_step_time(const plan_result& p, const gpu_spec& gpu, const device_overheads& o);

/// Searches around `base` (its model, batch, sequence and GPU count stay fixed). Throws
/// invalid_input when capacity_bytes is zero.
fit_result fit_search(const model_description& m, const plan_request& base, const fit_options& opt,
                      const device_overheads& o = default_overheads());

/// Orders fits cheapest first, the cheapest of each method (full fine-tune per optimizer, LoRA
/// per rank, QLoRA, activation offload) ahead of the rest, and keeps `max_results`.
void rank_fits(fit_result& res, std::size_t max_results);

/// One JSON object: schema_version, model, gpu, capacity_bytes, planned and the ranked fits
/// (each with its settings, figures and reasons).
std::string to_json(const fit_result& r);

/// The ranked fits as lines for people, or why nothing fits.
std::string to_table(const fit_result& r);

}  // namespace vramkit::plan
