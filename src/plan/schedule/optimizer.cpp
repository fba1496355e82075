// optimizer.step() as torch.optim runs it: states created per parameter at the first step
// (Adam's _init_group, SGD momentum buffers), the foreach temporaries of the multi-tensor Adam.
#include <cmath>

#include "steps.hpp"

namespace vramkit::plan::detail {

double zero_shard(int stage_needed, const plan_request& r) {
  return r.zero >= stage_needed ? 1.0 / r.data_parallel() : 1.0;
}

void optimizer_step(walker& w) {
  w.set_phase(phase::optimizer);
  w.set_layer(-1);
  const auto& r = w.request();
  const int n = w.param_count();
  const int sb = r.optimizer == optimizer_kind::adamw_8bit ? 1 : w.dt().param;
  const double os = zero_shard(1, r);
  auto sharded = [&](int i, int elem_bytes) {
    return static_cast<u64>(std::ceil(static_cast<double>(w.param_elems(i)) * os)) *
           static_cast<u64>(elem_bytes);
  };
  // GradScaler.unscale_ works in place; its found_inf flags are tiny.
  if (r.prec == precision::amp_fp16) w.transient(512, component::temporaries, "found_inf");
  // Offloaded: states and the update live in host memory; the device sees the gradient
  // copy-out only.
  if (r.offload != offload_kind::none) return;
  const bool two_states = r.optimizer == optimizer_kind::adam ||
                          r.optimizer == optimizer_kind::adamw ||
                          r.optimizer == optimizer_kind::adamw_8bit;
  const bool one_state = r.optimizer == optimizer_kind::sgd_momentum;
  // Adam's _init_group creates exp_avg and exp_avg_sq per parameter, in parameter order; SGD
  // momentum clones the gradient.
  for (int i = 0; i < n; ++i) {
    if ((two_states || one_state) && !w.has_state(i, 0))
      w.set_state(
          i, 0,
          w.keep(sharded(i, sb), component::optimizer_states, "optimizer state (first moment)"));
    if (two_states && !w.has_state(i, 1))
      w.set_state(
          i, 1,
          w.keep(sharded(i, sb), component::optimizer_states, "optimizer state (second moment)"));
  }
  if (two_states && r.optimizer != optimizer_kind::adamw_8bit) {
    // _multi_tensor_adam: exp_avg_sq_sqrt = torch._foreach_sqrt(exp_avg_sqs) is one full-size
    // list of temporaries; Adam with weight decay would add a gradient copy (default wd = 0).
    std::vector<tensor> tmp(n);
    for (int i = 0; i < n; ++i)
      tmp[i] = w.alloc(sharded(i, w.dt().param), component::temporaries, "adam sqrt temporaries");
    for (auto& t : tmp) t.reset();
  }
}

}  // namespace vramkit::plan::detail
