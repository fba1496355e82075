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

/// A training request of `batch` samples of `seq` tokens on `gpus` GPUs.
plan_request training(std::int64_t batch, std::int64_t seq, int gpus = 1) {
  plan_request r;
  r.batch = batch;
  r.seq = seq;
  r.gpus = gpus;
  return r;
}

/// Searching for the catalogue's `gpu`, with its whole memory unless `capacity` is given.
fit_options searching(const char* gpu, std::uint64_t capacity = 0) {
  fit_options opt;
  opt.gpu = find_gpu(gpu);
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
  const auto r = training(32, 1024);
  const auto opt = searching("rtx4090");
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
  const auto r = training(8, 2048);
  fit_options opt;
  opt.capacity_bytes = 4 * GiB;
  EXPECT_TRUE(fit_search(m, r, opt).fits.empty());
}

TEST(FitSearch, MultiGpuUsesSharding) {
  const auto m = preset_model("llama-2-7b");
  const auto res = fit_search(m, training(16, 2048, 8), searching("a100-40gb"));
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
  auto r = training(8, 1024);
  r.validate(m);
  const double base = estimate_step_time(m, r, g, default_overheads());
  auto ck = r;
  ck.ckpt = checkpointing::full;
  auto off = r;
  off.offload = offload_kind::optimizer;
  EXPECT_NEAR(estimate_step_time(m, ck, g, default_overheads()) / base, 4.0 / 3.0, 0.01);
  EXPECT_GT(estimate_step_time(m, off, g, default_overheads()), base);
  fit_options none;
  EXPECT_THROW(fit_search(m, r, none), vramkit::invalid_input);
}

// Configurations are planned on several threads; the answer must not depend on how many.
TEST(FitSearch, SameAnswerOnAnyNumberOfThreads) {
  const auto m = preset_model("gpt2-medium");
  const auto r = training(32, 512, 4);
  auto opt = searching("a100-40gb", 12 * GiB);
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
