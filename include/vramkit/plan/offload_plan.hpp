// A plan with activation offload and activation compression: derives the offload model's inputs
// (per-block saved bytes, block compute time, link rate) from the memory model and the cost model
// of a request, runs simulate_offload for the mix `--offload activations[:N]|both[:N]` asks for or
// searches the fastest mix that fits, and renders the figures. Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "vramkit/plan/device_overheads.hpp"
#include "vramkit/plan/fit_search.hpp"
#include "vramkit/plan/gpu_catalogue.hpp"
#include "vramkit/plan/memory_model.hpp"
#include "vramkit/plan/offload_model.hpp"

namespace vramkit::plan {

/// `--compress-activations none|fp8[:MODULES]|fp8-e5m2[:MODULES]`, MODULES a comma list of mlp,
/// attn and norm (default mlp,attn), as vramkit.compress_activations stores them: 1 byte per
/// element plus one fp32 scale per 128 elements.
struct compress_option {
  bool enabled = false;
  bool mlp = false;   ///< every saved tensor inside the MLP module
  bool attn = false;  ///< the inputs of the attention projections (never softmax statistics)
  bool norm = false;  ///< what the norms save (their fp32 inputs and normalized outputs in amp)
  bool e5m2 = false;  ///< e5m2 instead of e4m3
  /// ":recompute" (compression alone): norms keep their inputs as they are; their normalized
  /// outputs, and the gated MLP's silu(gate) and product, are recomputed in backward from the
  /// tensors saved beside them instead of stored (recompute=True, norm_inputs="exact")
  bool recompute = false;
  [[nodiscard]] std::string to_string() const;
};

/// Parses `--compress-activations VALUE`; throws invalid_input with a one-line message otherwise.
compress_option parse_compress_option(std::string_view value);

/// The host link offload copies use: pinned host-to-device rate from the probe file when the
/// overheads came from one, else the GPU's catalogue PCIe rate, else the documented default.
struct offload_link {
  double bytes_per_s = 0;
  std::string source;  ///< "probe", "catalogue: NAME" or "default"
};
offload_link offload_link_for(const device_overheads& o, const gpu_spec* gpu);

/// Everything the offload model needs for one request, and where it came from.
struct offload_setup {
  offload_inputs inputs;
  int n_blocks = 0;
  std::uint64_t saved_bytes_per_block = 0;         ///< uncompressed
  std::uint64_t compressible_bytes_per_block = 0;  ///< of those, what the compression selects
  double pack_s_per_block = 0, unpack_s_per_block = 0;
  /// reserved - allocated of full checkpointing's plan (inputs.cache_bytes; a mix without a
  /// recompute counts inputs.cache_bytes_without_recompute, the plan without checkpointing's)
  std::uint64_t cache_bytes = 0;
  std::uint64_t context_bytes = 0;  ///< CUDA context and modules
  /// inputs.other_bytes for mixes without a checkpointed block (anchored to the plan without
  /// checkpointing, whose peak moment they share; inputs.other_bytes to full checkpointing's).
  std::uint64_t other_bytes_without_checkpoint = 0;
  std::uint64_t optimizer_host_bytes = 0;
  double optimizer_time_s = 0;
  double micro_batches = 1;  ///< per optimizer step (the model runs one micro-batch)
  offload_link link;
  step_time_parts compute;  ///< the cost model's parts the block times come from
};

/// Builds the setup for a validated-able training request of a transformer language model
/// (throws invalid_input for others). `optimizer` moves Adam's moments to pinned host memory as
/// vramkit.OffloadedAdamW does.
offload_setup make_offload_setup(const model_description& m, const plan_request& r,
                                 const compress_option& c, bool optimizer, const gpu_spec& gpu,
                                 const device_overheads& o);

/// One mix's figures.
struct offload_plan {
  std::vector<block_policy> mix;
  compress_option compress;
  bool optimizer = false;
  offload_estimate estimate;
  std::uint64_t allocated_peak_bytes = 0;  ///< model of torch.cuda.max_memory_allocated
  std::uint64_t device_peak_bytes = 0;     ///< plus the allocator cache and the context
  std::uint64_t host_pinned_bytes = 0;     ///< activations plus optimizer states
  double step_time_s = 0;
  offload_setup setup;
};

offload_plan evaluate_offload(const offload_setup& s, const std::vector<block_policy>& mix,
                              const compress_option& c, bool optimizer);

/// The plan for `--offload none|activations[:N]|both[:N]`: the first N blocks' worth spread by
/// arrange_mix, the rest kept, or checkpointed when the request asks for full checkpointing
/// (throws invalid_input for selective).
offload_plan plan_offload(const model_description& m, const plan_request& r,
                          const offload_option& opt, const compress_option& c, const gpu_spec& gpu,
                          const device_overheads& o);

/// The fastest mix of offload and checkpointing per block whose device peak fits `limit_bytes`,
/// with and without compression (compression only when `allow_lossy`), with and without
/// optimizer offload (only the one `optimizer_only` names when given); nullopt when none fits.
/// `lossy_only` (with `allow_lossy`): the compressed mixes alone.
std::optional<offload_plan> fit_offload(const model_description& m, const plan_request& r,
                                        std::uint64_t limit_bytes, bool allow_lossy,
                                        const compress_option& lossy, const gpu_spec& gpu,
                                        const device_overheads& o,
                                        std::optional<bool> optimizer_only = std::nullopt,
                                        bool lossy_only = false);

/// fit_search plus the offload/partial-checkpointing candidates of fit_offload (without and with
/// optimizer offload) (for training
/// requests of transformer language models), ranked together by estimated time.
fit_result fit_search_with_offload(const model_description& m, const plan_request& base,
                                   const fit_options& opt, bool allow_lossy,
                                   const compress_option& lossy, const device_overheads& o);

/// The "offload" JSON object added to a plan (mix, peaks, host bytes, times, link).
std::string offload_json(const offload_plan& p);
/// The plan's JSON with the "offload" object added.
std::string to_json(const plan_result& base, const offload_plan& p);
/// Lines for people, appended to the plan's table.
std::string to_table(const offload_plan& p);

}  // namespace vramkit::plan
