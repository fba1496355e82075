// Hugging Face config.json and built-in preset parsing. Field names and defaults follow the
// transformers configuration classes (GPT2Config, LlamaConfig, MistralConfig, Qwen2Config,
// GPTNeoXConfig, BertConfig); torchvision shapes use vramkit's own small schema.
#include "vramkit/plan/config_loader.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "embedded_data.hpp"
#include "vramkit/core/error.hpp"

namespace vramkit::plan {

namespace {

using json = nlohmann::json;

// The model types the loader reads, five to a row.
// clang-format off
const std::vector<std::string> k_model_types = {
    "gpt2",        "llama",       "mistral",     "qwen2",       "qwen3",
    "phi3",        "mixtral",     "qwen2_moe",   "qwen3_moe",   "deepseek_v2",
    "deepseek_v3", "gemma2",      "gemma3",      "gemma3_text", "gpt_neox",
    "falcon",      "t5",          "llava",       "bert",        "roberta",
    "xlm-roberta", "vit",         "torchvision_resnet",         "torchvision_vit"};
// clang-format on

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

/// Field access with errors that name the file and the field.
struct fields {
  const json& j;
  std::string source;

  [[noreturn]] void fail(const std::string& what) const {
    throw invalid_input(fmt::format("{}: {}", source, what));
  }
  bool has(const char* k) const { return j.contains(k) && !j.at(k).is_null(); }

  std::int64_t integer(const char* k, std::int64_t lo, std::int64_t hi) const {
    if (!has(k)) fail(fmt::format("missing field '{}'", k));
    return integer_value(k, lo, hi);
  }
  std::int64_t integer_or(const char* k, std::int64_t dflt, std::int64_t lo,
                          std::int64_t hi) const {
    return has(k) ? integer_value(k, lo, hi) : dflt;
  }
  std::int64_t integer_value(const char* k, std::int64_t lo, std::int64_t hi) const {
    const json& v = j.at(k);
    if (!v.is_number_integer() &&
        !(v.is_number_float() && std::floor(v.get<double>()) == v.get<double>()))
      fail(fmt::format("field '{}' must be an integer, got {}", k, v.dump()));
    // Range-check before converting: 1e30 (or an unsigned past INT64_MAX) would wrap to INT64_MIN.
    const bool in_range = v.is_number_unsigned()
                              ? v.get<std::uint64_t>() <= static_cast<std::uint64_t>(hi)
                          : v.is_number_integer() ? true
                                                  : v.get<double>() >= static_cast<double>(lo) &&
                                                        v.get<double>() <= static_cast<double>(hi);
    if (!in_range)
      fail(fmt::format("field '{}' = {} is out of range [{}, {}]", k, v.dump(), lo, hi));
    const auto x =
        v.is_number_integer() ? v.get<std::int64_t>() : static_cast<std::int64_t>(v.get<double>());
    if (x < lo || x > hi)
      fail(fmt::format("field '{}' = {} is out of range [{}, {}]", k, x, lo, hi));
    return x;
  }
  double number_or(const char* k, double dflt, double lo, double hi) const {
    if (!has(k)) return dflt;
    const json& v = j.at(k);
    if (!v.is_number()) fail(fmt::format("field '{}' must be a number, got {}", k, v.dump()));
    const double x = v.get<double>();
    if (!(x >= lo && x <= hi))
      fail(fmt::format("field '{}' = {} is out of range [{}, {}]", k, x, lo, hi));
    return x;
  }
  bool boolean_or(const char* k, bool dflt) const {
    if (!has(k)) return dflt;
    if (!j.at(k).is_boolean())
      fail(fmt::format("field '{}' must be true or false, got {}", k, j.at(k).dump()));
    return j.at(k).get<bool>();
  }
  std::string string_or(const char* k, const std::string& dflt) const {
    if (!has(k)) return dflt;
    if (!j.at(k).is_string())
      fail(fmt::format("field '{}' must be a string, got {}", k, j.at(k).dump()));
    return j.at(k).get<std::string>();
  }
};

constexpr std::int64_t k_max_hidden = 1 << 17;
constexpr std::int64_t k_max_layers = 1024;
constexpr std::int64_t k_max_vocab = 1 << 24;
constexpr std::int64_t k_max_positions = 1 << 24;

// The shape fields Hugging Face configs of the LLaMA, GPT-NeoX and BERT families share. Key and
// value heads default to the attention heads (no grouped-query attention).
/// hidden_size, num_hidden_layers and num_attention_heads (as many key/value heads).
void read_hf_layers(const fields& f, transformer_shape& t) {
  t.hidden = f.integer("hidden_size", 1, k_max_hidden);
  t.layers = f.integer("num_hidden_layers", 1, k_max_layers);
  t.heads = f.integer("num_attention_heads", 1, 4096);
  t.kv_heads = t.heads;
}

/// LayerNorm and a GELU MLP, with the attention and hidden dropout probabilities of the family's
/// field names (`p` where the config leaves them out).
void read_layer_norm_gelu(const fields& f, transformer_shape& t, const char* attention_key,
                          const char* hidden_key, double p) {
  t.layer_norm = true;
  t.mlp = mlp_kind::gelu;
  t.attention_dropout = f.number_or(attention_key, p, 0, 1);
  t.hidden_dropout = f.number_or(hidden_key, p, 0, 1);
}

/// read_hf_layers, the MLP's inner size under `inner_key` (4 x hidden when `inner_default` and the
/// config leaves it out), vocab_size and max_position_embeddings.
void read_hf_shape(const fields& f, transformer_shape& t,
                   const char* inner_key = "intermediate_size", bool inner_default = false) {
  read_hf_layers(f, t);
  t.intermediate = inner_default ? f.integer_or(inner_key, 4 * t.hidden, 1, 64 * k_max_hidden)
                                 : f.integer(inner_key, 1, 64 * k_max_hidden);
  t.vocab = f.integer("vocab_size", 1, k_max_vocab);
  t.max_context = f.integer_or("max_position_embeddings", 0, 1, k_max_positions);
}

/// A model of `family` with read_hf_shape's fields.
model_description hf_model(const fields& f, model_family family) {
  model_description m;
  m.family = family;
  read_hf_shape(f, m.t);
  return m;
}

/// Sliding-window layers: transformers 5 configs list them in layer_types; older Mistral configs
/// give sliding_window for every layer; Qwen2 applies it from max_window_layers on when
/// use_sliding_window is set.
void read_sliding_window(const fields& f, transformer_shape& t, const std::string& type) {
  t.sliding_window = f.integer_or("sliding_window", 0, 1, k_max_positions);
  t.sliding_layers.clear();
  if (t.sliding_window == 0) return;
  t.sliding_layers.assign(static_cast<std::size_t>(t.layers), 0);
  if (f.has("layer_types")) {
    const auto& lt = f.j.at("layer_types");
    if (!lt.is_array() || lt.size() != static_cast<std::size_t>(t.layers))
      f.fail(fmt::format("field 'layer_types' must list the {} layers", t.layers));
    for (std::size_t l = 0; l < lt.size(); ++l)
      t.sliding_layers[l] = lt[l].is_string() && lt[l].get<std::string>() == "sliding_attention";
    return;
  }
  if (type == "qwen2") {
    if (!f.boolean_or("use_sliding_window", false)) return;
    const auto from = f.integer_or("max_window_layers", t.layers, 0, k_max_layers);
    for (std::int64_t l = from; l < t.layers; ++l) t.sliding_layers[l] = 1;
    return;
  }
  t.sliding_layers.assign(static_cast<std::size_t>(t.layers), 1);
}

/// quantization_config of a quantised checkpoint: AWQ and GPTQ (bits, group_size),
/// bitsandbytes (load_in_4bit as NF4/FP4, load_in_8bit), fp8 checkpoints.
stored_weights read_quantization(const fields& f) {
  stored_weights w;
  if (!f.has("quantization_config")) return w;
  const auto& qj = f.j.at("quantization_config");
  if (!qj.is_object()) f.fail("field 'quantization_config' must be an object");
  const fields q{qj, f.source + ": quantization_config"};
  w.method = q.string_or("quant_method", "");
  if (w.method == "awq" || w.method == "gptq") {
    const auto bits = q.has("bits") ? q.integer("bits", 2, 8) : q.integer_or("w_bit", 4, 2, 8);
    if (bits != 4 && bits != 8)
      q.fail(fmt::format("{} with {} bits is not modelled (4 or 8)", w.method, bits));
    w.quant = bits == 4 ? quant_kind::int4 : quant_kind::int8;
    const auto g = q.has("group_size") ? q.integer("group_size", -1, 1 << 20)
                                       : q.integer_or("q_group_size", 128, -1, 1 << 20);
    w.group_size = g <= 0 ? 1 << 20 : static_cast<int>(g);  // -1: one scale per output row
  } else if (w.method == "bitsandbytes") {
    if (q.boolean_or("load_in_4bit", false)) {
      w.quant = quant_kind::nf4;
      w.group_size = 64;
    } else if (q.boolean_or("load_in_8bit", false)) {
      w.quant = quant_kind::int8;
    } else {
      q.fail("bitsandbytes without load_in_4bit or load_in_8bit");
    }
  } else if (w.method == "fp8" || w.method == "fbgemm_fp8") {
    w.quant = quant_kind::fp8;
  } else {
    q.fail(fmt::format("quant_method \"{}\" is not modelled (awq, gptq, bitsandbytes, fp8)",
                       w.method));
  }
  return w;
}

void check_heads(const fields& f, transformer_shape& t, const char* heads_key) {
  if (t.hidden % t.heads != 0 && t.head_dim == 0)
    f.fail(fmt::format("hidden size {} is not divisible by {} = {}", t.hidden, heads_key, t.heads));
  if (t.head_dim == 0) t.head_dim = t.hidden / t.heads;
  if (t.heads % t.kv_heads != 0)
    f.fail(fmt::format("num_attention_heads {} is not a multiple of num_key_value_heads {}",
                       t.heads, t.kv_heads));
}

model_description parse_gpt2(const fields& f) {
  model_description m;
  m.family = model_family::gpt2;
  auto& t = m.t;
  t.hidden = f.integer("n_embd", 1, k_max_hidden);
  t.layers = f.integer("n_layer", 1, k_max_layers);
  t.heads = f.integer("n_head", 1, 4096);
  t.kv_heads = t.heads;
  t.vocab = f.integer("vocab_size", 1, k_max_vocab);
  t.max_positions = f.integer_or("n_positions", 1024, 1, k_max_positions);
  t.intermediate = f.integer_or("n_inner", 4 * t.hidden, 1, 16 * k_max_hidden);
  const auto act = f.string_or("activation_function", "gelu_new");
  if (act == "gelu_new")
    t.mlp = mlp_kind::gelu_python;
  else if (act == "gelu" || act == "gelu_pytorch_tanh" || act == "gelu_fast" || act == "relu")
    t.mlp = mlp_kind::gelu;
  else
    f.fail(
        fmt::format("field 'activation_function' = \"{}\" is not supported (gelu_new, gelu, "
                    "gelu_pytorch_tanh, relu)",
                    act));
  t.tied_embeddings = f.boolean_or("tie_word_embeddings", true);
  t.qkv_bias = t.out_bias = t.mlp_bias = true;
  t.layer_norm = true;
  t.attention_dropout = f.number_or("attn_pdrop", 0.1, 0, 1);
  t.hidden_dropout = f.number_or("resid_pdrop", 0.1, 0, 1);
  t.embedding_dropout = f.number_or("embd_pdrop", 0.1, 0, 1);
  check_heads(f, t, "n_head");
  return m;
}

/// LLaMA-shaped attention and MLP: read_hf_shape's fields, num_key_value_heads (as many as
/// the query heads when left out), head_dim (`head_dim` when left out; 0: hidden / heads),
/// rotary positions over the whole head and no position table, a gated MLP.
void read_llama_shape(const fields& f, transformer_shape& t, std::int64_t head_dim) {
  read_hf_shape(f, t);
  t.kv_heads = f.integer_or("num_key_value_heads", t.heads, 1, 4096);
  t.head_dim = f.integer_or("head_dim", head_dim, 1, 4096);
  t.max_positions = 0;
  t.rotary_fraction = 1.0;
  t.mlp = mlp_kind::swiglu;
}

model_description parse_llama_like(const fields& f, const std::string& type) {
  model_description m;
  m.family = model_family::llama;
  auto& t = m.t;
  read_llama_shape(f, t, 0);
  const auto act = f.string_or("hidden_act", "silu");
  if (act != "silu" && act != "swish")
    f.fail(fmt::format("field 'hidden_act' = \"{}\" is not supported for {} (silu)", act, type));
  t.tied_embeddings = f.boolean_or("tie_word_embeddings", false);
  // Qwen2 (and Qwen2-MoE) always has q/k/v biases; LLaMA and Mistral take attention_bias
  // (default false).
  const bool qwen2 = type == "qwen2" || type == "qwen2_moe";
  t.qkv_bias = qwen2 ? true : f.boolean_or("attention_bias", false);
  t.out_bias = qwen2 ? false : t.qkv_bias;
  t.mlp_bias = f.boolean_or("mlp_bias", false);
  t.layer_norm = false;
  t.attention_dropout = f.number_or("attention_dropout", 0.0, 0, 1);
  // Qwen3 (dense and MoE) normalises each query and key head (RMSNorm over head_dim).
  t.qk_norm = type == "qwen3" || type == "qwen3_moe";
  check_heads(f, t, "num_attention_heads");
  read_sliding_window(f, t, type.rfind("qwen", 0) == 0 ? "qwen2" : type);
  return m;
}

/// Which layers are MoE blocks: Qwen2/3-MoE every decoder_sparse_step-th layer outside
/// mlp_only_layers; DeepSeek from first_k_dense_replace on, every moe_layer_freq-th.
void read_sparse_layers(const fields& f, transformer_shape& t, const std::string& type) {
  auto& moe = t.moe;
  moe.sparse.assign(static_cast<std::size_t>(t.layers), 1);
  if (type == "qwen2_moe" || type == "qwen3_moe") {
    const auto step = f.integer_or("decoder_sparse_step", 1, 1, k_max_layers);
    for (std::int64_t l = 0; l < t.layers; ++l) moe.sparse[l] = (l + 1) % step == 0;
    if (f.has("mlp_only_layers")) {
      const auto& a = f.j.at("mlp_only_layers");
      if (!a.is_array()) f.fail("field 'mlp_only_layers' must be an array of layer indices");
      for (const auto& v : a) {
        if (!v.is_number_integer() || v.get<std::int64_t>() < 0 ||
            v.get<std::int64_t>() >= t.layers)
          f.fail(fmt::format("field 'mlp_only_layers' holds {}, not a layer index below {}",
                             v.dump(), t.layers));
        moe.sparse[v.get<std::size_t>()] = 0;
      }
    }
  } else if (type == "deepseek_v2" || type == "deepseek_v3") {
    const auto first = f.integer_or("first_k_dense_replace", 0, 0, k_max_layers);
    const auto freq = f.integer_or("moe_layer_freq", 1, 1, k_max_layers);
    for (std::int64_t l = 0; l < t.layers; ++l) moe.sparse[l] = l >= first && l % freq == 0;
  }
}

void check_moe(const fields& f, const moe_shape& moe) {
  if (moe.top_k > moe.experts)
    f.fail(fmt::format("num_experts_per_tok {} exceeds the {} experts", moe.top_k, moe.experts));
}

/// Mixtral, Qwen2-MoE, Qwen3-MoE: LLaMA-shaped attention with sparse MoE blocks.
model_description parse_moe(const fields& f, const std::string& type) {
  model_description m = parse_llama_like(f, type);
  m.family = model_family::moe;
  auto& t = m.t;
  auto& moe = t.moe;
  if (type == "mixtral") {
    moe.experts = f.integer("num_local_experts", 1, 1 << 16);
    moe.expert_ffn = t.intermediate;
  } else {
    moe.experts = f.integer("num_experts", 1, 1 << 16);
    moe.expert_ffn = f.integer("moe_intermediate_size", 1, 64 * k_max_hidden);
  }
  moe.top_k = f.integer("num_experts_per_tok", 1, 1 << 16);
  if (type == "qwen2_moe") {
    moe.shared_ffn = f.integer_or("shared_expert_intermediate_size", 0, 0, 64 * k_max_hidden);
    moe.shared_gate = moe.shared_ffn > 0;
  }
  read_sparse_layers(f, t, type);
  check_moe(f, moe);
  return m;
}

/// DeepSeek-V2 / V3: multi-head latent attention, dense MLPs in the first layers, then MoE
/// blocks with n_shared_experts shared experts of moe_intermediate_size each.
model_description parse_deepseek(const fields& f, const std::string& type) {
  model_description m = hf_model(f, model_family::deepseek);
  auto& t = m.t;
  t.kv_heads = f.integer_or("num_key_value_heads", t.heads, 1, 4096);
  auto& mla = t.mla;
  mla.q_lora_rank = f.integer_or("q_lora_rank", 0, 1, k_max_hidden);
  mla.kv_lora_rank = f.integer("kv_lora_rank", 1, k_max_hidden);
  mla.qk_nope = f.integer("qk_nope_head_dim", 0, 4096);
  mla.qk_rope = f.integer("qk_rope_head_dim", 1, 4096);
  mla.v_head = f.integer("v_head_dim", 1, 4096);
  t.head_dim = mla.qk_nope + mla.qk_rope;
  t.rotary_fraction = static_cast<double>(mla.qk_rope) / static_cast<double>(t.head_dim);
  t.mlp = mlp_kind::swiglu;
  const auto act = f.string_or("hidden_act", "silu");
  if (act != "silu")
    f.fail(fmt::format("field 'hidden_act' = \"{}\" is not supported for {} (silu)", act, type));
  t.tied_embeddings = f.boolean_or("tie_word_embeddings", false);
  if (f.boolean_or("attention_bias", false))
    f.fail("attention_bias = true is not modelled for " + type);
  t.layer_norm = false;
  t.attention_dropout = f.number_or("attention_dropout", 0.0, 0, 1);
  auto& moe = t.moe;
  moe.experts = f.integer_or("n_routed_experts", 0, 0, 1 << 16);
  if (moe.experts > 0) {
    moe.top_k = f.integer("num_experts_per_tok", 1, 1 << 16);
    moe.expert_ffn = f.integer("moe_intermediate_size", 1, 64 * k_max_hidden);
    moe.shared_ffn = f.integer_or("n_shared_experts", 0, 0, 1 << 10) * moe.expert_ffn;
    read_sparse_layers(f, t, type);
    check_moe(f, moe);
  }
  return m;
}

/// Phi-3: LLaMA-shaped with packed qkv_proj and gate_up_proj (the parameter tensors are the same).
model_description parse_phi3(const fields& f) {
  model_description m = parse_llama_like(f, "phi3");
  m.family = model_family::phi3;
  m.t.mlp = mlp_kind::swiglu_packed;
  if (f.number_or("partial_rotary_factor", 1.0, 0, 1) != 1.0)
    f.fail("partial_rotary_factor below 1 is not modelled for phi3");
  return m;
}

/// Gemma-2 and Gemma-3 (text): LLaMA-shaped attention with an explicit head_dim, GeGLU MLP,
/// Gemma RMSNorm before and after attention and MLP, embeddings scaled by sqrt(hidden), tied head;
/// Gemma-2 soft-caps attention scores and logits; sliding-window layers alternate (Gemma-2: every
/// other layer from the first; Gemma-3: five of every sliding_window_pattern) unless layer_types
/// lists them.
model_description parse_gemma(const fields& f, const std::string& type) {
  model_description m;
  m.family = model_family::gemma;
  auto& t = m.t;
  // gate/up/down; the gate's GELU (tanh) saves what SiLU saves.
  read_llama_shape(f, t, 256);
  const auto act = f.string_or("hidden_activation", f.string_or("hidden_act", "gelu_pytorch_tanh"));
  if (act != "gelu_pytorch_tanh" && act != "gelu" && act != "gelu_new")
    f.fail(
        fmt::format("field 'hidden_activation' = \"{}\" is not supported for {} "
                    "(gelu_pytorch_tanh)",
                    act, type));
  t.tied_embeddings = f.boolean_or("tie_word_embeddings", true);
  t.qkv_bias = t.out_bias = f.boolean_or("attention_bias", false);
  t.layer_norm = false;
  t.gemma_norm = t.sandwich_norm = t.embed_scale = true;
  t.qk_norm = type == "gemma3_text";
  t.attention_dropout = f.number_or("attention_dropout", 0.0, 0, 1);
  t.attn_softcap = f.number_or("attn_logit_softcapping", 0.0, 0, 1e6);
  t.final_softcap = f.number_or("final_logit_softcapping", 0.0, 0, 1e6);
  check_heads(f, t, "num_attention_heads");
  t.sliding_window = f.integer_or("sliding_window", 0, 1, k_max_positions);
  t.sliding_layers.clear();
  if (t.sliding_window > 0) {
    if (f.has("layer_types")) {
      read_sliding_window(f, t, type);
    } else {
      const auto pattern =
          type == "gemma2" ? 2 : f.integer_or("sliding_window_pattern", 6, 1, k_max_layers);
      t.sliding_layers.assign(static_cast<std::size_t>(t.layers), 0);
      for (std::int64_t l = 0; l < t.layers; ++l) t.sliding_layers[l] = (l + 1) % pattern != 0;
    }
  }
  return m;
}

/// Gemma-3's image-text model (Gemma3ForConditionalGeneration, which AutoModelForCausalLM builds
/// for model_type gemma3) on text batches: the gemma3_text language model, with
/// Gemma3TextConfig's defaults for the fields the published configs leave out, beside the SigLIP
/// vision tower (patch convolution, position table, pre-LN encoder layers with biases, post
/// norm) and the projector (mm_soft_emb_norm, mm_input_projection_weight), which a text batch
/// never runs.
model_description parse_gemma3(const fields& f) {
  if (!f.has("text_config") || !f.j.at("text_config").is_object())
    f.fail("gemma3 needs a 'text_config' object");
  json text = f.j.at("text_config");
  const json defaults = {{"vocab_size", 262208},      {"hidden_size", 2304},
                         {"intermediate_size", 9216}, {"num_hidden_layers", 26},
                         {"num_attention_heads", 8},  {"num_key_value_heads", 4},
                         {"head_dim", 256},           {"max_position_embeddings", 131072},
                         {"sliding_window", 4096}};
  for (const auto& [k, v] : defaults.items())
    if (!text.contains(k) || text.at(k).is_null()) text[k] = v;
  const std::string tt = text.value("model_type", "gemma3_text");
  if (tt != "gemma3_text")
    f.fail(fmt::format("gemma3 with a {} language model is not modelled (gemma3_text)", tt));
  const fields tf{text, f.source + ": text_config"};
  model_description m = parse_gemma(tf, "gemma3_text");
  json vision = f.has("vision_config") ? f.j.at("vision_config") : json::object();
  if (!vision.is_object()) f.fail("field 'vision_config' must be an object");
  const fields vf{vision, f.source + ": vision_config"};
  if (vf.boolean_or("vision_use_head", false))
    vf.fail("vision_use_head = true is not modelled (Gemma-3 has no pooling head)");
  const auto vh = vf.integer_or("hidden_size", 1152, 1, k_max_hidden);
  const auto layers = vf.integer_or("num_hidden_layers", 27, 1, k_max_layers);
  const auto ffn = vf.integer_or("intermediate_size", 4304, 1, 64 * k_max_hidden);
  const auto patch = vf.integer_or("patch_size", 14, 1, 1024);
  const auto image = vf.integer_or("image_size", 896, 1, 1 << 14);
  const auto channels = vf.integer_or("num_channels", 3, 1, 64);
  if (image % patch != 0) vf.fail("image_size must be a multiple of patch_size");
  const std::int64_t grid = (image / patch) * (image / patch);
  const std::int64_t per_layer = 4 * (vh * vh + vh) + 4 * vh + (vh * ffn + ffn) + (ffn * vh + vh);
  const std::int64_t tower =
      channels * patch * patch * vh + vh + grid * vh + layers * per_layer + 2 * vh;
  m.idle_vision_parameters = tower + vh * m.t.hidden + vh;
  m.vit.hidden = vh;  // its shape, for the LoRA adapters PEFT adds to its attention
  m.vit.layers = layers;
  m.vit.mlp_dim = ffn;
  m.vit.patch = patch;
  m.vit.image = image;
  m.vit.channels = channels;
  return m;
}

/// Falcon: one fused query_key_value projection (multi-query: 2 extra heads; the new decoder
/// architecture: num_kv_heads groups of heads + 2), full rotary, attention and MLP in parallel
/// (Falcon-7B: one LayerNorm for both; the new architecture: ln_attn and ln_mlp), 4h GELU MLP,
/// tied head.
model_description parse_falcon(const fields& f) {
  model_description m;
  m.family = model_family::falcon;
  auto& t = m.t;
  read_hf_shape(f, t, "ffn_hidden_size", true);
  if (f.boolean_or("alibi", false)) f.fail("alibi = true is not modelled for falcon");
  const bool new_arch = f.boolean_or("new_decoder_architecture", false);
  const bool mq = f.boolean_or("multi_query", true);
  t.kv_heads = new_arch ? f.integer_or("num_kv_heads", t.heads, 1, 4096) : (mq ? 1 : t.heads);
  t.head_dim = f.integer_or("head_dim", 0, 1, 4096);
  t.rotary_fraction = 1.0;
  const bool parallel = f.boolean_or("parallel_attn", true);
  if (!parallel && !new_arch) f.fail("parallel_attn = false is not modelled for falcon");
  t.parallel_residual = true;
  t.shared_parallel_norm =
      !new_arch || f.integer_or("num_ln_in_parallel_attn", new_arch ? 2 : 1, 1, 2) == 1;
  t.tied_embeddings = f.boolean_or("tie_word_embeddings", true);
  t.qkv_bias = t.out_bias = t.mlp_bias = f.boolean_or("bias", false);
  read_layer_norm_gelu(f, t, "attention_dropout", "hidden_dropout", 0.0);
  check_heads(f, t, "num_attention_heads");
  return m;
}

/// T5 / Flan-T5: d_model, d_kv per head, d_ff; feed_forward_proj "relu" (T5) or "gated-gelu"
/// (v1.1, Flan); relative-position buckets; the head tied unless tie_word_embeddings is false.
model_description parse_t5(const fields& f) {
  model_description m;
  m.family = model_family::t5;
  auto& t = m.t;
  t.hidden = f.integer("d_model", 1, k_max_hidden);
  const auto enc = f.integer("num_layers", 1, k_max_layers);
  t.decoder_layers = f.integer_or("num_decoder_layers", enc, 1, k_max_layers);
  t.layers = enc + t.decoder_layers;
  t.heads = f.integer("num_heads", 1, 4096);
  t.kv_heads = t.heads;
  t.head_dim = f.integer_or("d_kv", 64, 1, 4096);
  t.intermediate = f.integer("d_ff", 1, 64 * k_max_hidden);
  t.vocab = f.integer("vocab_size", 1, k_max_vocab);
  t.relative_buckets = f.integer_or("relative_attention_num_buckets", 32, 1, 1 << 16);
  const auto proj = f.string_or("feed_forward_proj", "relu");
  if (proj == "relu")
    t.mlp = mlp_kind::gelu;  // one activation kernel saving one tensor
  else if (proj == "gated-gelu")
    t.mlp = mlp_kind::swiglu;  // gated: wi_0 and wi_1
  else
    f.fail(fmt::format("field 'feed_forward_proj' = \"{}\" is not supported (relu, gated-gelu)",
                       proj));
  t.tied_embeddings = f.boolean_or("tie_word_embeddings", true);
  t.layer_norm = false;
  t.attention_dropout = t.hidden_dropout = f.number_or("dropout_rate", 0.1, 0, 1);
  return m;
}

/// LLaVA-1.5: a CLIP vision tower (vision_config, CLIPVisionConfig defaults), the two-layer GELU
/// projector, and a LLaMA language model (text_config, LlamaConfig defaults where the published
/// config leaves fields out); every image becomes (image/patch)^2 tokens of the prompt.
model_description parse_llava(const fields& f) {
  if (!f.has("text_config") || !f.j.at("text_config").is_object())
    f.fail("llava needs a 'text_config' object");
  json text = f.j.at("text_config");
  const std::string tt = text.value("model_type", "llama");
  if (tt != "llama")
    f.fail(fmt::format("llava with a {} language model is not modelled (llama)", tt));
  // LlamaConfig's defaults for the fields LLaVA's published config leaves out.
  const json defaults = {{"hidden_size", 4096},     {"intermediate_size", 11008},
                         {"num_hidden_layers", 32}, {"num_attention_heads", 32},
                         {"vocab_size", 32000},     {"max_position_embeddings", 2048}};
  for (const auto& [k, v] : defaults.items())
    if (!text.contains(k) || text.at(k).is_null()) text[k] = v;
  const fields tf{text, f.source + ": text_config"};
  model_description m = parse_llama_like(tf, "llama");
  m.family = model_family::llava;
  m.t.tied_embeddings = f.boolean_or("tie_word_embeddings", false);
  json vision = f.has("vision_config") ? f.j.at("vision_config") : json::object();
  if (!vision.is_object()) f.fail("field 'vision_config' must be an object");
  const fields vf{vision, f.source + ": vision_config"};
  auto& v = m.vit;
  v.hidden = vf.integer_or("hidden_size", 768, 1, k_max_hidden);
  v.layers = vf.integer_or("num_hidden_layers", 12, 1, k_max_layers);
  v.heads = vf.integer_or("num_attention_heads", 12, 1, 4096);
  v.mlp_dim = vf.integer_or("intermediate_size", 3072, 1, 64 * k_max_hidden);
  v.patch = vf.integer_or("patch_size", 32, 1, 1024);
  v.image = vf.integer_or("image_size", 224, 1, 1 << 14);
  v.channels = vf.integer_or("num_channels", 3, 1, 64);
  if (v.image % v.patch != 0 || v.hidden % v.heads != 0)
    vf.fail("image_size must be a multiple of patch_size and hidden_size of num_attention_heads");
  if (f.string_or("vision_feature_select_strategy", "default") != "default")
    f.fail("vision_feature_select_strategy other than \"default\" is not modelled");
  return m;
}

model_description parse_neox(const fields& f) {
  model_description m = hf_model(f, model_family::gpt_neox);
  auto& t = m.t;
  t.rotary_fraction = f.number_or("rotary_pct", 0.25, 0, 1);
  t.parallel_residual = f.boolean_or("use_parallel_residual", true);
  t.tied_embeddings = f.boolean_or("tie_word_embeddings", false);
  t.qkv_bias = t.out_bias = f.boolean_or("attention_bias", true);
  t.mlp_bias = true;
  read_layer_norm_gelu(f, t, "attention_dropout", "hidden_dropout", 0.0);
  check_heads(f, t, "num_attention_heads");
  return m;
}

model_description parse_bert(const fields& f) {
  model_description m = hf_model(f, model_family::bert);
  auto& t = m.t;
  t.max_positions = f.integer_or("max_position_embeddings", 512, 1, k_max_positions);
  t.type_vocab = f.integer_or("type_vocab_size", 2, 0, 1 << 16);
  t.tied_embeddings = f.boolean_or("tie_word_embeddings", true);
  t.qkv_bias = t.out_bias = t.mlp_bias = true;
  read_layer_norm_gelu(f, t, "attention_probs_dropout_prob", "hidden_dropout_prob", 0.1);
  t.embedding_dropout = t.hidden_dropout;
  // RoBERTa numbers positions from padding_idx + 1: two rows of its table are never used.
  if (f.string_or("model_type", "") != "bert")
    t.max_context = t.max_positions - f.integer_or("pad_token_id", 1, 0, 1 << 20) - 1;
  check_heads(f, t, "num_attention_heads");
  return m;
}

/// transformers' ViTForImageClassification: a pre-norm encoder over the image's patches and a
/// class token; the classifier has one row per label (id2label, num_labels or 2).
model_description parse_hf_vit(const fields& f) {
  model_description m;
  m.family = model_family::hf_vit;
  auto& t = m.t;
  read_hf_layers(f, t);
  t.intermediate = f.integer("intermediate_size", 1, 64 * k_max_hidden);
  m.vit.patch = f.integer_or("patch_size", 16, 1, 1024);
  m.vit.image = f.integer_or("image_size", 224, 1, 1 << 14);
  m.vit.channels = f.integer_or("num_channels", 3, 1, 64);
  if (m.vit.image % m.vit.patch != 0)
    f.fail(
        fmt::format("image_size {} is not a multiple of patch_size {}", m.vit.image, m.vit.patch));
  t.max_positions = (m.vit.image / m.vit.patch) * (m.vit.image / m.vit.patch) + 1;
  std::int64_t labels = f.integer_or("num_labels", 2, 1, 1 << 24);
  if (f.has("id2label")) {
    if (!f.j.at("id2label").is_object()) f.fail("field 'id2label' must be an object");
    labels = static_cast<std::int64_t>(f.j.at("id2label").size());
  }
  t.vocab = labels;
  t.tied_embeddings = false;
  t.qkv_bias = f.boolean_or("qkv_bias", true);
  t.out_bias = t.mlp_bias = true;
  const auto act = f.string_or("hidden_act", "gelu");
  if (act != "gelu")
    f.fail(fmt::format("field 'hidden_act' = \"{}\" is not supported (gelu)", act));
  read_layer_norm_gelu(f, t, "attention_probs_dropout_prob", "hidden_dropout_prob", 0.0);
  check_heads(f, t, "num_attention_heads");
  return m;
}

model_description parse_resnet(const fields& f) {
  model_description m;
  m.family = model_family::resnet;
  const auto block = f.string_or("block", "");
  if (block != "basic" && block != "bottleneck")
    f.fail(R"(field 'block' must be "basic" or "bottleneck")");
  m.resnet.bottleneck = block == "bottleneck";
  if (!f.has("layers") || !f.j.at("layers").is_array() || f.j.at("layers").size() != 4)
    f.fail("field 'layers' must be an array of 4 block counts");
  for (int i = 0; i < 4; ++i) {
    const auto& v = f.j.at("layers")[i];
    if (!v.is_number_integer() || v.get<int>() < 1 || v.get<int>() > 256)
      f.fail(fmt::format("field 'layers'[{}] must be an integer in [1, 256]", i));
    m.resnet.blocks[i] = v.get<int>();
  }
  m.resnet.num_classes = f.integer_or("num_classes", 1000, 1, 1 << 24);
  return m;
}

model_description parse_vit(const fields& f) {
  model_description m;
  m.family = model_family::vit;
  auto& v = m.vit;
  v.patch = f.integer("patch_size", 1, 1024);
  v.hidden = f.integer("hidden_dim", 1, k_max_hidden);
  v.layers = f.integer("num_layers", 1, k_max_layers);
  v.heads = f.integer("num_heads", 1, 4096);
  v.mlp_dim = f.integer("mlp_dim", 1, 64 * k_max_hidden);
  v.num_classes = f.integer_or("num_classes", 1000, 1, 1 << 24);
  if (v.hidden % v.heads != 0)
    f.fail(fmt::format("hidden_dim {} is not divisible by num_heads {}", v.hidden, v.heads));
  return m;
}

std::string stem_of(std::string_view path) {
  auto s = std::string(path);
  const auto slash = s.find_last_of('/');
  if (slash != std::string::npos) s = s.substr(slash + 1);
  const auto dot = s.rfind(".json");
  if (dot != std::string::npos && dot + 5 == s.size()) s = s.substr(0, dot);
  return s;
}

}  // namespace

std::vector<std::string> supported_model_types() { return k_model_types; }

model_description parse_model_config(std::string_view json_text, std::string_view source) {
  json j;
  try {
    j = json::parse(json_text);
  } catch (const json::exception& e) {
    throw invalid_input(fmt::format("{}: not valid JSON: {}", source, e.what()));
  }
  if (!j.is_object())
    throw invalid_input(fmt::format("{}: a config.json must be a JSON object", source));
  const fields f{j, std::string(source)};
  if (!f.has("model_type"))
    f.fail("missing field 'model_type' (supported: " + join(k_model_types) + ")");
  const auto type = f.string_or("model_type", "");
  model_description m;
  if (type == "gpt2")
    m = parse_gpt2(f);
  else if (type == "llama" || type == "mistral" || type == "qwen2" || type == "qwen3")
    m = parse_llama_like(f, type);
  else if (type == "phi3")
    m = parse_phi3(f);
  else if (type == "mixtral" || type == "qwen2_moe" || type == "qwen3_moe")
    m = parse_moe(f, type);
  else if (type == "deepseek_v2" || type == "deepseek_v3")
    m = parse_deepseek(f, type);
  else if (type == "gpt_neox")
    m = parse_neox(f);
  else if (type == "falcon")
    m = parse_falcon(f);
  else if (type == "t5")
    m = parse_t5(f);
  else if (type == "llava")
    m = parse_llava(f);
  else if (type == "bert" || type == "roberta" || type == "xlm-roberta")
    m = parse_bert(f);
  else if (type == "gemma2" || type == "gemma3_text")
    m = parse_gemma(f, type);
  else if (type == "gemma3")
    m = parse_gemma3(f);
  else if (type == "vit")
    m = parse_hf_vit(f);
  else if (type == "torchvision_resnet")
    m = parse_resnet(f);
  else if (type == "torchvision_vit")
    m = parse_vit(f);
  else
    f.fail(fmt::format("unsupported model_type \"{}\"; supported: {}", type, join(k_model_types)));
  // transformers 5 writes "dtype", earlier versions "torch_dtype".
  m.torch_dtype = f.string_or("dtype", f.string_or("torch_dtype", ""));
  m.weights = read_quantization(f);
  m.source = std::string(source);
  m.name = stem_of(source);
  return m;
}

model_description load_model_config(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw invalid_input(fmt::format("{}: cannot read the config file", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_model_config(ss.str(), path);
}

std::vector<std::vector<std::int64_t>> parse_expert_load(std::string_view json_text,
                                                         std::string_view source) {
  json doc;
  try {
    doc = json::parse(json_text);
  } catch (const json::exception& e) {
    throw invalid_input(fmt::format("{}: not valid JSON ({})", source, e.what()));
  }
  const json* calls = &doc;
  if (doc.is_object()) {
    if (!doc.contains("calls"))
      throw invalid_input(fmt::format("{}: an expert load needs a \"calls\" array", source));
    calls = &doc.at("calls");
  }
  if (!calls->is_array() || calls->empty())
    throw invalid_input(
        fmt::format("{}: an expert load is a non-empty array of token counts "
                    "per expert, one entry per MoE forward",
                    source));
  std::vector<std::vector<std::int64_t>> load;
  for (std::size_t i = 0; i < calls->size(); ++i) {
    const json* row = &(*calls)[i];
    // [module, [counts]]: the measurement's record.
    if (row->is_array() && row->size() == 2 && (*row)[0].is_number_integer() &&
        (*row)[1].is_array())
      row = &(*row)[1];
    if (!row->is_array() || row->empty() ||
        !std::all_of(row->begin(), row->end(), [](const json& v) { return v.is_number_integer(); }))
      throw invalid_input(
          fmt::format("{}: entry {} is not an array of integer token counts", source, i));
    load.push_back(row->get<std::vector<std::int64_t>>());
  }
  return load;
}

std::vector<std::vector<std::int64_t>> load_expert_load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw invalid_input(fmt::format("{}: cannot read the expert-load file", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_expert_load(ss.str(), path);
}

std::vector<std::string> preset_names() {
  std::vector<std::string> v;
  for (std::size_t i = 0; i < detail::preset_file_count; ++i)
    v.emplace_back(detail::preset_files[i].name);
  std::sort(v.begin(), v.end());
  return v;
}

namespace {

std::string lower(std::string_view s) {
  std::string o(s);
  for (auto& c : o) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return o;
}

/// Levenshtein distance (for the did-you-mean hint).
std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diag = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

}  // namespace

model_description preset_model(std::string_view name) {
  const std::string key = lower(name);
  std::string best;
  std::size_t best_d = std::string::npos;
  for (std::size_t i = 0; i < detail::preset_file_count; ++i) {
    const std::string preset = detail::preset_files[i].name;
    if (key == preset) {
      auto m = parse_model_config(detail::preset_files[i].text, "preset " + preset);
      m.name = preset;
      m.source = "preset";
      return m;
    }
    const std::size_t d = edit_distance(key, preset);
    if (d < best_d) best_d = d, best = preset;
  }
  const std::string hint = best_d <= std::max<std::size_t>(2, key.size() / 4)
                               ? fmt::format(" (did you mean '{}'?)", best)
                               : "";
  throw invalid_input(
      fmt::format("unknown model '{}'{}: not a preset ({}) and not a path to a config.json or a "
                  "model directory",
                  name, hint, join(preset_names())));
}

model_description resolve_model(std::string_view name_or_path) {
  if (name_or_path.empty())
    throw invalid_input("no model given: a preset name or a path to a config.json");
  const std::string path(name_or_path);
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    // A Hugging Face model directory (a snapshot or save_pretrained output): its config.json.
    const auto config = std::filesystem::path(path) / "config.json";
    if (!std::filesystem::exists(config, ec))
      throw invalid_input(fmt::format("{}: a model directory needs a config.json in it", path));
    auto m = load_model_config(config.string());
    auto dir = std::filesystem::path(path);
    if (!dir.has_filename()) dir = dir.parent_path();
    m.name = dir.filename().string();
    return m;
  }
  const bool path_like =
      name_or_path.find('/') != std::string_view::npos ||
      (name_or_path.size() > 5 && name_or_path.substr(name_or_path.size() - 5) == ".json");
  if (path_like) return load_model_config(path);
  return preset_model(name_or_path);
}

}  // namespace vramkit::plan
