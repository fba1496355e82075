// The offload model: for a mix of per-block policies (offload to pinned host memory, checkpoint,
// keep, selective checkpointing, selective checkpointing with its saved tensors on the host,
// checkpointing with the block's input on the host), the
// step time with copies overlapped the way vramkit.offload_activations runs them, the
// device peak and the pinned host bytes; the fastest mix under a capacity; optimizer-state
// offload (vramkit.OffloadedAdamW); and the `--offload` option. Pure functions; thread-safe.
// Python reaches it through vramkit.plan (python/vramkit/offload_plan.py
// only spells the mixes); tests/data/offload/model_cases.json holds cases it must answer as it
// did. docs/offload.md states the model.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace vramkit::plan {

/// What a block does with the tensors its forward saves for backward. `selective`: only the
/// outputs of its GEMMs and attention kernels (and its input) stay, its memory-bound ops (norms,
/// rotary, activation, products, residual adds) run again in backward; `selective_offload`: the
/// same, with those outputs in pinned host memory; `checkpoint_offload`: checkpointed, with the
/// one tensor it keeps, its input, in pinned host memory (fetched back for the recompute).
enum class block_policy {
  offload,
  checkpoint,
  keep,
  selective,
  selective_offload,
  checkpoint_offload
};
const char* to_string(block_policy p) noexcept;
/// "offload", "checkpoint", "keep", "selective", "selective-offload" or "checkpoint-offload";
/// throws invalid_input otherwise.
block_policy parse_block_policy(std::string_view s);
/// The one-letter spelling of a mix entry: o, c, k, s, h (selective, saved tensors on the host)
/// or x (checkpointed, input on the host).
char policy_letter(block_policy p) noexcept;
/// The policy of a letter of policy_letter; nullopt for any other character.
std::optional<block_policy> policy_of_letter(char c) noexcept;

/// What the model needs to know about one training step, per micro-batch.
struct offload_inputs {
  std::uint64_t block_bytes = 0;  ///< bytes a block saves for backward (activations, not weights)
  std::uint64_t input_bytes = 0;  ///< a block's input: what a checkpointed block keeps
  /// What a selectively checkpointed block saves besides its input: the outputs of its GEMMs and
  /// attention kernels (0: the selective policies are not modelled for this model)
  std::uint64_t selective_bytes = 0;
  double t_selective_s = 0;  ///< a selective block's recompute: its memory-bound forward ops
  double t_fwd_s = 0;        ///< forward time of one block
  double t_bwd_s = 0;        ///< backward time of one block (without recompute)
  /// Activation compression's kernels in a block that keeps or offloads its saved tensors: the
  /// encode in its forward, the decode in its backward (a checkpointed block saves only its
  /// input, and its recompute runs uncompressed: neither)
  double pack_s = 0;
  double unpack_s = 0;
  /// With activation compression, what a selective block keeps (selective) or copies
  /// (selective_offload) of selective_bytes: its compressed GEMM outputs' fp8 payloads and scales
  /// beside the outputs that stay exact (0: selective_bytes, uncompressed); and the codec's kernels
  /// in such a block, the encode in its forward and the decode in its recompute (its recompute
  /// itself runs uncompressed, regrowing the block's saved tensors whole)
  std::uint64_t selective_stored_bytes = 0;
  double selective_pack_s = 0;
  double selective_unpack_s = 0;
  double d2h_bytes_per_s = 0;     ///< pinned device-to-host copy rate
  double h2d_bytes_per_s = 0;     ///< pinned host-to-device copy rate
  std::uint64_t other_bytes = 0;  ///< everything else at the peak (states, gradients, logits)
  /// What the head and the loss add beside the kept blocks when the forward ends, beyond
  /// other_bytes (the planner anchors other_bytes so that this is one block's saved bytes when a
  /// block recomputes; 0 when none does)
  std::uint64_t loss_bytes = 0;
  double other_time_s = 0;                    ///< the rest of the step (head, loss, optimizer)
  std::uint64_t window_bytes = 512ull << 20;  ///< copy-out bytes the forward runs ahead of
  int prefetch = 1;                           ///< offloaded blocks fetched ahead in backward
  /// > 0: the backward of block i also fetches the offloaded blocks among i-1 .. i-d, and the
  /// peak counts what is still being copied out when the forward ends (instead of the whole
  /// window) and the offloaded blocks fetched back at once
  int prefetch_blocks = 0;
  /// > 0 (with prefetch_blocks > 0): the engine's host_lead_blocks, the host never more than this
  /// many blocks' forward ahead of the device (vramkit.offload_activations waits at each block's
  /// start for the device to begin the block that many before); the peak then counts at the loss
  /// only the copies out whose memory the allocator cannot yet have back (copy_out_held_bytes),
  /// not the whole window. 0: the host's lead is unbounded, the window counted whole.
  int host_lead_blocks = 0;
  /// Share of the copy time hidden behind compute that still lengthens the step (the copies'
  /// HBM traffic and the engine's work in the hooks): what choose_offload_mix ranks mixes by
  /// adds it (simulate_offload leaves it out)
  double copy_interference = 0;
  /// true: window_bytes and prefetch_blocks follow the mix, as vramkit's engine settings the plan
  /// prints: two copies out in flight of the largest block that copies (a whole block's saved
  /// bytes, a selective one's, or an input), one when that copy ends within a block's forward,
  /// and each copy back started as many blocks ahead as that copy takes backward passes of a
  /// block, plus one
  bool windows_per_mix = false;
  /// Activation compression (0 without it): what a checkpointed or selective block's recompute
  /// regrows from (its saved tensors uncompressed; 0: block_bytes), and what the backward of a
  /// block that keeps or offloads compressed tensors holds decoded on top of them (its own and
  /// the block below's, decoded ahead)
  std::uint64_t recompute_bytes = 0;
  std::uint64_t decode_bytes = 0;
  /// What PyTorch's caching allocator reserves beyond the allocated peak (reserved - allocated),
  /// from the allocator model's replay of the plan whose peak moment a mix shares: full
  /// checkpointing's for a mix with a block that recomputes (cache_bytes), the plan without
  /// checkpointing's for one without (cache_bytes_without_recompute). choose_offload_mix counts it
  /// against the capacity (0 and 0: the capacity bounds the allocated peak alone).
  std::uint64_t cache_bytes = 0;
  std::uint64_t cache_bytes_without_recompute = 0;
};

/// The allocator cache counted beside mix's allocated peak: in.cache_bytes when a block of the mix
/// recomputes (checkpointed or selective), else in.cache_bytes_without_recompute.
std::uint64_t allocator_cache_bytes(const std::vector<block_policy>& mix,
                                    const offload_inputs& in) noexcept;

/// The step time a mix is ranked by: e.step_time_s plus in.copy_interference of the hidden copy
/// time.
double ranked_step_s(const struct offload_estimate& e, const offload_inputs& in) noexcept;

struct offload_estimate {
  double step_time_s = 0;     ///< estimated step, compute plus exposed copies
  double compute_s = 0;       ///< compute alone (with recompute of checkpointed blocks)
  double copy_s = 0;          ///< all copies, out and back
  double exposed_copy_s = 0;  ///< copy time not hidden behind compute
  double overlap = 1;         ///< 1 - exposed / copy (1 when nothing is copied)
  std::uint64_t device_peak_bytes = 0;
  std::uint64_t host_pinned_bytes = 0;
  std::uint64_t window_bytes = 0;  ///< the copy-out window used
  int prefetch_blocks = 0;         ///< the prefetch depth used
  int host_lead_blocks = 0;        ///< the host's lead the peak assumes (0: unbounded)
  /// Copy-out bytes the peak counts as still held when the head and the loss allocate
  std::uint64_t held_at_loss_bytes = 0;
};

/// The estimate for `mix` (one policy per block, forward order). Throws invalid_input when the
/// link rates are not positive while a block is offloaded.
offload_estimate simulate_offload(const std::vector<block_policy>& mix, const offload_inputs& in);

/// The mix with these counts the model favours: offloaded blocks spread evenly from the first,
/// checkpointed ones among them, the last blocks kept. Throws invalid_input if the counts exceed
/// n_blocks or are negative.
std::vector<block_policy> arrange_mix(int n_blocks, int n_offload, int n_checkpoint);

/// Blocks of each policy but keep.
struct mix_counts {
  int offload = 0;
  int checkpoint = 0;
  int selective = 0;
  int selective_offload = 0;
};
/// The same with the selective policies: the blocks that copy to the host (offload, then
/// selective_offload, each kind spread among them) spread evenly from the first block over the
/// blocks not kept, checkpointed blocks next, selective ones after them, the last blocks kept;
/// `from_top`: the blocks that copy spread from the last block not kept down (their copies back
/// are the first the backward needs).
std::vector<block_policy> arrange_mix(int n_blocks, const mix_counts& c, bool from_top = false);

enum class mix_search { offload_and_checkpoint, checkpoint_only };

struct offload_choice {
  std::vector<block_policy> mix;
  offload_estimate estimate;
};

/// The fastest arranged mix whose device peak plus allocator_cache_bytes fits capacity_bytes
/// (ties: fewer host bytes), or
/// nullopt when none does, over both arrangements of arrange_mix, each also with every
/// checkpointed block's input on the host (checkpoint_offload). The selective policies are
/// searched when in.selective_bytes > 0
/// (checkpoint_only: selective, neither selective_offload nor checkpoint_offload).
std::optional<offload_choice> choose_offload_mix(
    int n_blocks, std::uint64_t capacity_bytes, const offload_inputs& in,
    mix_search search = mix_search::offload_and_checkpoint);

/// Optimizer-state offload as vramkit.OffloadedAdamW runs it: Adam's two fp32 moments (and fp32
/// master weights when asked) in pinned host memory, streamed through the device in chunks.
struct optimizer_offload_estimate {
  std::uint64_t host_bytes = 0;           ///< pinned host bytes of the state
  std::uint64_t device_bytes_saved = 0;   ///< state bytes no longer on the device
  std::uint64_t device_buffer_bytes = 0;  ///< the two chunk slots on the device
  double step_time_s = 0;                 ///< copies in and out overlap each other and the update
};

enum class master_weights { none, fp32_on_host };

optimizer_offload_estimate estimate_optimizer_offload(std::uint64_t parameters,
                                                      master_weights master, double d2h_bytes_per_s,
                                                      double h2d_bytes_per_s,
                                                      std::uint64_t chunk_bytes = 64ull << 20);

/// The `--offload` option: none, activations[:N|:MIX], optimizer or both[:N|:MIX] (activations
/// with optimizer); MIX names every block's policy in forward order, o (offload), c (checkpoint),
/// k (keep), s (selective), h (selective-offload) or x (checkpoint-offload), e.g.
/// activations:ocshkx.
struct offload_option {
  bool activations = false;
  int activation_blocks = 0;  ///< blocks to offload; n_blocks when no N was given
  bool optimizer = false;
  std::vector<block_policy> mix;  ///< the MIX given, empty otherwise
};

/// Parses `--offload VALUE` for a model of n_blocks blocks (0: not known yet, only the spelling is
/// checked); throws invalid_input with a one-line message naming the value for anything else,
/// N < 1, N > n_blocks, or a MIX of another length than n_blocks.
offload_option parse_offload_option(std::string_view value, int n_blocks);

}  // namespace vramkit::plan
