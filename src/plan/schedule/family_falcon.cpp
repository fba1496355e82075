// Falcon: one fused query_key_value projection split into heads. Falcon-7B (multi-query): q is a
// view, k and v one head each copied out by advanced indexing, and SDPA gets 71 query heads
// against 1 key head without enable_gqa, which sends it to the math fallback. The new decoder
// architecture (Falcon-40B/180B): num_kv_heads groups of (heads/kv + 2); k and v are indexed,
// broadcast to the query's heads and flattened (copies, as is the query's flatten), then flash.
// RoPE as LLaMA applies it. Each split's backward scatters into a zero-filled full-size gradient.
#include <utility>

#include "transformer.hpp"

namespace vramkit::plan::detail {

tensor falcon_attention(walker& w, const dims& D, const tensor& in, int in_bytes,
                        const layer_params& p) {
  const i64 rows = D.tok();
  const int low = w.dt().low;
  const auto& t = w.model().t;
  const u64 nq = D.q_elems();
  const u64 nkv = D.kv_elems();
  const u64 nfused = nq + 2 * nkv;
  const bool multi_query = t.kv_heads == 1 && t.heads > 1 && t.shared_parallel_norm;
  const tensor qkv = w.proj(in, rows, D.h, (D.heads + 2 * D.kv) * D.d, p.qkv, in_bytes,
                            "query_key_value", lora_target::q | lora_target::k | lora_target::v);
  tensor q, k, v;
  if (multi_query) {
    q = qkv;  // a view; its backward fills a full-size zero gradient
    k = w.op(nkv * low, "key (indexed copy)", {edge{qkv, nfused * low}}, {});
    v = w.op(nkv * low, "value (indexed copy)", {edge{qkv, nfused * low}}, {});
  } else {
    q = w.op(nq * low, "query (flattened copy)", {edge{qkv, nfused * low}}, {});
    tensor ki = w.op(nkv * low, "key (indexed copy)", {edge{qkv, nfused * low}}, {});
    k = w.op(nq * low, "key (broadcast, flattened copy)", {edge{ki, nkv * low}}, {});
    ki.reset();
    tensor vi = w.op(nkv * low, "value (indexed copy)", {edge{qkv, nfused * low}}, {});
    v = w.op(nq * low, "value (broadcast, flattened copy)", {edge{vi, nkv * low}}, {});
    vi.reset();
  }
  const u64 nk = multi_query ? nkv : nq;
  tensor qr = rope(w, q, nq, w.dt().low, "query rotated");
  tensor kr = rope(w, k, nk, w.dt().low, "key rotated");
  q.reset();
  k.reset();
  const int rb = w.dt().amp ? 4 : low;
  tensor o;
  // flash-attn 2 (attn_implementation "flash_attention_2") takes multi-query heads as they are.
  const bool math = multi_query && w.request().attention == attention_kind::sdpa;
  if (math) {
    // Autocast casts SDPA's inputs to 16 bits; the math kernel upcasts them again.
    if (rb == 4) {
      tensor qc = w.op(nq * low, "sdpa input cast", {edge{qr, nq * 4}}, {});
      tensor kc = w.op(nkv * low, "sdpa input cast", {edge{kr, nkv * 4}}, {});
      qr = std::move(qc);
      kr = std::move(kc);
    }
    o = math_attention(w, D, qr, kr, v, low, true);
  } else {
    dims dk = D;
    if (!multi_query) dk.kv = D.heads;  // k and v were broadcast to every query head
    o = attention(w, dk, {qr, kr, v, rb, low, false, true, t.attention_dropout});
  }
  qr.reset();
  kr.reset();
  v.reset();
  // attn_output.transpose(1, 2).reshape(b, s, h): the math kernel's (b, heads, s, d) output is
  // copied; flash attention's is already laid out by token.
  if (!math) return o;
  return w.op(nq * low, "attention output (reshaped copy)", {edge{o, nq * low}}, {});
}

}  // namespace vramkit::plan::detail
