// The walker's bookkeeping: tensors and their references, autograd nodes, the reverse walk of
// backward with its gradient accumulation rules, parameter gradients and autocast weight casts.
#include "walker.hpp"

#include <cmath>

#include "vramkit/core/error.hpp"

namespace vramkit::plan::detail {

namespace {

/// cuBLAS workspace of the autograd thread's handle (see build_schedule for the forward one).
constexpr u64 k_cublas_workspace = 32ull << 20;

/// Bookkeeping a walker hands back to its thread for the next plan: a plan fills megabytes of
/// it, and fresh pages each time cost more than the bookkeeping itself.
template <typename Meta, typename Node>
struct storage {
  std::vector<Meta> meta;
  std::vector<Node> nodes;
};

template <typename Meta, typename Node>
storage<Meta, Node>& thread_storage() {
  thread_local storage<Meta, Node> st;
  return st;
}

dtypes dtypes_of(const plan_request& r) {
  if (r.mode == run_mode::infer)
    return r.prec == precision::fp32 ? dtypes{4, 4, 4, false, 4} : dtypes{2, 2, 2, false, 2};
  switch (r.prec) {
    case precision::fp32:
    case precision::automatic:  // resolved by validate(); fp32 is its training meaning
      return {4, 4, 4, false, 4};
    case precision::amp_bf16:
    case precision::amp_fp16:
      return {4, 2, 4, true, 2};
    // Approximate (docs/plan.md): as amp-bf16, with the weight and GEMM-input casts in 1 byte.
    case precision::fp8:
      return {4, 2, 4, true, 1};
    case precision::bf16:
      return {2, 2, 2, false, 2};
  }
  return {};
}

}  // namespace

template <typename T, std::size_t N>
void walker::small_vec<T, N>::push_back(const T& v) {
  if (n_ == N) throw logic_error("plan walker: node capacity exceeded");
  a_[n_++] = v;
}

walker::walker(const model_description& m, const plan_request& r, schedule& s)
    : m_(m), r_(r), s_(s), dt_(dtypes_of(r)) {
  auto& st = thread_storage<tensor_meta, node>();
  meta_.swap(st.meta);
  nodes_.swap(st.nodes);
  meta_.clear();
  nodes_.clear();
  const std::size_t guess =
      64 * static_cast<std::size_t>(m.is_vision() ? 64 : m.t.layers + 4) * (r.steps + 1);
  meta_.reserve(guess);
  nodes_.reserve(guess / 2);
}

walker::~walker() {
  auto& st = thread_storage<tensor_meta, node>();
  meta_.swap(st.meta);
  nodes_.swap(st.nodes);
}

// ---- tensors ---------------------------------------------------------------------------------

int walker::new_tensor(u64 bytes, component c, const char* label) {
  const int id = static_cast<int>(s_.tensors.size());
  tensor_info ti;
  ti.bytes = bytes;
  ti.comp = c;
  ti.ph = phase_;
  ti.layer = static_cast<std::int16_t>(layer_);
  ti.step = static_cast<std::int16_t>(step_);
  ti.label = label;
  s_.tensors.push_back(ti);
  meta_.push_back({1, -1, -1});
  push_event(bytes, id, c, true);
  return id;
}

tensor walker::alloc(u64 bytes, component c, const char* label) {
  return adopt(new_tensor(bytes, c, label));
}

int walker::keep(u64 bytes, component c, const char* label) { return new_tensor(bytes, c, label); }

void walker::transient(u64 bytes, component c, const char* label) {
  if (bytes == 0) return;
  release(new_tensor(bytes, c, label));
}

void walker::push_event(u64 bytes, int t, component c, bool is_alloc) {
  s_.events.push_back({bytes, static_cast<std::uint32_t>(t), c, is_alloc});
}

void walker::release(int id) noexcept {
  if (id < 0) return;
  if (--meta_[id].refs == 0) push_event(s_.tensors[id].bytes, id, s_.tensors[id].comp, false);
}

// ---- autograd --------------------------------------------------------------------------------

tensor walker::op(u64 out_bytes, const char* label, std::initializer_list<edge> edges,
                  std::initializer_list<saved_ref> saved, std::initializer_list<int> params,
                  u64 workspace, component c) {
  tensor out = alloc(out_bytes, c, label);
  record(out.id(), edges, saved, params, workspace);
  return out;
}

void walker::record(int out, std::initializer_list<edge> edges,
                    std::initializer_list<saved_ref> saved, std::initializer_list<int> params,
                    u64 workspace) {
  if (!grad_on_) return;
  node n;
  n.out = out;
  for (const auto& e : edges)
    if (requires_grad(e.id)) n.edges.push_back(e);
  for (int p : params) {
    n.params.push_back(p);
    n.param_bytes.push_back(param_elems_[p]);
    n.param_cast.push_back(cast_of_[p] != -1 && dt_.amp);
  }
  if (n.edges.empty() && n.params.empty()) return;
  for (const auto& t : saved) {
    if (t.id < 0) continue;
    retain(t.id);
    n.saved.push_back(t.id);
  }
  n.workspace = workspace;
  meta_[out].producer = static_cast<int>(nodes_.size());
  nodes_.push_back(n);
}

void walker::save_output(const tensor& out) {
  const int producer = meta_[out.id()].producer;
  if (!grad_on_ || producer == -1) return;
  retain(out.id());
  nodes_[producer].saved.push_back(out.id());
}

void walker::checkpoint(const tensor& x, const tensor& out, int layer) {
  node n;
  n.out = out.id();
  n.edges.push_back(edge{x, 0, true});
  retain(x.id());
  n.saved.push_back(x.id());
  n.ckpt_layer = layer;
  n.ckpt_input = x.id();
  meta_[out.id()].producer = static_cast<int>(nodes_.size());
  nodes_.push_back(n);
}

void walker::param_grad(int p, u64 elems, bool cast) {
  // ZeRO-2/3 keep only this rank's shard of each gradient after the reduce-scatter.
  const double gs = r_.zero >= 2 ? 1.0 / r_.data_parallel() : 1.0;
  const u64 full =
      static_cast<u64>(std::ceil(static_cast<double>(elems) * gs)) * static_cast<u64>(dt_.param);
  if (cast)
    transient(elems * static_cast<u64>(dt_.low), component::activation_gradients,
              "weight grad (low precision)");
  if (r_.offload != offload_kind::none) {
    // ZeRO-Offload: each gradient is reduced into the reduce bucket and copied to pinned host
    // buffers as soon as it is produced; no .grad stays on the device.
    transient(full, component::activation_gradients, "gradient (streamed to host)");
    return;
  }
  if (param_grad_[p] == -1) {
    // AccumulateGrad steals the freshly computed gradient as .grad.
    param_grad_[p] = new_tensor(full, component::gradients, "parameter gradient");
  } else {
    transient(full, component::activation_gradients, "gradient to accumulate");
  }
}

void walker::rerun_checkpointed(const node& n, int g_out) {
  // Non-reentrant checkpoint: re-run the layer's forward with grad on, hand the layer output's
  // gradient to the recomputed output, and walk the recomputed nodes.
  const std::size_t mark = nodes_.size();
  const int saved_layer = layer_;
  const phase saved_phase = phase_;
  layer_ = n.ckpt_layer;
  recomputing_ = true;
  tensor x = adopt(n.ckpt_input);
  retain(n.ckpt_input);
  tensor y = layer_forward_(*this, x, n.ckpt_layer);
  clear_autocast_cache();
  recomputing_ = false;
  phase_ = saved_phase;
  meta_[y.id()].grad = g_out;
  meta_[n.out].grad = -1;
  y.reset();
  x.reset();
  run_nodes_backward(mark);
  layer_ = saved_layer;
}

void walker::input_gradient(const edge& e, int g_out) {
  const int t = e.id;
  if (e.passthrough) {
    if (meta_[t].grad == -1) {
      retain(g_out);
      meta_[t].grad = g_out;
    } else {
      // InputBuffer accumulation: the stored gradient is shared, so the sum is a new tensor.
      const int sum =
          new_tensor(e.grad_bytes, component::activation_gradients, "activation gradient");
      release(meta_[t].grad);
      meta_[t].grad = sum;
    }
    return;
  }
  const int g = new_tensor(e.grad_bytes, component::activation_gradients, "activation gradient");
  if (meta_[t].grad == -1) {
    meta_[t].grad = g;
  } else if (meta_[meta_[t].grad].refs == 1) {
    release(g);  // accumulated in place into the stored gradient
  } else {
    const int sum =
        new_tensor(e.grad_bytes, component::activation_gradients, "activation gradient");
    release(g);
    release(meta_[t].grad);
    meta_[t].grad = sum;
  }
}

void walker::node_backward(const node& n, int g_out) {
  // Kernel workspace (flash dq accumulator, cuDNN algorithm workspace) lives while the input
  // and weight gradients are produced.
  const int ws =
      n.workspace ? new_tensor(n.workspace, component::workspace, "backward workspace") : -1;
  for (const auto& e : n.edges) input_gradient(e, g_out);
  for (std::size_t k = 0; k < n.params.size(); ++k)
    param_grad(n.params[k], n.param_bytes[k], n.param_cast[k]);
  release(ws);
  meta_[n.out].grad = -1;
  release(g_out);
}

void walker::run_nodes_backward(std::size_t first) {
  for (std::size_t i = nodes_.size(); i-- > first;) {
    const node n = nodes_[i];
    nodes_.pop_back();
    const int g_out = meta_[n.out].grad;
    if (g_out != -1) {
      if (n.ckpt_layer >= 0)
        rerun_checkpointed(n, g_out);
      else
        node_backward(n, g_out);
    }
    for (int t : n.saved) release(t);
  }
}

void walker::backward(const std::vector<tensor>& losses) {
  phase_ = phase::backward;
  if (!backward_workspace_) {
    // The autograd engine runs backward on its own thread, which gets its own cuBLAS handle and
    // so its own workspace.
    backward_workspace_ = true;
    keep(k_cublas_workspace, component::workspace, "cuBLAS workspace (autograd thread)");
  }
  for (const auto& loss : losses)
    meta_[loss.id()].grad = new_tensor(4, component::activation_gradients, "loss gradient");
  run_nodes_backward(0);
  // Gradients of tensors without a producer node (inputs) are never created; any left are freed.
  for (auto& m : meta_) {
    if (m.grad != -1) {
      const int g = m.grad;
      m.grad = -1;
      release(g);
    }
  }
  layer_ = -1;
}

// ---- parameters ------------------------------------------------------------------------------

void walker::setup_params() {
  const auto params = parameter_tensors(m_);
  const int n = static_cast<int>(params.size());
  param_tensor_.assign(n, -1);
  cast_of_.assign(n, -1);
  param_grad_.assign(n, -1);
  state_[0].assign(n, -1);
  state_[1].assign(n, -1);
  param_elems_.resize(n);
  const int tp = r_.tp;
  int first_layer = -1;
  for (int i = 0; i < n; ++i) {
    // Tensor parallel splits the layer matrices (not norms) and the vocabulary.
    i64 e = params[i].elements;
    if (tp > 1 && params[i].layer >= 0 && params[i].name.find("norm") == std::string::npos) e /= tp;
    if (tp > 1 && (params[i].name == "embed_tokens" || params[i].name == "lm_head")) e /= tp;
    param_elems_[i] = static_cast<u64>(e);
    if (params[i].layer == 0 && first_layer < 0) first_layer = i;
  }
  lm_ = lm_params{};
  first_layer_param_ = first_layer < 0 ? 0 : first_layer;
  for (int i = 0; i < n; ++i) {
    if (params[i].layer >= 0) continue;
    const auto& nm = params[i].name;
    int* slot = nm == "embed_tokens"        ? &lm_.embed
                : nm == "embed_positions"   ? &lm_.pos
                : nm == "embed_token_types" ? &lm_.types
                : nm == "embed_norm"        ? &lm_.embed_norm
                : nm == "final_norm"        ? &lm_.final_norm
                : nm == "lm_head"           ? &lm_.head
                : nm == "head_transform"    ? &lm_.head_transform
                : nm == "head_bias"         ? &lm_.head_bias
                                            : nullptr;
    if (slot != nullptr) *slot = i;
  }
}

layer_params walker::layer_param(int layer) const {
  const int b = first_layer_param_ + layer * per_layer_;
  return {b, b + 1, b + 2, b + 3, b + 4, b + 5};
}

tensor walker::weight(int p) {
  if (!dt_.amp) {
    retain(param_tensor_[p]);
    return adopt(param_tensor_[p]);
  }
  if (cast_of_[p] == -1) {
    cast_of_[p] = new_tensor(param_elems_[p] * static_cast<u64>(dt_.cast),
                             component::autocast_weight_cache, "weight cast");
    cache_.push_back(p);
  }
  retain(cast_of_[p]);
  return adopt(cast_of_[p]);
}

void walker::clear_autocast_cache() {
  for (int p : cache_) {
    release(cast_of_[p]);
    cast_of_[p] = -1;
  }
  cache_.clear();
}

tensor walker::gemm_input(const tensor& x, i64 elems, int elem_bytes) {
  if (dt_.amp && elem_bytes == 4) {
    tensor c =
        alloc(static_cast<u64>(elems) * dt_.cast, component::activations, "autocast input cast");
    record(c.id(), {edge{x, static_cast<u64>(elems) * 4}}, {}, {}, 0);
    return c;
  }
  return x;
}

tensor walker::linear(const tensor& x, i64 rows, i64 in, i64 out, int p, int x_elem_bytes,
                      const char* label, component c) {
  const tensor xin = gemm_input(x, rows * in, x_elem_bytes);
  const tensor w = weight(p);
  return op(static_cast<u64>(rows * out) * dt_.low, label,
            {edge{xin, static_cast<u64>(rows * in) * (dt_.amp ? dt_.low : x_elem_bytes)}}, {xin, w},
            {p}, 0, c);
}

void walker::zero_grad() {
  for (int& g : param_grad_) {
    if (g != -1) {
      release(g);
      g = -1;
    }
  }
}

}  // namespace vramkit::plan::detail
