#include "vramkit/core/host_sim_device.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <vector>

#include "vramkit/core/error.hpp"

namespace vramkit {
namespace {

TEST(HostSimDevice, EnforcesCapacityWithOutOfMemory) {
  host_sim_device dev({.device_memory_bytes = 1 << 20});
  void* a = dev.allocate_device(512 << 10);
  EXPECT_THROW((void)dev.allocate_device(768 << 10), out_of_memory);
  dev.free_device(a);
  void* b = dev.allocate_device(768 << 10);
  EXPECT_TRUE(dev.is_device_pointer(b));
  dev.free_device(b);
  EXPECT_EQ(dev.counters().device_bytes_in_use, 0U);
}

TEST(HostSimDevice, CopiesRunInStreamOrder) {
  host_sim_device dev({.copy_bandwidth_bytes_per_s = 1e9});
  stream_view s = dev.create_stream();
  std::vector<int> host(1 << 16), back(1 << 16, 0);
  for (std::size_t i = 0; i < host.size(); ++i) host[i] = static_cast<int>(i * 7 + 1);
  const std::size_t bytes = host.size() * sizeof(int);
  void* d = dev.allocate_device(bytes);
  dev.copy_async(d, host.data(), bytes, copy_kind::host_to_device, s);
  dev.copy_async(back.data(), d, bytes, copy_kind::device_to_host, s);
  dev.synchronize(s);
  EXPECT_EQ(host, back);
  dev.free_device(d);
  dev.destroy_stream(s);
}

TEST(HostSimDevice, StreamWaitsForEventOfAnotherStream) {
  host_sim_device dev;
  stream_view a = dev.create_stream();
  stream_view b = dev.create_stream();
  event_view e = dev.create_event();
  std::atomic<int> order{0};
  int first = -1, second = -1;
  dev.pause();
  dev.launch_host_func(a, [&] { first = order++; });
  dev.record_event(e, a);
  dev.stream_wait_event(b, e);
  dev.launch_host_func(b, [&] { second = order++; });
  EXPECT_FALSE(dev.event_done(e));
  dev.resume();
  dev.synchronize(b);
  EXPECT_TRUE(dev.event_done(e));
  EXPECT_EQ(first, 0);
  EXPECT_EQ(second, 1);
  dev.destroy_event(e);
  dev.destroy_stream(a);
  dev.destroy_stream(b);
}

TEST(HostSimDevice, UnrecordedEventIsDone) {
  host_sim_device dev;
  owned_event e(dev);
  EXPECT_TRUE(dev.event_done(e));
}

TEST(HostSimDevice, InjectedAllocationFailureThrowsOnce) {
  host_sim_device dev;
  dev.fail_allocation_after(2);
  void* a = dev.allocate_device(256);
  EXPECT_THROW((void)dev.allocate_device(256), out_of_memory);
  void* b = dev.allocate_device(256);
  dev.free_device(a);
  dev.free_device(b);
}

TEST(HostSimDevice, FailingHostFunctionSurfacesAtSynchronize) {
  host_sim_device dev;
  owned_stream s(dev);
  dev.launch_host_func(s, [] { throw std::runtime_error("user callback failed"); });
  EXPECT_THROW(dev.synchronize(s), error);
  // The stream keeps working afterwards.
  int x = 0;
  dev.launch_host_func(s, [&] { x = 1; });
  dev.synchronize(s);
  EXPECT_EQ(x, 1);
}

TEST(HostSimDevice, StreamOrderedFreeHappensAfterEarlierWork) {
  host_sim_device dev;
  owned_stream s(dev);
  void* d = dev.allocate_device_async(4096, s);
  dev.fill_async(d, 0x5a, 4096, s);
  dev.free_device_async(d, s);
  dev.synchronize(s);
  EXPECT_EQ(dev.counters().device_bytes_in_use, 0U);
}

}  // namespace
}  // namespace vramkit

namespace vramkit {
namespace {

constexpr std::size_t granule = std::size_t{2} << 20;

TEST(HostSimVirtualMemory, BytesSurviveARemapToAnotherAddress) {
  host_sim_device dev({.device_memory_bytes = 64 << 20});
  ASSERT_EQ(dev.vmm_granularity(), granule);
  auto* range = static_cast<unsigned char*>(dev.reserve_address_range(8 * granule));
  ASSERT_EQ(reinterpret_cast<std::uintptr_t>(range) % granule, 0u);
  const physical_handle h = dev.create_physical(granule);
  EXPECT_EQ(dev.counters().physical_bytes, granule);
  EXPECT_EQ(dev.memory_info().free_bytes, (std::size_t{64} << 20) - granule);
  dev.map_physical(range, granule, h);
  dev.set_access(range, granule);
  for (std::size_t i = 0; i < granule; i += 4096) range[i] = static_cast<unsigned char>(i >> 12);
  EXPECT_TRUE(dev.is_device_pointer(range + 100));
  dev.unmap(range, granule);
  EXPECT_FALSE(dev.is_device_pointer(range + 100));
  dev.map_physical(range + 5 * granule, granule, h);
  dev.set_access(range + 5 * granule, granule);
  for (std::size_t i = 0; i < granule; i += 4096) {
    ASSERT_EQ(range[5 * granule + i], static_cast<unsigned char>(i >> 12));
  }
  // Released while mapped: the memory lives until the mapping goes, as with cuMemRelease.
  dev.release_physical(h);
  EXPECT_EQ(dev.counters().physical_bytes, granule);
  EXPECT_EQ(range[5 * granule + 4096], 1);
  dev.unmap(range + 5 * granule, granule);
  EXPECT_EQ(dev.counters().physical_bytes, 0u);
  EXPECT_EQ(dev.counters().mapped_bytes, 0u);
  dev.free_address_range(range, 8 * granule);
  EXPECT_EQ(dev.counters().reserved_ranges, 0u);
  EXPECT_EQ(dev.counters().device_bytes_in_use, 0u);
}

TEST(HostSimVirtualMemory, EnforcesTheRulesOfTheDriver) {
  host_sim_device dev({.device_memory_bytes = 8 << 20});
  auto* range = static_cast<unsigned char*>(dev.reserve_address_range(4 * granule));
  EXPECT_THROW((void)dev.create_physical(granule / 2), cuda_error);  // not a granule multiple
  const physical_handle a = dev.create_physical(2 * granule);
  const physical_handle b = dev.create_physical(granule);
  EXPECT_THROW((void)dev.create_physical(2 * granule), out_of_memory);  // past the capacity
  EXPECT_THROW(dev.map_physical(range, granule, a), cuda_error);        // not the whole handle
  dev.map_physical(range, 2 * granule, a);
  EXPECT_THROW(dev.map_physical(range + granule, granule, b), cuda_error);  // overlaps
  EXPECT_THROW(dev.set_access(range, 3 * granule), cuda_error);             // not all mapped
  EXPECT_THROW(dev.unmap(range, granule), cuda_error);                      // part of a mapping
  dev.map_physical(range + 2 * granule, granule, b);
  dev.set_access(range, 3 * granule);
  std::memset(range, 1, 3 * granule);
  dev.unmap(range, 3 * granule);  // a run of whole mappings in one call
  dev.release_physical(a);
  dev.release_physical(b);
  EXPECT_EQ(dev.counters().device_bytes_in_use, 0u);
  dev.free_address_range(range, 4 * granule);
}

TEST(HostSimVirtualMemory, AbsentWhenTheGranularityIsZero) {
  host_sim_device dev({.vmm_granularity = 0});
  EXPECT_EQ(dev.vmm_granularity(), 0u);
  EXPECT_THROW((void)dev.reserve_address_range(granule), cuda_error);
  EXPECT_THROW((void)dev.create_physical(granule), cuda_error);
}

}  // namespace
}  // namespace vramkit
