// pool_resource on real CUDA memory: randomized multi-stream stress with kernels writing each block
// on its stream and checking it at its free, and cross-stream reuse ordered by the event wait.
// Skips without a GPU unless VRAMKIT_REQUIRE_GPU=1, where it fails instead.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <random>

#include "block_kernels.hpp"
#include "vramkit/core/cuda_device_api.hpp"
#include "vramkit/core/units.hpp"
#include "vramkit/mr/cuda_async_resource.hpp"
#include "vramkit/mr/cuda_device_resource.hpp"
#include "vramkit/mr/pool_resource.hpp"
#include "vramkit/mr/vmm_pool_resource.hpp"

namespace vramkit::mr {
namespace {

std::shared_ptr<device_api> gpu_or_skip() {
  auto api = cuda_device_api();
  if (!api) {
    const char* req = std::getenv("VRAMKIT_REQUIRE_GPU");
    if (req != nullptr && std::string(req) == "1") {
      ADD_FAILURE() << "VRAMKIT_REQUIRE_GPU=1 but " << api.error().reason;
    }
    return nullptr;
  }
  return *api;
}

#define VRAMKIT_GPU_OR_SKIP(api)                                                   \
  auto api = gpu_or_skip();                                                        \
  if (!api) {                                                                      \
    if (::testing::Test::HasFailure()) return;                                     \
    GTEST_SKIP() << "no usable CUDA device: " << cuda_device_api().error().reason; \
  }

struct counter {
  explicit counter(device_api& api) : api(api) {
    p = static_cast<unsigned long long*>(api.allocate_device(sizeof(unsigned long long)));
    api.fill_async(p, 0, sizeof *p, {});
    api.synchronize({});
  }
  ~counter() { api.free_device(p); }
  unsigned long long read() {
    unsigned long long v = 0;
    api.copy_async(&v, p, sizeof v, copy_kind::device_to_host, {});
    api.synchronize_device();
    return v;
  }
  device_api& api;
  unsigned long long* p = nullptr;
};

// Runs the stress on `pool`; after every allocation that remapped granules (vmm pools), every live
// block is checked by a kernel on its stream.
template <typename Pool>
void stress_pool(const std::shared_ptr<device_api>& api, const std::shared_ptr<Pool>& pool);

void stress(const std::shared_ptr<device_api>& api, std::shared_ptr<memory_resource> upstream) {
  stress_pool(api, std::make_shared<pool_resource>(std::move(upstream), api));
}

template <typename Pool>
void stress_pool(const std::shared_ptr<device_api>& api, const std::shared_ptr<Pool>& pool) {
  std::vector<std::unique_ptr<owned_stream>> streams;
  for (int i = 0; i < 4; ++i) streams.push_back(std::make_unique<owned_stream>(*api));
  counter bad(*api);
  std::mt19937 rng(5);
  struct live {
    void* p;
    std::size_t n;
    int st;
    std::uint32_t v;
  };
  std::vector<live> blocks;
  std::map<std::uintptr_t, std::size_t> spans;
  for (int op = 0; op < 4000; ++op) {
    if (blocks.size() < 200 && (blocks.empty() || rng() % 100 < 55)) {
      const std::size_t n = rng() % 10 < 8 ? 4 + rng() % (1 * MiB) : 1 * MiB + rng() % (48 * MiB);
      const int st = static_cast<int>(rng() % streams.size());
      const std::uint64_t remaps_before = pool->report().vmm.granules_remapped;
      void* p = pool->allocate(n, 256, *streams[st]);
      if (pool->report().vmm.granules_remapped != remaps_before) {
        for (const live& b : blocks) {
          testing::launch_count_mismatches(b.p, b.n, b.v, bad.p, streams[b.st]->view().handle);
        }
      }
      const auto a = reinterpret_cast<std::uintptr_t>(p);
      ASSERT_EQ(a % 256, 0u);
      auto next = spans.lower_bound(a);
      if (next != spans.end()) {
        ASSERT_LE(a + n, next->first);
      }
      if (next != spans.begin()) {
        ASSERT_LE(std::prev(next)->first + std::prev(next)->second, a);
      }
      spans.emplace(a, n);
      const auto v = static_cast<std::uint32_t>(0x9E3779B9u * (op + 1));
      testing::launch_fill_words(p, n, v, streams[st]->view().handle);
      ASSERT_EQ(testing::last_launch_error(), 0);
      blocks.push_back({p, n, st, v});
    } else {
      const std::size_t i = rng() % blocks.size();
      live b = blocks[i];
      blocks.erase(blocks.begin() + static_cast<std::ptrdiff_t>(i));
      testing::launch_count_mismatches(b.p, b.n, b.v, bad.p, streams[b.st]->view().handle);
      ASSERT_EQ(testing::last_launch_error(), 0);
      // Free on the stream that used it, or hand it to another stream (which then owns the order).
      int st = b.st;
      if (rng() % 5 == 0) {
        st = static_cast<int>(rng() % streams.size());
        owned_event e(*api);
        api->record_event(e, *streams[b.st]);
        api->stream_wait_event(*streams[st], e);
      }
      pool->deallocate(b.p, b.n, 256, *streams[st]);
      spans.erase(reinterpret_cast<std::uintptr_t>(b.p));
    }
  }
  for (auto& b : blocks) {
    testing::launch_count_mismatches(b.p, b.n, b.v, bad.p, streams[b.st]->view().handle);
    pool->deallocate(b.p, b.n, 256, *streams[b.st]);
  }
  api->synchronize_device();
  EXPECT_EQ(bad.read(), 0u) << "a live block was overwritten";
  EXPECT_GT(pool->report().cross_stream_waits, 0u);
  const std::size_t reserved = pool->reserved_bytes();
  EXPECT_EQ(pool->trim(), reserved);
}

TEST(PoolResourceGpu, StressOverCudaMallocAsyncKeepsEveryBlockIntact) {
  VRAMKIT_GPU_OR_SKIP(api);
  stress(api, std::make_shared<cuda_async_resource>());
}

TEST(VmmPoolResourceGpu, StressOnRealVirtualMemoryKeepsEveryBlockIntactAcrossRemaps) {
  VRAMKIT_GPU_OR_SKIP(api);
  if (api->vmm_granularity() == 0) GTEST_SKIP() << "device without virtual memory management";
  vmm_pool_options o;
  o.maximum_size = 6 * GiB;  // tight enough that growth remaps free granules
  o.growth_slack = 0;        // and remap whenever there is free space to remap
  auto pool = std::make_shared<vmm_pool_resource>(api, o);
  stress_pool(api, pool);
  EXPECT_GT(pool->report().vmm.granules_remapped, 0u);
  EXPECT_EQ(pool->mapped_granules(), 0u);
  EXPECT_EQ(pool->cached_granules(), 0u);
}

TEST(PoolResourceGpu, StressOverCudaMallocKeepsEveryBlockIntact) {
  VRAMKIT_GPU_OR_SKIP(api);
  stress(api, std::make_shared<cuda_device_resource>());
}

TEST(PoolResourceGpu, BlockReusedOnAnotherStreamWaitsForTheFreeingStreamsWork) {
  VRAMKIT_GPU_OR_SKIP(api);
  auto pool = std::make_shared<pool_resource>(std::make_shared<cuda_async_resource>(), api);
  owned_stream a(*api);
  owned_stream b(*api);
  counter bad(*api);
  const std::size_t n = 1 * MiB;
  void* p = pool->allocate(n, 256, b);
  // b is busy for ~50 ms and then writes 1s; the block is freed on b behind that work.
  testing::launch_spin_then_fill(p, n, 1u, 100'000'000LL, b.view().handle);
  pool->deallocate(p, n, 256, b);
  void* q = pool->allocate(n, 256, a);
  ASSERT_EQ(q, p);
  // Without the event wait a's write of 2s would run first and be overwritten by b's 1s.
  testing::launch_fill_words(q, n, 2u, a.view().handle);
  testing::launch_count_mismatches(q, n, 2u, bad.p, a.view().handle);
  ASSERT_EQ(testing::last_launch_error(), 0);
  api->synchronize_device();
  EXPECT_EQ(bad.read(), 0u);
  pool->deallocate(q, n, 256, a);
}

}  // namespace
}  // namespace vramkit::mr
