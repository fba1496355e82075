// Test support for the tier module: a simulated device with artificial copy delays and memory
// resources over it that count what the manager and the pipeline hold.
#pragma once

#include <memory>

#include "vramkit/core/host_sim_device.hpp"
#include "vramkit/core/units.hpp"
#include "vramkit/mr/device_api_resource.hpp"
#include "vramkit/mr/statistics_adaptor.hpp"

namespace vramkit::tier::testing {

/// A simulated device at ~2 GB/s with 20 us per copy: slow enough that a missing wait shows up
/// as stale data, fast enough to keep tests short.
inline host_sim_options slow_copies(std::size_t capacity = 256 * MiB) {
  host_sim_options o;
  o.device_memory_bytes = capacity;
  o.copy_bandwidth_bytes_per_s = 2e9;
  o.copy_latency = std::chrono::microseconds(20);
  return o;
}

/// The device plus counted stream-ordered device memory and counted pinned host memory.
struct sim_setup {
  std::shared_ptr<host_sim_device> device;
  std::shared_ptr<mr::statistics_adaptor> device_memory;
  std::shared_ptr<mr::statistics_adaptor> pinned_memory;

  explicit sim_setup(host_sim_options options = slow_copies())
      : device(std::make_shared<host_sim_device>(options)),
        device_memory(
            std::make_shared<mr::statistics_adaptor>(std::make_shared<mr::device_api_resource>(
                device, mr::memory_kind::device, mr::allocation_mode::stream_ordered))),
        pinned_memory(std::make_shared<mr::statistics_adaptor>(
            std::make_shared<mr::device_api_resource>(device, mr::memory_kind::pinned_host))) {}

  [[nodiscard]] std::int64_t device_peak() const { return device_memory->report().bytes.all.peak; }
  [[nodiscard]] std::int64_t device_current() const {
    return device_memory->report().bytes.all.current;
  }
  [[nodiscard]] std::int64_t pinned_current() const {
    return pinned_memory->report().bytes.all.current;
  }
};

}  // namespace vramkit::tier::testing
