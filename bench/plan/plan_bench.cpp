// Planner speed: one plan (target < 1 ms) and a full --fit search (target < 1 s). The targets
// are printed next to the figures; they are not asserted.
#include <cstdio>

#include <benchmark/benchmark.h>

#include "vramkit/core/units.hpp"
#include "vramkit/plan/config_loader.hpp"
#include "vramkit/plan/fit_search.hpp"
#include "vramkit/plan/memory_model.hpp"

using namespace vramkit::plan;

namespace {

void BM_PlanOne(  // NOLINT(readability-identifier-naming): Google Benchmark style
    benchmark::State& state, const char* model, run_mode mode) {
  const auto m = preset_model(model);
  plan_request r;
  r.mode = mode;
  r.batch = mode == run_mode::train ? 8 : 4;
  // Inference runs 16-bit weights; autocast is a training regime.
  r.prec = mode == run_mode::train ? precision::amp_bf16 : precision::bf16;
  for (auto _ : state) {
    auto p = make_plan(m, r);
    benchmark::DoNotOptimize(p.allocated_peak_bytes);
  }
  state.counters["target_ms"] = 1.0;
}

/// A full --fit search on one thread (the target is < 1 s on one core); seq 0 = the default.
void BM_FitSearch(  // NOLINT(readability-identifier-naming)
    benchmark::State& state, const char* model, int gpus, const char* gpu, std::int64_t seq) {
  const auto m = preset_model(model);
  plan_request r;
  r.batch = seq == 2048 ? 1 : 64;
  r.seq = seq;
  r.gpus = gpus;
  fit_options opt;
  opt.gpu = find_gpu(gpu);
  opt.capacity_bytes = opt.gpu->memory_bytes;
  opt.threads = 1;
  std::size_t planned = 0;
  for (auto _ : state) {
    auto res = fit_search(m, r, opt);
    planned = res.planned;
    benchmark::DoNotOptimize(res.fits.size());
  }
  state.counters["plans"] = static_cast<double>(planned);
  state.counters["target_ms"] = 1000.0;
}

}  // namespace

BENCHMARK_CAPTURE(BM_PlanOne, gpt2_train, "gpt2", run_mode::train)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_PlanOne, llama3_8b_train, "llama-3-8b", run_mode::train)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_PlanOne, resnet50_train, "resnet-50", run_mode::train)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_PlanOne, llama3_8b_generate, "llama-3-8b", run_mode::infer)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_FitSearch, gpt2_1gpu_rtx4090, "gpt2", 1, "rtx4090", 0)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_FitSearch, llama2_7b_8gpu_a100_40gb, "llama-2-7b", 8, "a100-40gb", 0)
    ->Unit(benchmark::kMillisecond);
// Issue 17's target: llama-2-70b, batch 64 x 4096 tokens, 8 GPUs, under 1 s on one core.
BENCHMARK_CAPTURE(BM_FitSearch, llama2_70b_s4096_8gpu_h100, "llama-2-70b", 8, "h100", 4096)
    ->Unit(benchmark::kMillisecond);
// A single-GPU search over the fine-tuning methods (LoRA, QLoRA, 8-bit and paged optimizers).
BENCHMARK_CAPTURE(BM_FitSearch, llama31_8b_s2048_24gib, "llama-3.1-8b", 1, "rtx4090", 2048)
    ->Unit(benchmark::kMillisecond);

int main(int argc, char** argv) {
  std::printf(
      "targets: one plan < 1 ms; a full --fit search < 1000 ms (compare the Time column)\n");
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
