// Fine-tuning, serving and the second round's families: LoRA / QLoRA, optimizer in backward, the
// bitsandbytes and fused optimizers, --fit's recipes for an 8B model on a 24 GB card, --serve's
// vLLM-style capacity, fp8 KV, and the published parameter counts of Gemma, Falcon, RoBERTa and
// transformers' ViT.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <utility>

#include "vramkit/core/error.hpp"
#include "vramkit/plan/config_loader.hpp"
#include "vramkit/plan/fit_search.hpp"
#include "vramkit/plan/memory_model.hpp"
#include "vramkit/plan/serving_capacity.hpp"
#include "vramkit/plan/training_schedule.hpp"

using namespace vramkit::plan;

namespace {

constexpr double k_gib = 1024.0 * 1024 * 1024;

model_description config(const char* file) {
  return load_model_config(std::string(VRAMKIT_SOURCE_DIR) + "/tests/data/plan/configs/" + file);
}

/// Bytes allocated over the schedule for tensors of component c (each counted once).
std::uint64_t allocated(const schedule& s, component c) {
  std::uint64_t n = 0;
  for (const auto& e : s.events)
    if (e.alloc && e.comp == c) n += e.bytes;
  return n;
}

int count(const schedule& s, const char* label) {
  int n = 0;
  for (const auto& t : s.tensors) n += std::strcmp(t.label, label) == 0;
  return n;
}

plan_request lora_request(int rank) {
  plan_request r;
  r.batch = 1, r.seq = 256, r.prec = precision::bf16, r.lora_rank = rank;
  return r;
}

}  // namespace

TEST(FineTuning, LoraAdaptsAllLinearLayersWithPeftsParameterCount) {
  const auto m = preset_model("llama-3.1-8b");
  EXPECT_EQ(parameter_count(m), 8030261248u);  // Llama-3.1-8B
  const auto p = make_plan(m, lora_request(16));
  // PEFT on Llama-3-8B, r=16, all seven projections: "trainable params: 41,943,040".
  EXPECT_EQ(p.trainable_parameters, 41943040u);
  auto r = lora_request(16);
  r.lora_targets = lora_target::q | lora_target::v;
  EXPECT_EQ(make_plan(m, r).trainable_parameters, 32u * 16 * (4096 + 4096 + 4096 + 1024));
}

TEST(FineTuning, Gemma3ImageTextModelHoldsItsIdleVisionTowerAndItsAdapters) {
  // Gemma-3-4B (model_type gemma3): 4.30B parameters, of which the SigLIP tower and projector
  // (419.8M) never run on a text batch; a full fine-tune trains the language model only.
  const auto m = preset_model("gemma-3-4b");
  EXPECT_EQ(parameter_count(m), 4300079472u);
  EXPECT_EQ(m.idle_vision_parameters, 416866032 + 1152 * 2560 + 1152);
  plan_request full;
  full.batch = 1, full.seq = 256, full.prec = precision::bf16;
  EXPECT_EQ(make_plan(m, full).trainable_parameters, 4300079472u - 419816304u);
  // PEFT at r=16 on the seven projections also adapts the tower's q_proj, k_proj and v_proj
  // (27 layers): 29,802,496 + 2,985,984 = "trainable params: 32,788,480".
  EXPECT_EQ(make_plan(m, lora_request(16)).trainable_parameters, 32788480u);
  auto mlp = lora_request(16);
  mlp.lora_targets = lora_target::mlp;
  EXPECT_EQ(make_plan(m, mlp).trainable_parameters, 34u * 16 * 3 * (2560 + 10240));
}

TEST(FineTuning, LoraFreezesTheBaseAndKeepsFp32AdapterStates) {
  const auto m = config("llama-3.1-8b-l4.json");
  auto r = lora_request(16);
  r.validate(m);
  const auto s = build_schedule(m, r);
  // AdamW's two fp32 moments for the adapters only; no gradient of a base weight.
  EXPECT_EQ(allocated(s, component::optimizer_states), s.trainable_parameters * 8);
  EXPECT_LE(allocated(s, component::gradients), s.trainable_parameters * 4 * 3 /* 3 steps */);
  // The base is stored in bf16: 2 bytes per parameter plus the adapters' fp32 weights.
  const auto p = make_plan(m, r);
  std::uint64_t weights = 0;
  for (const auto& c : p.components)
    if (c.name == "weights") weights = c.bytes;
  EXPECT_NEAR(static_cast<double>(weights),
              2.0 * static_cast<double>(parameter_count(m)) +
                  4.0 * static_cast<double>(s.trainable_parameters),
              0.01 * static_cast<double>(weights));
  // PEFT's branch: the input cast to the adapters' fp32 before lora_A, the sum cast back.
  EXPECT_EQ(count(s, "lora_A"), 4 * 7 * 3);
  EXPECT_GT(count(s, "lora input fp32"), 0);
  // Under autocast the adapters' GEMMs run in 16 bits from cached casts.
  r.prec = precision::amp_bf16;
  const auto sa = build_schedule(m, r);
  EXPECT_GT(allocated(sa, component::autocast_weight_cache), 0u);
  EXPECT_LT(make_plan(m, r).allocated_peak_bytes,
            make_plan(m, lora_request(16)).allocated_peak_bytes);
}

TEST(FineTuning, QloraStoresTheBaseInNf4AndDequantisesPerGemm) {
  const auto m = preset_model("llama-3.1-8b");
  auto r = lora_request(16);
  r.quant = quant_kind::nf4;
  r.ckpt = checkpointing::full;
  const auto p = make_plan(m, r);
  std::uint64_t weights = 0;
  for (const auto& c : p.components)
    if (c.name == "weights") weights = c.bytes;
  // 7.0B block weights at 4.127 bits, embeddings and head (1.05B) in bf16: about 5.6 GiB.
  EXPECT_GT(weights / k_gib, 5.0);
  EXPECT_LT(weights / k_gib, 6.0);
  r.validate(m);
  const auto s = build_schedule(m, r);
  EXPECT_GT(count(s, "nf4 weight (dequantised)"), 0);
  EXPECT_GT(count(s, "lora base output clone"), 0);
  // Without --lora-rank, --quant nf4 in training is refused.
  plan_request full;
  full.quant = quant_kind::nf4;
  EXPECT_THROW(full.validate(m), vramkit::invalid_input);
}

TEST(FineTuning, OptimizerInBackwardNeverHoldsAllGradients) {
  const auto m = preset_model("tinyllama-1.1b");
  plan_request r;
  r.batch = 2, r.seq = 512, r.prec = precision::bf16;
  const auto plain = make_plan(m, r);
  r.optimizer_in_backward = true;
  const auto oib = make_plan(m, r);
  std::uint64_t grads = 0;
  for (const auto& c : oib.components)
    if (c.name == "gradients") grads = c.bytes;
  // At most one parameter's gradient at a time (the largest is the 32000 x 2048 embedding).
  EXPECT_LE(grads, 32000ull * 2048 * 2 + (1 << 20));
  EXPECT_LT(oib.allocated_peak_bytes, plain.allocated_peak_bytes);
  // It cannot accumulate over micro-batches, and runs on one GPU.
  r.micro_batch = 1;
  EXPECT_THROW(r.validate(m), vramkit::invalid_input);
}

TEST(FineTuning, BitsandbytesStatesAndFusedAdamW) {
  const auto m = preset_model("qwen2-0.5b");
  plan_request r;
  r.batch = 1, r.seq = 256, r.prec = precision::bf16, r.optimizer = optimizer_kind::adamw_8bit;
  r.validate(m);
  const auto s = build_schedule(m, r);
  const auto P = static_cast<double>(parameter_count(m));  // NOLINT(readability-identifier-naming)
  // Two uint8 states and two fp32 absmax per 256 (small parameters keep fp32 states).
  EXPECT_NEAR(static_cast<double>(allocated(s, component::optimizer_states)), 2 * P + P / 256 * 8,
              0.01 * P);
  EXPECT_EQ(s.managed_bytes, 0u);
  r.optimizer = optimizer_kind::paged_adamw_8bit;
  const auto sp = build_schedule(m, r);
  EXPECT_NEAR(static_cast<double>(sp.managed_bytes), 2 * P, 0.01 * P);
  // Under a capacity the device keeps what fits of the managed states; the rest is host memory.
  r.device_capacity_bytes = static_cast<std::uint64_t>(4 * k_gib);
  const auto pp = make_plan(m, r);
  EXPECT_EQ(pp.managed_bytes, sp.managed_bytes);
  EXPECT_LT(pp.managed_resident_bytes, pp.managed_bytes);
  EXPECT_LE(pp.device_peak_bytes, r.device_capacity_bytes);
  EXPECT_EQ(pp.host_peak_bytes, pp.managed_bytes - pp.managed_resident_bytes);
  // Fused AdamW makes no foreach sqrt temporaries.
  plan_request f;
  f.batch = 1, f.seq = 256, f.prec = precision::bf16, f.optimizer = optimizer_kind::adamw_fused;
  f.validate(m);
  EXPECT_EQ(count(build_schedule(m, f), "adam sqrt temporaries"), 0);
  f.optimizer = optimizer_kind::adamw;
  EXPECT_GT(count(build_schedule(m, f), "adam sqrt temporaries"), 0);
}

TEST(FineTuning, FitFindsFullLoraAndQloraRecipesForAn8BModelOnA24GBCard) {
  const auto m = preset_model("llama-3.1-8b");
  plan_request r;
  r.batch = 1, r.seq = 2048;
  fit_options opt;
  opt.capacity_bytes = 24ull << 30;
  opt.threads = 1;
  const auto res = fit_search(m, r, opt);
  const fit_candidate* full = nullptr;
  const fit_candidate* lora = nullptr;
  const fit_candidate* qlora = nullptr;
  for (const auto& c : res.fits) {
    const auto& q = c.request;
    if (q.lora_rank == 0 && q.offload == offload_kind::none && full == nullptr) full = &c;
    if (q.lora_rank > 0 && q.quant == quant_kind::none && lora == nullptr) lora = &c;
    if (q.lora_rank > 0 && q.quant == quant_kind::nf4 && qlora == nullptr) qlora = &c;
  }
  ASSERT_NE(full, nullptr) << "no full fine-tune without offload fits";
  ASSERT_NE(lora, nullptr);
  ASSERT_NE(qlora, nullptr);
  // torchtune's published full fine-tune of Llama-3.1-8B on an RTX 4090: 18.9 GiB with 16-bit
  // weights, a paged 8-bit optimizer stepped in backward and activation checkpointing.
  EXPECT_EQ(full->request.prec, precision::bf16);
  EXPECT_TRUE(full->request.optimizer_in_backward);
  EXPECT_EQ(full->request.optimizer, optimizer_kind::paged_adamw_8bit);
  EXPECT_NEAR(full->allocated_peak_bytes / k_gib, 18.9, 1.5);
  // LoRA and QLoRA in 7-16 GiB (torchtune: 16.2 and 7.4 GiB; transformers keeps fp32 logits).
  EXPECT_LT(qlora->device_peak_bytes / k_gib, 16.0);
  EXPECT_LT(lora->device_peak_bytes, opt.capacity_bytes);
}

TEST(Serving, KvBudgetIsWhatUtilisationLeavesAfterWeightsAndTheProfilePeak) {
  const auto m = preset_model("llama-3.1-8b");
  plan_request base;
  serve_options opt;
  opt.max_model_len = 8192;
  opt.concurrency = 32;
  const std::uint64_t cap = 80ull << 30;
  const auto s = plan_serving(m, base, opt, cap);
  EXPECT_TRUE(s.fits) << s.why;
  EXPECT_EQ(s.budget_bytes, static_cast<std::uint64_t>(0.9 * static_cast<double>(cap)));
  EXPECT_EQ(s.kv_cache_bytes,
            s.budget_bytes - s.weights_bytes - s.activation_peak_bytes - s.non_torch_bytes);
  // 32 layers x 8 KV heads x 128 x 2 (K, V) x 2 bytes = 128 KiB per token, 2 MiB per block.
  EXPECT_EQ(s.block_bytes, 2u << 20);
  EXPECT_EQ(s.kv_bytes_per_sequence, 8192u * (128u << 10));
  EXPECT_EQ(s.max_concurrency,
            static_cast<std::int64_t>(s.kv_cache_bytes / s.kv_bytes_per_sequence));
  EXPECT_LE(static_cast<std::uint64_t>(opt.concurrency) * (128u << 10) *
                static_cast<std::uint64_t>(s.max_context),
            s.kv_cache_bytes);
  // fp8 KV holds twice the tokens; a larger utilisation more; --max-num-seqs caps concurrency.
  base.kv_cache = kv_cache_kind::fp8;
  const auto f8 = plan_serving(m, base, opt, cap);
  EXPECT_EQ(f8.block_bytes, 1u << 20);
  EXPECT_GE(f8.max_concurrency, 2 * s.max_concurrency - 1);
  opt.max_num_seqs = 16;
  EXPECT_EQ(plan_serving(m, base, opt, cap).max_concurrency, 16);
  // Every engine option changes the answer: eager mode captures no graphs, a smaller prefill
  // chunk profiles a smaller peak, a lower utilisation leaves fewer blocks.
  serve_options o2 = opt;
  o2.enforce_eager = true;
  EXPECT_EQ(plan_serving(m, base, o2, cap).cuda_graph_bytes, 0u);
  EXPECT_GT(plan_serving(m, base, opt, cap).cuda_graph_bytes, 0u);
  o2 = opt;
  o2.max_num_batched_tokens = 2048;
  EXPECT_LT(plan_serving(m, base, o2, cap).activation_peak_bytes,
            plan_serving(m, base, opt, cap).activation_peak_bytes);
  o2 = opt;
  o2.gpu_memory_utilization = 0.5;
  EXPECT_LT(plan_serving(m, base, o2, cap).num_blocks, plan_serving(m, base, opt, cap).num_blocks);
  // The model's full 131072-token context does not fit one sequence on 24 GB.
  serve_options full;
  EXPECT_FALSE(plan_serving(m, plan_request{}, full, 24ull << 30).fits);
  full.gpu_memory_utilization = 1.5;
  EXPECT_THROW(plan_serving(m, plan_request{}, full, cap), vramkit::invalid_input);
  EXPECT_THROW(plan_serving(preset_model("bert-base"), plan_request{}, opt, cap),
               vramkit::invalid_input);
}

TEST(Serving, SlidingWindowLayersHoldOnlyTheirWindow) {
  const auto m = config("gemma-3-1b.json");
  serve_options opt;
  opt.max_model_len = 32768;
  const auto s = plan_serving(m, plan_request{}, opt, 80ull << 30);
  // 26 layers, 1 KV head of 256, bf16: 1 KiB per token and layer; 4 full layers hold 32768
  // tokens, 22 sliding ones their 512.
  EXPECT_EQ(s.kv_bytes_per_sequence, (4u * 32768 + 22u * 512) * 1024);
}

TEST(Families, SecondRoundModelsHaveTheirPublishedParameterCounts) {
  // RobertaForMaskedLM; T5 with its tied head, Flan-T5 with a gated FF and its own head.
  const std::pair<const char*, std::uint64_t> published[] = {
      {"gemma-2-9b.json", 9241705984u},  {"gemma-2-2b.json", 2614341888u},
      {"gemma-3-1b.json", 999885952u},   {"falcon-7b.json", 6921720704u},
      {"roberta-base.json", 124697433u}, {"vit-base-patch16-224.json", 86567656u},
      {"t5-base.json", 222903552u},      {"flan-t5-base.json", 247577856u},
  };
  for (const auto& [file, count] : published)
    EXPECT_EQ(parameter_count(config(file)), count) << file;
  const auto g = config("gemma-2-9b.json");
  EXPECT_EQ(g.family, model_family::gemma);
  EXPECT_TRUE(g.t.sliding(0));
  EXPECT_FALSE(g.t.sliding(1));
  const auto g3 = config("gemma-3-1b.json");
  for (int l = 0; l < 12; ++l) EXPECT_EQ(g3.t.sliding(l), (l + 1) % 6 != 0) << l;
  EXPECT_EQ(config("falcon-7b.json").t.kv_heads, 1);
  EXPECT_EQ(config("falcon-40b.json").t.kv_heads, 8);
}

TEST(Families, GemmaSoftCapsAndScalesAndFalconFallsBackToTheMathKernel) {
  auto m = config("gemma-2-2b-l4.json");
  plan_request r;
  r.batch = 1, r.seq = 256, r.prec = precision::bf16, r.optimizer = optimizer_kind::sgd;
  r.validate(m);
  const auto s = build_schedule(m, r);
  EXPECT_EQ(count(s, "logits softcap tanh"), 3);  // one per step
  EXPECT_EQ(count(s, "scaled embeddings"), 3);
  // Eager attention soft-caps its scores (SDPA ignores the cap).
  EXPECT_EQ(count(s, "softcap tanh"), 0);
  r.attention = attention_kind::eager;
  EXPECT_EQ(count(build_schedule(m, r), "softcap tanh"), 4 * 3);
  const auto f = config("falcon-7b-l2.json");
  plan_request fr;
  fr.batch = 1, fr.seq = 256, fr.prec = precision::bf16, fr.optimizer = optimizer_kind::sgd;
  fr.validate(f);
  EXPECT_EQ(count(build_schedule(f, fr), "sdpa math scores"), 2 * 3);
}

TEST(Families, EncodersInferInOneForward) {
  const auto m = config("roberta-base.json");
  plan_request r;
  r.mode = run_mode::infer, r.batch = 8, r.seq = 512;
  r.validate(m);
  EXPECT_EQ(r.prompt, 512);
  const auto s = build_schedule(m, r);
  EXPECT_EQ(allocated(s, component::kv_cache), 0u);
  plan_request gen;
  gen.mode = run_mode::infer, gen.new_tokens = 16;
  EXPECT_THROW(gen.validate(m), vramkit::invalid_input);
  plan_request too_long;
  too_long.mode = run_mode::infer, too_long.seq = 513;  // RoBERTa: 514 rows, 512 positions
  EXPECT_THROW(too_long.validate(m), vramkit::invalid_input);
}

TEST(Families, PagedFp8KvCacheHalvesTheCache) {
  const auto m = preset_model("llama-3-8b");
  plan_request r;
  r.mode = run_mode::infer, r.batch = 4, r.prompt = 1024, r.new_tokens = 16;
  r.serving = serving_kind::paged;
  r.validate(m);
  const auto bf = allocated(build_schedule(m, r), component::kv_cache);
  r.kv_cache = kv_cache_kind::fp8;
  EXPECT_EQ(allocated(build_schedule(m, r), component::kv_cache) * 2, bf);
  plan_request g;
  g.mode = run_mode::infer, g.kv_cache = kv_cache_kind::fp8;
  EXPECT_THROW(g.validate(m), vramkit::invalid_input);  // generate() keeps the model dtype
}

TEST(Families, T5KeepsThePositionBiasAndCachesCrossAttention) {
  const auto m = config("flan-t5-base.json");
  EXPECT_EQ(m.family, model_family::t5);
  EXPECT_EQ(m.t.layers, 24);
  EXPECT_EQ(m.t.decoder_layers, 12);
  plan_request r;
  r.batch = 2, r.seq = 256;
  r.validate(m);
  const auto s = build_schedule(m, r);
  // One (b, heads, s, s) bias per stack and step: encoder self, decoder self and cross.
  EXPECT_EQ(count(s, "t5 position bias + mask"), 3 * 3);
  EXPECT_EQ(count(s, "t5 softmax"), 36 * 3);  // 12 + 2 x 12 attention blocks per step
  plan_request g;
  g.mode = run_mode::infer, g.batch = 2, g.prompt = 256, g.new_tokens = 8;
  g.validate(m);
  const auto gs = build_schedule(m, g);
  EXPECT_EQ(count(gs, "KV cache (cross K)"), 12);  // made once, at the first decoder step
  plan_request ck = r;
  ck.ckpt = checkpointing::full;
  EXPECT_THROW(ck.validate(m), vramkit::invalid_input);
}

TEST(Families, LlavaRunsAFrozenVisionTowerAndPutsImageTokensInThePrompt) {
  const auto m = config("llava-1.5-7b.json");
  EXPECT_EQ(m.family, model_family::llava);
  EXPECT_EQ(parameter_count(m), 7063427072u);  // llava-hf/llava-1.5-7b-hf
  EXPECT_EQ(m.image_tokens(), 576);            // (336 / 14)^2
  const auto l4 = config("llava-1.5-7b-l4.json");
  plan_request r;
  r.batch = 2, r.seq = 700, r.prec = precision::bf16;
  r.validate(l4);
  const auto s = build_schedule(l4, r);
  EXPECT_EQ(count(s, "embeddings with image features"), 3);
  EXPECT_EQ(count(s, "vision hidden state"), 3 * 25);  // output_hidden_states: 1 + 24 layers
  // The tower is frozen: its weights get no gradient and no optimizer state.
  const double tower = 303507456.0;
  EXPECT_NEAR(static_cast<double>(s.trainable_parameters),
              static_cast<double>(parameter_count(l4)) - tower, 1.0);
  plan_request shortp;
  shortp.batch = 1, shortp.seq = 500;  // shorter than one image
  EXPECT_THROW(shortp.validate(l4), vramkit::invalid_input);
}
