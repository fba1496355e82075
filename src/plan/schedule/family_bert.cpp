// BERT (and its encoder relatives): separate query/key/value Linear modules, each casting the
// fp32 input under autocast; bidirectional attention.
#include "transformer.hpp"

namespace vramkit::plan::detail {

tensor bert_attention(walker& w, const dims& D, const tensor& in, int in_bytes,
                      const layer_params& p) {
  const i64 rows = D.tok();
  const int low = w.dt().low;
  tensor q = w.linear(in, rows, D.h, D.heads * D.d, p.qkv, in_bytes, "query");
  tensor k = w.linear(in, rows, D.h, D.kv * D.d, p.qkv, in_bytes, "key");
  tensor v = w.linear(in, rows, D.h, D.kv * D.d, p.qkv, in_bytes, "value");
  tensor o = attention(w, D, {q, k, v, low, low, false, false, w.model().t.attention_dropout});
  q.reset();
  k.reset();
  v.reset();
  return o;
}

}  // namespace vramkit::plan::detail
