// The texture-streaming example on the simulated device: the budget is never exceeded, the item
// nearest the camera gets its finest level, and every level's contents stay intact through any
// number of evictions.
#include "texture_streamer.hpp"

#include <gtest/gtest.h>

#include "tier_test_support.hpp"
#include "vramkit/core/error.hpp"

namespace vramkit::examples {
namespace {

using tier::testing::sim_setup;

TEST(TextureStreaming, BudgetHoldsNearestItemGetsLevelZeroAndContentsStayIntact) {
  sim_setup sim;
  constexpr std::size_t budget = 3 * MiB;
  tier::residency_manager manager(*sim.device, *sim.device_memory, *sim.pinned_memory,
                                  {.device_budget_bytes = budget});
  texture_streamer streamer(*sim.device, manager, 2.0);
  for (int gy = 0; gy < 3; ++gy) {
    for (int gx = 0; gx < 8; ++gx) {
      streamer.add_item({gx * 4.0, gy * 3.0}, 512 * KiB, 4,
                        static_cast<std::uint32_t>(gy * 8 + gx));
    }
  }
  owned_stream stream(*sim.device);
  std::size_t bad = 0;
  auto verify = [&](const void* d, std::size_t bytes, std::uint64_t expected, stream_view s) {
    sim.device->launch_host_func(
        s, [d, bytes, expected, &bad] { bad += checksum(d, bytes) != expected; });
  };
  for (int f = 0; f < 48; ++f) {
    const point camera{f * 30.0 / 48, 3.0 + (f % 7) * 0.5};
    const auto r = streamer.frame(camera, stream, verify);
    EXPECT_LE(r.planned_bytes, budget);
    EXPECT_LE(r.resident_bytes, budget) << "frame " << f;
    std::size_t nearest = 0;
    for (std::size_t i = 1; i < r.priority.size(); ++i) {
      if (r.priority[i] > r.priority[nearest]) nearest = i;
    }
    EXPECT_EQ(r.finest_level[nearest], r.wanted_level[nearest]) << "frame " << f;
    for (std::size_t i = 0; i < r.priority.size(); ++i) {
      EXPECT_GE(r.finest_level[i], r.wanted_level[i]) << "never finer than wanted";
    }
    // Items very close to the camera want level 0 and the budget has room for a few of them.
    if (r.wanted_level[nearest] == 0) {
      EXPECT_EQ(r.finest_level[nearest], 0);
    }
  }
  sim.device->synchronize(stream);
  EXPECT_EQ(bad, 0u) << "a level's device copy did not match its checksum";
  EXPECT_EQ(streamer.verify_host_copies(), 0u);
  const auto st = manager.stats();
  EXPECT_GT(st.evictions, 20u) << "the scene must not fit the budget";
  EXPECT_GT(st.prefetch_hits, 0u);
  EXPECT_EQ(st.bytes_d2h, 0u) << "textures are read-only: never copied back";
  EXPECT_LE(st.peak_resident_bytes, budget);
  EXPECT_LE(sim.device_peak(), static_cast<std::int64_t>(budget));
}

TEST(TextureStreaming, BudgetTooSmallForTheCoarsestLevelsIsOutOfMemory) {
  sim_setup sim;
  tier::residency_manager manager(*sim.device, *sim.device_memory, *sim.pinned_memory,
                                  {.device_budget_bytes = 8 * KiB});
  texture_streamer streamer(*sim.device, manager, 1.0);
  for (int i = 0; i < 4; ++i) streamer.add_item({i * 1.0, 0}, 64 * KiB, 2, 1);
  owned_stream stream(*sim.device);
  EXPECT_THROW(streamer.frame({0, 0}, stream), out_of_memory);
  EXPECT_THROW(streamer.add_item({0, 0}, 1000, 3, 1), invalid_input);
}

}  // namespace
}  // namespace vramkit::examples
