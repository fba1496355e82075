// transformers' ViTForImageClassification: the patch projection (a conv on the pixels, cast to
// the weight dtype first), the class token and position table, pre-norm encoder layers with
// separate query/key/value projections and non-causal SDPA, the final LayerNorm and a classifier
// on the class token.
#include <utility>

#include "transformer.hpp"
#include "vision.hpp"

namespace vramkit::plan::detail {

namespace {

/// cuDNN's forward workspace for ViT-B/16's patch convolution (3 -> 768 channels, 16x16 kernel
/// and stride, 224x224 images), taken and released inside the convolution, as a convolution of
/// that shape alone asked for it on the H200 (torch 2.11, cuDNN 9; batches 8 to 256): fp32 none
/// below 56 images, 1404928 bytes an image + 3 MiB from 56 to 160, 802816 an image + 3 MiB at
/// 256; bf16 1103872 an image + 3 MiB at every batch. Other shapes were not measured: none.
u64 patch_conv_workspace(const walker& w, i64 b, i64 side, int bytes) {
  const auto& v = w.model().vit;
  const auto& t = w.model().t;
  if (v.patch != 16 || side != 224 || v.channels != 3 || t.hidden != 768) return 0;
  const auto n = static_cast<u64>(b);
  constexpr u64 base = (3u << 20) + 16;
  if (bytes != 4) return 1103872 * n + base;
  if (b < 56) return 0;
  return (b <= 160 ? 1404928 : 802816) * n + base;
}

}  // namespace

tensor hf_vit_forward_loss(walker& w) {
  const auto& m = w.model();
  const auto& lm = w.lm();
  const dims dm = lm_dims(w);
  const i64 b = dm.b, side = w.request().image_size, channels = m.vit.channels;
  const i64 grid = side / m.vit.patch, patches = grid * grid;
  const int low = w.dt().low;
  const int eb = w.dt().act;
  w.set_phase(phase::forward);
  w.set_layer(-1);
  const u64 npix = static_cast<u64>(b * channels * side * side);
  tensor img = w.alloc(npix * 4, component::inputs, "pixel values");
  tensor tgt = w.alloc(static_cast<u64>(b) * 8, component::inputs, "labels");
  // ViTModel casts the pixels to the projection's dtype; autocast casts them for the conv, after
  // the weight (see walker::linear).
  const tensor wc = w.weight(lm.patch_embed);
  tensor xin = w.param_width(lm.patch_embed) != 4
                   ? w.alloc(npix * static_cast<u64>(w.param_width(lm.patch_embed)),
                             component::activations, "pixel values cast")
                   : w.gemm_input(img, b * channels * side * side, 4);
  const u64 np = static_cast<u64>(b * patches * dm.h);
  tensor proj = w.op(np * low, "patch embedding", {}, {xin, wc}, {lm.patch_embed});
  if (const u64 ws = patch_conv_workspace(w, b, side, low); ws != 0)
    w.transient(ws, component::workspace, "patch convolution workspace (cuDNN)");
  xin.reset();
  // cat([cls_token.expand(b), patches]) promotes to the parameter dtype under autocast;
  // + position_embeddings; dropout 0 is the identity.
  const u64 nh = static_cast<u64>(dm.tok() * dm.h);
  tensor x = w.op(nh * eb, "tokens with class token", {edge{proj, np * low}}, {}, {lm.cls_token});
  proj.reset();
  x = w.op(nh * eb, "position embeddings", {edge{x, nh * eb, true}}, {}, {lm.pos});
  int xb = eb;
  for (int l = 0; l < m.t.layers; ++l) {
    x = run_layer(w, x, l);
    xb = w.dt().act;
  }
  w.set_layer(-1);
  x = layer_norm(w, x, dm.tok(), dm.h, xb, lm.final_norm);
  return class_token_loss(w, std::move(x), b, dm.h, m.t.vocab, lm.classifier, eb, std::move(img),
                          std::move(tgt));
}

}  // namespace vramkit::plan::detail
