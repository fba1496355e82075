// GPT-2: one packed qkv projection (Conv1D), causal attention over it.
#include "transformer.hpp"

namespace vramkit::plan::detail {

tensor gpt2_attention(walker& w, const dims& D, const tensor& in, int in_bytes,
                      const layer_params& p) {
  const int low = w.dt().low;
  const tensor qkv = w.proj(in, D.tok(), D.h, 3 * D.heads * D.d, p.qkv, in_bytes, "qkv",
                            lora_target::q | lora_target::k | lora_target::v);
  return attention(w, D, {qkv, qkv, qkv, low, low, true, true, w.model().t.attention_dropout});
}

}  // namespace vramkit::plan::detail
