// LLaVA-1.5's image path: the CLIP vision tower (pixels cast to its dtype, patch conv, class
// token and positions, pre-norm, pre-LN encoder layers with SDPA and quick_gelu) runs frozen with
// output_hidden_states, so every layer's output stays until the features are taken from the
// second-to-last one (class token dropped); the projector (Linear, GELU, Linear) maps them to the
// language model's width, and masked_scatter puts them into the prompt's embeddings.
#include <initializer_list>
#include <vector>

#include "transformer.hpp"

namespace vramkit::plan::detail {

tensor llava_image_features(walker& w, i64 images) {
  const auto& m = w.model();
  const auto& v = m.vit;
  const auto& lm = w.lm();
  const int low = w.dt().low;
  constexpr auto tmp = component::temporaries;
  const i64 grid = (v.image / v.patch) * (v.image / v.patch);
  const u64 tok = static_cast<u64>(images * (grid + 1));
  const u64 nv = tok * static_cast<u64>(v.hidden), nf = tok * static_cast<u64>(v.mlp_dim);
  const bool grad = w.grad_on();
  w.set_grad(false);  // the frozen tower: nothing saved, every intermediate freed as it dies
  tensor pix = w.alloc(static_cast<u64>(images * v.channels * v.image * v.image) * 4,
                       component::inputs, "pixel values");
  tensor x;
  {
    tensor cast = w.alloc(static_cast<u64>(images * v.channels * v.image * v.image) * low, tmp,
                          "pixel values cast");
    tensor conv = w.alloc(static_cast<u64>(images * grid * v.hidden) * low, tmp, "patch embeds");
    cast.reset();
    x = w.alloc(nv * low, tmp, "class token and patches");
    conv.reset();
    x = w.alloc(nv * low, tmp, "position embeddings");
  }
  std::vector<tensor> states;  // output_hidden_states: the pre-norm output and every layer's
  states.push_back(w.alloc(nv * low, tmp, "vision hidden state"));
  x.reset();
  // One op of the tower: its output is allocated, then the inputs it was the last user of die.
  const auto then = [&](u64 bytes, const char* label, std::initializer_list<tensor*> dead) {
    tensor out = w.alloc(bytes, tmp, label);
    for (tensor* t : dead) t->reset();
    return out;
  };
  for (i64 l = 0; l < v.layers; ++l) {
    tensor n = w.alloc(nv * low, tmp, "vision layer_norm1");
    tensor q = w.alloc(nv * low, tmp, "vision query");
    tensor k = w.alloc(nv * low, tmp, "vision key");
    tensor val = then(nv * low, "vision value", {&n});
    tensor a = then(nv * low, "vision attention", {&q, &k, &val});
    tensor o = then(nv * low, "vision out_proj", {&a});
    tensor h1 = then(nv * low, "vision residual", {&o});
    n = w.alloc(nv * low, tmp, "vision layer_norm2");
    tensor f = then(nf * low, "vision fc1", {&n});
    // quick_gelu: x * sigmoid(1.702 x).
    tensor s1 = w.alloc(nf * low, tmp, "quick_gelu 1.702x");
    tensor s2 = then(nf * low, "quick_gelu sigmoid", {&s1});
    tensor g = then(nf * low, "quick_gelu", {&s2, &f});
    tensor f2 = then(nv * low, "vision fc2", {&g});
    states.push_back(then(nv * low, "vision hidden state", {&f2, &h1}));
  }
  w.set_grad(grad);
  // hidden_states[-2][:, 1:]: a view of the second-to-last state; the projector's first Linear
  // saves it (and so keeps that state) for its weight's gradient.
  const tensor sel = states[states.size() - 2];
  states.clear();
  pix.reset();
  const i64 rows = images * grid;
  const i64 h = m.t.hidden;
  tensor p1 = w.linear(sel, rows, v.hidden, h, lm.projector_1, low, "projector linear_1");
  const u64 nh = static_cast<u64>(rows * h);
  tensor ge = w.op(nh * low, "projector gelu", {edge{p1, nh * low}}, {p1});
  p1.reset();
  return w.linear(ge, rows, h, h, lm.projector_2, low, "projector linear_2");
}

}  // namespace vramkit::plan::detail
