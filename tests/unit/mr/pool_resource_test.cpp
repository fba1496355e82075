// pool_resource: size classes, splitting and coalescing, trim, the OOM ladder, misuse reports and
// stream-ordered reuse, on the simulated device.
#include "vramkit/mr/pool_resource.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "mr_test_support.hpp"
#include "vramkit/core/error.hpp"
#include "vramkit/core/host_sim_device.hpp"
#include "vramkit/core/testing/fault_injecting_device.hpp"
#include "vramkit/mr/device_api_resource.hpp"
#include "vramkit/mr/statistics_adaptor.hpp"

namespace vramkit::mr {
namespace {

using vramkit::testing::recording_device_api;

using sim_pool = vramkit::testing::sim_stack<vramkit::testing::classic_pool>;

TEST(PoolResource, ReusesFreedBlockOnSameStreamWithoutUpstream) {
  sim_pool s;
  void* p = s.pool->allocate(1000, 256, s.a);
  s.pool->deallocate(p, 1000, 256, s.a);
  const auto before = s.dev->counters().device_allocations;
  void* q = s.pool->allocate(1000, 256, s.a);
  EXPECT_EQ(q, p);
  EXPECT_EQ(s.dev->counters().device_allocations, before);
  s.pool->deallocate(q, 1000, 256, s.a);
}

TEST(PoolResource, PacksSmallRequestsIntoSmallChunksAndRoundsTo512) {
  sim_pool s;
  void* p1 = s.pool->allocate(1, 256, s.a);
  void* p2 = s.pool->allocate(600, 256, s.a);
  EXPECT_EQ(static_cast<char*>(p2) - static_cast<char*>(p1), 512);  // split from one chunk
  const pool_report r = s.pool->report();
  EXPECT_EQ(r.chunks.small.current, 1);
  EXPECT_EQ(r.reserved_bytes.small.current, static_cast<std::int64_t>(2 * MiB));
  EXPECT_EQ(r.allocated_bytes.small.current, 512 + 1024);
  EXPECT_EQ(r.requested_bytes.small.current, 601);
  s.pool->deallocate(p1, 1, 256, s.a);
  s.pool->deallocate(p2, 600, 256, s.a);
}

TEST(PoolResource, LargeRequestsUseLargeChunksAndHugeOnesAChunkOfTheirOwn) {
  sim_pool s;
  void* mid = s.pool->allocate(3 * MiB, 256, s.a);
  void* huge = s.pool->allocate(33 * MiB, 256, s.a);
  const pool_report r = s.pool->report();
  EXPECT_EQ(r.chunks.large.current, 2);
  EXPECT_EQ(r.reserved_bytes.large.current, static_cast<std::int64_t>(20 * MiB + 34 * MiB));
  EXPECT_EQ(r.chunks.small.current, 0);
  s.pool->deallocate(mid, 3 * MiB, 256, s.a);
  s.pool->deallocate(huge, 33 * MiB, 256, s.a);
}

TEST(PoolResource, CoalescesNeighboursBackToOneBlockPerChunk) {
  sim_pool s;
  std::vector<void*> ps;
  ps.reserve(5);
  for (int i = 0; i < 5; ++i) ps.push_back(s.pool->allocate(2 * MiB, 256, s.a));
  EXPECT_EQ(s.pool->chunk_count(), 1u);  // all from the first 20 MiB chunk
  for (int i : {1, 3, 0, 4, 2}) s.pool->deallocate(ps[i], 2 * MiB, 256, s.a);
  EXPECT_EQ(s.pool->free_block_count(), 1u);
  EXPECT_EQ(s.pool->report().largest_free_block, 20 * MiB);
}

TEST(PoolResource, BestFitPicksTheSmallestFittingBlock) {
  sim_pool s;
  void* a = s.pool->allocate(4 * MiB, 256, s.a);
  void* sep1 = s.pool->allocate(2 * MiB, 256, s.a);
  void* b = s.pool->allocate(2 * MiB, 256, s.a);
  void* sep2 = s.pool->allocate(2 * MiB, 256, s.a);
  s.pool->deallocate(a, 4 * MiB, 256, s.a);
  s.pool->deallocate(b, 2 * MiB, 256, s.a);
  void* c = s.pool->allocate(2 * MiB, 256, s.a);
  EXPECT_EQ(c, b);  // the 2 MiB hole, not the 4 MiB one nor the chunk's tail
  for (auto [p, n] : {std::pair{sep1, 2 * MiB}, {sep2, 2 * MiB}, {c, 2 * MiB}}) {
    s.pool->deallocate(p, n, 256, s.a);
  }
}

TEST(PoolResource, OversizeBlocksAreNotSplit) {
  pool_options o;
  o.max_split = 8 * MiB;
  sim_pool s(o);
  void* big = s.pool->allocate(12 * MiB, 256, s.a);
  s.pool->deallocate(big, 12 * MiB, 256, s.a);
  void* small_large = s.pool->allocate(3 * MiB, 256, s.a);
  EXPECT_NE(small_large, big);  // the 12 MiB oversize block is kept whole
  void* again = s.pool->allocate(11 * MiB, 256, s.a);
  EXPECT_EQ(again, big);
  s.pool->deallocate(small_large, 3 * MiB, 256, s.a);
  s.pool->deallocate(again, 11 * MiB, 256, s.a);
}

TEST(PoolResource, TrimReturnsEveryByteToTheUpstream) {
  sim_pool s;
  std::vector<std::pair<void*, std::size_t>> v;
  for (std::size_t n : {std::size_t{100}, 70 * KiB, 5 * MiB, 40 * MiB}) {
    v.emplace_back(s.pool->allocate(n, 256, s.a), n);
  }
  for (auto& [p, n] : v) s.pool->deallocate(p, n, 256, s.b);
  EXPECT_GT(s.pool->trim(), 0u);
  EXPECT_EQ(s.pool->reserved_bytes(), 0u);
  EXPECT_EQ(s.dev->counters().device_bytes_in_use, 0u);
}

TEST(PoolResource, TrimKeepsChunksWithLiveBlocks) {
  sim_pool s;
  void* p = s.pool->allocate(1 * MiB + 1, 256, s.a);
  void* q = s.pool->allocate(64, 256, s.a);
  s.pool->deallocate(q, 64, 256, s.a);
  EXPECT_EQ(s.pool->trim(), 2 * MiB);  // the small chunk goes, the large one stays
  EXPECT_EQ(s.pool->reserved_bytes(), 20 * MiB);
  s.pool->deallocate(p, 1 * MiB + 1, 256, s.a);
}

TEST(PoolResource, TrimsCachedChunksAndRetriesWhenTheUpstreamIsFull) {
  host_sim_options d;
  d.device_memory_bytes = 64 * MiB;
  sim_pool s({}, d);
  void* p = s.pool->allocate(40 * MiB, 256, s.a);
  s.pool->deallocate(p, 40 * MiB, 256, s.a);
  void* q = s.pool->allocate(50 * MiB, 256, s.a);  // 40 + 50 > 64: needs the trim
  ASSERT_NE(q, nullptr);
  const pool_report r = s.pool->report();
  EXPECT_EQ(r.upstream_failures, 1u);
  EXPECT_EQ(r.reserved_bytes.all.current, static_cast<std::int64_t>(50 * MiB));
  s.pool->deallocate(q, 50 * MiB, 256, s.a);
}

TEST(PoolResource, ReleaseOnGrowGivesIdleChunksBackBeforeTakingANewOne) {
  pool_options o;
  o.growth = pool_options::growth_policy::release_on_grow;
  auto dev = std::make_shared<host_sim_device>();
  owned_stream s(*dev);
  auto upstream = std::make_shared<device_api_resource>(dev, memory_kind::device,
                                                        allocation_mode::stream_ordered);
  pool_resource pool(upstream, dev, o);
  void* small = pool.allocate(1000, 256, s);
  void* p = pool.allocate(40 * MiB, 256, s);
  pool.deallocate(p, 40 * MiB, 256, s);
  void* q = pool.allocate(50 * MiB, 256, s);
  const pool_report r = pool.report();
  EXPECT_EQ(r.upstream_frees, 1u);  // the idle 40 MiB chunk, freed on s
  EXPECT_EQ(r.reserved_bytes.large.current, static_cast<std::int64_t>(50 * MiB));
  EXPECT_EQ(r.reserved_bytes.small.current, static_cast<std::int64_t>(2 * MiB));  // other class
  pool.deallocate(q, 50 * MiB, 256, s);
  pool.deallocate(small, 1000, 256, s);
  dev->synchronize(s);
}

TEST(PoolResource, OutOfMemoryCarriesTheSummary) {
  host_sim_options d;
  d.device_memory_bytes = 32 * MiB;
  sim_pool s({}, d);
  void* p = s.pool->allocate(20 * MiB, 256, s.a);
  try {
    (void)s.pool->allocate(20 * MiB, 256, s.a);
    FAIL() << "expected out_of_memory";
  } catch (const out_of_memory& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.requested_bytes(), 20 * MiB);
    EXPECT_NE(what.find("vramkit memory summary"), std::string::npos) << what;
    EXPECT_NE(what.find("pool(host_sim)"), std::string::npos) << what;
    EXPECT_NE(what.find("upstream:"), std::string::npos) << what;
  }
  EXPECT_EQ(s.pool->report().out_of_memory_errors, 1u);
  s.pool->deallocate(p, 20 * MiB, 256, s.a);
}

TEST(PoolResource, SurvivesAnInjectedUpstreamFailure) {
  sim_pool s;
  s.dev->fail_allocation_after(1);
  void* p = s.pool->allocate(3 * MiB, 256, s.a);  // first chunk fails, the retry succeeds
  ASSERT_NE(p, nullptr);
  s.pool->deallocate(p, 3 * MiB, 256, s.a);
}

TEST(PoolResource, MaximumSizeBoundsTheReservation) {
  pool_options o;
  o.maximum_size = 24 * MiB;
  sim_pool s(o);
  void* p = s.pool->allocate(16 * MiB, 256, s.a);
  EXPECT_THROW((void)s.pool->allocate(16 * MiB, 256, s.a), out_of_memory);
  s.pool->deallocate(p, 16 * MiB, 256, s.a);
}

TEST(PoolResource, RejectsUnsupportedAlignmentAndBadOptions) {
  sim_pool s;
  EXPECT_THROW((void)s.pool->allocate(100, 512, s.a), logic_error);
  EXPECT_THROW((void)s.pool->allocate(100, 3, s.a), logic_error);
  pool_options bad;
  bad.rounding = 300;
  EXPECT_THROW(pool_resource(std::make_shared<device_api_resource>(s.dev), s.dev, bad),
               logic_error);
}

TEST(PoolResource, CrossStreamReuseWaitsOnAnEventRecordedAfterTheFree) {
  auto api = std::make_shared<recording_device_api>();
  owned_stream a(*api);
  owned_stream b(*api);
  auto pool = std::make_shared<pool_resource>(std::make_shared<device_api_resource>(api), api);
  void* p = pool->allocate(1000, 256, b);
  pool->deallocate(p, 1000, 256, b);
  api->clear_log();
  void* same = pool->allocate(1000, 256, b);  // same stream: no event, no wait
  EXPECT_EQ(same, p);
  EXPECT_TRUE(api->log().empty());
  pool->deallocate(same, 1000, 256, b);
  void* q = pool->allocate(1000, 256, a);
  EXPECT_EQ(q, p);  // taken from b's list ...
  const auto log = api->log();
  ASSERT_EQ(log.size(), 2u);  // ... after recording on b and making a wait for it
  EXPECT_EQ(log[0].kind, recording_device_api::recorded::what::record);
  EXPECT_EQ(log[0].stream, b.view().handle);
  EXPECT_EQ(log[1].kind, recording_device_api::recorded::what::wait);
  EXPECT_EQ(log[1].stream, a.view().handle);
  EXPECT_EQ(log[1].event, log[0].event);
  EXPECT_EQ(pool->report().cross_stream_waits, 1u);
  pool->deallocate(q, 1000, 256, a);
}

// Shadow-model stress on several streams in one thread: no overlap, alignment, contents intact,
// statistics equal the model, and every byte returns on trim.
void random_stress(int streams, std::uint32_t seed, bool expect_one_block_per_chunk) {
  auto dev = std::make_shared<host_sim_device>();
  auto ss = vramkit::testing::make_streams(*dev, streams);
  auto pool = std::make_shared<pool_resource>(std::make_shared<device_api_resource>(dev), dev);
  statistics_adaptor stats(pool);
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> coin(0, 99);
  std::uniform_int_distribution<std::size_t> small(1, 1 * MiB);
  std::uniform_int_distribution<std::size_t> large(1 * MiB + 1, 24 * MiB);
  vramkit::testing::shadow_model model;
  std::int64_t model_peak = 0;
  for (int op = 0; op < 3000 * vramkit::testing::stress_scale(); ++op) {
    const bool alloc = model.blocks.empty() || coin(rng) < 55;
    if (alloc) {
      const std::size_t n = coin(rng) < 85 ? small(rng) : large(rng);
      const int st = static_cast<int>(rng() % streams);
      void* p = stats.allocate(n, 256, *ss[st]);
      const auto tag = static_cast<unsigned char>(op);
      ASSERT_NO_FATAL_FAILURE(model.add(p, n, st, tag));
      std::memset(p, tag, std::min<std::size_t>(n, 4096));
      static_cast<unsigned char*>(p)[n - 1] = tag;
      model_peak = std::max(model_peak, model.bytes);
    } else {
      auto it = model.pick(rng);
      auto* p = static_cast<unsigned char*>(vramkit::testing::as_ptr(it->first));
      ASSERT_EQ(p[0], it->second.tag);
      ASSERT_EQ(p[it->second.bytes - 1], it->second.tag);
      // Free on the allocating stream or, sometimes, on another one.
      const int st = coin(rng) < 80 ? it->second.stream : static_cast<int>(rng() % streams);
      stats.deallocate(p, it->second.bytes, 256, *ss[st]);
      model.erase(it);
    }
    const statistics_report r = stats.report();
    ASSERT_EQ(r.bytes.all.current, model.bytes);
    ASSERT_EQ(r.bytes.all.peak, model_peak);
    ASSERT_EQ(r.allocations.all.current, static_cast<std::int64_t>(model.blocks.size()));
    ASSERT_EQ(pool->report().requested_bytes.all.current, model.bytes);
  }
  for (auto& [a, l] : model.blocks)
    stats.deallocate(vramkit::testing::as_ptr(a), l.bytes, 256, *ss[l.stream]);
  EXPECT_EQ(pool->allocated_bytes(), 0u);
  if (expect_one_block_per_chunk) {
    EXPECT_EQ(pool->free_block_count(), pool->chunk_count());
  }
  const std::size_t reserved = pool->reserved_bytes();
  EXPECT_EQ(pool->trim(), reserved);
  EXPECT_EQ(pool->reserved_bytes(), 0u);
  EXPECT_EQ(dev->counters().device_bytes_in_use, 0u);
}

TEST(PoolResourceStress, RandomOpsOnOneStreamCoalesceToOneBlockPerChunk) {
  random_stress(1, 11, true);
}

TEST(PoolResourceStress, RandomOpsOnFourStreamsKeepTheModelAndTrimToZero) {
  random_stress(4, 12, false);
}

// Threads on their own and shared streams; each block is written and checked by a host function
// on the stream that owns it, so a block handed to another stream without an event wait would be
// written by two stream workers at once (a data race ThreadSanitizer reports, and a checksum
// mismatch here).
TEST(PoolResourceStress, ThreadsOnSeveralStreamsNeverShareALiveBlock) {
  auto dev = std::make_shared<host_sim_device>();
  constexpr int threads = 4;
  auto ss = vramkit::testing::make_streams(*dev, threads + 1);
  auto pool = std::make_shared<pool_resource>(std::make_shared<device_api_resource>(dev), dev);
  EXPECT_EQ(
      vramkit::testing::run_thread_stress(
          *dev, *pool, ss, threads, {.seed = 100, .ops = 400, .large = 3 * MiB, .dense = 16 * KiB}),
      0);
  EXPECT_EQ(pool->allocated_bytes(), 0u);
  pool->trim();
  EXPECT_EQ(dev->counters().device_bytes_in_use, 0u);
}

}  // namespace
}  // namespace vramkit::mr

namespace vramkit::mr {
namespace {

TEST(PoolResource, EventFailureDuringCrossStreamReuseLeavesThePoolUsable) {
  auto dev = std::make_shared<vramkit::testing::fault_injecting_device>(
      std::make_shared<host_sim_device>());
  pool_resource pool(std::make_shared<device_api_resource>(dev), dev);
  owned_stream a(*dev), b(*dev);
  void* p = pool.allocate(4096, 256, a);
  pool.deallocate(p, 4096, 256, a);
  dev->fail_nth(vramkit::testing::fault_kind::event, 1);
  EXPECT_THROW((void)pool.allocate(4096, 256, b), vramkit::cuda_error);
  void* q = pool.allocate(4096, 256, a);  // the block stayed in a's list
  EXPECT_EQ(q, p);
  pool.deallocate(q, 4096, 256, a);
  EXPECT_EQ(pool.trim(), 2 * MiB);
  EXPECT_EQ(pool.reserved_bytes(), 0U);
}

}  // namespace
}  // namespace vramkit::mr
