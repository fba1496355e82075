// What both stream-ordered pools (pool_resource over the simulated device, vmm_pool_resource on its
// virtual memory) must do alike, as one typed suite: misuse reported without damage, and a block
// freed on a stream still at work never used by another stream before that work ends.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>

#include "mr_test_support.hpp"
#include "vramkit/mr/pool_resource.hpp"
#include "vramkit/mr/vmm_pool_resource.hpp"

namespace vramkit::mr {
namespace {

using vramkit::testing::classic_pool;
using vramkit::testing::gate;
using vramkit::testing::sim_stack;
using vramkit::testing::vmm_pool;

template <class Kind>
// NOLINTNEXTLINE(readability-identifier-naming): gtest's style
class StreamOrderedPool : public ::testing::Test {};
using kinds = ::testing::Types<classic_pool, vmm_pool>;
TYPED_TEST_SUITE(StreamOrderedPool, kinds);

TYPED_TEST(StreamOrderedPool, ReportsForeignPointersWrongSizesAndDoubleFreesWithoutDamage) {
  std::vector<misuse_report> seen;
  typename TypeParam::options o;
  o.on_misuse = [&](const misuse_report& r) { seen.push_back(r); };
  sim_stack<TypeParam> s(o);
  void* p = s.pool->allocate(4096, 256, s.a);
  int local = 0;
  s.pool->deallocate(&local, 4, 256, s.a);
  s.pool->deallocate(p, 100000, 256, s.a);
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].kind, misuse_report::kind_t::foreign_pointer);
  EXPECT_EQ(seen[1].kind, misuse_report::kind_t::wrong_size);
  EXPECT_EQ(seen[1].expected_bytes, 4096u);
  EXPECT_NE(seen[1].message().find("4096"), std::string::npos);
  EXPECT_EQ(s.pool->report().allocated_bytes.all.current,
            4096);  // still allocated: nothing corrupted
  s.pool->deallocate(p, 4096, 256, s.a);
  s.pool->deallocate(p, 4096, 256, s.a);  // double free
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[2].kind, misuse_report::kind_t::foreign_pointer);
  EXPECT_EQ(s.pool->report().misuse_reports, 3u);
  EXPECT_EQ(s.pool->report().allocated_bytes.all.current, 0);
}

TYPED_TEST(StreamOrderedPool, BlockFreedOnAHeldStreamIsNotUsedOnAnotherBeforeItsWorkEnds) {
  sim_stack<TypeParam> s;
  gate hold;
  std::atomic<bool> b_done{false};
  std::atomic<bool> a_saw_b_done{false};
  void* p = s.pool->allocate(4096, 256, s.b);
  // Stream b still "uses" p until the gate opens; then it frees it in stream order.
  s.dev->launch_host_func(s.b, [&] {
    hold.wait();
    std::memset(p, 0x11, 4096);
    b_done = true;
  });
  s.pool->deallocate(p, 4096, 256, s.b);
  void* q = s.pool->allocate(4096, 256, s.a);  // nothing free on a: takes b's block
  ASSERT_EQ(q, p);
  s.dev->launch_host_func(s.a, [&] {
    a_saw_b_done = b_done.load();
    std::memset(q, 0x22, 4096);
  });
  owned_event after_a(*s.dev);
  s.dev->record_event(after_a, s.a);
  EXPECT_FALSE(s.dev->event_done(after_a));  // a waits for b, which waits for the gate
  hold.open();
  s.dev->synchronize(s.a);
  EXPECT_TRUE(a_saw_b_done.load());
  EXPECT_EQ(static_cast<unsigned char*>(q)[4095], 0x22);
  EXPECT_EQ(s.pool->report().cross_stream_waits, 1u);
  s.pool->deallocate(q, 4096, 256, s.a);
}

}  // namespace
}  // namespace vramkit::mr
