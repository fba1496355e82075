// torchvision VisionTransformer: patch embedding, class token and positions, encoder layers
// (nn.MultiheadAttention with its packed in_proj), final LayerNorm and the classification head.
#include <algorithm>
#include <utility>

#include "vision.hpp"

namespace vramkit::plan::detail {

namespace {

/// Parameter order: class_token, conv_proj, pos_embedding, 6 per layer, encoder_ln, head.
constexpr int k_class_token = 0, k_conv_proj = 1, k_pos_embedding = 2, k_first_layer = 3;
constexpr int k_per_layer = 6;

/// One encoder layer; `x` (width xb) becomes its output.
void encoder_layer(walker& w, const dims& D, tensor& x, int& xb, int l) {
  const auto& v = w.model().vit;
  const i64 rows = D.tok();
  const int low = w.dt().low;
  const int nb = w.dt().amp ? 4 : w.dt().act;
  const u64 nh = static_cast<u64>(rows * v.hidden);
  const int ln_1 = k_first_layer + k_per_layer * l, in_proj = ln_1 + 1, out_proj = ln_1 + 2,
            ln_2 = ln_1 + 3, mlp_1 = ln_1 + 4, mlp_2 = ln_1 + 5;
  w.set_layer(l);
  tensor y = layer_norm(w, x, rows, v.hidden, xb, ln_1);
  // nn.MultiheadAttention: packed in_proj, then a contiguous copy of the (3, s, b, h) layout.
  y = w.linear(y, rows, v.hidden, 3 * v.hidden, in_proj, nb, "in_proj");
  y = w.op(3 * nh * low, "qkv contiguous", {edge{y, 3 * nh * low, true}}, {});
  y = attention(w, D, {y, y, y, low, low, true, false, 0.0});
  y = w.op(nh * low, "attention output contiguous", {edge{y, nh * low, true}}, {});
  y = w.linear(y, rows, v.hidden, v.hidden, out_proj, low, "out_proj");
  tensor h1 = add(w, y, low, x, xb, nh, "residual");
  y.reset();
  x.reset();
  const int h1b = std::max(low, xb);
  y = layer_norm(w, h1, rows, v.hidden, h1b, ln_2);
  y = w.linear(y, rows, v.hidden, v.mlp_dim, mlp_1, nb, "mlp 1");
  const u64 nf = static_cast<u64>(rows * v.mlp_dim);
  y = w.op(nf * low, "gelu", {edge{y, nf * low}}, {y});
  y = w.linear(y, rows, v.mlp_dim, v.hidden, mlp_2, low, "mlp 2");
  x = add(w, y, low, h1, h1b, nh, "residual");
  y.reset();
  h1.reset();
  xb = h1b;
}

}  // namespace

tensor vit_forward_loss(walker& w) {
  const auto& v = w.model().vit;
  const i64 b = w.request().micro_batch, side = w.request().image_size;
  const i64 grid = side / v.patch, s = grid * grid + 1;
  const int low = w.dt().low;
  const int eb = w.dt().act;
  w.set_phase(phase::forward);
  w.set_layer(-1);
  tensor img = w.alloc(static_cast<u64>(b * 3 * side * side) * 4, component::inputs, "images");
  tensor tgt = w.alloc(static_cast<u64>(b) * 8, component::inputs, "targets");
  const tensor wc = w.weight(k_conv_proj);  // cast before the input (see walker::linear)
  tensor xin = w.gemm_input(img, b * 3 * side * side, 4);
  tensor proj = w.op(static_cast<u64>(b * v.hidden * grid * grid) * low, "patch embedding", {},
                     {xin, wc}, {k_conv_proj});
  xin.reset();
  // cat([class_token (fp32 parameter), patches]) promotes to the parameter dtype; + pos_embedding.
  const u64 nh = static_cast<u64>(b * s * v.hidden);
  tensor x =
      w.op(nh * eb, "tokens with class token",
           {edge{proj, static_cast<u64>(b * v.hidden * grid * grid) * low}}, {}, {k_class_token});
  proj.reset();
  x = w.op(nh * eb, "position embedding", {edge{x, nh * eb, true}}, {}, {k_pos_embedding});
  int xb = eb;
  const dims dm{b, s, v.hidden, v.heads, v.heads, v.hidden / v.heads, v.mlp_dim, 1};
  for (int l = 0; l < v.layers; ++l) encoder_layer(w, dm, x, xb, l);
  w.set_layer(-1);
  const int encoder_ln = k_first_layer + k_per_layer * static_cast<int>(v.layers);
  x = layer_norm(w, x, b * s, v.hidden, xb, encoder_ln);
  return class_token_loss(w, std::move(x), b, v.hidden, v.num_classes, encoder_ln + 1, eb,
                          std::move(img), std::move(tgt));
}

tensor class_token_loss(walker& w, tensor x, i64 b, i64 hidden, i64 classes, int head, int eb,
                        tensor img, tensor tgt) {
  const int hb = w.dt().amp ? 4 : eb;
  // sequence_output[:, 0, :]: the classifier reads a strided view of the class tokens.
  x = w.op(static_cast<u64>(b * hidden) * hb, "class token", {edge{x, 0, true}}, {});
  x = w.linear(x, b, hidden, classes, head, hb, "logits", component::logits_and_loss);
  tensor loss = lm_loss(w, x, static_cast<u64>(b), classes, false);
  x.reset();
  w.clear_autocast_cache();
  img.reset();
  tgt.reset();
  return loss;
}

}  // namespace vramkit::plan::detail
