// The shared ops of the model families (ops.hpp). Each releases its intermediates at the point
// PyTorch drops them, which is what the allocator replay sees.
#include "ops.hpp"

#include <algorithm>

namespace vramkit::plan::detail {

tensor dropout(walker& w, const tensor& x, u64 elems, int elem_bytes, double p, const char* label) {
  if (p <= 0 || !w.grad_on()) return x;
  const tensor mask = w.alloc(elems, component::activations, "dropout mask");
  return w.op(elems * static_cast<u64>(elem_bytes), label,
              {edge{x, elems * static_cast<u64>(elem_bytes)}}, {mask});
}

tensor layer_norm(walker& w, const tensor& x, i64 rows, i64 h, int x_bytes, int p) {
  const int ob = w.dt().amp ? 4 : w.dt().act;
  const tensor stats =
      w.alloc(static_cast<u64>(rows) * 8, component::activations, "norm statistics");
  return w.op(static_cast<u64>(rows * h) * ob, "layer norm output",
              {edge{x, static_cast<u64>(rows * h) * x_bytes}}, {x, stats}, {p});
}

namespace {

/// x * rsqrt(mean(x^2) + eps) in fp32, as both RMSNorms compute it: x cast to fp32 (unless it
/// is), the pow's transient, the saved rstd and the normalised n = rows x h values.
tensor rms_normalised(walker& w, const tensor& x, u64 n, i64 rows, int x_bytes) {
  tensor x32 = x_bytes != 4 ? w.op(n * 4, "rmsnorm fp32 input", {edge{x, n * x_bytes}}, {}) : x;
  w.transient(n * 4, component::temporaries, "rmsnorm pow");
  tensor rs = w.alloc(static_cast<u64>(rows) * 4, component::activations, "rmsnorm rstd");
  tensor normed = w.op(n * 4, "rmsnorm normalised", {edge{x32, n * 4}}, {x32, rs});
  rs.reset();
  x32.reset();
  return normed;
}

}  // namespace

tensor rms_norm(walker& w, const tensor& x, i64 rows, i64 h, int x_bytes, int p) {
  const u64 n = static_cast<u64>(rows * h);
  tensor normed = rms_normalised(w, x, n, rows, x_bytes);
  // weight * x saves x only for the weight's gradient (none for a frozen weight).
  const bool tw = w.trainable(p);
  if (x_bytes == 4)
    return tw ? w.op(n * 4, "rmsnorm output", {edge{normed, n * 4}}, {normed}, {p})
              : w.op(n * 4, "rmsnorm output", {edge{normed, n * 4}}, {});
  // weight * x.to(input_dtype): the product takes the promoted dtype (fp32 for a 16-bit input
  // and an fp32 weight under autocast: Qwen3's per-head norms); the normalised local lives until
  // the function returns, after the product.
  const tensor cast = w.op(n * x_bytes, "rmsnorm cast back", {edge{normed, n * 4}}, {});
  const u64 ob = n * static_cast<u64>(rms_norm_output_bytes(w, x_bytes, p));
  tensor out = tw ? w.op(ob, "rmsnorm output", {edge{cast, n * x_bytes}}, {cast}, {p})
                  : w.op(ob, "rmsnorm output", {edge{cast, n * x_bytes}}, {});
  normed.reset();
  return out;
}

int rms_norm_output_bytes(const walker& w, int x_bytes, int p) {
  return std::max(x_bytes, w.param_width(p));
}

tensor gemma_rms_norm(walker& w, const tensor& x, i64 rows, i64 h, int x_bytes, int p) {
  const u64 n = static_cast<u64>(rows * h);
  tensor normed = rms_normalised(w, x, n, rows, x_bytes);
  // (1.0 + weight.float()): the weight's fp32 copy (when it is 16-bit) and the sum; the product
  // saves the normalised input only for the weight's gradient, whose backward reduces an n-sized
  // product over the rows.
  const u64 hw = static_cast<u64>(h) * 4;
  if (w.param_width(p) != 4) w.transient(hw, component::temporaries, "norm weight fp32");
  tensor scale = w.op(hw, "norm 1 + weight", {}, {}, {p});
  tensor out = w.trainable(p)
                   ? w.op(n * 4, "rmsnorm scaled", {edge{normed, n * 4}, edge{scale, hw}},
                          {normed, scale}, {}, n * 4)
                   : w.op(n * 4, "rmsnorm scaled", {edge{normed, n * 4}}, {scale});
  normed.reset();
  scale.reset();
  if (x_bytes == 4) return out;
  return w.op(n * x_bytes, "rmsnorm output", {edge{out, n * 4}}, {});
}

tensor norm(walker& w, const tensor& x, i64 rows, i64 h, int x_bytes, int p) {
  const auto& t = w.model().t;
  if (t.layer_norm) return layer_norm(w, x, rows, h, x_bytes, p);
  return t.gemma_norm ? gemma_rms_norm(w, x, rows, h, x_bytes, p)
                      : rms_norm(w, x, rows, h, x_bytes, p);
}

tensor add(walker& w, const tensor& a, int a_bytes, const tensor& b, int b_bytes, u64 elems,
           const char* label) {
  const int ob = std::max(a_bytes, b_bytes);
  return w.op(elems * ob, label,
              {edge{a, elems * a_bytes, a_bytes == ob}, edge{b, elems * b_bytes, b_bytes == ob}},
              {});
}

namespace {

/// SDPA: flash (fp16/bf16) or memory-efficient (fp32) kernel; saves q, k, v, output and the
/// fp32 log-sum-exp; autocast casts fp32 inputs to the low dtype first.
tensor sdpa(walker& w, const dims& D, const attention_inputs& in) {
  const u64 n_q = D.q_elems();
  const u64 n_kv = D.kv_elems();
  const int low = w.dt().low;
  auto cast_in = [&](const tensor& t, u64 n, int tb) {
    if (w.dt().amp && tb == 4) return w.op(n * low, "sdpa input cast", {edge{t, n * 4}}, {});
    return t;
  };
  tensor qc, kc, vc;
  if (!in.packed) {
    qc = cast_in(in.q, n_q, in.qkv_bytes);
    kc = cast_in(in.k, n_kv, in.qkv_bytes);
    vc = cast_in(in.v, static_cast<u64>(D.tok() * D.kv * D.v_dim()), in.v_bytes);
  } else {
    qc = in.q;
  }
  // PyTorch's SDPA rounds the log-sum-exp rows up to 128; flash-attn 2 (attn_implementation
  // "flash_attention_2") allocates exactly seq of them.
  const i64 seq = D.s * D.sp;
  const u64 s_round = static_cast<u64>(
      w.request().attention == attention_kind::flash ? seq : (seq + 127) / 128 * 128);
  // Backward: flash keeps an fp32 dq accumulator (and expanded dk/dv for grouped heads).
  const u64 ws = n_q * 4 + (D.kv != D.heads ? 2 * n_q * low : 0);
  const u64 n_o = static_cast<u64>(D.tok() * D.heads * D.v_dim());
  const u64 n_v = static_cast<u64>(D.tok() * D.kv * D.v_dim());
  const u64 ob = n_o * low;
  // The kernel allocates its output, then the log-sum-exp (H200 trace of Llama amp training).
  tensor out = w.alloc(ob, component::activations, "attention output");
  tensor lse = w.alloc(static_cast<u64>(D.b * D.heads / D.sp) * s_round * 4, component::activations,
                       "attention logsumexp");
  if (in.packed)
    w.attach(out, {edge{in.q, n_q * in.qkv_bytes + 2 * n_kv * in.qkv_bytes}}, {in.q, lse}, ws);
  else
    w.attach(out, {edge{qc, n_q * low}, edge{kc, n_kv * low}, edge{vc, n_v * low}},
             {qc, kc, vc, lse}, ws);
  w.save_output(out);
  lse.reset();
  qc.reset();
  kc.reset();
  vc.reset();
  return out;
}

/// Eager attention as transformers writes it: scores = q k^T, / sqrt(d), + mask, softmax (fp32
/// under autocast, then cast back), dropout, @ v, then a contiguous copy of the output.
tensor eager_attention(walker& w, const dims& D, const attention_inputs& in) {
  const u64 n_q = D.q_elems();
  const u64 n_kv = D.kv_elems();
  const int low = w.dt().low;
  const u64 n_s = D.score_elems();
  const u64 qkv_edge =
      in.packed ? n_q * in.qkv_bytes + 2 * n_kv * in.qkv_bytes : n_q * in.qkv_bytes;
  tensor s = w.op(n_s * low, "attention scores", {edge{in.q, qkv_edge}}, {in.q});
  s = w.op(n_s * low, "scaled scores", {edge{s, n_s * low}}, {});
  if (w.model().t.attn_softcap > 0) {
    // Gemma-2: scores / cap, tanh (saves its output), * cap.
    s = w.op(n_s * low, "softcap divided", {edge{s, n_s * low}}, {});
    s = w.op(n_s * low, "softcap tanh", {edge{s, n_s * low}}, {});
    w.save_output(s);
    s = w.op(n_s * low, "softcap scaled", {edge{s, n_s * low}}, {});
  }
  if (in.causal) s = w.op(n_s * low, "masked scores", {edge{s, n_s * low, true}}, {});
  // softmax under autocast runs with dtype=float32 (reads 16-bit, writes fp32, no input copy).
  tensor probs = w.op(n_s * (w.dt().amp ? 4 : low), "softmax", {edge{s, n_s * low}}, {});
  w.save_output(probs);
  s.reset();
  if (w.dt().amp) probs = w.op(n_s * low, "softmax cast", {edge{probs, n_s * 4}}, {});
  probs = dropout(w, probs, n_s, low, in.dropout, "attention dropout");
  const tensor& v = in.packed ? in.q : in.v;
  const u64 n_o = static_cast<u64>(D.tok() * D.heads * D.v_dim());
  const u64 n_v = static_cast<u64>(D.tok() * D.kv * D.v_dim());
  tensor ctx = w.op(n_o * low, "attention context",
                    {edge{probs, n_s * low}, edge{v, in.packed ? 0 : n_v * low}}, {probs, v});
  probs.reset();
  return w.op(n_o * low, "attention output", {edge{ctx, n_o * low}}, {});
}

/// Selective recompute (Korthikanti et al., section 4.3): the attention core runs without
/// saving; its node keeps q, k and v, and backward re-materialises the s x s tensors (scores,
/// softmax, dropout mask and their gradient) as a workspace while it produces dq, dk and dv.
tensor selective_eager_attention(walker& w, const dims& D, const attention_inputs& in) {
  const u64 n_q = D.q_elems();
  const u64 n_kv = D.kv_elems();
  const int low = w.dt().low;
  const u64 n_s = D.score_elems();
  w.set_grad(false);
  tensor out = eager_attention(w, D, in);
  w.set_grad(true);
  const u64 per_score = static_cast<u64>(low) /* scores */ + (w.dt().amp ? 4 + low : low) +
                        (in.dropout > 0 ? 1 + low : 0) + low /* gradient */;
  const u64 qkv_grad =
      in.packed ? n_q * in.qkv_bytes + 2 * n_kv * in.qkv_bytes : n_q * in.qkv_bytes;
  if (in.packed)
    w.attach(out, {edge{in.q, qkv_grad}}, {in.q}, n_s * per_score);
  else
    w.attach(out,
             {edge{in.q, qkv_grad}, edge{in.k, n_kv * in.qkv_bytes}, edge{in.v, n_kv * in.v_bytes}},
             {in.q, in.k, in.v}, n_s * per_score);
  return out;
}

}  // namespace

tensor math_attention(walker& w, const dims& D, const tensor& q, const tensor& k, const tensor& v,
                      int in_bytes, bool causal) {
  const u64 nq = D.q_elems();
  const u64 nkv = D.kv_elems();
  const i64 s = D.s * D.sp;
  const u64 ns = static_cast<u64>(D.b * D.heads) * static_cast<u64>(s * s);
  constexpr auto tmp = component::temporaries;
  // The order and lifetimes below are those of allocator traces of Falcon-7B training (b1
  // s1280/s1536/s2048, b2 s1024; H200, torch 2.11).
  // The boolean causal mask the model passes becomes an additive mask in the query's dtype,
  // kept to the end of the kernel.
  tensor mask;
  if (causal)
    mask = w.alloc(static_cast<u64>(D.b) * static_cast<u64>(s * s) * in_bytes, tmp,
                   "sdpa math additive mask");
  auto up = [&](const tensor& t, u64 n) {
    return in_bytes != 4 ? w.op(n * 4, "sdpa math fp32 input", {edge{t, n * in_bytes}}, {}) : t;
  };
  tensor q32 = up(q, nq);
  tensor k32 = up(k, nkv);
  tensor v32 = up(v, nkv);
  tensor qs = w.op(nq * 4, "sdpa math scaled query", {edge{q32, nq * 4}}, {});
  tensor ks = w.op(nkv * 4, "sdpa math scaled key", {edge{k32, nkv * 4}}, {});
  // matmul reshapes both operands to (b * heads, ...) for bmm. With one sample the key's
  // broadcast over the query heads and the query (a view of the fused projection, laid out by
  // token) reshape as views: autograd saves the scaled query and key as they are, and the key's
  // gradient is summed over the heads from a query-sized temporary. With more samples both are
  // copied (the key broadcast, the query's permuted layout) and the copies are saved. Traces of
  // Falcon-7B training at b1 s1280/s1536/s2048 and b2 s512/s1024 (H200, torch 2.11).
  const bool copies = D.b > 1;
  tensor sc;
  if (copies) {
    tensor qc = w.op(nq * 4, "sdpa math query reshape copy", {edge{qs, nq * 4}}, {});
    tensor kx = w.op(nq * 4, "sdpa math key broadcast copy", {edge{ks, nkv * 4}}, {});
    sc = w.op(ns * 4, "sdpa math scores", {edge{qc, nq * 4}, edge{kx, nq * 4}}, {qc, kx});
  } else {
    sc = w.op(ns * 4, "sdpa math scores", {edge{qs, nq * 4}, edge{ks, nkv * 4}}, {qs, ks}, {},
              nq * 4);
  }
  // attn.add_(mask) in place. _safe_softmax (aten/src/ATen/native/transformers/attention.cpp)
  // runs softmax and a bool mask of the -inf scores; its where() allocates no second fp32
  // tensor (run J's traces of Falcon, training and inference alike). The softmax is saved. Its
  // backward holds a third fp32 score-sized tensor beside the incoming gradient and its result,
  // freed first.
  tensor sm = w.op(ns * 4, "sdpa math softmax", {edge{sc, ns * 4}}, {}, {}, ns * 4);
  w.transient(ns, tmp, "sdpa math -inf mask");
  w.save_output(sm);
  sc.reset();
  // The kernel returns make_tuple(matmul(attn, value).to(dtype), attn.to(dtype)); GCC evaluates
  // the arguments right to left, so the weights' cast is made first and lives until the caller
  // drops the tuple.
  tensor weights_cast;
  if (in_bytes != 4) weights_cast = w.alloc(ns * in_bytes, tmp, "sdpa math weights cast");
  tensor o32;
  if (copies) {
    tensor vx = w.op(nq * 4, "sdpa math value broadcast copy", {edge{v32, nkv * 4}}, {});
    v32.reset();
    o32 = w.op(nq * 4, "sdpa math output", {edge{sm, ns * 4}, edge{vx, nq * 4}}, {sm, vx});
  } else {
    o32 = w.op(nq * 4, "sdpa math output", {edge{sm, ns * 4}, edge{v32, nkv * 4}}, {sm, v32}, {},
               nq * 4);
    v32.reset();
  }
  sm.reset();
  if (in_bytes == 4) return o32;
  tensor out = w.op(nq * in_bytes, "sdpa math output cast", {edge{o32, nq * 4}}, {});
  // The kernel's locals die as it returns: the fp32 output, key and query (as read and as
  // scaled), then the tuple's weights and the additive mask.
  o32.reset();
  ks.reset();
  k32.reset();
  q32.reset();
  qs.reset();
  weights_cast.reset();
  mask.reset();
  return out;
}

tensor attention(walker& w, const dims& D, const attention_inputs& in) {
  const auto& r = w.request();
  if (r.attention != attention_kind::eager) return sdpa(w, D, in);
  // Without grad (a checkpointed layer's first forward, an encoder's inference) eager attention
  // still materialises its scores; nothing is saved.
  if (!w.grad_on()) return eager_attention(w, D, in);
  if (r.ckpt == checkpointing::selective && !w.recomputing())
    return selective_eager_attention(w, D, in);
  return eager_attention(w, D, in);
}

tensor lm_loss(walker& w, const tensor& logits, u64 rows, i64 V, bool explicit_upcast) {
  w.set_phase(phase::loss);
  const u64 n = rows * static_cast<u64>(V);
  const int low = w.bytes(logits) / n == 4 ? 4 : w.dt().low;
  constexpr auto ll = component::logits_and_loss;
  if (low != 4 && !explicit_upcast) {
    // CrossEntropyLoss on 16-bit logits under autocast: cross_entropy_loss hands log_softmax
    // the input's dtype, so autocast's fp32 policy for it does not apply and it runs in 16 bits
    // (its output saved); nll_loss is on autocast's fp32 list, which casts that output to fp32
    // (saved by nll_loss). Backward: the fp32 gradient, its 16-bit cast, the logits' gradient.
    // H200 traces of F.cross_entropy alone (fp16 and bf16) and of RoBERTa amp training.
    tensor lsm = w.op(n * low, "log_softmax", {edge{logits, n * low}}, {}, {}, 0, ll);
    w.save_output(lsm);
    tensor l32 = w.op(n * 4, "nll_loss input (fp32)", {edge{lsm, n * low}}, {}, {}, 0, ll);
    return w.op(4, "loss", {edge{l32, n * 4}}, {l32}, {}, 0, ll);
  }
  tensor l32 =
      low != 4 ? w.op(n * 4, "logits fp32", {edge{logits, n * low}}, {}, {}, 0, ll) : logits;
  tensor lsm = w.op(n * 4, "log_softmax", {edge{l32, n * 4}}, {}, {}, 0, ll);
  w.save_output(lsm);
  tensor loss = w.op(4, "loss", {edge{lsm, n * 4}}, {}, {}, 0, ll);
  lsm.reset();
  l32.reset();
  return loss;
}

}  // namespace vramkit::plan::detail
