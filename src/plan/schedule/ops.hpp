// The ops the model families are built from, each recording what PyTorch allocates and autograd
// saves for it: dropout, layer/RMS norm, add, the attention core (SDPA or eager) and the
// language-model loss. Single-threaded (they act on one walker).
#pragma once

#include "walker.hpp"

namespace vramkit::plan::detail {

/// Attention and MLP sizes of one layer on this GPU.
struct dims {
  i64 b = 1, s = 1, h = 1, heads = 1, kv = 1, d = 1, f = 1, V = 1;
  /// Sequence parallel: the layer's activations hold s = seq / sp tokens with all heads, while
  /// the attention core runs on all seq tokens with heads / sp (Korthikanti et al.).
  i64 sp = 1;
  i64 vd = 0;  ///< value head dim when it differs from the query/key one (latent attention)
  [[nodiscard]] i64 tok() const { return b * s; }
  [[nodiscard]] i64 v_dim() const { return vd > 0 ? vd : d; }
  /// Elements of the layer's query tensor (all its heads on this GPU) and of its key or value
  /// tensor (the key/value heads), over tok() tokens.
  [[nodiscard]] u64 q_elems() const { return static_cast<u64>(tok() * heads * d); }
  [[nodiscard]] u64 kv_elems() const { return static_cast<u64>(tok() * kv * d); }
  /// Elements of one s x s score tensor of the attention core on this GPU.
  [[nodiscard]] u64 score_elems() const {
    return static_cast<u64>(b * heads / sp) * static_cast<u64>(s * sp) * static_cast<u64>(s * sp);
  }
};

/// Native dropout: output and a 1-byte mask (saved). p == 0 (or no grad) is the identity.
tensor dropout(walker& w, const tensor& x, u64 elems, int elem_bytes, double p, const char* label);

/// LayerNorm (autocast runs it in fp32): saves input, mean and rstd; output in the act dtype.
tensor layer_norm(walker& w, const tensor& x, i64 rows, i64 h, int x_bytes, int p);

/// transformers' RMSNorm: upcast to fp32, pow(2).mean, x * rsqrt(var + eps), weight * x.to(dtype).
tensor rms_norm(walker& w, const tensor& x, i64 rows, i64 h, int x_bytes, int p);

/// Gemma's RMSNorm: normalised in fp32, times (1 + weight.float()), cast back to x's dtype.
tensor gemma_rms_norm(walker& w, const tensor& x, i64 rows, i64 h, int x_bytes, int p);

/// The model's norm: LayerNorm, RMSNorm or Gemma's RMSNorm.
tensor norm(walker& w, const tensor& x, i64 rows, i64 h, int x_bytes, int p);
/// Bytes per element of rms_norm()'s output (LLaMA's RMSNorm) for an input of x_bytes: weight * x
/// in the promoted dtype. Gemma's RMSNorm returns the input's dtype instead.
int rms_norm_output_bytes(const walker& w, int x_bytes, int p);

/// Out-of-place add with type promotion; gradients pass through (cast when dtypes differ).
tensor add(walker& w, const tensor& a, int a_bytes, const tensor& b, int b_bytes, u64 elems,
           const char* label);

/// How the attention core sees its inputs.
struct attention_inputs {
  const tensor& q;
  const tensor& k;
  const tensor& v;
  int qkv_bytes = 2;    ///< element width of q and k
  int v_bytes = 2;      ///< element width of v
  bool packed = false;  ///< q, k and v are one packed qkv tensor (q names it)
  bool causal = true;
  double dropout = 0;
};

/// Attention core; returns the (b, s, heads*d) output in the low dtype.
tensor attention(walker& w, const dims& D, const attention_inputs& in);

/// SDPA's math fallback, taken when key/value have fewer heads than the query and enable_gqa is
/// not set (Falcon's multi-query attention): q, k, v upcast to fp32, the scaled query, the key
/// broadcast over the query heads (a copy, as matmul reshapes the expanded tensor), the fp32
/// (b, heads, s, s) scores and their softmax (saved), the broadcast value copy, the output cast
/// back; with is_causal an (s, s) float mask. Inputs are 16-bit (autocast casts them first).
tensor math_attention(walker& w, const dims& D, const tensor& q, const tensor& k, const tensor& v,
                      int in_bytes, bool causal);

/// Cross-entropy over (rows, V) logits as transformers' loss functions compute it: fp32 upcast
/// (explicit with `explicit_upcast`), log_softmax (saved), nll_loss. Returns the scalar loss.
tensor lm_loss(walker& w, const tensor& logits, u64 rows, i64 V, bool explicit_upcast);

}  // namespace vramkit::plan::detail
