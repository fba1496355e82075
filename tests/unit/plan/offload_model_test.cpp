// The offload model: keep/checkpoint/offload arithmetic, the mix choice, optimizer offload, the
// --offload option, and the cases of tests/data/offload/model_cases.json (answered alike by the
// Python copy of the model this one replaced; kept as the model's regression cases).
#include "vramkit/plan/offload_model.hpp"

#include <algorithm>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "vramkit/core/error.hpp"
#include "vramkit/core/units.hpp"

namespace vramkit::plan {
namespace {

using P = block_policy;

offload_inputs base() {
  offload_inputs in;
  in.block_bytes = 2 * GiB;
  in.input_bytes = GiB / 8;
  in.t_fwd_s = 0.02;
  in.t_bwd_s = 0.04;
  in.d2h_bytes_per_s = in.h2d_bytes_per_s = 50e9;
  in.other_bytes = 20 * GiB;
  in.other_time_s = 0.05;
  return in;
}

TEST(OffloadModel, KeepEverythingCostsComputeOnly) {
  const auto e = simulate_offload(std::vector<P>(8, P::keep), base());
  EXPECT_DOUBLE_EQ(e.step_time_s, 8 * 0.06 + 0.05);
  EXPECT_EQ(e.device_peak_bytes, 36 * GiB);
  EXPECT_EQ(e.host_pinned_bytes, 0u);
  EXPECT_EQ(e.overlap, 1.0);
}

TEST(OffloadModel, CheckpointAddsOneForwardAndKeepsInputs) {
  const auto e = simulate_offload(std::vector<P>(8, P::checkpoint), base());
  EXPECT_NEAR(e.step_time_s, 8 * 0.08 + 0.05, 1e-12);
  EXPECT_EQ(e.device_peak_bytes, 20 * GiB + GiB + 2 * GiB);
}

TEST(OffloadModel, OffloadMovesBytesToHostAndSlowLinksAreExposed) {
  auto in = base();
  const auto all = simulate_offload(std::vector<P>(8, P::offload), in);
  EXPECT_EQ(all.host_pinned_bytes, 16 * GiB);
  EXPECT_LT(all.device_peak_bytes, 36 * GiB);
  in.d2h_bytes_per_s = in.h2d_bytes_per_s = 1e15;
  EXPECT_NEAR(simulate_offload(std::vector<P>(8, P::offload), in).overlap, 15.0 / 16, 1e-3);
  in.d2h_bytes_per_s = in.h2d_bytes_per_s = 5e9;
  double last = 0;
  for (int n = 0; n <= 8; ++n) {
    const double t = simulate_offload(arrange_mix(8, n, 0), in).step_time_s;
    EXPECT_GE(t, last);
    last = t;
  }
}

TEST(OffloadModel, ArrangeSpreadsOffloadedBlocksAndRefusesTooMany) {
  EXPECT_EQ(arrange_mix(6, 2, 2), (std::vector<P>{P::offload, P::checkpoint, P::offload,
                                                  P::checkpoint, P::keep, P::keep}));
  EXPECT_THROW(arrange_mix(4, 3, 2), invalid_input);
  EXPECT_THROW(arrange_mix(4, -1, 0), invalid_input);
}

TEST(OffloadModel, ChoosesOffloadOnlyWhenItBeatsCheckpointing) {
  auto in = base();
  EXPECT_EQ(choose_offload_mix(8, 100 * GiB, in)->mix, std::vector<P>(8, P::keep));
  in.d2h_bytes_per_s = in.h2d_bytes_per_s = 100e9;
  const auto with = choose_offload_mix(8, 28 * GiB, in);
  ASSERT_TRUE(with);
  EXPECT_NE(std::find(with->mix.begin(), with->mix.end(), P::offload), with->mix.end());
  EXPECT_LE(with->estimate.device_peak_bytes, 28 * GiB);
  const auto without = choose_offload_mix(8, 28 * GiB, in, mix_search::checkpoint_only);
  ASSERT_TRUE(without);
  EXPECT_LT(with->estimate.step_time_s, without->estimate.step_time_s);
  in.d2h_bytes_per_s = in.h2d_bytes_per_s = 1e8;
  const auto slow = choose_offload_mix(8, 28 * GiB, in);
  ASSERT_TRUE(slow);
  EXPECT_EQ(std::find(slow->mix.begin(), slow->mix.end(), P::offload), slow->mix.end());
  EXPECT_FALSE(choose_offload_mix(8, 10 * GiB, base()));
}

TEST(OffloadModel, OptimizerOffloadHostBytesAndTime) {
  const auto e = estimate_optimizer_offload(1'000'000'000, master_weights::none, 50e9, 40e9);
  EXPECT_EQ(e.host_bytes, 8'000'000'000u);
  EXPECT_EQ(e.device_bytes_saved, 8'000'000'000u);
  EXPECT_EQ(e.device_buffer_bytes, 4 * (64ull << 20));
  EXPECT_GT(e.step_time_s, 8e9 / 40e9);
  EXPECT_LT(e.step_time_s, 8e9 / 40e9 * 1.05);
  EXPECT_EQ(estimate_optimizer_offload(10, master_weights::fp32_on_host, 1, 1).host_bytes, 120u);
  EXPECT_THROW(estimate_optimizer_offload(10, master_weights::none, 0, 1), invalid_input);
}

TEST(OffloadOption, ParsesEveryFormAndRefusesBadOnes) {
  EXPECT_FALSE(parse_offload_option("none", 16).activations);
  EXPECT_TRUE(parse_offload_option("optimizer", 16).optimizer);
  const auto a = parse_offload_option("activations", 16);
  EXPECT_TRUE(a.activations);
  EXPECT_EQ(a.activation_blocks, 16);
  EXPECT_FALSE(a.optimizer);
  const auto b = parse_offload_option("both:4", 16);
  EXPECT_TRUE(b.activations && b.optimizer);
  EXPECT_EQ(b.activation_blocks, 4);
  EXPECT_EQ(parse_offload_option("activations:16", 16).activation_blocks, 16);
  // A mix names every block: o offload, c checkpoint, k keep.
  const auto mx = parse_offload_option("both:ocko", 4);
  EXPECT_TRUE(mx.optimizer);
  EXPECT_EQ(mx.activation_blocks, 2);
  EXPECT_EQ(mx.mix, (std::vector<block_policy>{block_policy::offload, block_policy::checkpoint,
                                               block_policy::keep, block_policy::offload}));
  EXPECT_EQ(parse_offload_option("activations:ockk", 0).mix.size(), 4u);  // length unknown yet
  for (const char* bad :
       {"bogus", "activations:17", "activations:0", "activations:x", "activations:", "optimizer:2",
        "activations:3x", "", "activations:occ", "activations:ocqk"}) {
    try {
      parse_offload_option(bad, 16);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const invalid_input& e) {
      EXPECT_NE(std::string(e.what()).find("--offload"), std::string::npos);
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
    }
  }
}

offload_inputs with_selective() {
  auto in = base();
  in.selective_bytes = GiB * 3 / 4;
  in.t_selective_s = 0.008;
  return in;
}

TEST(OffloadModel, SelectiveKeepsGemmOutputsAndRecomputesTheRest) {
  const auto in = with_selective();
  const auto sel = simulate_offload(std::vector<P>(8, P::selective), in);
  const auto ck = simulate_offload(std::vector<P>(8, P::checkpoint), in);
  const auto keep = simulate_offload(std::vector<P>(8, P::keep), in);
  // Each block keeps its input and 3/4 GiB; the one recomputing regrows the other 1.25 GiB.
  EXPECT_EQ(sel.device_peak_bytes,
            20 * GiB + 8 * (GiB * 3 / 4 + GiB / 8) + (2 * GiB - GiB * 3 / 4));
  EXPECT_NEAR(sel.step_time_s, 8 * (0.06 + 0.008) + 0.05, 1e-12);
  EXPECT_LT(sel.step_time_s, ck.step_time_s);
  EXPECT_GT(sel.step_time_s, keep.step_time_s);
  EXPECT_LT(sel.device_peak_bytes, keep.device_peak_bytes);
  EXPECT_GT(sel.device_peak_bytes, ck.device_peak_bytes);
  EXPECT_EQ(sel.host_pinned_bytes, 0u);
}

TEST(OffloadModel, SelectiveOffloadMovesOnlyTheKeptOutputs) {
  const auto in = with_selective();
  const auto h = simulate_offload(std::vector<P>(8, P::selective_offload), in);
  const auto o = simulate_offload(std::vector<P>(8, P::offload), in);
  EXPECT_EQ(h.host_pinned_bytes, 8 * (GiB * 3 / 4));
  const std::uint64_t kept = GiB * 3 / 4;
  EXPECT_NEAR(h.copy_s, 16.0 * static_cast<double>(kept) / 50e9, 1e-12);
  EXPECT_LT(h.copy_s, o.copy_s);
  EXPECT_LT(h.device_peak_bytes,
            simulate_offload(std::vector<P>(8, P::selective), in).device_peak_bytes);
}

TEST(OffloadModel, TheSearchPicksSelectiveWhereItBeatsCheckpointing) {
  auto in = with_selective();
  const auto ck = simulate_offload(std::vector<P>(8, P::checkpoint), in);
  // Room for a few selective blocks above full checkpointing, none for a kept one.
  const auto got =
      choose_offload_mix(8, ck.device_peak_bytes + 2 * GiB, in, mix_search::checkpoint_only);
  ASSERT_TRUE(got);
  EXPECT_GT(std::count(got->mix.begin(), got->mix.end(), P::selective), 0);
  EXPECT_LT(got->estimate.step_time_s, ck.step_time_s);
  // Without the selective figures the same search can only checkpoint.
  in.selective_bytes = 0;
  const auto plain =
      choose_offload_mix(8, ck.device_peak_bytes + 2 * GiB, in, mix_search::checkpoint_only);
  ASSERT_TRUE(plain);
  EXPECT_EQ(std::count(plain->mix.begin(), plain->mix.end(), P::selective), 0);
}

TEST(OffloadModel, CompressedSelectiveBlocksKeepAndCopyTheirStoredBytes) {
  auto in = with_selective();
  const auto plain_s = simulate_offload(std::vector<P>(8, P::selective), in);
  const auto plain_h = simulate_offload(std::vector<P>(8, P::selective_offload), in);
  in.selective_stored_bytes = GiB * 3 / 8;  // the GEMM outputs at about half
  in.selective_pack_s = in.selective_unpack_s = 0.001;
  const auto s = simulate_offload(std::vector<P>(8, P::selective), in);
  const auto h = simulate_offload(std::vector<P>(8, P::selective_offload), in);
  // Each block keeps its input and 3/8 GiB; the recompute regrows the block whole (2 GiB).
  EXPECT_EQ(s.device_peak_bytes, 20 * GiB + 8 * (GiB * 3 / 8 + GiB / 8) + (2 * GiB - GiB * 3 / 8));
  EXPECT_LT(plain_s.device_peak_bytes - s.device_peak_bytes, 8 * (GiB * 3 / 8) + 1);
  EXPECT_GT(plain_s.device_peak_bytes, s.device_peak_bytes);
  // The codec's encode and decode once per block.
  EXPECT_NEAR(s.step_time_s, plain_s.step_time_s + 8 * 0.002, 1e-12);
  EXPECT_EQ(h.host_pinned_bytes, 8 * (GiB * 3 / 8));
  EXPECT_EQ(plain_h.host_pinned_bytes, 2 * h.host_pinned_bytes);
  EXPECT_LT(h.copy_s, plain_h.copy_s);
}

TEST(OffloadModel, ALossySearchUnderATightCapPicksMoreSelectiveBlocks) {
  auto in = with_selective();
  const auto ck = simulate_offload(std::vector<P>(8, P::checkpoint), in);
  const std::uint64_t cap = ck.device_peak_bytes + 2 * GiB;
  const auto n_sel = [](const offload_choice& c) {
    return std::count(c.mix.begin(), c.mix.end(), P::selective) +
           std::count(c.mix.begin(), c.mix.end(), P::selective_offload);
  };
  const auto lossless = choose_offload_mix(8, cap, in, mix_search::checkpoint_only);
  ASSERT_TRUE(lossless);
  // Compression on (pack_s > 0 for the kept blocks, the selective figures halved): a mix of
  // checkpointed and selective blocks alone now compresses, so it is searched.
  in.pack_s = in.unpack_s = 0.002;
  in.selective_stored_bytes = GiB * 3 / 8;
  in.selective_pack_s = in.selective_unpack_s = 0.001;
  const auto lossy = choose_offload_mix(8, cap, in, mix_search::checkpoint_only);
  ASSERT_TRUE(lossy);
  EXPECT_GT(n_sel(*lossy), n_sel(*lossless));
  EXPECT_EQ(std::count(lossy->mix.begin(), lossy->mix.end(), P::keep), 0);
  EXPECT_LT(lossy->estimate.step_time_s, lossless->estimate.step_time_s);
}

TEST(OffloadModel, CheckpointOffloadFreesTheInputsForASelectiveBlock) {
  const auto in = with_selective();
  const std::uint64_t input = in.input_bytes;
  std::vector<P> cs(8, P::checkpoint), xs(8, P::checkpoint_offload);
  cs.back() = xs.back() = P::selective;
  const auto c = simulate_offload(cs, in);
  const auto x = simulate_offload(xs, in);
  const auto ck = simulate_offload(std::vector<P>(8, P::checkpoint), in);
  // Seven inputs on the host; the same recompute, and copies of an input each way.
  EXPECT_EQ(x.host_pinned_bytes, 7 * input);
  EXPECT_NEAR(x.compute_s, c.compute_s, 1e-12);
  EXPECT_NEAR(x.copy_s, 14.0 * static_cast<double>(input) / 50e9, 1e-12);
  EXPECT_LT(x.device_peak_bytes, c.device_peak_bytes);
  // Room for the selective block above full checkpointing only with the inputs on the host: the
  // search then takes it (offload_and_checkpoint; checkpoint_only never moves an input).
  const std::uint64_t cap = x.device_peak_bytes;
  ASSERT_GT(c.device_peak_bytes, cap);
  const auto got = choose_offload_mix(8, cap, in);
  ASSERT_TRUE(got);
  EXPECT_GT(std::count(got->mix.begin(), got->mix.end(), P::checkpoint_offload), 0);
  EXPECT_LE(got->estimate.device_peak_bytes, cap);
  EXPECT_LT(got->estimate.step_time_s, ck.step_time_s);
  const auto only = choose_offload_mix(8, cap, in, mix_search::checkpoint_only);
  ASSERT_TRUE(only);
  EXPECT_EQ(std::count(only->mix.begin(), only->mix.end(), P::checkpoint_offload), 0);
}

TEST(OffloadModel, AShortCopyHasAWindowOfOneCopy) {
  auto in = with_selective();
  in.windows_per_mix = true;
  // An input (1/8 GiB, 2.7 ms at 50 GB/s) copies within its block's 20 ms forward: one in
  // flight; a whole block (2 GiB, 43 ms) does not: two.
  EXPECT_EQ(simulate_offload(std::vector<P>(8, P::checkpoint_offload), in).window_bytes,
            in.input_bytes);
  EXPECT_EQ(simulate_offload(std::vector<P>(8, P::offload), in).window_bytes, 2 * in.block_bytes);
}

TEST(OffloadModel, ABoundedHostLeadCountsOnlyTheLateCopiesAtTheLoss) {
  // Six 30 ms blocks; block 0 selective-offload (3 GiB of kept outputs, 64 ms at 50 GB/s), the
  // others checkpoint-offload (1/2 GiB inputs, 10.7 ms each): each input's copy ends with its
  // block (blocks 1 and 2 queue behind block 0's copy, which ends at 64 ms).
  offload_inputs in;
  in.block_bytes = 7 * GiB;
  in.input_bytes = GiB / 2;
  in.selective_bytes = 3 * GiB;
  in.t_selective_s = 0.01;
  in.t_fwd_s = 0.03;
  in.t_bwd_s = 0.06;
  in.d2h_bytes_per_s = in.h2d_bytes_per_s = 50e9;
  in.other_bytes = 20 * GiB;
  in.loss_bytes = in.block_bytes;
  in.prefetch_blocks = 2;
  in.windows_per_mix = true;
  std::vector<P> mix(6, P::checkpoint_offload);
  mix[0] = P::selective_offload;
  const auto unbounded = simulate_offload(mix, in);
  EXPECT_EQ(unbounded.window_bytes, 6 * GiB);                  // two of block 0's copies
  EXPECT_EQ(unbounded.held_at_loss_bytes, 5 * GiB + GiB / 2);  // all of it (5.5 GiB < the window)
  EXPECT_EQ(unbounded.host_lead_blocks, 0);
  // The host at most two blocks ahead: the device has begun block 4 (120 ms) when the loss
  // allocates, so the copies that end later (blocks 4 and 5's inputs) are what is still held.
  in.host_lead_blocks = 2;
  const auto two = simulate_offload(mix, in);
  EXPECT_EQ(two.held_at_loss_bytes, GiB);
  EXPECT_EQ(two.host_lead_blocks, 2);
  in.host_lead_blocks = 1;
  const auto one = simulate_offload(mix, in);
  EXPECT_EQ(one.held_at_loss_bytes, GiB / 2);
  // The peak falls, by at most what is no longer held (the backward, with block 0's outputs
  // fetched back beside a recompute, may now be the higher moment).
  EXPECT_LT(two.device_peak_bytes, unbounded.device_peak_bytes);
  EXPECT_LE(unbounded.device_peak_bytes - two.device_peak_bytes,
            unbounded.held_at_loss_bytes - two.held_at_loss_bytes);
  EXPECT_LE(one.device_peak_bytes, two.device_peak_bytes);
  EXPECT_EQ(one.step_time_s, unbounded.step_time_s);  // the bound changes no time
  // Without prefetch_blocks the whole window is counted, as before.
  in.prefetch_blocks = 0;
  EXPECT_EQ(simulate_offload(mix, in).held_at_loss_bytes, unbounded.held_at_loss_bytes);
}

TEST(OffloadModel, PrefetchBlocksHidesACopyLongerThanABlock) {
  // One block's copy (2 GiB at 12 GB/s: 179 ms) takes several blocks' backward (40 ms + 20 ms
  // recompute): fetched when its own backward starts it is exposed, five blocks ahead hidden.
  auto in = base();
  in.d2h_bytes_per_s = in.h2d_bytes_per_s = 12e9;
  in.window_bytes = 4 * GiB;
  std::vector<P> mix{P::offload, P::offload};
  mix.resize(8, P::checkpoint);
  const auto near = simulate_offload(mix, in);
  in.prefetch_blocks = 5;
  const auto ahead = simulate_offload(mix, in);
  EXPECT_GT(near.exposed_copy_s, 0.1);
  EXPECT_LT(ahead.exposed_copy_s, 1e-9);
  EXPECT_LT(ahead.step_time_s, near.step_time_s);
  // The peak counts the blocks fetched back beside the block being recomputed, less the inputs
  // the checkpointed blocks above it kept (with a copy-out window of one block, so that the
  // forward's end stays below): five ahead hold one block more than two ahead, less two inputs.
  in.d2h_bytes_per_s = 50e9;
  in.window_bytes = 2 * GiB;
  const std::vector<P> spread{P::offload, P::checkpoint, P::checkpoint, P::checkpoint,
                              P::offload, P::checkpoint, P::checkpoint, P::checkpoint};
  const auto five = simulate_offload(spread, in);
  in.prefetch_blocks = 2;
  const auto two = simulate_offload(spread, in);
  EXPECT_EQ(five.device_peak_bytes - two.device_peak_bytes, 2 * GiB - 2 * (GiB / 8));
}

TEST(OffloadModel, BlocksAboveARecomputeNoLongerCountWhatTheyKept) {
  // A kept block on top is through its backward when the offloaded block below is fetched back
  // and the block beside it recomputed: at the loss it counts 2 GiB against an input, there it
  // is freed (2 GiB, or the input).
  auto in = base();
  in.window_bytes = 2 * GiB;
  in.prefetch_blocks = 2;
  const auto kept = simulate_offload({P::offload, P::checkpoint, P::keep}, in);
  const auto ck = simulate_offload({P::offload, P::checkpoint, P::checkpoint}, in);
  EXPECT_EQ(kept.device_peak_bytes - ck.device_peak_bytes, 2 * GiB - GiB / 8);
}

TEST(OffloadModel, ArrangesTheSelectivePoliciesFromEitherEnd) {
  EXPECT_EQ(arrange_mix(8, mix_counts{1, 3, 2, 2}),
            (std::vector<P>{P::offload, P::checkpoint, P::selective_offload, P::checkpoint,
                            P::checkpoint, P::selective_offload, P::selective, P::selective}));
  EXPECT_EQ(arrange_mix(4, mix_counts{0, 2, 0, 1}, true),
            (std::vector<P>{P::checkpoint, P::checkpoint, P::selective_offload, P::keep}));
  EXPECT_THROW(arrange_mix(4, mix_counts{1, 1, 1, 2}), invalid_input);
  EXPECT_THROW(arrange_mix(4, mix_counts{0, 0, -1, 0}), invalid_input);
}

TEST(OffloadModel, PolicyNamesAndLetters) {
  for (const auto p : {P::offload, P::checkpoint, P::keep, P::selective, P::selective_offload,
                       P::checkpoint_offload}) {
    EXPECT_EQ(parse_block_policy(to_string(p)), p);
    EXPECT_EQ(policy_of_letter(policy_letter(p)), p);
  }
  EXPECT_STREQ(to_string(P::selective_offload), "selective-offload");
  EXPECT_EQ(policy_letter(P::selective_offload), 'h');
  EXPECT_STREQ(to_string(P::checkpoint_offload), "checkpoint-offload");
  EXPECT_EQ(policy_letter(P::checkpoint_offload), 'x');
  EXPECT_FALSE(policy_of_letter('z'));
  EXPECT_THROW(parse_block_policy("sac"), invalid_input);
  const auto o = parse_offload_option("activations:shck", 4);
  EXPECT_EQ(o.mix, (std::vector<P>{P::selective, P::selective_offload, P::checkpoint, P::keep}));
  EXPECT_EQ(o.activation_blocks, 1);
  EXPECT_EQ(parse_offload_option("activations:shcx", 4).activation_blocks, 2);
  EXPECT_THROW(parse_offload_option("activations:shcz", 4), invalid_input);
  EXPECT_THROW(parse_offload_option("activations:shc", 4), invalid_input);
}

TEST(OffloadModel, AnswersTheRecordedCases) {
  std::ifstream f(VRAMKIT_SOURCE_DIR "/tests/data/offload/model_cases.json");
  ASSERT_TRUE(f) << "tests/data/offload/model_cases.json";
  const auto cases = nlohmann::json::parse(f);
  ASSERT_GT(cases.size(), 3u);
  for (const auto& c : cases) {
    SCOPED_TRACE(c["name"].get<std::string>());
    std::vector<P> mix;
    for (const auto& p : c["mix"]) mix.push_back(parse_block_policy(p.get<std::string>()));
    const auto& j = c["inputs"];
    offload_inputs in;
    in.block_bytes = j["block_bytes"];
    in.input_bytes = j["input_bytes"];
    in.t_fwd_s = j["t_fwd"];
    in.t_bwd_s = j["t_bwd"];
    in.d2h_bytes_per_s = j["d2h_bytes_per_s"];
    in.h2d_bytes_per_s = j["h2d_bytes_per_s"];
    in.other_bytes = j.value("other_bytes", 0ull);
    in.other_time_s = j.value("other_time_s", 0.0);
    in.window_bytes = j.value("window_bytes", 512ull << 20);
    in.prefetch = j.value("prefetch", 1);
    in.prefetch_blocks = j.value("prefetch_blocks", 0);
    in.selective_bytes = j.value("selective_bytes", 0ull);
    in.t_selective_s = j.value("t_selective", 0.0);
    in.windows_per_mix = j.value("windows_per_mix", false);
    in.loss_bytes = j.value("loss_bytes", 0ull);
    const auto e = simulate_offload(mix, in);
    const auto& x = c["expect"];
    const auto near = [](double a, double b) {
      return std::abs(a - b) <= 1e-9 * std::max(1.0, std::abs(b));
    };
    EXPECT_TRUE(near(e.step_time_s, x["step_time_s"]))
        << e.step_time_s << " vs " << x["step_time_s"];
    EXPECT_TRUE(near(e.compute_s, x["compute_s"]));
    EXPECT_TRUE(near(e.copy_s, x["copy_s"]));
    EXPECT_TRUE(near(e.exposed_copy_s, x["exposed_copy_s"]));
    EXPECT_TRUE(near(e.overlap, x["overlap"]));
    EXPECT_EQ(e.device_peak_bytes, x["device_peak_bytes"].get<std::uint64_t>());
    EXPECT_EQ(e.host_pinned_bytes, x["host_pinned_bytes"].get<std::uint64_t>());
    EXPECT_EQ(e.window_bytes, x["window_bytes"].get<std::uint64_t>());
    EXPECT_EQ(e.prefetch_blocks, x["prefetch_blocks"].get<int>());
  }
}

}  // namespace
}  // namespace vramkit::plan
