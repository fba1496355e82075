// vmm_pool_resource on the simulated device's real virtual memory (memfd extents mapped with
// mmap(MAP_FIXED)): growth in place, remapping of free granules instead of growing, trim and its
// accounting, the maximum, stream-ordered reuse, and randomized stress with data checks.
#include "vramkit/mr/vmm_pool_resource.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "mr_test_support.hpp"
#include "vramkit/core/error.hpp"
#include "vramkit/core/host_sim_device.hpp"
#include "vramkit/core/testing/fault_injecting_device.hpp"
#include "vramkit/mr/memory_summary.hpp"
#include "vramkit/mr/statistics_adaptor.hpp"

namespace vramkit::mr {
namespace {

// No growth slack: growth remaps whenever free space allows, the case the stress tests are about.
vmm_pool_options without_slack() {
  vmm_pool_options o;
  o.growth_slack = 0;
  return o;
}

using sim_vmm = vramkit::testing::sim_stack<vramkit::testing::vmm_pool>;

TEST(VmmPoolResource, GrowsOneSegmentInPlace) {
  sim_vmm s;
  std::vector<void*> blocks;
  blocks.reserve(5);
  for (int i = 0; i < 5; ++i) blocks.push_back(s.pool->allocate(7 * MiB, 256, s.a));
  EXPECT_EQ(s.pool->segment_count(), 1u);  // one contiguous run of mapped granules
  for (int i = 1; i < 5; ++i) {
    EXPECT_EQ(static_cast<char*>(blocks[i]), static_cast<char*>(blocks[i - 1]) + 7 * MiB);
  }
  EXPECT_EQ(s.pool->reserved_bytes(), 36 * MiB);  // 35 MiB in 2 MiB granules
  for (void* p : blocks) s.pool->deallocate(p, 7 * MiB, 256, s.a);
  EXPECT_EQ(s.pool->report().vmm.granules_remapped, 0u);
}

TEST(VmmPoolResource, ReusesAFreedBlockWithoutMapping) {
  sim_vmm s;
  void* p = s.pool->allocate(3 * MiB, 256, s.a);
  s.pool->deallocate(p, 3 * MiB, 256, s.a);
  const auto maps = s.pool->report().vmm.granules_mapped;
  void* q = s.pool->allocate(3 * MiB, 256, s.a);
  EXPECT_EQ(q, p);
  EXPECT_EQ(s.pool->report().vmm.granules_mapped, maps);
  s.pool->deallocate(q, 3 * MiB, 256, s.a);
}

TEST(VmmPoolResource, RemapsFreeFragmentsInsteadOfReservingMore) {
  sim_vmm s;
  // Ten 4 MiB blocks, every other one freed: 20 MiB free in 4 MiB holes between live blocks.
  std::vector<void*> blocks;
  for (int i = 0; i < 10; ++i) {
    blocks.push_back(s.pool->allocate(4 * MiB, 256, s.a));
    std::memset(blocks.back(), i + 1, 4 * MiB);
  }
  for (int i = 0; i < 10; i += 2) s.pool->deallocate(blocks[i], 4 * MiB, 256, s.a);
  const std::size_t before = s.pool->reserved_bytes();
  void* big = s.pool->allocate(16 * MiB, 256, s.a);  // fits no hole
  std::memset(big, 0x5A, 16 * MiB);
  EXPECT_EQ(s.pool->reserved_bytes(), before);  // no new physical memory
  EXPECT_EQ(s.pool->report().vmm.granules_remapped, 8u);
  EXPECT_GE(s.pool->report().vmm.defragmentations, 1u);
  for (int i = 1; i < 10; i += 2) {  // live blocks kept their bytes
    const auto* c = static_cast<const unsigned char*>(blocks[i]);
    for (std::size_t k = 0; k < 4 * MiB; k += 4096) ASSERT_EQ(c[k], i + 1);
  }
  s.pool->deallocate(big, 16 * MiB, 256, s.a);
  for (int i = 1; i < 10; i += 2) s.pool->deallocate(blocks[i], 4 * MiB, 256, s.a);
  EXPECT_EQ(s.pool->trim(), before);
}

// Within growth_slack of the most ever allocated, growth creates granules rather than remapping
// free ones (a remap costs an unmap and a map each time a repeated step needs it); past it, it
// remaps. The same fragmented pool as above: 40 MiB allocated at most, 20 MiB live in 4 MiB
// pieces, then 16 MiB more: 56 MiB is past 1.25 x 40 MiB and within 1.5 x 40 MiB.
TEST(VmmPoolResource, GrowthSlackCreatesInsteadOfRemappingUpToItsBound) {
  for (const double slack : {0.0, 0.25, 0.5}) {
    SCOPED_TRACE(slack);
    vmm_pool_options o;
    o.growth_slack = slack;
    sim_vmm s(o);
    std::vector<void*> blocks;
    blocks.reserve(10);
    for (int i = 0; i < 10; ++i) blocks.push_back(s.pool->allocate(4 * MiB, 256, s.a));
    for (int i = 0; i < 10; i += 2) s.pool->deallocate(blocks[i], 4 * MiB, 256, s.a);
    void* big = s.pool->allocate(16 * MiB, 256, s.a);
    std::memset(big, 0x5A, 16 * MiB);
    const bool creates = slack == 0.5;
    EXPECT_EQ(s.pool->reserved_bytes(), (creates ? 56 : 40) * MiB);
    EXPECT_EQ(s.pool->report().vmm.granules_remapped, creates ? 0u : 8u);
    s.pool->deallocate(big, 16 * MiB, 256, s.a);
    for (int i = 1; i < 10; i += 2) s.pool->deallocate(blocks[i], 4 * MiB, 256, s.a);
  }
  vmm_pool_options bad;
  bad.growth_slack = -0.1;
  EXPECT_THROW(sim_vmm{bad}, logic_error);
}

// trim() restarts the slack's reference: a small workload after a large one (and a trim between
// them, as torch.cuda.empty_cache) remaps as if it ran alone, instead of growing by the slack of
// the large one's high mark.
TEST(VmmPoolResource, TrimRestartsTheGrowthSlack) {
  sim_vmm s;  // default slack, 2%
  void* big = s.pool->allocate(400 * MiB, 256, s.a);
  s.pool->deallocate(big, 400 * MiB, 256, s.a);
  s.pool->trim();
  std::vector<void*> blocks;
  blocks.reserve(10);
  for (int i = 0; i < 10; ++i) blocks.push_back(s.pool->allocate(4 * MiB, 256, s.a));
  for (int i = 0; i < 10; i += 2) s.pool->deallocate(blocks[i], 4 * MiB, 256, s.a);
  void* more = s.pool->allocate(16 * MiB, 256, s.a);  // 56 MiB is past 1.02 x 40 MiB: remaps
  EXPECT_EQ(s.pool->reserved_bytes(), 40 * MiB);
  EXPECT_GT(s.pool->report().vmm.granules_remapped, 0u);
  s.pool->deallocate(more, 16 * MiB, 256, s.a);
  for (int i = 1; i < 10; i += 2) s.pool->deallocate(blocks[i], 4 * MiB, 256, s.a);
}

TEST(VmmPoolResource, TrimReturnsEveryGranule) {
  sim_vmm s;
  void* p = s.pool->allocate(100, 256, s.a);
  void* q = s.pool->allocate(30 * MiB, 256, s.b);
  s.pool->deallocate(p, 100, 256, s.a);
  EXPECT_GT(s.pool->trim(), 0u);  // the small granule goes; q's stay
  EXPECT_EQ(s.pool->mapped_granules(), 15u);
  s.pool->deallocate(q, 30 * MiB, 256, s.b);
  EXPECT_EQ(s.pool->trim(), 30 * MiB);
  EXPECT_EQ(s.pool->mapped_granules(), 0u);
  EXPECT_EQ(s.pool->cached_granules(), 0u);
  EXPECT_EQ(s.pool->reserved_bytes(), 0u);
  EXPECT_EQ(s.pool->segment_count(), 0u);
  EXPECT_EQ(s.dev->counters().physical_bytes, 0u);
  EXPECT_EQ(s.dev->counters().mapped_bytes, 0u);
  const pool_report r = s.pool->report();
  EXPECT_EQ(r.reserved_bytes.all.current, 0);
  EXPECT_EQ(r.vmm.physical_creates, r.vmm.physical_releases);
}

TEST(VmmPoolResource, MaximumCapsPhysicalMemoryWithTheSummaryInTheError) {
  vmm_pool_options o;
  o.maximum_size = 16 * MiB;
  sim_vmm s(o);
  void* p = s.pool->allocate(10 * MiB, 256, s.a);
  try {
    (void)s.pool->allocate(10 * MiB, 256, s.a);
    FAIL() << "expected out_of_memory";
  } catch (const out_of_memory& e) {
    EXPECT_NE(std::string(e.what()).find("maximum_size"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("vmm_pool(host_sim)"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("granules mapped"), std::string::npos);
  }
  void* q = s.pool->allocate(6 * MiB, 256, s.a);  // still within the cap
  EXPECT_LE(s.pool->reserved_bytes(), 16 * MiB);
  s.pool->deallocate(q, 6 * MiB, 256, s.a);
  s.pool->deallocate(p, 10 * MiB, 256, s.a);
  EXPECT_EQ(s.pool->report().out_of_memory_errors, 1u);
}

TEST(VmmPoolResource, DeviceFullRemapsAndThenFailsCleanly) {
  sim_vmm s({}, {.device_memory_bytes = 32 * MiB});
  void* p = s.pool->allocate(12 * MiB, 256, s.a);
  void* q = s.pool->allocate(12 * MiB, 256, s.b);
  s.pool->deallocate(p, 12 * MiB, 256, s.a);
  void* r = s.pool->allocate(18 * MiB, 256, s.b);  // needs p's granules, freed on another stream
  EXPECT_LE(s.pool->reserved_bytes(), 32 * MiB);
  EXPECT_THROW((void)s.pool->allocate(8 * MiB, 256, s.a), out_of_memory);
  s.pool->deallocate(q, 12 * MiB, 256, s.b);
  s.pool->deallocate(r, 18 * MiB, 256, s.b);
  s.pool->trim();
  EXPECT_EQ(s.dev->counters().device_bytes_in_use, 0u);
}

TEST(VmmPoolResource, InjectedCreateFailureIsRetriedOnceThenReported) {
  auto dev = std::make_shared<vramkit::testing::fault_injecting_device>(
      std::make_shared<host_sim_device>());
  vmm_pool_resource pool(dev);
  dev->fail_nth(vramkit::testing::fault_kind::allocation, 1);
  void* p = pool.allocate(3 * MiB, 256, {});  // the OOM ladder trims and retries
  EXPECT_EQ(pool.report().upstream_failures, 1u);
  EXPECT_EQ(dev->counters().injected_failures, 1u);
  std::memset(p, 1, 3 * MiB);
  pool.deallocate(p, 3 * MiB, 256, {});
  EXPECT_EQ(pool.trim(), 4 * MiB);
}

TEST(VmmPoolResource, SummaryShowsTheMappingWork) {
  sim_vmm s;
  void* p = s.pool->allocate(5 * MiB, 256, s.a);
  const std::string text = memory_summary(*s.pool);
  EXPECT_NE(text.find("granules mapped / unmapped: 3 / 0"), std::string::npos) << text;
  const std::string json = memory_stats_json(*s.pool);
  EXPECT_NE(json.find("\"vmm.granules_mapped\":3"), std::string::npos) << json;
  s.pool->deallocate(p, 5 * MiB, 256, s.a);
}

// Shadow-model stress: sizes of a varying-sequence-length workload on several streams; every
// live block carries a tag at each granule boundary and at both ends, checked after every
// operation that may have remapped (growth), so a granule unmapped under a live block or a
// block handed out twice shows up as a wrong byte.
void vmm_stress(int streams, std::uint32_t seed, std::size_t capacity) {
  auto dev = std::make_shared<host_sim_device>(host_sim_options{.device_memory_bytes = capacity});
  auto ss = vramkit::testing::make_streams(*dev, streams);
  auto pool = std::make_shared<vmm_pool_resource>(dev, without_slack());
  statistics_adaptor stats(pool);
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> coin(0, 99);
  vramkit::testing::shadow_model model;
  auto touch_points = [](std::size_t n) {
    std::vector<std::size_t> at{0, n - 1};
    for (std::size_t k = 2 * MiB - 1; k < n; k += 2 * MiB) at.push_back(k);
    return at;
  };
  auto check_all = [&] {
    for (auto& [a, l] : model.blocks) {
      const auto* c = static_cast<const unsigned char*>(vramkit::testing::as_ptr(a));
      for (std::size_t k : touch_points(l.bytes)) ASSERT_EQ(c[k], l.tag) << "offset " << k;
    }
  };
  const int ops = 1500 * vramkit::testing::stress_scale();
  for (int op = 0; op < ops; ++op) {
    const bool alloc = model.blocks.empty() || coin(rng) < 52;
    if (alloc) {
      // A sequence length per "step" scales activations, as in training with varying lengths.
      const std::size_t seq = 1 + rng() % 16;
      const std::size_t n =
          coin(rng) < 60 ? 1 + rng() % (64 * KiB) : seq * (256 * KiB + rng() % (1 * MiB));
      const int st = static_cast<int>(rng() % streams);
      const std::uint64_t maps_before = pool->report().vmm.granules_mapped;
      void* p = nullptr;
      try {
        p = stats.allocate(n, 256, *ss[st]);
      } catch (const out_of_memory&) {
        continue;  // the simulated device is full: a valid outcome under this capacity
      }
      const auto tag = static_cast<unsigned char>(op | 1);
      ASSERT_NO_FATAL_FAILURE(model.add(p, n, st, tag));
      for (std::size_t k : touch_points(n)) static_cast<unsigned char*>(p)[k] = tag;
      if (pool->report().vmm.granules_mapped != maps_before) check_all();
    } else {
      auto it = model.pick(rng);
      const int st = coin(rng) < 80 ? it->second.stream : static_cast<int>(rng() % streams);
      stats.deallocate(vramkit::testing::as_ptr(it->first), it->second.bytes, 256, *ss[st]);
      model.erase(it);
    }
    ASSERT_EQ(pool->report().requested_bytes.all.current, model.bytes);
    ASSERT_LE(pool->reserved_bytes(), capacity);
  }
  check_all();
  for (auto& [a, l] : model.blocks)
    stats.deallocate(vramkit::testing::as_ptr(a), l.bytes, 256, *ss[l.stream]);
  const std::size_t reserved = pool->reserved_bytes();
  EXPECT_EQ(pool->trim(), reserved);
  EXPECT_EQ(pool->mapped_granules(), 0u);
  EXPECT_EQ(pool->cached_granules(), 0u);
  EXPECT_EQ(dev->counters().physical_bytes, 0u);
  EXPECT_EQ(dev->counters().device_bytes_in_use, 0u);
}

TEST(VmmPoolResourceStress, OneStreamKeepsEveryByteAcrossRemaps) {
  vmm_stress(1, 21, std::size_t{8} << 30);
}

TEST(VmmPoolResourceStress, FourStreamsNearCapacityKeepEveryByte) { vmm_stress(4, 22, 192 * MiB); }

TEST(VmmPoolResourceStress, ThreadsOnSeveralStreamsNeverShareALiveBlock) {
  auto dev = std::make_shared<host_sim_device>(host_sim_options{.device_memory_bytes = 256 * MiB});
  constexpr int threads = 4;
  auto ss = vramkit::testing::make_streams(*dev, threads + 1);
  auto pool = std::make_shared<vmm_pool_resource>(dev, without_slack());
  EXPECT_EQ(vramkit::testing::run_thread_stress(*dev, *pool, ss, threads,
                                                {.seed = 200,
                                                 .ops = 300 * vramkit::testing::stress_scale(),
                                                 .large = 6 * MiB,
                                                 .stride = 4096,
                                                 .trim_every = 97}),
            0);
  EXPECT_EQ(pool->allocated_bytes(), 0u);
  pool->trim();
  EXPECT_EQ(pool->reserved_bytes(), 0u);
  EXPECT_EQ(dev->counters().physical_bytes, 0u);
}

}  // namespace
}  // namespace vramkit::mr
