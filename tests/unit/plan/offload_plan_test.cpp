// The offload plan of a request: figures that move the right way with the mix, compression and
// optimizer offload, the fit choosing offload only when it helps, the option parsers.
#include "vramkit/plan/offload_plan.hpp"

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "vramkit/core/error.hpp"
#include "vramkit/plan/config_loader.hpp"

namespace vramkit::plan {
namespace {

struct OffloadPlan : ::testing::Test {  // NOLINT(readability-identifier-naming): gtest's name
  model_description m = preset_model("tinyllama-1.1b");
  plan_request r;
  const gpu_spec& gpu = find_gpu("h200");
  OffloadPlan() {
    r.prec = precision::amp_bf16;
    r.batch = 8;
    r.seq = 2048;
  }
  offload_plan with(int blocks, const char* compress = "none", bool optimizer = false) {
    offload_option o;
    o.activations = blocks > 0;
    o.activation_blocks = blocks;
    o.optimizer = optimizer;
    return plan_offload(m, r, o, parse_compress_option(compress), gpu, default_overheads());
  }
};

TEST_F(OffloadPlan, MoreOffloadedBlocksLowerTheDevicePeakAndRaiseHostBytes) {
  const auto none = with(0), half = with(11), all = with(22);
  const auto base = make_plan(m, r);
  EXPECT_GT(none.setup.saved_bytes_per_block, 0u);
  // Every block checkpointed: the memory model's full-checkpointing peak; nothing offloaded or
  // checkpointed: the memory model's plan (the two anchors).
  plan_request rc = r;
  rc.ckpt = checkpointing::full;
  const auto ck = evaluate_offload(none.setup, arrange_mix(22, 0, 22), {}, false);
  EXPECT_NEAR(static_cast<double>(ck.allocated_peak_bytes),
              static_cast<double>(make_plan(m, rc).allocated_peak_bytes), 1e6);
  EXPECT_NEAR(static_cast<double>(none.allocated_peak_bytes),
              static_cast<double>(base.allocated_peak_bytes), 1e6);
  EXPECT_EQ(none.host_pinned_bytes, 0u);
  EXPECT_LT(half.allocated_peak_bytes, none.allocated_peak_bytes);
  EXPECT_LT(all.allocated_peak_bytes, half.allocated_peak_bytes);
  EXPECT_EQ(all.host_pinned_bytes, 22 * all.setup.inputs.block_bytes);
  EXPECT_GE(all.step_time_s, none.step_time_s);
  EXPECT_EQ(all.setup.link.source, "catalogue: " + gpu.name);
}

// --offload activations:MIX evaluates that mix; --checkpointing full checkpoints the blocks not
// offloaded; the time of every block kept is the cost model's plain step.
TEST_F(OffloadPlan, GivenMixesAndCheckpointingFull) {
  const auto none = with(0);
  plan_request rv = r;
  rv.validate(m);
  EXPECT_NEAR(none.step_time_s, estimate_step_time(m, rv, gpu, default_overheads()),
              1e-9 * none.step_time_s);
  offload_option o = parse_offload_option("activations:2", 22);
  plan_request rc = r;
  rc.ckpt = checkpointing::full;
  const auto two = plan_offload(m, rc, o, {}, gpu, default_overheads());
  EXPECT_EQ(two.mix, arrange_mix(22, 2, 20));
  std::string letters(22, 'c');
  letters[0] = 'o';
  letters[21] = 'k';
  o = parse_offload_option("activations:" + letters, 22);
  const auto given = plan_offload(m, r, o, {}, gpu, default_overheads());
  EXPECT_EQ(given.mix.front(), block_policy::offload);
  EXPECT_EQ(given.mix.back(), block_policy::keep);
  EXPECT_EQ(given.host_pinned_bytes, given.setup.inputs.block_bytes);
  EXPECT_THROW(plan_offload(m, rc, o, {}, gpu, default_overheads()), invalid_input);
}

TEST_F(OffloadPlan, CompressionHalvesStoredBytesAndCountsPackTime) {
  const auto plain = with(22), comp = with(22, "fp8");
  EXPECT_LT(comp.setup.inputs.block_bytes, plain.setup.inputs.block_bytes);
  EXPECT_LT(comp.host_pinned_bytes, plain.host_pinned_bytes);
  EXPECT_GT(comp.setup.pack_s_per_block, 0);
  EXPECT_EQ(comp.setup.inputs.pack_s, comp.setup.pack_s_per_block);
  EXPECT_EQ(comp.setup.inputs.t_fwd_s, plain.setup.inputs.t_fwd_s);  // the kernels apart
  EXPECT_GT(comp.estimate.compute_s, plain.estimate.compute_s);
  // A checkpointed block saves only its input and recomputes uncompressed: no kernels, so with
  // every block checkpointed compression changes neither the time nor the peak.
  const auto ck_plain = evaluate_offload(plain.setup, arrange_mix(22, 0, 22), {}, false);
  const auto fp8 = parse_compress_option("fp8");
  const auto ck_comp = evaluate_offload(comp.setup, arrange_mix(22, 0, 22), fp8, false);
  EXPECT_NEAR(ck_comp.step_time_s, ck_plain.step_time_s, 1e-12);
  // Kept blocks pay the encode and the decode once each.
  const auto keep_plain = evaluate_offload(plain.setup, arrange_mix(22, 0, 0), {}, false);
  const auto keep_comp = evaluate_offload(comp.setup, arrange_mix(22, 0, 0), fp8, false);
  EXPECT_NEAR(keep_comp.step_time_s - keep_plain.step_time_s,
              22 * (comp.setup.pack_s_per_block + comp.setup.unpack_s_per_block), 1e-9);
  const auto mlp = with(0, "fp8:mlp"), both = with(0, "fp8:mlp,attn");
  EXPECT_LT(mlp.setup.compressible_bytes_per_block, both.setup.compressible_bytes_per_block);
  EXPECT_LT(both.allocated_peak_bytes, with(0).allocated_peak_bytes);
  // With the norms (fp32 in amp) the stored bytes reach half of bf16's: what the attention
  // kernel saves (q, k, v, output, log-sum-exp) stays.
  const auto all = with(0, "fp8:mlp,attn,norm");
  // Keeping every block: the plan's peak less what compression saves in each block.
  const double saving =
      22.0 * static_cast<double>(all.setup.saved_bytes_per_block - all.setup.inputs.block_bytes);
  EXPECT_NEAR(static_cast<double>(all.allocated_peak_bytes),
              static_cast<double>(make_plan(m, r).allocated_peak_bytes) - saving, 1e6);
  EXPECT_GT(all.setup.compressible_bytes_per_block, both.setup.compressible_bytes_per_block);
  const double ratio = static_cast<double>(all.setup.inputs.block_bytes) /
                       static_cast<double>(all.setup.saved_bytes_per_block);
  EXPECT_LT(ratio, 0.55);
  EXPECT_GT(ratio, 0.40);
  const double without_norm = static_cast<double>(both.setup.inputs.block_bytes) /
                              static_cast<double>(both.setup.saved_bytes_per_block);
  // The fp32 norm tensors and the attention kernel's dominate what is left: (26h + 4f)/(34h + 8f)
  // with the casts sharing a copy, about 2/3 for TinyLlama's h = 2048, f = 5632.
  EXPECT_GT(without_norm, 0.60);
  EXPECT_LT(without_norm, 0.70);
}

TEST_F(OffloadPlan, CompressionShrinksWhatASelectiveBlockKeeps) {
  const auto plain = with(0), comp = with(0, "fp8:mlp,attn,norm");
  const auto& pi = plain.setup.inputs;
  const auto& ci = comp.setup.inputs;
  EXPECT_EQ(pi.selective_stored_bytes, 0u);
  EXPECT_EQ(ci.selective_bytes, pi.selective_bytes);
  // The MLP's and o_proj's outputs at fp8; q, k, v and the attention kernel's exact:
  // (4h + 2f) a token of (8h + 2f + ...) bf16 elements halved, about 0.68 for TinyLlama.
  const double ratio =
      static_cast<double>(ci.selective_stored_bytes) / static_cast<double>(ci.selective_bytes);
  EXPECT_GT(ratio, 0.6);
  EXPECT_LT(ratio, 0.75);
  EXPECT_GT(ci.selective_pack_s, 0);
  EXPECT_EQ(ci.selective_unpack_s, ci.selective_pack_s);
  std::vector<block_policy> mix(22, block_policy::selective);
  const auto fp8 = parse_compress_option("fp8:mlp,attn,norm");
  const auto s_plain = evaluate_offload(plain.setup, mix, {}, false);
  const auto s_comp = evaluate_offload(comp.setup, mix, fp8, false);
  EXPECT_LT(s_comp.allocated_peak_bytes, s_plain.allocated_peak_bytes);
  EXPECT_GT(s_comp.step_time_s, s_plain.step_time_s);  // the codec's kernels
  std::fill(mix.begin(), mix.end(), block_policy::selective_offload);
  EXPECT_EQ(evaluate_offload(comp.setup, mix, fp8, false).host_pinned_bytes,
            22 * ci.selective_stored_bytes);
}

TEST_F(OffloadPlan, RecomputeStoresLessAndCostsTraffic) {
  const auto all = with(0, "fp8:mlp,attn,norm"), rc = with(0, "fp8:mlp,attn,norm:recompute");
  // Products and normalized outputs are not stored; the norms' fp32 inputs stay as they are:
  // per row f + 2h fp8 bytes fewer, 4h more (f = 5632, h = 2048 here: fewer in all).
  EXPECT_LT(rc.setup.inputs.block_bytes, all.setup.inputs.block_bytes);
  EXPECT_LT(rc.allocated_peak_bytes, all.allocated_peak_bytes);
  EXPECT_LT(rc.setup.pack_s_per_block, all.setup.pack_s_per_block);
  EXPECT_GT(rc.setup.unpack_s_per_block, rc.setup.pack_s_per_block);  // the products' traffic
  // Modelled for compression alone: refused with offloaded or checkpointed blocks, and by --fit.
  EXPECT_THROW(with(4, "fp8:mlp:recompute"), invalid_input);
  EXPECT_THROW(fit_offload(m, r, 40ull << 30, true, parse_compress_option("fp8:mlp:recompute"), gpu,
                           default_overheads()),
               invalid_input);
}

TEST_F(OffloadPlan, CompressedBlocksHoldTheirRecomputeAndDecodes) {
  const auto s = with(0, "fp8:mlp,attn,norm").setup;
  EXPECT_EQ(s.inputs.recompute_bytes, s.saved_bytes_per_block);
  EXPECT_GT(s.inputs.decode_bytes, s.inputs.block_bytes);
  // Every block checkpointed: each recomputes uncompressed, so the peak is the uncompressed
  // plan's (the first version counted the compressed block, 1 GiB less here).
  const auto mix = arrange_mix(22, 0, 22);
  const auto plain_ck = evaluate_offload(with(0, "none").setup, mix, {}, false);
  const auto comp_ck = evaluate_offload(s, mix, parse_compress_option("fp8:mlp,attn,norm"), false);
  EXPECT_EQ(comp_ck.allocated_peak_bytes, plain_ck.allocated_peak_bytes);
  offload_inputs in = s.inputs;
  in.recompute_bytes = 0;
  in.loss_bytes = in.block_bytes;
  EXPECT_NEAR(static_cast<double>(simulate_offload(mix, s.inputs).device_peak_bytes -
                                  simulate_offload(mix, in).device_peak_bytes),
              static_cast<double>(s.saved_bytes_per_block - s.inputs.block_bytes), 1e3);
  // Kept compressed blocks behind checkpointed ones: their backward decodes into what the loss and
  // the recompute freed, so the decoded tensors add nothing (as measured on the engine's fp8-kept
  // mixes, tests/data/offload/measured_compress_offload.json).
  const auto kept = arrange_mix(22, 0, 11);
  in = s.inputs;
  in.decode_bytes = 0;
  EXPECT_EQ(simulate_offload(kept, s.inputs).device_peak_bytes,
            simulate_offload(kept, in).device_peak_bytes);
  // Offloaded compressed blocks: fetched back and decoded beside what the device still holds.
  const auto moved = arrange_mix(22, 11, 0);
  EXPECT_GT(simulate_offload(moved, s.inputs).device_peak_bytes,
            simulate_offload(moved, in).device_peak_bytes);
  // Without compression nothing changes.
  const auto plain = with(0, "none").setup;
  EXPECT_EQ(plain.inputs.recompute_bytes, 0U);
  EXPECT_EQ(plain.inputs.decode_bytes, 0U);
}

// The allocator's cache beside a mix's allocated peak is the memory model's, of the plan whose
// peak moment the mix shares: full checkpointing's when a block recomputes, the plan without
// checkpointing's otherwise; the fit counts it per mix against the capacity.
TEST_F(OffloadPlan, AllocatorCachePerMixFromItsAnchorPlan) {
  const auto s = with(0).setup;
  plan_request rc = r;
  rc.ckpt = checkpointing::full;
  const auto full = make_plan(m, rc), base = make_plan(m, r);
  const std::uint64_t full_cache = full.reserved_peak_bytes - full.allocated_peak_bytes;
  const std::uint64_t base_cache = base.reserved_peak_bytes - base.allocated_peak_bytes;
  ASSERT_NE(full_cache, base_cache);  // the test tells them apart
  EXPECT_EQ(s.inputs.cache_bytes, full_cache);
  EXPECT_EQ(s.inputs.cache_bytes_without_recompute, base_cache);
  const std::vector<block_policy> kept(22, block_policy::keep);
  auto offloaded = kept;
  offloaded[0] = block_policy::offload;
  auto selective = kept;
  selective[3] = block_policy::selective;
  for (const auto& [mix, cache] : {std::pair{kept, base_cache}, std::pair{offloaded, base_cache},
                                   std::pair{selective, full_cache}}) {
    const auto p = evaluate_offload(s, mix, {}, false);
    EXPECT_EQ(allocator_cache_bytes(mix, s.inputs), cache);
    EXPECT_EQ(p.device_peak_bytes, p.allocated_peak_bytes + cache + s.context_bytes);
  }
  // Every block kept: the plan's own device peak (its reserved plus the context).
  EXPECT_NEAR(static_cast<double>(evaluate_offload(s, kept, {}, false).device_peak_bytes),
              static_cast<double>(base.reserved_peak_bytes + s.context_bytes), 1e6);
  // A capacity between the two: a mix that fits with one cache and not the other is judged by
  // its own.
  offload_inputs in = s.inputs;
  in.cache_bytes = 0;
  in.cache_bytes_without_recompute = 1ull << 40;
  const auto c = choose_offload_mix(22, 40ull << 30, in);
  ASSERT_TRUE(c);
  EXPECT_TRUE(std::any_of(c->mix.begin(), c->mix.end(), [](block_policy b) {
    return b == block_policy::checkpoint || b == block_policy::selective ||
           b == block_policy::selective_offload || b == block_policy::checkpoint_offload;
  }));
}

TEST_F(OffloadPlan, OptimizerOffloadMovesTheMoments) {
  const auto a = with(22), b = with(22, "none", true);
  EXPECT_LT(b.allocated_peak_bytes, a.allocated_peak_bytes);
  EXPECT_EQ(b.host_pinned_bytes - a.host_pinned_bytes, 8 * make_plan(m, r).parameters);
  EXPECT_GT(b.step_time_s, a.step_time_s);
}

TEST_F(OffloadPlan, FitOffloadsOnlyWhenItHelps) {
  const auto big = fit_offload(m, r, 140ull << 30, false, {}, gpu, default_overheads());
  ASSERT_TRUE(big);
  EXPECT_TRUE(std::all_of(big->mix.begin(), big->mix.end(),
                          [](block_policy p) { return p == block_policy::keep; }));
  const std::uint64_t half = with(0).device_peak_bytes / 2;
  const auto capped = fit_offload(m, r, half, false, {}, gpu, default_overheads());
  ASSERT_TRUE(capped);
  EXPECT_LE(capped->device_peak_bytes, half);
  EXPECT_FALSE(capped->compress.enabled);  // lossy only when allowed
  EXPECT_FALSE(fit_offload(m, r, 1ull << 30, false, {}, gpu, default_overheads()));
}

TEST_F(OffloadPlan, LossyFitCompressesWhenThatIsFasterUnderTheCap) {
  // Six tenths of the peak: mostly checkpointed without compression or selective
  // checkpointing. Compressed blocks are cheaper to keep (their kernels cost less than a
  // recompute) and to offload (half the bytes), and the checkpointed ones pay nothing for it, so
  // among the mixes of offload, checkpoint and keep the compressed one is faster. (At half the
  // peak it is not: a compressed block's backward holds its tensors decoded and a checkpointed
  // block recomputes uncompressed, so the compressed mix keeps no more blocks.)
  const auto half =
      static_cast<std::uint64_t>(0.6 * static_cast<double>(with(0).device_peak_bytes));
  const auto best = [&](const char* compress) {
    auto s =
        make_offload_setup(m, r, parse_compress_option(compress), false, gpu, default_overheads());
    s.inputs.selective_bytes = 0;  // offload, checkpoint and keep only
    const auto choice = choose_offload_mix(s.n_blocks, half - s.context_bytes, s.inputs);
    EXPECT_TRUE(choice);
    return evaluate_offload(s, choice->mix, parse_compress_option(compress), false);
  };
  const auto lossless = best("none"), lossy = best("fp8");
  EXPECT_LT(lossy.step_time_s, lossless.step_time_s);
  EXPECT_LE(lossy.device_peak_bytes, half);
  const auto n = [](const offload_plan& p, block_policy b) {
    return std::count(p.mix.begin(), p.mix.end(), b);
  };
  EXPECT_LT(n(lossy, block_policy::checkpoint), n(lossless, block_policy::checkpoint));
  // With the selective policies too, the lossy fit is never slower than the lossless one.
  const auto fit = fit_offload(m, r, half, false, {}, gpu, default_overheads());
  const auto fit_lossy = fit_offload(m, r, half, true, {}, gpu, default_overheads());
  ASSERT_TRUE(fit && fit_lossy);
  EXPECT_LE(fit_lossy->step_time_s, fit->step_time_s);
  EXPECT_LE(fit->step_time_s, lossless.step_time_s);
}

TEST_F(OffloadPlan, LossyFitListsTheFastestCompressedMixBesideAFasterLosslessOne) {
  // A capacity (in tenths of the peak) where the fastest mix is lossless and not every block
  // kept: --allow-lossy still lists the fastest compressed one, which fits and is slower.
  const auto o = default_overheads();
  std::uint64_t half = 0;
  std::optional<offload_plan> fastest;
  for (int tenths = 3; tenths <= 9 && half == 0; ++tenths) {
    const auto cap = with(0).device_peak_bytes / 10 * static_cast<std::uint64_t>(tenths);
    fastest = fit_offload(m, r, cap, true, {}, gpu, o, false);
    if (fastest && !fastest->compress.enabled &&
        std::any_of(fastest->mix.begin(), fastest->mix.end(),
                    [](block_policy p) { return p != block_policy::keep; }))
      half = cap;
  }
  ASSERT_NE(half, 0U);
  const auto compressed = fit_offload(m, r, half, true, {}, gpu, o, false, true);
  ASSERT_TRUE(compressed);
  // It compresses something: a block keeps or offloads its (compressed) tensors, or a selective
  // block its GEMM outputs.
  EXPECT_TRUE(std::any_of(compressed->mix.begin(), compressed->mix.end(), [](block_policy p) {
    return p == block_policy::keep || p == block_policy::offload || p == block_policy::selective ||
           p == block_policy::selective_offload;
  }));
  EXPECT_TRUE(compressed->compress.enabled);
  EXPECT_LE(compressed->device_peak_bytes, half);
  EXPECT_GT(compressed->step_time_s, fastest->step_time_s);
  EXPECT_FALSE(fit_offload(m, r, half, false, {}, gpu, o, false, true));  // lossy only if allowed
  fit_options opt;
  opt.gpu = gpu;
  opt.margin = 0;
  opt.capacity_bytes = half;
  const auto listed = [&](bool allow_lossy) {
    std::vector<std::string> out;
    for (const auto& f : fit_search_with_offload(m, r, opt, allow_lossy, {}, o).fits)
      if (!f.activation_mix.empty() && !f.optimizer_offload) out.push_back(f.compress_activations);
    return out;
  };
  EXPECT_EQ(listed(false), std::vector<std::string>{"none"});
  EXPECT_EQ(listed(true), (std::vector<std::string>{"none", compressed->compress.to_string()}));
}

TEST_F(OffloadPlan, SelectiveFiguresComeFromTheGemmOutputs) {
  const auto s = make_offload_setup(m, r, {}, false, gpu, default_overheads());
  // TinyLlama: d 2048, 32 heads of 64 with 4 KV heads, MLP 5632 (gate and up), bf16 outputs.
  const double tokens = 8.0 * 2048;
  const double per_token = (2 * 2048 + 2 * 256 + 2048 + 2 * 5632 + 2048) * 2.0 + 4 * 32;
  EXPECT_NEAR(static_cast<double>(s.inputs.selective_bytes), tokens * per_token, 1.0);
  EXPECT_LT(s.inputs.selective_bytes, s.saved_bytes_per_block);
  EXPECT_GT(s.inputs.t_selective_s, 0.0);
  EXPECT_LT(s.inputs.t_selective_s, s.inputs.t_fwd_s);
  const auto keep = with(0);
  const auto sel =
      evaluate_offload(s, std::vector<block_policy>(22, block_policy::selective), {}, false);
  const auto ck = evaluate_offload(s, arrange_mix(22, 0, 22), {}, false);
  EXPECT_LT(sel.allocated_peak_bytes, keep.allocated_peak_bytes);
  EXPECT_GT(sel.allocated_peak_bytes, ck.allocated_peak_bytes);
  EXPECT_LT(sel.step_time_s, ck.step_time_s);
  EXPECT_GT(sel.step_time_s, keep.step_time_s);
}

TEST(OffloadPlanOptions, CompressOption) {
  EXPECT_FALSE(parse_compress_option("none").enabled);
  const auto c = parse_compress_option("fp8");
  EXPECT_TRUE(c.enabled && c.mlp && c.attn && !c.e5m2);
  const auto d = parse_compress_option("fp8-e5m2:attn");
  EXPECT_TRUE(d.enabled && !d.mlp && d.attn && d.e5m2);
  EXPECT_EQ(d.to_string(), "fp8-e5m2:attn");
  const auto n = parse_compress_option("fp8:norm,mlp");
  EXPECT_TRUE(n.norm && n.mlp && !n.attn);
  EXPECT_EQ(n.to_string(), "fp8:mlp,norm");
  const auto rc = parse_compress_option("fp8:mlp,attn,norm:recompute");
  EXPECT_TRUE(rc.recompute && rc.norm && rc.mlp && rc.attn);
  EXPECT_EQ(rc.to_string(), "fp8:mlp,attn,norm:recompute");
  EXPECT_FALSE(parse_compress_option("fp8:mlp").recompute);
  for (const char* bad : {"fp4", "fp8:", "fp8:softmax", "fp8:mlp,", "int8",
                          "fp8:mlp:", "fp8:mlp:again", "fp8::recompute"})
    EXPECT_THROW(parse_compress_option(bad), invalid_input) << bad;
}

}  // namespace
}  // namespace vramkit::plan
