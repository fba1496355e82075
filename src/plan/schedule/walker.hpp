// The walker: records a step of tensor allocations and frees as PyTorch and autograd make them.
// Ops allocate their outputs through it and record autograd nodes (what is saved, which inputs
// and parameters receive gradients); backward() walks the nodes in reverse. Tensors are held
// through `tensor` handles that release their reference when they go out of scope.
// Single-threaded; one walker per build_schedule call.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "vramkit/plan/training_schedule.hpp"

namespace vramkit::plan::detail {

using i64 = std::int64_t;
using u64 = std::uint64_t;

class walker;

/// The autograd identity of a tensor without a reference to its storage: the output of an
/// in-place op, whose data lives in the tensor it modified.
struct view {
  int id = -1;
};

/// A reference to a walker tensor. Copying takes another reference, destruction or reset()
/// releases it; the tensor is freed (a free event) when its last reference goes. A default
/// handle holds nothing.
class tensor {
 public:
  tensor() noexcept = default;
  tensor(const tensor& o) noexcept;
  tensor(tensor&& o) noexcept : w_(o.w_), id_(o.id_) { o.w_ = nullptr; }
  tensor& operator=(tensor o) noexcept {
    swap(o);
    return *this;
  }
  ~tensor() { reset(); }

  /// Releases this reference now (the handle then holds nothing).
  void reset() noexcept;
  void swap(tensor& o) noexcept {
    std::swap(w_, o.w_);
    std::swap(id_, o.id_);
  }
  [[nodiscard]] bool empty() const noexcept { return w_ == nullptr; }
  [[nodiscard]] int id() const noexcept { return w_ == nullptr ? -1 : id_; }
  [[nodiscard]] view as_view() const noexcept { return {id()}; }

 private:
  friend class walker;
  tensor(walker* w, int id) noexcept : w_(w), id_(id) {}
  walker* w_ = nullptr;
  int id_ = -1;
};

/// A tensor named in an op's saved list (implicit from a handle; an empty handle is skipped).
struct saved_ref {
  saved_ref(const tensor& t) noexcept : id(t.id()) {}  // NOLINT(google-explicit-constructor)
  int id;
};

/// One gradient edge of an op: the input, the bytes of the gradient the op allocates for it,
/// and whether the op passes its output gradient through unchanged (adds, views).
struct edge {
  edge() = default;
  edge(const tensor& t, u64 grad, bool pass = false) noexcept
      : grad_bytes(grad), id(t.id()), passthrough(pass) {}
  edge(view v, u64 grad, bool pass = false) noexcept
      : grad_bytes(grad), id(v.id), passthrough(pass) {}
  u64 grad_bytes = 0;
  int id = -1;
  bool passthrough = false;
};

/// Byte widths of the precision regime.
struct dtypes {
  int param = 4;     ///< stored parameters (and their gradients, optimizer states follow them)
  int low = 4;       ///< GEMM/conv outputs and the casts autocast makes
  int act = 4;       ///< ops autocast keeps in fp32 (layer/RMS norm, softmax, pow, embedding) or,
                     ///< without autocast, the model dtype
  bool amp = false;  ///< autocast on: weight casts cached, fp32-list ops upcast
  int cast = 4;      ///< width of the weight and GEMM-input casts (1 for fp8, else = low)
  /// LoRA under autocast over a 16-bit frozen base (amp-bf16/amp-fp16 with --lora-rank): the
  /// base runs as pure 16-bit, the fp32 adapters' GEMMs are cast to 16 bits.
  bool lora_autocast = false;
};

/// Parameter indices of one transformer layer, by role (parameter_tensors order).
struct layer_params {
  int attn_norm = -1, qkv = -1, attn_out = -1, mlp_norm = -1, mlp_in = -1, mlp_down = -1;
  /// Separate key and value projections (q_proj, k_proj, v_proj modules: qkv holds the query
  /// alone) and a separate up projection (gate_proj, up_proj: mlp_in holds the gate).
  int k = -1, v = -1, mlp_up = -1;
  [[nodiscard]] int key() const noexcept { return k >= 0 ? k : qkv; }
  [[nodiscard]] int value() const noexcept { return v >= 0 ? v : qkv; }
  [[nodiscard]] int up() const noexcept { return mlp_up >= 0 ? mlp_up : mlp_in; }
  int qk_norm = -1;                             ///< Qwen3 / Gemma-3 per-head q/k norms
  int post_attn_norm = -1, post_mlp_norm = -1;  ///< Gemma's sandwich norms
  int rel_bias = -1, cross_q = -1, cross_kv = -1, cross_out = -1, cross_norm = -1;      ///< T5
  int router = -1, shared_in = -1, shared_up = -1, shared_down = -1, shared_gate = -1;  ///< MoE
  int q_a = -1, q_a_norm = -1, kv_a = -1, kv_a_norm = -1, kv_b = -1;  ///< latent attention
};

/// Parameter indices of a language model outside its layers (-1: the model has none).
struct lm_params {
  int embed = -1, pos = -1, types = -1, embed_norm = -1, final_norm = -1, head = -1,
      head_transform = -1, head_transform_norm = -1, head_bias = -1;
  int cls_token = -1, patch_embed = -1, classifier = -1;      ///< transformers' ViT
  int enc_final_norm = -1;                                    ///< T5's encoder
  int vision_tower = -1, projector_1 = -1, projector_2 = -1;  ///< LLaVA
};

/// Forward of one layer, re-run by backward for a checkpointed layer.
using layer_fn = tensor (*)(walker&, const tensor& x, int layer);

class walker {
 public:
  walker(const model_description& m, const plan_request& r, schedule& s);
  ~walker();
  walker(const walker&) = delete;
  walker& operator=(const walker&) = delete;

  [[nodiscard]] const model_description& model() const noexcept { return m_; }
  [[nodiscard]] const plan_request& request() const noexcept { return r_; }
  [[nodiscard]] const dtypes& dt() const noexcept { return dt_; }

  // ---- where the walk is (labels of the tensors allocated next) ------------------------------
  [[nodiscard]] phase current_phase() const noexcept { return phase_; }
  void set_phase(phase p) noexcept { phase_ = p; }
  [[nodiscard]] int layer() const noexcept { return layer_; }
  void set_layer(int l) noexcept { layer_ = l; }
  void set_step(int s) noexcept { step_ = s; }
  /// Autograd recording on (training forward) or off (no_grad, inference, a checkpointed
  /// layer's first forward).
  [[nodiscard]] bool grad_on() const noexcept { return grad_on_; }
  void set_grad(bool on) noexcept { grad_on_ = on; }
  /// True while backward re-runs a checkpointed layer.
  [[nodiscard]] bool recomputing() const noexcept { return recomputing_; }
  /// The request's expert_load entry for this MoE forward (nullptr: balanced routing). Each
  /// forward takes the next entry; a checkpointed layer's re-run takes the one its forward took.
  [[nodiscard]] const std::vector<std::int64_t>* next_expert_load();

  // ---- tensors -------------------------------------------------------------------------------
  tensor alloc(u64 bytes, component c, const char* label);
  /// Allocated and freed at once (an intermediate no one keeps).
  void transient(u64 bytes, component c, const char* label);
  /// Allocated for the rest of the schedule (weights, optimizer states, buffers).
  int keep(u64 bytes, component c, const char* label);
  [[nodiscard]] u64 bytes(const tensor& t) const { return s_.tensors[t.id()].bytes; }
  /// Empties the handle and leaves its tensor allocated to the end of the schedule.
  static void persist(tensor& t) noexcept { t.w_ = nullptr; }
  /// Releases a handle's reference to the tensor `id` (the handle's destructor calls it).
  void release(int id) noexcept;
  /// Takes another reference (a copied handle).
  void retain(int id) noexcept { ++meta_[id].refs; }

  // ---- autograd ------------------------------------------------------------------------------
  /// Records an op: allocates its output and, with grad on and any input or parameter needing
  /// a gradient, a node saving `saved`.
  tensor op(u64 out_bytes, const char* label, std::initializer_list<edge> edges,
            std::initializer_list<saved_ref> saved, std::initializer_list<int> params = {},
            u64 workspace = 0, component c = component::activations);
  /// Records a node for an output made without grad (a region recomputed in backward).
  void attach(const tensor& out, std::initializer_list<edge> edges,
              std::initializer_list<saved_ref> saved, u64 workspace) {
    record(out.id(), edges, saved, {}, workspace);
  }
  /// The op's own output is saved by its node too (softmax, tanh, flash attention output).
  void save_output(const tensor& out);
  /// The op that made `out` keeps nothing but the layer input and re-runs `layer` in backward.
  void checkpoint(const tensor& x, const tensor& out, int layer);
  /// Forward of a layer, for checkpointed re-runs.
  void set_layer_forward(layer_fn f) noexcept { layer_forward_ = f; }
  /// Backward from the scalar losses: gradients of every recorded node, then any left freed.
  void backward(const std::vector<tensor>& losses);

  // ---- parameters ----------------------------------------------------------------------------
  /// Reads parameter_tensors() with the tensor-parallel split; records where each sits.
  void setup_params();
  /// Keeps the LoRA adapters' fp32 weights (after the model's own weights are placed).
  void place_adapters();
  [[nodiscard]] int param_count() const noexcept { return static_cast<int>(param_elems_.size()); }
  [[nodiscard]] u64 param_elems(int p) const { return param_elems_[p]; }
  void set_param_elems(int p, u64 e) { param_elems_[p] = e; }
  void set_param_tensor(int p, int id) { param_tensor_[p] = id; }
  [[nodiscard]] layer_params layer_param(int layer) const;
  [[nodiscard]] const lm_params& lm() const noexcept { return lm_; }
  /// The weight an op uses: the parameter itself, or under autocast its cached low-precision
  /// copy (made once per forward, kept until clear_autocast_cache).
  tensor weight(int p);
  void clear_autocast_cache();
  /// Keeps `t` (a local of an attention module's forward) alive until release_held: transformers'
  /// attention modules apply their output projection before they return, so their locals (the
  /// rotated q and k, v) die after the projection's output exists.
  void hold(tensor t) { held_.push_back(std::move(t)); }
  /// Releases what hold kept, in the order it was held.
  void release_held() noexcept {
    for (auto& t : held_) t.reset();
    held_.clear();
  }
  /// An input to a GEMM/conv: under autocast an fp32 tensor is cast (a fresh copy each call).
  tensor gemm_input(const tensor& x, i64 elems, int elem_bytes);
  /// F.linear: y = x W^T (+ b), saving the (cast) input and the weight.
  tensor linear(const tensor& x, i64 rows, i64 in, i64 out, int p, int x_elem_bytes,
                const char* label, component c = component::activations);
  /// F.linear with one expert's slice `parameter[e]` of a 3-D expert parameter p as the weight:
  /// autocast casts the slice afresh each call (a view is no leaf, so nothing is cached), and
  /// the select's backward hands AccumulateGrad a zero-filled gradient of the whole parameter.
  tensor expert_linear(const tensor& x, i64 rows, i64 in, i64 out, int p, int x_elem_bytes,
                       const char* label);
  /// A projection that LoRA may adapt (`target`: bits of lora_target naming the module; a packed
  /// module names all it holds). The base GEMM is `linear` on a trainable weight; a frozen one
  /// saves nothing of x for its own gradient; a QLoRA base dequantises its NF4 weight into a
  /// transient 16-bit copy for the GEMM and again in backward. An adapted module adds PEFT's
  /// branch: x cast to the adapters' fp32, lora_A, lora_B, scaling, the sum and its cast back.
  tensor proj(const tensor& x, i64 rows, i64 in, i64 out, int p, int x_elem_bytes,
              const char* label, std::uint8_t target, component c = component::activations);
  /// False for a frozen parameter (the base under LoRA): no gradient, no optimizer state.
  [[nodiscard]] bool trainable(int p) const { return trainable_[p] != 0; }
  /// Bytes per element of parameter p's weight, gradient and optimizer states.
  [[nodiscard]] int param_width(int p) const { return param_width_[p]; }
  /// Parameters of the model itself; the walker's LoRA adapters follow them.
  [[nodiscard]] int model_param_count() const noexcept { return model_params_; }
  /// Memory taken outside the caching allocator (paged optimizer states in managed memory).
  void add_managed(u64 bytes) noexcept { s_.managed_bytes += bytes; }
  /// zero_grad(set_to_none=True).
  void zero_grad();
  /// Optimizer state `which` (0 or 1) of parameter p, created on first use.
  [[nodiscard]] bool has_state(int p, int which) const { return state_[which][p] >= 0; }
  void set_state(int p, int which, int id) { state_[which][p] = id; }

 private:
  struct tensor_meta {
    int refs, grad, producer;
  };
  template <typename T, std::size_t N>
  class small_vec {
   public:
    void push_back(const T& v);
    [[nodiscard]] std::size_t size() const noexcept { return n_; }
    [[nodiscard]] bool empty() const noexcept { return n_ == 0; }
    const T& operator[](std::size_t i) const noexcept { return a_[i]; }
    [[nodiscard]] const T* begin() const noexcept { return a_.data(); }
    [[nodiscard]] const T* end() const noexcept { return a_.data() + n_; }

   private:
    std::array<T, N> a_;  ///< only [0, n_) is ever read: no zeroing per node
    std::uint8_t n_ = 0;
  };
  /// A recorded autograd node; fixed capacity, since a plan records thousands of them.
  struct node {
    int out = -1;
    small_vec<edge, 4> edges;
    small_vec<int, 8> saved;
    small_vec<int, 2> params;       ///< parameter indices receiving gradients here
    small_vec<u64, 2> param_bytes;  ///< elements of each parameter gradient
    small_vec<bool, 2> param_cast;  ///< gradient computed for an autocast copy
    u64 workspace = 0;              ///< transient bytes inside this node's backward
    int ckpt_layer = -1;            ///< >= 0: a checkpointed layer re-run in backward
    bool blas = false;              ///< its backward runs a cuBLAS matrix product
    bool autocast_input = false;    ///< autocast's cast of a GEMM input (gemm_input)
    bool expert = false;            ///< a GEMM on one expert's slice (expert_linear)
    bool biased = false;            ///< a linear with a bias (addmm)
    int ckpt_input = -1;
  };

  tensor adopt(int id) noexcept { return {this, id}; }
  int new_tensor(u64 bytes, component c, const char* label);
  void push_event(u64 bytes, int t, component c, bool is_alloc);
  [[nodiscard]] bool requires_grad(int t) const { return t >= 0 && meta_[t].producer != -1; }
  void record(int out, std::initializer_list<edge> edges, std::initializer_list<saved_ref> saved,
              std::initializer_list<int> params, u64 workspace);
  /// Marks the node that made `out` (if any) as one whose backward calls cuBLAS.
  void mark_blas(const tensor& out);
  void run_nodes_backward(std::size_t first);
  void rerun_checkpointed(const node& n, int g_out);
  void node_backward(const node& n, int g_out);
  /// Backward of a linear's matrix product: the input and weight gradients in PyTorch's order.
  void gemm_backward(const node& n, int g_out);
  void input_gradient(const edge& e, int g_out);
  void param_grad(int p, u64 elems, bool cast);
  /// Bytes of parameter p's gradient on this rank for `elems` elements.
  [[nodiscard]] u64 grad_bytes(int p, u64 elems) const;
  /// Runs the pending weight casts' backward: each fp32 gradient, then its 16-bit one freed.
  void flush_weight_casts();
  /// The fp32 (or full-width) gradient of parameter p: kept as .grad, accumulated or streamed.
  void param_grad_fp32(int p, u64 full);
  void add_lora_params();
  tensor base_linear(const tensor& x, i64 rows, i64 in, i64 out, int p, int x_elem_bytes,
                     const char* label, component c);
  tensor lora_branch(const tensor& x, tensor result, i64 rows, i64 in, i64 out, int a,
                     int x_elem_bytes);
  /// The autocast copy of parameter p, cached until clear_autocast_cache (any regime).
  tensor cached_cast(int p, int width);

  const model_description& m_;
  const plan_request& r_;
  schedule& s_;
  dtypes dt_;
  std::vector<tensor_meta> meta_;
  std::vector<node> nodes_;
  lm_params lm_;
  std::vector<layer_params> layer_params_;
  std::vector<int> param_tensor_, cast_of_, param_grad_, cache_;
  std::vector<int> bias_of_;  ///< the bias parameter listed after each weight, or -1
  std::array<std::vector<int>, 2> state_;
  std::vector<u64> param_elems_;
  std::vector<std::uint8_t> trainable_, param_width_, nf4_;
  u64 idle_adapter_elems_ = 0;  ///< adapters counted as trainable that no batch reaches
  /// LoRA adapters: per layer, the modules adapted (the target bits they answer to) and the
  /// index of their lora_A parameter (lora_B follows it).
  struct lora_module {
    std::uint8_t mask = 0;
    int a = -1;
  };
  std::vector<std::vector<lora_module>> lora_;
  int model_params_ = 0;
  phase phase_ = phase::setup;
  int layer_ = -1;
  int step_ = 0;
  std::size_t expert_forwards_ = 0;          ///< MoE forwards walked (recomputes excluded)
  std::vector<std::size_t> expert_load_of_;  ///< per layer: the entry its last forward took
  bool grad_on_ = true;
  bool recomputing_ = false;
  bool backward_workspace_ = false;
  layer_fn layer_forward_ = nullptr;
  /// Weight gradients of a matrix product under autocast waiting for their cast's backward.
  struct pending_cast {
    int param;
    u64 elems;
    int low;  ///< the 16-bit gradient
  };
  std::vector<pending_cast> pending_casts_;
  int pending_wait_ = -1;     ///< the input cast whose backward runs first, or -1
  std::vector<tensor> held_;  ///< see hold (last: released before the bookkeeping goes)
};

inline tensor::tensor(const tensor& o) noexcept : w_(o.w_), id_(o.id_) {
  if (w_ != nullptr) w_->retain(id_);
}

inline void tensor::reset() noexcept {
  if (w_ == nullptr) return;
  walker* w = w_;
  w_ = nullptr;
  w->release(id_);
}

}  // namespace vramkit::plan::detail
