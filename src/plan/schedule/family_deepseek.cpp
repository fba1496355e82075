// DeepSeek-V2/V3 multi-head latent attention (DeepseekV3Attention): q through q_a_proj,
// q_a_layernorm and q_b_proj (or one q_proj), the compressed KV and the shared rotary key from
// kv_a_proj_with_mqa, kv_a_layernorm and kv_b_proj up to per-head keys and values; RoPE on the
// rotary parts, then cat([pass, rotated]) builds the query and the key (the rotary key expanded
// over the heads), and SDPA runs with qk_nope + qk_rope head dims for q/k and v_head for v. RoPE
// on the rotary slices is LLaMA's (rope, family_llama.cpp).
#include "transformer.hpp"

namespace vramkit::plan::detail {

tensor deepseek_attention(walker& w, const dims& D, const tensor& in, int in_bytes,
                          const layer_params& p) {
  const auto& mla = w.model().t.mla;
  const i64 rows = D.tok();
  const int low = w.dt().low;
  const int rb = w.dt().amp ? 4 : low;
  const i64 qk = mla.qk_nope + mla.qk_rope;
  tensor q;
  if (mla.q_lora_rank > 0) {
    tensor qa = w.linear(in, rows, D.h, mla.q_lora_rank, p.q_a, in_bytes, "q_a_proj");
    tensor qn = rms_norm(w, qa, rows, mla.q_lora_rank, low, p.q_a_norm);
    qa.reset();
    q = w.linear(qn, rows, mla.q_lora_rank, D.heads * qk, p.qkv, w.dt().amp ? 4 : low, "q_b_proj");
  } else {
    q = w.linear(in, rows, D.h, D.heads * qk, p.qkv, in_bytes, "q_proj");
  }
  tensor ckv = w.linear(in, rows, D.h, mla.kv_lora_rank + mla.qk_rope, p.kv_a, in_bytes,
                        "kv_a_proj_with_mqa");
  tensor kn = rms_norm(w, ckv, rows, mla.kv_lora_rank, low, p.kv_a_norm);
  tensor kv = w.linear(kn, rows, mla.kv_lora_rank, D.heads * (mla.qk_nope + mla.v_head), p.kv_b,
                       w.dt().amp ? 4 : low, "kv_b_proj");
  kn.reset();
  const u64 nq_rot = static_cast<u64>(rows * D.heads * mla.qk_rope);
  const u64 nk_rot = static_cast<u64>(rows * mla.qk_rope);
  tensor q_rot = rope(w, q, nq_rot, w.dt().low, "rope sum");
  tensor k_rot = rope(w, ckv, nk_rot, w.dt().low, "rope sum");
  ckv.reset();
  const u64 nq = static_cast<u64>(rows * D.heads * qk);
  // cat promotes to the wider dtype of its inputs (the rotated parts are fp32 under autocast).
  tensor query = w.op(nq * rb, "query (cat)", {edge{q, nq * low}, edge{q_rot, nq_rot * rb}}, {});
  q.reset();
  q_rot.reset();
  tensor key = w.op(nq * rb, "key (cat)", {edge{kv, 0, true}, edge{k_rot, nk_rot * rb}}, {});
  k_rot.reset();
  tensor o = attention(w, D, {query, key, kv, rb, low, false, true, w.model().t.attention_dropout});
  return o;
}

}  // namespace vramkit::plan::detail
