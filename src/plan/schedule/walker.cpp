// The walker's bookkeeping: tensors and their references, autograd nodes, the reverse walk of
// backward with its gradient accumulation rules, parameter gradients and autocast weight casts.
#include "walker.hpp"

#include "ops.hpp"
#include "steps.hpp"

#include <algorithm>
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
  if (r.mode == run_mode::train && r.lora_rank > 0) {
    // A frozen base needs no fp32 master: it is stored in the compute dtype; autocast only
    // changes the adapters' GEMMs.
    if (r.prec == precision::fp32) return {4, 4, 4, false, 4, false};
    dtypes d{2, 2, 2, false, 2, false};
    d.lora_autocast = r.prec == precision::amp_bf16 || r.prec == precision::amp_fp16;
    return d;
  }
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
  // Built in place (a node is about 200 bytes) and dropped again when nothing needs a gradient.
  node& n = nodes_.emplace_back();
  n.out = out;
  for (const auto& e : edges)
    if (requires_grad(e.id)) n.edges.push_back(e);
  for (int p : params) {
    if (trainable_[p] == 0) continue;
    n.params.push_back(p);
    n.param_bytes.push_back(param_elems_[p]);
    n.param_cast.push_back(cast_of_[p] != -1);
  }
  if (n.edges.empty() && n.params.empty()) {
    nodes_.pop_back();
    return;
  }
  for (const auto& t : saved) {
    if (t.id < 0) continue;
    retain(t.id);
    n.saved.push_back(t.id);
  }
  n.workspace = workspace;
  meta_[out].producer = static_cast<int>(nodes_.size() - 1);
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
  if (requires_grad(x.id())) n.edges.push_back(edge{x, 0, true});
  retain(x.id());
  n.saved.push_back(x.id());
  n.ckpt_layer = layer;
  n.ckpt_input = x.id();
  meta_[out.id()].producer = static_cast<int>(nodes_.size());
  nodes_.push_back(n);
}

u64 walker::grad_bytes(int p, u64 elems) const {
  // ZeRO-2/3 keep only this rank's shard of each gradient after the reduce-scatter.
  const double gs = r_.zero >= 2 ? 1.0 / r_.data_parallel() : 1.0;
  return static_cast<u64>(std::ceil(static_cast<double>(elems) * gs)) *
         static_cast<u64>(param_width_[p]);
}

void walker::param_grad(int p, u64 elems, bool cast) {
  // The autocast copy's 16-bit gradient is cast to the fp32 weight's; it is freed after the
  // cast's result exists.
  const int low = cast ? new_tensor(elems * static_cast<u64>(dt_.low),
                                    component::activation_gradients, "weight grad (low precision)")
                       : -1;
  param_grad_fp32(p, grad_bytes(p, elems));
  release(low);
}

void walker::flush_weight_casts() {
  for (const auto& c : pending_casts_) {
    param_grad_fp32(c.param, grad_bytes(c.param, c.elems));
    release(c.low);
  }
  pending_casts_.clear();
  pending_wait_ = -1;
}

void walker::param_grad_fp32(int p, u64 full) {
  if (r_.offload != offload_kind::none) {
    // ZeRO-Offload: each gradient is reduced into the reduce bucket and copied to pinned host
    // buffers as soon as it is produced; no .grad stays on the device.
    transient(full, component::activation_gradients, "gradient (streamed to host)");
    return;
  }
  if (r_.optimizer_in_backward) {
    // The post-accumulate-grad hook steps this parameter and sets its .grad to None.
    const int g = new_tensor(full, component::gradients, "parameter gradient (stepped at once)");
    const phase here = phase_;
    optimizer_param_step(*this, p);
    phase_ = here;
    release(g);
    return;
  }
  if (param_grad_[p] == -1) {
    // AccumulateGrad steals the freshly computed gradient as .grad.
    param_grad_[p] = new_tensor(full, component::gradients, "parameter gradient");
  } else if (p == lm_.embed && lm_.head < 0 && !dt_.amp) {
    // A tied embedding whose head is a matmul on the weight itself (no autocast; biased or not):
    // the head's weight gradient and the lookup's meet in the engine's input buffer, which adds
    // them out of place, so the lookup's gradient and the sum are live with the head's gradient
    // until both are dropped (H200 allocator traces of bf16 Falcon-7B and Qwen2-0.5B training and
    // run R's of BERT-base fp32 training, every step: head gradient, lookup gradient, sum, two
    // frees). Under autocast the head's gradient reaches the fp32 weight through the cast's
    // backward, a fresh tensor the buffer adds into in place (Gemma-2, BERT and RoBERTa amp).
    const int lookup = new_tensor(full, component::activation_gradients, "lookup gradient");
    const int sum = new_tensor(full, component::gradients, "parameter gradient");
    release(lookup);
    release(param_grad_[p]);
    param_grad_[p] = sum;
  } else {
    transient(full, component::activation_gradients, "gradient to accumulate");
  }
}

const std::vector<std::int64_t>* walker::next_expert_load() {
  const auto& load = r_.expert_load;
  if (load.empty()) return nullptr;
  const auto l = static_cast<std::size_t>(std::max(layer_, 0));
  if (expert_load_of_.size() <= l) expert_load_of_.resize(l + 1, 0);
  if (!recomputing_) expert_load_of_[l] = expert_forwards_++ % load.size();
  return &load[expert_load_of_[l]];
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

void walker::mark_blas(const tensor& out) {
  const int producer = meta_[out.id()].producer;
  if (producer != -1) nodes_[producer].blas = true;
}

void walker::gemm_backward(const node& n, int g_out) {
  // The order of a linear's gradients follows its op (H200 allocator traces): a bias-free one is
  // a matrix product whose backward makes the weight's gradient first (Llama amp training: the
  // head's 16-bit weight gradient precedes the first GEMM's cuBLAS workspace and the input
  // gradient); a biased one is addmm, whose backward makes the input's first (BERT fp32 and amp
  // training: the decoder's input gradient, the workspace, then its weight gradient). Under
  // autocast the weight's gradient reaches the fp32 parameter through the cast's own backward
  // node, which the engine runs by sequence number: after the backward of the input's autocast
  // cast (made after the weight's cast), else next (both traces: fp32 input gradient, then the
  // fp32 weight gradient, each followed by the free of its 16-bit one).
  const auto weights = [&] {
    for (std::size_t k = 0; k < n.params.size(); ++k) {
      if (!n.param_cast[k]) {
        param_grad(n.params[k], n.param_bytes[k], false);
        continue;
      }
      const int low = new_tensor(n.param_bytes[k] * static_cast<u64>(dt_.low),
                                 component::activation_gradients, "weight grad (low precision)");
      pending_casts_.push_back({n.params[k], n.param_bytes[k], low});
    }
  };
  if (!n.biased) weights();
  for (const auto& e : n.edges) input_gradient(e, g_out);
  if (n.biased) weights();
  if (!pending_casts_.empty() && !n.edges.empty()) {
    const int prev = static_cast<int>(nodes_.size()) - 1;
    const int in = n.edges[0].id;
    if (prev >= 0 && meta_[in].producer == prev && nodes_[prev].autocast_input)
      pending_wait_ = nodes_[prev].out;
  }
}

void walker::node_backward(const node& n, int g_out) {
  if (n.blas && !backward_workspace_) {
    // The autograd engine runs backward on its own thread, which gets its own cuBLAS handle and
    // so its own workspace, at its first matrix product: after the loss's elementwise backward
    // (traces of Falcon-7B training, H200, torch 2.11: the 32 MiB block follows the logits'
    // gradients).
    backward_workspace_ = true;
    keep(k_cublas_workspace, component::workspace, "cuBLAS workspace (autograd thread)");
  }
  // Kernel workspace (flash dq accumulator, cuDNN algorithm workspace) lives while the input
  // and weight gradients are produced.
  const int ws =
      n.workspace ? new_tensor(n.workspace, component::workspace, "backward workspace") : -1;
  if (n.blas && !n.expert) {
    gemm_backward(n, g_out);
  } else {
    for (const auto& e : n.edges) input_gradient(e, g_out);
    for (std::size_t k = 0; k < n.params.size(); ++k)
      param_grad(n.params[k], n.param_bytes[k], n.param_cast[k]);
  }
  release(ws);
  meta_[n.out].grad = -1;
  release(g_out);
}

void walker::run_nodes_backward(std::size_t first) {
  for (std::size_t i = nodes_.size(); i-- > first;) {
    const node n = nodes_[i];
    nodes_.pop_back();
    const int g_out = meta_[n.out].grad;
    const bool had = !pending_casts_.empty();
    if (g_out != -1) {
      if (n.ckpt_layer >= 0)
        rerun_checkpointed(n, g_out);
      else
        node_backward(n, g_out);
    }
    for (int t : n.saved) release(t);
    // The weight casts' backward: after this node unless it made them and waits for the
    // backward of its input's cast (the node just below it).
    if (!pending_casts_.empty() && (had || pending_wait_ == -1 || n.out == pending_wait_))
      flush_weight_casts();
  }
  flush_weight_casts();
}

void walker::backward(const std::vector<tensor>& losses) {
  phase_ = phase::backward;
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
  bias_of_.assign(n, -1);
  cast_of_.assign(n, -1);
  param_grad_.assign(n, -1);
  state_[0].assign(n, -1);
  state_[1].assign(n, -1);
  param_elems_.resize(n);
  trainable_.assign(n, r_.mode == run_mode::train && r_.lora_rank == 0 ? 1 : 0);
  param_width_.assign(n, static_cast<std::uint8_t>(dt_.param));
  nf4_.assign(n, 0);
  model_params_ = n;
  const int tp = r_.tp;
  const int ep = r_.ep;
  layer_params_.assign(static_cast<std::size_t>(std::max<i64>(0, m_.t.layers)), layer_params{});
  for (int i = 0; i < n; ++i) {
    // Tensor parallel splits the layer matrices (not norms, not the MoE router and shared-expert
    // gate) and the vocabulary; expert parallel splits the routed experts.
    const auto& nm = params[i].name;
    i64 e = params[i].elements;
    const bool replicated =
        nm.find("norm") != std::string::npos || nm == "moe_router" || nm == "moe_shared_gate";
    if (tp > 1 && params[i].layer >= 0 && !replicated) e /= tp;
    if (tp > 1 && (nm == "embed_tokens" || nm == "lm_head")) e /= tp;
    if (ep > 1 && nm.rfind("moe_experts", 0) == 0) e /= ep;
    param_elems_[i] = static_cast<u64>(e);
    // QLoRA: bitsandbytes quantises the blocks' linear weights to NF4; norms, embeddings and
    // the head stay in the compute dtype.
    const bool bias = is_bias_parameter(nm);
    if (bias && i > 0 && nm == params[i - 1].name + "_bias") bias_of_[i - 1] = i;
    if (r_.mode == run_mode::train && r_.quant == quant_kind::nf4 && params[i].layer >= 0 &&
        nm.find("norm") == std::string::npos && !bias)
      nf4_[i] = 1;
    if (params[i].layer < 0 || params[i].layer >= static_cast<int>(layer_params_.size())) continue;
    auto& lp = layer_params_[static_cast<std::size_t>(params[i].layer)];
    int* slot =
        nm == "attn_norm"                                                        ? &lp.attn_norm
        : nm == "attn_qkv" || nm == "attn_q" || nm == "mla_q" || nm == "mla_q_b" ? &lp.qkv
        : nm == "attn_k"                                                         ? &lp.k
        : nm == "attn_v"                                                         ? &lp.v
        : nm == "mlp_up_proj"                                                    ? &lp.mlp_up
        : nm == "attn_qk_norm"                                                   ? &lp.qk_norm
        : nm == "attn_out"                                                       ? &lp.attn_out
        : nm == "mlp_norm"                                                       ? &lp.mlp_norm
        : nm == "post_attn_norm" ? &lp.post_attn_norm
        : nm == "rel_bias"       ? &lp.rel_bias
        : nm == "cross_q"        ? &lp.cross_q
        : nm == "cross_kv"       ? &lp.cross_kv
        : nm == "cross_out"      ? &lp.cross_out
        : nm == "cross_norm"     ? &lp.cross_norm
        : nm == "post_mlp_norm"  ? &lp.post_mlp_norm
        : nm == "mlp_gate_up" || nm == "mlp_gate" || nm == "mlp_up" || nm == "moe_experts_gate_up"
            ? &lp.mlp_in
        : nm == "mlp_down" || nm == "moe_experts_down" ? &lp.mlp_down
        : nm == "moe_router"                           ? &lp.router
        : nm == "moe_shared_gate_proj"                 ? &lp.shared_in
        : nm == "moe_shared_up_proj"                   ? &lp.shared_up
        : nm == "moe_shared_down"                      ? &lp.shared_down
        : nm == "moe_shared_gate"                      ? &lp.shared_gate
        : nm == "mla_q_a"                              ? &lp.q_a
        : nm == "mla_q_a_norm"                         ? &lp.q_a_norm
        : nm == "mla_kv_a"                             ? &lp.kv_a
        : nm == "mla_kv_a_norm"                        ? &lp.kv_a_norm
        : nm == "mla_kv_b"                             ? &lp.kv_b
                                                       : nullptr;
    if (slot != nullptr) *slot = i;
  }
  lm_ = lm_params{};
  for (int i = 0; i < n; ++i) {
    if (params[i].layer >= 0 && params[i].name != "enc_final_norm") continue;
    const auto& nm = params[i].name;
    int* slot = nm == "embed_tokens"          ? &lm_.embed
                : nm == "embed_positions"     ? &lm_.pos
                : nm == "embed_token_types"   ? &lm_.types
                : nm == "embed_norm"          ? &lm_.embed_norm
                : nm == "final_norm"          ? &lm_.final_norm
                : nm == "lm_head"             ? &lm_.head
                : nm == "head_transform"      ? &lm_.head_transform
                : nm == "head_transform_norm" ? &lm_.head_transform_norm
                : nm == "head_bias"           ? &lm_.head_bias
                : nm == "cls_token"           ? &lm_.cls_token
                : nm == "patch_embed"         ? &lm_.patch_embed
                : nm == "classifier"          ? &lm_.classifier
                : nm == "enc_final_norm"      ? &lm_.enc_final_norm
                : nm == "vision_tower"        ? &lm_.vision_tower
                : nm == "projector_1"         ? &lm_.projector_1
                : nm == "projector_2"         ? &lm_.projector_2
                                              : nullptr;
    if (slot != nullptr) *slot = i;
  }
  // LLaVA's recipes train the projector and the language model; the vision tower stays frozen.
  if (lm_.vision_tower >= 0) trainable_[lm_.vision_tower] = 0;
  if (r_.mode == run_mode::train && r_.lora_rank > 0) add_lora_params();
  s_.trainable_parameters = idle_adapter_elems_;
  for (int i = 0; i < param_count(); ++i)
    if (trainable_[i] != 0) s_.trainable_parameters += param_elems_[i];
}

namespace {

/// One module LoRA may adapt: the target bits it answers to and its shape.
struct lora_shape {
  std::uint8_t mask;
  i64 in, out;
};

/// The adaptable linear modules of layer l, in forward order: separate or packed q/k/v, the
/// output projection, and the dense MLP's gate/up/down (MoE experts are 3-D parameters, not
/// Linear modules, and are not adapted).
std::vector<lora_shape> lora_shapes(const model_description& m, int l) {
  const auto& t = m.t;
  const i64 h = t.hidden, q = t.heads * t.head_dim, kv = t.kv_heads * t.head_dim,
            f = t.intermediate;
  std::vector<lora_shape> v;
  const bool packed_qkv = m.family == model_family::gpt2 || m.family == model_family::gpt_neox ||
                          m.family == model_family::falcon || m.family == model_family::phi3;
  if (packed_qkv) {
    v.push_back({lora_target::q | lora_target::k | lora_target::v, h, q + 2 * kv});
  } else {
    v.push_back({lora_target::q, h, q});
    v.push_back({lora_target::k, h, kv});
    v.push_back({lora_target::v, h, kv});
  }
  v.push_back({lora_target::o, q, h});
  if (t.sparse(l)) return v;
  if (t.mlp == mlp_kind::swiglu) {
    v.push_back({lora_target::gate, h, f});
    v.push_back({lora_target::up, h, f});
  } else if (t.mlp == mlp_kind::swiglu_packed) {
    v.push_back({lora_target::gate | lora_target::up, h, 2 * f});
  } else {
    v.push_back({lora_target::up, h, f});
  }
  v.push_back({lora_target::down, f, h});
  return v;
}

}  // namespace

void walker::add_lora_params() {
  const auto layers = static_cast<std::size_t>(std::max<i64>(0, m_.t.layers));
  lora_.assign(layers, {});
  const auto r = static_cast<u64>(r_.lora_rank);
  auto add = [&](u64 elems, int layer) {
    param_elems_.push_back(elems);
    param_tensor_.push_back(-1);
    cast_of_.push_back(-1);
    param_grad_.push_back(-1);
    state_[0].push_back(-1);
    state_[1].push_back(-1);
    trainable_.push_back(1);
    param_width_.push_back(4);  // PEFT upcasts 16-bit adapters to fp32
    nf4_.push_back(0);
    (void)layer;
  };
  for (std::size_t l = 0; l < layers; ++l) {
    for (const auto& sh : lora_shapes(m_, static_cast<int>(l))) {
      if ((sh.mask & r_.lora_targets) == 0) continue;
      lora_[l].push_back({sh.mask, param_count()});
      add(r * static_cast<u64>(sh.in), static_cast<int>(l));   // lora_A (r, in)
      add(static_cast<u64>(sh.out) * r, static_cast<int>(l));  // lora_B (out, r)
    }
  }
  // PEFT matches target modules by name, so Gemma-3's vision tower gets adapters on its q_proj,
  // k_proj and v_proj too: held and counted as trainable, never given a gradient by a text batch
  // (so no optimizer state either).
  if (m_.idle_vision_parameters <= 0) return;
  const auto vh = static_cast<u64>(m_.vit.hidden);
  for (i64 l = 0; l < m_.vit.layers; ++l) {
    for (const std::uint8_t bit : {lora_target::q, lora_target::k, lora_target::v}) {
      if ((bit & r_.lora_targets) == 0) continue;
      for (int half = 0; half < 2; ++half) {
        add(r * vh, -1);
        trainable_.back() = 0;
        idle_adapter_elems_ += r * vh;
      }
    }
  }
}

void walker::place_adapters() {
  for (int i = model_params_; i < param_count(); ++i)
    param_tensor_[i] = keep(param_elems_[i] * 4, component::weights, "LoRA adapter weights");
}

layer_params walker::layer_param(int layer) const {
  return layer_params_[static_cast<std::size_t>(layer)];
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
    if (meta_[c.id()].producer >= 0) nodes_[meta_[c.id()].producer].autocast_input = true;
    return c;
  }
  return x;
}

tensor walker::linear(const tensor& x, i64 rows, i64 in, i64 out, int p, int x_elem_bytes,
                      const char* label, component c) {
  // Autocast's wrapper casts the arguments of F.linear(input, weight, bias) as one call's
  // arguments, which GCC evaluates right to left: the bias's cast, the weight's, then the input's
  // (H200 allocator traces of Llama and BERT amp training: 2 KiB bias cast, 2 MiB weight cast,
  // 8 MiB input cast).
  const int b = bias_of_[p];
  const tensor bc = b >= 0 ? weight(b) : tensor{};
  const tensor w = weight(p);
  const tensor xin = gemm_input(x, rows * in, x_elem_bytes);
  const edge e{xin, static_cast<u64>(rows * in) * (dt_.amp ? dt_.low : x_elem_bytes)};
  // Autograd saves the input only for the weight's gradient: a frozen weight keeps nothing of x.
  const u64 yb = static_cast<u64>(rows * out) * dt_.low;
  tensor y = trainable_[p] == 0 ? op(yb, label, {e}, {w}, {}, 0, c)
             : b >= 0           ? op(yb, label, {e}, {xin, w}, {p, b}, 0, c)
                                : op(yb, label, {e}, {xin, w}, {p}, 0, c);
  mark_blas(y);
  // A biased linear is addmm (its backward order differs: gemm_backward); so is a parameter
  // listed with its bias in one tensor (torchvision's ViT).
  if (const int producer = meta_[y.id()].producer;
      producer != -1 && (b >= 0 || param_elems_[p] > static_cast<u64>(in * out)))
    nodes_[producer].biased = true;
  return y;
}

tensor walker::base_linear(const tensor& x, i64 rows, i64 in, i64 out, int p, int x_elem_bytes,
                           const char* label, component c) {
  if (nf4_[p] == 0) return linear(x, rows, in, out, p, x_elem_bytes, label, c);
  // bitsandbytes MatMul4Bit: dequantize_4bit makes the fp32 absmax of the double-quantised
  // blocks, then the 16-bit weight; F.linear; the weight dies with the expression. Only the
  // packed weight is saved; backward dequantises again for the input gradient.
  const u64 n = static_cast<u64>(in * out);
  const u64 wbytes = n * static_cast<u64>(dt_.low);
  tensor absmax = alloc(n / 64 * 4, component::temporaries, "nf4 absmax (dequantised)");
  tensor wt = alloc(wbytes, component::temporaries, "nf4 weight (dequantised)");
  absmax.reset();
  tensor y = op(static_cast<u64>(rows * out) * dt_.low, label,
                {edge{x, static_cast<u64>(rows * in) * x_elem_bytes}}, {}, {}, wbytes, c);
  mark_blas(y);
  wt.reset();
  return y;
}

tensor walker::cached_cast(int p, int width) {
  if (cast_of_[p] == -1) {
    cast_of_[p] = new_tensor(param_elems_[p] * static_cast<u64>(width),
                             component::autocast_weight_cache, "weight cast");
    cache_.push_back(p);
  }
  retain(cast_of_[p]);
  return adopt(cast_of_[p]);
}

tensor walker::lora_branch(const tensor& x, tensor result, i64 rows, i64 in, i64 out, int a,
                           int x_elem_bytes) {
  const int b = a + 1;
  const u64 r = static_cast<u64>(r_.lora_rank);
  const u64 nx = static_cast<u64>(rows * in), ny = static_cast<u64>(rows * out);
  const u64 nr = static_cast<u64>(rows) * r;
  const int low = dt_.low;
  const bool qlora = r_.quant == quant_kind::nf4;
  const bool ac = dt_.lora_autocast;
  // PEFT's bnb wrapper clones the base output first.
  if (qlora) result = op(ny * low, "lora base output clone", {edge{result, ny * low, true}}, {});
  // _cast_input_dtype: x to the adapters' fp32 (the bnb wrapper skips it under autocast).
  tensor xa = x;
  int xab = x_elem_bytes;
  if (x_elem_bytes != 4 && !(qlora && ac)) {
    xa = op(nx * 4, "lora input fp32", {edge{x, nx * x_elem_bytes}}, {});
    xab = 4;
  }
  if (r_.lora_dropout > 0) xa = dropout(*this, xa, nx, xab, r_.lora_dropout, "lora dropout");
  tensor ya;
  tensor yb;
  int yw = 4;
  if (ac) {
    // Autocast: the fp32 input is cast afresh for the GEMM, the adapters' casts are cached.
    yw = low;
    const tensor ca = cached_cast(a, low);  // the weight's cast first (see linear)
    const tensor xc = xab == 4 ? op(nx * low, "autocast input cast", {edge{xa, nx * 4}}, {}) : xa;
    ya = op(nr * low, "lora_A", {edge{xc, nx * low}}, {xc, ca}, {a});
    const tensor cb = cached_cast(b, low);
    yb = op(ny * low, "lora_B", {edge{ya, nr * low}}, {ya, cb}, {b});
  } else {
    const tensor wa = weight(a);
    ya = op(nr * 4, "lora_A", {edge{xa, nx * xab}}, {xa, wa}, {a});
    const tensor wb = weight(b);
    yb = op(ny * 4, "lora_B", {edge{ya, nr * 4}}, {ya, wb}, {b});
  }
  ya.reset();
  tensor sc = op(ny * yw, "lora scaling", {edge{yb, ny * yw}}, {});
  yb.reset();
  if (qlora && !ac && yw != low) {
    // The bnb wrapper casts the adapter output back before the sum.
    sc = op(ny * low, "lora output cast", {edge{sc, ny * yw}}, {});
    yw = low;
  }
  const int sw = std::max(low, yw);
  tensor sum =
      op(ny * sw, "lora sum", {edge{result, ny * low, low == sw}, edge{sc, ny * yw, yw == sw}}, {});
  sc.reset();
  result.reset();
  if (sw != low) sum = op(ny * low, "lora output", {edge{sum, ny * sw}}, {});
  xa.reset();  // the forward's local x (the fp32 copy) dies when it returns
  return sum;
}

tensor walker::proj(const tensor& x, i64 rows, i64 in, i64 out, int p, int x_elem_bytes,
                    const char* label, std::uint8_t target, component c) {
  tensor y = base_linear(x, rows, in, out, p, x_elem_bytes, label, c);
  if (lora_.empty() || layer_ < 0 || static_cast<std::size_t>(layer_) >= lora_.size()) return y;
  for (const auto& mod : lora_[static_cast<std::size_t>(layer_)])
    if ((mod.mask & target) != 0)
      return lora_branch(x, std::move(y), rows, in, out, mod.a, x_elem_bytes);
  return y;
}

tensor walker::expert_linear(const tensor& x, i64 rows, i64 in, i64 out, int p, int x_elem_bytes,
                             const char* label) {
  // The slice's cast is made before the input's (see linear).
  const u64 slice = static_cast<u64>(in * out);
  tensor wt;
  if (dt_.amp)
    wt = alloc(slice * static_cast<u64>(dt_.cast), component::autocast_weight_cache,
               "expert weight cast");
  else
    wt = weight(p);
  const tensor xin = gemm_input(x, rows * in, x_elem_bytes);
  // The slice's gradient (and its fp32 copy through the cast under autocast) lives while the
  // select's backward scatters it into the zero-filled whole-parameter gradient.
  const u64 ws = slice * static_cast<u64>(dt_.low + (dt_.amp ? 4 : 0));
  tensor y = op(static_cast<u64>(rows * out) * dt_.low, label,
                {edge{xin, static_cast<u64>(rows * in) * (dt_.amp ? dt_.low : x_elem_bytes)}},
                {xin, wt}, {p}, ws);
  mark_blas(y);
  if (const int producer = meta_[y.id()].producer; producer != -1) nodes_[producer].expert = true;
  return y;
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
