// plan_serving: vLLM's memory split (weights, profile peak, memory outside PyTorch, KV blocks)
// computed from the walker's inference schedule, then the block arithmetic of a paged cache.
#include "vramkit/plan/serving_capacity.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "vramkit/core/error.hpp"
#include "vramkit/core/units.hpp"
#include "vramkit/plan/memory_model.hpp"

namespace vramkit::plan {

namespace {

/// Bytes of one token's K and V in layer l on one GPU (latent attention: the compressed latent
/// and the rotary key, one tensor).
std::uint64_t kv_token_bytes(const model_description& m, const plan_request& r) {
  const auto& t = m.t;
  const std::uint64_t elem =
      r.kv_cache == kv_cache_kind::fp8 ? 1 : (r.prec == precision::fp32 ? 4 : 2);
  if (t.latent_attention())
    return static_cast<std::uint64_t>(t.mla.kv_lora_rank + t.mla.qk_rope) * elem;
  const auto kv = static_cast<std::uint64_t>(std::max<std::int64_t>(1, t.kv_heads / r.tp));
  return 2 * kv * static_cast<std::uint64_t>(t.head_dim) * elem;
}

/// KV bytes one sequence of `ctx` tokens holds: whole blocks per layer, a sliding-window layer
/// only its window's.
std::uint64_t sequence_bytes(const model_description& m, const plan_request& r, std::int64_t ctx,
                             std::int64_t block) {
  const auto& t = m.t;
  const std::uint64_t per = kv_token_bytes(m, r);
  std::uint64_t bytes = 0;
  const std::int64_t layers = t.layers / r.pp;
  for (std::int64_t l = 0; l < layers; ++l) {
    const std::int64_t tokens = t.sliding(l) ? std::min(ctx, t.sliding_window) : ctx;
    bytes += static_cast<std::uint64_t>((tokens + block - 1) / block * block) * per;
  }
  return bytes;
}

/// Allocated bytes of one forward over `tokens` tokens beyond the weights and KV blocks: what
/// the engine's profile run (or a captured graph of that many tokens) adds to the weights.
std::uint64_t forward_peak(const model_description& m, const plan_request& base,
                           std::int64_t tokens, const device_overheads& o, std::uint64_t* weights) {
  plan_request r = base;
  r.mode = run_mode::infer;
  r.serving = serving_kind::paged;
  r.batch = 1;
  r.prompt = tokens;
  r.new_tokens = 1;
  r.device_capacity_bytes = 0;
  const plan_result p = make_plan(m, r, o);
  std::uint64_t w = 0, kv = 0;
  for (const auto& c : p.components) {
    if (c.name == to_string(component::weights)) w = c.bytes;
    if (c.name == to_string(component::kv_cache)) kv = c.bytes;
  }
  if (weights != nullptr) *weights = w;
  return p.allocated_peak_bytes - std::min(p.allocated_peak_bytes, w + kv);
}

}  // namespace

serve_result plan_serving(const model_description& m, const plan_request& base,
                          const serve_options& opt, std::uint64_t capacity_bytes,
                          const device_overheads& o) {
  if (capacity_bytes == 0) throw invalid_input("--serve needs --gpu NAME or a capacity");
  if (!(opt.gpu_memory_utilization > 0 && opt.gpu_memory_utilization <= 1))
    throw invalid_input(
        fmt::format("--gpu-memory-utilization {} must be in (0, 1]", opt.gpu_memory_utilization));
  if (m.is_vision() || m.family == model_family::bert)
    throw invalid_input("--serve plans a KV cache; " + m.name + " has none");
  if (m.family == model_family::t5)
    throw invalid_input("--serve plans decoder-only models; " + m.name + " is an encoder-decoder");
  if (opt.block_size < 1 || opt.block_size > 1024)
    throw invalid_input(fmt::format("block size {} must be in [1, 1024]", opt.block_size));
  if (opt.max_num_seqs < 1 || opt.max_num_seqs > 1 << 20)
    throw invalid_input(
        fmt::format("--max-num-seqs {} must be in [1, {}]", opt.max_num_seqs, 1 << 20));
  if (opt.max_num_batched_tokens < 1 || opt.max_num_batched_tokens > 1 << 22)
    throw invalid_input(fmt::format("--max-num-batched-tokens {} must be in [1, {}]",
                                    opt.max_num_batched_tokens, 1 << 22));
  if (opt.concurrency < 0 || opt.concurrency > 1 << 20)
    throw invalid_input(
        fmt::format("--concurrency {} must be in [0, {}]", opt.concurrency, 1 << 20));
  serve_result s;
  s.model = m.name;
  s.options = opt;
  s.capacity_bytes = capacity_bytes;
  const auto& t = m.t;
  const std::int64_t limit = t.max_context > 0 ? t.max_context : 1 << 24;
  s.max_model_len = opt.max_model_len > 0 ? opt.max_model_len : limit;
  if (s.max_model_len < 1 || s.max_model_len > limit)
    throw invalid_input(fmt::format(
        "--max-model-len {} must be in [1, {}] (max_position_embeddings)", s.max_model_len, limit));
  plan_request r = base;
  r.mode = run_mode::infer;
  r.serving = serving_kind::paged;
  r.batch = 1;
  r.prompt = std::min(opt.max_num_batched_tokens, s.max_model_len);
  r.new_tokens = 1;
  r.validate(m);
  s.request = r;
  // The profile run: the largest prefill chunk, then the sampler over max_num_seqs rows (fp32
  // logits and probabilities), one after the other.
  const std::uint64_t fwd = forward_peak(m, r, r.prompt, o, &s.weights_bytes);
  const std::uint64_t sampler =
      static_cast<std::uint64_t>(std::min(opt.max_num_seqs, opt.max_num_batched_tokens)) *
      static_cast<std::uint64_t>(t.vocab) * 4 * 2;
  s.activation_peak_bytes = std::max(fwd, sampler);
  s.non_torch_bytes = o.infer_modules_bytes + (r.tp > 1 ? o.collective_bytes : 0);
  s.context_bytes = o.context_bytes;
  s.budget_bytes =
      static_cast<std::uint64_t>(static_cast<double>(capacity_bytes) * opt.gpu_memory_utilization);
  const std::uint64_t used = s.weights_bytes + s.activation_peak_bytes + s.non_torch_bytes;
  s.kv_cache_bytes = s.budget_bytes > used ? s.budget_bytes - used : 0;
  const std::uint64_t per_token =
      kv_token_bytes(m, r) * static_cast<std::uint64_t>(t.layers / r.pp);
  s.block_bytes = per_token * static_cast<std::uint64_t>(opt.block_size);
  s.num_blocks = s.block_bytes > 0 ? s.kv_cache_bytes / s.block_bytes : 0;
  s.kv_bytes_per_sequence = sequence_bytes(m, r, s.max_model_len, opt.block_size);
  const auto raw = static_cast<std::int64_t>(s.kv_cache_bytes /
                                             std::max<std::uint64_t>(1, s.kv_bytes_per_sequence));
  s.max_concurrency = std::min(raw, opt.max_num_seqs);
  s.vllm_concurrency = static_cast<double>(s.kv_cache_bytes) /
                       static_cast<double>(std::max<std::uint64_t>(1, s.kv_bytes_per_sequence));
  if (opt.concurrency > 0) {
    // The longest context whose blocks for `concurrency` sequences fit (bisection: bytes grow
    // with the context).
    std::int64_t lo = 0, hi = limit;
    while (lo < hi) {
      const std::int64_t mid = lo + (hi - lo + 1) / 2;
      if (static_cast<std::uint64_t>(opt.concurrency) * sequence_bytes(m, r, mid, opt.block_size) <=
          s.kv_cache_bytes)
        lo = mid;
      else
        hi = mid - 1;
    }
    s.max_context = lo;
  }
  if (!opt.enforce_eager) {
    // Graphs are captured for decode batches up to min(max_num_seqs, 512); the pool holds about
    // one forward of the largest of them.
    const std::int64_t capture = std::min<std::int64_t>(opt.max_num_seqs, 512);
    s.cuda_graph_bytes = forward_peak(m, r, std::min(capture, s.max_model_len), o, nullptr);
  }
  const std::uint64_t headroom = capacity_bytes - s.budget_bytes;
  if (used >= s.budget_bytes) {
    s.why =
        fmt::format("weights {} and the profile peak {} exceed {} x {}",
                    format_bytes(static_cast<double>(s.weights_bytes)),
                    format_bytes(static_cast<double>(s.activation_peak_bytes)),
                    opt.gpu_memory_utilization, format_bytes(static_cast<double>(capacity_bytes)));
  } else if (raw < 1) {
    s.why = fmt::format(
        "one sequence of {} tokens needs {} of KV blocks, {} are left (give a smaller "
        "--max-model-len, --kv-cache-dtype fp8, --quant or more --tp)",
        s.max_model_len, format_bytes(static_cast<double>(s.kv_bytes_per_sequence)),
        format_bytes(static_cast<double>(s.kv_cache_bytes)));
  } else if (s.context_bytes + s.cuda_graph_bytes > headroom) {
    s.why = fmt::format(
        "the CUDA context ({}) and graphs ({}) do not fit the {} that utilisation {} leaves "
        "(lower --gpu-memory-utilization or give --enforce-eager)",
        format_bytes(static_cast<double>(s.context_bytes)),
        format_bytes(static_cast<double>(s.cuda_graph_bytes)),
        format_bytes(static_cast<double>(headroom)), opt.gpu_memory_utilization);
  } else {
    s.fits = true;
  }
  return s;
}

std::string to_json(const serve_result& s) {
  nlohmann::ordered_json j = {
      {"schema_version", plan_schema_version},
      {"model", s.model},
      {"capacity_bytes", s.capacity_bytes},
      {"gpu_memory_utilization", s.options.gpu_memory_utilization},
      {"budget_bytes", s.budget_bytes},
      {"weights_bytes", s.weights_bytes},
      {"activation_peak_bytes", s.activation_peak_bytes},
      {"non_torch_bytes", s.non_torch_bytes},
      {"kv_cache_bytes", s.kv_cache_bytes},
      {"block_size", s.options.block_size},
      {"block_bytes", s.block_bytes},
      {"num_blocks", s.num_blocks},
      {"kv_bytes_per_sequence", s.kv_bytes_per_sequence},
      {"max_model_len", s.max_model_len},
      {"max_num_seqs", s.options.max_num_seqs},
      {"max_num_batched_tokens", s.options.max_num_batched_tokens},
      {"max_concurrency", s.max_concurrency},
      {"vllm_concurrency", s.vllm_concurrency},
      {"concurrency", s.options.concurrency},
      {"max_context", s.max_context},
      {"cuda_graph_bytes", s.cuda_graph_bytes},
      {"context_bytes", s.context_bytes},
      {"kv_cache_dtype", to_string(s.request.kv_cache)},
      {"precision", to_string(s.request.prec)},
      {"quant", to_string(s.request.quant)},
      {"tp", s.request.tp},
      {"fits", s.fits},
  };
  if (!s.fits) j["why"] = s.why;
  return j.dump(2);
}

std::string to_table(const serve_result& s) {
  auto b = [](std::uint64_t v) { return format_bytes(static_cast<double>(v)); };
  const auto& r = s.request;
  std::string out = fmt::format(
      "vramkit plan --serve: {} on {} per GPU (tp {}), {} weights{}, KV cache {}\n", s.model,
      b(s.capacity_bytes), r.tp, to_string(r.prec),
      r.quant == quant_kind::none ? "" : std::string(" quantised ") + to_string(r.quant),
      r.kv_cache == kv_cache_kind::fp8 ? "fp8" : "in the model dtype");
  out += fmt::format(
      "  {:<56} {:>12}\n",
      fmt::format("budget: gpu_memory_utilization {} x GPU", s.options.gpu_memory_utilization),
      b(s.budget_bytes));
  out += fmt::format("  {:<56} {:>12}\n", "  weights", b(s.weights_bytes));
  out += fmt::format("  {:<56} {:>12}\n",
                     fmt::format("  profile peak ({}-token prefill chunk, sampler of {})", r.prompt,
                                 s.options.max_num_seqs),
                     b(s.activation_peak_bytes));
  out +=
      fmt::format("  {:<56} {:>12}\n", "  outside PyTorch (kernels, NCCL)", b(s.non_torch_bytes));
  out += fmt::format("  {:<56} {:>12}\n", "  KV cache", b(s.kv_cache_bytes));
  out += fmt::format("  {:<56} {:>12}\n",
                     fmt::format("    blocks of {} tokens ({} each, all layers)",
                                 s.options.block_size, b(s.block_bytes)),
                     s.num_blocks);
  out += fmt::format("  {:<56} {:>12}\n", "outside the budget: CUDA context", b(s.context_bytes));
  out += fmt::format("  {:<56} {:>12}\n",
                     s.options.enforce_eager ? "outside the budget: CUDA graphs (--enforce-eager)"
                                             : "outside the budget: CUDA graphs (estimate)",
                     b(s.cuda_graph_bytes));
  out += "\n";
  out += fmt::format("  max concurrent sequences of {} tokens: {}", s.max_model_len,
                     s.max_concurrency);
  if (s.max_concurrency == s.options.max_num_seqs)
    out += fmt::format(" (--max-num-seqs caps it; the blocks hold {:.1f})", s.vllm_concurrency);
  else
    out += fmt::format(" ({:.2f}x, vLLM's 'maximum concurrency')", s.vllm_concurrency);
  out += fmt::format("\n  KV bytes per sequence of {} tokens: {}\n", s.max_model_len,
                     b(s.kv_bytes_per_sequence));
  if (s.options.concurrency > 0)
    out += fmt::format("  longest context at {} concurrent sequences: {} tokens\n",
                       s.options.concurrency, s.max_context);
  out += s.fits ? "\n  fits\n" : "\n  does NOT fit: " + s.why + "\n";
  return out;
}

}  // namespace vramkit::plan
