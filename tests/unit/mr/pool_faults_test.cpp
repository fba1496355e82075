// The pool under random faults (leveldb's fault-injection style): allocations, copies and events
// of the simulated device fail at random points while two streams allocate and free. Every
// failure reaches the caller as a typed error, live blocks never overlap (each keeps its own
// byte pattern), and after freeing everything and trim() no byte is left held.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "mr_test_support.hpp"
#include "vramkit/core/error.hpp"
#include "vramkit/core/host_sim_device.hpp"
#include "vramkit/core/testing/fault_injecting_device.hpp"
#include "vramkit/mr/device_api_resource.hpp"
#include "vramkit/mr/pool_resource.hpp"

namespace vramkit::mr {
namespace {

using vramkit::testing::fault_injecting_device;
using vramkit::testing::fault_kind;

struct live_block {
  void* ptr;
  std::size_t bytes;
  int stream;
  unsigned char pattern;
};

void run_random_faults(std::uint32_t seed, pool_options options) {
  auto sim = std::make_shared<host_sim_device>();
  auto dev = std::make_shared<fault_injecting_device>(sim);
  auto pool =
      std::make_unique<pool_resource>(std::make_shared<device_api_resource>(dev), dev, options);
  owned_stream a(*dev), b(*dev);
  stream_view streams[2] = {a, b};
  std::mt19937 rng(seed);
  std::vector<live_block> live;
  std::size_t failures = 0;
  for (int op = 0; op < 3000 * vramkit::testing::stress_scale(); ++op) {
    if (rng() % 8 == 0) {
      const auto kind = static_cast<fault_kind>(rng() % 3);
      dev->fail_nth(kind, 1 + rng() % 3);
    }
    const bool alloc = live.empty() || (live.size() < 48 && rng() % 100 < 60);
    if (alloc) {
      const std::size_t bytes = std::size_t{1} << (4 + rng() % 18);  // 16 B .. 2 MiB
      const int s = static_cast<int>(rng() % 2);
      try {
        void* p = pool->allocate(bytes, 256, streams[s]);
        ASSERT_EQ(reinterpret_cast<std::uintptr_t>(p) % 256, 0U);
        const auto pattern = static_cast<unsigned char>(rng());
        std::memset(p, pattern, bytes);
        live.push_back({p, bytes, s, pattern});
      } catch (const out_of_memory&) {
        ++failures;
      } catch (const cuda_error&) {
        ++failures;
      }
    } else {
      const std::size_t i = rng() % live.size();
      const live_block blk = live[i];
      live[i] = live.back();
      live.pop_back();
      // The block still holds its own pattern: no other live block was handed the same bytes.
      const auto* bytes = static_cast<const unsigned char*>(blk.ptr);
      for (std::size_t k = 0; k < blk.bytes; k += 61)
        ASSERT_EQ(bytes[k], blk.pattern) << "seed " << seed << " op " << op << " offset " << k;
      ASSERT_EQ(bytes[blk.bytes - 1], blk.pattern);
      pool->deallocate(blk.ptr, blk.bytes, 256, streams[blk.stream]);
    }
    ASSERT_GE(pool->reserved_bytes(), pool->allocated_bytes());
  }
  dev->fail_nth(fault_kind::allocation, 0);
  dev->fail_nth(fault_kind::copy, 0);
  dev->fail_nth(fault_kind::event, 0);
  for (const auto& blk : live) pool->deallocate(blk.ptr, blk.bytes, 256, streams[blk.stream]);
  EXPECT_GT(failures, 0U) << "seed " << seed << ": no fault reached the caller";
  EXPECT_EQ(pool->allocated_bytes(), 0U);
  pool->trim();
  EXPECT_EQ(pool->reserved_bytes(), 0U) << "seed " << seed;
  EXPECT_EQ(pool->chunk_count(), 0U);
  pool.reset();
  EXPECT_EQ(sim->counters().device_bytes_in_use, 0U) << "seed " << seed << ": device bytes leaked";
}

TEST(PoolFaults, RandomAllocationAndEventFailuresLoseNothing) {
  for (std::uint32_t seed = 1; seed <= 8; ++seed) {
    SCOPED_TRACE(seed);
    run_random_faults(seed, {});
  }
}

TEST(PoolFaults, RandomFailuresWithReleaseOnGrowLoseNothing) {
  pool_options o;
  o.growth = pool_options::growth_policy::release_on_grow;
  for (std::uint32_t seed = 100; seed < 104; ++seed) {
    SCOPED_TRACE(seed);
    run_random_faults(seed, o);
  }
}

}  // namespace
}  // namespace vramkit::mr
