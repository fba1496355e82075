// The streaming pipeline under random device faults: device and pinned allocations, copies and
// events fail at random points of runs over several ring shapes, with staging from a pinned pool.
// A run either delivers exactly the reference bytes or throws a typed error with every buffer
// released; the next run on the same pipeline is correct again; after release and trim nothing is
// held.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "tier_test_support.hpp"
#include "vramkit/core/error.hpp"
#include "vramkit/core/testing/fault_injecting_device.hpp"
#include "vramkit/mr/pinned_host_pool.hpp"
#include "vramkit/tier/stream_pipeline.hpp"

namespace vramkit::tier {
namespace {

using vramkit::testing::fault_injecting_device;
using vramkit::testing::fault_kind;

std::uint32_t mix(std::uint32_t x, std::size_t index) {
  return x * 2654435761u + static_cast<std::uint32_t>(index) * 7u + 1u;
}

struct shape {
  int depth;
  host_memory memory;  // of both the input and the output
};

TEST(TierFaults, PipelineRunsDeliverEveryByteOrFailTypedAndReleaseEverything) {
  host_sim_options opts = testing::slow_copies(64 * MiB);
  opts.copy_latency = std::chrono::microseconds(5);
  testing::sim_setup sim(opts);
  auto dev = std::make_shared<fault_injecting_device>(sim.device);
  auto device_memory =
      std::make_shared<mr::statistics_adaptor>(std::make_shared<mr::device_api_resource>(
          dev, mr::memory_kind::device, mr::allocation_mode::stream_ordered));
  auto pinned_upstream = std::make_shared<mr::statistics_adaptor>(
      std::make_shared<mr::device_api_resource>(dev, mr::memory_kind::pinned_host));
  auto device_held = [&] { return device_memory->report().bytes.all.current; };
  auto pinned_held = [&] { return pinned_upstream->report().bytes.all.current; };

  const std::size_t words = 40 * 1024 + 37;  // ten chunks and a partial one
  std::vector<std::uint32_t> input(words), expected(words);
  for (std::size_t i = 0; i < words; ++i) {
    input[i] = static_cast<std::uint32_t>(i * 40503u + 11u);
    expected[i] = mix(input[i], i);
  }
  std::mt19937 rng(420);
  std::size_t failed_runs = 0, good_runs = 0;
  {
    mr::pinned_host_pool pool(pinned_upstream, dev, {.byte_cap = 2 * MiB});
    for (const shape sh : {shape{1, host_memory::pageable}, shape{2, host_memory::pageable},
                           shape{4, host_memory::pageable}, shape{3, host_memory::pinned}}) {
      stream_pipeline p(*dev, *device_memory, pool,
                        {.chunk_bytes = 16 * KiB,
                         .depth = sh.depth,
                         .element_bytes = 4,
                         .staging_threads = 2,
                         .measure_stages = false});
      // Pinned input and output live in the pool too (copied to and from the device directly).
      const std::size_t bytes = words * 4;
      std::vector<std::uint32_t> pageable_in = input, pageable_out(words);
      void* pinned_in = sh.memory == host_memory::pinned ? pool.allocate(bytes) : nullptr;
      void* pinned_out = sh.memory == host_memory::pinned ? pool.allocate(bytes) : nullptr;
      if (pinned_in != nullptr) std::memcpy(pinned_in, input.data(), bytes);
      auto* in = sh.memory == host_memory::pinned ? pinned_in : pageable_in.data();
      auto* out = static_cast<std::uint32_t*>(
          sh.memory == host_memory::pinned ? pinned_out : static_cast<void*>(pageable_out.data()));
      auto cb = [&](chunk_view c, stream_view s) {
        dev->launch_host_func(s, [c] {
          auto* d = static_cast<std::uint32_t*>(c.data);
          for (std::size_t i = 0; i < c.bytes / 4; ++i) d[i] = mix(d[i], c.offset / 4 + i);
        });
      };
      for (int round = 0; round < 60; ++round) {
        const bool faulty = round % 4 != 3;
        if (faulty) dev->fail_nth(static_cast<fault_kind>(rng() % 3), 1 + rng() % 48);
        std::fill(out, out + words, 0u);
        try {
          p.run(pipeline_input::from_host(in, bytes, sh.memory), cb,
                pipeline_output::to_host(out, bytes, sh.memory));
          ++good_runs;
          ASSERT_EQ(0, std::memcmp(out, expected.data(), bytes))
              << "depth " << sh.depth << ", round " << round << ": wrong bytes delivered";
        } catch (const cuda_error&) {
          ++failed_runs;
          EXPECT_EQ(device_held(), 0) << "a failed run left device buffers";
        } catch (const out_of_memory&) {
          ++failed_runs;
          EXPECT_EQ(device_held(), 0) << "a failed run left device buffers";
        }
        dev->disarm();
        if (!faulty) {
          ASSERT_EQ(0, std::memcmp(out, expected.data(), bytes)) << "a clean run after faults";
        }
      }
      p.release_buffers();
      EXPECT_EQ(device_held(), 0);
      if (pinned_in != nullptr) pool.deallocate(pinned_in, bytes);
      if (pinned_out != nullptr) pool.deallocate(pinned_out, bytes);
    }
    pool.trim();
    EXPECT_EQ(pool.cached_bytes(), 0U);
    EXPECT_EQ(pinned_held(), 0) << "pinned bytes held after release and trim";
  }
  EXPECT_GT(failed_runs, 60U);
  EXPECT_GT(good_runs, 80U);
  EXPECT_EQ(device_held(), 0);
  EXPECT_EQ(pinned_held(), 0);
}

}  // namespace
}  // namespace vramkit::tier
