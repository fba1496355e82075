// The residency manager under random device faults: allocations, copies and events fail at
// random points inside acquire() and prefetch() while 24 buffers cycle through a budget of 4.
// A failure reaches the caller as a typed error; afterwards every buffer still holds exactly the
// bytes written to it (checked on the device and through host_data), and nothing stays allocated.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <random>
#include <vector>

#include "tier_test_support.hpp"
#include "vramkit/core/error.hpp"
#include "vramkit/core/testing/fault_injecting_device.hpp"
#include "vramkit/tier/residency_manager.hpp"

namespace vramkit::tier {
namespace {

using vramkit::testing::fault_injecting_device;
using vramkit::testing::fault_kind;

// Regression: a copy or event that failed inside acquire()/prefetch() used to leave the buffer
// marked resident with a device copy that was never filled (or a `ready` event never recorded),
// which the next acquire trusted (5,701 stale reads, host_data wrong afterwards); a failed record
// in release() left a use event that an eviction then skipped. Faults now also hit release().
TEST(TierFaults, EveryByteSurvivesRandomFaultsOverManyEvictionsAndPrefetches) {
  host_sim_options fast;
  fast.device_memory_bytes = 64 * MiB;
  testing::sim_setup sim(fast);
  auto dev = std::make_shared<fault_injecting_device>(sim.device);
  constexpr std::size_t n_buffers = 24, bytes = 1024;
  std::mt19937 rng(2026);
  std::size_t typed_failures = 0;
  {
    mr::device_api_resource device_memory(dev, mr::memory_kind::device,
                                          mr::allocation_mode::stream_ordered);
    mr::device_api_resource pinned(dev, mr::memory_kind::pinned_host);
    residency_options o;
    o.device_budget_bytes = 4 * bytes;
    o.record_trace = false;
    o.measure_stream_wait = false;
    residency_manager m(*dev, device_memory, pinned, o);
    std::vector<tiered_buffer> h;
    std::vector<std::vector<std::uint8_t>> shadow(n_buffers, std::vector<std::uint8_t>(bytes));
    for (std::size_t b = 0; b < n_buffers; ++b) {
      h.push_back(m.create(bytes));
      auto* p = static_cast<std::uint8_t*>(m.host_data(h[b], access_mode::write));
      for (std::size_t i = 0; i < bytes; ++i)
        shadow[b][i] = p[i] = static_cast<std::uint8_t>(b * 7 + i);
    }
    owned_stream s(*dev);
    std::atomic<int> stale{0};
    std::uint64_t moves = 0;
    for (int step = 0; moves < 100000 && step < 400000; ++step) {
      const std::size_t b = rng() % n_buffers;
      if (rng() % 16 == 0) dev->fail_nth(static_cast<fault_kind>(rng() % 3), 1 + rng() % 4);
      const unsigned op = rng() % 8;
      try {
        if (op == 0) {
          m.prefetch(h[(b + 5) % n_buffers], s);
          dev->disarm();
          continue;
        }
        const access_mode access = op < 5 ? access_mode::read : access_mode::read_write;
        auto* d = static_cast<std::uint8_t*>(m.acquire(h[b], s, access));
        dev->disarm();
        if (access == access_mode::read) {
          if (step % 8 == 0) {
            dev->launch_host_func(s, [d, expected = shadow[b], &stale] {
              if (std::memcmp(d, expected.data(), expected.size()) != 0) ++stale;
            });
          }
        } else {
          const auto add = static_cast<std::uint8_t>(1 + rng() % 200);
          dev->launch_host_func(s, [d, add] {
            for (std::size_t i = 0; i < bytes; ++i) d[i] = static_cast<std::uint8_t>(d[i] + add);
          });
          for (auto& v : shadow[b]) v = static_cast<std::uint8_t>(v + add);
        }
        if (rng() % 16 == 0) dev->fail_nth(fault_kind::event, 1 + rng() % 2);
        try {
          m.release(h[b], s);
        } catch (const cuda_error&) {
          // The acquire stays open (state unchanged): releasing again must work.
          ++typed_failures;
          dev->disarm();
          m.release(h[b], s);
        }
      } catch (const out_of_memory&) {
        ++typed_failures;
      } catch (const cuda_error&) {
        ++typed_failures;
      }
      dev->disarm();
      if (step % 1024 == 0) {
        const auto st = m.stats();
        moves = st.evictions + st.prefetches;
      }
    }
    dev->disarm();
    dev->synchronize(s);
    const auto st = m.stats();
    EXPECT_GE(st.evictions + st.prefetches, 100000U);
    EXPECT_GT(typed_failures, 100U);
    EXPECT_EQ(stale.load(), 0) << "a stream read bytes that were not the buffer's";
    for (std::size_t b = 0; b < n_buffers; ++b) {
      const auto* p = static_cast<const std::uint8_t*>(m.host_data(h[b]));
      ASSERT_EQ(0, std::memcmp(p, shadow[b].data(), bytes)) << "buffer " << b << " lost bytes";
    }
    for (auto& buf : h) m.destroy(buf);
  }
  EXPECT_EQ(sim.device->counters().device_bytes_in_use, 0U) << "device bytes left allocated";
}

}  // namespace
}  // namespace vramkit::tier
