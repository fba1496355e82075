// The transformer MLPs: SwiGLU (LLaMA, Mistral, Qwen2), one fused GELU kernel (BERT, GPT-NeoX)
// and GPT-2's "gelu_new" written as Python tensor ops.
#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "transformer.hpp"

namespace vramkit::plan::detail {

namespace {

/// Rows, compute width and rows x ffn elements of an MLP's intermediate tensors.
struct mlp_sizes {
  i64 rows;
  int low;
  u64 nf;
};

mlp_sizes sizes_of(const walker& w, const dims& D) {
  const i64 rows = D.tok();
  return {rows, w.dt().low, static_cast<u64>(rows * D.f)};
}

/// The three names of a SwiGLU's projections and the LoRA target bits of each.
struct swiglu_names {
  const char* gate;
  const char* up;
  const char* down;
  std::uint8_t gate_target, up_target, down_target;
};

/// down(silu(gate(x)) * up(x)) in PyTorch's order: the gate's output dies with its silu before
/// up runs. `linear(x, rows, in, out, param, x_bytes, label, target)` makes each projection.
template <class Linear>
tensor swiglu_with(walker& w, const Linear& linear, i64 rows, i64 h, i64 f, const tensor& in,
                   int in_bytes, int p_gate, int p_up, int p_down, const swiglu_names& n) {
  const int low = w.dt().low;
  const u64 nf = static_cast<u64>(rows * f);
  tensor g = linear(in, rows, h, f, p_gate, in_bytes, n.gate, n.gate_target);
  tensor a = w.op(nf * low, "mlp silu", {edge{g, nf * low}}, {g});
  g.reset();
  tensor u = linear(in, rows, h, f, p_up, in_bytes, n.up, n.up_target);
  tensor m = w.op(nf * low, "mlp product", {edge{a, nf * low}, edge{u, nf * low}}, {a, u});
  a.reset();
  u.reset();
  return linear(m, rows, f, h, p_down, low, n.down, n.down_target);
}

tensor swiglu(walker& w, const dims& D, const tensor& in, int in_bytes, const layer_params& p) {
  const auto lora_proj = [&w](const tensor& x, i64 rows, i64 i, i64 o, int param, int xb,
                              const char* label, std::uint8_t target) {
    return w.proj(x, rows, i, o, param, xb, label, target);
  };
  return swiglu_with(
      w, lora_proj, D.tok(), D.h, D.f, in, in_bytes, p.mlp_in, p.up(), p.mlp_down,
      {"mlp gate", "mlp up", "mlp down", lora_target::gate, lora_target::up, lora_target::down});
}

/// NewGELUActivation: 0.5*x*(1+tanh(sqrt(2/pi)*(x+0.044715*x^3))). pow is on autocast's fp32
/// list, so under autocast the chain runs in fp32 from the cast of x onwards.
tensor gelu_python(walker& w, const dims& D, const tensor& in, int in_bytes,
                   const layer_params& p) {
  const auto [rows, low, nf] = sizes_of(w, D);
  const int eb = w.dt().amp ? 4 : low;
  tensor u = w.proj(in, rows, D.h, D.f, p.mlp_in, in_bytes, "mlp up", lora_target::up);
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
  return w.proj(a, rows, D.f, D.h, p.mlp_down, eb, "mlp down", lora_target::down);
}

/// Phi3MLP: up_states = gate_up_proj(x); gate, up = chunk(2); up * silu(gate). silu saves its
/// input, a view that keeps the whole 2f projection alive until backward.
tensor swiglu_packed(walker& w, const dims& D, const tensor& in, int in_bytes,
                     const layer_params& p) {
  const auto [rows, low, nf] = sizes_of(w, D);
  tensor gu = w.proj(in, rows, D.h, 2 * D.f, p.mlp_in, in_bytes, "mlp gate_up",
                     lora_target::gate | lora_target::up);
  tensor a = w.op(nf * low, "mlp silu", {edge{gu, nf * low}}, {gu});
  tensor m = w.op(nf * low, "mlp product", {edge{a, nf * low}, edge{gu, nf * low}}, {a, gu});
  a.reset();
  gu.reset();
  return w.proj(m, rows, D.f, D.h, p.mlp_down, low, "mlp down", lora_target::down);
}

/// A dense SwiGLU MLP on given parameters (the shared experts of Qwen2-MoE and DeepSeek).
tensor swiglu_on(walker& w, i64 rows, i64 h, i64 f, const tensor& in, int in_bytes, int p_gate,
                 int p_up, int p_down, const char* label) {
  const auto plain = [&w](const tensor& x, i64 r, i64 i, i64 o, int param, int xb, const char* name,
                          std::uint8_t /*target*/) {
    return w.linear(x, r, i, o, param, xb, name);
  };
  return swiglu_with(w, plain, rows, h, f, in, in_bytes, p_gate, p_up, p_down,
                     {label, label, label, 0, 0, 0});
}

/// Sparse MoE block as transformers 5 runs it with the eager experts (MixtralSparseMoeBlock,
/// Qwen2MoeSparseMoeBlock, DeepseekV3MoE): router logits, softmax (fp32), top-k and its
/// normalisation, a one_hot (tokens, k, experts) int64 mask, then a loop over the experts that
/// gathers each one's tokens, runs its SwiGLU on its slices of the 3-D gate_up/down parameters,
/// scales by the routing weight and index_add_s into a zero-filled output; the shared expert is
/// added after (Qwen2-MoE runs it first, ahead of the router, and gates it by a sigmoid after the
/// experts: H200 allocator trace of Qwen1.5-MoE-A2.7B training). Routing is taken as balanced: each
/// expert gets tokens x k / experts tokens (the remainder spread one each), unless the request
/// gives its expert_load. With --ep N each rank holds experts / N of them and exchanges k copies
/// of each of its tokens with the others (all-to-all send and receive buffers), so its experts
/// see N times its tokens in all.
tensor moe_block(walker& w, const dims& D, const tensor& in, int in_bytes, const layer_params& p) {
  const auto& moe = w.model().t.moe;
  const int low = w.dt().low;
  const i64 rows = D.tok();
  const i64 experts = moe.experts, k = moe.top_k;
  const int ep = w.request().ep;
  const i64 local = experts / ep;
  const i64 ef = moe.expert_ffn / (ep > 1 ? 1 : w.request().tp);
  const u64 nh = static_cast<u64>(rows * D.h);
  const bool fp32_router = w.model().family == model_family::deepseek;
  const i64 sf = moe.shared_ffn / w.request().tp;
  const bool shared_first = moe.shared_ffn > 0 && p.shared_gate >= 0;
  tensor sh = shared_first ? swiglu_on(w, rows, D.h, sf, in, in_bytes, p.shared_in, p.shared_up,
                                       p.shared_down, "shared expert")
                           : tensor{};
  tensor logits = fp32_router
                      ? w.op(static_cast<u64>(rows * experts) * 4, "router logits fp32",
                             {edge{in, nh * in_bytes}}, {in}, {p.router})
                      : w.linear(in, rows, D.h, experts, p.router, in_bytes, "router logits");
  tensor probs =
      w.op(static_cast<u64>(rows * experts) * 4, "router softmax",
           {edge{logits, static_cast<u64>(rows * experts) * (fp32_router ? 4 : low)}}, {});
  w.save_output(probs);
  logits.reset();
  const tensor top_idx =
      w.alloc(static_cast<u64>(rows * k) * 8, component::activations, "router top-k indices");
  tensor top = w.op(static_cast<u64>(rows * k) * 4, "router top-k",
                    {edge{probs, static_cast<u64>(rows * experts) * 4}}, {top_idx});
  probs.reset();
  top = w.op(static_cast<u64>(rows * k) * 4, "routing weights",
             {edge{top, static_cast<u64>(rows * k) * 4}}, {top});
  // one_hot(top_k_index, num_experts) is int64; it lives through the expert loop.
  tensor mask = w.alloc(static_cast<u64>(rows * k * experts) * 8, component::temporaries,
                        "expert mask (one_hot)");
  const int ob = in_bytes;  // zeros_like(hidden_states): the output takes the input's dtype
  tensor src = in;
  int src_bytes = in_bytes;
  i64 tokens = rows * k;  // token copies this rank's experts process
  tensor send, recv;
  if (ep > 1) {
    send = w.alloc(static_cast<u64>(rows * k * D.h) * low, component::temporaries,
                   "all-to-all dispatch send");
    recv = w.op(static_cast<u64>(rows * k * D.h) * low, "all-to-all dispatch receive",
                {edge{in, nh * in_bytes}}, {});
    send.reset();
    src = recv;
    src_bytes = low;
  }
  tensor store = w.alloc(nh * ob, component::activations, "moe output (zeros)");
  const std::vector<i64> counts = expert_counts(w.next_expert_load(), tokens, local);
  // The loop's Python locals live until the next iteration rebinds them (after its new value is
  // made), the last ones until the function returns: `current_state` (the gathered tokens) and
  // `current_hidden_states` (the scaled output; its cast to the output dtype is a temporary).
  tensor prev_x, prev_sc;
  view acc{};
  for (i64 e = 0; e < local; ++e) {
    const i64 n = counts[static_cast<std::size_t>(e)];
    if (n <= 0) continue;  // transformers loops over the experts hit only
    const u64 nf = static_cast<u64>(n * ef);
    const u64 nxh = static_cast<u64>(n * D.h);
    const tensor idx =
        w.alloc(static_cast<u64>(n) * 16, component::activations, "expert token index");
    tensor x = w.op(nxh * src_bytes, "expert tokens", {edge{src, w.bytes(src)}}, {idx});
    prev_x = std::move(x);
    tensor gu = w.expert_linear(prev_x, n, D.h, 2 * ef, p.mlp_in, src_bytes, "expert gate_up");
    tensor a = w.op(nf * low, "expert silu", {edge{gu, nf * low}}, {gu});
    tensor m = w.op(nf * low, "expert product", {edge{a, nf * low}, edge{gu, nf * low}}, {a, gu});
    prev_sc.reset();
    a.reset();
    gu.reset();
    tensor dn = w.expert_linear(m, n, ef, D.h, p.mlp_down, low, "expert down");
    m.reset();
    tensor sc = w.op(nxh * low, "expert scaled",
                     {edge{dn, nxh * low}, edge{top, static_cast<u64>(n) * 4}}, {dn, top});
    dn.reset();
    const tensor cast =
        ob != low ? w.op(nxh * ob, "expert output cast", {edge{sc, nxh * low}}, {}) : sc;
    // index_add_'s backward gives the source grad.index_select(...).expand_as(source): autograd
    // saves the source (the cast, or the scaled output itself when no cast is needed).
    const tensor added = acc.id < 0
                             ? w.op(0, "index_add_ (in place)", {edge{cast, nxh * ob}}, {idx, cast})
                             : w.op(0, "index_add_ (in place)",
                                    {edge{acc, nh * ob, true}, edge{cast, nxh * ob}}, {idx, cast});
    acc = added.as_view();
    prev_sc = std::move(sc);
  }
  // At the return: the one_hot mask, then the last gathered tokens and scaled output.
  mask.reset();
  prev_x.reset();
  prev_sc.reset();
  recv.reset();
  tensor out;
  if (ep > 1) {
    // The combine all-to-all returns each token's k expert outputs to its rank.
    w.transient(static_cast<u64>(rows * k * D.h) * low, component::temporaries,
                "all-to-all combine buffer");
  }
  out = w.op(nh * ob, "moe output", {edge{acc, nh * ob, true}}, {});
  store.reset();
  if (moe.shared_ffn > 0) {
    if (!shared_first)
      sh = swiglu_on(w, rows, D.h, sf, in, in_bytes, p.shared_in, p.shared_up, p.shared_down,
                     "shared expert");
    if (p.shared_gate >= 0) {
      tensor gl = w.linear(in, rows, D.h, 1, p.shared_gate, in_bytes, "shared expert gate");
      tensor gs = w.op(static_cast<u64>(rows) * low, "shared gate sigmoid",
                       {edge{gl, static_cast<u64>(rows) * low}}, {});
      w.save_output(gs);
      gl.reset();
      sh = w.op(nh * low, "shared expert gated",
                {edge{gs, rows * static_cast<u64>(low)}, edge{sh, nh * low}}, {gs, sh});
    }
    out = add(w, out, ob, sh, low, nh, "moe + shared expert");
  }
  return out;
}

tensor gelu(walker& w, const dims& D, const tensor& in, int in_bytes, const layer_params& p) {
  const auto [rows, low, nf] = sizes_of(w, D);
  tensor u = w.proj(in, rows, D.h, D.f, p.mlp_in, in_bytes, "mlp up", lora_target::up);
  tensor a = w.op(nf * low, "mlp gelu", {edge{u, nf * low}}, {u});
  u.reset();
  return w.proj(a, rows, D.f, D.h, p.mlp_down, low, "mlp down", lora_target::down);
}

}  // namespace

std::vector<i64> expert_counts(const std::vector<i64>* load, i64 tokens, i64 experts) {
  std::vector<i64> n(static_cast<std::size_t>(experts));
  if (load == nullptr) {
    for (i64 e = 0; e < experts; ++e)
      n[static_cast<std::size_t>(e)] = tokens / experts + (e < tokens % experts ? 1 : 0);
    return n;
  }
  i64 total = 0;
  for (const i64 v : *load) total += v;
  std::vector<std::pair<i64, i64>> rest;  // (remainder, expert)
  i64 given = 0;
  for (i64 e = 0; e < experts; ++e) {
    const auto prod = static_cast<__int128>((*load)[static_cast<std::size_t>(e)]) * tokens;
    n[static_cast<std::size_t>(e)] = static_cast<i64>(prod / total);
    given += n[static_cast<std::size_t>(e)];
    rest.emplace_back(static_cast<i64>(prod % total), e);
  }
  std::stable_sort(rest.begin(), rest.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  for (i64 i = 0; i < tokens - given; ++i) ++n[static_cast<std::size_t>(rest[i].second)];
  return n;
}

tensor mlp(walker& w, const dims& D, const tensor& in, int in_bytes, const layer_params& p) {
  if (p.router >= 0) return moe_block(w, D, in, in_bytes, p);
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
