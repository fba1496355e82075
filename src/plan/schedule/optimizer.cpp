// optimizer.step() as torch.optim and bitsandbytes run it: states created per parameter at the
// first step (Adam's _init_group, SGD momentum buffers, bitsandbytes' 8-bit blockwise states),
// the foreach temporaries of the multi-tensor Adam; trainable parameters only.
#include <cmath>

#include "steps.hpp"

namespace vramkit::plan::detail {

double zero_shard(int stage_needed, const plan_request& r) {
  return r.zero >= stage_needed ? 1.0 / r.data_parallel() : 1.0;
}

namespace {

bool two_states(optimizer_kind o) {
  return o == optimizer_kind::adam || o == optimizer_kind::adamw ||
         o == optimizer_kind::adamw_fused || o == optimizer_kind::adamw_8bit ||
         o == optimizer_kind::paged_adamw_8bit;
}

bool eight_bit(optimizer_kind o) {
  return o == optimizer_kind::adamw_8bit || o == optimizer_kind::paged_adamw_8bit;
}

u64 sharded(const walker& w, int i, int elem_bytes) {
  const double os = zero_shard(1, w.request());
  return static_cast<u64>(std::ceil(static_cast<double>(w.param_elems(i)) * os)) *
         static_cast<u64>(elem_bytes);
}

/// bitsandbytes Optimizer2State.init_state: parameters under min_8bit_size (4096) keep two fp32
/// states; larger ones two uint8 states and two fp32 absmax vectors (one per block of 256).
/// Paged, the uint8 states of parameters of 1e5 elements or more live in managed memory.
void init_8bit_states(walker& w, int i) {
  const auto& r = w.request();
  const u64 n = sharded(w, i, 1);
  if (n < 4096) {
    w.set_state(i, 0, w.keep(n * 4, component::optimizer_states, "optimizer state (fp32)"));
    w.set_state(i, 1, w.keep(n * 4, component::optimizer_states, "optimizer state (fp32)"));
    return;
  }
  const bool paged = r.optimizer == optimizer_kind::paged_adamw_8bit && n >= 100000;
  for (int s = 0; s < 2; ++s) {
    if (paged)
      w.add_managed(n);
    else
      w.set_state(i, s, w.keep(n, component::optimizer_states, "optimizer state (8-bit)"));
  }
  const u64 blocks = (n + 255) / 256;
  const int a = w.keep(blocks * 4, component::optimizer_states, "optimizer absmax (8-bit)");
  w.keep(blocks * 4, component::optimizer_states, "optimizer absmax (8-bit)");
  // The state slots only mark "created"; paged states are not in the caching allocator.
  if (paged) w.set_state(i, 0, a), w.set_state(i, 1, a);
}

/// Creates parameter i's states if this is its first step.
void init_states(walker& w, int i) {
  const auto o = w.request().optimizer;
  if (w.has_state(i, 0)) return;
  if (eight_bit(o)) return init_8bit_states(w, i);
  const int sb = w.param_width(i);
  // Adam's _init_group creates exp_avg and exp_avg_sq per parameter, in parameter order; SGD
  // momentum clones the gradient.
  if (two_states(o) || o == optimizer_kind::sgd_momentum)
    w.set_state(
        i, 0,
        w.keep(sharded(w, i, sb), component::optimizer_states, "optimizer state (first moment)"));
  if (two_states(o))
    w.set_state(
        i, 1,
        w.keep(sharded(w, i, sb), component::optimizer_states, "optimizer state (second moment)"));
}

/// The multi-tensor (foreach) Adam makes exp_avg_sq_sqrt = torch._foreach_sqrt(exp_avg_sqs), a
/// full-size list of temporaries; the fused and the 8-bit kernels update in place.
bool sqrt_temporaries(optimizer_kind o) {
  return o == optimizer_kind::adam || o == optimizer_kind::adamw;
}

}  // namespace

void optimizer_step(walker& w) {
  w.set_phase(phase::optimizer);
  w.set_layer(-1);
  const auto& r = w.request();
  const int n = w.param_count();
  // GradScaler.unscale_ works in place; its found_inf flags are tiny.
  if (r.prec == precision::amp_fp16) w.transient(512, component::temporaries, "found_inf");
  // Offloaded: states and the update live in host memory; the device sees the gradient
  // copy-out only. Stepped in backward: nothing is left to do.
  if (r.offload != offload_kind::none || r.optimizer_in_backward) return;
  for (int i = 0; i < n; ++i)
    if (w.trainable(i)) init_states(w, i);
  if (sqrt_temporaries(r.optimizer)) {
    std::vector<tensor> tmp(n);
    for (int i = 0; i < n; ++i)
      if (w.trainable(i))
        tmp[i] = w.alloc(sharded(w, i, w.param_width(i)), component::temporaries,
                         "adam sqrt temporaries");
    for (auto& t : tmp) t.reset();
  }
}

void optimizer_param_step(walker& w, int p) {
  w.set_phase(phase::optimizer);
  init_states(w, p);
  if (sqrt_temporaries(w.request().optimizer))
    w.transient(sharded(w, p, w.param_width(p)), component::temporaries, "adam sqrt temporary");
}

}  // namespace vramkit::plan::detail
