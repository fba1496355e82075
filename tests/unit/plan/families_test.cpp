// Families added after the walker's split: parameter counts against the published figures and
// the ops that set each family apart.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "vramkit/core/error.hpp"
#include "vramkit/plan/config_loader.hpp"
#include "vramkit/plan/memory_model.hpp"
#include "vramkit/plan/training_schedule.hpp"

using namespace vramkit::plan;

namespace {

std::string data(const char* file) {
  return std::string(VRAMKIT_SOURCE_DIR) + "/tests/data/plan/configs/" + file;
}

int count(const schedule& s, const char* label) {
  int n = 0;
  for (const auto& t : s.tensors) n += std::strcmp(t.label, label) == 0;
  return n;
}

/// A config of tests/data/plan/configs, one training step of it and that step's schedule.
struct one_step {
  model_description m;
  plan_request r;
  schedule s;
};

one_step train_one_step(const char* file, std::int64_t batch, std::int64_t seq, precision prec,
                        int gpus = 1) {
  one_step o{load_model_config(data(file)), {}, {}};
  o.r.batch = batch, o.r.seq = seq, o.r.prec = prec, o.r.gpus = gpus, o.r.steps = 1;
  o.r.validate(o.m);
  o.s = build_schedule(o.m, o.r);
  return o;
}

}  // namespace

TEST(Families, Phi3MiniHasItsPublishedParameterCount) {
  const auto m = load_model_config(data("phi-3-mini.json"));
  EXPECT_EQ(m.family, model_family::phi3);
  EXPECT_EQ(parameter_count(m), 3821079552u);  // Phi-3-mini-4k-instruct: 3.82B
  EXPECT_EQ(m.t.sliding_window, 2047);
}

TEST(Families, Phi3PacksQkvAndGateUpIntoOneProjectionEach) {
  auto m = load_model_config(data("phi-3-mini-l8.json"));
  plan_request r;
  r.batch = 1, r.seq = 256, r.prec = precision::amp_bf16;
  r.validate(m);
  const auto phi = build_schedule(m, r);
  // One autocast cast of the norm output per projection group: qkv and gate_up.
  EXPECT_EQ(count(phi, "qkv"), 8 * 3);  // 3 training steps
  EXPECT_EQ(count(phi, "query"), 0);
  EXPECT_EQ(count(phi, "mlp gate_up"), 8 * 3);
  auto llama = m;
  llama.family = model_family::llama;
  llama.t.mlp = mlp_kind::swiglu;
  const auto l = build_schedule(llama, r);
  EXPECT_LT(count(phi, "autocast input cast"), count(l, "autocast input cast"));
  // With activations dominating (SGD, longer sequences) the saved casts show in the peak.
  r.optimizer = optimizer_kind::sgd, r.batch = 4, r.seq = 1024;
  EXPECT_LT(make_plan(m, r).allocated_peak_bytes, make_plan(llama, r).allocated_peak_bytes);
}

// ---- mixture of experts and latent attention ------------------------------------------------

namespace {

std::uint64_t sum_bytes(const schedule& s, component c) {
  std::uint64_t n = 0;
  for (const auto& e : s.events)
    if (e.alloc && e.comp == c && s.tensors[e.tensor].ph == phase::setup) n += e.bytes;
  return n;
}

std::uint64_t kv_bytes(const schedule& s) {
  std::uint64_t live = 0, peak = 0;
  for (const auto& e : s.events) {
    if (e.comp != component::kv_cache) continue;
    live = e.alloc ? live + e.bytes : live - e.bytes;
    peak = std::max(peak, live);
  }
  return peak;
}

}  // namespace

TEST(Families, MoeModelsHaveTheirPublishedParameterCounts) {
  // Hugging Face model cards: Mixtral-8x7B 46.7B, Qwen1.5-MoE-A2.7B 14.3B, Qwen3-30B-A3B 30.5B,
  // DeepSeek-V2-Lite 15.7B, DeepSeek-V3 671B (without the multi-token-prediction layer, which
  // transformers does not load).
  EXPECT_EQ(parameter_count(load_model_config(data("mixtral-8x7b.json"))), 46702792704u);
  EXPECT_EQ(parameter_count(load_model_config(data("qwen1.5-moe-a2.7b.json"))), 14315784192u);
  EXPECT_EQ(parameter_count(load_model_config(data("qwen3-30b-a3b.json"))), 30532122624u);
  EXPECT_EQ(parameter_count(load_model_config(data("deepseek-v2-lite.json"))), 15706484224u);
  const auto v3 = load_model_config(data("deepseek-v3.json"));
  EXPECT_EQ(v3.family, model_family::deepseek);
  EXPECT_NEAR(static_cast<double>(parameter_count(v3)), 671.0e9, 0.1e9);
  EXPECT_FALSE(v3.t.sparse(2));  // first_k_dense_replace = 3
  EXPECT_TRUE(v3.t.sparse(3));
}

TEST(Families, Qwen3DenseNormalisesQueryAndKeyHeadsWithoutBiases) {
  // Qwen3-8B and Qwen3-0.6B as published: 8.19B and 0.60B parameters (the 0.6B ties its
  // embeddings); per layer q, k, v, o without biases and an RMSNorm of head_dim over each query
  // and key head.
  const auto big = load_model_config(data("qwen3-8b.json"));
  EXPECT_EQ(big.family, model_family::llama);
  EXPECT_TRUE(big.t.qk_norm);
  EXPECT_FALSE(big.t.qkv_bias);
  EXPECT_EQ(parameter_count(big), 8190735360u);
  const auto small = load_model_config(data("qwen3-0.6b.json"));
  EXPECT_TRUE(small.t.tied_embeddings);
  EXPECT_EQ(parameter_count(small), 596049920u);
  // In training each of the 6 layers runs four RMSNorms (input, query heads, key heads,
  // post-attention), then the final norm.
  const auto s = train_one_step("qwen3-8b-l6.json", 1, 512, precision::amp_bf16).s;
  EXPECT_EQ(count(s, "rmsnorm rstd"), 6 * 4 + 1);
  // Under autocast the per-head norms return weight * x in fp32 (the weight's dtype), and the
  // key is projected only after the query's norm (q_norm(q_proj(x)), then k_norm(k_proj(x))).
  const std::uint64_t q_fp32 = 512ull * 32 * 128 * 4, k_fp32 = 512ull * 8 * 128 * 4;
  int q_outputs = 0, k_outputs = 0;
  std::size_t first_q_norm = 0, first_key = 0;
  for (std::size_t i = 0; i < s.tensors.size(); ++i) {
    const auto& t = s.tensors[i];
    if (std::strcmp(t.label, "rmsnorm output") == 0 && t.bytes == q_fp32 && q_outputs++ == 0)
      first_q_norm = i;
    if (std::strcmp(t.label, "rmsnorm output") == 0 && t.bytes == k_fp32) ++k_outputs;
    if (std::strcmp(t.label, "key") == 0 && first_key == 0) first_key = i;
  }
  // The query heads' fp32 output has the residual stream's size (32 x 128 = 4096): per layer the
  // input, query and post-attention norms, then the final norm.
  EXPECT_EQ(q_outputs, 6 * 3 + 1);
  EXPECT_EQ(k_outputs, 6);
  EXPECT_LT(first_q_norm, first_key);
}

TEST(Families, MoeBlockLoopsOverTheExpertsWithBalancedRouting) {
  const auto s = train_one_step("mixtral-8x7b-l2.json", 1, 512, precision::amp_bf16).s;
  // 2 layers x 8 experts: one gathered token set, gate_up and down per expert.
  EXPECT_EQ(count(s, "expert tokens"), 16);
  EXPECT_EQ(count(s, "expert gate_up"), 16);
  EXPECT_EQ(count(s, "expert weight cast"), 32);  // autocast casts each slice afresh
  EXPECT_EQ(count(s, "expert mask (one_hot)"), 2);
  for (const auto& t : s.tensors)
    if (std::strcmp(t.label, "expert gate_up") == 0) {
      // 512 tokens x top-2 / 8 experts = 128 tokens each, 2 x 14336 outputs in bf16.
      EXPECT_EQ(t.bytes, 128u * 2 * 14336 * 2);
    }
  // Each expert's backward scatters into a whole-parameter gradient (select backward).
  EXPECT_GE(count(s, "gradient to accumulate"), 2 * 2 * 7);
}

TEST(Families, IndexAddSavesEachExpertsSourceForBackward) {
  // final_hidden_states.index_add_(0, token_idx, current_hidden_states.to(fp32)): the source's
  // gradient is grad.index_select(...).expand_as(source), so autograd keeps every expert's source
  // (the fp32 cast under autocast, the scaled output itself in bf16) until backward (H200 trace
  // of Qwen3-30B-A3B training, run AG).
  for (const precision prec : {precision::amp_bf16, precision::bf16}) {
    const auto s = train_one_step("mixtral-8x7b-l2.json", 1, 256, prec).s;
    const char* source = prec == precision::amp_bf16 ? "expert output cast" : "expert scaled";
    std::size_t first_backward = s.events.size();
    for (std::size_t i = 0; i < s.events.size(); ++i)
      if (s.events[i].alloc && s.tensors[s.events[i].tensor].ph == phase::backward) {
        first_backward = i;
        break;
      }
    int sources = 0;
    for (std::size_t i = 0; i < s.events.size(); ++i) {
      const auto& t = s.tensors[s.events[i].tensor];
      if (s.events[i].alloc || std::strcmp(t.label, source) != 0) continue;
      ++sources;
      EXPECT_GT(i, first_backward) << source << " freed in the forward";
    }
    EXPECT_EQ(sources, 2 * 8);  // 2 layers x 8 experts
  }
}

TEST(Families, ExpertLoadReplaysARecordedRoutingScaledToTheTokens) {
  auto [m, r, balanced] = train_one_step("mixtral-8x7b-l2.json", 1, 512, precision::amp_bf16);
  // Expert 0 gets 5 shares, 1 and 2 one each, 3 none, the rest one each: 12 shares of the
  // 512 x 2 token copies.
  r.expert_load = {{5, 1, 1, 0, 1, 1, 1, 2}};
  r.validate(m);
  const auto skewed = build_schedule(m, r);
  // Expert 3 is skipped in both layers, as transformers' loop over the experts hit.
  EXPECT_EQ(count(balanced, "expert gate_up"), 16);
  EXPECT_EQ(count(skewed, "expert gate_up"), 14);
  std::vector<std::uint64_t> sizes;
  for (const auto& t : skewed.tensors)
    if (std::strcmp(t.label, "expert gate_up") == 0) sizes.push_back(t.bytes / (2ull * 14336 * 2));
  // 1024 x 5/12 = 426.67: 426, plus one of the three copies the floors leave, its remainder
  // (8/12) being among the largest.
  ASSERT_EQ(sizes.size(), 14u);
  EXPECT_EQ(sizes[0], 427u);
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < 7; ++i) total += sizes[i];
  EXPECT_EQ(total, 1024u);
  // The hot expert's intermediates raise the allocated peak of an SGD step (backward-bound).
  r.optimizer = optimizer_kind::sgd, r.prec = precision::bf16;
  plan_request even = r;
  even.expert_load.clear();
  EXPECT_GT(make_plan(m, r).allocated_peak_bytes, make_plan(m, even).allocated_peak_bytes);
  // Each entry must name every expert, route something and have no negative count; dense
  // models and --ep refuse it.
  for (const std::vector<std::int64_t>& bad :
       {std::vector<std::int64_t>{1, 1, 1}, std::vector<std::int64_t>(8, 0),
        std::vector<std::int64_t>{1, 1, 1, 1, 1, 1, 1, -1}}) {
    r.expert_load = {bad};
    EXPECT_THROW(r.validate(m), vramkit::invalid_input);
  }
  r.expert_load = {{5, 1, 1, 0, 1, 1, 1, 2}};
  r.gpus = 2, r.ep = 2;
  EXPECT_THROW(r.validate(m), vramkit::invalid_input);
  plan_request dense;
  dense.expert_load = r.expert_load;
  EXPECT_THROW(dense.validate(load_model_config(data("llama-3-8b-l4.json"))),
               vramkit::invalid_input);
}

TEST(Families, ExpertLoadFilesAreReadInTheRecordedAndThePlainShape) {
  const auto recorded =
      load_expert_load(std::string(VRAMKIT_SOURCE_DIR) +
                       "/tests/data/plan/expert_load/qwen3-30b-a3b-l2-b4-s1024-seed1.json");
  // Three steps x two MoE layers of Qwen3-30B-A3B (128 experts, top 8, 4 x 1024 tokens).
  ASSERT_EQ(recorded.size(), 6u);
  for (const auto& row : recorded) {
    ASSERT_EQ(row.size(), 128u);
    std::int64_t sum = 0;
    for (const auto v : row) sum += v;
    EXPECT_EQ(sum, 4 * 1024 * 8);
  }
  const auto m = load_model_config(data("qwen3-30b-a3b-l2.json"));
  plan_request r;
  r.batch = 4, r.seq = 1024, r.prec = precision::amp_bf16, r.expert_load = recorded;
  EXPECT_NO_THROW(r.validate(m));
  EXPECT_EQ(parse_expert_load("[[1, 2], [3, 4]]", "t").size(), 2u);
  EXPECT_EQ(parse_expert_load(R"({"calls": [[0, [1, 2]], [1, [3, 4]]]})", "t")[1][1], 4);
  for (const char* bad : {"{}", "[]", "[[1, 2.5]]", "[[]]", "not json", R"({"calls": 3})"})
    EXPECT_THROW(parse_expert_load(bad, "t"), vramkit::invalid_input) << bad;
}

TEST(Families, ExpertParallelSplitsExpertWeightsAndAddsAllToAllBuffers) {
  auto [m, r, one] = train_one_step("qwen1.5-moe-a2.7b-l2.json", 4, 256, precision::bf16, 4);
  r.ep = 4;
  r.validate(m);
  const auto four = build_schedule(m, r);
  const std::uint64_t experts = 2ull * 60 * 3 * 2048 * 1408 * 2;  // bf16 routed experts
  EXPECT_EQ(sum_bytes(one, component::weights) - sum_bytes(four, component::weights),
            experts - experts / 4);
  EXPECT_EQ(count(one, "all-to-all dispatch receive"), 0);
  EXPECT_EQ(count(four, "all-to-all dispatch receive"), 2);
  EXPECT_EQ(count(four, "expert gate_up"), 2 * 15);
  EXPECT_EQ(count(four, "shared expert gate"), 2);
  r.ep = 7;
  EXPECT_THROW(r.validate(m), vramkit::invalid_input);
  auto dense = load_model_config(data("llama-3-8b-l4.json"));
  plan_request d;
  d.ep = 2, d.gpus = 2;
  EXPECT_THROW(d.validate(dense), vramkit::invalid_input);
}

TEST(Families, LatentAttentionCachesDecompressedKvInGenerateAndTheLatentWhenPaged) {
  const auto m = load_model_config(data("deepseek-v2-lite-l2.json"));
  plan_request r;
  r.mode = run_mode::infer, r.batch = 2, r.prompt = 256, r.new_tokens = 1;
  r.validate(m);
  // transformers: 16 heads x (192-dim keys + 128-dim values), bf16, per token and layer.
  EXPECT_EQ(kv_bytes(build_schedule(m, r)), 2u * 2 * 2 * 256 * (16 * (192 + 128) * 2 / 2));
  r.serving = serving_kind::paged;
  r.validate(m);
  // Paged (vLLM MLA): kv_lora_rank 512 + rope 64 per token and layer, blocks of 16 tokens.
  EXPECT_EQ(kv_bytes(build_schedule(m, r)), 2u * 2 * 272 * (512 + 64) * 2);
}

TEST(Families, LatentAttentionTrainsWithItsProjections) {
  const auto [m, r, s] = train_one_step("deepseek-v3-l2.json", 1, 128, precision::bf16);
  EXPECT_EQ(count(s, "q_a_proj"), 2);
  EXPECT_EQ(count(s, "kv_b_proj"), 2);
  EXPECT_EQ(count(s, "mlp gate"), 1);            // layer 0 is dense
  EXPECT_EQ(count(s, "router logits fp32"), 1);  // DeepSeek routes in fp32
  for (const auto& t : s.tensors)
    if (std::strcmp(t.label, "attention output") == 0) EXPECT_EQ(t.bytes, 128u * 128 * 128 * 2);
  EXPECT_GT(make_plan(m, r).allocated_peak_bytes, sum_bytes(s, component::weights));
}

namespace {

/// The schedule of a bf16 generate() of a config of tests/data/plan/configs.
schedule generate_schedule(const char* file, std::int64_t batch, std::int64_t prompt,
                           std::int64_t new_tokens) {
  plan_request r;
  r.mode = run_mode::infer;
  r.batch = batch, r.prompt = prompt, r.new_tokens = new_tokens, r.prec = precision::bf16;
  const auto m = load_model_config(data(file));
  r.validate(m);
  return build_schedule(m, r);
}

/// The tensors live at the schedule's allocated peak.
std::vector<const tensor_info*> live_at_peak(const schedule& s) {
  std::uint64_t live = 0, best = 0;
  std::size_t at = 0;
  for (std::size_t i = 0; i < s.events.size(); ++i) {
    live = s.events[i].alloc ? live + s.events[i].bytes : live - s.events[i].bytes;
    if (live > best) best = live, at = i;
  }
  std::vector<char> on(s.tensors.size(), 0);
  for (std::size_t i = 0; i <= at && i < s.events.size(); ++i)
    on[s.events[i].tensor] = s.events[i].alloc ? 1 : 0;
  std::vector<const tensor_info*> out;
  for (std::size_t t = 0; t < on.size(); ++t)
    if (on[t]) out.push_back(&s.tensors[t]);
  return out;
}

}  // namespace

// Run J's allocator trace of Falcon-7B (3 layers, bf16) generating from a b4 p1024 prompt: at the
// peak SDPA's math fallback holds the fp32 scores, their softmax and the bool mask of the -inf
// scores (no second fp32 tensor from _safe_softmax's where()), the fp32 query and scaled query,
// transformers' bool mask and SDPA's bf16 additive one, the fused query_key_value output and the
// norm output the parallel MLP reads later. The plan held a third fp32 score tensor (+19.4%).
TEST(Families, FalconMathAttentionAtInferenceHoldsWhatTheTraceHolds) {
  const auto s = generate_schedule("falcon-7b-l3.json", 4, 1024, 16);
  const auto live = live_at_peak(s);
  const std::uint64_t scores = 4ull * 71 * 1024 * 1024;
  int fp32_scores = 0, bool_scores = 0, fp32_queries = 0;
  bool fused = false, norm = false, bool_mask = false, additive = false;
  for (const auto* t : live) {
    fp32_scores += t->bytes == scores * 4;
    bool_scores += t->bytes == scores;
    fp32_queries += t->bytes == 4ull * 1024 * 71 * 64 * 4;
    fused = fused || std::strcmp(t->label, "fused query_key_value") == 0;
    norm = norm || std::strcmp(t->label, "norm output") == 0;
    bool_mask = bool_mask || t->bytes == 4ull * 1024 * 1024;
    additive = additive || t->bytes == 4ull * 1024 * 1024 * 2;
  }
  EXPECT_EQ(fp32_scores, 2);
  EXPECT_EQ(bool_scores, 1);
  EXPECT_EQ(fp32_queries, 2);
  EXPECT_TRUE(fused);
  EXPECT_TRUE(norm);
  EXPECT_TRUE(bool_mask);
  EXPECT_TRUE(additive);
}

// Run J's allocator trace of a Mistral prefill (b4 p3000, 1024-token window): the decoder layer
// holds its norm output until the attention's output projection exists, RoPE makes x * cos,
// the negated half, the cat, its product with sin and their sum, and the layer's input (held by
// the model's loop) dies only after the layer's output exists. With the norm output and the
// input dropped early and RoPE as two temporaries the plan was -10.8% on reserved bytes.
TEST(Families, PrefillLayerKeepsItsInputAndNormOutputAsTheTraceDoes) {
  const auto s = generate_schedule("mistral-7b-l4-w1024.json", 4, 3000, 2);
  // Event index of the n-th alloc or free (0-based) of `label` in layer 1 of the prefill.
  const auto at = [&](const char* label, bool alloc, int nth = 0) {
    for (std::size_t i = 0; i < s.events.size(); ++i) {
      const auto& t = s.tensors[s.events[i].tensor];
      if (t.layer == 1 && t.ph == phase::prefill && s.events[i].alloc == alloc &&
          std::strcmp(t.label, label) == 0 && nth-- == 0)
        return static_cast<long>(i);
    }
    return -1L;
  };
  ASSERT_GE(at("attention projection", true), 0);
  EXPECT_LT(at("attention projection", true), at("norm output", false));
  EXPECT_GE(at("rope negated half", true), 0);
  EXPECT_GE(at("rope rotated * sin", true), 0);
  // Layer 0's output is layer 1's input: it is freed after layer 1's second residual exists.
  long input_freed = -1;
  for (std::size_t i = 0; i < s.events.size(); ++i) {
    const auto& t = s.tensors[s.events[i].tensor];
    if (t.layer == 0 && t.ph == phase::prefill && !s.events[i].alloc &&
        std::strcmp(t.label, "residual") == 0)
      input_freed = static_cast<long>(i);  // the last residual of layer 0 freed
  }
  EXPECT_GT(input_freed, at("residual", true, 1));
}

TEST(Families, VitPatchConvolutionTakesCudnnWorkspaceAsMeasured) {
  // cuDNN's forward workspace for ViT-B/16's patch convolution on the H200: fp32 none below 56
  // images and 1404928 bytes an image + 3 MiB from 56 to 160; bf16 1103872 an image + 3 MiB.
  const auto m = load_model_config(data("vit-base-patch16-224.json"));
  auto workspace = [&](std::int64_t batch, precision prec) {
    plan_request r;
    r.mode = run_mode::infer, r.batch = batch, r.prec = prec;
    r.validate(m);
    const auto s = build_schedule(m, r);
    std::uint64_t b = 0;
    for (const auto& t : s.tensors)
      if (std::strcmp(t.label, "patch convolution workspace (cuDNN)") == 0) b = t.bytes;
    return b;
  };
  EXPECT_EQ(workspace(48, precision::fp32), 0u);
  EXPECT_EQ(workspace(64, precision::fp32), 93061136u);
  EXPECT_EQ(workspace(128, precision::fp32), 182976528u);
  EXPECT_EQ(workspace(64, precision::bf16), 73793552u);
}

TEST(Families, MaskedLmCrossEntropyUnderAutocastRunsLogSoftmaxIn16Bits) {
  // CrossEntropyLoss on 16-bit logits under autocast: cross_entropy_loss passes the input's dtype
  // to log_softmax, so it runs in 16 bits (its output saved), and autocast casts that to fp32
  // for nll_loss (saved by it); the logits themselves die with the model output (an H200 trace
  // of F.cross_entropy alone, fp16 and bf16 alike, and RoBERTa amp-fp16 training traces).
  const auto o = train_one_step("roberta-base.json", 8, 256, precision::amp_fp16);
  const std::uint64_t n = 8ull * 256 * 50265;
  std::uint64_t lsm = 0;
  std::uint64_t nll = 0;
  for (const auto& t : o.s.tensors) {
    if (std::strcmp(t.label, "log_softmax") == 0) lsm = t.bytes;
    if (std::strcmp(t.label, "nll_loss input (fp32)") == 0) nll = t.bytes;
  }
  EXPECT_EQ(lsm, n * 2);
  EXPECT_EQ(nll, n * 4);
}
