// The memory model: schedule invariants, the peak's timing, optimizer and precision effects,
// ZeRO sharding, inference KV-cache arithmetic and request validation.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "vramkit/core/error.hpp"
#include "vramkit/core/units.hpp"
#include "vramkit/plan/caching_allocator_model.hpp"
#include "vramkit/plan/config_loader.hpp"
#include "vramkit/plan/memory_model.hpp"
#include "vramkit/plan/training_schedule.hpp"

using namespace vramkit::plan;
using ::testing::HasSubstr;
using vramkit::MiB;

namespace {

std::uint64_t component_bytes(const plan_result& p, const std::string& name) {
  for (const auto& c : p.components)
    if (c.name == name) return c.bytes;
  return 0;
}

plan_request train(std::int64_t batch, std::int64_t seq, precision prec = precision::fp32,
                   optimizer_kind opt = optimizer_kind::adamw) {
  plan_request r;
  r.batch = batch;
  r.seq = seq;
  r.prec = prec;
  r.optimizer = opt;
  return r;
}

/// Generation: `batch` prompts of `prompt` tokens, `new_tokens` generated, in `prec`.
plan_request infer(std::int64_t batch, std::int64_t prompt, std::int64_t new_tokens,
                   precision prec = precision::bf16) {
  plan_request r;
  r.mode = run_mode::infer;
  r.batch = batch;
  r.prompt = prompt;
  r.new_tokens = new_tokens;
  r.prec = prec;
  return r;
}

}  // namespace

TEST(MemoryModel, ScheduleFreesEverythingButPersistentState) {
  const auto m = preset_model("gpt2");
  auto r = train(2, 128);
  r.validate(m);
  const auto s = build_schedule(m, r);
  std::vector<int> live(s.tensors.size(), 0);
  for (const auto& e : s.events) live[e.tensor] += e.alloc ? 1 : -1;
  std::uint64_t left = 0;
  for (std::size_t t = 0; t < s.tensors.size(); ++t) {
    ASSERT_GE(live[t], 0) << s.tensors[t].label;
    ASSERT_LE(live[t], 1) << s.tensors[t].label;
    if (live[t]) {
      const auto c = s.tensors[t].comp;
      EXPECT_TRUE(c == component::weights || c == component::optimizer_states ||
                  c == component::workspace)
          << "left alive: " << s.tensors[t].label;
      if (c != component::workspace) left += s.tensors[t].bytes;
    }
  }
  // Weights (4 B) + AdamW's two states (8 B) per parameter remain after the step.
  EXPECT_NEAR(static_cast<double>(left), 12.0 * 124439808, 12.0 * 124439808 * 0.01);
}

TEST(MemoryModel, ActivationsGrowLinearlyWithBatch) {
  const auto m = preset_model("gpt2-medium");
  const auto a = make_plan(m, train(4, 512));
  const auto b = make_plan(m, train(8, 512));
  const auto c = make_plan(m, train(16, 512));
  const double d1 =
      static_cast<double>(b.allocated_peak_bytes) - static_cast<double>(a.allocated_peak_bytes);
  const double d2 =
      static_cast<double>(c.allocated_peak_bytes) - static_cast<double>(b.allocated_peak_bytes);
  EXPECT_GT(d1, 0);
  EXPECT_NEAR(d2 / d1, 2.0, 0.15);
}

TEST(MemoryModel, PeakOfLanguageModelIsInBackwardAfterStatesExist) {
  // Logits dominate: the peak is early in backward of a step that already has AdamW states.
  const auto p = make_plan(preset_model("gpt2"), train(8, 1024));
  EXPECT_EQ(p.peak_phase, "backward");
  EXPECT_GE(p.peak_step, 1);
  EXPECT_GT(component_bytes(p, "optimizer states"), 0u);
  EXPECT_GT(component_bytes(p, "logits and loss"), 3ull * 8 * 1024 * 50257);
}

TEST(MemoryModel, CheckpointingAndSdpaReduceMemory) {
  const auto m = preset_model("gpt2");
  auto eager = train(8, 1024);
  eager.attention = attention_kind::eager;
  auto ckpt = train(8, 1024);
  ckpt.ckpt = checkpointing::full;
  const auto base = make_plan(m, train(8, 1024));
  EXPECT_GT(make_plan(m, eager).allocated_peak_bytes,
            base.allocated_peak_bytes + 4ull * 1024 * MiB);
  EXPECT_LT(make_plan(m, ckpt).allocated_peak_bytes, base.allocated_peak_bytes / 2);
}

TEST(MemoryModel, OptimizerStatesPerParameter) {
  const auto m = preset_model("bert-base");
  const auto params = static_cast<double>(parameter_count(m));
  auto states = [&](optimizer_kind o) {
    return static_cast<double>(
        component_bytes(make_plan(m, train(2, 128, precision::fp32, o)), "optimizer states"));
  };
  EXPECT_NEAR(states(optimizer_kind::adamw), 8 * params, 8 * params * 0.01);
  EXPECT_NEAR(states(optimizer_kind::sgd_momentum), 4 * params, 4 * params * 0.01);
  EXPECT_EQ(states(optimizer_kind::sgd), 0.0);
}

TEST(MemoryModel, AmpKeepsFp32WeightsAndAddsCasts) {
  const auto m = preset_model("gpt2");
  const auto p = make_plan(m, train(8, 1024, precision::amp_bf16));
  EXPECT_NEAR(static_cast<double>(component_bytes(p, "weights")), 4.0 * parameter_count(m),
              0.01 * 4 * parameter_count(m));
  const auto pure = make_plan(m, train(8, 1024, precision::bf16));
  EXPECT_NEAR(static_cast<double>(component_bytes(pure, "weights")), 2.0 * parameter_count(m),
              0.01 * 2 * parameter_count(m));
}

TEST(MemoryModel, ZeroShardsStatesGradientsAndParameters) {
  const auto m = preset_model("gpt2-large");
  const auto params = static_cast<double>(parameter_count(m));
  auto states_at = [&](int zero) {
    auto r = train(8, 512);
    r.gpus = 8;
    r.zero = zero;
    const auto p = make_plan(m, r);
    return std::make_pair(static_cast<double>(component_bytes(p, "optimizer states")),
                          static_cast<double>(component_bytes(p, "weights")));
  };
  const auto [s0, w0] = states_at(0);
  const auto [s1, w1] = states_at(1);
  const auto [s3, w3] = states_at(3);
  EXPECT_NEAR(s0, 8 * params, 8 * params * 0.01);
  EXPECT_NEAR(s1, 8 * params / 8, 8 * params / 8 * 0.02);
  EXPECT_NEAR(w0, 4 * params, 4 * params * 0.01);
  EXPECT_LT(w3, w0 / 2);  // a shard plus two gathered layers
}

TEST(MemoryModel, PagedKvCacheArithmetic) {
  // Llama-3-8B: 32 layers x 8 KV heads x 128 dims x 2 (K, V) x 2 bytes = 128 KiB per token.
  const auto m = preset_model("llama-3-8b");
  auto r = infer(2, 4000, 96);
  r.serving = serving_kind::paged;
  const auto p = make_plan(m, r);
  EXPECT_EQ(component_bytes(p, "KV cache"), 2ull * 4096 * 128 * 1024);
  // Weights in bf16 dominate: 2 bytes per parameter.
  EXPECT_NEAR(static_cast<double>(component_bytes(p, "weights")), 2.0 * parameter_count(m), 1e6);
}

TEST(MemoryModel, GenerateKvCacheGrowsToTheLastToken) {
  const auto m = preset_model("qwen2-0.5b");
  const auto r = infer(8, 16, 2000);
  const auto p = make_plan(m, r);
  // 24 layers x 2 KV heads x 64 dims x 2 x 2 bytes = 12 KiB per token; the cache holds
  // prompt + new - 1 tokens at the last decode step, where the peak is, plus the old copy of the
  // one K or V that torch.cat is growing at that moment (at most 1/48 of the cache).
  EXPECT_EQ(p.peak_phase, "decode");
  const double expect = 8.0 * (16 + 1999) * 24 * 2 * 64 * 2 * 2;
  EXPECT_GE(static_cast<double>(component_bytes(p, "KV cache")), expect);
  EXPECT_LE(static_cast<double>(component_bytes(p, "KV cache")), expect * (1 + 1.0 / 48 + 0.001));
}

TEST(MemoryModel, QuantisedWeightsShrink) {
  const auto m = preset_model("llama-2-7b");
  plan_request r;
  r.mode = run_mode::infer;
  r.batch = 1;
  r.prec = precision::bf16;
  const auto full = make_plan(m, r);
  r.quant = quant_kind::int4;
  const auto q4 = make_plan(m, r);
  EXPECT_LT(component_bytes(q4, "weights"), component_bytes(full, "weights") / 3);
}

TEST(MemoryModel, OffloadMovesStatesToHost) {
  const auto m = preset_model("gpt2-large");
  auto r = train(8, 512, precision::amp_bf16);
  r.offload = offload_kind::optimizer;
  const auto p = make_plan(m, r);
  EXPECT_EQ(component_bytes(p, "optimizer states"), 0u);
  EXPECT_GT(p.host_peak_bytes, 16ull * parameter_count(m) * 9 / 10);
}

TEST(MemoryModel, JsonHasTheDocumentedFields) {
  const auto p = make_plan(preset_model("resnet-50"),
                           train(32, 0, precision::fp32, optimizer_kind::sgd_momentum));
  const auto j = nlohmann::json::parse(to_json(p));
  for (const char* k : {"allocated_peak_bytes", "reserved_peak_bytes", "device_peak_bytes",
                        "host_peak_bytes", "peak_phase", "components", "inputs", "schema_version"})
    EXPECT_TRUE(j.contains(k)) << k;
  EXPECT_GE(j["reserved_peak_bytes"].get<std::uint64_t>(),
            j["allocated_peak_bytes"].get<std::uint64_t>());
  EXPECT_GT(j["device_peak_bytes"].get<std::uint64_t>(),
            j["reserved_peak_bytes"].get<std::uint64_t>());
  EXPECT_EQ(j["inputs"]["image_size"], 224);
}

TEST(MemoryModel, RefusesBadRequestsWithReasons) {
  const auto m = preset_model("gpt2");
  auto expect_msg = [&](plan_request r, const char* needle) {
    try {
      make_plan(m, r);
      ADD_FAILURE() << "no error for " << needle;
    } catch (const vramkit::invalid_input& e) {
      EXPECT_THAT(e.what(), HasSubstr(needle));
    }
  };
  auto r = train(0, 128);
  expect_msg(r, "--batch");
  r = train(8, 2048);
  expect_msg(r, "positions");
  r = train(8, 128);
  r.gpus = 3;
  r.tp = 2;
  expect_msg(r, "--tp");
  r = train(6, 128);
  r.gpus = 4;
  expect_msg(r, "divisible");
  r = train(8, 128);
  r.micro_batch = 3;
  expect_msg(r, "--micro-batch");
  r = train(8, 128);
  r.quant = quant_kind::int4;
  expect_msg(r, "--quant");
}

// make_plan skips micro-batch groups and steps that bring the allocator back to the state they
// began from; every figure must equal a replay of the whole schedule.
TEST(MemoryModel, SkippingRepeatedWorkChangesNoFigure) {
  struct tcase {
    const char* model;
    std::int64_t batch, micro, seq;
    int gpus, zero, pp;
  };
  const tcase cases[] = {{"gpt2", 16, 1, 256, 1, 0, 1},        {"gpt2", 24, 2, 128, 1, 0, 1},
                         {"gpt2-medium", 32, 1, 128, 8, 3, 1}, {"gpt2", 32, 1, 128, 8, 0, 2},
                         {"bert-base", 12, 3, 128, 1, 0, 1},   {"gpt2", 8, 8, 128, 1, 0, 1}};
  for (const auto& c : cases) {
    const auto m = preset_model(c.model);
    auto r = train(c.batch, c.seq, precision::amp_bf16);
    r.micro_batch = c.micro;
    r.gpus = c.gpus;
    r.zero = c.zero;
    r.pp = c.pp;
    r.steps = 4;
    const auto p = make_plan(m, r);
    r.validate(m);
    const auto s = build_schedule(m, r);  // every unit
    caching_allocator_model a;
    std::vector<std::uint32_t> h(s.tensors.size());
    for (const auto& e : s.events) {
      if (e.alloc)
        h[e.tensor] = a.malloc(s.tensors[e.tensor].bytes);
      else
        a.free(h[e.tensor]);
    }
    EXPECT_EQ(p.allocated_peak_bytes, a.peak_allocated_bytes()) << c.model << " micro " << c.micro;
    EXPECT_EQ(p.reserved_peak_bytes, a.peak_reserved_bytes()) << c.model << " micro " << c.micro;
    EXPECT_LE(p.events, s.events.size());
  }
  // Accumulation over many micro-batches must not replay them all.
  const auto m = preset_model("gpt2");
  auto r = train(64, 128, precision::amp_bf16);
  r.micro_batch = 1;
  auto few = r;
  few.batch = 4;
  EXPECT_LT(make_plan(m, r).events, 2 * make_plan(m, few).events);
}

// A generate() call whose growing KV cache leaves the cache full of outgrown blocks: unlimited,
// the reserved peak runs far past the allocated one; on a GPU the allocator flushes its cache
// and the run fits; on a too small GPU it does not.
TEST(MemoryModel, GpuCapacityModelsMemoryPressure) {
  const auto m = preset_model("llama-3-8b");
  auto r = infer(16, 512, 2048, precision::fp32);
  const auto free_run = make_plan(m, r);
  EXPECT_TRUE(free_run.fits());
  r.device_capacity_bytes = 80ull << 30;
  const auto on_80 = make_plan(m, r);
  EXPECT_TRUE(on_80.fits());
  EXPECT_GT(on_80.cache_flushes, 0u);
  EXPECT_EQ(on_80.allocated_peak_bytes, free_run.allocated_peak_bytes);
  EXPECT_LE(on_80.device_peak_bytes, r.device_capacity_bytes);
  EXPECT_LT(on_80.reserved_peak_bytes, free_run.reserved_peak_bytes);
  r.device_capacity_bytes = 24ull << 30;
  const auto on_24 = make_plan(m, r);
  EXPECT_FALSE(on_24.fits());
  EXPECT_NE(to_json(on_24).find("\"fits\": false"), std::string::npos);
}
