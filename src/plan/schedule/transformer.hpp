// The Hugging Face transformer families as the walker replays them: a layer is a norm, the
// family's self-attention, the output projection and an MLP, arranged pre-norm (GPT-2, LLaMA,
// GPT-NeoX), post-norm (BERT) or with a parallel residual (GPT-NeoX); the language-model step
// adds embeddings, the head and the loss. A family differs in its self-attention (and its shape
// fields); adding one is a new attention function and a row in families.cpp.
#pragma once

#include "ops.hpp"

namespace vramkit::plan::detail {

/// Self-attention of one layer from its normed input `in` (width in_bytes); returns the
/// attention core's output (before the output projection).
using self_attention_fn = tensor (*)(walker& w, const dims& D, const tensor& in, int in_bytes,
                                     const layer_params& p);

/// Where the norms sit in a layer.
enum class block_layout { pre_norm, post_norm };

/// What makes a transformer family's layer its own.
struct transformer_family {
  model_family family;
  self_attention_fn self_attention;
  block_layout layout;
};

/// The entry of a transformer family; logic_error for a family that is not a transformer.
const transformer_family& transformer_family_of(model_family f);

/// Layer sizes on this GPU (tensor- and sequence-parallel splits applied).
dims lm_dims(const walker& w);

/// The layer MLP (GELU, Python GELU or SwiGLU, after the shape) on the normed input.
tensor mlp(walker& w, const dims& D, const tensor& in, int in_bytes, const layer_params& p);
/// Tokens per expert for one MoE forward: `load` (a request's expert_load entry) scaled to
/// `tokens` by largest remainders (ties to the lower expert), or without one an equal share
/// each, the remainder spread one each from expert 0.
std::vector<i64> expert_counts(const std::vector<i64>* load, i64 tokens, i64 experts);

/// LLaMA-style RoPE on n elements of q or k held in src_bytes each: q*cos + rotate_half(q)*sin
/// (fp32 cos/sin under autocast promote the result to fp32).
tensor rope(walker& w, const tensor& src, u64 n, int src_bytes, const char* label);

/// The query, key and value of separate q_proj, k_proj and v_proj Linears (BERT, LLaMA and the
/// families built on them), projected from `in` in that order.
struct qkv_tensors {
  tensor q, k, v;
};
qkv_tensors separate_qkv(walker& w, const dims& D, const tensor& in, int in_bytes,
                         const layer_params& p);

/// The families' self-attention functions.
tensor gpt2_attention(walker& w, const dims& D, const tensor& in, int in_bytes,
                      const layer_params& p);
tensor gpt_neox_attention(walker& w, const dims& D, const tensor& in, int in_bytes,
                          const layer_params& p);
tensor llama_attention(walker& w, const dims& D, const tensor& in, int in_bytes,
                       const layer_params& p);
tensor phi3_attention(walker& w, const dims& D, const tensor& in, int in_bytes,
                      const layer_params& p);
tensor deepseek_attention(walker& w, const dims& D, const tensor& in, int in_bytes,
                          const layer_params& p);
tensor bert_attention(walker& w, const dims& D, const tensor& in, int in_bytes,
                      const layer_params& p);
tensor falcon_attention(walker& w, const dims& D, const tensor& in, int in_bytes,
                        const layer_params& p);

/// One layer; `x` is the layer input (fp32 under autocast, the model dtype otherwise).
tensor transformer_block(walker& w, const tensor& x, int layer);

/// The layer, under full activation checkpointing when the request asks for it.
tensor run_layer(walker& w, const tensor& x, int layer);

/// Forward and loss of one micro-batch of a language model; returns the loss. Without `loss` (an
/// encoder's inference forward) no labels and no loss: the logits are made and dropped.
tensor lm_forward_loss(walker& w, bool loss = true);

/// LLaVA: the frozen vision tower over `images` images, then the projector; returns the image
/// features (images x patches rows of the language model's width).
tensor llava_image_features(walker& w, i64 images);

/// Forward and loss of one micro-batch of transformers' ViT image classifier.
tensor hf_vit_forward_loss(walker& w);

}  // namespace vramkit::plan::detail
