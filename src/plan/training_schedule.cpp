// The walker: replays a training step (or a generate() call) op by op as PyTorch and transformers
// run it, recording every allocation and free. Each op states its output, what autograd saves and
// which inputs receive gradients; backward walks the recorded nodes in reverse, allocating input
// gradients, freeing the output gradient and the saved tensors, and creating or accumulating
// parameter gradients. Activation checkpointing records one node per layer and re-runs the layer's
// forward inside backward. Single-threaded; one walker per build_schedule call.
#include "vramkit/plan/training_schedule.hpp"

#include <algorithm>
#include <array>
#include <cmath>

#include "vramkit/core/error.hpp"

namespace vramkit::plan {

const char* to_string(component c) noexcept {
  switch (c) {
    case component::weights:
      return "weights";
    case component::gradients:
      return "gradients";
    case component::optimizer_states:
      return "optimizer states";
    case component::autocast_weight_cache:
      return "autocast weight casts";
    case component::activations:
      return "activations (saved for backward)";
    case component::logits_and_loss:
      return "logits and loss";
    case component::activation_gradients:
      return "activation gradients";
    case component::temporaries:
      return "temporaries";
    case component::kv_cache:
      return "KV cache";
    case component::inputs:
      return "inputs";
    case component::workspace:
      return "library workspaces";
    case component::count_:
      break;
  }
  return "?";
}

const char* to_string(phase p) noexcept {
  switch (p) {
    case phase::setup:
      return "setup";
    case phase::forward:
      return "forward";
    case phase::loss:
      return "loss";
    case phase::backward:
      return "backward";
    case phase::optimizer:
      return "optimizer step";
    case phase::prefill:
      return "prefill";
    case phase::decode:
      return "decode";
    case phase::count_:
      break;
  }
  return "?";
}

namespace {

using i64 = std::int64_t;
using u64 = std::uint64_t;
constexpr int k_none = -1;

/// cuBLAS workspace per (handle, stream), taken from PyTorch's caching allocator at the first
/// GEMM of a thread: 32 MiB on Hopper and newer (aten/src/ATen/cuda/CublasHandlePool.cpp,
/// 4096 * 8 * 1024 bytes). The H200 ground-truth allocation trace shows exactly two persistent
/// 32 MiB blocks in a training step (forward thread, autograd thread).
constexpr u64 k_cublas_workspace = 32ull << 20;

/// cuDNN convolution backward workspace, as a multiple of the convolution's input plus output
/// bytes (docs/plan.md, "Where it is off").
constexpr double k_conv_workspace = 1.0;

/// Byte widths of the precision regime.
struct dtypes {
  int param = 4;     ///< stored parameters (and their gradients, optimizer states follow them)
  int low = 4;       ///< GEMM/conv outputs and the casts autocast makes
  int act = 4;       ///< ops autocast keeps in fp32 (layer/RMS norm, softmax, pow, embedding) or,
                     ///< without autocast, the model dtype
  bool amp = false;  ///< autocast on: weight casts cached, fp32-list ops upcast
  int cast = 4;      ///< width of the weight and GEMM-input casts (1 for fp8, else = low)
};

/// One gradient edge of a node: the input tensor and how its gradient appears.
struct edge {
  edge() = default;
  edge(int t, u64 g, bool p = false) : grad_bytes(g), tensor(t), passthrough(p) {}
  u64 grad_bytes = 0;  ///< bytes of the gradient the node allocates for this input
  int tensor = k_none;
  bool passthrough = false;  ///< the node forwards its output gradient unchanged (add, views)
};

/// A fixed-capacity vector: nodes hold a handful of edges and saved tensors, and a plan records
/// thousands of nodes, so they must not allocate.
template <typename T, std::size_t N>
class small_vec {
 public:
  void push_back(const T& v) {
    if (n_ == N) throw logic_error("plan walker: node capacity exceeded");
    a_[n_++] = v;
  }
  [[nodiscard]] std::size_t size() const noexcept { return n_; }
  [[nodiscard]] bool empty() const noexcept { return n_ == 0; }
  const T& operator[](std::size_t i) const noexcept { return a_[i]; }
  const T* begin() const noexcept { return a_.data(); }
  const T* end() const noexcept { return a_.data() + n_; }

 private:
  std::array<T, N> a_{};
  std::uint8_t n_ = 0;
};

/// A recorded autograd node.
struct node {
  int out = k_none;
  small_vec<edge, 4> edges;
  small_vec<int, 8> saved;
  small_vec<int, 2> params;       ///< parameter indices receiving gradients here
  small_vec<u64, 2> param_bytes;  ///< elements of each parameter gradient
  small_vec<bool, 2> param_cast;  ///< gradient computed for an autocast copy (low precision first)
  u64 workspace = 0;              ///< transient bytes inside this node's backward
  int ckpt_layer = -1;            ///< >= 0: a checkpointed layer re-run in backward
  int ckpt_input = k_none;
};

/// Where a transformer's parameters sit in parameter_tensors(): the embeddings, norms and head,
/// and the first layer's first parameter (each layer has per_layer of them).
struct lm_params {
  int embed = k_none, pos = k_none, types = k_none, embed_norm = k_none, final_norm = k_none,
      head = k_none, head_transform = k_none, head_bias = k_none;
  int first_layer_param = 0;
  int per_layer = 6;
};

class walker;
using layer_fn = int (*)(walker&, int x, int layer);

/// Bookkeeping a walker hands back to its thread for the next plan: a plan fills megabytes of it,
/// and fresh pages each time cost more than the bookkeeping itself.
/// What the walker keeps per tensor: references held (Python and autograd), its gradient tensor
/// and the autograd node that made it.
struct tensor_meta {
  int refs, grad, producer;
};

struct walker_storage {
  std::vector<tensor_meta> meta;
  std::vector<node> nodes;
};
walker_storage& thread_storage() {
  thread_local walker_storage st;
  return st;
}

class walker {
 public:
  walker(const model_description& m, const plan_request& r, schedule& s) : m_(m), r_(r), s_(s) {
    auto& st = thread_storage();
    tensor_meta_.swap(st.meta);
    nodes_.swap(st.nodes);
    tensor_meta_.clear();
    nodes_.clear();
    switch (r.prec) {
      case precision::fp32:
        dt_ = {4, 4, 4, false, 4};
        break;
      case precision::amp_bf16:
      case precision::amp_fp16:
        dt_ = {4, 2, 4, true, 2};
        break;
      // Approximate (docs/plan.md): as amp-bf16, with the weight and GEMM-input casts in 1 byte.
      case precision::fp8:
        dt_ = {4, 2, 4, true, 1};
        break;
      case precision::bf16:
        dt_ = {2, 2, 2, false, 2};
        break;
    }
    if (r.mode == run_mode::infer) dt_ = {2, 2, 2, false, 2};
    if (r.mode == run_mode::infer && r.prec == precision::fp32) dt_ = {4, 4, 4, false, 4};
  }

  ~walker() {
    auto& st = thread_storage();
    tensor_meta_.swap(st.meta);
    nodes_.swap(st.nodes);
  }
  walker(const walker&) = delete;
  walker& operator=(const walker&) = delete;

  // ---- tensors -------------------------------------------------------------------------------
  int alloc(u64 bytes, component c, const char* label) {
    const int id = static_cast<int>(s_.tensors.size());
    tensor_info ti;
    ti.bytes = bytes;
    ti.comp = c;
    ti.ph = phase_;
    ti.layer = static_cast<std::int16_t>(layer_);
    ti.step = static_cast<std::int16_t>(step_);
    ti.label = label;
    s_.tensors.push_back(ti);
    tensor_meta_.push_back({1, k_none, k_none});
    push_event(bytes, id, c, true);
    return id;
  }
  void push_event(u64 bytes, int t, component c, bool is_alloc) {
    s_.events.push_back({bytes, static_cast<std::uint32_t>(t), c, is_alloc});
  }
  void ref(int t) {
    if (t >= 0) ++tensor_meta_[t].refs;
  }
  void unref(int t) {
    if (t < 0) return;
    if (tensor_meta_[t].refs <= 0) throw logic_error("plan walker: tensor freed twice");
    if (--tensor_meta_[t].refs == 0) push_event(s_.tensors[t].bytes, t, s_.tensors[t].comp, false);
  }
  void transient(u64 bytes, component c, const char* label) {
    if (bytes == 0) return;
    unref(alloc(bytes, c, label));
  }
  [[nodiscard]] u64 bytes(int t) const { return s_.tensors[t].bytes; }
  /// Index of parameter `k` of transformer layer `layer`.
  [[nodiscard]] int layer_param(int layer, int k) const {
    return lm_.first_layer_param + layer * lm_.per_layer + k;
  }
  [[nodiscard]] bool requires_grad(int t) const {
    return t >= 0 && tensor_meta_[t].producer != k_none;
  }

  // ---- autograd ------------------------------------------------------------------------------
  /// Records an op: allocates its output and, with grad on and any input needing a gradient, a
  /// node saving `saved`. Returns the output (one Python reference held by the caller).
  int op(u64 out_bytes, const char* label, std::initializer_list<edge> edges,
         std::initializer_list<int> saved, std::initializer_list<int> params = {},
         u64 workspace = 0, component c = component::activations) {
    const int out = alloc(out_bytes, c, label);
    record(out, edges, saved, params, workspace);
    return out;
  }
  void record(int out, std::initializer_list<edge> edges, std::initializer_list<int> saved,
              std::initializer_list<int> params, u64 workspace) {
    if (!grad_on_) return;
    node n;
    n.out = out;
    for (const auto& e : edges)
      if (requires_grad(e.tensor)) n.edges.push_back(e);
    for (int p : params) {
      n.params.push_back(p);
      n.param_bytes.push_back(param_elems_[p]);
      n.param_cast.push_back(cast_of_[p] != k_none && dt_.amp);
    }
    if (n.edges.empty() && n.params.empty()) return;
    for (int t : saved) {
      if (t < 0) continue;
      ref(t);
      n.saved.push_back(t);
    }
    n.workspace = workspace;
    tensor_meta_[out].producer = static_cast<int>(nodes_.size());
    nodes_.push_back(std::move(n));
  }

  /// The weight tensor an op uses: the parameter itself, or under autocast its cached low
  /// precision copy (made once per forward, kept until autocast exits).
  int weight(int p) {
    if (!dt_.amp) return param_tensor_[p];
    if (cast_of_[p] == k_none) {
      cast_of_[p] = alloc(param_elems_[p] * static_cast<u64>(dt_.cast),
                          component::autocast_weight_cache, "weight cast");
      cache_.push_back(p);
    }
    return cast_of_[p];
  }
  void clear_autocast_cache() {
    for (int p : cache_) {
      unref(cast_of_[p]);
      cast_of_[p] = k_none;
    }
    cache_.clear();
  }

  /// An input to a GEMM/conv under autocast: fp32 tensors are cast to low precision (a fresh
  /// copy each call, saved by the op); others are used as they are.
  int gemm_input(int x, i64 elems, int elem_bytes) {
    if (dt_.amp && elem_bytes == 4) {
      const int c =
          alloc(static_cast<u64>(elems) * dt_.cast, component::activations, "autocast input cast");
      record(c, {edge{x, static_cast<u64>(elems) * 4}}, {}, {}, 0);
      return c;
    }
    ref(x);
    return x;
  }

  /// F.linear / addmm: y = x W^T (+ b). Saves the (cast) input and weight.
  int linear(int x, i64 rows, i64 in, i64 out, int p, int x_elem_bytes, const char* label,
             component c = component::activations) {
    const int xin = gemm_input(x, rows * in, x_elem_bytes);
    const int w = weight(p);
    const int y = op(static_cast<u64>(rows * out) * dt_.low, label,
                     {edge{xin, static_cast<u64>(rows * in) * (dt_.amp ? dt_.low : x_elem_bytes)}},
                     {xin, w}, {p}, 0, c);
    unref(xin);
    return y;
  }

  void backward(const std::vector<int>& losses);
  void run_nodes_backward(std::size_t first);
  void param_grad(int p, u64 elems, bool cast);

  // ---- state ---------------------------------------------------------------------------------
  const model_description& m_;
  const plan_request& r_;
  schedule& s_;
  dtypes dt_;
  std::vector<tensor_meta> tensor_meta_;
  lm_params lm_;
  std::vector<node> nodes_;
  std::vector<int> param_tensor_, cast_of_, param_grad_, cache_;
  std::vector<u64> param_elems_;
  std::vector<int> state_a_, state_b_;
  phase phase_ = phase::setup;
  int layer_ = -1;
  int step_ = 0;
  bool grad_on_ = true;
  bool recomputing_ = false;
  bool backward_workspace_ = false;
  layer_fn layer_forward_ = nullptr;
};

void walker::param_grad(int p, u64 elems, bool cast) {
  // ZeRO-2/3 keep only this rank's shard of each gradient after the reduce-scatter.
  const double gs = r_.zero >= 2 ? 1.0 / r_.data_parallel() : 1.0;
  const u64 full =
      static_cast<u64>(std::ceil(static_cast<double>(elems) * gs)) * static_cast<u64>(dt_.param);
  if (cast)
    transient(elems * static_cast<u64>(dt_.low), component::activation_gradients,
              "weight grad (low precision)");
  if (param_grad_[p] == k_none) {
    // AccumulateGrad steals the freshly computed gradient as .grad.
    param_grad_[p] = alloc(full, component::gradients, "parameter gradient");
  } else {
    transient(full, component::activation_gradients, "gradient to accumulate");
  }
}

void walker::run_nodes_backward(std::size_t first) {
  for (std::size_t i = nodes_.size(); i-- > first;) {
    const node n = nodes_[i];
    nodes_.pop_back();
    const int g_out = tensor_meta_[n.out].grad;
    if (g_out != k_none) {
      if (n.ckpt_layer >= 0) {
        // Non-reentrant checkpoint: re-run the layer's forward with grad on, hand the layer
        // output's gradient to the recomputed output, and walk the recomputed nodes.
        const std::size_t mark = nodes_.size();
        const int saved_layer = layer_;
        const phase saved_phase = phase_;
        layer_ = n.ckpt_layer;
        recomputing_ = true;
        const int y = layer_forward_(*this, n.ckpt_input, n.ckpt_layer);
        clear_autocast_cache();
        recomputing_ = false;
        phase_ = saved_phase;
        tensor_meta_[y].grad = g_out;
        tensor_meta_[n.out].grad = k_none;
        unref(y);
        run_nodes_backward(mark);
        layer_ = saved_layer;
        for (int t : n.saved) unref(t);
        continue;
      }
      // Kernel workspace (flash dq accumulator, cuDNN algorithm workspace) lives while the
      // input and weight gradients are produced.
      const int ws =
          n.workspace ? alloc(n.workspace, component::workspace, "backward workspace") : k_none;
      for (const auto& e : n.edges) {
        const int t = e.tensor;
        if (e.passthrough) {
          if (tensor_meta_[t].grad == k_none) {
            ref(g_out);
            tensor_meta_[t].grad = g_out;
          } else {
            // InputBuffer accumulation: the stored gradient is shared, so the sum is a new tensor.
            const int sum =
                alloc(e.grad_bytes, component::activation_gradients, "activation gradient");
            unref(tensor_meta_[t].grad);
            tensor_meta_[t].grad = sum;
          }
          continue;
        }
        const int g = alloc(e.grad_bytes, component::activation_gradients, "activation gradient");
        if (tensor_meta_[t].grad == k_none) {
          tensor_meta_[t].grad = g;
        } else if (tensor_meta_[tensor_meta_[t].grad].refs == 1) {
          unref(g);  // accumulated in place into the stored gradient
        } else {
          const int sum =
              alloc(e.grad_bytes, component::activation_gradients, "activation gradient");
          unref(g);
          unref(tensor_meta_[t].grad);
          tensor_meta_[t].grad = sum;
        }
      }
      for (std::size_t k = 0; k < n.params.size(); ++k)
        param_grad(n.params[k], n.param_bytes[k], n.param_cast[k]);
      if (ws != k_none) unref(ws);
      tensor_meta_[n.out].grad = k_none;
      unref(g_out);
    }
    for (int t : n.saved) unref(t);
  }
}

void walker::backward(const std::vector<int>& losses) {
  phase_ = phase::backward;
  if (!backward_workspace_) {
    // The autograd engine runs backward on its own thread, which gets its own cuBLAS handle and
    // so its own workspace (see the forward one in build_schedule).
    backward_workspace_ = true;
    alloc(k_cublas_workspace, component::workspace, "cuBLAS workspace (autograd thread)");
  }
  for (int loss : losses)
    tensor_meta_[loss].grad = alloc(4, component::activation_gradients, "loss gradient");
  run_nodes_backward(0);
  // Gradients of tensors without a producer node (inputs) are never created; any left are freed.
  for (std::size_t t = 0; t < tensor_meta_.size(); ++t) {
    if (tensor_meta_[t].grad != k_none) {
      unref(tensor_meta_[t].grad);
      tensor_meta_[t].grad = k_none;
    }
  }
  layer_ = -1;
}

// ---- shared building blocks ----------------------------------------------------------------

struct dims {
  i64 b = 1, s = 1, h = 1, heads = 1, kv = 1, d = 1, f = 1, V = 1;
  [[nodiscard]] i64 tok() const { return b * s; }
};

/// Native dropout: output and a 1-byte mask (saved). p == 0 is the identity.
int dropout(walker& w, int x, u64 elems, int elem_bytes, double p, const char* label) {
  if (p <= 0 || !w.grad_on_) {
    w.ref(x);
    return x;
  }
  const int mask = w.alloc(elems, component::activations, "dropout mask");
  const int y = w.op(elems * static_cast<u64>(elem_bytes), label,
                     {edge{x, elems * static_cast<u64>(elem_bytes)}}, {mask});
  w.unref(mask);
  return y;
}

/// LayerNorm (autocast runs it in fp32): saves input, mean and rstd; output in the act dtype.
int layer_norm(walker& w, int x, i64 rows, i64 h, int x_bytes, int p) {
  const int ob = w.dt_.amp ? 4 : w.dt_.act;
  const int stats = w.alloc(static_cast<u64>(rows) * 8, component::activations, "norm statistics");
  const int y = w.op(static_cast<u64>(rows * h) * ob, "layer norm output",
                     {edge{x, static_cast<u64>(rows * h) * x_bytes}}, {x, stats}, {p});
  w.unref(stats);
  return y;
}

/// transformers' RMSNorm: upcast to fp32, pow(2).mean, x * rsqrt(var + eps), weight * x.to(dtype).
int rms_norm(walker& w, int x, i64 rows, i64 h, int x_bytes, int p) {
  const u64 n = static_cast<u64>(rows * h);
  int x32 = x;
  if (x_bytes != 4) {
    x32 = w.op(n * 4, "rmsnorm fp32 input", {edge{x, n * x_bytes}}, {});
  } else {
    w.ref(x);
  }
  w.transient(n * 4, component::temporaries, "rmsnorm pow");
  const int rs = w.alloc(static_cast<u64>(rows) * 4, component::activations, "rmsnorm rstd");
  const int normed = w.op(n * 4, "rmsnorm normalised", {edge{x32, n * 4}}, {x32, rs});
  w.unref(rs);
  w.unref(x32);
  int y;
  if (x_bytes != 4) {
    const int cast = w.op(n * x_bytes, "rmsnorm cast back", {edge{normed, n * 4}}, {});
    w.unref(normed);
    y = w.op(n * x_bytes, "rmsnorm output", {edge{cast, n * x_bytes}}, {cast}, {p});
    w.unref(cast);
  } else {
    y = w.op(n * 4, "rmsnorm output", {edge{normed, n * 4}}, {normed}, {p});
    w.unref(normed);
  }
  return y;
}

int norm(walker& w, int x, i64 rows, i64 h, int x_bytes, int p) {
  return w.m_.t.layer_norm ? layer_norm(w, x, rows, h, x_bytes, p)
                           : rms_norm(w, x, rows, h, x_bytes, p);
}

/// Out-of-place add with type promotion; gradients pass through (cast when dtypes differ).
int add(walker& w, int a, int a_bytes, int b, int b_bytes, u64 elems, const char* label) {
  const int ob = std::max(a_bytes, b_bytes);
  return w.op(elems * ob, label,
              {edge{a, elems * a_bytes, a_bytes == ob}, edge{b, elems * b_bytes, b_bytes == ob}},
              {});
}

/// Attention core. `q`, `k`, `v` are tensors (possibly one packed qkv) with the given element
/// widths; returns the (b, s, heads*d) output in the low dtype.
int attention(walker& w, const dims& D, int q, int k, int v, int qkv_bytes, bool packed,
              double p_drop, bool causal, int v_bytes = 0) {
  if (v_bytes == 0) v_bytes = qkv_bytes;
  const u64 n_q = static_cast<u64>(D.tok() * D.heads * D.d);
  const u64 n_kv = static_cast<u64>(D.tok() * D.kv * D.d);
  const int low = w.dt_.low;
  const bool eager = w.r_.attention == attention_kind::eager &&
                     !(w.recomputing_ && w.r_.ckpt == checkpointing::selective);
  if (!eager || !w.grad_on_) {
    // SDPA: flash (fp16/bf16) or memory-efficient (fp32) kernel; saves q, k, v, output and the
    // fp32 log-sum-exp; autocast casts fp32 inputs to the low dtype first.
    int qc = q, kc = k, vc = v;
    auto cast_in = [&](int t, u64 n, int tb) {
      if (w.dt_.amp && tb == 4) return w.op(n * low, "sdpa input cast", {edge{t, n * 4}}, {});
      w.ref(t);
      return t;
    };
    if (!packed) {
      qc = cast_in(q, n_q, qkv_bytes), kc = cast_in(k, n_kv, qkv_bytes),
      vc = cast_in(v, n_kv, v_bytes);
    } else {
      w.ref(q);
      qc = kc = vc = q;
    }
    const u64 s_round = static_cast<u64>((D.s + 127) / 128 * 128);
    const int lse = w.alloc(static_cast<u64>(D.b * D.heads) * s_round * 4, component::activations,
                            "attention logsumexp");
    // Backward: flash keeps an fp32 dq accumulator (and expanded dk/dv for grouped heads).
    u64 ws = n_q * 4 + (D.kv != D.heads ? 2 * n_q * low : 0);
    int out;
    const u64 ob = n_q * low;
    if (packed) {
      out = w.op(ob, "attention output", {edge{q, n_q * qkv_bytes + 2 * n_kv * qkv_bytes}},
                 {q, lse}, {}, ws);
    } else {
      out = w.op(ob, "attention output",
                 {edge{qc, n_q * low}, edge{kc, n_kv * low}, edge{vc, n_kv * low}},
                 {qc, kc, vc, lse}, {}, ws);
    }
    // The output itself is saved too.
    if (w.grad_on_ && w.tensor_meta_[out].producer != k_none) {
      w.ref(out);
      w.nodes_[w.tensor_meta_[out].producer].saved.push_back(out);
    }
    w.unref(lse);
    if (!packed) {
      w.unref(qc), w.unref(kc), w.unref(vc);
    } else {
      w.unref(q);
    }
    return out;
  }
  // Eager attention as transformers writes it: scores = q k^T, / sqrt(d), + mask, softmax (fp32
  // under autocast, then cast back), dropout, @ v, then a contiguous copy of the output.
  const u64 n_s = static_cast<u64>(D.b * D.heads) * static_cast<u64>(D.s * D.s);
  const u64 qkv_edge = packed ? n_q * qkv_bytes + 2 * n_kv * qkv_bytes : n_q * qkv_bytes;
  const int sc = w.op(n_s * low, "attention scores", {edge{q, qkv_edge}}, {q});
  const int scaled = w.op(n_s * low, "scaled scores", {edge{sc, n_s * low}}, {});
  w.unref(sc);
  int masked = scaled;
  if (causal) {
    masked = w.op(n_s * low, "masked scores", {edge{scaled, n_s * low, true}}, {});
    w.unref(scaled);
  }
  // softmax under autocast runs with dtype=float32 (reads 16-bit, writes fp32, no input copy).
  const int sm_in = masked;
  const int sm_b = w.dt_.amp ? 4 : low;
  const int probs = w.op(n_s * sm_b, "softmax", {edge{sm_in, n_s * low}}, {});
  if (w.tensor_meta_[probs].producer != k_none) {
    w.ref(probs);
    w.nodes_[w.tensor_meta_[probs].producer].saved.push_back(probs);
  }
  w.unref(sm_in);
  int pl = probs;
  if (w.dt_.amp) {
    pl = w.op(n_s * low, "softmax cast", {edge{probs, n_s * 4}}, {});
    w.unref(probs);
  }
  const int pd = dropout(w, pl, n_s, low, p_drop, "attention dropout");
  w.unref(pl);
  const int ctx = w.op(n_q * low, "attention context",
                       {edge{pd, n_s * low}, edge{packed ? q : v, packed ? 0 : n_kv * low}},
                       {pd, packed ? q : v});
  w.unref(pd);
  const int out = w.op(n_q * low, "attention output", {edge{ctx, n_q * low}}, {});
  w.unref(ctx);
  return out;
}

// ---- transformer families --------------------------------------------------------------------

dims lm_dims(const walker& w) {
  const auto& t = w.m_.t;
  dims D;
  D.b = w.r_.micro_batch;
  D.s = w.r_.seq;
  D.h = t.hidden;
  D.heads = t.heads / w.r_.tp;
  D.kv = std::max<i64>(1, t.kv_heads / w.r_.tp);
  D.d = t.head_dim;
  D.f = t.intermediate / w.r_.tp;
  D.V = t.vocab;
  if (w.r_.sp && w.r_.tp > 1) {
    // Sequence parallel: every activation of the layer is split t ways (Korthikanti et al.);
    // modelled as full heads over s/t tokens.
    D.s = std::max<i64>(1, D.s / w.r_.tp);
    D.heads = t.heads;
    D.kv = t.kv_heads;
    D.f = t.intermediate;
  }
  return D;
}

/// One decoder/encoder block of the HF transformer families. `x` is the block input (fp32 under
/// autocast, the model dtype otherwise). Returns the block output with one reference.
int transformer_block(walker& w, int x, int l) {
  w.layer_ = l;
  if (w.phase_ != phase::backward) w.phase_ = phase::forward;
  const auto& t = w.m_.t;
  const dims D = lm_dims(w);
  const i64 rows = D.tok();
  const u64 nh = static_cast<u64>(rows * D.h);
  const u64 nq = static_cast<u64>(rows * D.heads * D.d);
  const u64 nkv = static_cast<u64>(rows * D.kv * D.d);
  const int xb = w.dt_.act;                  // residual stream width
  const int nb = w.dt_.amp ? 4 : w.dt_.act;  // norm output width
  const int low = w.dt_.low;
  const auto fam = w.m_.family;

  auto mlp = [&](int in, int in_bytes) {
    if (t.mlp == mlp_kind::swiglu) {
      const int g = w.linear(in, rows, D.h, D.f, w.layer_param(l, 4), in_bytes, "mlp gate");
      const u64 nf = static_cast<u64>(rows * D.f);
      const int a = w.op(nf * low, "mlp silu", {edge{g, nf * low}}, {g});
      w.unref(g);
      const int u = w.linear(in, rows, D.h, D.f, w.layer_param(l, 4), in_bytes, "mlp up");
      const int m = w.op(nf * low, "mlp product", {edge{a, nf * low}, edge{u, nf * low}}, {a, u});
      w.unref(a), w.unref(u);
      const int d = w.linear(m, rows, D.f, D.h, w.layer_param(l, 5), low, "mlp down");
      w.unref(m);
      return d;
    }
    const u64 nf = static_cast<u64>(rows * D.f);
    const int u = w.linear(in, rows, D.h, D.f, w.layer_param(l, 4), in_bytes, "mlp up");
    int a;
    if (t.mlp == mlp_kind::gelu_python) {
      // NewGELUActivation: 0.5*x*(1+tanh(sqrt(2/pi)*(x+0.044715*x^3))). pow is on autocast's
      // fp32 list, so under autocast the chain runs in fp32 from the cast of x onwards.
      const int eb = w.dt_.amp ? 4 : low;
      int u32 = u;
      if (w.dt_.amp)
        u32 = w.op(nf * 4, "gelu input fp32", {edge{u, nf * low}}, {});
      else
        w.ref(u);
      const int pw = w.op(nf * eb, "gelu pow", {edge{u32, nf * eb}}, {u32});
      const int p2 = w.op(nf * eb, "gelu scaled pow", {edge{pw, nf * eb, true}}, {});
      w.unref(pw);
      const int s1 = add(w, u, low, p2, eb, nf, "gelu inner sum");
      w.unref(p2);
      const int s2 = w.op(nf * eb, "gelu scaled", {edge{s1, nf * eb, true}}, {});
      w.unref(s1);
      const int th = w.op(nf * eb, "gelu tanh", {edge{s2, nf * eb}}, {});
      if (w.tensor_meta_[th].producer != k_none) {
        w.ref(th);
        w.nodes_[w.tensor_meta_[th].producer].saved.push_back(th);
      }
      w.unref(s2);
      const int t3 = w.op(nf * eb, "gelu 1+tanh", {edge{th, nf * eb, true}}, {});
      w.unref(th);
      const int hu = w.op(nf * low, "gelu half x", {edge{u, nf * low, true}}, {});
      a = w.op(nf * eb, "gelu output", {edge{hu, nf * low}, edge{t3, nf * eb}}, {hu, t3});
      w.unref(hu), w.unref(t3), w.unref(u32);
      w.unref(u);
      const int d = w.linear(a, rows, D.f, D.h, w.layer_param(l, 5), eb, "mlp down");
      w.unref(a);
      return d;
    }
    a = w.op(nf * low, "mlp gelu", {edge{u, nf * low}}, {u});
    w.unref(u);
    const int d = w.linear(a, rows, D.f, D.h, w.layer_param(l, 5), low, "mlp down");
    w.unref(a);
    return d;
  };

  auto self_attention = [&](int in, int in_bytes) {
    if (fam == model_family::bert) {
      // Separate query/key/value Linear modules, each casting the fp32 input under autocast.
      const int q = w.linear(in, rows, D.h, D.heads * D.d, w.layer_param(l, 1), in_bytes, "query");
      const int k = w.linear(in, rows, D.h, D.kv * D.d, w.layer_param(l, 1), in_bytes, "key");
      const int v = w.linear(in, rows, D.h, D.kv * D.d, w.layer_param(l, 1), in_bytes, "value");
      const int o = attention(w, D, q, k, v, low, false, t.attention_dropout, false);
      w.unref(q), w.unref(k), w.unref(v);
      return o;
    }
    if (fam == model_family::gpt2) {
      const int qkv = w.linear(in, rows, D.h, 3 * D.h, w.layer_param(l, 1), in_bytes, "qkv");
      const int o = attention(w, D, qkv, qkv, qkv, low, true, t.attention_dropout, true);
      w.unref(qkv);
      return o;
    }
    if (fam == model_family::gpt_neox) {
      // Packed qkv; partial rotary on q and k: cat(rotated fp32 part, pass part) promotes q and
      // k to fp32 under autocast; v stays a view of qkv.
      const int qkv = w.linear(in, rows, D.h, 3 * D.h, w.layer_param(l, 1), in_bytes, "qkv");
      const int rb = w.dt_.amp ? 4 : low;
      const u64 nrot = static_cast<u64>(static_cast<double>(nq) * t.rotary_fraction);
      auto rope = [&](const char* label) {
        w.transient(nrot * rb, component::temporaries, "rope product");
        w.transient(nrot * low, component::temporaries, "rope rotate_half");
        w.transient(nrot * rb, component::temporaries, "rope product");
        const int r = w.op(nrot * rb, "rope output", {edge{qkv, 0, true}}, {});
        const int c =
            w.op(nq * rb, label, {edge{r, nrot * rb, true}, edge{qkv, (nq - nrot) * low}}, {});
        w.unref(r);
        return c;
      };
      const int q = rope("query");
      const int k = rope("key");
      int o;
      if (w.dt_.amp) {
        const int qc = w.op(nq * low, "sdpa input cast", {edge{q, nq * 4}}, {});
        const int kc = w.op(nq * low, "sdpa input cast", {edge{k, nq * 4}}, {});
        w.unref(q), w.unref(k);
        o = attention(w, D, qc, kc, qkv, low, false, t.attention_dropout, true);
        w.unref(qc), w.unref(kc);
      } else {
        o = attention(w, D, q, k, qkv, low, false, t.attention_dropout, true);
        w.unref(q), w.unref(k);
      }
      w.unref(qkv);
      return o;
    }
    // LLaMA / Mistral / Qwen2: q, k, v projections (each casting the fp32 norm output under
    // autocast), RoPE (q*cos + rotate_half(q)*sin; cos/sin are fp32 under autocast, promoting
    // q and k to fp32), SDPA with grouped-query heads.
    const int q = w.linear(in, rows, D.h, D.heads * D.d, w.layer_param(l, 1), in_bytes, "query");
    const int k = w.linear(in, rows, D.h, D.kv * D.d, w.layer_param(l, 1), in_bytes, "key");
    const int v = w.linear(in, rows, D.h, D.kv * D.d, w.layer_param(l, 1), in_bytes, "value");
    const int rb = w.dt_.amp ? 4 : low;
    auto rope = [&](int src, u64 n, const char* label) {
      const int a = w.op(n * rb, "rope q*cos", {edge{src, n * low}}, {});
      w.transient(n / 2 * low, component::temporaries, "rope neg");
      const int rh = w.op(n * low, "rope rotate_half", {edge{src, 0, true}}, {});
      const int b2 = w.op(n * rb, "rope rot*sin", {edge{rh, n * low}}, {});
      w.unref(rh);
      const int c = w.op(n * rb, label, {edge{a, n * rb, true}, edge{b2, n * rb, true}}, {});
      w.unref(a), w.unref(b2);
      return c;
    };
    const int qr = rope(q, nq, "query rotated");
    w.unref(q);
    const int kr = rope(k, nkv, "key rotated");
    w.unref(k);
    const int o = attention(w, D, qr, kr, v, rb, false, t.attention_dropout, true, low);
    w.unref(qr), w.unref(kr), w.unref(v);
    return o;
  };

  if (fam == model_family::bert) {
    // Post-LN: attention -> dense -> dropout -> LayerNorm(x + .) -> intermediate -> output.
    const int a = self_attention(x, xb);
    const int o = w.linear(a, rows, D.h, D.h, w.layer_param(l, 2), low, "attention dense");
    w.unref(a);
    const int od = dropout(w, o, nh, low, t.hidden_dropout, "hidden dropout");
    w.unref(o);
    const int s1 = add(w, od, low, x, xb, nh, "residual");
    w.unref(od);
    const int h1 = layer_norm(w, s1, rows, D.h, std::max(low, xb), w.layer_param(l, 0));
    w.unref(s1);
    const int m = mlp(h1, nb);
    const int md = dropout(w, m, nh, low, t.hidden_dropout, "hidden dropout");
    w.unref(m);
    const int s2 = add(w, md, low, h1, nb, nh, "residual");
    w.unref(md), w.unref(h1);
    const int y = layer_norm(w, s2, rows, D.h, std::max(low, nb), w.layer_param(l, 3));
    w.unref(s2);
    return y;
  }
  const int n1 = norm(w, x, rows, D.h, xb, w.layer_param(l, 0));
  const int a = self_attention(n1, nb);
  const int o = w.linear(a, rows, D.heads * D.d, D.h, w.layer_param(l, 2), low,
                         "attention output projection");
  w.unref(a);
  const int od = dropout(w, o, nh, low, t.hidden_dropout, "residual dropout");
  w.unref(o);
  if (t.parallel_residual) {
    const int n2 = norm(w, x, rows, D.h, xb, w.layer_param(l, 3));
    w.unref(n1);
    const int m = mlp(n2, nb);
    w.unref(n2);
    const int md = dropout(w, m, nh, low, t.hidden_dropout, "residual dropout");
    w.unref(m);
    const int s1 = add(w, md, low, od, low, nh, "parallel sum");
    w.unref(md), w.unref(od);
    const int y = add(w, s1, low, x, xb, nh, "residual");
    w.unref(s1);
    return y;
  }
  w.unref(n1);
  const int h1 = add(w, od, low, x, xb, nh, "residual");
  w.unref(od);
  const int h1b = std::max(low, xb);
  const int n2 = norm(w, h1, rows, D.h, h1b, w.layer_param(l, 3));
  const int m = mlp(n2, nb);
  w.unref(n2);
  const int md = dropout(w, m, nh, low, t.hidden_dropout, "residual dropout");
  w.unref(m);
  const int y = add(w, md, low, h1, h1b, nh, "residual");
  w.unref(md), w.unref(h1);
  return y;
}

/// Runs `layer` with checkpointing when the request asks for it: the forward runs without
/// saving, one node keeps the layer input, and backward re-runs the layer.
int run_layer(walker& w, int x, int l) {
  if (w.r_.ckpt != checkpointing::full || !w.grad_on_) return transformer_block(w, x, l);
  w.grad_on_ = false;
  const int y_inner = transformer_block(w, x, l);
  w.grad_on_ = true;
  // Give the output a node so the gradient reaches the re-run.
  const int y = y_inner;
  node n;
  n.out = y;
  n.edges.push_back(edge{x, 0, true});
  w.ref(x);
  n.saved.push_back(x);
  n.ckpt_layer = l;
  n.ckpt_input = x;
  w.tensor_meta_[y].producer = static_cast<int>(w.nodes_.size());
  w.nodes_.push_back(std::move(n));
  return y;
}

/// Cross-entropy over (rows, V) logits as transformers' loss functions compute it: fp32 upcast,
/// log_softmax (saved), nll_loss. Returns the scalar loss.
int lm_loss(walker& w, int logits, u64 rows, i64 V, bool explicit_upcast) {
  w.phase_ = phase::loss;
  const u64 n = rows * static_cast<u64>(V);
  const int low = w.s_.tensors[logits].bytes / n == 4 ? 4 : w.dt_.low;
  if (low != 4 && !explicit_upcast) {
    // CrossEntropyLoss on 16-bit logits under autocast: log_softmax is on autocast's
    // "fp32 with dtype argument" list, so it reads the 16-bit logits and writes fp32
    // (half_to_float, no input copy); its backward returns a 16-bit gradient.
    const int lsm =
        w.op(n * 4, "log_softmax", {edge{logits, n * low}}, {}, {}, 0, component::logits_and_loss);
    if (w.tensor_meta_[lsm].producer != k_none) {
      w.ref(lsm);
      w.nodes_[w.tensor_meta_[lsm].producer].saved.push_back(lsm);
    }
    const int loss = w.op(4, "loss", {edge{lsm, n * 4}}, {}, {}, 0, component::logits_and_loss);
    w.unref(lsm);
    return loss;
  }
  int l32 = logits;
  if (low != 4) {
    l32 =
        w.op(n * 4, "logits fp32", {edge{logits, n * low}}, {}, {}, 0, component::logits_and_loss);
  } else {
    w.ref(logits);
  }
  const int lsm =
      w.op(n * 4, "log_softmax", {edge{l32, n * 4}}, {}, {}, 0, component::logits_and_loss);
  if (w.tensor_meta_[lsm].producer != k_none) {
    w.ref(lsm);
    w.nodes_[w.tensor_meta_[lsm].producer].saved.push_back(lsm);
  }
  const int loss = w.op(4, "loss", {edge{lsm, n * 4}}, {}, {}, 0, component::logits_and_loss);
  w.unref(lsm);
  w.unref(l32);
  return loss;
}

void setup_params(walker& w) {
  const auto params = parameter_tensors(w.m_);
  const int n = static_cast<int>(params.size());
  w.param_tensor_.assign(n, k_none);
  w.cast_of_.assign(n, k_none);
  w.param_grad_.assign(n, k_none);
  w.state_a_.assign(n, k_none);
  w.state_b_.assign(n, k_none);
  w.param_elems_.resize(n);
  const int tp = w.r_.tp;
  int first_layer = -1;
  for (int i = 0; i < n; ++i) {
    // Tensor parallel splits the layer matrices (not norms) and the vocabulary.
    i64 e = params[i].elements;
    if (tp > 1 && params[i].layer >= 0 && params[i].name.find("norm") == std::string::npos) e /= tp;
    if (tp > 1 && (params[i].name == "embed_tokens" || params[i].name == "lm_head")) e /= tp;
    w.param_elems_[i] = static_cast<u64>(e);
    if (params[i].layer == 0 && first_layer < 0) first_layer = i;
  }
  w.lm_ = lm_params{};
  w.lm_.first_layer_param = first_layer < 0 ? 0 : first_layer;
  for (int i = 0; i < n; ++i) {
    const auto& nm = params[i].name;
    if (params[i].layer >= 0) continue;
    if (nm == "embed_tokens")
      w.lm_.embed = i;
    else if (nm == "embed_positions")
      w.lm_.pos = i;
    else if (nm == "embed_token_types")
      w.lm_.types = i;
    else if (nm == "embed_norm")
      w.lm_.embed_norm = i;
    else if (nm == "final_norm")
      w.lm_.final_norm = i;
    else if (nm == "lm_head")
      w.lm_.head = i;
    else if (nm == "head_transform")
      w.lm_.head_transform = i;
    else if (nm == "head_bias")
      w.lm_.head_bias = i;
  }
}

// ---- the LM training step ------------------------------------------------------------------

int lm_forward_loss(walker& w) {
  const auto& t = w.m_.t;
  const dims D = lm_dims(w);
  const u64 rows = static_cast<u64>(D.tok());
  const u64 nh = rows * static_cast<u64>(D.h);
  const int eb = w.dt_.act;  // embedding output: fp32 under autocast (embedding is not cast)
  w.phase_ = phase::forward;
  w.layer_ = -1;
  const int ids = w.alloc(rows * 8, component::inputs, "input ids");
  const int labels = w.alloc(rows * 8, component::inputs, "labels");
  int x = w.op(nh * eb, "token embeddings", {}, {ids}, {w.lm_.embed});
  if (w.lm_.pos >= 0) {
    const int pe =
        w.op(static_cast<u64>(D.s * D.h) * eb, "position embeddings", {}, {}, {w.lm_.pos});
    const int s = add(w, x, eb, pe, eb, nh, "embeddings sum");
    w.unref(x), w.unref(pe);
    x = s;
  }
  if (w.lm_.types >= 0) {
    const int te = w.op(nh * eb, "token type embeddings", {}, {}, {w.lm_.types});
    const int s = add(w, x, eb, te, eb, nh, "embeddings sum");
    w.unref(x), w.unref(te);
    x = s;
  }
  if (w.lm_.embed_norm >= 0) {
    const int y = layer_norm(w, x, D.tok(), D.h, eb, w.lm_.embed_norm);
    w.unref(x);
    x = y;
  }
  if (t.embedding_dropout > 0) {
    const int y = dropout(w, x, nh, w.dt_.amp && w.lm_.embed_norm >= 0 ? 4 : eb,
                          t.embedding_dropout, "embedding dropout");
    w.unref(x);
    x = y;
  }
  // A causal eager mask (b, 1, s, s) in the residual dtype lives through the forward.
  int mask = k_none;
  if (w.r_.attention == attention_kind::eager && w.m_.family != model_family::bert)
    mask = w.alloc(static_cast<u64>(D.b * D.s * D.s) * eb, component::temporaries, "causal mask");
  int xb = eb;
  const i64 layers = t.layers / w.r_.pp;
  for (int l = 0; l < layers; ++l) {
    const int y = run_layer(w, x, l);
    w.unref(x);
    x = y;
    xb = w.dt_.act;
  }
  w.layer_ = -1;
  int hidden;
  if (w.m_.family == model_family::bert) {
    const int d = w.linear(x, D.tok(), D.h, D.h, w.lm_.head_transform, xb, "head transform");
    const int g = w.op(nh * w.dt_.low, "head gelu", {edge{d, nh * w.dt_.low}}, {d});
    w.unref(d);
    hidden = layer_norm(w, g, D.tok(), D.h, w.dt_.low, w.lm_.head_transform);
    w.unref(g);
  } else {
    hidden = norm(w, x, D.tok(), D.h, xb, w.lm_.final_norm);
  }
  w.unref(x);
  const int head = w.lm_.head >= 0 ? w.lm_.head : w.lm_.embed;
  const int hb = w.dt_.amp ? 4 : w.dt_.act;
  const int logits =
      w.linear(hidden, D.tok(), D.h, D.V / w.r_.tp, head, hb, "logits", component::logits_and_loss);
  w.unref(hidden);
  // transformers' ForCausalLMLoss calls logits.float(); BertForMaskedLM hands 16-bit logits to
  // CrossEntropyLoss.
  const int loss = lm_loss(w, logits, rows, D.V / w.r_.tp, w.m_.family != model_family::bert);
  // The model output (holding the logits) dies when the statement returns the loss.
  w.unref(logits);
  w.clear_autocast_cache();
  if (mask != k_none) w.unref(mask);
  w.unref(ids);
  w.unref(labels);
  return loss;
}

// ---- torchvision models --------------------------------------------------------------------

struct cnn_ctx {
  i64 b = 1;
  int pidx = 0;  // next parameter index in parameter_tensors order
};

/// A value flowing through the CNN: `grad` is the tensor gradients are attached to, `store` the
/// storage that holds the data (they differ after in-place ops, which add a node but no memory).
struct flow {
  int grad = k_none;
  int store = k_none;
};

/// conv (bias-free) -> BatchNorm (training: saves its input and per-channel statistics) ->
/// optional in-place ReLU (a node saving its result, no new memory).
flow conv_bn(walker& w, cnn_ctx& c, flow x, int x_bytes, i64 in_elems, i64 out_elems, bool relu) {
  const int low = w.dt_.low;
  const int xin = w.gemm_input(x.store, in_elems, x_bytes);
  int xedge = x.grad;
  if (xin != x.store) xedge = xin;  // autocast made a copy: gradients reach x through the cast node
  const int wt = w.weight(c.pidx);
  const u64 ws =
      static_cast<u64>(k_conv_workspace * static_cast<double>(in_elems + out_elems) * low);
  const int conv =
      w.op(static_cast<u64>(out_elems) * low, "conv output",
           {edge{xedge, static_cast<u64>(in_elems) * (xin != x.store ? low : x_bytes)}}, {xin, wt},
           {c.pidx}, ws);
  w.unref(xin);
  ++c.pidx;
  const int stats = w.alloc(4096, component::activations, "batchnorm statistics");
  const int bn = w.op(static_cast<u64>(out_elems) * low, "batchnorm output",
                      {edge{conv, static_cast<u64>(out_elems) * low}}, {conv, stats}, {c.pidx});
  w.unref(stats);
  ++c.pidx;
  w.unref(conv);
  if (!relu) return {bn, bn};
  const int r = w.op(0, "relu (in place)", {edge{bn, static_cast<u64>(out_elems) * low}}, {bn});
  w.unref(r);
  return {r, bn};
}

int resnet_forward_loss(walker& w) {
  const auto& rs = w.m_.resnet;
  cnn_ctx c;
  c.b = w.r_.micro_batch;
  const i64 S = w.r_.image_size;
  const int low = w.dt_.low;
  w.phase_ = phase::forward;
  w.layer_ = -1;
  const int img = w.alloc(static_cast<u64>(c.b * 3 * S * S) * 4, component::inputs, "images");
  const int tgt = w.alloc(static_cast<u64>(c.b) * 8, component::inputs, "targets");
  auto out_side = [](i64 side, int k, int stride, int pad) {
    return (side + 2 * pad - k) / stride + 1;
  };
  i64 side = out_side(S, 7, 2, 3);
  flow x = conv_bn(w, c, {img, img}, 4, c.b * 3 * S * S, c.b * 64 * side * side, true);
  // Max pool 3x3/2: saves its input and int64 indices.
  const i64 ps = out_side(side, 3, 2, 1);
  const int idx =
      w.alloc(static_cast<u64>(c.b * 64 * ps * ps) * 8, component::activations, "maxpool indices");
  const int mp =
      w.op(static_cast<u64>(c.b * 64 * ps * ps) * low, "maxpool output",
           {edge{x.grad, static_cast<u64>(c.b * 64 * side * side) * low}}, {x.store, idx});
  w.unref(idx);
  w.unref(x.store);
  x = {mp, mp};
  side = ps;
  i64 in = 64;
  const i64 widths[4] = {64, 128, 256, 512};
  const i64 expansion = rs.bottleneck ? 4 : 1;
  for (int s = 0; s < 4; ++s) {
    w.layer_ = s;
    for (int blk = 0; blk < rs.blocks[s]; ++blk) {
      const i64 wd = widths[s], outc = wd * expansion;
      const int stride = (blk == 0 && s > 0) ? 2 : 1;
      const bool down = blk == 0 && (s > 0 || in != outc);
      const i64 oside = out_side(side, 3, stride, 1);
      const i64 in_e = c.b * in * side * side;
      flow o;
      if (rs.bottleneck) {
        // torchvision v1.5: the stride sits on the 3x3 convolution.
        const flow a = conv_bn(w, c, x, low, in_e, c.b * wd * side * side, true);
        const flow bq =
            conv_bn(w, c, a, low, c.b * wd * side * side, c.b * wd * oside * oside, true);
        w.unref(a.store);
        o = conv_bn(w, c, bq, low, c.b * wd * oside * oside, c.b * outc * oside * oside, false);
        w.unref(bq.store);
      } else {
        const flow a = conv_bn(w, c, x, low, in_e, c.b * wd * oside * oside, true);
        o = conv_bn(w, c, a, low, c.b * wd * oside * oside, c.b * outc * oside * oside, false);
        w.unref(a.store);
      }
      const u64 oe = static_cast<u64>(c.b * outc * oside * oside) * low;
      flow identity = x;
      if (down) identity = conv_bn(w, c, x, low, in_e, c.b * outc * oside * oside, false);
      // out += identity (in place; gradients pass through), then in-place ReLU saving its result.
      const int sum = w.op(0, "residual add (in place)",
                           {edge{o.grad, oe, true}, edge{identity.grad, oe, true}}, {});
      if (down) w.unref(identity.store);
      const int r = w.op(0, "relu (in place)", {edge{sum, oe}}, {o.store});
      w.unref(sum);
      w.unref(x.store);
      x = {r, o.store};
      // r (0 bytes) is only a gradient handle; release it with the storage.
      w.unref(r);  // r is a 0-byte gradient handle; the data lives in o.store
      in = outc;
      side = oside;
    }
  }
  w.layer_ = -1;
  const int pooled =
      w.op(static_cast<u64>(c.b * in) * low, "avgpool output",
           {edge{x.grad, static_cast<u64>(c.b * in * side * side) * low}}, {x.store});
  w.unref(x.store);
  const int logits = w.linear(pooled, c.b, in, rs.num_classes, c.pidx, low, "logits");
  w.unref(pooled);
  const int loss = lm_loss(w, logits, static_cast<u64>(c.b), rs.num_classes, false);
  w.unref(logits);
  w.clear_autocast_cache();
  w.unref(img), w.unref(tgt);
  return loss;
}

int vit_forward_loss(walker& w) {
  const auto& v = w.m_.vit;
  const i64 b = w.r_.micro_batch, S = w.r_.image_size;
  const i64 grid = S / v.patch, s = grid * grid + 1;
  const int low = w.dt_.low;
  const int eb = w.dt_.act;
  w.phase_ = phase::forward;
  w.layer_ = -1;
  const int img = w.alloc(static_cast<u64>(b * 3 * S * S) * 4, component::inputs, "images");
  const int tgt = w.alloc(static_cast<u64>(b) * 8, component::inputs, "targets");
  // Parameter order: class_token, conv_proj, pos_embedding, 6 per layer, encoder_ln, head.
  const int xin = w.gemm_input(img, b * 3 * S * S, 4);
  const int proj = w.op(static_cast<u64>(b * v.hidden * grid * grid) * low, "patch embedding", {},
                        {xin, w.weight(1)}, {1});
  w.unref(xin);
  // cat([class_token (fp32 parameter), patches]) promotes to the parameter dtype; + pos_embedding.
  const int tok = w.op(static_cast<u64>(b * s * v.hidden) * eb, "tokens with class token",
                       {edge{proj, static_cast<u64>(b * v.hidden * grid * grid) * low}}, {}, {0});
  w.unref(proj);
  int x = w.op(static_cast<u64>(b * s * v.hidden) * eb, "position embedding",
               {edge{tok, static_cast<u64>(b * s * v.hidden) * eb, true}}, {}, {2});
  w.unref(tok);
  int xb = eb;
  const dims D{b, s, v.hidden, v.heads, v.heads, v.hidden / v.heads, v.mlp_dim, 1};
  const u64 nh = static_cast<u64>(b * s * v.hidden);
  for (int l = 0; l < v.layers; ++l) {
    w.layer_ = l;
    const int base = 3 + 6 * l;
    const int n1 = layer_norm(w, x, b * s, v.hidden, xb, base);
    const int nb = w.dt_.amp ? 4 : eb;
    // nn.MultiheadAttention: packed in_proj, then a contiguous copy of the (3, s, b, h) layout.
    const int pr = w.linear(n1, b * s, v.hidden, 3 * v.hidden, base + 1, nb, "in_proj");
    w.unref(n1);
    const int qkv = w.op(3 * nh * low, "qkv contiguous", {edge{pr, 3 * nh * low, true}}, {});
    w.unref(pr);
    const int a = attention(w, D, qkv, qkv, qkv, low, true, 0.0, false);
    w.unref(qkv);
    const int ac = w.op(nh * low, "attention output contiguous", {edge{a, nh * low, true}}, {});
    w.unref(a);
    const int o = w.linear(ac, b * s, v.hidden, v.hidden, base + 2, low, "out_proj");
    w.unref(ac);
    const int h1 = add(w, o, low, x, xb, nh, "residual");
    w.unref(o), w.unref(x);
    const int h1b = std::max(low, xb);
    const int n2 = layer_norm(w, h1, b * s, v.hidden, h1b, base + 3);
    const int u = w.linear(n2, b * s, v.hidden, v.mlp_dim, base + 4, nb, "mlp 1");
    w.unref(n2);
    const u64 nf = static_cast<u64>(b * s * v.mlp_dim);
    const int g = w.op(nf * low, "gelu", {edge{u, nf * low}}, {u});
    w.unref(u);
    const int m = w.linear(g, b * s, v.mlp_dim, v.hidden, base + 5, low, "mlp 2");
    w.unref(g);
    x = add(w, m, low, h1, h1b, nh, "residual");
    w.unref(m), w.unref(h1);
    xb = h1b;
  }
  w.layer_ = -1;
  const int pe = 3 + 6 * static_cast<int>(v.layers);
  const int n = layer_norm(w, x, b * s, v.hidden, xb, pe);
  w.unref(x);
  const int cls = w.op(static_cast<u64>(b * v.hidden) * (w.dt_.amp ? 4 : eb), "class token",
                       {edge{n, 0, true}}, {});
  w.unref(n);
  const int logits =
      w.linear(cls, b, v.hidden, v.num_classes, pe + 1, w.dt_.amp ? 4 : eb, "logits");
  w.unref(cls);
  const int loss = lm_loss(w, logits, static_cast<u64>(b), v.num_classes, false);
  w.unref(logits);
  w.clear_autocast_cache();
  w.unref(img), w.unref(tgt);
  return loss;
}

// ---- optimizer -----------------------------------------------------------------------------

/// Shard factor of optimizer states / gradients / parameters on this rank under ZeRO.
double shard(int stage_needed, const plan_request& r) {
  return r.zero >= stage_needed ? 1.0 / r.data_parallel() : 1.0;
}

void optimizer_step(walker& w) {
  w.phase_ = phase::optimizer;
  w.layer_ = -1;
  const auto& r = w.r_;
  const int n = static_cast<int>(w.param_elems_.size());
  const bool offload_opt = r.offload != offload_kind::none;
  const int sb = r.optimizer == optimizer_kind::adamw_8bit ? 1 : w.dt_.param;
  const double os = shard(1, r);
  auto sharded = [&](int i, int elem_bytes) {
    return static_cast<u64>(std::ceil(static_cast<double>(w.param_elems_[i]) * os)) *
           static_cast<u64>(elem_bytes);
  };
  // GradScaler.unscale_ works in place; its found_inf flags are tiny.
  if (r.prec == precision::amp_fp16) w.transient(512, component::temporaries, "found_inf");
  if (offload_opt) {
    // States and the update live in host memory; the device sees the gradient copy-out only.
    return;
  }
  const bool two_states = r.optimizer == optimizer_kind::adam ||
                          r.optimizer == optimizer_kind::adamw ||
                          r.optimizer == optimizer_kind::adamw_8bit;
  const bool one_state = r.optimizer == optimizer_kind::sgd_momentum;
  // Lazy state creation at the first step (zeros_like per parameter, or clone of the gradient
  // for SGD momentum).
  // Adam's _init_group creates exp_avg and exp_avg_sq per parameter, in parameter order.
  for (int i = 0; i < n; ++i) {
    if ((two_states || one_state) && w.state_a_[i] == k_none)
      w.state_a_[i] =
          w.alloc(sharded(i, sb), component::optimizer_states, "optimizer state (first moment)");
    if (two_states && w.state_b_[i] == k_none)
      w.state_b_[i] =
          w.alloc(sharded(i, sb), component::optimizer_states, "optimizer state (second moment)");
  }
  if (two_states && r.optimizer != optimizer_kind::adamw_8bit) {
    // _multi_tensor_adam: exp_avg_sq_sqrt = torch._foreach_sqrt(exp_avg_sqs) is one full-size
    // list of temporaries; Adam with weight decay would add a gradient copy (default wd = 0).
    std::vector<int> tmp(n);
    for (int i = 0; i < n; ++i)
      tmp[i] = w.alloc(sharded(i, w.dt_.param), component::temporaries, "adam sqrt temporaries");
    for (int i = 0; i < n; ++i) w.unref(tmp[i]);
  }
}

// ---- inference (generate) ------------------------------------------------------------------

u64 weight_bytes_quant(const walker& w, int i, const parameter_tensor& p) {
  const u64 e = w.param_elems_[i];
  const bool matrix = p.layer >= 0 && p.name.find("norm") == std::string::npos;
  switch (w.r_.quant) {
    case quant_kind::none:
      return e * static_cast<u64>(w.dt_.param);
    // int8 (LLM.int8 style): 1 byte per weight + one fp16 scale per output row (~h per matrix).
    case quant_kind::int8:
      return matrix ? e + e / static_cast<u64>(std::max<i64>(1, w.m_.t.hidden)) * 2 : e * 2;
    // int4 with group size 128: 0.5 byte + fp16 scale and zero per 128 weights.
    case quant_kind::int4:
      return matrix ? e / 2 + e / 128 * 4 : e * 2;
  }
  return e * 2;
}

void generate(walker& w) {
  const auto& t = w.m_.t;
  const auto& r = w.r_;
  w.grad_on_ = false;
  const i64 b = r.micro_batch, p = r.prompt, n = r.new_tokens;
  const int low = w.dt_.low;
  const i64 h = t.hidden, heads = t.heads / r.tp, kv = std::max<i64>(1, t.kv_heads / r.tp),
            d = t.head_dim;
  const i64 f = t.intermediate / r.tp;
  const i64 L = t.layers / r.pp;
  const u64 kv_tok = static_cast<u64>(kv * d) * low;  // one of K or V per token per layer
  std::vector<int> K(L, k_none), Vv(L, k_none);
  w.alloc(static_cast<u64>(b * p) * 16, component::inputs, "input ids and mask");
  if (r.serving == serving_kind::paged) {
    // Paged engine: blocks of 16 tokens for the whole context, reserved up front.
    const u64 blocks = static_cast<u64>((p + n + 15) / 16);
    for (int l = 0; l < L; ++l) {
      K[l] = w.alloc(blocks * 16 * kv_tok * b, component::kv_cache, "paged KV blocks (K)");
      Vv[l] = w.alloc(blocks * 16 * kv_tok * b, component::kv_cache, "paged KV blocks (V)");
    }
  }
  auto forward = [&](i64 q_len, i64 past) {
    const u64 rows = static_cast<u64>(b * q_len);
    const u64 nh = rows * h;
    const u64 nf = rows * f;
    int x = w.alloc(nh * low, component::temporaries, "hidden states");
    for (int l = 0; l < L; ++l) {
      w.layer_ = l;
      // Norm (RMSNorm upcasts to fp32: input copy, pow, normalised, cast back).
      if (!t.layer_norm && low != 4) {
        const int a = w.alloc(nh * 4, component::temporaries, "norm fp32");
        w.transient(nh * 4, component::temporaries, "norm pow");
        const int c = w.alloc(nh * 4, component::temporaries, "norm normalised");
        w.unref(a);
        const int cb = w.alloc(nh * low, component::temporaries, "norm cast");
        w.unref(c);
        const int y = w.alloc(nh * low, component::temporaries, "norm output");
        w.unref(cb);
        w.unref(y);
      } else {
        w.transient(nh * low, component::temporaries, "norm output");
      }
      const int nrm = w.alloc(nh * low, component::temporaries, "norm output");
      const int q = w.alloc(rows * heads * d * low, component::temporaries, "query");
      const int k = w.alloc(rows * kv * d * low, component::temporaries, "key");
      const int v = w.alloc(rows * kv * d * low, component::temporaries, "value");
      w.unref(nrm);
      if (t.rotary_fraction > 0) {
        w.transient(rows * heads * d * low, component::temporaries, "rope");
        w.transient(rows * heads * d * low, component::temporaries, "rope");
      }
      if (r.serving == serving_kind::generate) {
        // DynamicCache: keys = cat([keys, new]) allocates the grown tensor, then the old one dies.
        const u64 total = static_cast<u64>(b * (past + q_len)) * kv_tok;
        const int nk = w.alloc(total, component::kv_cache, "KV cache (K)");
        if (K[l] != k_none) w.unref(K[l]);
        K[l] = nk;
        const int nv = w.alloc(total, component::kv_cache, "KV cache (V)");
        if (Vv[l] != k_none) w.unref(Vv[l]);
        Vv[l] = nv;
      }
      w.unref(k), w.unref(v);
      const int o = w.alloc(rows * heads * d * low, component::temporaries, "attention output");
      w.unref(q);
      const int proj = w.alloc(nh * low, component::temporaries, "attention projection");
      w.unref(o);
      const int h1 = w.alloc(nh * low, component::temporaries, "residual");
      w.unref(proj);
      w.unref(x);
      w.transient(nh * low, component::temporaries, "norm output");
      if (t.mlp == mlp_kind::swiglu) {
        const int g = w.alloc(nf * low, component::temporaries, "mlp gate");
        const int a = w.alloc(nf * low, component::temporaries, "mlp act");
        w.unref(g);
        const int u = w.alloc(nf * low, component::temporaries, "mlp up");
        const int m = w.alloc(nf * low, component::temporaries, "mlp product");
        w.unref(a), w.unref(u);
        const int dn = w.alloc(nh * low, component::temporaries, "mlp down");
        w.unref(m);
        x = w.alloc(nh * low, component::temporaries, "residual");
        w.unref(dn);
      } else {
        const int u = w.alloc(nf * low, component::temporaries, "mlp up");
        int a;
        if (t.mlp == mlp_kind::gelu_python) {
          const int p1 = w.alloc(nf * low, component::temporaries, "gelu pow");
          const int p2 = w.alloc(nf * low, component::temporaries, "gelu");
          w.unref(p1);
          const int p3 = w.alloc(nf * low, component::temporaries, "gelu");
          w.unref(p2);
          const int th = w.alloc(nf * low, component::temporaries, "gelu tanh");
          w.unref(p3);
          const int hu = w.alloc(nf * low, component::temporaries, "gelu half");
          a = w.alloc(nf * low, component::temporaries, "gelu output");
          w.unref(th), w.unref(hu);
        } else {
          a = w.alloc(nf * low, component::temporaries, "mlp gelu");
        }
        w.unref(u);
        const int dn = w.alloc(nh * low, component::temporaries, "mlp down");
        w.unref(a);
        x = w.alloc(nh * low, component::temporaries, "residual");
        w.unref(dn);
      }
      w.unref(h1);
    }
    w.layer_ = -1;
    // logits_to_keep = 1: only the last position goes through the head; generate copies it to fp32.
    w.transient(static_cast<u64>(b) * h * low, component::temporaries, "final norm (last token)");
    const int lg = w.alloc(static_cast<u64>(b * t.vocab) * low, component::logits_and_loss,
                           "logits (last token)");
    const int l32 = w.alloc(static_cast<u64>(b * t.vocab) * 4, component::logits_and_loss,
                            "next-token logits fp32");
    w.unref(lg);
    w.unref(l32);
    w.unref(x);
  };
  w.phase_ = phase::prefill;
  forward(p, 0);
  w.phase_ = phase::decode;
  // Decode steps differ only in the cache length. Long generations replay a sample of them,
  // evenly spread, the last one at the final length. The spacing matters once each layer's cache
  // outgrows its block every few steps (the allocator rounds large segments to 2 MiB). Each K or
  // V tensor grows by at most 128 KiB between replayed steps: on 992 generate requests of 7
  // models, the reserved peak is then within 2.0% of replaying every step (p90 0.01%), where
  // 512 KiB gave 4.0% (p90 0.15%) and 64 KiB 1.3%; a measured 2048-token run (tinyllama-1.1b,
  // batch 64, 32 KiB per step) is predicted within 0.8% (0.5% at 512 KiB); 2 MiB spacing
  // misses it by 4%, 4 MiB by 45%. Caches that start in the small pool (<= 1 MiB per tensor) pack
  // into 2 MiB segments whose layout changes every few steps, so they get at least 32 replayed
  // steps; caches in the large pool at least 8 (16 gives the same figures on those requests).
  // At most 4096 steps are replayed.
  const i64 steps = n - 1;
  const u64 growth = r.serving == serving_kind::paged ? 0 : kv_tok * static_cast<u64>(b);
  constexpr u64 k_spacing = 128ull << 10;
  const auto wanted = static_cast<i64>(
      (static_cast<u64>(std::max<i64>(steps, 0)) * growth + k_spacing - 1) / k_spacing);
  const bool small_pool_cache = growth != 0 && growth * static_cast<u64>(p) <= (1ull << 20);
  const i64 replay = std::min<i64>(steps, std::clamp<i64>(wanted, small_pool_cache ? 32 : 8, 4096));
  for (i64 k = 1; k <= replay; ++k) {
    const i64 i = replay == steps ? k : (k * steps + replay - 1) / replay;
    w.step_ = static_cast<int>(std::min<i64>(i, 32000));
    forward(1, p + i - 1);
  }
  w.step_ = 0;
}

}  // namespace

void build_schedule(const model_description& m, const plan_request& r, schedule& s,
                    schedule_observer* observer) {
  s.tensors.clear();
  s.events.clear();
  s.steps = 0;
  // About 60 tensors per transformer layer and step; reserving avoids regrowth.
  const std::size_t guess =
      64 * static_cast<std::size_t>(m.is_vision() ? 64 : m.t.layers + 4) * (r.steps + 1);
  s.tensors.reserve(guess);
  s.events.reserve(2 * guess);
  walker w(m, r, s);
  w.tensor_meta_.reserve(guess);
  w.nodes_.reserve(guess / 2);
  setup_params(w);
  const auto params = parameter_tensors(m);
  const int n = static_cast<int>(params.size());
  // Weights on this GPU: ZeRO-3 shards them (the gathered layer is a transient, below);
  // pipeline stages hold their layers only.
  const double pshard = r.mode == run_mode::train ? shard(3, r) : 1.0;
  const i64 layers_here = m.is_vision() ? 1 << 30 : m.t.layers / r.pp;
  w.phase_ = phase::setup;
  for (int i = 0; i < n; ++i) {
    if (!m.is_vision() && params[i].layer >= layers_here) {
      w.param_elems_[i] = 0;
    }
    u64 bytes;
    if (r.mode == run_mode::infer) {
      bytes = weight_bytes_quant(w, i, params[i]);
    } else if (r.offload == offload_kind::params) {
      bytes = 0;
    } else {
      bytes = static_cast<u64>(std::ceil(static_cast<double>(w.param_elems_[i]) * pshard)) *
              static_cast<u64>(w.dt_.param);
    }
    w.param_tensor_[i] = w.alloc(bytes, component::weights, "weights");
  }
  if (const u64 buf = buffer_bytes(m)) w.alloc(buf, component::weights, "buffers");
  w.alloc(k_cublas_workspace, component::workspace, "cuBLAS workspace");
  if (r.mode == run_mode::infer) {
    if (m.is_vision()) {
      // Vision inference: the forward without saving, batch as given.
      w.grad_on_ = false;
      plan_request rr = r;
      walker& ww = w;
      (void)rr;
      ww.phase_ = phase::forward;
      if (m.family == model_family::resnet)
        w.unref(resnet_forward_loss(w));
      else
        w.unref(vit_forward_loss(w));
    } else {
      generate(w);
    }
    s.steps = 1;
    return;
  }
  w.layer_forward_ = &transformer_block;
  const i64 accum = (r.batch / r.data_parallel()) / r.micro_batch;
  const int dp = r.data_parallel();
  u64 total_elems = 0, largest_layer = 0;
  {
    std::vector<u64> per_layer;
    for (int i = 0; i < n; ++i) {
      total_elems += w.param_elems_[i];
      if (params[i].layer >= 0) {
        if (per_layer.size() <= static_cast<std::size_t>(params[i].layer))
          per_layer.resize(params[i].layer + 1, 0);
        per_layer[params[i].layer] += w.param_elems_[i];
      }
    }
    for (u64 v : per_layer) largest_layer = std::max(largest_layer, v);
  }
  const u64 ddp_buckets = (dp > 1 && r.zero == 0) ? total_elems * static_cast<u64>(w.dt_.param) : 0;
  // DeepSpeed's default reduce_bucket_size is 5e8 elements (2-byte gradients).
  const u64 zero_bucket =
      (dp > 1 && r.zero >= 1) ? std::min<u64>(total_elems, 500000000ull) * 2 : 0;
  // ZeRO-3 / FSDP: the current and the prefetched layer are gathered in full.
  const u64 zero3_gather =
      (dp > 1 && r.zero >= 3) ? 2 * largest_layer * static_cast<u64>(w.dt_.param) : 0;
  int ddp_bucket_tensor = k_none;
  // 1F1B pipeline: the first stage holds min(pp, micro-batches) forwards before their backwards.
  const i64 inflight = std::max<i64>(1, std::min<i64>(r.pp, accum));
  const i64 groups = (accum + inflight - 1) / inflight;
  const bool partial_last = accum % inflight != 0;
  for (int step = 0; step < r.steps; ++step) {
    w.step_ = step;
    for (i64 g = 0; g < groups; ++g) {
      const i64 mb = g * inflight;
      std::vector<int> losses;
      const int gathered = zero3_gather
                               ? w.alloc(zero3_gather, component::weights, "ZeRO-3 gathered layers")
                               : k_none;
      for (i64 k = 0; k < inflight && mb + k < accum; ++k) {
        switch (m.family) {
          case model_family::resnet:
            losses.push_back(resnet_forward_loss(w));
            break;
          case model_family::vit:
            losses.push_back(vit_forward_loss(w));
            break;
          default:
            losses.push_back(lm_forward_loss(w));
            break;
        }
      }
      // Communication buffers live through backward: DDP copies gradients into buckets
      // covering all parameters (gradient_as_bucket_view=False); ZeRO reduces through one
      // bucket of reduce_bucket_size elements.
      if (ddp_buckets && ddp_bucket_tensor == k_none)
        ddp_bucket_tensor = w.alloc(ddp_buckets, component::gradients, "DDP gradient buckets");
      const int bucket =
          zero_bucket ? w.alloc(zero_bucket, component::temporaries, "ZeRO reduce bucket") : k_none;
      w.backward(losses);
      if (bucket != k_none) w.unref(bucket);
      if (gathered != k_none) w.unref(gathered);
      for (int loss : losses) w.unref(loss);
      // Groups after the first repeat the same events (gradients exist and accumulate) unless
      // the last one is partial.
      const bool full = !(partial_last && g == groups - 1);
      if (observer != nullptr && g + 1 < groups && observer->repeat_point(s, 1, g >= 1 && full)) {
        g = partial_last ? groups - 2 : groups - 1;  // on to the partial group, or done
      }
    }
    // ZeRO-2/3: gradients are reduce-scattered; each rank keeps its shard (modelled as the
    // full gradients shrinking to the shard after backward).
    optimizer_step(w);
    // zero_grad(set_to_none=True)
    for (int i = 0; i < n; ++i) {
      if (w.param_grad_[i] != k_none) {
        w.unref(w.param_grad_[i]);
        w.param_grad_[i] = k_none;
      }
    }
    // Steps after the first repeat the same events (optimizer states exist).
    if (observer != nullptr && step + 1 < r.steps && observer->repeat_point(s, 0, step >= 1)) break;
  }
  s.steps = r.steps;
}

schedule build_schedule(const model_description& m, const plan_request& r) {
  schedule s;
  build_schedule(m, r, s, nullptr);
  return s;
}

}  // namespace vramkit::plan
