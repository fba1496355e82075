// LLaMA / Mistral / Qwen2: q, k, v projections (each casting the fp32 norm output under
// autocast), RoPE (q*cos + rotate_half(q)*sin; cos/sin are fp32 under autocast, promoting q and
// k to fp32), SDPA with grouped-query heads.
#include "transformer.hpp"

namespace vramkit::plan::detail {

tensor rope(walker& w, const tensor& src, u64 n, const char* label) {
  const int low = w.dt().low;
  const int rb = w.dt().amp ? 4 : low;
  tensor a = w.op(n * rb, "rope q*cos", {edge{src, n * low}}, {});
  // rotate_half: cat((-x2, x1)); the negated half lives until the cat has made its output.
  tensor neg = w.alloc(n / 2 * low, component::temporaries, "rope neg");
  tensor rh = w.op(n * low, "rope rotate_half", {edge{src, 0, true}}, {});
  neg.reset();
  tensor b = w.op(n * rb, "rope rot*sin", {edge{rh, n * low}}, {});
  rh.reset();
  tensor c = w.op(n * rb, label, {edge{a, n * rb, true}, edge{b, n * rb, true}}, {});
  a.reset();
  b.reset();
  return c;
}

tensor llama_attention(walker& w, const dims& D, const tensor& in, int in_bytes,
                       const layer_params& p) {
  const i64 rows = D.tok();
  const int low = w.dt().low;
  auto [q, k, v] = separate_qkv(w, D, in, in_bytes, p);
  const int rb = w.dt().amp ? 4 : low;
  if (p.qk_norm >= 0) {
    // Qwen3 / Gemma-3: the model's RMSNorm over each head of q and k before RoPE.
    q = norm(w, q, rows * D.heads, D.d, low, p.qk_norm);
    k = norm(w, k, rows * D.kv, D.d, low, p.qk_norm);
  }
  // query_states, key_states = apply_rotary_pos_emb(...): both rotated before either input is
  // dropped.
  tensor qr = rope(w, q, D.q_elems(), "query rotated");
  tensor kr = rope(w, k, D.kv_elems(), "key rotated");
  q = std::move(qr);
  k = std::move(kr);
  tensor o = attention(w, D, {q, k, v, rb, low, false, true, w.model().t.attention_dropout});
  // The module's locals live until its output projection has run (pre_norm_block).
  w.hold(std::move(q));
  w.hold(std::move(k));
  w.hold(std::move(v));
  return o;
}

}  // namespace vramkit::plan::detail
