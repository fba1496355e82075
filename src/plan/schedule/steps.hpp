// The parts of a schedule outside the model's forward: the optimizer step and inference
// (transformers' generate(), or a paged serving engine).
#pragma once

#include "walker.hpp"

namespace vramkit::plan::detail {

/// Shard factor of optimizer states / gradients / parameters on this rank under ZeRO.
double zero_shard(int stage_needed, const plan_request& r);

/// optimizer.step(): lazily created states at the first step, the update's temporaries.
void optimizer_step(walker& w);

/// One parameter's step from its post-accumulate-grad hook (optimizer in backward): its states
/// at the first step, the single-tensor update's temporaries.
void optimizer_param_step(walker& w, int p);

/// Bytes of parameter `i` as stored for inference (quantised matrices with their scales).
u64 inference_weight_bytes(const walker& w, int i, const parameter_tensor& p);

/// A generate() call (prefill, then decode steps) of a language model.
void generate(walker& w);

/// T5: the forward and loss of one micro-batch (encoder, decoder, head); generate() (the encoder
/// once, then decode steps with self- and cross-attention caches).
tensor t5_forward_loss(walker& w);
void t5_generate(walker& w);

}  // namespace vramkit::plan::detail
