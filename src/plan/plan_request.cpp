// Spellings, parsing and validation of plan requests.
#include "vramkit/plan/plan_request.hpp"

#include <array>
#include <utility>

#include <fmt/format.h>

#include "vramkit/core/error.hpp"

namespace vramkit::plan {

namespace {

template <typename E, std::size_t N>
E parse_enum(std::string_view s, const std::array<std::pair<const char*, E>, N>& table,
             const char* what) {
  std::string accepted;
  for (const auto& [name, v] : table) {
    if (s == name) return v;
    accepted += (accepted.empty() ? "" : ", ") + std::string(name);
  }
  throw invalid_input(fmt::format("--{} '{}' is not one of: {}", what, s, accepted));
}

template <typename E, std::size_t N>
const char* name_of(E v, const std::array<std::pair<const char*, E>, N>& table) {
  for (const auto& [name, x] : table)
    if (x == v) return name;
  return "?";
}

constexpr std::array<std::pair<const char*, run_mode>, 2> k_modes{
    {{"train", run_mode::train}, {"infer", run_mode::infer}}};
constexpr std::array<std::pair<const char*, precision>, 6> k_prec{
    {{"fp32", precision::fp32},
     {"amp-bf16", precision::amp_bf16},
     {"amp-fp16", precision::amp_fp16},
     {"bf16", precision::bf16},
     {"fp8", precision::fp8},
     {"auto", precision::automatic}}};
constexpr std::array<std::pair<const char*, optimizer_kind>, 7> k_opt{
    {{"sgd", optimizer_kind::sgd},
     {"sgd-momentum", optimizer_kind::sgd_momentum},
     {"adam", optimizer_kind::adam},
     {"adamw", optimizer_kind::adamw},
     {"adamw-fused", optimizer_kind::adamw_fused},
     {"adamw-8bit", optimizer_kind::adamw_8bit},
     {"paged-adamw-8bit", optimizer_kind::paged_adamw_8bit}}};
constexpr std::array<std::pair<const char*, checkpointing>, 3> k_ckpt{
    {{"none", checkpointing::none},
     {"full", checkpointing::full},
     {"selective", checkpointing::selective}}};
constexpr std::array<std::pair<const char*, attention_kind>, 3> k_attn{
    {{"sdpa", attention_kind::sdpa},
     {"flash", attention_kind::flash},
     {"eager", attention_kind::eager}}};
constexpr std::array<std::pair<const char*, offload_kind>, 3> k_off{
    {{"none", offload_kind::none},
     {"optimizer", offload_kind::optimizer},
     {"params", offload_kind::params}}};
constexpr std::array<std::pair<const char*, quant_kind>, 5> k_quant{{{"none", quant_kind::none},
                                                                     {"int8", quant_kind::int8},
                                                                     {"int4", quant_kind::int4},
                                                                     {"nf4", quant_kind::nf4},
                                                                     {"fp8", quant_kind::fp8}}};
constexpr std::array<std::pair<const char*, serving_kind>, 2> k_serve{
    {{"generate", serving_kind::generate}, {"paged", serving_kind::paged}}};

constexpr std::array<std::pair<const char*, kv_cache_kind>, 3> k_kv{
    {{"auto", kv_cache_kind::model},
     {"fp8", kv_cache_kind::fp8},
     {"fp8_e4m3", kv_cache_kind::fp8}}};
constexpr std::array<std::pair<const char*, std::uint8_t>, 7> k_lora_names{
    {{"q", lora_target::q},
     {"k", lora_target::k},
     {"v", lora_target::v},
     {"o", lora_target::o},
     {"gate", lora_target::gate},
     {"up", lora_target::up},
     {"down", lora_target::down}}};

[[noreturn]] void refuse(const std::string& what) { throw invalid_input(what); }

}  // namespace

const char* to_string(run_mode v) noexcept { return name_of(v, k_modes); }
const char* to_string(precision v) noexcept { return name_of(v, k_prec); }
const char* to_string(optimizer_kind v) noexcept { return name_of(v, k_opt); }
const char* to_string(checkpointing v) noexcept { return name_of(v, k_ckpt); }
const char* to_string(attention_kind v) noexcept { return name_of(v, k_attn); }
const char* to_string(offload_kind v) noexcept { return name_of(v, k_off); }
const char* to_string(quant_kind v) noexcept { return name_of(v, k_quant); }
const char* to_string(serving_kind v) noexcept { return name_of(v, k_serve); }
const char* to_string(kv_cache_kind v) noexcept { return name_of(v, k_kv); }

std::string lora_targets_string(std::uint8_t targets) {
  if (targets == lora_target::all) return "all";
  if (targets == lora_target::attention) return "attention";
  if (targets == lora_target::mlp) return "mlp";
  std::string out;
  for (const auto& [name, bit] : k_lora_names)
    if ((targets & bit) != 0) out += (out.empty() ? "" : ",") + std::string(name);
  return out;
}

std::uint8_t parse_lora_targets(std::string_view s) {
  if (s == "all" || s == "all-linear") return lora_target::all;
  if (s == "attention" || s == "attn") return lora_target::attention;
  if (s == "mlp") return lora_target::mlp;
  std::uint8_t bits = 0;
  std::size_t start = 0;
  while (start <= s.size()) {
    const auto comma = s.find(',', start);
    std::string_view item =
        s.substr(start, comma == std::string_view::npos ? s.npos : comma - start);
    // PEFT's module names: q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj.
    if (item.size() > 5 && item.substr(item.size() - 5) == "_proj") item.remove_suffix(5);
    std::uint8_t bit = 0;
    for (const auto& [name, b] : k_lora_names)
      if (item == name) bit = b;
    if (bit == 0)
      throw invalid_input(fmt::format(
          "--lora-targets '{}': '{}' is not one of all, attention, mlp, q, k, v, o, gate, up, down",
          s, item));
    bits |= bit;
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return bits;
}

run_mode parse_mode(std::string_view s) { return parse_enum(s, k_modes, "mode"); }
precision parse_precision(std::string_view s) { return parse_enum(s, k_prec, "precision"); }
optimizer_kind parse_optimizer(std::string_view s) { return parse_enum(s, k_opt, "optimizer"); }
checkpointing parse_checkpointing(std::string_view s) {
  return parse_enum(s, k_ckpt, "checkpointing");
}
attention_kind parse_attention(std::string_view s) { return parse_enum(s, k_attn, "attention"); }
offload_kind parse_offload(std::string_view s) { return parse_enum(s, k_off, "offload"); }
quant_kind parse_quant(std::string_view s) { return parse_enum(s, k_quant, "quant"); }
serving_kind parse_serving(std::string_view s) { return parse_enum(s, k_serve, "serving"); }
kv_cache_kind parse_kv_cache(std::string_view s) { return parse_enum(s, k_kv, "kv-cache-dtype"); }

namespace {

constexpr std::int64_t k_max_batch = 1 << 20;
constexpr std::int64_t k_max_tokens = 1 << 24;

/// The precision transformers loads a model in for inference with dtype="auto": the config's
/// torch_dtype; without one, fp32 for GPT-2/BERT-era configs and bf16 for the rotary families
/// (their published checkpoints are 16-bit).
precision inference_precision(const model_description& m) {
  const auto& d = m.torch_dtype;
  if (d == "float32") return precision::fp32;
  if (d == "bfloat16" || d == "float16") return precision::bf16;
  if (m.is_vision() || m.family == model_family::gpt2 || m.family == model_family::bert)
    return precision::fp32;
  return precision::bf16;
}

void check_layout(plan_request& r, const model_description& m) {
  if (r.gpus < 1 || r.gpus > 65536) refuse(fmt::format("--gpus {} must be in [1, 65536]", r.gpus));
  if (r.gpus_per_node < 1 || r.gpus_per_node > 64)
    refuse(fmt::format("gpus per node {} must be in [1, 64]", r.gpus_per_node));
  if (r.tp < 1 || r.pp < 1)
    refuse(fmt::format("--tp {} and --pp {} must be at least 1", r.tp, r.pp));
  if (r.gpus % (r.tp * r.pp) != 0)
    refuse(fmt::format("--gpus {} is not a multiple of --tp {} x --pp {}", r.gpus, r.tp, r.pp));
  if (r.zero < 0 || r.zero > 3) refuse(fmt::format("--zero {} must be 0, 1, 2 or 3", r.zero));
  if (r.sp && r.tp < 2)
    refuse("--sp splits the sequence across tensor-parallel ranks: it needs --tp 2 or more");
  if (r.zero > 0 && r.data_parallel() == 1 && r.offload == offload_kind::none)
    refuse(fmt::format(
        "--zero {} shards over data-parallel ranks and there is only one (--gpus {}, --tp {}, "
        "--pp {}): it would change nothing",
        r.zero, r.gpus, r.tp, r.pp));
  if (r.batch < 1 || r.batch > k_max_batch)
    refuse(fmt::format("--batch {} must be in [1, {}]", r.batch, k_max_batch));
  if (r.steps < 1 || r.steps > 16) refuse(fmt::format("steps {} must be in [1, 16]", r.steps));
  if (m.is_vision()) {
    if (r.image_size == 0) r.image_size = m.family == model_family::hf_vit ? m.vit.image : 224;
    if (r.seq != 0) refuse("--seq applies to language models, not to " + m.name);
    if (r.attention != attention_kind::sdpa && m.is_torchvision())
      refuse("--attention chooses the Hugging Face transformers' attention implementation; " +
             m.name + " (torchvision) always runs scaled_dot_product_attention");
    if (m.family == model_family::hf_vit && r.image_size != m.vit.image)
      refuse(fmt::format(
          "--image-size {}: {}'s position table is for {}x{} images (transformers interpolates "
          "it only with interpolate_pos_encoding, not modelled)",
          r.image_size, m.name, m.vit.image, m.vit.image));
    if (r.image_size < 16 || r.image_size > 8192)
      refuse(fmt::format("--image-size {} must be in [16, 8192]", r.image_size));
    if ((m.family == model_family::vit) && r.image_size % m.vit.patch != 0)
      refuse(fmt::format("--image-size {} is not a multiple of the patch size {}", r.image_size,
                         m.vit.patch));
    if (r.tp > 1 || r.pp > 1)
      refuse("--tp/--pp are modelled for transformers only, not for " + m.name);
    if (r.ckpt != checkpointing::none)
      refuse("--checkpointing is modelled for the transformer language models, not for " + m.name);
  } else {
    const auto& t = m.t;
    if (r.image_size != 0)
      refuse("--image-size applies to vision models (resnet, vit), not to " + m.name);
    if (r.tp > 1 && (t.heads % r.tp != 0))
      refuse(fmt::format("--tp {} does not divide the {} attention heads", r.tp, t.heads));
    if (r.pp > t.layers) refuse(fmt::format("--pp {} exceeds the {} layers", r.pp, t.layers));
    if (r.ep != 1) {
      if (t.moe.experts == 0)
        refuse("--ep splits the experts of a mixture-of-experts model; " + m.name + " has none");
      if (r.ep < 1 || t.moe.experts % r.ep != 0)
        refuse(fmt::format("--ep {} does not divide the {} experts", r.ep, t.moe.experts));
      if ((r.gpus / r.pp) % r.ep != 0)
        refuse(fmt::format("--ep {} does not divide the {} GPUs of a pipeline stage", r.ep,
                           r.gpus / r.pp));
    }
  }
  if (m.is_vision() && r.ep != 1) refuse("--ep applies to mixture-of-experts models");
  if (!r.expert_load.empty()) {
    const std::int64_t experts = m.is_vision() ? 0 : m.t.moe.experts;
    if (experts == 0)
      refuse("--expert-load gives the routing of a mixture-of-experts model; " + m.name +
             " has none");
    if (r.ep != 1) refuse("--expert-load with --ep is not modelled (plan it on one GPU's experts)");
    for (std::size_t i = 0; i < r.expert_load.size(); ++i) {
      const auto& row = r.expert_load[i];
      if (static_cast<std::int64_t>(row.size()) != experts)
        refuse(fmt::format("--expert-load: entry {} has {} counts, the model has {} experts", i,
                           row.size(), experts));
      std::int64_t sum = 0;
      for (const std::int64_t v : row) {
        if (v < 0) refuse(fmt::format("--expert-load: entry {} has a negative count", i));
        sum += v;
      }
      if (sum == 0) refuse(fmt::format("--expert-load: entry {} routes no tokens", i));
    }
  }
  if (m.family == model_family::t5) {
    if (r.tp > 1 || r.pp > 1 || r.sp || r.ep > 1)
      refuse("--tp/--pp/--sp/--ep are not modelled for T5 (plan data parallel)");
    if (r.ckpt != checkpointing::none)
      refuse("--checkpointing is not modelled for T5's encoder-decoder blocks");
    if (r.attention != attention_kind::sdpa)
      refuse("--attention: T5 always runs its own eager attention (the scores are materialised)");
    if (r.lora_rank > 0) refuse("--lora-rank is not modelled for T5");
    if (r.serving != serving_kind::generate)
      refuse(
          "--serving paged is not modelled for T5 (its encoder-decoder caches are generate()'s)");
  }
  if (r.gpus_per_node != 8 && r.offload == offload_kind::none)
    refuse(
        "--gpus-per-node sets the per-node host figure of --offload runs; without --offload it "
        "would change nothing");
  if (r.ckpt == checkpointing::selective && r.attention != attention_kind::eager)
    refuse(
        "--checkpointing selective recomputes the attention core's s x s scores; with --attention "
        "sdpa or flash none are stored, so it would change nothing (use none or full)");
}

/// LoRA / QLoRA, optimizer-in-backward and the optimizers that need a particular setup.
void check_fine_tuning(plan_request& r, const model_description& m) {
  const bool lora = r.lora_rank > 0;
  if (r.lora_rank < 0 || r.lora_rank > 65536)
    refuse(fmt::format("--lora-rank {} must be in [0, 65536]", r.lora_rank));
  if (!lora && r.lora_targets != lora_target::all)
    refuse("--lora-targets chooses the layers LoRA adapts: it needs --lora-rank");
  if (!(r.lora_dropout >= 0 && r.lora_dropout < 1))
    refuse(fmt::format("--lora-dropout {} must be in [0, 1)", r.lora_dropout));
  if (!lora && r.lora_dropout != 0) refuse("--lora-dropout needs --lora-rank");
  if (lora && r.lora_targets == 0) refuse("--lora-targets names no layer");
  if (r.quant == quant_kind::none && m.weights.quant == quant_kind::nf4 && lora)
    r.quant = quant_kind::nf4;  // a bitsandbytes 4-bit checkpoint fine-tuned with LoRA: QLoRA
  if (r.quant != quant_kind::none && !(lora && r.quant == quant_kind::nf4))
    refuse(
        "--quant in training is QLoRA only: --quant nf4 with --lora-rank (a full fine-tune keeps "
        "full-precision weights; other quantised bases are not modelled)");
  if (m.weights.quant != quant_kind::none && r.quant != quant_kind::nf4)
    refuse(fmt::format(
        "{} stores {}-quantised weights (quantization_config): full training of a quantised "
        "checkpoint is not possible; plan the unquantised model, or LoRA on a bitsandbytes 4-bit "
        "one",
        m.name, m.weights.method));
  if (lora) {
    if (m.is_vision())
      refuse("--lora-rank is modelled for the transformer language models, not for " + m.name);
    if (m.family == model_family::deepseek)
      refuse("--lora-rank on DeepSeek's latent attention is not modelled");
    if (r.tp > 1 || r.pp > 1 || r.ep > 1)
      refuse("--lora-rank with --tp/--pp/--ep is not modelled (plan LoRA on data parallel only)");
    if (r.offload != offload_kind::none)
      refuse(
          "--lora-rank with --offload: the adapters' states are small, offload would change "
          "almost nothing (not modelled)");
    if (r.prec == precision::fp8) refuse("--lora-rank with --precision fp8 is not modelled");
  }
  const bool bnb =
      r.optimizer == optimizer_kind::adamw_8bit || r.optimizer == optimizer_kind::paged_adamw_8bit;
  if ((bnb || r.optimizer == optimizer_kind::adamw_fused) && r.offload != offload_kind::none)
    refuse(fmt::format(
        "--optimizer {} with --offload: ZeRO-Offload runs its own CPU Adam (give adamw)",
        to_string(r.optimizer)));
  if (r.optimizer_in_backward) {
    if (r.gpus > 1)
      refuse("--optimizer-in-backward is modelled on one GPU (torchtune's single-device recipes)");
    if (r.micro_batch != r.batch)
      refuse(
          "--optimizer-in-backward steps in every backward: it cannot accumulate gradients over "
          "micro-batches (give --micro-batch equal to --batch)");
    if (r.offload != offload_kind::none)
      refuse("--optimizer-in-backward with --offload is not modelled");
    if (r.prec == precision::amp_fp16)
      refuse(
          "--optimizer-in-backward cannot unscale fp16 gradients with a GradScaler (use amp-bf16 "
          "or bf16)");
  }
}

void check_train(plan_request& r, const model_description& m) {
  const int dp = r.data_parallel();
  if (r.prec == precision::automatic) r.prec = precision::fp32;
  if (r.prompt != 0 || r.new_tokens != 0)
    refuse("--prompt and --new-tokens apply to inference (--mode infer); training uses --seq");
  if (r.serving != serving_kind::generate) refuse("--serving applies to inference (--mode infer)");
  if (r.attention == attention_kind::flash && r.prec == precision::fp32)
    refuse("--attention flash needs 16-bit inputs: use --precision amp-bf16, amp-fp16 or bf16");
  if (m.is_vision()) {
    r.seq = 0;
  } else {
    const auto& t = m.t;
    const std::int64_t limit = t.max_positions > 0 ? t.max_positions : t.max_context;
    if (r.seq == 0) r.seq = limit > 0 ? std::min<std::int64_t>(1024, limit) : 1024;
    if (r.seq < 1 || r.seq > k_max_tokens)
      refuse(fmt::format("--seq {} must be in [1, {}]", r.seq, k_max_tokens));
    if (t.max_positions > 0 && r.seq > t.max_positions)
      refuse(
          fmt::format("--seq {} exceeds the model's {} learned positions", r.seq, t.max_positions));
    if (t.max_context > 0 && r.seq > t.max_context)
      refuse(fmt::format("--seq {} exceeds the model's max_position_embeddings {}", r.seq,
                         t.max_context));
    if (r.seq <= m.image_tokens())
      refuse(fmt::format("--seq {}: each sample's image alone takes {} tokens of {}", r.seq,
                         m.image_tokens(), m.name));
  }
  if (r.batch % dp != 0)
    refuse(fmt::format("--batch {} is not divisible by the {} data-parallel ranks", r.batch, dp));
  if (r.micro_batch == 0) r.micro_batch = r.batch / dp;
  if (r.micro_batch < 1 || (r.batch / dp) % r.micro_batch != 0)
    refuse(fmt::format("--micro-batch {} must divide the per-GPU batch {}", r.micro_batch,
                       r.batch / dp));
  if (r.kv_cache != kv_cache_kind::model)
    refuse("--kv-cache-dtype applies to inference (--mode infer)");
  check_fine_tuning(r, m);
}

void check_infer(plan_request& r, const model_description& m) {
  if (r.prec == precision::automatic) r.prec = inference_precision(m);
  if (r.prec != precision::fp32 && r.prec != precision::bf16)
    refuse(fmt::format(
        "--precision {} is a training regime; inference runs fp32 or bf16 weights (--quant fp8 "
        "for 8-bit ones)",
        to_string(r.prec)));
  if (r.optimizer != optimizer_kind::adamw)
    refuse("--optimizer applies to training (--mode train)");
  if (r.lora_rank != 0 || r.lora_targets != lora_target::all || r.lora_dropout != 0)
    refuse(
        "--lora-rank/--lora-targets/--lora-dropout apply to training (merge the adapters for "
        "inference)");
  if (r.optimizer_in_backward) refuse("--optimizer-in-backward applies to training");
  if (r.kv_cache != kv_cache_kind::model && r.serving != serving_kind::paged)
    refuse(
        "--kv-cache-dtype fp8: transformers' generate() keeps its cache in the model dtype; give "
        "--serving paged (or --serve)");
  if (r.attention == attention_kind::flash)
    refuse("--attention flash: at inference flash attention uses the memory of sdpa (give sdpa)");
  if (r.gpus != r.tp * r.pp)
    refuse(fmt::format(
        "inference on --gpus {} with --tp {} x --pp {} would run independent replicas: plan one "
        "replica (--gpus {})",
        r.gpus, r.tp, r.pp, r.tp * r.pp));
  if (!m.is_vision() && r.seq != 0 && r.prompt != 0 && r.seq != r.prompt)
    refuse("--seq and --prompt both given: at inference --seq is the prompt length");
  if (r.quant == quant_kind::none) r.quant = m.weights.quant;
  if (m.is_vision()) {
    if (r.prompt != 0 || r.new_tokens != 0)
      refuse("--prompt/--new-tokens apply to language models, not to " + m.name);
    if (r.serving != serving_kind::generate)
      refuse("--serving paged: " + m.name + " has no KV cache");
    r.prompt = r.new_tokens = 0;
  } else if (m.family == model_family::bert) {
    // An encoder (masked LM): one forward over the sequence, no generation.
    if (r.new_tokens != 0)
      refuse(m.name +
             " is an encoder: inference is one forward over --seq tokens (no --new-tokens)");
    if (r.serving != serving_kind::generate)
      refuse("--serving paged: " + m.name + " has no KV cache");
    if (r.prompt == 0) r.prompt = r.seq > 0 ? r.seq : std::min<std::int64_t>(512, m.t.max_context);
    if (r.prompt < 1 || r.prompt > m.t.max_context)
      refuse(fmt::format("--seq {} must be in [1, {}] (the model's positions)", r.prompt,
                         m.t.max_context));
    r.seq = r.prompt;
  } else {
    const auto& t = m.t;
    if (r.prompt == 0) r.prompt = r.seq > 0 ? r.seq : m.image_tokens() + 512;
    if (r.new_tokens == 0) r.new_tokens = 128;
    if (r.prompt <= m.image_tokens())
      refuse(fmt::format("--prompt {}: each sequence's image alone takes {} tokens of {}", r.prompt,
                         m.image_tokens(), m.name));
    if (r.prompt < 1 || r.prompt > k_max_tokens)
      refuse(fmt::format("--prompt {} must be in [1, {}]", r.prompt, k_max_tokens));
    if (r.new_tokens < 1 || r.new_tokens > k_max_tokens)
      refuse(fmt::format("--new-tokens {} must be in [1, {}]", r.new_tokens, k_max_tokens));
    if (t.max_positions > 0 && r.prompt + r.new_tokens > t.max_positions)
      refuse(fmt::format("--prompt {} + --new-tokens {} exceeds the model's {} positions", r.prompt,
                         r.new_tokens, t.max_positions));
    if (t.max_context > 0 && r.prompt > t.max_context)
      refuse(fmt::format("--prompt {} exceeds the model's max_position_embeddings {}", r.prompt,
                         t.max_context));
  }
  if (r.micro_batch != 0 && r.micro_batch != r.batch)
    refuse("--micro-batch applies to training; inference runs the whole --batch at once");
  r.micro_batch = r.batch;
  if (r.attention == attention_kind::flash && r.prec == precision::fp32)
    refuse("--attention flash needs 16-bit inputs: use --precision bf16");
  if (r.zero != 0 || r.offload != offload_kind::none)
    refuse("--zero and --offload apply to training (--mode train)");
  if (r.ckpt != checkpointing::none) refuse("--checkpointing applies to training (--mode train)");
  if (r.sp) refuse("--sp applies to training (--mode train)");
}

}  // namespace

void plan_request::validate(const model_description& m) {
  check_layout(*this, m);
  if (mode == run_mode::train)
    check_train(*this, m);
  else
    check_infer(*this, m);
  if (offload != offload_kind::none && zero == 0 && mode == run_mode::train)
    zero = offload == offload_kind::params ? 3 : 2;  // offload runs through a ZeRO engine
  if (offload == offload_kind::params && mode == run_mode::train && zero != 3)
    refuse(
        "--offload params needs --zero 3 (parameters are partitioned before they are offloaded)");
}

}  // namespace vramkit::plan
