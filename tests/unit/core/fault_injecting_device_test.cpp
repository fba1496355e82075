#include "vramkit/core/testing/fault_injecting_device.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <vector>

#include "vramkit/core/device_api_wrapper.hpp"
#include "vramkit/core/error.hpp"
#include "vramkit/core/host_sim_device.hpp"

namespace vramkit {
namespace {

using testing::fault_counters;
using testing::fault_injecting_device;
using testing::fault_kind;

TEST(DeviceApiWrapper, ForwardsEveryCallToItsTarget) {
  auto sim = std::make_shared<host_sim_device>(host_sim_options{.device_memory_bytes = 4 << 20});
  device_api_wrapper dev(sim);
  EXPECT_EQ(&dev.target(), sim.get());
  EXPECT_EQ(dev.name(), "host_sim");
  EXPECT_EQ(dev.device_count(), 1);
  dev.set_device(0);
  EXPECT_EQ(dev.current_device(), 0);
  EXPECT_THROW(dev.set_device(3), cuda_error);
  EXPECT_EQ(dev.properties(0).total_memory_bytes, std::size_t{4} << 20);
  stream_view s = dev.create_stream();
  void* d = dev.allocate_device(1 << 20);
  void* a = dev.allocate_device_async(1 << 20, s);
  EXPECT_TRUE(sim->is_device_pointer(d));
  EXPECT_TRUE(sim->is_device_pointer(a));
  EXPECT_EQ(dev.memory_info().free_bytes, std::size_t{2} << 20);
  std::vector<char> host(1 << 20, 7), back(1 << 20, 0);
  void* pinned = dev.allocate_pinned_host(4096);
  void* managed = dev.allocate_managed(4096);
  dev.advise_managed(managed, 4096, managed_advice::set_read_mostly, {});
  dev.prefetch_managed(managed, 4096, {}, s);
  dev.register_host(host.data(), host.size());
  dev.fill_async(d, 3, 16, s);
  dev.copy_async(d, host.data(), host.size(), copy_kind::host_to_device, s);
  dev.copy_async(back.data(), d, back.size(), copy_kind::device_to_host, s);
  event_view e = dev.create_event();
  dev.record_event(e, s);
  stream_view t = dev.create_stream();
  dev.stream_wait_event(t, e);
  bool ran = false;
  dev.launch_host_func(t, [&] { ran = true; });
  dev.synchronize(t);
  dev.synchronize_event(e);
  EXPECT_TRUE(dev.event_done(e));
  EXPECT_TRUE(ran);
  dev.synchronize(s);
  dev.synchronize_device();
  EXPECT_EQ(host, back);
  EXPECT_EQ(sim->counters().copies, 2U);
  dev.unregister_host(host.data());
  dev.free_managed(managed);
  dev.free_pinned_host(pinned);
  dev.free_device_async(a, s);
  dev.free_device(d);
  dev.synchronize(s);
  dev.destroy_event(e);
  dev.destroy_stream(t);
  dev.destroy_stream(s);
  EXPECT_EQ(sim->counters().device_bytes_in_use, 0U);
}

TEST(DeviceApiWrapper, RefusesANullTarget) {
  EXPECT_THROW(device_api_wrapper(nullptr), logic_error);
}

TEST(FaultInjectingDevice, FailsOnlyTheNthAllocation) {
  auto sim = std::make_shared<host_sim_device>();
  fault_injecting_device dev(sim);
  dev.fail_nth(fault_kind::allocation, 2);
  void* a = dev.allocate_device(1024);
  EXPECT_THROW((void)dev.allocate_device_async(1024, {}), out_of_memory);
  EXPECT_EQ(sim->counters().device_allocations, 1U);  // the failed call never reached the target
  void* b = dev.allocate_device(1024);
  EXPECT_NE(b, nullptr);
  dev.free_device(a);
  dev.free_device(b);
  EXPECT_EQ(dev.counters(), (fault_counters{.allocations = 3, .injected_failures = 1}));
}

TEST(FaultInjectingDevice, DisarmedCountdownFailsNothing) {
  fault_injecting_device dev(std::make_shared<host_sim_device>());
  dev.fail_nth(fault_kind::allocation, 1);
  dev.fail_nth(fault_kind::allocation, 0);
  void* p = dev.allocate_pinned_host(64);
  EXPECT_NE(p, nullptr);
  dev.free_pinned_host(p);
  EXPECT_EQ(dev.counters().injected_failures, 0U);
}

TEST(FaultInjectingDevice, FailedCopyLeavesTheDestinationUntouched) {
  auto sim = std::make_shared<host_sim_device>();
  fault_injecting_device dev(sim);
  std::vector<char> src(256, 1), dst(256, 9);
  dev.fail_nth(fault_kind::copy, 1);
  EXPECT_THROW(dev.copy_async(dst.data(), src.data(), 256, copy_kind::host_to_host, {}),
               cuda_error);
  dev.synchronize({});
  EXPECT_EQ(dst, std::vector<char>(256, 9));
  dev.copy_async(dst.data(), src.data(), 256, copy_kind::host_to_host, {});
  dev.synchronize({});
  EXPECT_EQ(dst, src);
  dev.fail_nth(fault_kind::copy, 1);
  EXPECT_THROW(dev.fill_async(dst.data(), 0, 256, {}), cuda_error);
}

TEST(FaultInjectingDevice, FailsTheNthEventOperation) {
  fault_injecting_device dev(std::make_shared<host_sim_device>());
  dev.fail_nth(fault_kind::event, 1);
  EXPECT_THROW((void)dev.create_event(), cuda_error);
  event_view e = dev.create_event();
  dev.fail_nth(fault_kind::event, 2);
  dev.record_event(e, {});
  EXPECT_THROW(dev.stream_wait_event({}, e), cuda_error);
  dev.synchronize_event(e);
  dev.destroy_event(e);
  EXPECT_EQ(dev.counters(), (fault_counters{.events = 4, .injected_failures = 2}));
}

TEST(FaultInjectingDevice, DelayedStreamCompletesLaterWithoutBlockingTheHost) {
  fault_injecting_device dev(std::make_shared<host_sim_device>());
  stream_view s = dev.create_stream();
  const auto delay = std::chrono::milliseconds(30);
  dev.delay_stream(s, delay);
  int value = 0;
  const auto start = std::chrono::steady_clock::now();
  dev.launch_host_func(s, [&] { value = 1; });
  const auto submitted = std::chrono::steady_clock::now();
  dev.synchronize(s);
  const auto done = std::chrono::steady_clock::now();
  EXPECT_EQ(value, 1);
  EXPECT_GE(done - start, delay);
  EXPECT_LT(submitted - start, delay);  // the host only queued the delay
  dev.delay_stream(s, std::chrono::microseconds(0));
  dev.destroy_stream(s);
}

}  // namespace
}  // namespace vramkit
