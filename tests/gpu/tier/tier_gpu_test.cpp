// The residency manager and the streaming pipeline on the real device, with CUDA kernels as the
// user's work: contents survive evictions and prefetches, the budget holds, and pipeline depths
// 1, 2 and 4 give identical results. Skips without a GPU unless VRAMKIT_REQUIRE_GPU=1.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "tier_gpu_kernels.hpp"
#include "vramkit/core/cuda_device_api.hpp"
#include "vramkit/core/error.hpp"
#include "vramkit/core/units.hpp"
#include "vramkit/tier/residency_manager.hpp"
#include "vramkit/tier/stream_pipeline.hpp"

namespace vramkit::tier {
namespace {

class TierGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    auto api = cuda_device_api();
    if (!api) {
      const char* require = std::getenv("VRAMKIT_REQUIRE_GPU");
      if (require != nullptr && std::string(require) == "1") {
        FAIL() << "VRAMKIT_REQUIRE_GPU=1 but no GPU: " << api.error().reason;
      }
      GTEST_SKIP() << "no GPU: " << api.error().reason;
    }
    api_ = *api;
  }
  std::shared_ptr<device_api> api_;
};

TEST_F(TierGpu, ResidencyManagerKeepsContentsAcrossEvictionsAndPrefetches) {
  device_api& api = *api_;
  constexpr std::size_t buffers = 24;
  constexpr std::size_t words = 64 * 1024;  // 256 KiB each
  residency_manager m(api, {.device_budget_bytes = 6 * words * 4});
  std::vector<tiered_buffer> h;
  std::vector<std::vector<std::uint32_t>> shadow(buffers, std::vector<std::uint32_t>(words));
  for (std::size_t b = 0; b < buffers; ++b) {
    h.push_back(m.create(words * 4));
    auto* p = static_cast<std::uint32_t*>(m.host_data(h[b], access_mode::write));
    for (std::size_t i = 0; i < words; ++i)
      p[i] = shadow[b][i] = static_cast<std::uint32_t>(b * 1000003 + i);
  }
  owned_stream s1(api), s2(api);
  std::mt19937 rng(7);
  for (int step = 0; step < 600; ++step) {
    const std::size_t b = rng() % buffers;
    stream_view s = (rng() % 2 != 0) ? s1.view() : s2.view();
    const int what = static_cast<int>(rng() % 4);
    if (what == 0) {
      m.prefetch(h[(b + 1) % buffers], s);
      continue;
    }
    const access_mode access = what == 1   ? access_mode::read
                               : what == 2 ? access_mode::read_write
                                           : access_mode::write;
    auto* d = static_cast<std::uint32_t*>(m.acquire(h[b], s, access));
    if (access == access_mode::read_write) {
      testing::launch_add_u32(d, words, 3, s);
      for (auto& v : shadow[b]) v += 3;
    } else if (access == access_mode::write) {
      const auto v = static_cast<std::uint32_t>(step);
      testing::launch_set_u32(d, words, v, s);
      std::fill(shadow[b].begin(), shadow[b].end(), v);
    }
    m.release(h[b], s);
  }
  api.synchronize(s1);
  api.synchronize(s2);
  for (std::size_t b = 0; b < buffers; ++b) {
    const auto* p = static_cast<const std::uint32_t*>(m.host_data(h[b]));
    ASSERT_EQ(0, std::memcmp(p, shadow[b].data(), words * 4)) << "buffer " << b;
  }
  const auto st = m.stats();
  EXPECT_LE(st.peak_resident_bytes, 6 * words * 4);
  EXPECT_GT(st.evictions, 0u);
  EXPECT_GT(st.bytes_d2h, 0u);
}

TEST_F(TierGpu, AcquireLargerThanBudgetThrowsOutOfMemoryWithSummary) {
  residency_manager m(*api_, {.device_budget_bytes = 1 * MiB});
  auto b = m.create(2 * MiB);
  owned_stream s(*api_);
  try {
    (void)m.acquire(b, s, access_mode::read);
    FAIL() << "no exception";
  } catch (const out_of_memory& e) {
    EXPECT_NE(std::string(e.what()).find("budget"), std::string::npos) << e.what();
  }
}

TEST_F(TierGpu, PipelineDepthsOneTwoFourGiveIdenticalResults) {
  device_api& api = *api_;
  const std::size_t words = (3 * MiB) / 4 + 123;  // a partial last chunk
  std::vector<std::uint32_t> input(words);
  for (std::size_t i = 0; i < words; ++i) input[i] = static_cast<std::uint32_t>(i * 2654435761u);
  std::vector<std::uint32_t> expected(words);
  for (std::size_t i = 0; i < words; ++i)
    expected[i] = input[i] * 5u + static_cast<std::uint32_t>(i);
  for (int depth : {1, 2, 4}) {
    stream_pipeline p(api, {.chunk_bytes = 256 * KiB, .depth = depth, .element_bytes = 4});
    std::vector<std::uint32_t> out(words, 0);
    const auto st = p.run(
        pipeline_input::from_host(input.data(), words * 4),
        [](chunk_view c, stream_view s) {
          testing::launch_mix_u32(static_cast<std::uint32_t*>(c.data), c.bytes / 4, c.offset / 4,
                                  s);
        },
        pipeline_output::to_host(out.data(), out.size() * 4));
    EXPECT_EQ(st.chunks, (words * 4 + 256 * KiB - 1) / (256 * KiB));
    ASSERT_EQ(0, std::memcmp(out.data(), expected.data(), words * 4)) << "depth " << depth;
  }
}

TEST_F(TierGpu, PipelineTransformsPinnedDataInPlace) {
  device_api& api = *api_;
  const std::size_t words = 2 * MiB / 4;
  auto* data = static_cast<std::uint32_t*>(api.allocate_pinned_host(words * 4));
  for (std::size_t i = 0; i < words; ++i) data[i] = static_cast<std::uint32_t>(i);
  stream_pipeline p(api, {.chunk_bytes = 128 * KiB, .depth = 3, .element_bytes = 4});
  p.run(
      pipeline_input::from_host(data, words * 4, host_memory::pinned),
      [](chunk_view c, stream_view s) {
        testing::launch_mix_u32(static_cast<std::uint32_t*>(c.data), c.bytes / 4, c.offset / 4, s);
      },
      pipeline_output::to_host(data, words * 4, host_memory::pinned));
  std::size_t bad = 0;
  for (std::size_t i = 0; i < words; ++i)
    bad += data[i] != static_cast<std::uint32_t>(i) * 5u + static_cast<std::uint32_t>(i);
  api.free_pinned_host(data);
  EXPECT_EQ(bad, 0u);
}

TEST_F(TierGpu, PipelineCallbackFailureNamesTheChunk) {
  std::vector<std::uint32_t> input(1 << 18, 1);
  stream_pipeline p(*api_, {.chunk_bytes = 64 * KiB, .depth = 2, .element_bytes = 4});
  try {
    p.run(pipeline_input::from_host(input.data(), input.size() * 4), [](chunk_view c, stream_view) {
      if (c.index == 5) throw std::runtime_error("kernel launch refused");
    });
    FAIL() << "no exception";
  } catch (const error& e) {
    EXPECT_NE(std::string(e.what()).find("chunk 5"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace vramkit::tier
