// T5ForConditionalGeneration as transformers runs it: its own eager attention (no score scaling;
// the relative-position bias, computed in the first block of each stack and broadcast with the
// mask to (b, heads, q, k), is added in place and handed to every later block; softmax on an fp32
// copy, cast back, dropout), T5LayerNorm (pow on an fp32 copy, x * rsqrt promoting to fp32, cast
// to a 16-bit weight's dtype, weight *), the feed-forward (ReLU, or gelu_new-gated) whose input
// is cast to wo's dtype first, residual dropout adds; the decoder's cross-attention; the tied
// head's d**-0.5 rescale; CrossEntropyLoss on the logits. generate() runs the encoder once, then
// decodes with a growing self-attention cache and a cross-attention cache made at the first step.
#include <algorithm>

#include "steps.hpp"
#include "transformer.hpp"

namespace vramkit::plan::detail {

namespace {

struct t5_dims {
  i64 b = 1, q = 1, k = 1, h = 1, heads = 1, d = 1, f = 1;
  [[nodiscard]] u64 inner() const { return static_cast<u64>(heads * d); }
  [[nodiscard]] u64 scores() const {
    return static_cast<u64>(b * heads) * static_cast<u64>(q) * static_cast<u64>(k);
  }
};

/// T5LayerNorm on (rows, h) of width xb; returns the output (the weight's dtype, fp32 under amp).
tensor t5_norm(walker& w, const tensor& x, i64 rows, i64 h, int xb, int p) {
  const u64 n = static_cast<u64>(rows * h);
  tensor x32 = xb != 4 ? w.op(n * 4, "t5 norm fp32 copy", {edge{x, n * xb}}, {}) : x;
  tensor sq = w.op(n * 4, "t5 norm pow", {edge{x32, n * 4}}, {x32});
  x32.reset();
  tensor var = w.op(static_cast<u64>(rows) * 4, "t5 norm variance", {edge{sq, n * 4}}, {});
  sq.reset();
  tensor rs = w.op(static_cast<u64>(rows) * 4, "t5 norm rsqrt",
                   {edge{var, static_cast<u64>(rows) * 4}}, {});
  w.save_output(rs);
  var.reset();
  tensor y = w.op(n * 4, "t5 norm normalised",
                  {edge{x, n * xb}, edge{rs, static_cast<u64>(rows) * 4}}, {x, rs});
  rs.reset();
  const int pw = w.param_width(p);
  if (pw != 4) y = w.op(n * pw, "t5 norm cast", {edge{y, n * 4}}, {});
  const int ob = pw;
  return w.trainable(p) ? w.op(n * ob, "t5 norm output", {edge{y, n * ob}}, {y}, {p})
                        : w.op(n * ob, "t5 norm output", {edge{y, n * ob}}, {});
}

/// T5Attention (eager): q from `x`, k and v from `kv_src` (x itself, or the encoder output);
/// `bias` the (b, heads, q, k) position bias plus mask, kept by the caller.
tensor t5_attention(walker& w, const t5_dims& D, const tensor& x, int xb, const tensor& kv_src,
                    int kvb, int pq, int pkv, int po, const tensor& bias) {
  const int low = w.dt().low;
  const u64 nq = static_cast<u64>(D.b * D.q) * D.inner();
  const u64 nk = static_cast<u64>(D.b * D.k) * D.inner();
  const u64 ns = D.scores();
  const double drop = w.model().t.attention_dropout;
  tensor q = w.linear(x, D.b * D.q, D.h, static_cast<i64>(D.inner()), pq, xb, "t5 query");
  tensor k = w.linear(kv_src, D.b * D.k, D.h, static_cast<i64>(D.inner()), pkv, kvb, "t5 key");
  tensor v = w.linear(kv_src, D.b * D.k, D.h, static_cast<i64>(D.inner()), pkv, kvb, "t5 value");
  tensor s = w.op(ns * low, "t5 scores", {edge{q, nq * low}, edge{k, nk * low}}, {q, k});
  q.reset();
  k.reset();
  // scores += position_bias (in place: the sum lives in the scores' storage), then
  // softmax(scores.float()).type_as(scores).
  const tensor sb = w.op(0, "t5 scores += bias (in place)",
                         {edge{s, ns * low, true}, edge{bias, ns * low, true}}, {});
  tensor s32 = low != 4 ? w.op(ns * 4, "t5 scores fp32", {edge{sb, ns * low}}, {}) : sb;
  tensor p = w.op(ns * 4, "t5 softmax", {edge{s32, ns * 4}}, {});
  w.save_output(p);
  s32.reset();
  s.reset();
  if (low != 4) p = w.op(ns * low, "t5 softmax cast", {edge{p, ns * 4}}, {});
  p = dropout(w, p, ns, low, drop, "t5 attention dropout");
  tensor o = w.op(nq * low, "t5 attention context", {edge{p, ns * low}, edge{v, nk * low}}, {p, v});
  p.reset();
  v.reset();
  o = w.op(nq * low, "t5 attention output contiguous", {edge{o, nq * low}}, {});
  return w.linear(o, D.b * D.q, static_cast<i64>(D.inner()), D.h, po, low, "t5 attention out");
}

/// T5DenseActDense / T5DenseGatedActDense on the normed input.
tensor t5_ff(walker& w, const t5_dims& D, const tensor& x, int xb, const layer_params& p) {
  const auto& t = w.model().t;
  const int low = w.dt().low;
  const i64 rows = D.b * D.q;
  const u64 nf = static_cast<u64>(rows * D.f);
  tensor a;
  if (t.mlp == mlp_kind::swiglu) {
    // gelu_new(wi_0(x)) * wi_1(x): gelu_new is Python arithmetic (pow, tanh and products saved).
    tensor g = w.linear(x, rows, D.h, D.f, p.mlp_in, xb, "t5 wi_0");
    const int eb = w.dt().amp ? 4 : low;
    tensor g32 = w.dt().amp ? w.op(nf * 4, "gelu input fp32", {edge{g, nf * low}}, {}) : g;
    tensor pw = w.op(nf * eb, "gelu pow", {edge{g32, nf * eb}}, {g32});
    pw = w.op(nf * eb, "gelu scaled pow", {edge{pw, nf * eb, true}}, {});
    pw = add(w, g, low, pw, eb, nf, "gelu inner sum");
    pw = w.op(nf * eb, "gelu scaled", {edge{pw, nf * eb, true}}, {});
    tensor th = w.op(nf * eb, "gelu tanh", {edge{pw, nf * eb}}, {});
    w.save_output(th);
    pw.reset();
    th = w.op(nf * eb, "gelu 1+tanh", {edge{th, nf * eb, true}}, {});
    tensor hx = w.op(nf * low, "gelu half x", {edge{g, nf * low, true}}, {});
    tensor ge = w.op(nf * eb, "gelu output", {edge{hx, nf * low}, edge{th, nf * eb}}, {hx, th});
    hx.reset();
    th.reset();
    g32.reset();
    g.reset();
    tensor u = w.linear(x, rows, D.h, D.f, p.mlp_in, xb, "t5 wi_1");
    a = w.op(nf * eb, "t5 gated product", {edge{ge, nf * eb}, edge{u, nf * low}}, {ge, u});
  } else {
    tensor u = w.linear(x, rows, D.h, D.f, p.mlp_in, xb, "t5 wi");
    a = w.op(nf * low, "t5 relu", {edge{u, nf * low}}, {});
    w.save_output(a);
  }
  int ab = w.dt().amp && t.mlp == mlp_kind::swiglu ? 4 : low;
  a = dropout(w, a, nf, ab, t.hidden_dropout, "t5 ff dropout");
  // hidden_states.to(self.wo.weight.dtype) when they differ (bf16 GEMM output, fp32 wo).
  const int wb = w.param_width(p.mlp_down);
  if (ab != wb) {
    a = w.op(nf * wb, "t5 cast to wo dtype", {edge{a, nf * ab}}, {});
    ab = wb;
  }
  return w.linear(a, rows, D.f, D.h, p.mlp_down, ab, "t5 wo");
}

/// hidden + dropout(sublayer): the residual add (promoting to the wider dtype).
tensor residual(walker& w, const tensor& x, int xb, tensor y, int yb, u64 n) {
  y = dropout(w, y, n, yb, w.model().t.hidden_dropout, "t5 residual dropout");
  return add(w, x, xb, y, yb, n, "t5 residual");
}

/// The first block's relative-position bias broadcast with the mask: positions and buckets
/// (int64, q x k), the bias embedding (q, k, heads), then + mask (b, heads, q, k).
tensor position_bias(walker& w, const t5_dims& D, int rel_bias) {
  const int low = w.dt().low;
  const u64 qk = static_cast<u64>(D.q * D.k);
  w.transient(qk * 8, component::temporaries, "t5 relative positions");
  tensor buckets = w.alloc(qk * 8, component::temporaries, "t5 relative buckets");
  tensor values = rel_bias >= 0 ? w.op(qk * static_cast<u64>(D.heads) * w.param_width(rel_bias),
                                       "t5 position bias", {}, {buckets}, {rel_bias})
                                : w.alloc(qk * static_cast<u64>(D.heads) * low,
                                          component::activations, "t5 zero position bias");
  buckets.reset();
  return w.op(D.scores() * low, "t5 position bias + mask",
              {edge{values, qk * static_cast<u64>(D.heads) * low}}, {});
}

/// x = x + dropout(SelfAttention(T5LayerNorm(x))) with the relative-position `bias`; x widens
/// to the compute width. Returns the width of the norm's output.
int self_attention_sublayer(walker& w, const t5_dims& D, tensor& x, int& xb, const layer_params& p,
                            const tensor& bias) {
  const i64 rows = D.b * D.q;
  const int low = w.dt().low;
  tensor n = t5_norm(w, x, rows, D.h, xb, p.attn_norm);
  const int nb = w.param_width(p.attn_norm);
  tensor a = t5_attention(w, D, n, nb, n, nb, p.qkv, p.qkv, p.attn_out, bias);
  n.reset();
  x = residual(w, x, xb, std::move(a), low, static_cast<u64>(rows * D.h));
  xb = std::max(xb, low);
  return nb;
}

/// x = x + dropout(DenseReluDense(T5LayerNorm(x))), the feed-forward reading the norm's output
/// as `ff_in_bytes` wide.
void feed_forward_sublayer(walker& w, const t5_dims& D, tensor& x, int xb, const layer_params& p,
                           int ff_in_bytes) {
  const i64 rows = D.b * D.q;
  tensor n = t5_norm(w, x, rows, D.h, xb, p.mlp_norm);
  tensor f = t5_ff(w, D, n, ff_in_bytes, p);
  n.reset();
  x = residual(w, x, xb, std::move(f), w.dt().low, static_cast<u64>(rows * D.h));
}

}  // namespace

tensor t5_forward_loss(walker& w) {
  const auto& t = w.model().t;
  const auto& r = w.request();
  const auto& lm = w.lm();
  const i64 enc = t.layers - t.decoder_layers;
  // Targets as long as the inputs (--seq gives both).
  const i64 b = r.micro_batch, s = r.seq, sd = r.seq;
  const int low = w.dt().low, eb = w.dt().act;
  w.set_phase(phase::forward);
  w.set_layer(-1);
  tensor ids = w.alloc(static_cast<u64>(b * s) * 8, component::inputs, "input ids");
  tensor mask_in = w.alloc(static_cast<u64>(b * s) * 8, component::inputs, "attention mask");
  tensor labels = w.alloc(static_cast<u64>(b * sd) * 8, component::inputs, "labels");
  tensor dec_ids = w.alloc(static_cast<u64>(b * sd) * 8, component::inputs, "decoder input ids");
  t5_dims enc_dims{b, s, s, t.hidden, t.heads, t.head_dim, t.intermediate};
  const u64 nh = static_cast<u64>(b * s * t.hidden);
  // Encoder.
  tensor x = w.op(nh * eb, "token embeddings", {}, {ids}, {lm.embed});
  x = dropout(w, x, nh, eb, t.hidden_dropout, "embedding dropout");
  int xb = eb;
  tensor ebias;
  for (int l = 0; l < enc; ++l) {
    w.set_layer(l);
    const auto p = w.layer_param(l);
    if (l == 0) ebias = position_bias(w, enc_dims, p.rel_bias);
    self_attention_sublayer(w, enc_dims, x, xb, p, ebias);
    feed_forward_sublayer(w, enc_dims, x, xb, p, w.param_width(p.mlp_norm));
  }
  ebias.reset();
  w.set_layer(-1);
  tensor enc_out = t5_norm(w, x, b * s, t.hidden, xb, lm.enc_final_norm);
  const int ob = w.param_width(lm.enc_final_norm);
  x.reset();
  enc_out = dropout(w, enc_out, nh, ob, t.hidden_dropout, "encoder dropout");
  // Decoder.
  t5_dims self_dims{b, sd, sd, t.hidden, t.heads, t.head_dim, t.intermediate};
  t5_dims cross_dims{b, sd, s, t.hidden, t.heads, t.head_dim, t.intermediate};
  const u64 nd = static_cast<u64>(b * sd * t.hidden);
  tensor y = w.op(nd * eb, "decoder embeddings", {}, {dec_ids}, {lm.embed});
  y = dropout(w, y, nd, eb, t.hidden_dropout, "embedding dropout");
  int yb = eb;
  tensor sbias, xbias;
  for (int l = static_cast<int>(enc); l < t.layers; ++l) {
    w.set_layer(l);
    const auto p = w.layer_param(l);
    if (l == enc) {
      sbias = position_bias(w, self_dims, p.rel_bias);
      xbias = position_bias(w, cross_dims, -1);
    }
    const int nb = self_attention_sublayer(w, self_dims, y, yb, p, sbias);
    tensor n = t5_norm(w, y, b * sd, t.hidden, yb, p.cross_norm);
    tensor a =
        t5_attention(w, cross_dims, n, nb, enc_out, ob, p.cross_q, p.cross_kv, p.cross_out, xbias);
    n.reset();
    y = residual(w, y, yb, std::move(a), low, nd);
    feed_forward_sublayer(w, self_dims, y, yb, p, nb);
  }
  sbias.reset();
  xbias.reset();
  enc_out.reset();
  w.set_layer(-1);
  tensor out = t5_norm(w, y, b * sd, t.hidden, yb, lm.final_norm);
  y.reset();
  out = dropout(w, out, nd, ob, t.hidden_dropout, "decoder dropout");
  if (t.tied_embeddings) out = w.op(nd * ob, "t5 tied rescale", {edge{out, nd * ob}}, {});
  const int head = lm.head >= 0 ? lm.head : lm.embed;
  tensor logits =
      w.linear(out, b * sd, t.hidden, t.vocab, head, ob, "logits", component::logits_and_loss);
  out.reset();
  tensor loss = lm_loss(w, logits, static_cast<u64>(b * sd), t.vocab, false);
  logits.reset();
  w.clear_autocast_cache();
  ids.reset();
  mask_in.reset();
  labels.reset();
  dec_ids.reset();
  return loss;
}

void t5_generate(walker& w) {
  // Inference: everything below runs without grad; tensors are freed where the code drops them.
  const auto& t = w.model().t;
  const auto& r = w.request();
  const auto& lm = w.lm();
  w.set_grad(false);
  const i64 enc = t.layers - t.decoder_layers;
  const i64 b = r.batch, s = r.prompt;
  const int low = w.dt().low;
  const u64 inner = static_cast<u64>(t.heads * t.head_dim);
  w.keep(static_cast<u64>(b * s) * 16, component::inputs, "input ids and mask");
  w.set_phase(phase::prefill);
  // The encoder, once: its forward is the training one without saving anything.
  {
    t5_dims enc_dims{b, s, s, t.hidden, t.heads, t.head_dim, t.intermediate};
    const u64 nh = static_cast<u64>(b * s * t.hidden);
    tensor x = w.alloc(nh * low, component::temporaries, "token embeddings");
    tensor bias;
    for (int l = 0; l < enc; ++l) {
      w.set_layer(l);
      const auto p = w.layer_param(l);
      if (l == 0) bias = position_bias(w, enc_dims, p.rel_bias);
      tensor n = t5_norm(w, x, b * s, t.hidden, low, p.attn_norm);
      tensor a = t5_attention(w, enc_dims, n, low, n, low, p.qkv, p.qkv, p.attn_out, bias);
      n.reset();
      x = add(w, x, low, a, low, nh, "t5 residual");
      a.reset();
      n = t5_norm(w, x, b * s, t.hidden, low, p.mlp_norm);
      tensor f = t5_ff(w, enc_dims, n, low, p);
      n.reset();
      x = add(w, x, low, f, low, nh, "t5 residual");
    }
    bias.reset();
    w.set_layer(-1);
    tensor enc_out = t5_norm(w, x, b * s, t.hidden, low, lm.enc_final_norm);
    x.reset();
    walker::persist(enc_out);  // encoder_outputs live through the whole call
  }
  // Decoding: the cross-attention cache (K and V of the encoder output, per layer) is made at the
  // first step; the self-attention cache grows by concatenation.
  const i64 layers = t.decoder_layers;
  std::vector<tensor> ck(static_cast<std::size_t>(layers)), cv(ck.size()), sk(ck.size()),
      sv(ck.size());
  const i64 steps = r.new_tokens;
  const i64 replay = std::min<i64>(steps, 64);
  w.set_phase(phase::decode);
  for (i64 k = 0; k < replay; ++k) {
    const i64 i = replay == steps ? k : k * steps / replay;  // tokens already decoded
    w.set_step(static_cast<int>(std::min<i64>(i, 32000)));
    const u64 nh = static_cast<u64>(b * t.hidden);
    tensor y = w.alloc(nh * low, component::temporaries, "decoder embeddings");
    for (i64 l = 0; l < layers; ++l) {
      w.set_layer(static_cast<int>(enc + l));
      const auto li = static_cast<std::size_t>(l);
      w.transient(nh * 4, component::temporaries, "t5 norm");
      const u64 total = static_cast<u64>(b * (i + 1)) * inner * low;
      sk[li] = w.alloc(total, component::kv_cache, "KV cache (self K)");
      sv[li] = w.alloc(total, component::kv_cache, "KV cache (self V)");
      if (ck[li].empty()) {
        ck[li] = w.alloc(static_cast<u64>(b * s) * inner * low, component::kv_cache,
                         "KV cache (cross K)");
        cv[li] = w.alloc(static_cast<u64>(b * s) * inner * low, component::kv_cache,
                         "KV cache (cross V)");
      }
      const u64 ns = static_cast<u64>(b * t.heads) * static_cast<u64>(std::max<i64>(i + 1, s));
      w.transient(ns * 4, component::temporaries, "t5 softmax fp32");
      y = w.alloc(nh * low, component::temporaries, "t5 residual");
      w.transient(static_cast<u64>(b * t.intermediate) * low * 3, component::temporaries, "t5 ff");
      y = w.alloc(nh * low, component::temporaries, "t5 residual");
    }
    w.set_layer(-1);
    tensor lg = w.alloc(static_cast<u64>(b * t.vocab) * low, component::logits_and_loss,
                        "logits (last token)");
    tensor l32 = w.alloc(static_cast<u64>(b * t.vocab) * 4, component::logits_and_loss,
                         "next-token logits fp32");
  }
  w.set_step(0);
  for (auto* v : {&ck, &cv, &sk, &sv})
    for (auto& c : *v) walker::persist(c);
}

}  // namespace vramkit::plan::detail
