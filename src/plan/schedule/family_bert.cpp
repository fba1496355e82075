// BERT (and its encoder relatives): separate query/key/value Linear modules, each casting the
// fp32 input under autocast; bidirectional attention.
#include "transformer.hpp"

namespace vramkit::plan::detail {

qkv_tensors separate_qkv(walker& w, const dims& D, const tensor& in, int in_bytes,
                         const layer_params& p) {
  const i64 rows = D.tok();
  qkv_tensors t;
  t.q = w.proj(in, rows, D.h, D.heads * D.d, p.qkv, in_bytes, "query", lora_target::q);
  t.k = w.proj(in, rows, D.h, D.kv * D.d, p.key(), in_bytes, "key", lora_target::k);
  t.v = w.proj(in, rows, D.h, D.kv * D.d, p.value(), in_bytes, "value", lora_target::v);
  return t;
}

tensor bert_attention(walker& w, const dims& D, const tensor& in, int in_bytes,
                      const layer_params& p) {
  const int low = w.dt().low;
  auto [q, k, v] = separate_qkv(w, D, in, in_bytes, p);
  tensor o = attention(w, D, {q, k, v, low, low, false, false, w.model().t.attention_dropout});
  q.reset();
  k.reset();
  v.reset();
  return o;
}

}  // namespace vramkit::plan::detail
