// What a plan is asked for: mode, batch and sequence sizes, precision, optimizer, checkpointing,
// attention kernel, parallel layout, offload and quantisation. Plain values; validate() refuses
// impossible or absurd combinations with a invalid_input naming the field.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "vramkit/plan/model_description.hpp"

namespace vramkit::plan {

enum class run_mode { train, infer };
/// `automatic`: inference in the config's torch_dtype (bf16 when absent for the rotary families,
/// fp32 for GPT-2/BERT, as transformers loads with dtype="auto"); training in fp32.
enum class precision { fp32, amp_bf16, amp_fp16, bf16, fp8, automatic };
/// adamw: torch.optim.AdamW (foreach); adamw_fused: AdamW(fused=True), no update temporaries;
/// adamw_8bit: bitsandbytes AdamW8bit (1-byte blockwise states); paged_adamw_8bit: the same with
/// the states of large parameters in CUDA managed memory, paged to the host under pressure.
enum class optimizer_kind {
  sgd,
  sgd_momentum,
  adam,
  adamw,
  adamw_fused,
  adamw_8bit,
  paged_adamw_8bit
};
enum class checkpointing { none, full, selective };
enum class attention_kind { sdpa, flash, eager };
enum class offload_kind { none, optimizer, params };
/// How inference runs: transformers' generate() (contiguous cache grown by concatenation) or a
/// serving engine with a paged KV cache (blocks of 16 tokens, reserved for the whole context).
enum class serving_kind { generate, paged };
/// KV-cache element type: the model's dtype, or 8-bit floats (a paged serving engine's
/// kv_cache_dtype fp8, one scale per layer).
enum class kv_cache_kind { model, fp8 };

/// The linear layers of a transformer block that LoRA adapts (bit set; PEFT's target_modules).
namespace lora_target {
inline constexpr std::uint8_t q = 1, k = 2, v = 4, o = 8, gate = 16, up = 32, down = 64;
inline constexpr std::uint8_t attention = q | k | v | o, mlp = gate | up | down,
                              all = attention | mlp;
}  // namespace lora_target

const char* to_string(run_mode v) noexcept;
const char* to_string(precision v) noexcept;
const char* to_string(optimizer_kind v) noexcept;
const char* to_string(checkpointing v) noexcept;
const char* to_string(attention_kind v) noexcept;
const char* to_string(offload_kind v) noexcept;
const char* to_string(quant_kind v) noexcept;
const char* to_string(serving_kind v) noexcept;
const char* to_string(kv_cache_kind v) noexcept;
/// "all", "attention", "mlp" or a comma list of q, k, v, o, gate, up, down.
std::string lora_targets_string(std::uint8_t targets);

/// Parse the CLI spellings ("amp-bf16", "sgd-momentum", ...); throw invalid_input listing the
/// accepted values otherwise.
precision parse_precision(std::string_view s);
optimizer_kind parse_optimizer(std::string_view s);
checkpointing parse_checkpointing(std::string_view s);
attention_kind parse_attention(std::string_view s);
offload_kind parse_offload(std::string_view s);
quant_kind parse_quant(std::string_view s);
run_mode parse_mode(std::string_view s);
serving_kind parse_serving(std::string_view s);
kv_cache_kind parse_kv_cache(std::string_view s);
/// "all" (every linear layer of the blocks, PEFT's "all-linear"), "attention" (q, k, v, o),
/// "mlp" (gate, up, down) or a comma list of q, k, v, o, gate, up, down (PEFT's module names
/// q_proj, ..., down_proj are accepted too); invalid_input otherwise.
std::uint8_t parse_lora_targets(std::string_view s);

/// One planning question. Sizes are per optimizer step (global batch) unless named micro.
struct plan_request {
  run_mode mode = run_mode::train;
  std::int64_t batch = 1;  ///< global batch (samples per optimizer step, all GPUs)
  std::int64_t micro_batch =
      0;  ///< samples per forward/backward on one GPU; 0 = batch / data-parallel degree
  std::int64_t seq = 0;  ///< tokens per sample (train); 0 = 1024 capped at the model's positions
  std::int64_t image_size = 0;  ///< CNN/ViT input side (0 = 224)
  std::int64_t prompt = 0;      ///< infer: prompt tokens (0 = 512)
  std::int64_t new_tokens = 0;  ///< infer: generated tokens (0 = 128)
  precision prec = precision::automatic;
  optimizer_kind optimizer = optimizer_kind::adamw;
  checkpointing ckpt = checkpointing::none;
  attention_kind attention = attention_kind::sdpa;
  int gpus = 1;           ///< GPUs in total (data x tensor x pipeline)
  int gpus_per_node = 8;  ///< for per-node host memory
  int zero = 0;           ///< ZeRO stage 0..3 (3 = FSDP full shard)
  int tp = 1;             ///< tensor-parallel degree (with sequence parallel when sp)
  bool sp = false;        ///< sequence parallel with tp
  int pp = 1;             ///< pipeline-parallel degree (1F1B)
  int ep = 1;             ///< expert-parallel degree (MoE: experts / ep per rank, all-to-all)
  offload_kind offload = offload_kind::none;
  quant_kind quant = quant_kind::none;
  serving_kind serving = serving_kind::generate;
  kv_cache_kind kv_cache = kv_cache_kind::model;
  /// LoRA (PEFT): adapters of this rank on `lora_targets`, the base frozen; 0 = full training.
  /// The base is stored in the precision's 16-bit type (fp32 with --precision fp32), or in NF4
  /// with quant nf4 (QLoRA); adapters are fp32 (PEFT's autocast_adapter_dtype).
  int lora_rank = 0;
  std::uint8_t lora_targets = lora_target::all;
  double lora_dropout = 0;  ///< LoRA dropout probability (PEFT's default 0: no dropout)
  /// The optimizer steps each parameter in its post-accumulate-grad hook and frees its gradient
  /// there (torchtune's optimizer_in_bwd): no full set of gradients ever exists.
  bool optimizer_in_backward = false;
  int steps = 3;  ///< training steps replayed (>= 2 to include the optimizer states)
  /// Mixture-of-experts routing to replay instead of balanced routing: for each forward of an
  /// MoE block in the order the steps run them (layer by layer, micro-batch by micro-batch; the
  /// list starts over when the walk needs more), the tokens each expert receives. Each entry is
  /// scaled to the forward's tokens x top-k (largest remainders); experts given none are skipped
  /// as transformers' expert loop skips them. Empty = every expert gets an equal share.
  std::vector<std::vector<std::int64_t>> expert_load;
  /// Memory of each GPU in bytes; 0 = unlimited. With a capacity the caching allocator is
  /// modelled under memory pressure (cache flushes before out of memory) and the plan says
  /// whether the run fits.
  std::uint64_t device_capacity_bytes = 0;

  bool operator==(const plan_request&) const = default;

  /// Data-parallel degree = gpus / (tp * pp).
  [[nodiscard]] int data_parallel() const noexcept { return gpus / (tp * pp); }

  /// Fills defaults that depend on the model (seq, micro-batch, prompt) and checks every field;
  /// throws invalid_input naming the field and the reason.
  void validate(const model_description& m);
};

}  // namespace vramkit::plan
