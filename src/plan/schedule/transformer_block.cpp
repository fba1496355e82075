// One transformer layer: the family's self-attention between norms and residual adds, pre-norm
// (optionally with GPT-NeoX's parallel residual) or post-norm, and full activation
// checkpointing around it.
#include <algorithm>

#include "transformer.hpp"

namespace vramkit::plan::detail {

dims lm_dims(const walker& w) {
  const auto& t = w.model().t;
  const auto& r = w.request();
  dims d;
  d.b = r.micro_batch;
  d.s = r.seq;
  // transformers' ViT: the patches of the image plus the class token.
  if (w.model().family == model_family::hf_vit)
    d.s = (r.image_size / w.model().vit.patch) * (r.image_size / w.model().vit.patch) + 1;
  d.h = t.hidden;
  d.heads = t.heads / r.tp;
  d.kv = std::max<i64>(1, t.kv_heads / r.tp);
  d.d = t.head_dim;
  d.f = t.intermediate / r.tp;
  d.V = t.vocab;
  if (t.latent_attention()) d.vd = t.mla.v_head;
  if (r.sp && r.tp > 1) {
    // Sequence parallel: every activation of the layer is split t ways (Korthikanti et al.);
    // modelled as full heads over s/t tokens.
    d.s = std::max<i64>(1, d.s / r.tp);
    d.sp = r.tp;
    d.heads = t.heads;
    d.kv = t.kv_heads;
    d.f = t.intermediate;
  }
  return d;
}

namespace {

/// What both block layouts size their tensors by: the token rows, rows x hidden elements, the
/// residual stream's width, a norm's output width (fp32 under autocast) and the compute width.
struct block_sizes {
  i64 rows;
  u64 nh;
  int xb;
  int nb;
  int low;
};

block_sizes sizes_of(const walker& w, const dims& D) {
  const i64 rows = D.tok();
  return {rows, static_cast<u64>(rows * D.h), w.dt().act, w.dt().amp ? 4 : w.dt().act, w.dt().low};
}

/// Post-LN (BERT): attention -> dense -> dropout -> LayerNorm(x + .) -> MLP -> dropout ->
/// LayerNorm(h + .).
tensor post_norm_block(walker& w, const transformer_family& fam, const dims& D, const tensor& x,
                       const layer_params& p) {
  const auto& t = w.model().t;
  const auto [rows, nh, xb, nb, low] = sizes_of(w, D);
  tensor y = fam.self_attention(w, D, x, xb, p);
  y = w.proj(y, rows, D.h, D.h, p.attn_out, low, "attention dense", lora_target::o);
  y = dropout(w, y, nh, low, t.hidden_dropout, "hidden dropout");
  y = add(w, y, low, x, xb, nh, "residual");
  tensor h1 = layer_norm(w, y, rows, D.h, std::max(low, xb), p.attn_norm);
  y.reset();
  y = mlp(w, D, h1, nb, p);
  y = dropout(w, y, nh, low, t.hidden_dropout, "hidden dropout");
  y = add(w, y, low, h1, nb, nh, "residual");
  h1.reset();
  return layer_norm(w, y, rows, D.h, std::max(low, nb), p.mlp_norm);
}

/// Pre-norm: x + attn(norm(x)), then h + mlp(norm(h)); with a parallel residual both branches
/// read x: x + attn(norm1(x)) + mlp(norm2(x)).
tensor pre_norm_block(walker& w, const transformer_family& fam, const dims& D, const tensor& x,
                      const layer_params& p) {
  const auto& t = w.model().t;
  const auto [rows, nh, xb, nb, low] = sizes_of(w, D);
  tensor n1 = norm(w, x, rows, D.h, xb, p.attn_norm);
  tensor od = fam.self_attention(w, D, n1, nb, p);
  od = w.proj(od, rows, D.heads * D.v_dim(), D.h, p.attn_out, low, "attention output projection",
              lora_target::o);
  w.release_held();
  od = dropout(w, od, nh, low, t.hidden_dropout, "residual dropout");
  // Gemma: post_attention_layernorm on the attention output before the residual add.
  if (t.sandwich_norm) od = norm(w, od, rows, D.h, low, p.post_attn_norm);
  if (t.parallel_residual) {
    // Falcon-7B's MLP reads the attention's LayerNorm output; GPT-NeoX and the new Falcon
    // architecture norm x again.
    tensor n2 = t.shared_parallel_norm ? n1 : norm(w, x, rows, D.h, xb, p.mlp_norm);
    n1.reset();
    tensor m = mlp(w, D, n2, nb, p);
    n2.reset();
    if (w.model().family == model_family::falcon) {
      // mlp_output += attention_output (in place), then dropout_add(mlp_output, residual).
      const tensor sum = w.op(0, "mlp += attention (in place)",
                              {edge{m, nh * low, true}, edge{od, nh * low, true}}, {});
      od.reset();
      tensor y = add(w, sum, low, x, xb, nh, "residual");
      m.reset();
      return y;
    }
    m = dropout(w, m, nh, low, t.hidden_dropout, "residual dropout");
    m = add(w, m, low, od, low, nh, "parallel sum");
    od.reset();
    return add(w, m, low, x, xb, nh, "residual");
  }
  n1.reset();
  tensor h1 = add(w, od, low, x, xb, nh, "residual");
  // transformers' ViTLayer keeps attention_output in a local until the layer returns, so it
  // lives through the MLP; the other families rebind hidden_states and drop it here.
  if (w.model().family != model_family::hf_vit) od.reset();
  const int h1b = std::max(low, xb);
  tensor m = norm(w, h1, rows, D.h, h1b, p.mlp_norm);
  m = mlp(w, D, m, nb, p);
  m = dropout(w, m, nh, low, t.hidden_dropout, "residual dropout");
  if (t.sandwich_norm) m = norm(w, m, rows, D.h, low, p.post_mlp_norm);
  m = add(w, m, low, h1, h1b, nh, "residual");
  h1.reset();
  return m;
}

}  // namespace

tensor transformer_block(walker& w, const tensor& x, int l) {
  w.set_layer(l);
  if (w.current_phase() != phase::backward) w.set_phase(phase::forward);
  const auto& fam = transformer_family_of(w.model().family);
  const dims d = lm_dims(w);
  const layer_params p = w.layer_param(l);
  return fam.layout == block_layout::post_norm ? post_norm_block(w, fam, d, x, p)
                                               : pre_norm_block(w, fam, d, x, p);
}

tensor run_layer(walker& w, const tensor& x, int l) {
  if (w.request().ckpt != checkpointing::full || !w.grad_on()) return transformer_block(w, x, l);
  // The forward runs without saving; one node keeps the layer input and backward re-runs it.
  w.set_grad(false);
  tensor y = transformer_block(w, x, l);
  w.set_grad(true);
  w.checkpoint(x, y, l);
  return y;
}

}  // namespace vramkit::plan::detail
