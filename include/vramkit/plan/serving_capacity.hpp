// Serving capacity as a vLLM-style engine computes it: the KV-cache budget left in
// gpu_memory_utilization x GPU memory after the weights, the activation peak of a profile forward
// over the largest prefill chunk (max_num_batched_tokens, chunked prefill) and the memory outside
// PyTorch, split into paged blocks of block_size tokens; then how many sequences of a context
// fit, and how long a context fits at a concurrency. CUDA graphs are captured after the KV cache
// is allocated, from the headroom the utilisation leaves. Pure; thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "vramkit/plan/device_overheads.hpp"
#include "vramkit/plan/model_description.hpp"
#include "vramkit/plan/plan_request.hpp"

namespace vramkit::plan {

/// The engine's settings (vLLM's names and defaults).
struct serve_options {
  double gpu_memory_utilization = 0.9;  ///< fraction of the GPU the engine may use, (0, 1]
  std::int64_t max_model_len = 0;       ///< context per sequence; 0 = max_position_embeddings
  std::int64_t max_num_seqs = 256;      ///< scheduler cap on concurrent sequences
  std::int64_t max_num_batched_tokens = 8192;  ///< the largest prefill chunk (profile run size)
  std::int64_t block_size = 16;                ///< tokens per KV block
  std::int64_t concurrency = 0;  ///< also answer the longest context at this many sequences
  bool enforce_eager = false;    ///< no CUDA graphs
};

/// What fits. Byte figures are per GPU (tensor parallel splits the KV heads and the weights).
struct serve_result {
  std::string model;
  plan_request request;  ///< the inference request the profile forward was planned with
  serve_options options;
  std::uint64_t capacity_bytes = 0;
  std::uint64_t budget_bytes = 0;           ///< gpu_memory_utilization x capacity
  std::uint64_t weights_bytes = 0;          ///< as loaded (quantised where asked)
  std::uint64_t activation_peak_bytes = 0;  ///< profile forward's allocated peak beyond weights
  std::uint64_t non_torch_bytes = 0;        ///< lazily loaded kernels, NCCL buffers (tp > 1)
  std::uint64_t kv_cache_bytes = 0;         ///< budget left for KV blocks (0 when none is)
  std::uint64_t block_bytes = 0;            ///< one block of every layer, K and V
  std::uint64_t num_blocks = 0;
  std::uint64_t cuda_graph_bytes = 0;       ///< estimated graph pool, outside the budget
  std::uint64_t context_bytes = 0;          ///< CUDA context, outside the budget
  std::int64_t max_model_len = 0;           ///< the context asked about
  std::uint64_t kv_bytes_per_sequence = 0;  ///< at max_model_len (sliding layers hold windows)
  std::int64_t max_concurrency = 0;         ///< sequences of max_model_len the blocks hold
  double vllm_concurrency = 0;              ///< vLLM's log line: cache tokens / max_model_len
  std::int64_t max_context = 0;             ///< longest context at options.concurrency (0: none)
  /// True when the weights and activations leave room for at least one full-length sequence and
  /// the context and graphs fit the headroom the utilisation leaves.
  bool fits = false;
  std::string why;  ///< when it does not fit: what does not
};

/// Plans serving `m` on one replica of `base.tp` GPUs with `capacity_bytes` each. `base` gives
/// the precision, quantisation, KV-cache dtype and tensor parallelism (mode infer). Throws
/// invalid_input for an unusable option (utilisation outside (0, 1], a model without a KV
/// cache, a zero capacity).
serve_result plan_serving(const model_description& m, const plan_request& base,
                          const serve_options& opt, std::uint64_t capacity_bytes,
                          const device_overheads& o = default_overheads());

/// One JSON object (schema_version 1) with every figure and the options echoed.
std::string to_json(const serve_result& r);

/// The answer for people: the budget split, blocks, concurrency and context.
std::string to_table(const serve_result& r);

}  // namespace vramkit::plan
