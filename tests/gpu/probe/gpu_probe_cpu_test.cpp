// CPU-side tests of the GPU probe: its keys and sections, its answer on a machine without a GPU,
// and the pieces of its method that need no device (the chase cycle, the data pattern's sum).
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <vector>

#include "probe/cuda/chase_order.hpp"
#include "probe/cuda/pattern.hpp"
#include "vramkit/core/cuda_device_api.hpp"
#include "vramkit/probe/gpu_probe.hpp"

namespace vramkit::probe {
namespace {

TEST(GpuProbeKeys, AreUniqueAndDescribed) {
  const auto keys = gpu_probe_keys();
  ASSERT_FALSE(keys.empty());
  std::set<std::string> seen;
  for (const auto& [key, description] : keys) {
    EXPECT_TRUE(seen.insert(key).second) << "duplicate key " << key;
    EXPECT_EQ(key.rfind("gpu{", 0), 0u) << key;
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

TEST(GpuProbe, DoesNothingWhenOnlyHostSectionsAreAsked) {
  probe_options options;
  options.only = {"host"};
  probe_report report;
  run_gpu_probe(options, report);
  EXPECT_TRUE(report.skips.empty());
  EXPECT_TRUE(report.results.empty());
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
    const auto order = visit_all(ws, 128, 64 * 1024, ws);
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
  const auto order = visit_all(1ull << 20, 128, 64 * 1024, 7);
  const std::uint64_t lines_per_chunk = 64 * 1024 / 128;
  for (std::size_t t = 0; t + 1 < order.size(); ++t) {
    EXPECT_NE(order[t] / lines_per_chunk, order[t + 1] / lines_per_chunk) << "step " << t;
  }
}

TEST(GpuChaseOrder, DependsOnTheSeed) {
  EXPECT_NE(visit_all(1 << 20, 128, 64 * 1024, 1), visit_all(1 << 20, 128, 64 * 1024, 2));
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

}  // namespace
}  // namespace vramkit::probe
