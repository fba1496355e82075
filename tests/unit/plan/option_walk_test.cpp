// Every plan option, applied to a training and an inference request: the plan must change
// (some figure differs) or the request must be refused with a invalid_input. An option that is
// accepted and changes nothing is a bug (the house rule for every flag). Options of the command
// itself rather than of the request ("--json", "--list", "--fit", "--gpu", "--probe", "--serve"
// and its "--gpu-memory-utilization", "--max-model-len", "--max-num-seqs",
// "--max-num-batched-tokens", "--concurrency", "--enforce-eager", and vramkit offload's
// "--offload" mixes, "--compress-activations", "--allow-lossy") are tested in
// tests/unit/plan/CMakeLists.txt and finetune_test.cpp (Serving); cli_flags_walked.cmake checks
// that no option of `vramkit plan --help` is left out.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "vramkit/core/error.hpp"
#include "vramkit/plan/config_loader.hpp"
#include "vramkit/plan/memory_model.hpp"

using namespace vramkit::plan;

namespace {

struct mutation {
  std::string name;
  std::function<void(plan_request&)> apply;
};

std::vector<mutation> mutations() {
  std::vector<mutation> v;
  auto add = [&](std::string n, std::function<void(plan_request&)> f) {
    v.push_back({std::move(n), std::move(f)});
  };
  add("--mode infer", [](plan_request& r) { r.mode = run_mode::infer; });
  add("--batch 4", [](plan_request& r) { r.batch = 4; });
  add("--micro-batch 1", [](plan_request& r) { r.batch = 4, r.micro_batch = 1; });
  add("--seq 256", [](plan_request& r) { r.seq = 256; });
  add("--prompt 300", [](plan_request& r) { r.prompt = 300; });
  add("--new-tokens 64", [](plan_request& r) { r.new_tokens = 64; });
  add("--image-size 256", [](plan_request& r) { r.image_size = 256; });
  for (auto p :
       {precision::fp32, precision::amp_bf16, precision::amp_fp16, precision::bf16, precision::fp8})
    add(std::string("--precision ") + to_string(p), [p](plan_request& r) { r.prec = p; });
  for (auto o :
       {optimizer_kind::sgd, optimizer_kind::sgd_momentum, optimizer_kind::adam,
        optimizer_kind::adamw_fused, optimizer_kind::adamw_8bit, optimizer_kind::paged_adamw_8bit})
    add(std::string("--optimizer ") + to_string(o), [o](plan_request& r) { r.optimizer = o; });
  add("--optimizer-in-backward", [](plan_request& r) { r.optimizer_in_backward = true; });
  add("--lora-rank 8", [](plan_request& r) { r.lora_rank = 8; });
  add("--lora-rank 8 --lora-targets attention",
      [](plan_request& r) { r.lora_rank = 8, r.lora_targets = lora_target::attention; });
  add("--lora-rank 8 --lora-targets q,v",
      [](plan_request& r) { r.lora_rank = 8, r.lora_targets = lora_target::q | lora_target::v; });
  add("--lora-rank 8 --lora-dropout 0.1",
      [](plan_request& r) { r.lora_rank = 8, r.lora_dropout = 0.1; });
  add("--lora-targets mlp (no --lora-rank)",
      [](plan_request& r) { r.lora_targets = lora_target::mlp; });
  add("--lora-dropout 0.1 (no --lora-rank)", [](plan_request& r) { r.lora_dropout = 0.1; });
  add("--lora-rank 8 --quant nf4",
      [](plan_request& r) { r.lora_rank = 8, r.quant = quant_kind::nf4; });
  add("--kv-cache-dtype fp8", [](plan_request& r) { r.kv_cache = kv_cache_kind::fp8; });
  add("--serving paged --kv-cache-dtype fp8",
      [](plan_request& r) { r.serving = serving_kind::paged, r.kv_cache = kv_cache_kind::fp8; });
  for (auto c : {checkpointing::full, checkpointing::selective})
    add(std::string("--checkpointing ") + to_string(c), [c](plan_request& r) { r.ckpt = c; });
  for (auto a : {attention_kind::flash, attention_kind::eager})
    add(std::string("--attention ") + to_string(a), [a](plan_request& r) { r.attention = a; });
  add("--gpus 2", [](plan_request& r) { r.gpus = 2; });
  add("--gpus-per-node 4", [](plan_request& r) { r.gpus_per_node = 4; });
  for (int z : {1, 2, 3})
    add("--gpus 2 --zero " + std::to_string(z), [z](plan_request& r) { r.gpus = 2, r.zero = z; });
  add("--zero 1 (one GPU)", [](plan_request& r) { r.zero = 1; });
  add("--gpus 2 --tp 2", [](plan_request& r) { r.gpus = 2, r.tp = 2; });
  add("--gpus 2 --tp 2 --sp", [](plan_request& r) { r.gpus = 2, r.tp = 2, r.sp = true; });
  add("--sp (no --tp)", [](plan_request& r) { r.sp = true; });
  add("--gpus 2 --pp 2", [](plan_request& r) { r.gpus = 2, r.pp = 2; });
  add("--gpus 2 --ep 2", [](plan_request& r) { r.gpus = 2, r.ep = 2; });
  add("--gpus 2 --tp 2 --ep 2", [](plan_request& r) { r.gpus = 2, r.tp = 2, r.ep = 2; });
  for (auto o : {offload_kind::optimizer, offload_kind::params})
    add(std::string("--offload ") + to_string(o), [o](plan_request& r) { r.offload = o; });
  for (auto q : {quant_kind::int8, quant_kind::int4, quant_kind::nf4, quant_kind::fp8})
    add(std::string("--quant ") + to_string(q), [q](plan_request& r) { r.quant = q; });
  add("--serving paged", [](plan_request& r) { r.serving = serving_kind::paged; });
  // Sized for Qwen1.5-MoE-A2.7B's 60 experts, every other one given no tokens: the other
  // models refuse it (no experts, or another count).
  add("--expert-load (every other expert idle)", [](plan_request& r) {
    std::vector<std::int64_t> row(60);
    for (std::size_t e = 0; e < row.size(); e += 2) row[e] = 3;
    r.expert_load = {row};
  });
  return v;
}

/// What a plan reports: the figures, when the peak happens, and the schedule's length (an option
/// may leave the peak alone in one request, e.g. more decode steps after a prefill peak, and
/// still change the step that was planned).
std::vector<std::uint64_t> figures(const plan_result& p) {
  std::vector<std::uint64_t> f{p.allocated_peak_bytes,
                               p.reserved_peak_bytes,
                               p.device_peak_bytes,
                               p.host_peak_bytes,
                               p.events,
                               static_cast<std::uint64_t>(p.peak_step),
                               static_cast<std::uint64_t>(p.peak_layer + 1)};
  for (const auto& c : p.components) f.push_back(c.bytes);
  return f;
}

/// Options that are accepted and leave the memory unchanged by design, with the reason (each is
/// documented in docs/plan.md): nothing else may be.
bool same_memory_by_design(const std::string& name) {
  // torch.optim.Adam and AdamW keep the same two fp32 moments; they differ in the update only.
  return name == "--optimizer adam";
}

void walk(const model_description& m, plan_request base) {
  base.validate(m);
  const auto before = figures(make_plan(m, base));
  int refused = 0, changed = 0;
  for (const auto& mu : mutations()) {
    SCOPED_TRACE(mu.name);
    plan_request r = base;
    mu.apply(r);
    try {
      r.validate(m);
    } catch (const vramkit::invalid_input&) {
      ++refused;
      continue;
    }
    if (r == base) continue;  // the option's value is the one the base already has
    const auto after = figures(make_plan(m, r));
    if (same_memory_by_design(mu.name)) continue;
    EXPECT_NE(after, before) << mu.name << " is accepted and changes nothing";
    ++changed;
  }
  EXPECT_GT(refused, 0);
  EXPECT_GT(changed, 5);
}

}  // namespace

TEST(OptionWalk, EveryOptionChangesATrainingPlanOrIsRefused) {
  plan_request r;
  r.batch = 2, r.seq = 128, r.prec = precision::fp32;
  walk(preset_model("tinyllama-1.1b"), r);
}

TEST(OptionWalk, EveryOptionChangesAnInferencePlanOrIsRefused) {
  plan_request r;
  r.mode = run_mode::infer, r.batch = 2, r.prompt = 128, r.new_tokens = 16;
  walk(preset_model("tinyllama-1.1b"), r);
}

TEST(OptionWalk, EveryOptionChangesAVisionPlanOrIsRefused) {
  plan_request r;
  r.batch = 8;
  walk(preset_model("resnet-18"), r);
}

/// As walk, over two bases of one model: every option must change the plan of at least one of
/// them or be refused by both (an option's effect may show only where its memory sets the peak:
/// flash attention's log-sum-exp in backward, optimizer-in-backward at the optimizer step).
void walk_pair(const model_description& m, plan_request a, plan_request b) {
  a.validate(m);
  b.validate(m);
  const auto fa = figures(make_plan(m, a)), fb = figures(make_plan(m, b));
  for (const auto& mu : mutations()) {
    SCOPED_TRACE(mu.name);
    bool accepted = false, changed = false, same_value = true;
    for (const auto* base : {&a, &b}) {
      plan_request r = *base;
      mu.apply(r);
      try {
        r.validate(m);
      } catch (const vramkit::invalid_input&) {
        continue;
      }
      accepted = true;
      if (r == *base) continue;
      same_value = false;
      changed = changed || figures(make_plan(m, r)) != (base == &a ? fa : fb);
    }
    if (!accepted || same_value || same_memory_by_design(mu.name)) continue;
    EXPECT_TRUE(changed) << mu.name << " is accepted and changes nothing";
  }
}

/// A config of tests/data/plan/configs.
model_description config(const std::string& file) {
  return load_model_config(std::string(VRAMKIT_SOURCE_DIR) + "/tests/data/plan/configs/" + file);
}

/// Training `batch` sequences of `seq` tokens in `prec` with SGD (the peak in backward).
plan_request sgd_training(std::int64_t batch, std::int64_t seq, precision prec) {
  plan_request r;
  r.batch = batch, r.seq = seq, r.prec = prec, r.optimizer = optimizer_kind::sgd;
  return r;
}

/// walk_pair over an SGD base and the same with AdamW.
void walk_sgd_and_adamw(const model_description& m, const plan_request& sgd) {
  plan_request adam = sgd;
  adam.optimizer = optimizer_kind::adamw;
  walk_pair(m, sgd, adam);
}

/// Generation of `batch` sequences (prompt and new tokens 0: the planner's defaults).
plan_request generation(std::int64_t batch, std::int64_t prompt = 0, std::int64_t new_tokens = 0) {
  plan_request i;
  i.mode = run_mode::infer, i.batch = batch, i.prompt = prompt, i.new_tokens = new_tokens;
  return i;
}

TEST(OptionWalk, EveryOptionChangesTheNewFamiliesPlansOrIsRefused) {
  for (const char* file : {"gemma-3-1b-l6.json", "gemma-2-2b-l4.json", "falcon-7b-l2.json",
                           "roberta-base.json", "vit-base-patch16-224.json", "flan-t5-base.json"}) {
    SCOPED_TRACE(file);
    const auto m = config(file);
    // Activations large enough to set the peak; 500 tokens so that flash attention's unrounded
    // log-sum-exp differs from SDPA's 128-row rounding.
    plan_request r;
    r.batch = m.is_vision() ? 32 : 4, r.prec = precision::bf16, r.optimizer = optimizer_kind::sgd;
    if (!m.is_vision()) r.seq = 500;
    walk_sgd_and_adamw(m, r);
    plan_request i = generation(2);
    if (m.family != model_family::bert && !m.is_vision()) i.prompt = 128, i.new_tokens = 8;
    walk(m, i);
  }
}

TEST(OptionWalk, EveryOptionChangesALlavaPlanOrIsRefused) {
  const auto m = config("llava-1.5-7b-l4.json");
  // 8 x 1000 tokens: the activations (and flash's unrounded log-sum-exp) set the SGD peak.
  walk_sgd_and_adamw(m, sgd_training(8, 1000, precision::bf16));
  walk(m, generation(2, 640, 8));
}

TEST(OptionWalk, EveryOptionChangesAMixtureOfExpertsPlanOrIsRefused) {
  const auto m = config("qwen1.5-moe-a2.7b-l2.json");
  // 100 tokens: flash attention's unrounded log-sum-exp differs from SDPA's 128-row rounding;
  // SGD keeps the peak in backward, where the saved activations are live.
  walk(m, sgd_training(2, 100, precision::amp_bf16));
  walk(m, generation(2, 128, 8));
}
