// The fit search: every returned configuration fits, ranks are by cost, and impossible targets
// return nothing.
#include <gtest/gtest.h>

#include <cstdint>

#include "vramkit/core/error.hpp"
#include "vramkit/core/units.hpp"
#include "vramkit/plan/config_loader.hpp"
#include "vramkit/plan/fit_search.hpp"
#include "vramkit/plan/gpu_catalogue.hpp"

using namespace vramkit::plan;
using vramkit::GiB;

namespace {

/// A training request of batch x seq on `gpus` GPUs (micro-batch the whole per-GPU batch).
plan_request train(std::int64_t batch, std::int64_t seq, int gpus = 1,
                   precision prec = precision::automatic) {
  plan_request r;
  r.batch = batch;
  r.seq = seq;
  r.gpus = gpus;
  if (prec != precision::automatic) r.prec = prec;
  return r;
}

/// Fit options for a catalogue GPU, with its whole memory unless a capacity is given.
fit_options on_gpu(const char* name, std::uint64_t capacity = 0) {
  fit_options opt;
  opt.gpu = find_gpu(name);
  opt.capacity_bytes = capacity != 0 ? capacity : opt.gpu->memory_bytes;
  return opt;
}

}  // namespace

TEST(GpuCatalogue, KnowsCommonGpusWithSources) {
  EXPECT_EQ(find_gpu("h200").name, "H200");
  EXPECT_EQ(find_gpu("A100 80GB").memory_bytes, 81920ull * 1024 * 1024);
  EXPECT_EQ(find_gpu("rtx-4090").name, "RTX 4090");
  for (const auto& g : gpu_catalogue()) {
    EXPECT_FALSE(g.source.empty()) << g.name;
    EXPECT_GT(g.memory_bytes, 8 * GiB) << g.name;
    EXPECT_GT(g.pcie_bytes_per_s(), 1e10) << g.name;
  }
  EXPECT_THROW(find_gpu("voodoo2"), vramkit::invalid_input);
}

TEST(FitSearch, ReturnsConfigurationsThatFitRankedByCost) {
  const auto m = preset_model("gpt2-medium");
  const auto r = train(32, 1024);
  const auto opt = on_gpu("rtx4090");
  const auto res = fit_search(m, r, opt);
  ASSERT_FALSE(res.fits.empty());
  EXPECT_GT(res.planned, res.fits.size());
  for (std::size_t i = 0; i < res.fits.size(); ++i) {
    const auto& c = res.fits[i];
    EXPECT_LE(c.device_peak_bytes, opt.capacity_bytes);
    EXPECT_FALSE(c.reasons.empty());
    // Each candidate, re-planned, really fits.
    EXPECT_EQ(make_plan(m, c.request).device_peak_bytes, c.device_peak_bytes);
    // The cheapest comes first; within one method (full fine-tune per optimizer, LoRA per rank,
    // QLoRA) candidates come cheapest first, the first of each method ahead of the others.
    EXPECT_LE(res.fits.front().step_time_s, c.step_time_s);
    for (std::size_t j = 0; j < i; ++j) {
      const auto& a = res.fits[j].request;
      const auto& q = c.request;
      if (a.lora_rank == q.lora_rank && a.quant == q.quant && a.optimizer == q.optimizer &&
          a.optimizer_in_backward == q.optimizer_in_backward)
        EXPECT_LE(res.fits[j].step_time_s, c.step_time_s);
    }
  }
  // The whole batch of 32 x 1024 tokens cannot run at once on 24 GB in fp32 without help.
  const auto& best = res.fits.front().request;
  EXPECT_TRUE(best.micro_batch < 32 || best.prec != precision::fp32 ||
              best.ckpt != checkpointing::none);
}

TEST(FitSearch, NothingFitsATinyGpu) {
  const auto m = preset_model("llama-2-7b");
  const auto r = train(8, 2048);
  fit_options opt;
  opt.capacity_bytes = 4 * GiB;
  EXPECT_TRUE(fit_search(m, r, opt).fits.empty());
}

TEST(FitSearch, MultiGpuUsesSharding) {
  const auto m = preset_model("llama-2-7b");
  const auto r = train(16, 2048, 8);
  const auto opt = on_gpu("a100-40gb");
  const auto res = fit_search(m, r, opt);
  ASSERT_FALSE(res.fits.empty());
  for (const auto& c : res.fits) {
    // 16 bytes/parameter of replicated AdamW state alone exceed 40 GB: every fit shards, splits or
    // offloads.
    const auto& q = c.request;
    EXPECT_TRUE(q.zero > 0 || q.tp > 1 || q.pp > 1 || q.offload != offload_kind::none ||
                q.prec == precision::bf16);
  }
}

TEST(FitSearch, CostModelChargesRecomputeAndOffload) {
  const auto m = preset_model("gpt2-large");
  const auto& g = find_gpu("h100");
  auto r = train(8, 1024);
  r.validate(m);
  const double base = estimate_step_time(m, r, g, default_overheads());
  auto ck = r;
  ck.ckpt = checkpointing::full;
  auto off = r;
  off.offload = offload_kind::optimizer;
  // Full recompute adds one forward of every block (not of the head, loss or optimizer).
  const auto parts = estimate_step_parts(m, r, g, default_overheads());
  EXPECT_NEAR(estimate_step_time(m, ck, g, default_overheads()) - base,
              parts.micro_batches * parts.blocks * parts.block_forward_s, 1e-9 * base);
  EXPECT_NEAR(parts.step_s(), base, 1e-9 * base);
  EXPECT_GT(estimate_step_time(m, off, g, default_overheads()), base);
  fit_options none;
  EXPECT_THROW(fit_search(m, r, none), vramkit::invalid_input);
}

// The cost model divides counted work by kernel rates: a probe file's rates replace the
// catalogue's, and a block's time follows its GEMM, attention and memory-bound parts.
namespace {

/// An amp-bf16 training request of batch x seq, validated for m.
plan_request amp_request(const model_description& m, std::int64_t batch, std::int64_t seq) {
  auto r = train(batch, seq, 1, precision::amp_bf16);
  r.micro_batch = batch;
  r.validate(m);
  return r;
}

}  // namespace

TEST(FitSearch, CostModelTakesProbedKernelRates) {
  const auto m = preset_model("tinyllama-1.1b");
  const auto& g = find_gpu("h200");
  const auto r = amp_request(m, 8, 2048);
  auto o = default_overheads();
  const auto cat = estimate_step_parts(m, r, g, o);
  EXPECT_EQ(cat.rates.source, "catalogue");
  EXPECT_NEAR(cat.rates.gemm_flops, 0.80 * g.bf16_flops, 1);
  o.gemm_flops = cat.rates.gemm_flops / 2;
  const auto slow = estimate_step_parts(m, r, g, o);
  EXPECT_EQ(slow.rates.source, "probe and catalogue");
  EXPECT_GT(slow.block_forward_s, 1.3 * cat.block_forward_s);
  EXPECT_LT(slow.block_forward_s, 2.0 * cat.block_forward_s);  // not all of it is GEMMs
  EXPECT_NEAR(slow.optimizer_s, cat.optimizer_s, 1e-12);       // memory-bound: unchanged
  o.attention_flops = 1e15;
  o.memory_bytes_per_s = 4e12;
  EXPECT_EQ(estimate_step_parts(m, r, g, o).rates.source, "probe");
  // At least the block's GEMM FLOPs at the GEMM rate; backward more than the forward.
  const double macs = 4.0 * 2048 * 2048 / 8 * 2 + 2.0 * 2048 * 256 + 3.0 * 2048 * 5632;
  EXPECT_GT(cat.block_forward_s, 2 * 8 * 2048 * macs / cat.rates.gemm_flops);
  EXPECT_GT(cat.block_backward_s, 1.8 * cat.block_forward_s);
  EXPECT_THROW(estimate_step_parts(preset_model("resnet-50"), r, g, o), vramkit::invalid_input);
}

// Attention's s^2 terms: at equal tokens a longer sequence costs more; eager attention (the whole
// square as GEMMs plus its softmax) more than the fused causal kernel.
TEST(FitSearch, AttentionCostGrowsWithTheSequence) {
  const auto m = preset_model("llama-3-8b");
  const auto& g = find_gpu("h100");
  const auto shortr = amp_request(m, 8, 1024);
  const auto longr = amp_request(m, 1, 8192);
  const auto o = default_overheads();
  const double t_short = estimate_step_parts(m, shortr, g, o).block_forward_s;
  const double t_long = estimate_step_parts(m, longr, g, o).block_forward_s;
  EXPECT_GT(t_long, 1.1 * t_short);
  auto eager = longr;
  eager.attention = attention_kind::eager;
  EXPECT_GT(estimate_step_parts(m, eager, g, o).block_forward_s, 1.5 * t_long);
}

// Configurations are planned on several threads; the answer must not depend on how many.
TEST(FitSearch, SameAnswerOnAnyNumberOfThreads) {
  const auto m = preset_model("gpt2-medium");
  const auto r = train(32, 512, 4);
  auto opt = on_gpu("a100-40gb", 12 * GiB);
  opt.threads = 1;
  const auto one = fit_search(m, r, opt);
  opt.threads = 5;
  const auto many = fit_search(m, r, opt);
  ASSERT_FALSE(one.fits.empty());
  EXPECT_EQ(one.planned, many.planned);
  ASSERT_EQ(one.fits.size(), many.fits.size());
  for (std::size_t i = 0; i < one.fits.size(); ++i) {
    EXPECT_EQ(one.fits[i].device_peak_bytes, many.fits[i].device_peak_bytes) << i;
    EXPECT_EQ(one.fits[i].reasons, many.fits[i].reasons) << i;
  }
}
