// build_schedule: sets up a walker (schedule/walker.hpp) for the request, places the weights and
// workspaces, then replays the training steps (micro-batches, pipeline groups, communication
// buffers, backward, optimizer step, zero_grad) or the inference call. The model families, ops
// and the walker itself live in schedule/.
#include "vramkit/plan/training_schedule.hpp"

#include <algorithm>
#include <cmath>

#include "schedule/steps.hpp"
#include "schedule/transformer.hpp"
#include "schedule/vision.hpp"

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

using detail::i64;
using detail::tensor;
using detail::u64;
using detail::walker;

/// cuBLAS workspace per (handle, stream), taken from PyTorch's caching allocator at the first
/// GEMM of a thread: 32 MiB on Hopper and newer (aten/src/ATen/cuda/CublasHandlePool.cpp,
/// 4096 * 8 * 1024 bytes). The H200 ground-truth allocation trace shows exactly two persistent
/// 32 MiB blocks in a training step (forward thread, autograd thread).
constexpr u64 k_cublas_workspace = 32ull << 20;

/// Weights on this GPU: ZeRO-3 shards them (the gathered layer is a transient, see
/// train_steps); pipeline stages hold their layers only; inference weights may be quantised.
void place_weights(walker& w, const std::vector<parameter_tensor>& params) {
  const auto& m = w.model();
  const auto& r = w.request();
  const double pshard = r.mode == run_mode::train ? detail::zero_shard(3, r) : 1.0;
  const i64 layers_here = m.is_vision() ? 1 << 30 : m.t.layers / r.pp;
  w.set_phase(phase::setup);
  for (int i = 0; i < static_cast<int>(params.size()); ++i) {
    if (!m.is_vision() && params[i].layer >= layers_here) w.set_param_elems(i, 0);
    u64 bytes;
    if (r.mode == run_mode::infer) {
      bytes = detail::inference_weight_bytes(w, i, params[i]);
    } else if (r.offload == offload_kind::params) {
      bytes = 0;
    } else if (r.quant == quant_kind::nf4 && params[i].layer >= 0 &&
               params[i].name.find("norm") == std::string::npos &&
               !is_bias_parameter(params[i].name)) {
      // QLoRA base: bitsandbytes NF4, blocks of 64 with a double-quantised absmax (0.5 byte +
      // one byte per 64 + an fp32 scale per 256 absmax blocks).
      const u64 e = w.param_elems(i);
      bytes = e / 2 + e / 64 + e / (64ull * 256) * 4;
    } else {
      bytes = static_cast<u64>(std::ceil(static_cast<double>(w.param_elems(i)) * pshard)) *
              static_cast<u64>(w.dt().param);
    }
    w.set_param_tensor(i, w.keep(bytes, component::weights, "weights"));
  }
  w.place_adapters();
  if (const u64 buf = buffer_bytes(m)) w.keep(buf, component::weights, "buffers");
  w.keep(k_cublas_workspace, component::workspace, "cuBLAS workspace");
}

tensor forward_loss(walker& w) {
  switch (w.model().family) {
    case model_family::resnet:
      return detail::resnet_forward_loss(w);
    case model_family::vit:
      return detail::vit_forward_loss(w);
    case model_family::hf_vit:
      return detail::hf_vit_forward_loss(w);
    case model_family::t5:
      return detail::t5_forward_loss(w);
    default:
      return detail::lm_forward_loss(w);
  }
}

/// Communication and sharding buffers of a data-parallel step, in bytes.
struct comm_buffers {
  u64 ddp_buckets = 0;   ///< DDP's gradient buckets covering all parameters
  u64 zero_bucket = 0;   ///< ZeRO's reduce bucket
  u64 zero3_gather = 0;  ///< ZeRO-3 / FSDP: the current and the prefetched layer, gathered
};

comm_buffers comm_buffers_of(const walker& w, const std::vector<parameter_tensor>& params) {
  const auto& r = w.request();
  const int dp = r.data_parallel();
  u64 total_elems = 0, total_bytes = 0, largest_layer = 0;
  std::vector<u64> per_layer;
  // Buckets hold the gradients of the trainable parameters (the LoRA adapters, under LoRA).
  for (int i = 0; i < w.param_count(); ++i) {
    if (!w.trainable(i)) continue;
    total_elems += w.param_elems(i);
    total_bytes += w.param_elems(i) * static_cast<u64>(w.param_width(i));
  }
  for (int i = 0; i < static_cast<int>(params.size()); ++i) {
    if (params[i].layer >= 0) {
      if (per_layer.size() <= static_cast<std::size_t>(params[i].layer))
        per_layer.resize(params[i].layer + 1, 0);
      per_layer[params[i].layer] += w.param_elems(i);
    }
  }
  for (u64 v : per_layer) largest_layer = std::max(largest_layer, v);
  comm_buffers c;
  if (dp > 1 && r.zero == 0) c.ddp_buckets = total_bytes;
  // DeepSpeed's default reduce_bucket_size is 5e8 elements (2-byte gradients).
  // With offload the bucket exists on one GPU too: gradients reach the host through it.
  if ((dp > 1 && r.zero >= 1) || r.offload != offload_kind::none)
    c.zero_bucket = std::min<u64>(total_elems, 500000000ull) * 2;
  if (dp > 1 && r.zero >= 3) c.zero3_gather = 2 * largest_layer * static_cast<u64>(w.dt().param);
  return c;
}

/// The training steps: per step, groups of micro-batches (1F1B: the first pipeline stage holds
/// min(pp, micro-batches) forwards before their backwards), backward, optimizer step, zero_grad.
void train_steps(walker& w, const std::vector<parameter_tensor>& params, schedule& s,
                 schedule_observer* observer) {
  const auto& r = w.request();
  w.set_layer_forward(&detail::transformer_block);
  const i64 accum = (r.batch / r.data_parallel()) / r.micro_batch;
  const comm_buffers cb = comm_buffers_of(w, params);
  bool ddp_buckets_made = false;
  const i64 inflight = std::max<i64>(1, std::min<i64>(r.pp, accum));
  const i64 groups = (accum + inflight - 1) / inflight;
  const bool partial_last = accum % inflight != 0;
  for (int step = 0; step < r.steps; ++step) {
    w.set_step(step);
    for (i64 g = 0; g < groups; ++g) {
      const i64 mb = g * inflight;
      std::vector<tensor> losses;
      tensor gathered;
      if (cb.zero3_gather)
        gathered = w.alloc(cb.zero3_gather, component::weights, "ZeRO-3 gathered layers");
      for (i64 k = 0; k < inflight && mb + k < accum; ++k) losses.push_back(forward_loss(w));
      if (observer != nullptr && observer->stop(s)) return;
      // Communication buffers live through backward: DDP copies gradients into buckets
      // covering all parameters (gradient_as_bucket_view=False); ZeRO reduces through one
      // bucket of reduce_bucket_size elements.
      if (cb.ddp_buckets && !ddp_buckets_made) {
        ddp_buckets_made = true;
        w.keep(cb.ddp_buckets, component::gradients, "DDP gradient buckets");
      }
      tensor bucket;
      if (cb.zero_bucket)
        bucket = w.alloc(cb.zero_bucket, component::temporaries, "ZeRO reduce bucket");
      w.backward(losses);
      if (observer != nullptr && observer->stop(s)) return;
      bucket.reset();
      gathered.reset();
      for (auto& loss : losses) loss.reset();
      // Groups after the first repeat the same events (gradients exist and accumulate) unless
      // the last one is partial.
      const bool full = !(partial_last && g == groups - 1);
      if (observer != nullptr && g + 1 < groups && observer->repeat_point(s, 1, g >= 1 && full))
        g = partial_last ? groups - 2 : groups - 1;  // on to the partial group, or done
    }
    // ZeRO-2/3: gradients are reduce-scattered; each rank keeps its shard (modelled as the
    // full gradients shrinking to the shard after backward).
    detail::optimizer_step(w);
    if (observer != nullptr && observer->stop(s)) return;
    w.zero_grad();
    // Steps after the first repeat the same events (optimizer states exist).
    if (observer != nullptr && step + 1 < r.steps && observer->repeat_point(s, 0, step >= 1)) break;
  }
}

}  // namespace

void build_schedule(const model_description& m, const plan_request& r, schedule& s,
                    schedule_observer* observer) {
  s.tensors.clear();
  s.events.clear();
  s.steps = 0;
  s.managed_bytes = 0;
  s.trainable_parameters = 0;
  // About 60 tensors per transformer layer and step; reserving avoids regrowth.
  const std::size_t guess =
      64 * static_cast<std::size_t>(m.is_vision() ? 64 : m.t.layers + 4) * (r.steps + 1);
  s.tensors.reserve(guess);
  s.events.reserve(2 * guess);
  walker w(m, r, s);
  w.setup_params();
  const auto params = parameter_tensors(m);
  place_weights(w, params);
  if (r.mode == run_mode::infer) {
    if (m.is_vision()) {
      // Vision inference: the forward without saving, batch as given.
      w.set_grad(false);
      forward_loss(w);
    } else if (m.family == model_family::t5) {
      detail::t5_generate(w);
    } else if (m.family == model_family::bert) {
      // An encoder's inference: one forward without saving, the logits made and dropped.
      w.set_grad(false);
      detail::lm_forward_loss(w, false);
    } else {
      detail::generate(w);
    }
    s.steps = 1;
    return;
  }
  train_steps(w, params, s, observer);
  s.steps = r.steps;
}

schedule build_schedule(const model_description& m, const plan_request& r) {
  schedule s;
  build_schedule(m, r, s, nullptr);
  return s;
}

}  // namespace vramkit::plan
