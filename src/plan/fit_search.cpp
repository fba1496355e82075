// Fit search and its rough step-time cost model.
#include "vramkit/plan/fit_search.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <thread>
#include <tuple>

#include <fmt/format.h>

#include "vramkit/core/error.hpp"
#include "vramkit/core/units.hpp"

namespace vramkit::plan {

namespace {

/// Tokens processed per sample: sequence length, or ViT-style patches for vision models (a
/// coarse stand-in that keeps the ranking between configurations of one model consistent).
double tokens_per_sample(const model_description& m, const plan_request& r) {
  const std::int64_t side = r.image_size / 16;
  if (m.is_vision()) return static_cast<double>(side * side);
  return static_cast<double>(r.mode == run_mode::train ? r.seq : r.prompt + r.new_tokens);
}

const gpu_spec& generic_gpu() { return find_gpu("H100 SXM 80GB"); }

// Efficiencies of the catalogue's datasheet rates when no probe file gives the rate
// (docs/plan.md, "Cost model", names the sources).
constexpr double k_gemm_efficiency = 0.80;       // large bf16 GEMMs: 794.5 of 989 TFLOP/s, H100 SXM
constexpr double k_attention_efficiency = 0.35;  // FlashAttention-2 on H100
constexpr double k_memory_efficiency = 0.89;     // device copy: 4,267 of 4,800 GB/s, H200
// Eager PyTorch's host cost of one op (dispatch and launch): the floor of a kernel's time.
constexpr double k_op_dispatch_s = 8e-6;

bool is_expert(const std::string& name) { return name.rfind("moe_experts", 0) == 0; }

// Multiply-adds per token of one block's weight matrices (routed experts at top_k of them).
double block_macs_per_token(const model_description& m) {
  const auto& t = m.t;
  double macs = 0;
  for (const auto& p : parameter_tensors(m)) {
    if (p.layer < 0 || p.name.find("norm") != std::string::npos) continue;
    auto e = static_cast<double>(p.elements);
    if (is_expert(p.name) && t.moe.experts > 0)
      e *= static_cast<double>(t.moe.top_k) / static_cast<double>(t.moe.experts);
    macs += e;
  }
  return macs / static_cast<double>(std::max<std::int64_t>(1, t.layers));
}

// Bytes one norm reads and writes per element of the residual stream (resid: its element size).
double norm_bytes_per_element(const transformer_shape& t, double resid) {
  const double rms = resid == 4 ? 28 : 38;
  return t.layer_norm ? 2 * resid + 2 : rms;
}

// Bytes read plus written per token by the memory-bound kernels of a block's forward: the two
// norms, autocast's casts of fp32 activations into each projection, rotary embeddings on q and k
// (fp32 under autocast: cos/sin follow the fp32 residual stream), the residual adds, dropout and
// the MLP's activation (SwiGLU: SiLU and the product). low: a GEMM input's element size.
double elementwise_bytes_per_token(const model_description& m, bool amp, double low, double resid) {
  const auto& t = m.t;
  const auto h = static_cast<double>(t.hidden);
  const double hd = static_cast<double>(
      t.head_dim > 0 ? t.head_dim : t.hidden / std::max<std::int64_t>(1, t.heads));
  const double nq = static_cast<double>(t.heads) * hd;
  const double nkv = static_cast<double>(t.kv_heads > 0 ? t.kv_heads : t.heads) * hd;
  const double norm = norm_bytes_per_element(t, resid);
  double norms = t.shared_parallel_norm ? 1 : 2;
  if (t.sandwich_norm) norms += 2;
  const bool fused_qkv = m.family == model_family::gpt2 || m.family == model_family::gpt_neox ||
                         m.family == model_family::falcon || m.family == model_family::phi3;
  const bool gated = t.mlp == mlp_kind::swiglu;
  const double casts = amp ? ((fused_qkv ? 1 : 3) + (gated ? 2 : 1)) * (resid + low) * h : 0;
  const double rope = t.rotary_fraction * (nq + nkv) * (amp ? 36 : 10 * low);
  const double residual = 2 * (2 * resid + low) * h;
  const double dropout = t.hidden_dropout > 0 ? 2 * (2 * low + 1) * h : 0;
  auto f_eff = static_cast<double>(t.intermediate);
  double routing = 0;
  if (t.moe.experts > 0) {
    f_eff = static_cast<double>(t.moe.top_k * t.moe.expert_ffn + t.moe.shared_ffn);
    routing = 4 * static_cast<double>(t.moe.top_k) * h * low;  // gather and scatter of tokens
  }
  const double act = t.mlp == mlp_kind::gelu_python ? 16 * low
                     : t.mlp == mlp_kind::gelu      ? 2 * low
                                                    : 5 * low;
  return norms * norm * h + casts + rope + residual + dropout + act * f_eff + routing;
}

// Bytes the optimizer's passes move per trainable parameter (w: a parameter's element size):
// foreach AdamW 21 accesses, fused 7.
double optimizer_bytes_per_param(optimizer_kind o, double w) {
  switch (o) {
    case optimizer_kind::adam:
    case optimizer_kind::adamw:
      return 21 * w;
    case optimizer_kind::adamw_fused:
      return 7 * w;
    case optimizer_kind::sgd:
      return 3 * w;
    case optimizer_kind::sgd_momentum:
      return 6 * w;
    case optimizer_kind::adamw_8bit:
    case optimizer_kind::paged_adamw_8bit:
      return 3 * w + 4;
  }
  return 0;
}

}  // namespace

kernel_rates kernel_rates_for(const gpu_spec& gpu, const device_overheads& o, precision p) {
  kernel_rates k;
  const bool fp32 = p == precision::fp32;
  const double peak = fp32 ? gpu.fp32_flops : gpu.bf16_flops;
  const bool gemm_probe = !fp32 && o.gemm_flops > 0, attn_probe = !fp32 && o.attention_flops > 0;
  const bool mem_probe = o.memory_bytes_per_s > 0;
  k.gemm_flops = gemm_probe ? o.gemm_flops : peak * k_gemm_efficiency;
  k.attention_flops = attn_probe ? o.attention_flops : peak * k_attention_efficiency;
  k.memory_bytes_per_s =
      mem_probe ? o.memory_bytes_per_s : gpu.hbm_bytes_per_s * k_memory_efficiency;
  const int probed = int{gemm_probe} + int{attn_probe} + int{mem_probe};
  k.source = probed == 0 ? "catalogue" : probed == 3 ? "probe" : "probe and catalogue";
  return k;
}

double step_time_parts::step_s() const noexcept {
  return micro_batches * (blocks * (block_forward_s + block_backward_s) + recompute_s + outside_s) +
         optimizer_s;
}

step_time_parts estimate_step_parts(const model_description& m, const plan_request& r,
                                    const gpu_spec& gpu, const device_overheads& o) {
  if (r.mode != run_mode::train || m.is_vision())
    throw invalid_input(
        "the step-time parts are modelled for training transformer language models");
  const auto& t = m.t;
  step_time_parts out;
  const kernel_rates k = kernel_rates_for(gpu, o, r.prec);
  out.rates = k;
  const double mem = k.memory_bytes_per_s;
  const bool amp = r.prec == precision::amp_bf16 || r.prec == precision::amp_fp16;
  const double low = r.prec == precision::fp32 ? 4 : 2;             // GEMM inputs and outputs
  const double resid = (r.prec == precision::fp32 || amp) ? 4 : 2;  // residual stream, norms
  const double w = r.prec == precision::bf16 ? 2 : 4;               // parameters and states
  if (r.micro_batch < 1 || r.batch < 1 || r.seq < 1)
    throw invalid_input("the step-time parts need a validated request (batch, micro-batch, seq)");
  const auto b = static_cast<double>(r.micro_batch);
  const auto s = static_cast<double>(r.seq);
  const double tokens = b * s;
  const auto h = static_cast<double>(t.hidden);
  const auto n_layers = static_cast<double>(std::max<std::int64_t>(1, t.layers));
  const double hd = static_cast<double>(
      t.head_dim > 0 ? t.head_dim : t.hidden / std::max<std::int64_t>(1, t.heads));
  const double nq = static_cast<double>(t.heads) * hd;
  const double nkv = static_cast<double>(t.kv_heads > 0 ? t.kv_heads : t.heads) * hd;
  const bool lora = r.lora_rank > 0;
  // Multiply-adds per token: a block's weight matrices and the head's.
  const double block_macs = block_macs_per_token(m);
  const auto vocab = static_cast<double>(t.vocab);
  const double head_macs = vocab * h + (m.family == model_family::bert ? h * h : 0);
  const double tp = r.tp;

  // GEMMs: 2 FLOPs per multiply-add; backward computes input and weight gradients (LoRA's frozen
  // base: input gradients only); QLoRA dequantises every weight before its GEMMs.
  const double gemm_fwd = 2 * tokens * block_macs / k.gemm_flops;
  const double gemm_bwd = gemm_fwd * (lora ? 1 : 2);
  const double dequant =
      r.quant == quant_kind::nf4 ? block_macs * (0.5 + 2) / mem : 0;  // read nf4, write bf16
  // Attention's s^2 terms: QK^T and PV, 2 b s^2 (heads x head_dim) FLOPs each; a causal fused
  // kernel skips the masked half; eager attention runs them as GEMMs on the whole square and
  // adds the memory-bound softmax over it.
  const bool causal = m.family != model_family::bert && m.family != model_family::t5;
  const bool eager = r.attention == attention_kind::eager;
  double s_kv = s;
  if (t.sliding_window > 0 && !t.sliding_layers.empty()) {
    const auto n_sl = static_cast<double>(
        std::count(t.sliding_layers.begin(), t.sliding_layers.end(), std::uint8_t{1}));
    const double win = std::min(s, static_cast<double>(t.sliding_window));
    s_kv = (n_sl * win + (n_layers - n_sl) * s) / n_layers;
  }
  const double attn_flops = 4 * b * s * s_kv * nq * (causal && !eager ? 0.5 : 1);
  double attn_fwd = 0, attn_bwd = 0, scores_fwd = 0;
  if (eager) {
    attn_fwd = attn_flops / k.gemm_flops;
    attn_bwd = 2 * attn_fwd;
    // Scaled and masked scores, softmax (fp32 under autocast), its cast back, dropout.
    const double per = 4 * low + 8 + (t.attention_dropout > 0 ? 2 * low + 1 : 0);
    scores_fwd = b * static_cast<double>(t.heads) * s * s_kv * per / mem;
  } else {
    attn_fwd = attn_flops / k.attention_flops;
    attn_bwd = 2.5 * attn_fwd;  // the fused backward recomputes QK^T: 5 GEMMs against 2
  }
  const double norm = norm_bytes_per_element(t, resid);
  const double elem_bytes = tokens * elementwise_bytes_per_token(m, amp, low, resid);
  const double elem_fwd = elem_bytes / mem;
  // Autocast casts each fp32 weight to 16 bits per forward, and each 16-bit weight gradient back.
  const double cast_fwd = amp && !lora ? 6 * block_macs / mem : 0;
  // Eager ops of a block (forward, backward): their dispatch is the floor of the block's time.
  const double ops_fwd = 40, ops_bwd = 80;
  out.block_forward_s =
      std::max(ops_fwd * k_op_dispatch_s,
               (gemm_fwd + attn_fwd + scores_fwd + elem_fwd + cast_fwd + dequant) / tp);
  out.block_backward_s =
      std::max(ops_bwd * k_op_dispatch_s,
               (gemm_bwd + attn_bwd + 2 * scores_fwd + 2 * elem_fwd + cast_fwd + dequant) / tp);
  out.block_memory_bound_s = (elem_fwd + cast_fwd + dequant) / tp;
  if (!eager && t.moe.experts == 0) {
    // q, k and v, the attention output (its fp32 log-sum-exp per row and head beside it), the
    // output projection, and the MLP's up (and gate) and down projections.
    const double mlp_out =
        (t.mlp == mlp_kind::swiglu ? 2 : 1) * static_cast<double>(t.intermediate) + h;
    out.block_gemm_output_bytes =
        tokens * ((2 * nq + 2 * nkv + h + mlp_out) * low + 4 * static_cast<double>(t.heads)) / tp;
  }
  out.blocks = static_cast<int>((t.layers + r.pp - 1) / r.pp);
  if (r.ckpt == checkpointing::full)
    out.recompute_s = out.blocks * out.block_forward_s;
  else if (r.ckpt == checkpointing::selective)
    out.recompute_s = out.blocks * (eager ? attn_fwd + scores_fwd : attn_fwd) / tp;
  // Outside the blocks: the head's GEMMs, the logits upcast to fp32 for the loss and the
  // cross-entropy forward and backward (36 bytes a logit; 24 when they are fp32 already), the
  // final norm, the embedding's gather and its gradient's scatter into a zeroed table.
  const double logits = tokens * vocab * (r.prec == precision::fp32 ? 24 : 36);
  const double outside_bytes = logits + 3 * tokens * norm * h + tokens * h * (2 * resid + 12) +
                               4 * vocab * h + (amp && !lora ? 12 * head_macs : 0);
  out.outside_s = (6 * tokens * head_macs / k.gemm_flops + outside_bytes / mem) / tp;
  // The optimizer's passes over parameters, gradients and states (foreach AdamW: 21 accesses of
  // a parameter's 4 bytes; fused: 7), over the trainable parameters of this GPU's shard.
  const int dp = std::max(1, r.data_parallel());
  auto trainable = static_cast<double>(parameter_count(m));
  if (lora) trainable = 0.01 * trainable;  // adapters: a percent or so of the model
  trainable /= (tp * r.pp) * (r.zero >= 1 ? dp : 1);
  out.optimizer_s = trainable * optimizer_bytes_per_param(r.optimizer, w) / mem;
  const std::int64_t micro_batches = r.batch / dp / r.micro_batch;  // whole micro-batches
  out.micro_batches = static_cast<double>(micro_batches);
  return out;
}

double estimate_step_time(const model_description& m, const plan_request& r, const gpu_spec& gpu,
                          const device_overheads& o) {
  const auto params = static_cast<double>(parameter_count(m));
  const double tokens = tokens_per_sample(m, r) * static_cast<double>(r.batch);
  const double rate = r.prec == precision::fp32 ? gpu.fp32_flops : gpu.bf16_flops;
  if (r.mode == run_mode::infer) {
    // Decode is bound by reading the weights once per token; prefill by 2 params FLOPs per token.
    const double wbytes = params *
                          (r.quant == quant_kind::int4 || r.quant == quant_kind::nf4 ? 0.5
                           : r.quant == quant_kind::int8 || r.quant == quant_kind::fp8
                               ? 1
                               : (r.prec == precision::fp32 ? 4 : 2)) /
                          r.tp;
    const double prefill =
        2 * params * static_cast<double>(r.batch * r.prompt) / (rate * 0.5 * r.tp);
    return prefill + static_cast<double>(r.new_tokens) * wbytes / gpu.hbm_bytes_per_s;
  }
  double t = 0;
  const std::int64_t micro_batches = r.batch / r.data_parallel() / r.micro_batch;
  const auto mbs = static_cast<double>(micro_batches);
  if (m.is_vision()) {
    // Vision models: 6 params FLOPs per token (ViT patches), full recompute adds 2 params;
    // efficiency falls for small micro-batches, whose kernels launch regardless of size.
    double flops = 6 * params * tokens;
    if (r.ckpt == checkpointing::full) flops += 2 * params * tokens;
    const double mb_tokens = tokens_per_sample(m, r) * static_cast<double>(r.micro_batch);
    const double eff = 0.5 * mb_tokens / (mb_tokens + 2048.0);
    t = flops / (rate * eff * r.gpus);
  } else {
    t = estimate_step_parts(m, r, gpu, o).step_s();
  }
  // Pipeline bubble (1F1B): (pp - 1) / (micro-batches + pp - 1) of the time is idle.
  if (r.pp > 1) t /= 1.0 - (r.pp - 1) / (mbs + r.pp - 1);
  const int dp = r.data_parallel();
  const double link = gpu.nvlink_bytes_per_s > 0 ? gpu.nvlink_bytes_per_s : gpu.pcie_bytes_per_s();
  const double grad_bytes = 2 * params / (r.tp * r.pp);
  if (dp > 1) {
    // Ring all-reduce (or reduce-scatter + all-gather) moves 2 (N-1)/N of the gradients; ZeRO-3
    // adds the parameter all-gather of the backward pass (1.5x).
    double comm = 2.0 * (dp - 1) / dp * grad_bytes / link;
    if (r.zero >= 3) comm *= 1.5;
    t += comm;
  }
  if (r.tp > 1 && !m.is_vision()) {
    // Four all-reduces of the (b, s, h) activations per layer and micro-batch (Megatron).
    const double act = static_cast<double>(r.micro_batch * r.seq * m.t.hidden) * 2;
    t += mbs * 4 * static_cast<double>(m.t.layers) / r.pp * 2.0 * (r.tp - 1) / r.tp * act / link;
  }
  const double pcie = o.h2d_bytes_per_s > 0 ? o.h2d_bytes_per_s : gpu.pcie_bytes_per_s();
  const double shard = params / (r.tp * r.pp) / dp;
  if (r.offload != offload_kind::none) {
    // Gradients down and parameters up once per step, plus the CPU optimizer streaming 16 bytes
    // of state per parameter through ~100 GB/s of host memory.
    t += 2 * 2 * shard / pcie + shard * 16 / 100e9;
  }
  if (r.offload == offload_kind::params)
    t += mbs * 2 * 2 * shard * dp / pcie;  // gathered forward and backward
  return t;
}

double estimate_step_time(const plan_result& p, const gpu_spec& gpu, const device_overheads& o) {
  double t = estimate_step_time(p.model, p.request, gpu, o);
  // Paged optimizer states that do not stay resident migrate in and out once per step.
  const auto paged = static_cast<double>(p.managed_bytes - p.managed_resident_bytes);
  const double pcie = o.h2d_bytes_per_s > 0 ? o.h2d_bytes_per_s : gpu.pcie_bytes_per_s();
  return t + 2 * paged / pcie;
}

namespace {

/// What the search varies around the request.
struct search_axes {
  std::vector<precision> precs;
  std::vector<quant_kind> quants;
  std::vector<checkpointing> ckpts;
  std::vector<int> zeros;
  std::vector<offload_kind> offloads;
  std::vector<std::pair<int, int>> layouts;  ///< (tp, pp), narrowest first
  /// Training method and optimizer variants: (LoRA rank, base quantisation, optimizer, stepped
  /// in backward); the request's own first.
  struct method {
    int lora_rank = 0;
    quant_kind quant = quant_kind::none;
    optimizer_kind optimizer = optimizer_kind::adamw;
    bool in_backward = false;
  };
  std::vector<method> methods;
};

search_axes axes_of(const model_description& m, const plan_request& base, const fit_options& opt) {
  search_axes a;
  const bool train = base.mode == run_mode::train;
  a.precs = {base.prec};
  if (opt.vary_precision) {
    const auto more = train ? std::vector<precision>{precision::amp_bf16, precision::bf16}
                            : std::vector<precision>{precision::bf16};
    for (auto p : more)
      if (std::find(a.precs.begin(), a.precs.end(), p) == a.precs.end()) a.precs.push_back(p);
  }
  // Inference may quantise the weights (int8, then AWQ/GPTQ-style int4) when the request does
  // not fix a quantisation.
  a.quants = {base.quant};
  if (!train && base.quant == quant_kind::none && !m.is_vision())
    a.quants = {quant_kind::none, quant_kind::fp8, quant_kind::int8, quant_kind::int4};
  a.ckpts = {checkpointing::none};
  // Selective recompute only drops eager attention's s x s tensors.
  if (train && !m.is_vision()) {
    a.ckpts = {checkpointing::none, checkpointing::full};
    if (base.attention == attention_kind::eager)
      a.ckpts.insert(a.ckpts.begin() + 1, checkpointing::selective);
  }
  // ZeRO-1 and ZeRO-2 cost the same communication as plain data parallel in the cost model and
  // never need more memory, so among stages 0-2 only ZeRO-2 can rank first; ZeRO-3 trades 1.5x
  // communication for sharded parameters.
  a.zeros = {0};
  a.offloads = {offload_kind::none};
  if (train) {
    a.offloads = {offload_kind::none, offload_kind::optimizer};
    if (base.gpus > 1) {
      a.zeros = {2, 3};
      a.offloads.push_back(offload_kind::params);
    }
  }
  // Training: the request's method and optimizer, then the memory savers a fine-tuning user
  // would try (8-bit and paged 8-bit AdamW, the optimizer stepped in backward on one GPU, LoRA of
  // rank 16 and 64, QLoRA of rank 16) where the request leaves them open.
  a.methods = {{base.lora_rank, train ? base.quant : quant_kind::none, base.optimizer,
                base.optimizer_in_backward}};
  const bool adam =
      base.optimizer == optimizer_kind::adam || base.optimizer == optimizer_kind::adamw;
  if (train && adam && base.lora_rank == 0 && !base.optimizer_in_backward) {
    const bool lm =
        !m.is_vision() && m.family != model_family::deepseek && m.weights.quant == quant_kind::none;
    const bool one_gpu = base.gpus == 1;
    a.methods.push_back({0, quant_kind::none, optimizer_kind::adamw_8bit, false});
    a.methods.push_back({0, quant_kind::none, optimizer_kind::paged_adamw_8bit, false});
    if (one_gpu) {
      a.methods.push_back({0, quant_kind::none, base.optimizer, true});
      a.methods.push_back({0, quant_kind::none, optimizer_kind::paged_adamw_8bit, true});
    }
    if (lm) {
      a.methods.push_back({16, quant_kind::none, base.optimizer, false});
      a.methods.push_back({64, quant_kind::none, base.optimizer, false});
      a.methods.push_back({16, quant_kind::nf4, base.optimizer, false});
    }
  }
  a.layouts = {{1, 1}};
  if (base.gpus > 1 && !m.is_vision()) {
    a.layouts.clear();
    for (int tp = 1; tp <= std::min(base.gpus, 8); tp *= 2) {
      if (base.gpus % tp || m.t.heads % tp) continue;
      for (int pp = 1; pp <= 4; pp *= 2) {
        if ((base.gpus / tp) % pp || pp > m.t.layers) continue;
        // Inference plans one replica over all the GPUs.
        if (!train && tp * pp != base.gpus) continue;
        if ((base.batch % (base.gpus / tp / pp)) != 0) continue;
        a.layouts.emplace_back(tp, pp);
      }
    }
  }
  // Tensor and pipeline parallelism only add communication and bubbles in the cost model: wider
  // layouts are tried only while no narrower one fits the whole per-GPU batch.
  std::stable_sort(a.layouts.begin(), a.layouts.end(), [](const auto& x, const auto& y) {
    return x.first * x.second < y.first * y.second;
  });
  return a;
}

/// One group: a layout, a precision, a quantisation and a ZeRO stage; its offload and
/// checkpointing variants are searched in order, each pruning the next. Groups are independent
/// of each other.
struct group {
  int tp, pp;
  precision prec;
  quant_kind quant;
  int z;
  search_axes::method method;
  std::vector<fit_candidate> fits;
  std::size_t planned = 0;
  bool whole_plain = false;  ///< the whole per-GPU batch fits without recompute or offload
  std::exception_ptr error;
};

/// Bytes every GPU of a training request holds at its optimizer step whatever the batch: the
/// weights, the gradients (all of them unless stepped in backward) and the device-resident
/// optimizer states, at the shard sizes of its layout. A lower bound of its device peak; exact
/// figures come from make_plan.
double static_training_bytes(const model_description& m, const plan_request& r, double P) {
  const int dp = std::max(1, r.data_parallel());
  const double per = P / (r.tp * r.pp);
  if (r.lora_rank > 0) return per * (r.quant == quant_kind::nf4 ? 0.5 : 2);
  const double w = r.prec == precision::bf16 ? 2 : 4;
  double bytes = r.offload == offload_kind::params ? 0 : per * w / (r.zero >= 3 ? dp : 1);
  if (!r.optimizer_in_backward && r.offload == offload_kind::none)
    bytes += per * w / (r.zero >= 2 ? dp : 1);
  if (r.offload == offload_kind::none) {
    double states = 0;
    switch (r.optimizer) {
      case optimizer_kind::adam:
      case optimizer_kind::adamw:
      case optimizer_kind::adamw_fused:
        states = 2 * w;
        break;
      case optimizer_kind::sgd_momentum:
        states = w;
        break;
      case optimizer_kind::adamw_8bit:
        states = 2;
        break;
      case optimizer_kind::paged_adamw_8bit:  // managed memory: may be paged out entirely
      case optimizer_kind::sgd:
        break;
    }
    bytes += per * states / (r.zero >= 1 ? dp : 1);
  }
  (void)m;
  return bytes;
}

class searcher {
 public:
  searcher(const model_description& m, const plan_request& base, const fit_options& opt,
           const device_overheads& o, const search_axes& axes)
      : m_(m),
        base_(base),
        opt_(opt),
        o_(o),
        axes_(axes),
        gpu_(opt.gpu ? *opt.gpu : generic_gpu()),
        limit_(static_cast<std::uint64_t>(static_cast<double>(opt.capacity_bytes) *
                                          (1.0 - opt.margin))),
        params_(static_cast<double>(parameter_count(m))) {}

  void search_group(group& gr) const {
    bool whole_fits = false, fits_without_offload = false;
    const auto& me = gr.method;
    const bool variant = me.lora_rank > 0 || me.in_backward || me.optimizer != base_.optimizer;
    for (auto off : axes_.offloads) {
      // The variants replace offload as a way to fit (and most do not combine with it).
      if (variant && off != offload_kind::none) break;
      // Offload only where nothing fits without it: it costs PCIe traffic every step.
      if (whole_fits || (off != offload_kind::none && fits_without_offload)) break;
      if (off == offload_kind::params && gr.z != 3) continue;
      if (off != offload_kind::none && gr.z == 0 && base_.gpus > 1) continue;
      for (auto ck : axes_.ckpts) {
        if (whole_fits) break;
        if (gr.z > 0 && base_.gpus / (gr.tp * gr.pp) < 2) continue;
        plan_request r = base_;
        r.prec = gr.prec, r.quant = gr.quant, r.ckpt = ck, r.zero = gr.z, r.offload = off;
        r.tp = gr.tp, r.pp = gr.pp, r.steps = 2;
        r.lora_rank = me.lora_rank, r.optimizer = me.optimizer,
        r.optimizer_in_backward = me.in_backward;
        if (base_.mode == run_mode::train) r.quant = me.quant;
        // The allocator works under the memory left after the margin: it flushes its cache
        // before it fails, as PyTorch's does.
        r.device_capacity_bytes = limit_;
        const int dp = base_.gpus / (gr.tp * gr.pp);
        if (base_.mode == run_mode::train && base_.batch % dp != 0) continue;
        const std::int64_t per_gpu = base_.mode == run_mode::train ? base_.batch / dp : base_.batch;
        plan_result best;
        const std::int64_t mb = largest_fitting(r, per_gpu, gr, best);
        if (mb == 0) continue;
        if (mb == per_gpu) whole_fits = true;
        if (off == offload_kind::none) fits_without_offload = true;
        if (mb == per_gpu && ck == checkpointing::none && off == offload_kind::none && !variant)
          gr.whole_plain = true;
        gr.fits.push_back(candidate(best, mb, per_gpu));
      }
    }
  }

 private:
  bool try_plan(plan_request& r, std::int64_t mb, group& gr, plan_result& p) const {
    if (base_.mode == run_mode::train)
      r.micro_batch = mb;
    else
      r.batch = mb;
    // Weights, gradients and states alone exceed the GPU: no batch can fit, nothing to plan.
    if (base_.mode == run_mode::train &&
        static_training_bytes(m_, r, params_) + static_cast<double>(o_.context_bytes) >
            static_cast<double>(limit_))
      return false;
    try {
      p = make_plan(m_, r, o_, plan_scope::until_out_of_memory);
    } catch (const invalid_input&) {
      return false;
    }
    ++gr.planned;
    return p.fits() && p.device_peak_bytes <= limit_;
  }

  /// Memory grows with the micro-batch (training: a divisor of the per-GPU batch; inference:
  /// the concurrent sequences, at most the batch asked for), so the largest that fits is found
  /// by bisection after checking that the smallest fits at all. 0 when nothing fits.
  std::int64_t largest_fitting(plan_request& r, std::int64_t per_gpu, group& gr,
                               plan_result& best) const {
    // Stepping in backward cannot accumulate: the whole per-GPU batch or nothing.
    if (r.optimizer_in_backward) return try_plan(r, per_gpu, gr, best) ? per_gpu : 0;
    std::vector<std::int64_t> sizes;
    for (std::int64_t mb = 1; mb <= per_gpu; ++mb)
      if (base_.mode == run_mode::infer || per_gpu % mb == 0) sizes.push_back(mb);
    if (base_.mode == run_mode::infer && try_plan(r, per_gpu, gr, best)) return per_gpu;
    if (!try_plan(r, sizes.front(), gr, best)) return 0;
    std::size_t lo = 0, hi = sizes.size() - 1;
    plan_result probe;
    while (lo < hi) {
      const std::size_t mid = (lo + hi + 1) / 2;
      if (try_plan(r, sizes[mid], gr, probe)) {
        lo = mid;
        best = probe;
      } else {
        hi = mid - 1;
      }
    }
    return sizes[lo];
  }

  [[nodiscard]] fit_candidate candidate(const plan_result& p, std::int64_t mb,
                                        std::int64_t per_gpu) const {
    fit_candidate c;
    c.request = p.request;
    c.device_peak_bytes = p.device_peak_bytes;
    c.allocated_peak_bytes = p.allocated_peak_bytes;
    c.host_peak_bytes = p.host_peak_bytes;
    c.step_time_s = estimate_step_time(p, gpu_, o_);
    const auto& q = p.request;
    if (q.mode == run_mode::train) {
      c.reasons.push_back(
          q.lora_rank == 0
              ? fmt::format("full fine-tune, optimizer {}{}{}", to_string(q.optimizer),
                            q.optimizer == optimizer_kind::paged_adamw_8bit
                                ? fmt::format(" ({} of states in managed memory, {} paged to the "
                                              "host)",
                                              format_bytes(static_cast<double>(p.managed_bytes)),
                                              format_bytes(static_cast<double>(
                                                  p.managed_bytes - p.managed_resident_bytes)))
                                : std::string(),
                            q.optimizer_in_backward
                                ? ", stepped in backward (no full set of gradients)"
                                : "")
              : fmt::format("{} rank {} on {}: {} trainable parameters, base frozen{}",
                            q.quant == quant_kind::nf4 ? "QLoRA" : "LoRA", q.lora_rank,
                            lora_targets_string(q.lora_targets), p.trainable_parameters,
                            q.quant == quant_kind::nf4 ? " in NF4" : " in 16 bits"));
      c.reasons.push_back(
          mb == per_gpu
              ? fmt::format("micro-batch {}: the whole per-GPU batch fits", mb)
              : fmt::format("micro-batch {} x {} accumulation steps: the largest divisor of {} "
                            "that fits",
                            mb, per_gpu / mb, per_gpu));
      c.reasons.emplace_back(
          q.ckpt == checkpointing::none ? "checkpointing none: no recompute"
          : q.ckpt == checkpointing::selective
              ? "checkpointing selective: eager attention's s x s tensors recomputed (a few % "
                "more compute)"
              : "checkpointing full: every block's forward runs again in backward to keep only "
                "layer inputs");
    } else {
      c.reasons.push_back(
          mb == per_gpu
              ? fmt::format("batch {}: every sequence asked for fits", mb)
              : fmt::format("batch {} of the {} asked for: the most that fit", mb, per_gpu));
      c.reasons.push_back(q.quant == quant_kind::none
                              ? std::string("weights not quantised")
                              : fmt::format("weights quantised to {}{}", to_string(q.quant),
                                            q.quant == base_.quant ? " (as asked)" : ""));
    }
    c.reasons.push_back(fmt::format(
        "precision {}{}", to_string(q.prec),
        q.prec == base_.prec        ? " (as asked)"
        : q.mode == run_mode::infer ? ": 16-bit weights"
        : q.lora_rank > 0
            ? (q.prec == precision::bf16 ? ": 16-bit frozen base, fp32 adapters"
                                         : ": 16-bit frozen base, autocast over the fp32 adapters")
        : q.prec == precision::bf16
            ? ": 16-bit weights and states halve model memory"
            : ": autocast runs GEMMs in 16 bits, keeps fp32 master weights"));
    layout_reasons(p, c.reasons);
    return c;
  }

  void layout_reasons(const plan_result& p, std::vector<std::string>& out) const {
    const auto& q = p.request;
    if (q.gpus > 1 && q.mode == run_mode::train)
      out.push_back(q.zero == 0
                        ? "ZeRO 0: plain data parallel (replicated states, least communication)"
                        : fmt::format("ZeRO {}: shards {} over {} data-parallel ranks", q.zero,
                                      q.zero == 1   ? "optimizer states"
                                      : q.zero == 2 ? "optimizer states and gradients"
                                                    : "states, gradients and parameters",
                                      q.data_parallel()));
    if (q.offload != offload_kind::none)
      out.push_back(
          fmt::format("offload {}: moves them to pinned host memory ({} per node) at PCIe cost",
                      to_string(q.offload), format_bytes(static_cast<double>(p.host_peak_bytes))));
    if (q.tp > 1 || q.pp > 1)
      out.push_back(fmt::format("tensor {} x pipeline {}: splits layers and weights across GPUs",
                                q.tp, q.pp));
    if (p.cache_flushes > 0)
      out.push_back(fmt::format(
          "fits only by flushing the allocator's cache {} time(s) in the replayed run (slow)",
          p.cache_flushes));
    out.push_back(fmt::format("device peak {} of {} ({:.0f}% margin kept)",
                              format_bytes(static_cast<double>(p.device_peak_bytes)),
                              format_bytes(static_cast<double>(opt_.capacity_bytes)),
                              opt_.margin * 100));
  }

  const model_description& m_;
  const plan_request& base_;
  const fit_options& opt_;
  const device_overheads& o_;
  const search_axes& axes_;
  const gpu_spec& gpu_;
  std::uint64_t limit_;
  double params_;
};

/// Runs the groups on up to `threads` threads; rethrows the first group's error.
void run_groups(std::vector<group>& groups, const searcher& s, unsigned threads) {
  std::atomic<std::size_t> next{0};
  auto work = [&] {
    for (std::size_t i; (i = next.fetch_add(1)) < groups.size();) {
      try {
        s.search_group(groups[i]);
      } catch (...) {
        groups[i].error = std::current_exception();
      }
    }
  };
  std::vector<std::thread> pool;
  const unsigned n = std::min<unsigned>(threads, static_cast<unsigned>(groups.size()));
  for (unsigned t = 1; t < n; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
}

}  // namespace

fit_result fit_search(const model_description& m, const plan_request& base_in,
                      const fit_options& opt, const device_overheads& o) {
  if (opt.capacity_bytes == 0) throw invalid_input("--fit needs --gpu NAME or a capacity in bytes");
  plan_request base = base_in;
  base.validate(m);
  fit_result out;
  out.model = m.name;
  out.gpu = opt.gpu ? opt.gpu->name : "";
  out.capacity_bytes = opt.capacity_bytes;
  const search_axes axes = axes_of(m, base, opt);
  const searcher s(m, base, opt, o, axes);
  // Groups of one layout width run in parallel (plans are independent and make_plan keeps its
  // buffers per thread); results are merged in the sequential order, so the ranking is the same
  // on any number of threads.
  const unsigned threads = std::max(
      1u, std::min(opt.threads > 0 ? opt.threads : std::thread::hardware_concurrency(), 64u));
  std::size_t li = 0;
  while (li < axes.layouts.size()) {
    const int width = axes.layouts[li].first * axes.layouts[li].second;
    std::vector<group> groups;
    for (; li < axes.layouts.size() && axes.layouts[li].first * axes.layouts[li].second == width;
         ++li)
      for (const auto& me : axes.methods)
        for (auto prec : axes.precs)
          for (auto quant : axes.quants)
            for (int z : axes.zeros) {
              const auto tp = axes.layouts[li].first, pp = axes.layouts[li].second;
              // Variants are searched in the 16-bit regime their recipes use (bf16; an fp32
              // master under autocast only adds memory to them); LoRA / QLoRA without tensor or
              // pipeline parallelism.
              const bool variant =
                  me.lora_rank > 0 || me.in_backward || me.optimizer != base.optimizer;
              if (variant && prec != precision::bf16) continue;
              if (me.lora_rank > 0 && (tp * pp > 1 || z == 3)) continue;
              groups.push_back(group{tp, pp, prec, quant, z, me, {}, 0, false, nullptr});
            }
    run_groups(groups, s, threads);
    bool layout_done = false;
    for (auto& gr : groups) {
      if (gr.error) std::rethrow_exception(gr.error);
      out.planned += gr.planned;
      for (auto& c : gr.fits) out.fits.push_back(std::move(c));
      layout_done = layout_done || gr.whole_plain;
    }
    if (layout_done) break;
  }
  rank_fits(out, opt.max_results);
  return out;
}

void rank_fits(fit_result& res, std::size_t max_results) {
  std::stable_sort(
      res.fits.begin(), res.fits.end(),
      [](const fit_candidate& a, const fit_candidate& b) { return a.step_time_s < b.step_time_s; });
  // The fastest of each method (full fine-tune per optimizer, LoRA per rank, QLoRA) comes first,
  // in time order, so that every way of fitting shows before a second layout of one of them.
  auto key = [](const fit_candidate& c) {
    const auto& q = c.request;
    return std::tuple(q.lora_rank, q.quant, q.optimizer, q.optimizer_in_backward,
                      c.activation_mix.empty());
  };
  std::vector<fit_candidate> firsts, rest;
  for (auto& c : res.fits) {
    const bool seen = std::any_of(firsts.begin(), firsts.end(),
                                  [&](const fit_candidate& f) { return key(f) == key(c); });
    (seen ? rest : firsts).push_back(std::move(c));
  }
  res.fits = std::move(firsts);
  for (auto& c : rest) res.fits.push_back(std::move(c));
  if (res.fits.size() > max_results) res.fits.resize(max_results);
}

}  // namespace vramkit::plan
