// Phi-3: one packed qkv_proj (a single autocast cast of the norm output), q, k and v as views of
// it, RoPE on q and k as LLaMA applies it, then cat([rotated, pass-through]) which copies even
// when the rotary part is the whole head.
#include "transformer.hpp"

namespace vramkit::plan::detail {

namespace {

tensor rope_cat(walker& w, const tensor& qkv, u64 n, const char* label) {
  const int low = w.dt().low;
  const int rb = w.dt().amp ? 4 : low;
  tensor a = w.op(n * rb, "rope q*cos", {edge{qkv, n * low}}, {});
  w.transient(n / 2 * low, component::temporaries, "rope neg");
  tensor rh = w.op(n * low, "rope rotate_half", {edge{qkv, 0, true}}, {});
  tensor b = w.op(n * rb, "rope rot*sin", {edge{rh, n * low}}, {});
  rh.reset();
  tensor c = w.op(n * rb, "rope sum", {edge{a, n * rb, true}, edge{b, n * rb, true}}, {});
  a.reset();
  b.reset();
  return w.op(n * rb, label, {edge{c, n * rb, true}}, {});
}

}  // namespace

tensor phi3_attention(walker& w, const dims& D, const tensor& in, int in_bytes,
                      const layer_params& p) {
  const i64 rows = D.tok();
  const int low = w.dt().low;
  const tensor qkv = w.proj(in, rows, D.h, (D.heads + 2 * D.kv) * D.d, p.qkv, in_bytes, "qkv",
                            lora_target::q | lora_target::k | lora_target::v);
  tensor q = rope_cat(w, qkv, D.q_elems(), "query rotated");
  tensor k = rope_cat(w, qkv, D.kv_elems(), "key rotated");
  const int rb = w.dt().amp ? 4 : low;
  tensor o = attention(w, D, {q, k, qkv, rb, low, false, true, w.model().t.attention_dropout});
  q.reset();
  k.reset();
  return o;
}

}  // namespace vramkit::plan::detail
