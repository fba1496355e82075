// pinned_host_pool: size classes, reuse gated by the free event, the byte cap, trim, misuse.
#include "vramkit/mr/pinned_host_pool.hpp"

#include <gtest/gtest.h>

#include "mr_test_support.hpp"
#include "vramkit/core/error.hpp"
#include "vramkit/core/host_sim_device.hpp"
#include "vramkit/mr/device_api_resource.hpp"

namespace vramkit::mr {
namespace {

struct fixture {
  explicit fixture(pinned_pool_options o = {})
      : dev(std::make_shared<host_sim_device>()),
        copy(*dev),
        pool(std::make_shared<device_api_resource>(dev, memory_kind::pinned_host), dev, o) {}
  std::shared_ptr<host_sim_device> dev;
  owned_stream copy;
  pinned_host_pool pool;
};

TEST(PinnedHostPool, SizeClassesArePowersOfTwoThenMultiplesOfTwoMiB) {
  fixture f;
  EXPECT_EQ(f.pool.class_size(1), 512u);
  EXPECT_EQ(f.pool.class_size(513), 1024u);
  EXPECT_EQ(f.pool.class_size(3 * MiB), 4 * MiB);
  EXPECT_EQ(f.pool.class_size(4 * MiB + 1), 6 * MiB);
  EXPECT_EQ(f.pool.kind(), memory_kind::pinned_host);
}

TEST(PinnedHostPool, ReusesABlockOnlyAfterItsCopyStreamPassedTheFree) {
  fixture f;
  vramkit::testing::gate hold;
  void* p = f.pool.allocate(1 * MiB);
  f.dev->launch_host_func(f.copy, [&] { hold.wait(); });  // a copy still reading p
  f.pool.deallocate(p, 1 * MiB, 256, f.copy);
  void* q = f.pool.allocate(1 * MiB);
  EXPECT_NE(q, p);  // p's free event has not completed
  hold.open();
  f.dev->synchronize(f.copy);
  void* r = f.pool.allocate(1 * MiB);
  EXPECT_EQ(r, p);
  const pool_report rep = f.pool.report();
  EXPECT_EQ(rep.upstream_allocations, 2u);
  f.pool.deallocate(q, 1 * MiB);
  f.pool.deallocate(r, 1 * MiB);
  EXPECT_EQ(f.pool.cached_bytes(), 2 * MiB);
  EXPECT_EQ(f.pool.trim(), 2 * MiB);
  EXPECT_EQ(f.pool.cached_bytes(), 0u);
}

TEST(PinnedHostPool, ByteCapEvictsCachedBlocksThenThrowsWithTheSummary) {
  pinned_pool_options o;
  o.byte_cap = 8 * MiB;
  fixture f(o);
  void* a = f.pool.allocate(4 * MiB);
  void* b = f.pool.allocate(2 * MiB);
  f.pool.deallocate(b, 2 * MiB);
  void* c = f.pool.allocate(4 * MiB);  // evicts the cached 2 MiB block to fit
  EXPECT_EQ(f.pool.cached_bytes(), 0u);
  try {
    (void)f.pool.allocate(1 * MiB);
    FAIL() << "expected out_of_memory";
  } catch (const out_of_memory& e) {
    EXPECT_NE(std::string(e.what()).find("byte cap"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("vramkit memory summary"), std::string::npos);
  }
  f.pool.deallocate(a, 4 * MiB);
  f.pool.deallocate(c, 4 * MiB);
}

TEST(PinnedHostPool, ReportsForeignPointersAndWrongSizes) {
  fixture f;
  void* p = f.pool.allocate(1000);
  int x = 0;
  f.pool.deallocate(&x, 4);
  f.pool.deallocate(p, 1 * MiB);
  EXPECT_EQ(f.pool.report().misuse_reports, 2u);
  f.pool.deallocate(p, 1000);
  EXPECT_EQ(f.pool.report().allocations.all.current, 0);
}

}  // namespace
}  // namespace vramkit::mr
