// The transformer MLPs: SwiGLU (LLaMA, Mistral, Qwen2), one fused GELU kernel (BERT, GPT-NeoX)
// and GPT-2's "gelu_new" written as Python tensor ops.
#include "transformer.hpp"

namespace vramkit::plan::detail {

namespace {

tensor swiglu(walker& w, const dims& D, const tensor& in, int in_bytes, const layer_params& p) {
  const i64 rows = D.tok();
  const int low = w.dt().low;
  const u64 nf = static_cast<u64>(rows * D.f);
  tensor g = w.linear(in, rows, D.h, D.f, p.mlp_in, in_bytes, "mlp gate");
  tensor a = w.op(nf * low, "mlp silu", {edge{g, nf * low}}, {g});
  g.reset();
  tensor u = w.linear(in, rows, D.h, D.f, p.mlp_in, in_bytes, "mlp up");
  tensor m = w.op(nf * low, "mlp product", {edge{a, nf * low}, edge{u, nf * low}}, {a, u});
  a.reset();
  u.reset();
  return w.linear(m, rows, D.f, D.h, p.mlp_down, low, "mlp down");
}

/// NewGELUActivation: 0.5*x*(1+tanh(sqrt(2/pi)*(x+0.044715*x^3))). pow is on autocast's fp32
/// list, so under autocast the chain runs in fp32 from the cast of x onwards.
tensor gelu_python(walker& w, const dims& D, const tensor& in, int in_bytes,
                   const layer_params& p) {
  const i64 rows = D.tok();
  const int low = w.dt().low;
  const u64 nf = static_cast<u64>(rows * D.f);
  const int eb = w.dt().amp ? 4 : low;
  tensor u = w.linear(in, rows, D.h, D.f, p.mlp_in, in_bytes, "mlp up");
  tensor u32 = w.dt().amp ? w.op(nf * 4, "gelu input fp32", {edge{u, nf * low}}, {}) : u;
  tensor t = w.op(nf * eb, "gelu pow", {edge{u32, nf * eb}}, {u32});
  t = w.op(nf * eb, "gelu scaled pow", {edge{t, nf * eb, true}}, {});
  t = add(w, u, low, t, eb, nf, "gelu inner sum");
  t = w.op(nf * eb, "gelu scaled", {edge{t, nf * eb, true}}, {});
  tensor th = w.op(nf * eb, "gelu tanh", {edge{t, nf * eb}}, {});
  w.save_output(th);
  t.reset();
  th = w.op(nf * eb, "gelu 1+tanh", {edge{th, nf * eb, true}}, {});
  tensor hu = w.op(nf * low, "gelu half x", {edge{u, nf * low, true}}, {});
  tensor a = w.op(nf * eb, "gelu output", {edge{hu, nf * low}, edge{th, nf * eb}}, {hu, th});
  hu.reset();
  th.reset();
  u32.reset();
  u.reset();
  return w.linear(a, rows, D.f, D.h, p.mlp_down, eb, "mlp down");
}

/// Phi3MLP: up_states = gate_up_proj(x); gate, up = chunk(2); up * silu(gate). silu saves its
/// input, a view that keeps the whole 2f projection alive until backward.
tensor swiglu_packed(walker& w, const dims& D, const tensor& in, int in_bytes,
                     const layer_params& p) {
  const i64 rows = D.tok();
  const int low = w.dt().low;
  const u64 nf = static_cast<u64>(rows * D.f);
  tensor gu = w.linear(in, rows, D.h, 2 * D.f, p.mlp_in, in_bytes, "mlp gate_up");
  tensor a = w.op(nf * low, "mlp silu", {edge{gu, nf * low}}, {gu});
  tensor m = w.op(nf * low, "mlp product", {edge{a, nf * low}, edge{gu, nf * low}}, {a, gu});
  a.reset();
  gu.reset();
  return w.linear(m, rows, D.f, D.h, p.mlp_down, low, "mlp down");
}

tensor gelu(walker& w, const dims& D, const tensor& in, int in_bytes, const layer_params& p) {
  const i64 rows = D.tok();
  const int low = w.dt().low;
  const u64 nf = static_cast<u64>(rows * D.f);
  tensor u = w.linear(in, rows, D.h, D.f, p.mlp_in, in_bytes, "mlp up");
  tensor a = w.op(nf * low, "mlp gelu", {edge{u, nf * low}}, {u});
  u.reset();
  return w.linear(a, rows, D.f, D.h, p.mlp_down, low, "mlp down");
}

}  // namespace

tensor mlp(walker& w, const dims& D, const tensor& in, int in_bytes, const layer_params& p) {
  switch (w.model().t.mlp) {
    case mlp_kind::swiglu:
      return swiglu(w, D, in, in_bytes, p);
    case mlp_kind::swiglu_packed:
      return swiglu_packed(w, D, in, in_bytes, p);
    case mlp_kind::gelu_python:
      return gelu_python(w, D, in, in_bytes, p);
    case mlp_kind::gelu:
      break;
  }
  return gelu(w, D, in, in_bytes, p);
}

}  // namespace vramkit::plan::detail
