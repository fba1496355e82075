// LLaMA / Mistral / Qwen2: q, k, v projections (each casting the fp32 norm output under
// autocast), RoPE (q*cos + rotate_half(q)*sin; cos/sin are fp32 under autocast, promoting q and
// k to fp32), SDPA with grouped-query heads.
#include <algorithm>

#include "transformer.hpp"

namespace vramkit::plan::detail {

tensor rope(walker& w, const tensor& src, u64 n, int src_bytes, const char* label) {
  const int rb = std::max(w.dt().amp ? 4 : w.dt().low, src_bytes);
  tensor a = w.op(n * rb, "rope q*cos", {edge{src, n * src_bytes}}, {});
  // rotate_half: cat((-x2, x1)); the negated half lives until the cat has made its output.
  tensor neg = w.alloc(n / 2 * src_bytes, component::temporaries, "rope neg");
  tensor rh = w.op(n * src_bytes, "rope rotate_half", {edge{src, 0, true}}, {});
  neg.reset();
  tensor b = w.op(n * rb, "rope rot*sin", {edge{rh, n * src_bytes}}, {});
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
  int qk_bytes = low;
  tensor q, k, v;
  if (p.qk_norm >= 0 && !w.model().t.gemma_norm) {
    // Qwen3: q_norm(q_proj(x)), k_norm(k_proj(x)), then v_proj(x); the norms return weight * x,
    // fp32 under autocast (the weight's dtype).
    q = w.proj(in, rows, D.h, D.heads * D.d, p.qkv, in_bytes, "query", lora_target::q);
    q = norm(w, q, rows * D.heads, D.d, low, p.qk_norm);
    k = w.proj(in, rows, D.h, D.kv * D.d, p.key(), in_bytes, "key", lora_target::k);
    k = norm(w, k, rows * D.kv, D.d, low, p.qk_norm);
    v = w.proj(in, rows, D.h, D.kv * D.d, p.value(), in_bytes, "value", lora_target::v);
    qk_bytes = rms_norm_output_bytes(w, low, p.qk_norm);
  } else {
    auto qkv = separate_qkv(w, D, in, in_bytes, p);
    q = std::move(qkv.q), k = std::move(qkv.k), v = std::move(qkv.v);
    if (p.qk_norm >= 0) {
      // Gemma-3: the per-head norms after all three projections, in the input's dtype.
      q = norm(w, q, rows * D.heads, D.d, low, p.qk_norm);
      k = norm(w, k, rows * D.kv, D.d, low, p.qk_norm);
    }
  }
  const int rb = std::max(w.dt().amp ? 4 : low, qk_bytes);
  // query_states, key_states = apply_rotary_pos_emb(...): both rotated before either input is
  // dropped.
  tensor qr = rope(w, q, D.q_elems(), qk_bytes, "query rotated");
  tensor kr = rope(w, k, D.kv_elems(), qk_bytes, "key rotated");
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
