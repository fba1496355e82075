// What the planner knows about a model: the shapes of a Hugging Face transformer (GPT-2, LLaMA /
// Mistral / Qwen2, GPT-NeoX, BERT) or of a torchvision CNN/ViT, enough to walk its forward and
// backward op by op. Plain values; not synchronised.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace vramkit::plan {

/// The implementation family whose op sequence the planner replays.
/// `moe`: Mixtral / Qwen2-MoE / Qwen3-MoE (LLaMA attention, sparse MoE blocks); `deepseek`:
/// DeepSeek-V2/V3 (multi-head latent attention, MoE with shared experts).
/// `gemma`: Gemma-2 / Gemma-3 text (sandwich norms, Gemma RMSNorm, scaled embeddings,
/// soft-capping, alternating sliding-window layers); `falcon`: Falcon (fused multi-query qkv,
/// parallel attention and MLP); `t5`: T5 encoder-decoder; `hf_vit`: transformers' ViT image
/// classifier; `llava`: a CLIP vision tower, projector and LLaMA with image tokens.
enum class model_family {
  gpt2,
  llama,
  gpt_neox,
  bert,
  resnet,
  vit,
  phi3,
  moe,
  deepseek,
  gemma,
  falcon,
  t5,
  hf_vit,
  llava
};
const char* to_string(model_family f) noexcept;

/// How weights are stored: full precision, or quantised (inference). int8: LLM.int8-style rows
/// with one fp16 scale each; int4: AWQ/GPTQ groups with an fp16 scale and zero per group;
/// nf4: bitsandbytes 4-bit blocks of 64 with double-quantised absmax; fp8: one byte per weight
/// with per-tensor scales.
enum class quant_kind { none, int8, int4, nf4, fp8 };

/// MLP flavour of a transformer block.
enum class mlp_kind {
  gelu_python,    ///< GPT-2 "gelu_new": tanh GELU written as Python tensor ops (saves 4 tensors)
  gelu,           ///< one fused GELU kernel (BERT, GPT-NeoX, ViT)
  swiglu,         ///< gate/up/down with SiLU (LLaMA, Mistral, Qwen2)
  swiglu_packed,  ///< one gate_up projection chunked in two, then SiLU (Phi-3)
};

/// Sparse mixture-of-experts MLP (transformers' eager expert loop: dropless, no capacity factor).
struct moe_shape {
  std::int64_t experts = 0;          ///< routed experts per MoE layer (0: dense model)
  std::int64_t top_k = 0;            ///< experts per token
  std::int64_t expert_ffn = 0;       ///< inner size of one routed expert
  std::int64_t shared_ffn = 0;       ///< inner size of the shared expert(s) together (0: none)
  bool shared_gate = false;          ///< Qwen2-MoE: sigmoid gate Linear(h, 1) on the shared expert
  std::vector<std::uint8_t> sparse;  ///< per layer, 1 = MoE block, 0 = dense MLP
};

/// DeepSeek multi-head latent attention (q_lora_rank 0: a plain q_proj).
struct mla_shape {
  std::int64_t q_lora_rank = 0, kv_lora_rank = 0;     ///< query and key/value compression ranks
  std::int64_t qk_nope = 0, qk_rope = 0, v_head = 0;  ///< per head: key without, with RoPE; value
};

/// Shapes of a transformer with an LM or MLM head. `head_dim` is taken from the config when given.
struct transformer_shape {
  std::int64_t hidden = 0, layers = 0, heads = 0, kv_heads = 0, head_dim = 0;
  std::int64_t intermediate = 0, vocab = 0;
  std::int64_t max_positions = 0;  ///< learned position table rows (0 = rotary, no table)
  std::int64_t type_vocab = 0;     ///< BERT token-type rows
  double rotary_fraction = 0;      ///< GPT-NeoX rotary_pct; 1 for LLaMA; 0 without rotary
  bool tied_embeddings = true;
  bool qkv_bias = false;  ///< biases on the query/key/value projections
  bool out_bias = false;  ///< bias on the attention output projection
  bool mlp_bias = false;
  bool layer_norm = true;             ///< LayerNorm with bias (false: RMSNorm without bias)
  bool parallel_residual = false;     ///< GPT-NeoX: attention and MLP read the same input
  bool shared_parallel_norm = false;  ///< Falcon-7B: one LayerNorm feeds attention and MLP
  mlp_kind mlp = mlp_kind::gelu;
  double attention_dropout = 0;
  double hidden_dropout = 0;
  double embedding_dropout = 0;
  std::int64_t max_context = 0;              ///< max_position_embeddings (0: not given)
  std::int64_t sliding_window = 0;           ///< tokens a sliding-window layer attends to (0: none)
  std::vector<std::uint8_t> sliding_layers;  ///< per layer, 1 = sliding window (empty: none)
  bool qk_norm = false;                      ///< Qwen3: RMSNorm over each query and key head
  bool gemma_norm = false;     ///< Gemma RMSNorm: normalised in fp32 times (1 + weight), then cast
  bool sandwich_norm = false;  ///< Gemma-2/3: norms after attention and after the MLP as well
  bool embed_scale = false;    ///< Gemma: embeddings multiplied by sqrt(hidden)
  double attn_softcap = 0;     ///< Gemma-2: tanh soft-capping of the attention scores (eager)
  double final_softcap = 0;    ///< Gemma-2: tanh soft-capping of the logits
  /// T5: `layers` counts encoder and decoder blocks, the last `decoder_layers` of them decoder
  /// blocks (self-attention, cross-attention, feed-forward); relative-position buckets.
  std::int64_t decoder_layers = 0;
  std::int64_t relative_buckets = 0;
  moe_shape moe;
  mla_shape mla;
  [[nodiscard]] bool sparse(std::int64_t layer) const noexcept {
    return moe.experts > 0 && static_cast<std::size_t>(layer) < moe.sparse.size() &&
           moe.sparse[static_cast<std::size_t>(layer)] != 0;
  }
  [[nodiscard]] bool latent_attention() const noexcept { return mla.kv_lora_rank > 0; }
  [[nodiscard]] bool sliding(std::int64_t layer) const noexcept {
    return sliding_window > 0 && static_cast<std::size_t>(layer) < sliding_layers.size() &&
           sliding_layers[static_cast<std::size_t>(layer)] != 0;
  }
};

/// Weights as a checkpoint stores them (its quantization_config).
struct stored_weights {
  quant_kind quant = quant_kind::none;
  int group_size = 128;  ///< weights per scale (AWQ/GPTQ); 64 for nf4
  std::string method;    ///< quant_method as the config names it ("awq", "gptq", ...)
};

/// torchvision ResNet: block kind and blocks per stage.
struct resnet_shape {
  bool bottleneck = true;
  std::array<int, 4> blocks{3, 4, 6, 3};
  std::int64_t num_classes = 1000;
};

/// torchvision VisionTransformer (and the image side of transformers' ViT, whose encoder is a
/// transformer_shape).
struct vit_shape {
  std::int64_t patch = 16;
  std::int64_t image = 224;  ///< transformers' ViT: the image size its position table is for
  std::int64_t channels = 3;
  std::int64_t hidden = 768, layers = 12, heads = 12, mlp_dim = 3072;
  std::int64_t num_classes = 1000;
};

/// A model the planner can walk: family, shapes, and where it came from (preset name or file).
struct model_description {
  std::string name;    ///< preset name or the config file's stem
  std::string source;  ///< "preset" or the config path
  model_family family = model_family::gpt2;
  transformer_shape t;
  resnet_shape resnet;
  vit_shape vit;
  std::string torch_dtype;  ///< the config's torch_dtype / dtype ("bfloat16", ...; empty if absent)
  stored_weights weights;
  /// Parameters a text batch never runs: Gemma-3's image-text model (model_type gemma3) holds
  /// its SigLIP vision tower and projector beside the language model. Held in memory like the
  /// others, never given a gradient or optimizer state.
  std::int64_t idle_vision_parameters = 0;

  /// Image classifiers (sized by --image-size): torchvision's ResNet and ViT, transformers' ViT.
  [[nodiscard]] bool is_vision() const noexcept {
    return family == model_family::resnet || family == model_family::vit ||
           family == model_family::hf_vit;
  }
  /// LLaVA: image tokens each image adds to the prompt (the patches; the class token is dropped).
  [[nodiscard]] std::int64_t image_tokens() const noexcept {
    return family == model_family::llava ? (vit.image / vit.patch) * (vit.image / vit.patch) : 0;
  }
  [[nodiscard]] bool is_torchvision() const noexcept {
    return family == model_family::resnet || family == model_family::vit;
  }
};

/// One parameter tensor (or a group of same-shaped ones) of a model, in forward order.
struct parameter_tensor {
  std::string name;
  std::int64_t elements = 0;
  int layer = -1;  ///< transformer layer / ResNet stage, -1 for embeddings and heads
};

/// Whether a parameter_tensors entry is a Linear's bias (NAME_bias, listed right after its weight).
inline bool is_bias_parameter(const std::string& name) {
  return name.size() > 5 && name.compare(name.size() - 5, 5, "_bias") == 0;
}

/// Every parameter tensor of the model, deduplicated as torch's model.parameters() lists them
/// (tied embeddings counted once; a Linear's weight and bias are two).
std::vector<parameter_tensor> parameter_tensors(const model_description& m);

/// Total number of parameters (sum over parameter_tensors).
std::uint64_t parameter_count(const model_description& m);

/// Elements in non-parameter buffers that live on the device with the model (BatchNorm running
/// statistics, position-id buffers).
std::uint64_t buffer_bytes(const model_description& m);

}  // namespace vramkit::plan
