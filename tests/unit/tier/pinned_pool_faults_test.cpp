// The pinned staging pool (the tier module's host side) under random device faults: pinned
// allocations, copies and events fail at random points while two delayed streams use blocks and
// free them in stream order. Every failure reaches the caller as a typed error, a block is never
// handed out again while work queued before its free still uses it, and after everything is freed
// and trimmed no pinned byte is held.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <random>
#include <vector>

#include "tier_test_support.hpp"
#include "vramkit/core/error.hpp"
#include "vramkit/core/testing/fault_injecting_device.hpp"
#include "vramkit/mr/pinned_host_pool.hpp"

namespace vramkit::tier {
namespace {

using vramkit::testing::fault_injecting_device;
using vramkit::testing::fault_kind;

struct live_block {
  std::uint8_t* ptr;
  std::size_t bytes;
  int stream;
  std::uint8_t pattern;
};

TEST(TierFaults, PinnedPoolNeverHandsOutABlockStillInUseAndHoldsNothingAfterTrim) {
  testing::sim_setup sim(testing::slow_copies(64 * MiB));
  auto dev = std::make_shared<fault_injecting_device>(sim.device);
  std::mt19937 rng(1807);
  std::size_t typed_failures = 0, copies = 0;
  std::atomic<int> overwritten{0};
  // Pinned memory through the faulty device, counted.
  auto upstream = std::make_shared<mr::statistics_adaptor>(
      std::make_shared<mr::device_api_resource>(dev, mr::memory_kind::pinned_host));
  auto pinned_held = [&] { return upstream->report().bytes.all.current; };
  {
    mr::pinned_host_pool pool(upstream, dev, {.byte_cap = 6 * MiB});
    owned_stream a(*dev), b(*dev);
    const stream_view streams[2] = {a, b};
    dev->delay_stream(a, std::chrono::microseconds(30));
    void* scratch = dev->allocate_device(MiB);
    std::vector<live_block> live;
    for (int op = 0; op < 6000; ++op) {
      if (rng() % 6 == 0) dev->fail_nth(static_cast<fault_kind>(rng() % 3), 1 + rng() % 3);
      const bool alloc = live.empty() || (live.size() < 24 && rng() % 100 < 55);
      if (alloc) {
        const std::size_t bytes = std::size_t{1} << (9 + rng() % 12);  // 512 B .. 1 MiB
        const int s = static_cast<int>(rng() % 2);
        try {
          auto* p = static_cast<std::uint8_t*>(pool.allocate(bytes, 256, streams[s]));
          const auto pattern = static_cast<std::uint8_t>(rng() | 1);
          std::memset(p, pattern, bytes);
          live.push_back({p, bytes, s, pattern});
        } catch (const out_of_memory&) {
          ++typed_failures;
        }
        continue;
      }
      const std::size_t at = rng() % live.size();
      const live_block blk = live[at];
      live[at] = live.back();
      live.pop_back();
      const stream_view s = streams[blk.stream];
      // Work queued on the stream before the free: a copy out of the block, then a check that the
      // block still holds what its owner wrote when the stream gets there.
      try {
        dev->copy_async(scratch, blk.ptr, std::min(blk.bytes, MiB), copy_kind::host_to_device, s);
        ++copies;
      } catch (const cuda_error&) {
        ++typed_failures;
      }
      dev->launch_host_func(s, [blk, &overwritten] {
        for (std::size_t i = 0; i < blk.bytes; i += 61) {
          if (blk.ptr[i] != blk.pattern) {
            ++overwritten;
            return;
          }
        }
      });
      // A free whose event cannot be recorded waits for the stream instead (deallocate is
      // noexcept): the block must still not be reused early.
      pool.deallocate(blk.ptr, blk.bytes, 256, s);
    }
    dev->disarm();
    for (const auto& blk : live) pool.deallocate(blk.ptr, blk.bytes, 256, streams[blk.stream]);
    dev->synchronize(a);
    dev->synchronize(b);
    dev->free_device(scratch);
    const auto before = pool.report();
    EXPECT_EQ(before.allocated_bytes.all.current, 0);
    EXPECT_EQ(before.allocations.all.current, 0);
    pool.trim();
    EXPECT_EQ(pool.cached_bytes(), 0U);
    EXPECT_EQ(pinned_held(), 0) << "pinned bytes still held after trim";
  }
  EXPECT_GT(typed_failures, 50U);
  EXPECT_GT(copies, 1000U);
  EXPECT_EQ(overwritten.load(), 0) << "a block was handed out while queued work still used it";
  EXPECT_GT(dev->counters().injected_failures, 100U);
  EXPECT_EQ(pinned_held(), 0);
}

}  // namespace
}  // namespace vramkit::tier
