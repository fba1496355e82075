// CPU-side tests of the GPU probe: its keys and sections, its answer on a machine without a GPU,
// and the pieces of its method that need no device (the chase cycle, the data pattern's sum).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <set>
#include <vector>

#include "probe/cuda/chase_order.hpp"
#include "probe/cuda/pattern.hpp"
#include "probe/gpu_cases.hpp"
#include "vramkit/config.hpp"
#include "vramkit/core/cuda_device_api.hpp"
#include "vramkit/core/error.hpp"
#include "vramkit/core/units.hpp"
#include "vramkit/probe/gpu_probe.hpp"

namespace vramkit::probe {
namespace {

TEST(GpuProbeKeys, AreUniqueAndDescribed) {
  const auto keys = gpu_probe_keys();
  ASSERT_FALSE(keys.empty());
  std::set<std::string> seen;
  for (const auto& [key, description] : keys) {
    EXPECT_TRUE(seen.insert(key).second) << "duplicate key " << key;
    EXPECT_TRUE(key.rfind("gpu{", 0) == 0 || key.rfind("gpus.", 0) == 0) << key;
    EXPECT_FALSE(description.empty()) << key;
  }
}

TEST(GpuProbeKeys, KeepTheirPublishedNames) {
  // These names are in reports people keep; renaming one breaks their comparisons.
  std::set<std::string> keys;
  for (const auto& kv : gpu_probe_keys()) keys.insert(kv.first);
  for (const char* k :
       {"gpu{N}.device.read", "gpu{N}.device.write", "gpu{N}.device.copy", "gpu{N}.device.memcpy",
        "gpu{N}.h2d.pinned", "gpu{N}.d2h.pinned", "gpu{N}.bidir.pinned", "gpu{N}.h2d.pageable",
        "gpu{N}.zerocopy.read", "gpu{N}.managed.first_touch", "gpu{A}->gpu{B}.p2p.ce.unidir",
        "gpu{N}.latency.sweep", "gpu{N}.alloc.malloc_async", "gpu{N}.overlap"}) {
    EXPECT_TRUE(keys.count(k)) << k;
  }
}

TEST(GpuProbeSections, ListEveryGpuSection) {
  const auto s = gpu_probe_sections();
  for (const char* name :
       {"gpu", "device", "h2d", "zerocopy", "managed", "p2p", "gpu-latency", "alloc", "overlap"}) {
    EXPECT_NE(std::find(s.begin(), s.end(), name), s.end()) << name;
  }
  EXPECT_EQ(std::set<std::string>(s.begin(), s.end()).size(), s.size());
}

TEST(GpuCases, ListIsTheCaseTable) {
  // --list reads the same table the run loop does: same keys, same order, same descriptions.
  const auto keys = gpu_probe_keys();
  const auto& cases = detail::gpu_cases();
  ASSERT_EQ(keys.size(), cases.size());
  for (std::size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ(keys[i].first, cases[i].key);
    EXPECT_EQ(keys[i].second, cases[i].description);
  }
}

TEST(GpuCases, EverySectionComesFromTheTable) {
  const auto sections = gpu_probe_sections();
  ASSERT_FALSE(sections.empty());
  EXPECT_EQ(sections.front(), "gpu");
  for (const auto& c : detail::gpu_cases()) {
    EXPECT_NE(std::find(sections.begin(), sections.end(), c.section), sections.end()) << c.key;
  }
}

TEST(GpuCases, EveryCaseRunsInACudaBuildAndNoneWithout) {
  for (const auto& c : detail::gpu_cases()) {
    EXPECT_EQ(c.run != nullptr, VRAMKIT_HAVE_CUDA == 1) << c.key;
  }
}

TEST(GpuCases, ConcreteKeysFindTheirCase) {
  const auto* c = detail::find_gpu_case("gpu3.device.read");
  ASSERT_NE(c, nullptr);
  EXPECT_STREQ(c->section, "device");
  c = detail::find_gpu_case("gpu0->gpu1.p2p.ce.bidir");
  ASSERT_NE(c, nullptr);
  EXPECT_STREQ(c->section, "p2p");
  // A sweep is its own case, not the figure whose key it extends.
  c = detail::find_gpu_case("gpu0.h2d.pinned.sweep");
  ASSERT_NE(c, nullptr);
  EXPECT_STREQ(c->key, "gpu{N}.h2d.pinned.sweep");
}

TEST(GpuCases, AnUnlistedKeyIsALogicError) {
  EXPECT_THROW(detail::registered_key("gpu0.device.reed"), logic_error);
  EXPECT_THROW(detail::registered_key("gpu0.device.read.extra"), logic_error);
  EXPECT_EQ(detail::registered_key("gpu12.overlap"), "gpu12.overlap");
}

TEST(GpuProbe, SkipsWithReasonWithoutGpu) {
  if (cuda_runtime_status())
    GTEST_SKIP() << "a GPU is present here; this test is for machines without one";
  probe_report report;
  run_gpu_probe(probe_options{}, report);
  ASSERT_EQ(report.skips.size(), 1u);
  EXPECT_EQ(report.skips[0].key, "gpu");
  EXPECT_FALSE(report.skips[0].reason.empty());
  EXPECT_FALSE(report.skips[0].failed);
  EXPECT_TRUE(report.results.empty());
  EXPECT_TRUE(report.curves.empty());
}

std::vector<std::uint64_t> visit_all(std::uint64_t ws, std::uint64_t line,
                                     std::uint64_t chunk_bytes, std::uint64_t seed) {
  using namespace detail;
  const std::uint64_t chunk = std::min(chunk_bytes, ws);
  std::vector<std::uint32_t> co(ws / chunk), lo(chunk / line), sh(ws / chunk);
  splitmix64 rng{seed};
  random_permutation(co.data(), co.size(), rng);
  random_permutation(lo.data(), lo.size(), rng);
  for (auto& s : sh) s = static_cast<std::uint32_t>(rng.below(lo.size()));
  chase_layout l{co.size(), lo.size(), co.data(), lo.data(), sh.data()};
  std::vector<std::uint64_t> order;
  for (std::uint64_t t = 0; t < l.chunks * l.lines; ++t) order.push_back(chase_visit(l, t));
  return order;
}

TEST(GpuChaseOrder, IsOneCycleThroughEveryLine) {
  for (std::uint64_t ws : {4096ull, 65536ull, 1ull << 20, 3ull << 20}) {
    const auto order = visit_all(ws, 128, 64 * KiB, ws);
    const std::uint64_t n = ws / 128;
    ASSERT_EQ(order.size(), n);
    // Following next(visit t) = visit t+1 from line order[0] returns after n steps, having seen
    // every line once: the visits are a permutation of the lines.
    std::vector<bool> seen(n, false);
    for (auto line : order) {
      ASSERT_LT(line, n);
      EXPECT_FALSE(seen[line]) << "line " << line << " visited twice at ws " << ws;
      seen[line] = true;
    }
  }
}

TEST(GpuChaseOrder, HopsToAnotherChunkEveryStep) {
  const auto order = visit_all(1ull << 20, 128, 64 * KiB, 7);
  const std::uint64_t lines_per_chunk = 64 * KiB / 128;
  for (std::size_t t = 0; t + 1 < order.size(); ++t) {
    EXPECT_NE(order[t] / lines_per_chunk, order[t + 1] / lines_per_chunk) << "step " << t;
  }
}

TEST(GpuChaseOrder, DependsOnTheSeed) {
  EXPECT_NE(visit_all(1 << 20, 128, 64 * KiB, 1), visit_all(1 << 20, 128, 64 * KiB, 2));
}

TEST(GpuPattern, ClosedFormSumMatchesTheWords) {
  for (std::uint64_t n : {0ull, 1ull, 2ull, 3ull, 1000ull, 65537ull, 1ull << 20}) {
    for (std::uint32_t seed : {0u, 1u, 0xDEADBEEFu}) {
      std::uint32_t sum = 0;
      for (std::uint64_t i = 0; i < n; ++i) sum += detail::pattern_word(i, seed);
      EXPECT_EQ(detail::pattern_sum(n, seed), sum) << "n " << n << " seed " << seed;
    }
  }
}

TEST(GpuPattern, NeighbouringWordsDiffer) {
  for (std::uint64_t i = 0; i < 100000; ++i) {
    ASSERT_NE(detail::pattern_word(i, 5), detail::pattern_word(i + 1, 5));
  }
}

TEST(GpuPattern, StridedSumMatchesTheWordsItCovers) {
  // (first, elements, period, run): strides of 4/8/16-byte elements, a misaligned run, one word.
  const std::uint64_t shapes[][4] = {{0, 1000, 1, 1}, {0, 333, 8, 2},  {0, 100, 64, 4},
                                     {7, 999, 1, 1},  {4, 50, 128, 4}, {0, 1, 1, 1},
                                     {0, 0, 4, 1},    {12, 77, 6, 2}};
  for (const auto& sh : shapes) {
    for (std::uint32_t seed : {0u, 0x7A77E201u}) {
      std::uint32_t sum = 0;
      for (std::uint64_t e = 0; e < sh[1]; ++e)
        for (std::uint64_t w = 0; w < sh[3]; ++w)
          sum += detail::pattern_word(sh[0] + e * sh[2] + w, seed);
      EXPECT_EQ(detail::strided_pattern_sum(sh[0], sh[1], sh[2], sh[3], seed), sum)
          << sh[0] << " " << sh[1] << " " << sh[2] << " " << sh[3];
    }
  }
  // Large counts wrap the same way the kernels do.
  EXPECT_EQ(detail::strided_pattern_sum(0, 1ull << 29, 1, 1, 3),
            detail::pattern_sum(1ull << 29, 3));
}

TEST(GpuPattern, MixIndexIsABijection) {
  for (unsigned bits : {1u, 2u, 5u, 12u, 16u}) {
    const std::uint64_t n = 1ull << bits;
    std::vector<bool> seen(n, false);
    std::uint64_t neighbours_apart = 0;
    for (std::uint64_t i = 0; i < n; ++i) {
      const std::uint32_t k = detail::mix_index(i, bits, 0x6A7E5u);
      ASSERT_LT(k, n);
      EXPECT_FALSE(seen[k]) << "bits " << bits << " index " << i;
      seen[k] = true;
      if (i > 0 && std::abs(static_cast<long long>(k) -
                            static_cast<long long>(detail::mix_index(i - 1, bits, 0x6A7E5u))) > 32)
        ++neighbours_apart;
    }
    // Neighbouring indices land far apart (so a gather is not secretly coalesced).
    if (bits >= 12) EXPECT_GT(neighbours_apart, n * 9 / 10) << bits;
  }
}

}  // namespace
}  // namespace vramkit::probe
