// GPT-NeoX (Pythia): packed qkv; partial rotary on q and k: cat(rotated fp32 part, pass part)
// promotes q and k to fp32 under autocast; v stays a view of qkv.
#include <utility>

#include "transformer.hpp"

namespace vramkit::plan::detail {

namespace {

tensor partial_rope(walker& w, const tensor& qkv, u64 nq, const char* label) {
  const int low = w.dt().low;
  const int rb = w.dt().amp ? 4 : low;
  const u64 nrot = static_cast<u64>(static_cast<double>(nq) * w.model().t.rotary_fraction);
  w.transient(nrot * rb, component::temporaries, "rope product");
  w.transient(nrot * low, component::temporaries, "rope rotate_half");
  w.transient(nrot * rb, component::temporaries, "rope product");
  const tensor r = w.op(nrot * rb, "rope output", {edge{qkv, 0, true}}, {});
  return w.op(nq * rb, label, {edge{r, nrot * rb, true}, edge{qkv, (nq - nrot) * low}}, {});
}

}  // namespace

tensor gpt_neox_attention(walker& w, const dims& D, const tensor& in, int in_bytes,
                          const layer_params& p) {
  const int low = w.dt().low;
  const double drop = w.model().t.attention_dropout;
  const u64 nq = D.q_elems();
  const tensor qkv = w.proj(in, D.tok(), D.h, 3 * D.heads * D.d, p.qkv, in_bytes, "qkv",
                            lora_target::q | lora_target::k | lora_target::v);
  tensor q = partial_rope(w, qkv, nq, "query");
  tensor k = partial_rope(w, qkv, nq, "key");
  if (w.dt().amp) {
    tensor qc = w.op(nq * low, "sdpa input cast", {edge{q, nq * 4}}, {});
    tensor kc = w.op(nq * low, "sdpa input cast", {edge{k, nq * 4}}, {});
    q.reset();
    k.reset();
    q = std::move(qc);
    k = std::move(kc);
  }
  tensor o = attention(w, D, {q, k, qkv, low, low, false, true, drop});
  q.reset();
  k.reset();
  return o;
}

}  // namespace vramkit::plan::detail
