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
constexpr std::array<std::pair<const char*, precision>, 5> k_prec{
    {{"fp32", precision::fp32},
     {"amp-bf16", precision::amp_bf16},
     {"amp-fp16", precision::amp_fp16},
     {"bf16", precision::bf16},
     {"fp8", precision::fp8}}};
constexpr std::array<std::pair<const char*, optimizer_kind>, 5> k_opt{
    {{"sgd", optimizer_kind::sgd},
     {"sgd-momentum", optimizer_kind::sgd_momentum},
     {"adam", optimizer_kind::adam},
     {"adamw", optimizer_kind::adamw},
     {"adamw-8bit", optimizer_kind::adamw_8bit}}};
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
constexpr std::array<std::pair<const char*, quant_kind>, 3> k_quant{
    {{"none", quant_kind::none}, {"int8", quant_kind::int8}, {"int4", quant_kind::int4}}};
constexpr std::array<std::pair<const char*, serving_kind>, 2> k_serve{
    {{"generate", serving_kind::generate}, {"paged", serving_kind::paged}}};

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

void plan_request::validate(const model_description& m) {
  constexpr std::int64_t k_max_batch = 1 << 20;
  constexpr std::int64_t k_max_tokens = 1 << 24;
  if (gpus < 1 || gpus > 65536) refuse(fmt::format("--gpus {} must be in [1, 65536]", gpus));
  if (gpus_per_node < 1 || gpus_per_node > 64)
    refuse(fmt::format("gpus per node {} must be in [1, 64]", gpus_per_node));
  if (tp < 1 || pp < 1) refuse(fmt::format("--tp {} and --pp {} must be at least 1", tp, pp));
  if (gpus % (tp * pp) != 0)
    refuse(fmt::format("--gpus {} is not a multiple of --tp {} x --pp {}", gpus, tp, pp));
  if (zero < 0 || zero > 3) refuse(fmt::format("--zero {} must be 0, 1, 2 or 3", zero));
  if (batch < 1 || batch > k_max_batch)
    refuse(fmt::format("--batch {} must be in [1, {}]", batch, k_max_batch));
  if (steps < 1 || steps > 16) refuse(fmt::format("steps {} must be in [1, 16]", steps));
  const int dp = data_parallel();
  if (m.is_vision()) {
    if (image_size < 16 || image_size > 8192)
      refuse(fmt::format("--image-size {} must be in [16, 8192]", image_size));
    if (m.family == model_family::vit && image_size % m.vit.patch != 0)
      refuse(fmt::format("--image-size {} is not a multiple of the patch size {}", image_size,
                         m.vit.patch));
    if (mode == run_mode::infer && (prompt != 0 || new_tokens != 0))
      refuse("--prompt/--new-tokens apply to language models, not to " + m.name);
    if (tp > 1 || pp > 1) refuse("--tp/--pp are modelled for transformers only, not for " + m.name);
  } else {
    const auto& t = m.t;
    if (tp > 1 && (t.heads % tp != 0))
      refuse(fmt::format("--tp {} does not divide the {} attention heads", tp, t.heads));
    if (pp > t.layers) refuse(fmt::format("--pp {} exceeds the {} layers", pp, t.layers));
  }
  if (mode == run_mode::train) {
    if (m.is_vision()) {
      seq = 0;
    } else {
      if (seq == 0)
        seq = m.t.max_positions > 0 ? std::min<std::int64_t>(1024, m.t.max_positions) : 1024;
      if (seq < 1 || seq > k_max_tokens)
        refuse(fmt::format("--seq {} must be in [1, {}]", seq, k_max_tokens));
      if (m.t.max_positions > 0 && seq > m.t.max_positions)
        refuse(fmt::format("--seq {} exceeds the model's {} learned positions", seq,
                           m.t.max_positions));
    }
    if (batch % dp != 0)
      refuse(fmt::format("--batch {} is not divisible by the {} data-parallel ranks", batch, dp));
    if (micro_batch == 0) micro_batch = batch / dp;
    if (micro_batch < 1 || (batch / dp) % micro_batch != 0)
      refuse(fmt::format("--micro-batch {} must divide the per-GPU batch {}", micro_batch,
                         batch / dp));
    if (quant != quant_kind::none)
      refuse("--quant applies to inference (--mode infer); training keeps full-precision weights");
  } else {
    if (m.is_vision()) {
      prompt = new_tokens = 0;
    } else {
      if (prompt == 0) prompt = seq > 0 ? seq : 512;
      if (new_tokens == 0) new_tokens = 128;
      if (prompt < 1 || prompt > k_max_tokens)
        refuse(fmt::format("--prompt {} must be in [1, {}]", prompt, k_max_tokens));
      if (new_tokens < 1 || new_tokens > k_max_tokens)
        refuse(fmt::format("--new-tokens {} must be in [1, {}]", new_tokens, k_max_tokens));
      if (m.t.max_positions > 0 && prompt + new_tokens > m.t.max_positions)
        refuse(fmt::format("--prompt {} + --new-tokens {} exceeds the model's {} positions", prompt,
                           new_tokens, m.t.max_positions));
    }
    micro_batch = batch;
    if (zero != 0 || offload == offload_kind::optimizer)
      refuse("--zero and --offload optimizer apply to training (--mode train)");
    if (ckpt != checkpointing::none) refuse("--checkpointing applies to training (--mode train)");
  }
  if (offload != offload_kind::none && zero == 0 && mode == run_mode::train)
    zero = offload == offload_kind::params ? 3 : 2;  // offload runs through a ZeRO engine
  if (offload == offload_kind::params && mode == run_mode::train && zero != 3)
    refuse(
        "--offload params needs --zero 3 (parameters are partitioned before they are offloaded)");
}

}  // namespace vramkit::plan
