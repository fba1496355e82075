// One typed suite that every resource working on the CPU must pass: zero-byte requests, alignment,
// no overlap, writable memory, stream-ordered reuse on one stream, names and summaries.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <random>

#include "vramkit/core/host_sim_device.hpp"
#include "vramkit/mr/device_api_resource.hpp"
#include "vramkit/mr/host_resource.hpp"
#include "vramkit/mr/limit_adaptor.hpp"
#include "vramkit/mr/managed_resource.hpp"
#include "vramkit/mr/memory_summary.hpp"
#include "vramkit/mr/pinned_host_pool.hpp"
#include "vramkit/mr/pool_resource.hpp"
#include "vramkit/mr/statistics_adaptor.hpp"
#include "vramkit/mr/tracing_adaptor.hpp"
#include "vramkit/mr/vmm_pool_resource.hpp"

namespace vramkit::mr {
namespace {

// Members are destroyed in reverse: the resource first, then the stream it may still order work
// on, then the device (streams passed to deallocate must outlive the resource).
struct stack {
  std::shared_ptr<host_sim_device> dev = std::make_shared<host_sim_device>();
  std::unique_ptr<owned_stream> stream = std::make_unique<owned_stream>(*dev);
  std::shared_ptr<memory_resource> top;
};

std::shared_ptr<pool_resource> sim_pool(const std::shared_ptr<host_sim_device>& dev) {
  return std::make_shared<pool_resource>(std::make_shared<device_api_resource>(dev), dev);
}

// The resources under test, each built on the stack's simulated device.
using device_ptr = const std::shared_ptr<host_sim_device>&;
using resource_ptr = std::shared_ptr<memory_resource>;
resource_ptr host(device_ptr) { return std::make_shared<host_resource>(); }
resource_ptr sim_device(device_ptr dev) { return std::make_shared<device_api_resource>(dev); }
resource_ptr sim_async(device_ptr dev) {
  return std::make_shared<device_api_resource>(dev, memory_kind::device,
                                               allocation_mode::stream_ordered);
}
resource_ptr sim_managed(device_ptr dev) { return std::make_shared<managed_resource>(dev); }
resource_ptr pool(device_ptr dev) { return sim_pool(dev); }
resource_ptr statistics(device_ptr dev) {
  return std::make_shared<statistics_adaptor>(sim_pool(dev));
}
resource_ptr limit(device_ptr dev) {
  return std::make_shared<limit_adaptor>(sim_pool(dev), 1 * GiB);
}
resource_ptr tracing(device_ptr dev) { return std::make_shared<tracing_adaptor>(sim_pool(dev)); }
resource_ptr pinned_pool(device_ptr dev) {
  return std::make_shared<pinned_host_pool>(
      std::make_shared<device_api_resource>(dev, memory_kind::pinned_host), dev);
}
resource_ptr vmm_pool(device_ptr dev) { return std::make_shared<vmm_pool_resource>(dev); }

template <resource_ptr (*Build)(device_ptr)>
struct factory {
  static stack make() {
    stack s;
    s.top = Build(s.dev);
    return s;
  }
};

template <typename Factory>
// NOLINTNEXTLINE(readability-identifier-naming): gtest's style
class ResourceConformance : public ::testing::Test {
 protected:
  stack s = Factory::make();
  memory_resource& r() { return *s.top; }
};

using factories =
    ::testing::Types<factory<host>, factory<sim_device>, factory<sim_async>, factory<sim_managed>,
                     factory<pool>, factory<statistics>, factory<limit>, factory<tracing>,
                     factory<pinned_pool>, factory<vmm_pool>>;
TYPED_TEST_SUITE(ResourceConformance, factories);

TYPED_TEST(ResourceConformance, ZeroBytesGiveNullAndFreeingNullIsANoOp) {
  EXPECT_EQ(this->r().allocate(0), nullptr);
  this->r().deallocate(nullptr, 0);
  this->r().deallocate(nullptr, 128);
}

TYPED_TEST(ResourceConformance, NamesItselfAndSummarizes) {
  EXPECT_FALSE(this->r().name().empty());
  const std::string summary = memory_summary(this->r());
  EXPECT_NE(summary.find("vramkit memory summary"), std::string::npos);
  EXPECT_TRUE(this->r().is_equal(this->r()));
}

TYPED_TEST(ResourceConformance, AlignsToTheRequestedPowerOfTwo) {
  for (std::size_t align : {std::size_t{8}, std::size_t{64}, std::size_t{256}}) {
    for (std::size_t bytes : {std::size_t{1}, std::size_t{100}, std::size_t{4096}, 3 * MiB + 7}) {
      void* p = this->r().allocate(bytes, align);
      ASSERT_NE(p, nullptr);
      EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % align, 0u) << bytes << " @" << align;
      this->r().deallocate(p, bytes, align);
    }
  }
}

TYPED_TEST(ResourceConformance, LiveAllocationsAreWritableAndDisjoint) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<std::size_t> size(1, 3 * MiB);
  std::map<std::uintptr_t, std::size_t> live;
  std::vector<std::pair<void*, std::size_t>> blocks;
  for (int i = 0; i < 60; ++i) {
    const std::size_t bytes = size(rng);
    void* p = this->r().allocate(bytes);
    ASSERT_NE(p, nullptr);
    std::memset(p, i & 0xFF, bytes);
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    auto next = live.lower_bound(a);
    if (next != live.end()) {
      ASSERT_LE(a + bytes, next->first) << "overlaps the next block";
    }
    if (next != live.begin()) {
      auto prev = std::prev(next);
      ASSERT_LE(prev->first + prev->second, a) << "overlaps the previous block";
    }
    live.emplace(a, bytes);
    blocks.emplace_back(p, bytes);
  }
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    auto* bytes = static_cast<unsigned char*>(blocks[i].first);
    ASSERT_EQ(bytes[0], i & 0xFF);
    ASSERT_EQ(bytes[blocks[i].second - 1], i & 0xFF);
  }
  for (auto& [p, n] : blocks) this->r().deallocate(p, n);
}

TYPED_TEST(ResourceConformance, AllocatesAndFreesOnAStream) {
  const stream_view stream = *this->s.stream;
  for (int round = 0; round < 3; ++round) {
    void* p = this->r().allocate(5000, 256, stream);
    ASSERT_NE(p, nullptr);
    this->r().deallocate(p, 5000, 256, stream);
  }
  this->s.dev->synchronize(stream);
}

}  // namespace
}  // namespace vramkit::mr
