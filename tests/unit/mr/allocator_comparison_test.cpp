// compare_allocators and the replay of traces: the committed PyTorch trace and synthesized ones of
// varied shape (training with a new sequence length every step, generation with a growing KV
// cache, a CNN with varying batch), so the pool is not tuned to one trace.
#include "vramkit/mr/allocator_comparison.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "vramkit/core/error.hpp"
#include "vramkit/core/units.hpp"

namespace vramkit::mr {
namespace {

trace committed_trace() {
  return read_trace(std::string(VRAMKIT_SOURCE_DIR) + "/tests/data/mr/llama_step.trace");
}

const allocator_replay_result& by_name(const std::vector<allocator_replay_result>& rs,
                                       const std::string& n) {
  for (const auto& r : rs) {
    if (r.name == n) return r;
  }
  throw std::runtime_error("no result for " + n);
}

struct trace_builder {
  trace t;
  std::uint64_t next_id = 1;
  std::int64_t now = 0;
  std::uint64_t alloc(std::uint64_t bytes, std::uint32_t stream = 0) {
    t.events.push_back({trace_event::op_t::allocate, next_id, bytes, stream, now++});
    return next_id++;
  }
  void free(std::uint64_t id, std::uint64_t bytes, std::uint32_t stream = 0) {
    t.events.push_back({trace_event::op_t::free, id, bytes, stream, now++});
  }
};

// Training steps of a transformer whose sequence length changes every step: weights and optimizer
// state stay, activations of each layer scale with the sequence length and are freed in reverse,
// with small temporaries in between.
trace varying_sequence_training(std::uint32_t seed, int steps, int layers) {
  trace_builder b;
  std::mt19937 rng(seed);
  std::vector<std::pair<std::uint64_t, std::uint64_t>> weights;
  for (int l = 0; l < layers; ++l) weights.push_back({b.alloc(48 * MiB), 48 * MiB});
  for (int s = 0; s < steps; ++s) {
    const std::uint64_t seq = 128 * (1 + rng() % 16);
    std::vector<std::pair<std::uint64_t, std::uint64_t>> acts;
    for (int l = 0; l < layers; ++l) {
      for (int k = 0; k < 4; ++k) {
        const std::uint64_t n = seq * (k == 2 ? 16384 : 4096) + (rng() % 7) * 512;
        acts.push_back({b.alloc(n), n});
      }
      const std::uint64_t tmp = 1 + rng() % (256 * KiB);
      b.free(b.alloc(tmp), tmp);
    }
    for (auto it = acts.rbegin(); it != acts.rend(); ++it) {
      const std::uint64_t g = it->second;
      const std::uint64_t grad = b.alloc(g);
      b.free(it->first, it->second);
      b.free(grad, g);
    }
  }
  for (auto& [id, n] : weights) b.free(id, n);
  return b.t;
}

// generate() with a dynamic cache (torch.cat): each layer's KV cache reallocated one token larger
// at each step (allocate the larger one, copy, free the old), plus logits; 16 KiB per token and
// layer per sequence (LLaMA-7B: 2 x 4096 bf16), batch 8, after a prompt of `prompt` tokens.
trace growing_kv_generation(std::uint32_t seed, int prompt, int tokens, int layers) {
  trace_builder b;
  std::mt19937 rng(seed);
  std::vector<std::pair<std::uint64_t, std::uint64_t>> kv(layers, {0, 0});
  for (int t = prompt; t <= prompt + tokens; ++t) {
    for (int l = 0; l < layers; ++l) {
      const std::uint64_t n = std::uint64_t(t) * 2 * 4096 * 2 * 8;
      const std::uint64_t id = b.alloc(n);
      if (kv[l].first != 0) b.free(kv[l].first, kv[l].second);
      kv[l] = {id, n};
    }
    const std::uint64_t logits = 32000 * 4 * (1 + rng() % 4);
    b.free(b.alloc(logits), logits);
  }
  for (auto& [id, n] : kv) b.free(id, n);
  return b.t;
}

// A CNN whose batch size varies: feature maps shrink layer by layer, on two streams.
trace cnn_varying_batch(std::uint32_t seed, int steps) {
  trace_builder b;
  std::mt19937 rng(seed);
  for (int s = 0; s < steps; ++s) {
    const std::uint64_t batch = 8 * (1 + rng() % 8);
    std::vector<std::tuple<std::uint64_t, std::uint64_t, std::uint32_t>> maps;
    std::uint64_t hw = 224 * 224;
    for (int l = 0; l < 12; ++l) {
      const std::uint64_t n = batch * hw * 64 * 2;
      const std::uint32_t st = l % 3 == 2 ? 1 : 0;
      maps.push_back({b.alloc(n, st), n, st});
      if (l % 3 == 2) hw /= 4;
    }
    for (auto it = maps.rbegin(); it != maps.rend(); ++it) {
      b.free(std::get<0>(*it), std::get<1>(*it), std::get<2>(*it));
    }
  }
  return b.t;
}

TEST(AllocatorComparison, CommittedTraceGivesEveryAllocatorInJson) {
  comparison_options o;
  const auto rs = compare_allocators(committed_trace(), o);
  const auto j = nlohmann::json::parse(comparison_to_json(rs, o));
  ASSERT_EQ(j["allocators"].size(), 4u);
  int defaults = 0;
  for (const auto& a : j["allocators"]) {
    EXPECT_GT(a["peak_requested_bytes"].get<std::uint64_t>(), 30 * GiB);
    EXPECT_GE(a["peak_reserved_bytes"].get<std::uint64_t>(),
              a["peak_requested_bytes"].get<std::uint64_t>());
    EXPECT_TRUE(a.contains("segments"));
    EXPECT_TRUE(a.contains("remaps"));
    EXPECT_FALSE(a.contains("fits"));
    if (a.value("default", false)) {
      ++defaults;
      EXPECT_EQ(a["name"].get<std::string>().rfind("vramkit", 0), 0u);
    }
  }
  EXPECT_EQ(defaults, 1);
  EXPECT_TRUE(j["allocators"][0].value("default", false));  // the C API's pool: the vmm pool
  EXPECT_EQ(j["allocators"][0]["name"], "vramkit_vmm_pool");
  EXPECT_EQ(j["passes"], 1);
  EXPECT_EQ(j["allocators"][0]["pass_peak_reserved_bytes"].size(), 1u);
  // The requests are the trace's, whichever allocator serves them.
  EXPECT_EQ(by_name(rs, "vramkit_vmm_pool").peak_requested_bytes,
            by_name(rs, "pytorch_native").peak_requested_bytes);
}

TEST(AllocatorComparison, CapacitySaysWhetherAndWhereTheTraceFails) {
  const trace t = committed_trace();
  comparison_options o;
  o.allocators = {"vramkit_vmm_pool", "pytorch_native"};
  const std::uint64_t peak = compare_allocators(t, o)[0].peak_requested_bytes;
  o.capacity_bytes = peak + peak / 50;
  auto rs = compare_allocators(t, o);
  EXPECT_TRUE(*by_name(rs, "vramkit_vmm_pool").fits);
  o.capacity_bytes = peak - peak / 10;
  rs = compare_allocators(t, o);
  for (const auto& r : rs) {
    ASSERT_TRUE(r.fits.has_value());
    EXPECT_FALSE(*r.fits) << r.name;
    EXPECT_GT(r.first_failure_event, 0u);
    EXPECT_LE(r.first_failure_live_bytes, *o.capacity_bytes);
  }
  const auto j = nlohmann::json::parse(comparison_to_json(rs, o));
  EXPECT_FALSE(j["allocators"][0]["fits"].get<bool>());
  EXPECT_TRUE(j["allocators"][0].contains("first_failure"));
}

TEST(AllocatorComparison, UnknownAllocatorIsAUsageError) {
  comparison_options o;
  o.allocators = {"cnmem"};
  EXPECT_THROW((void)compare_allocators(committed_trace(), o), invalid_input);
  o.allocators = {};
  o.passes = 0;
  EXPECT_THROW((void)compare_allocators(committed_trace(), o), invalid_input);
  o.passes = max_replay_passes + 1;
  EXPECT_THROW((void)compare_allocators(committed_trace(), o), invalid_input);
}

// A committed trace by name; NAME.trace.gz is unpacked with gzip into the test's scratch folder.
trace data_trace(const std::string& name) {
  const std::string base = std::string(VRAMKIT_SOURCE_DIR) + "/tests/data/mr/" + name;
  if (std::ifstream(base + ".trace")) return read_trace(base + ".trace");
  const std::string plain = ::testing::TempDir() + name + ".trace";
  const std::string cmd = "gzip -dc '" + base + ".trace.gz' > '" + plain + "'";
  if (std::system(cmd.c_str()) != 0)
    throw std::runtime_error("cannot unpack " + base + ".trace.gz");
  return read_trace(plain);
}

// `vramkit replay`'s models of PyTorch's allocators against PyTorch itself on the H200, on every
// committed trace: the peak over 4 passes (tests/data/mr/h200_pytorch_figures.json, measured by
// bench/mr/torch_replay.py) and, for native, the peak of the recording itself (one pass from an
// empty allocator). The target is 2%; the models came within 0.2% on the run measured.
TEST(AllocatorComparison, ModelsOfPyTorchMatchItsMeasuredPeaks) {
  std::ifstream in(std::string(VRAMKIT_SOURCE_DIR) + "/tests/data/mr/h200_pytorch_figures.json");
  ASSERT_TRUE(in) << "tests/data/mr/h200_pytorch_figures.json missing";
  const auto figures = nlohmann::json::parse(in);
  comparison_options o;
  o.allocators = {"pytorch_native", "pytorch_expandable_segments"};
  o.passes = figures["passes"].get<unsigned>();
  for (const auto& [name, f] : figures["traces"].items()) {
    SCOPED_TRACE(name);
    const trace t = data_trace(name);
    const auto rs = compare_allocators(t, o);
    const auto& native = by_name(rs, "pytorch_native");
    const auto& expandable = by_name(rs, "pytorch_expandable_segments");
    EXPECT_EQ(native.peak_requested_bytes, f["peak_requested_bytes"].get<std::uint64_t>());
    const auto near = [](std::uint64_t model, const nlohmann::json& real, const char* what) {
      const auto r = real.get<double>();
      EXPECT_NEAR(static_cast<double>(model) / r, 1.0, 0.01)
          << what << ": model " << model << ", PyTorch " << real;
    };
    near(native.peak_reserved_bytes, f["native_peak_reserved_bytes"], "native, 4 passes");
    near(expandable.peak_reserved_bytes, f["expandable_peak_reserved_bytes"],
         "expandable, 4 passes");
    if (f.contains("native_first_pass_peak_reserved_bytes")) {
      near(native.pass_peak_reserved_bytes.at(0), f["native_first_pass_peak_reserved_bytes"],
           "native, first pass");
    }
  }
}

// Passes: peaks are over all of them, one entry per pass, never decreasing; the requests are one
// pass's (each pass frees what the trace leaves live).
TEST(AllocatorComparison, PassesRepeatTheTraceWithTheCacheKept) {
  const trace t = data_trace("random");
  comparison_options o;
  o.passes = 3;
  const auto rs = compare_allocators(t, o);
  const auto one = compare_allocators(t, {});
  for (std::size_t i = 0; i < rs.size(); ++i) {
    SCOPED_TRACE(rs[i].name);
    ASSERT_EQ(rs[i].pass_peak_reserved_bytes.size(), 3u);
    EXPECT_EQ(rs[i].pass_peak_reserved_bytes[0], one[i].peak_reserved_bytes);
    EXPECT_LE(rs[i].pass_peak_reserved_bytes[0], rs[i].pass_peak_reserved_bytes[1]);
    EXPECT_LE(rs[i].pass_peak_reserved_bytes[1], rs[i].pass_peak_reserved_bytes[2]);
    EXPECT_EQ(rs[i].peak_reserved_bytes, rs[i].pass_peak_reserved_bytes[2]);
    EXPECT_EQ(rs[i].peak_requested_bytes, one[i].peak_requested_bytes);
  }
  // PyTorch's native allocator fragments further on later passes of this trace (as measured).
  EXPECT_GT(by_name(rs, "pytorch_native").peak_reserved_bytes,
            by_name(one, "pytorch_native").peak_reserved_bytes);
  const auto j = nlohmann::json::parse(comparison_to_json(rs, o));
  EXPECT_EQ(j["passes"], 3);
  EXPECT_EQ(j["allocators"][0]["pass_peak_reserved_bytes"].size(), 3u);
}

// The pool's target on every shape: reserved within 3% of requested, and never above the model
// of PyTorch's expandable segments.
void expect_vmm_pool_wastes_least(const trace& t, const char* what) {
  const auto rs = compare_allocators(t, {});
  const auto& vmm = by_name(rs, "vramkit_vmm_pool");
  const auto& exp = by_name(rs, "pytorch_expandable_segments");
  EXPECT_LE(vmm.ratio(), 1.03) << what;
  EXPECT_LE(vmm.peak_reserved_bytes, exp.peak_reserved_bytes)
      << what << ": expandable " << exp.ratio();
  EXPECT_LE(vmm.peak_reserved_bytes, by_name(rs, "pytorch_native").peak_reserved_bytes) << what;
}

TEST(AllocatorComparison, VmmPoolWastesLeastOnTheCommittedTrace) {
  expect_vmm_pool_wastes_least(committed_trace(), "llama_step");
}

TEST(AllocatorComparison, VmmPoolWastesLeastWhenTheSequenceLengthVaries) {
  expect_vmm_pool_wastes_least(varying_sequence_training(3, 6, 8), "varying seq, seed 3");
  expect_vmm_pool_wastes_least(varying_sequence_training(4, 6, 12), "varying seq, seed 4");
}

TEST(AllocatorComparison, VmmPoolWastesLeastWithAGrowingKvCache) {
  expect_vmm_pool_wastes_least(growing_kv_generation(5, 512, 200, 32), "growing kv");
  // A small cache: 2 MiB granules weigh more, but the pool still wastes least.
  const auto rs = compare_allocators(growing_kv_generation(5, 1, 200, 8), {});
  EXPECT_LE(by_name(rs, "vramkit_vmm_pool").peak_reserved_bytes,
            by_name(rs, "pytorch_expandable_segments").peak_reserved_bytes);
}

TEST(AllocatorComparison, VmmPoolWastesLeastOnACnnWithVaryingBatch) {
  expect_vmm_pool_wastes_least(cnn_varying_batch(6, 8), "cnn");
}

TEST(AllocatorComparison, VmmPoolWastesLeastOnTheRandomTrace) {
  expect_vmm_pool_wastes_least(random_trace(2000, 512, 64 * MiB, 7), "random");
}

// Every committed trace, and random traces of other seeds and shapes, replayed 3 times back to
// back (as bench/mr/torch_replay.py does on the GPU: a first pass, a verification pass, a timed
// pass) and once: reserved within 3% of requested and at most expandable segments' peak.
TEST(AllocatorComparison, VmmPoolWastesLeastOnEveryCommittedTraceRepeated) {
  std::vector<std::pair<std::string, trace>> traces;
  for (const char* name : {"gpt2_checkpointing", "gpt2_generate", "gpt2_varlen_train", "llama_step",
                           "random", "resnet50_train"}) {
    traces.emplace_back(name, data_trace(name));
  }
  traces.emplace_back("random seed 11, 4 KiB - 256 MiB",
                      random_trace(1500, 4 * KiB, 256 * MiB, 11));
  traces.emplace_back("random seed 13, 512 B - 8 MiB", random_trace(3000, 512, 8 * MiB, 13));
  for (const auto& [name, t] : traces) {
    for (const unsigned passes : {1u, 3u}) {
      SCOPED_TRACE(name + ", " + std::to_string(passes) + " passes");
      comparison_options o;
      o.allocators = {"vramkit_vmm_pool", "pytorch_expandable_segments"};
      o.passes = passes;
      const auto rs = compare_allocators(t, o);
      const auto& vmm = by_name(rs, "vramkit_vmm_pool");
      const auto& exp = by_name(rs, "pytorch_expandable_segments");
      EXPECT_LE(vmm.ratio(), 1.03);
      EXPECT_LE(vmm.peak_reserved_bytes, exp.peak_reserved_bytes) << "expandable " << exp.ratio();
    }
  }
}

}  // namespace
}  // namespace vramkit::mr
