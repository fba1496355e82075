// torchvision ResNet (v1.5): stem, four stages of basic or bottleneck blocks, pooling, fc.
#include "vision.hpp"

namespace vramkit::plan::detail {

namespace {

/// cuDNN convolution backward workspace, as a multiple of the convolution's input plus output
/// bytes (docs/plan.md, "Where it is off").
constexpr double k_conv_workspace = 1.0;

/// A value flowing through the CNN: `store` holds the data, `grad` is the autograd identity
/// gradients attach to (the output of the last in-place op on it).
struct flow {
  tensor store;
  view grad;
};

struct cnn_ctx {
  i64 b = 1;
  int pidx = 0;  ///< next parameter index in parameter_tensors order
};

/// conv (bias-free) -> BatchNorm (training: saves its input and per-channel statistics) ->
/// optional in-place ReLU (a node saving its result, no new memory).
flow conv_bn(walker& w, cnn_ctx& c, const flow& x, int x_bytes, i64 in_elems, i64 out_elems,
             bool relu) {
  const int low = w.dt().low;
  const tensor wt = w.weight(c.pidx);  // cast before the input (see walker::linear)
  tensor xin = w.gemm_input(x.store, in_elems, x_bytes);
  // Under autocast the input is a cast copy; gradients reach x through the cast node.
  const bool cast = xin.id() != x.store.id();
  const view xedge = cast ? xin.as_view() : x.grad;
  const u64 ws =
      static_cast<u64>(k_conv_workspace * static_cast<double>(in_elems + out_elems) * low);
  tensor conv = w.op(static_cast<u64>(out_elems) * low, "conv output",
                     {edge{xedge, static_cast<u64>(in_elems) * (cast ? low : x_bytes)}}, {xin, wt},
                     {c.pidx}, ws);
  xin.reset();
  ++c.pidx;
  tensor stats = w.alloc(4096, component::activations, "batchnorm statistics");
  tensor bn = w.op(static_cast<u64>(out_elems) * low, "batchnorm output",
                   {edge{conv, static_cast<u64>(out_elems) * low}}, {conv, stats}, {c.pidx});
  stats.reset();
  ++c.pidx;
  conv.reset();
  if (!relu) {
    const view v = bn.as_view();
    return {std::move(bn), v};
  }
  tensor r = w.op(0, "relu (in place)", {edge{bn, static_cast<u64>(out_elems) * low}}, {bn});
  const view rv = r.as_view();
  r.reset();
  return {std::move(bn), rv};
}

i64 out_side(i64 side, int k, int stride, int pad) { return (side + 2 * pad - k) / stride + 1; }

/// One residual block; `x` becomes the block output.
void residual_block(walker& w, cnn_ctx& c, flow& x, i64& in, i64& side, i64 wd, bool first,
                    int stage) {
  const bool bottleneck = w.model().resnet.bottleneck;
  const int low = w.dt().low;
  const i64 outc = wd * (bottleneck ? 4 : 1);
  const int stride = (first && stage > 0) ? 2 : 1;
  const bool down = first && (stage > 0 || in != outc);
  const i64 oside = out_side(side, 3, stride, 1);
  const i64 in_e = c.b * in * side * side;
  flow o;
  if (bottleneck) {
    // torchvision v1.5: the stride sits on the 3x3 convolution.
    flow a = conv_bn(w, c, x, low, in_e, c.b * wd * side * side, true);
    flow bq = conv_bn(w, c, a, low, c.b * wd * side * side, c.b * wd * oside * oside, true);
    a.store.reset();
    o = conv_bn(w, c, bq, low, c.b * wd * oside * oside, c.b * outc * oside * oside, false);
    bq.store.reset();
  } else {
    flow a = conv_bn(w, c, x, low, in_e, c.b * wd * oside * oside, true);
    o = conv_bn(w, c, a, low, c.b * wd * oside * oside, c.b * outc * oside * oside, false);
    a.store.reset();
  }
  const u64 oe = static_cast<u64>(c.b * outc * oside * oside) * low;
  flow identity;
  if (down) identity = conv_bn(w, c, x, low, in_e, c.b * outc * oside * oside, false);
  const view id_grad = down ? identity.grad : x.grad;
  // out += identity (in place; gradients pass through), then in-place ReLU saving its result.
  tensor sum =
      w.op(0, "residual add (in place)", {edge{o.grad, oe, true}, edge{id_grad, oe, true}}, {});
  identity.store.reset();
  tensor r = w.op(0, "relu (in place)", {edge{sum, oe}}, {o.store});
  sum.reset();
  x.store.reset();
  x = {std::move(o.store), r.as_view()};
  r.reset();  // a 0-byte gradient handle; the data lives in x.store
  in = outc;
  side = oside;
}

}  // namespace

tensor resnet_forward_loss(walker& w) {
  const auto& rs = w.model().resnet;
  cnn_ctx c;
  c.b = w.request().micro_batch;
  const i64 S = w.request().image_size;
  const int low = w.dt().low;
  w.set_phase(phase::forward);
  w.set_layer(-1);
  tensor img = w.alloc(static_cast<u64>(c.b * 3 * S * S) * 4, component::inputs, "images");
  tensor tgt = w.alloc(static_cast<u64>(c.b) * 8, component::inputs, "targets");
  i64 side = out_side(S, 7, 2, 3);
  flow x = conv_bn(w, c, {img, img.as_view()}, 4, c.b * 3 * S * S, c.b * 64 * side * side, true);
  // Max pool 3x3/2: saves its input and int64 indices.
  const i64 ps = out_side(side, 3, 2, 1);
  tensor idx =
      w.alloc(static_cast<u64>(c.b * 64 * ps * ps) * 8, component::activations, "maxpool indices");
  tensor mp = w.op(static_cast<u64>(c.b * 64 * ps * ps) * low, "maxpool output",
                   {edge{x.grad, static_cast<u64>(c.b * 64 * side * side) * low}}, {x.store, idx});
  idx.reset();
  x.store.reset();
  x = {mp, mp.as_view()};
  mp.reset();
  side = ps;
  i64 in = 64;
  const i64 widths[4] = {64, 128, 256, 512};
  for (int s = 0; s < 4; ++s) {
    w.set_layer(s);
    for (int blk = 0; blk < rs.blocks[s]; ++blk)
      residual_block(w, c, x, in, side, widths[s], blk == 0, s);
  }
  w.set_layer(-1);
  tensor pooled = w.op(static_cast<u64>(c.b * in) * low, "avgpool output",
                       {edge{x.grad, static_cast<u64>(c.b * in * side * side) * low}}, {x.store});
  x.store.reset();
  tensor logits = w.linear(pooled, c.b, in, rs.num_classes, c.pidx, low, "logits");
  pooled.reset();
  tensor loss = lm_loss(w, logits, static_cast<u64>(c.b), rs.num_classes, false);
  logits.reset();
  w.clear_autocast_cache();
  img.reset();
  tgt.reset();
  return loss;
}

}  // namespace vramkit::plan::detail
