// Inference of a language model as transformers' generate() runs it under no_grad: the prefill
// forward over the prompt, then one forward per new token against the KV cache (grown by
// concatenation, or paged blocks reserved up front), the last position's logits each time.
#include <algorithm>
#include <vector>

#include "steps.hpp"
#include "transformer.hpp"

namespace vramkit::plan::detail {

u64 inference_weight_bytes(const walker& w, int i, const parameter_tensor& p) {
  const u64 e = w.param_elems(i);
  // Quantisers leave norms, biases, embeddings and the head in 16 bits.
  const bool matrix =
      p.layer >= 0 && p.name.find("norm") == std::string::npos && !is_bias_parameter(p.name);
  const u64 group = static_cast<u64>(std::max(1, w.model().weights.group_size));
  switch (w.request().quant) {
    case quant_kind::none:
      return e * static_cast<u64>(w.dt().param);
    // int8 (LLM.int8 style): 1 byte per weight + one fp16 scale per output row (~h per matrix).
    case quant_kind::int8:
      return matrix ? e + e / static_cast<u64>(std::max<i64>(1, w.model().t.hidden)) * 2 : e * 2;
    // AWQ / GPTQ int4: 0.5 byte + an fp16 scale and zero per group (128 unless the config says).
    case quant_kind::int4:
      return matrix ? e / 2 + e / group * 4 : e * 2;
    // bitsandbytes NF4 with double quantisation (QLoRA paper): 0.5 byte + one 8-bit absmax per
    // block of 64 + one fp32 scale per 256 of those = 4.127 bits per weight.
    case quant_kind::nf4:
      return matrix ? e / 2 + e / 64 + e / (64ull * 256) * 4 : e * 2;
    // fp8 checkpoints (e4m3): one byte per weight and an fp32 scale per tensor.
    case quant_kind::fp8:
      return matrix ? e + 4 : e * 2;
  }
  return e * 2;
}

namespace {

constexpr auto tmp = component::temporaries;

/// Sizes of one generate() forward on this GPU.
struct infer_dims {
  i64 b = 1, h = 1, heads = 1, kv = 1, d = 1, f = 1, layers = 1;
  u64 kv_tok = 0;  ///< bytes of one of K or V per token per layer
};

/// The KV cache of every layer.
struct kv_cache {
  std::vector<tensor> k, v;
};

/// A norm at inference; returns its output. RMSNorm in 16 bits runs as run J's trace of Mistral
/// shows it: the fp32 copy, pow, the normalised fp32 tensor (the copy dropped), the cast back and
/// the weight product, the normalised tensor living until the function returns.
tensor infer_norm(walker& w, u64 nh) {
  const int low = w.dt().low;
  if (w.model().t.gemma_norm) {
    // Gemma: x.float(), pow, normalised, * (1 + weight) in fp32, cast back.
    tensor a = low != 4 ? w.alloc(nh * 4, tmp, "norm fp32") : tensor{};
    w.transient(nh * 4, tmp, "norm pow");
    tensor c = w.alloc(nh * 4, tmp, "norm normalised");
    a.reset();
    tensor d = w.alloc(nh * 4, tmp, "norm scaled");
    c.reset();
    if (low == 4) return d;
    return w.alloc(nh * low, tmp, "norm output");
  }
  if (!w.model().t.layer_norm && low != 4) {
    tensor a = w.alloc(nh * 4, tmp, "norm fp32");
    w.transient(nh * 4, tmp, "norm pow");
    tensor c = w.alloc(nh * 4, tmp, "norm normalised");
    a.reset();
    tensor cb = w.alloc(nh * low, tmp, "norm cast");
    tensor y = w.alloc(nh * low, tmp, "norm output");
    cb.reset();
    c.reset();
    return y;
  }
  return w.alloc(nh * low, tmp, "norm output");
}

/// rotate_half RoPE of one (rows, heads, d) tensor of `n` bytes at inference, op by op as in run
/// J's trace: x * cos, the negated half, the cat, its product with sin, the sum; returns the sum.
tensor infer_rope(walker& w, u64 n) {
  tensor xc = w.alloc(n, tmp, "rope x * cos");
  tensor neg = w.alloc(n / 2, tmp, "rope negated half");
  tensor rh = w.alloc(n, tmp, "rope rotate_half");
  neg.reset();
  tensor rs = w.alloc(n, tmp, "rope rotated * sin");
  rh.reset();
  tensor out = w.alloc(n, tmp, "rope output");
  xc.reset();
  rs.reset();
  return out;
}

/// Eager attention at inference (transformers' eager_attention_forward): repeat_kv copies K and
/// V out to every query head, the q k^T scores are scaled and masked out of place, then
/// `softmax(x, dim=-1, dtype=torch.float32).to(query.dtype)` multiplies V. ATen's softmax with a
/// dtype fuses the upcast for fp16 inputs only: a bf16 input is first copied to fp32
/// (input_.toType), the fp32 softmax written beside that copy, so the masked bf16 scores, the
/// fp32 copy and the fp32 softmax are live at once (5 bytes per score over the 2 of the scores);
/// the cast back is made while the masked scores and the fp32 softmax still exist (the variable
/// is rebound after the whole expression). In fp32 both the copy and the cast are no-ops. GPT-2's
/// eager attention calls softmax without a dtype (no copy, no cast). The score tensors are (b,
/// heads, q, kv).
void eager_scores(walker& w, const infer_dims& D, i64 q_len, i64 kv_len) {
  const int low = w.dt().low;
  const u64 n_s = static_cast<u64>(D.b * D.heads) * static_cast<u64>(q_len * kv_len);
  tensor k, v;
  if (D.kv != D.heads) {
    const u64 n_rep = static_cast<u64>(D.b * D.heads * kv_len * D.d) * low;
    k = w.alloc(n_rep, tmp, "repeat_kv keys");
    v = w.alloc(n_rep, tmp, "repeat_kv values");
  }
  tensor s = w.alloc(n_s * low, tmp, "attention scores");
  s = w.alloc(n_s * low, tmp, "scaled scores");
  s = w.alloc(n_s * low, tmp, "masked scores");
  if (w.model().family == model_family::gpt2 || low == 4) {
    tensor p = w.alloc(n_s * low, tmp, "softmax");
    s.reset();
    return;
  }
  // The fp32 copy of the scores lives until the fp32 softmax is written; then the cast.
  tensor p;
  {
    const tensor up = w.alloc(n_s * 4, tmp, "softmax input fp32 copy");
    p = w.alloc(n_s * 4, tmp, "softmax fp32");
  }
  const tensor cast = w.alloc(n_s * low, tmp, "softmax cast");
  s.reset();
  p.reset();
}

/// SDPA's math fallback at inference (Falcon's multi-query heads without enable_gqa), in the
/// order of run J's allocator trace of Falcon-7B b4 p1024 (H200, torch 2.11): the additive mask
/// SDPA converts transformers' bool mask into (query dtype, before the upcast); fp32 copies of
/// q, k, v and the scaled query, all four kept by the kernel to its end; the two broadcast copies
/// batched matmul makes of its operands; fp32 scores; _safe_softmax's softmax and bool mask of
/// the -inf scores (its where() allocates no second fp32 tensor); the scores dropped; the
/// weights cast (the kernel's second output, kept to its end); the value broadcast, the fp32
/// output and its cast.
void math_scores(walker& w, const infer_dims& D, i64 q_len, i64 kv_len) {
  const int low = w.dt().low;
  const u64 nq = static_cast<u64>(D.b * D.heads * q_len * D.d);
  const u64 nkv = static_cast<u64>(D.b * D.kv * kv_len * D.d);
  const u64 nx = static_cast<u64>(D.b * D.heads * kv_len * D.d);
  const u64 ns = static_cast<u64>(D.b * D.heads) * static_cast<u64>(q_len * kv_len);
  tensor mask = w.alloc(static_cast<u64>(D.b * q_len) * static_cast<u64>(kv_len) * low, tmp,
                        "SDPA additive mask (from the bool mask)");
  tensor q32 = w.alloc(nq * 4, tmp, "sdpa math fp32 query");
  tensor k32 = w.alloc(nkv * 4, tmp, "sdpa math fp32 key");
  tensor v32 = w.alloc(nkv * 4, tmp, "sdpa math fp32 value");
  tensor qs = w.alloc(nq * 4, tmp, "sdpa math scaled query");
  tensor ks = w.alloc(nkv * 4, tmp, "sdpa math scaled key");
  tensor kx = w.alloc(nx * 4, tmp, "sdpa math key broadcast copy");
  tensor qx = w.alloc(nq * 4, tmp, "sdpa math query broadcast copy");
  tensor sc = w.alloc(ns * 4, tmp, "sdpa math scores");
  kx.reset();
  qx.reset();
  ks.reset();
  tensor sm = w.alloc(ns * 4, tmp, "sdpa math softmax");
  w.transient(ns, tmp, "sdpa math -inf mask");
  sc.reset();
  tensor cast = w.alloc(ns * low, tmp, "sdpa math weights cast");
  tensor vx = w.alloc(nx * 4, tmp, "sdpa math value broadcast copy");
  tensor o32 = w.alloc(nq * 4, tmp, "sdpa math output");
  vx.reset();
  tensor o = w.alloc(nq * low, tmp, "sdpa math output cast");
  o32.reset();
  sm.reset();
  q32.reset();
  qs.reset();
  cast.reset();
}

/// Tokens a sliding-window layer attends to in a forward of `q_len` new tokens after `past`:
/// transformers' DynamicSlidingWindowLayer keeps window - 1 tokens between steps.
i64 sliding_kv_len(const transformer_shape& t, i64 q_len, i64 past) {
  return std::min<i64>(past, t.sliding_window - 1) + q_len;
}

/// Whether this forward's sliding-window layers get an explicit mask under SDPA: transformers
/// skips it (is_causal instead) only while the layer sees fewer tokens than its window
/// (_ignore_causal_mask_sdpa); with a mask, sdpa_attention_forward repeats K and V over the
/// query heads (enable_gqa needs no mask) and SDPA takes the memory-efficient kernel with the
/// bool mask converted to an additive one in the model dtype.
bool sliding_mask(const walker& w, i64 q_len, i64 past) {
  const auto& t = w.model().t;
  if (t.sliding_window <= 0 || w.request().attention == attention_kind::eager) return false;
  bool any = false;
  for (const std::uint8_t s : t.sliding_layers) any = any || s != 0;
  return any && sliding_kv_len(t, q_len, past) >= t.sliding_window;
}

/// Falcon-7B's multi-query heads, which send SDPA to its math fallback.
bool falcon_multi_query(const walker& w) {
  const auto& t = w.model().t;
  return w.model().family == model_family::falcon && t.shared_parallel_norm && t.kv_heads == 1 &&
         t.heads > 1;
}

/// Whether those heads go through SDPA (its math fallback) rather than eager or flash attention.
bool falcon_math(const walker& w) {
  return falcon_multi_query(w) && w.request().attention == attention_kind::sdpa;
}

/// Attention of one layer from its norm output `nrm`: projections, RoPE, the cache append, the
/// output projection. The decoder layer's hidden_states holds the norm output until the
/// attention returns; with `shared_norm` (Falcon's parallel attention and MLP over one norm) it
/// is handed back there for the MLP instead.
tensor infer_attention(walker& w, const infer_dims& D, kv_cache& cache, int l, u64 rows, i64 past,
                       tensor nrm, tensor* shared_norm) {
  const int low = w.dt().low;
  const u64 nh = rows * D.h;
  // Falcon's fused query_key_value output lives to the end of its attention forward (a local);
  // the query is a reshaped copy of a view of it, the key and value indexed copies.
  tensor fused;
  if (falcon_multi_query(w))
    fused = w.alloc(rows * (D.heads + 2 * D.kv) * D.d * low, tmp, "fused query_key_value");
  const auto& t = w.model().t;
  const u64 n_q = rows * D.heads * D.d;
  const u64 n_kv = rows * D.kv * D.d;
  // Per-head query and key RMSNorms: Qwen3 normalises each projection as it is made, Gemma-3
  // both after the three projections.
  const bool norm_each = t.qk_norm && !t.gemma_norm;
  tensor q = w.alloc(n_q * low, tmp, "query");
  if (norm_each) q = infer_norm(w, n_q);
  tensor k = w.alloc(n_kv * low, tmp, "key");
  if (norm_each) k = infer_norm(w, n_kv);
  tensor v = w.alloc(n_kv * low, tmp, "value");
  if (t.qk_norm && !norm_each) {
    q = infer_norm(w, n_q);
    k = infer_norm(w, n_kv);
  }
  if (t.rotary_fraction >= 1 && w.model().family != model_family::falcon) {
    // apply_rotary_pos_emb returns both rotated tensors before the originals are dropped.
    tensor qr = infer_rope(w, rows * D.heads * D.d * low);
    tensor kr = infer_rope(w, rows * D.kv * D.d * low);
    q = std::move(qr);
    k = std::move(kr);
  } else if (t.rotary_fraction > 0) {
    w.transient(rows * D.heads * D.d * low, tmp, "rope");
    w.transient(rows * D.heads * D.d * low, tmp, "rope");
  }
  const i64 q_len = static_cast<i64>(rows) / D.b;
  // A sliding-window layer (transformers' DynamicSlidingWindowLayer) keeps window - 1 tokens
  // between steps, so each step's cat holds at most window - 1 cached tokens plus the new ones.
  const i64 cached = t.sliding(l) ? std::min<i64>(past, t.sliding_window - 1) : past;
  if (w.request().attention == attention_kind::eager)
    eager_scores(w, D, q_len, cached + q_len);
  else if (falcon_math(w))
    math_scores(w, D, q_len, cached + q_len);
  if (w.request().serving == serving_kind::generate) {
    // DynamicCache: keys = cat([keys, new]) allocates the grown tensor, then the old one dies.
    const u64 total = static_cast<u64>(D.b) * (cached + q_len) * D.kv_tok;
    cache.k[l] = w.alloc(total, component::kv_cache, "KV cache (K)");
    cache.v[l] = w.alloc(total, component::kv_cache, "KV cache (V)");
  }
  k.reset();
  v.reset();
  tensor rk, rv, bias;
  if (t.sliding(l) && sliding_mask(w, q_len, past)) {
    const i64 kv_len = cached + q_len;
    if (D.kv != D.heads) {
      const u64 n_rep = static_cast<u64>(D.b * D.heads * kv_len * D.d) * low;
      rk = w.alloc(n_rep, tmp, "repeat_kv keys (masked SDPA)");
      rv = w.alloc(n_rep, tmp, "repeat_kv values (masked SDPA)");
    }
    // convert_boolean_attn_mask: the additive mask in the query dtype, made in one op (run J's
    // trace of Mistral b4 p3000 has no bool temporary beside it).
    const u64 n_mask = static_cast<u64>(D.b * q_len) * static_cast<u64>(kv_len);
    bias = w.alloc(n_mask * low, tmp, "SDPA additive mask");
  }
  tensor o = w.alloc(rows * D.heads * D.d * low, tmp, "attention output");
  bias.reset();
  rk.reset();
  rv.reset();
  tensor proj = w.alloc(nh * low, tmp, "attention projection");
  o.reset();
  q.reset();
  fused.reset();
  if (shared_norm != nullptr)
    *shared_norm = std::move(nrm);
  else
    nrm.reset();
  return proj;
}

/// The MLP of one layer from its input `in` (the norm output, dropped once the down projection
/// exists, as the decoder layer rebinds hidden_states); returns the layer output.
tensor infer_mlp(walker& w, tensor in, u64 rows, u64 nh, u64 nf) {
  const int low = w.dt().low;
  const auto kind = w.model().t.mlp;
  tensor a;
  if (kind == mlp_kind::swiglu_packed) {
    tensor gu = w.alloc(2 * nf * low, tmp, "mlp gate_up");
    tensor s = w.alloc(nf * low, tmp, "mlp act");
    a = w.alloc(nf * low, tmp, "mlp product");
    s.reset();
    gu.reset();
  } else if (kind == mlp_kind::swiglu) {
    tensor g = w.alloc(nf * low, tmp, "mlp gate");
    a = w.alloc(nf * low, tmp, "mlp act");
    g.reset();
    tensor u = w.alloc(nf * low, tmp, "mlp up");
    tensor m = w.alloc(nf * low, tmp, "mlp product");
    a.reset();
    u.reset();
    a = std::move(m);
  } else {
    tensor u = w.alloc(nf * low, tmp, "mlp up");
    if (kind == mlp_kind::gelu_python) {
      tensor p1 = w.alloc(nf * low, tmp, "gelu pow");
      tensor p2 = w.alloc(nf * low, tmp, "gelu");
      p1.reset();
      tensor p3 = w.alloc(nf * low, tmp, "gelu");
      p2.reset();
      tensor th = w.alloc(nf * low, tmp, "gelu tanh");
      p3.reset();
      tensor hu = w.alloc(nf * low, tmp, "gelu half");
      a = w.alloc(nf * low, tmp, "gelu output");
      th.reset();
      hu.reset();
    } else {
      a = w.alloc(nf * low, tmp, "mlp gelu");
    }
    u.reset();
  }
  (void)rows;
  tensor dn = w.alloc(nh * low, tmp, "mlp down");
  a.reset();
  in.reset();
  return w.alloc(nh * low, tmp, "residual");
}

/// A sparse MoE block at inference (the eager expert loop, balanced routing or the request's
/// expert_load): router logits and fp32 softmax, the one_hot mask, then per expert of this rank
/// that gets tokens its gathered tokens, gate_up, SiLU, product, down, the scaled output and its
/// index_add_ into the zero-filled output; the shared expert after. With --ep the dispatch and
/// combine all-to-all buffers.
tensor infer_moe(walker& w, tensor in, u64 rows, u64 nh) {
  const auto& moe = w.model().t.moe;
  const int low = w.dt().low;
  const int ep = w.request().ep;
  const u64 experts = static_cast<u64>(moe.experts), k = static_cast<u64>(moe.top_k);
  const u64 h = nh / rows;
  const u64 local = experts / static_cast<u64>(ep);
  const u64 ef = static_cast<u64>(moe.expert_ffn / (ep > 1 ? 1 : w.request().tp));
  tensor lg = w.alloc(rows * experts * low, tmp, "router logits");
  tensor pr = w.alloc(rows * experts * 4, tmp, "router softmax");
  lg.reset();
  tensor top = w.alloc(rows * k * 12, tmp, "router top-k");
  pr.reset();
  tensor mask = w.alloc(rows * k * experts * 8, tmp, "expert mask (one_hot)");
  tensor out = w.alloc(nh * low, tmp, "moe output (zeros)");
  tensor send, recv;
  if (ep > 1) {
    send = w.alloc(rows * k * h * low, tmp, "all-to-all dispatch send");
    recv = w.alloc(rows * k * h * low, tmp, "all-to-all dispatch receive");
  }
  const u64 tokens = rows * k;
  const std::vector<i64> counts =
      expert_counts(w.next_expert_load(), static_cast<i64>(tokens), static_cast<i64>(local));
  for (u64 e = 0; e < local; ++e) {
    const auto n = static_cast<u64>(counts[e]);
    if (n == 0) continue;  // transformers loops over the experts hit only
    tensor idx = w.alloc(n * 16, tmp, "expert token index");
    tensor x = w.alloc(n * h * low, tmp, "expert tokens");
    tensor gu = w.alloc(n * 2 * ef * low, tmp, "expert gate_up");
    x.reset();
    tensor a = w.alloc(n * ef * low, tmp, "expert silu");
    tensor m = w.alloc(n * ef * low, tmp, "expert product");
    a.reset();
    gu.reset();
    tensor dn = w.alloc(n * h * low, tmp, "expert down");
    m.reset();
    w.transient(n * h * low, tmp, "expert scaled");
  }
  mask.reset();
  if (ep > 1) {
    recv.reset();
    send.reset();
    w.transient(rows * k * h * low, tmp, "all-to-all combine buffer");
  }
  if (moe.shared_ffn > 0) {
    const u64 sf = rows * static_cast<u64>(moe.shared_ffn / w.request().tp);
    tensor g = w.alloc(sf * low, tmp, "shared expert gate");
    tensor a = w.alloc(sf * low, tmp, "mlp act");
    g.reset();
    tensor u = w.alloc(sf * low, tmp, "shared expert up");
    tensor m = w.alloc(sf * low, tmp, "mlp product");
    a.reset();
    u.reset();
    tensor sh = w.alloc(nh * low, tmp, "shared expert down");
    m.reset();
    if (moe.shared_gate) sh = w.alloc(nh * low, tmp, "shared expert gated");
    out = w.alloc(nh * low, tmp, "moe + shared expert");
  }
  in.reset();
  return w.alloc(nh * low, tmp, "residual");
}

/// One forward of `q_len` new tokens per sequence with `past` tokens cached.
void infer_forward(walker& w, const infer_dims& D, kv_cache& cache, i64 q_len, i64 past) {
  const int low = w.dt().low;
  const u64 rows = static_cast<u64>(D.b * q_len);
  const u64 nh = rows * D.h;
  const u64 nf = rows * D.f;
  // inputs_embeds is a local of the model's forward: the embedding output lives until that
  // forward returns, while hidden_states moves on layer by layer (GPT-2 adds the positions,
  // Gemma scales by sqrt(hidden), both into new tensors).
  tensor emb = w.alloc(nh * low, tmp, "input embeddings");
  tensor x;
  if (w.model().family == model_family::gpt2)
    x = w.alloc(nh * low, tmp, "embeddings + positions");
  else if (w.model().t.embed_scale)
    x = w.alloc(nh * low, tmp, "scaled embeddings");
  // Eager attention needs the (b, 1, q, kv) additive causal mask, built once per forward.
  tensor mask;
  if (w.request().attention == attention_kind::eager)
    mask = w.alloc(static_cast<u64>(D.b * q_len) * static_cast<u64>(past + q_len) * low, tmp,
                   "causal mask");
  // Falcon's bool causal mask (b, 1, q, kv), built once per forward and passed to SDPA.
  if (falcon_math(w))
    mask = w.alloc(static_cast<u64>(D.b * q_len) * static_cast<u64>(past + q_len), tmp,
                   "causal mask (bool)");
  // The sliding-window layers' bool mask (b, 1, q, kv), built once per forward.
  tensor window_mask;
  if (sliding_mask(w, q_len, past)) {
    // transformers' sdpa_mask builds it from (q, kv) bool pieces before expanding it over the
    // batch: run J's trace of Mistral b4 p3000 holds five, at most three at once, the last
    // until the mask exists.
    const u64 piece =
        static_cast<u64>(q_len) * static_cast<u64>(sliding_kv_len(w.model().t, q_len, past));
    tensor a = w.alloc(piece, tmp, "window mask piece");
    tensor b = w.alloc(piece, tmp, "window mask piece");
    a.reset();
    tensor c = w.alloc(piece, tmp, "window mask piece");
    tensor d = w.alloc(piece, tmp, "window mask piece");
    b.reset();
    c.reset();
    w.transient(piece, tmp, "window mask piece");
    window_mask = w.alloc(
        static_cast<u64>(D.b * q_len) * static_cast<u64>(sliding_kv_len(w.model().t, q_len, past)),
        tmp, "sliding-window mask (bool)");
  }
  for (int l = 0; l < D.layers; ++l) {
    w.set_layer(l);
    tensor shared_norm;
    tensor proj = infer_attention(w, D, cache, l, rows, past, infer_norm(w, nh),
                                  w.model().t.shared_parallel_norm ? &shared_norm : nullptr);
    const bool sandwich = w.model().t.sandwich_norm;
    if (sandwich) proj = infer_norm(w, nh);  // post_attention_layernorm
    tensor h1 = w.alloc(nh * low, tmp, "residual");
    proj.reset();
    // The norm before the MLP (post_attention_layernorm, Gemma's pre_feedforward_layernorm) runs
    // as the first one does; its output is the MLP's input.
    tensor mlp_in = std::move(shared_norm);
    if (mlp_in.empty()) mlp_in = infer_norm(w, nh);
    tensor out = w.model().t.sparse(l) ? infer_moe(w, std::move(mlp_in), rows, nh)
                                       : infer_mlp(w, std::move(mlp_in), rows, nh, nf);
    if (sandwich) {
      // post_feedforward_layernorm on the MLP output, then the residual add.
      out = infer_norm(w, nh);
      out = w.alloc(nh * low, tmp, "residual");
    }
    // The layer's input lives until the layer returns (the model's loop holds it), after the
    // decoder layer's own residual.
    h1.reset();
    x = std::move(out);
  }
  w.set_layer(-1);
  // The final norm runs over every position (the head slices logits_to_keep after it); the
  // model's forward then returns, dropping the last layer's output and inputs_embeds, and
  // logits_to_keep = 1 sends only the last position through the head; generate copies it to fp32.
  const i64 vocab = w.model().t.vocab;
  tensor fin = infer_norm(w, nh);
  x.reset();
  emb.reset();
  tensor lg = w.alloc(static_cast<u64>(D.b * vocab) * low, component::logits_and_loss,
                      "logits (last token)");
  if (w.model().t.final_softcap > 0) {
    // Gemma-2 soft-caps the last position's logits: / cap, tanh, * cap.
    lg = w.alloc(static_cast<u64>(D.b * vocab) * low, component::logits_and_loss, "softcap");
    lg = w.alloc(static_cast<u64>(D.b * vocab) * low, component::logits_and_loss, "softcap tanh");
    lg = w.alloc(static_cast<u64>(D.b * vocab) * low, component::logits_and_loss, "softcap scaled");
  }
  fin.reset();
  tensor l32 = w.alloc(static_cast<u64>(D.b * vocab) * 4, component::logits_and_loss,
                       "next-token logits fp32");
  lg.reset();
  l32.reset();
}

/// Decode steps differ only in the cache length. Long generations replay a sample of them,
/// evenly spread, the last one at the final length. The spacing matters once each layer's cache
/// outgrows its block every few steps (the allocator rounds large segments to 2 MiB). Each K or
/// V tensor grows by at most 128 KiB between replayed steps: on 992 generate requests of 7
/// models, the reserved peak is then within 2.0% of replaying every step (p90 0.01%), where
/// 512 KiB gave 4.0% (p90 0.15%) and 64 KiB 1.3%; a measured 2048-token run (tinyllama-1.1b,
/// batch 64, 32 KiB per step) is predicted within 0.8% (0.5% at 512 KiB); 2 MiB spacing
/// misses it by 4%, 4 MiB by 45%. Caches that start in the small pool (<= 1 MiB per tensor)
/// pack into 2 MiB segments whose layout changes every few steps, so they get at least 32
/// replayed steps; caches in the large pool at least 8 (16 gives the same figures on those
/// requests). At most 4096 steps are replayed.
i64 replayed_decode_steps(const plan_request& r, const infer_dims& D) {
  const i64 steps = r.new_tokens - 1;
  const u64 growth = r.serving == serving_kind::paged ? 0 : D.kv_tok * static_cast<u64>(D.b);
  constexpr u64 k_spacing = 128ull << 10;
  const auto wanted = static_cast<i64>(
      (static_cast<u64>(std::max<i64>(steps, 0)) * growth + k_spacing - 1) / k_spacing);
  const bool small_pool_cache = growth != 0 && growth * static_cast<u64>(r.prompt) <= (1ull << 20);
  return std::min<i64>(steps, std::clamp<i64>(wanted, small_pool_cache ? 32 : 8, 4096));
}

}  // namespace

void generate(walker& w) {
  const auto& t = w.model().t;
  const auto& r = w.request();
  w.set_grad(false);
  const i64 b = r.micro_batch, p = r.prompt, n = r.new_tokens;
  infer_dims shape;
  shape.b = b;
  shape.h = t.hidden;
  shape.heads = t.heads / r.tp;
  shape.kv = std::max<i64>(1, t.kv_heads / r.tp);
  shape.d = t.head_dim;
  shape.f = t.intermediate / r.tp;
  shape.layers = t.layers / r.pp;
  // A paged engine may keep its cache in fp8 (one byte per element, per-layer scales).
  const u64 kvb = r.kv_cache == kv_cache_kind::fp8 ? 1 : static_cast<u64>(w.dt().low);
  shape.kv_tok = static_cast<u64>(shape.kv * shape.d) * kvb;
  if (t.latent_attention()) {
    const auto& mla = t.mla;
    // transformers' cache holds the decompressed per-head keys (qk_nope + qk_rope) and values
    // (v_head); a paged engine with MLA (vLLM) keeps the compressed latent and the rotary key,
    // kv_lora_rank + qk_rope per token and layer, for all heads. kv_tok is half of the token's
    // K+V bytes (the cache is modelled as a K and a V tensor of equal size).
    const u64 per_token =
        r.serving == serving_kind::paged
            ? static_cast<u64>(mla.kv_lora_rank + mla.qk_rope)
            : static_cast<u64>(shape.kv * (mla.qk_nope + mla.qk_rope + mla.v_head));
    shape.kv_tok = per_token * kvb / 2;
  }
  kv_cache cache{std::vector<tensor>(shape.layers), std::vector<tensor>(shape.layers)};
  w.keep(static_cast<u64>(b * p) * 16, component::inputs, "input ids and mask");
  if (r.serving == serving_kind::paged) {
    // Paged engine: blocks of 16 tokens for the whole context, reserved up front.
    for (int l = 0; l < shape.layers; ++l) {
      // A sliding-window layer needs blocks for its window only.
      const i64 tokens = t.sliding(l) ? std::min<i64>(p + n, t.sliding_window) : p + n;
      const u64 blocks = static_cast<u64>((tokens + 15) / 16);
      cache.k[l] =
          w.alloc(blocks * 16 * shape.kv_tok * b, component::kv_cache, "paged KV blocks (K)");
      cache.v[l] =
          w.alloc(blocks * 16 * shape.kv_tok * b, component::kv_cache, "paged KV blocks (V)");
    }
  }
  w.set_phase(phase::prefill);
  if (t.vocab > 0 && w.model().family == model_family::llava) {
    // The images' features (vision tower, projector) are merged into the prompt's embeddings.
    tensor img = llava_image_features(w, b);
    w.transient(static_cast<u64>(b * p * shape.h) * w.dt().low, component::temporaries,
                "embeddings with image features");
  }
  infer_forward(w, shape, cache, p, 0);
  w.set_phase(phase::decode);
  const i64 steps = n - 1;
  const i64 replay = replayed_decode_steps(r, shape);
  for (i64 k = 1; k <= replay; ++k) {
    const i64 i = replay == steps ? k : (k * steps + replay - 1) / replay;
    w.set_step(static_cast<int>(std::min<i64>(i, 32000)));
    infer_forward(w, shape, cache, 1, p + i - 1);
  }
  w.set_step(0);
  // The cache stays allocated to the end of the call.
  for (auto& c : cache.k) walker::persist(c);
  for (auto& c : cache.v) walker::persist(c);
}

}  // namespace vramkit::plan::detail
