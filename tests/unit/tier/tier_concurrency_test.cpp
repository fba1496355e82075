// Concurrency of the tier module (run under TSan by `make test-tsan`): several threads sharing one
// residency manager, and the pipeline with every stage on its own thread or stream.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>
#include <vector>

#include "tier_test_support.hpp"
#include "vramkit/core/error.hpp"
#include "vramkit/tier/residency_manager.hpp"
#include "vramkit/tier/stream_pipeline.hpp"

namespace vramkit::tier {
namespace {

using testing::sim_setup;

TEST(TierConcurrency, ThreadsSharingOneManagerSeeCurrentDataAndKeepTheBudget) {
  sim_setup sim;
  constexpr std::size_t budget = 64 * KiB;  // 20 buffers of 8 KiB compete for 8 slots
  constexpr std::size_t bytes = 8 * KiB;
  residency_manager m(*sim.device, *sim.device_memory, *sim.pinned_memory,
                      {.device_budget_bytes = budget});
  // Shared read-only buffers, and private read-write buffers per thread.
  std::vector<tiered_buffer> shared;
  for (int i = 0; i < 4; ++i) {
    shared.push_back(m.create(bytes, buffer_flags::read_only));
    std::memset(m.host_data(shared.back(), access_mode::write), 0x40 + i, bytes);
  }
  constexpr int threads = 4;
  std::vector<std::vector<tiered_buffer>> mine(threads);
  for (auto& v : mine) {
    for (int i = 0; i < 3; ++i) v.push_back(m.create(bytes));
  }
  std::atomic<int> stale{0};
  std::vector<std::thread> pool;
  std::vector<std::vector<std::uint8_t>> expected(threads * 3, std::vector<std::uint8_t>(bytes, 0));
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      owned_stream s(*sim.device);
      std::mt19937 rng(static_cast<unsigned>(t) * 77u + 1u);
      for (int step = 0; step < 150; ++step) {
        if (rng() % 3 == 0) {
          const int i = static_cast<int>(rng() % shared.size());
          auto* d = static_cast<std::uint8_t*>(m.acquire(shared[i], s, access_mode::read));
          sim.device->launch_host_func(s, [d, i, &stale] {
            if (d[0] != 0x40 + i || d[bytes - 1] != 0x40 + i) ++stale;
          });
          m.release(shared[i], s);
        } else {
          const int i = static_cast<int>(rng() % 3);
          auto& shadow = expected[t * 3 + i];
          auto* d = static_cast<std::uint8_t*>(m.acquire(mine[t][i], s, access_mode::read_write));
          const auto add = static_cast<std::uint8_t>(1 + rng() % 9);
          sim.device->launch_host_func(s, [d, add, before = shadow, &stale] {
            if (std::memcmp(d, before.data(), bytes) != 0) ++stale;
            for (std::size_t k = 0; k < bytes; ++k) d[k] = static_cast<std::uint8_t>(d[k] + add);
          });
          for (auto& v : shadow) v = static_cast<std::uint8_t>(v + add);
          m.release(mine[t][i], s);
          if (rng() % 8 == 0) m.prefetch(mine[t][(i + 1) % 3], s);
        }
      }
      sim.device->synchronize(s);
    });
  }
  for (auto& th : pool) th.join();
  EXPECT_EQ(stale.load(), 0);
  for (int t = 0; t < threads; ++t) {
    for (int i = 0; i < 3; ++i) {
      ASSERT_EQ(0, std::memcmp(m.host_data(mine[t][i]), expected[t * 3 + i].data(), bytes))
          << t << "/" << i;
    }
  }
  const auto st = m.stats();
  EXPECT_GT(st.evictions, 10u);
  EXPECT_LE(st.peak_resident_bytes, budget);
  EXPECT_LE(sim.device_peak(), static_cast<std::int64_t>(budget));
}

TEST(TierConcurrency, PipelineFileToFileAtEveryDepth) {
  const std::size_t words = 200'000;
  std::vector<std::uint32_t> input(words);
  for (std::size_t i = 0; i < words; ++i) input[i] = static_cast<std::uint32_t>(i * 40503u);
  const auto dir = std::filesystem::temp_directory_path();
  const auto in_path = dir / ("vramkit_tier_cc_in_" + std::to_string(::getpid()));
  const auto out_path = dir / ("vramkit_tier_cc_out_" + std::to_string(::getpid()));
  std::ofstream(in_path, std::ios::binary)
      .write(reinterpret_cast<const char*>(input.data()), words * 4);
  for (int depth : {1, 2, 4}) {
    sim_setup sim;
    stream_pipeline p(
        *sim.device, *sim.device_memory, *sim.pinned_memory,
        {.chunk_bytes = 32 * KiB, .depth = depth, .element_bytes = 4, .staging_threads = 3});
    device_api& api = *sim.device;
    p.run(
        pipeline_input::from_file(in_path.string()),
        [&api](chunk_view c, stream_view s) {
          api.launch_host_func(s, [c] {
            auto* d = static_cast<std::uint32_t*>(c.data);
            for (std::size_t i = 0; i < c.bytes / 4; ++i) d[i] = ~d[i];
          });
        },
        pipeline_output::to_file(out_path.string()));
    std::vector<std::uint32_t> out(words);
    std::ifstream(out_path, std::ios::binary).read(reinterpret_cast<char*>(out.data()), words * 4);
    for (std::size_t i = 0; i < words; ++i)
      ASSERT_EQ(out[i], ~input[i]) << "depth " << depth << " word " << i;
  }
  std::filesystem::remove(in_path);
  std::filesystem::remove(out_path);
}

TEST(TierConcurrency, PipelineStopsCleanlyWhenTheCallbackFailsMidStream) {
  std::vector<std::uint32_t> input(100'000, 3), out(100'000);
  for (int fail_at : {0, 1, 5, 12}) {
    sim_setup sim;
    stream_pipeline p(
        *sim.device, *sim.device_memory, *sim.pinned_memory,
        {.chunk_bytes = 16 * KiB, .depth = 2, .element_bytes = 4, .staging_threads = 2});
    EXPECT_THROW(p.run(
                     pipeline_input::from_host(input.data(), input.size() * 4),
                     [fail_at](chunk_view c, stream_view) {
                       if (static_cast<int>(c.index) == fail_at) throw std::runtime_error("boom");
                     },
                     pipeline_output::to_host(out.data(), out.size() * 4)),
                 error);
    EXPECT_EQ(sim.device_current(), 0);
    EXPECT_EQ(sim.pinned_current(), 0);
  }
}

}  // namespace
}  // namespace vramkit::tier
