// host_sim_device: a device_api whose "device memory" is host memory behind a capacity limit, whose
// streams are FIFO queues run by one worker thread each, and whose events complete when their queue
// reaches them. Optional artificial copy bandwidth and latency make ordering bugs visible in tests.
// Thread-safe.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>

#include "vramkit/core/device_api.hpp"

namespace vramkit {

/// Settings of a simulated device.
struct host_sim_options {
  std::size_t device_memory_bytes = std::size_t{8} << 30;  ///< capacity; allocations past it throw
  int device_count = 1;
  /// Simulated copy bandwidth between host and device in bytes per second; 0 = as fast as memcpy.
  double copy_bandwidth_bytes_per_s = 0.0;
  /// Simulated fixed cost of each copy or fill.
  std::chrono::microseconds copy_latency{0};
  /// Fill freshly allocated device memory with this byte (catches reads of uninitialised data);
  /// negative = leave as is.
  int poison_byte = 0xA5;
  /// Granularity of the simulated virtual memory management (physical extents of a memory file
  /// mapped with mmap(MAP_FIXED) into reserved ranges); a multiple of the host page size, or 0 for
  /// a device without it.
  std::size_t vmm_granularity = std::size_t{2} << 20;
  /// Commit the pages of physical memory when it is created (as cuMemCreate does); off, pages are
  /// committed on first touch, so a replay that never writes uses no host memory.
  bool commit_physical = true;
};

/// Counters of what the simulated device did, for tests.
struct host_sim_counters {
  std::size_t device_allocations = 0;
  std::size_t device_frees = 0;
  std::size_t device_bytes_in_use = 0;
  std::size_t device_bytes_peak = 0;
  std::size_t copies = 0;
  std::size_t bytes_copied = 0;
  std::size_t physical_bytes = 0;   ///< created and not yet freed (released and unmapped)
  std::size_t mapped_bytes = 0;     ///< currently mapped
  std::size_t reserved_ranges = 0;  ///< address ranges currently reserved
  std::size_t maps = 0;             ///< map_physical calls so far
  std::size_t unmaps = 0;           ///< mappings unmapped so far
};

/// A simulated device. Example:
///   vramkit::host_sim_device dev({.device_memory_bytes = 64 << 20});
///   auto s = dev.create_stream();  void* d = dev.allocate_device(1024);
class host_sim_device final : public device_api {
 public:
  explicit host_sim_device(host_sim_options options = {});
  ~host_sim_device() override;
  host_sim_device(const host_sim_device&) = delete;
  host_sim_device& operator=(const host_sim_device&) = delete;

  [[nodiscard]] std::string name() const override;
  [[nodiscard]] int device_count() override;
  void set_device(int ordinal) override;
  [[nodiscard]] int current_device() override;
  [[nodiscard]] device_properties properties(int ordinal) override;
  [[nodiscard]] device_memory_info memory_info() override;

  void* allocate_device(std::size_t bytes) override;
  void free_device(void* ptr) noexcept override;
  void* allocate_device_async(std::size_t bytes, stream_view stream) override;
  void free_device_async(void* ptr, stream_view stream) noexcept override;
  void* allocate_pinned_host(std::size_t bytes) override;
  void free_pinned_host(void* ptr) noexcept override;
  void* allocate_managed(std::size_t bytes) override;
  void free_managed(void* ptr) noexcept override;
  void advise_managed(const void* ptr, std::size_t bytes, managed_advice advice,
                      memory_location where) override;
  void prefetch_managed(const void* ptr, std::size_t bytes, memory_location where,
                        stream_view stream) override;
  void register_host(void* ptr, std::size_t bytes) override;
  void unregister_host(void* ptr) noexcept override;

  void copy_async(void* dst, const void* src, std::size_t bytes, copy_kind kind,
                  stream_view stream) override;
  void fill_async(void* dst, int byte_value, std::size_t bytes, stream_view stream) override;

  [[nodiscard]] std::size_t vmm_granularity() override;
  void* reserve_address_range(std::size_t bytes) override;
  void free_address_range(void* base, std::size_t bytes) noexcept override;
  physical_handle create_physical(std::size_t bytes) override;
  void release_physical(physical_handle handle) noexcept override;
  void map_physical(void* addr, std::size_t bytes, physical_handle handle) override;
  void set_access(void* addr, std::size_t bytes) override;
  void unmap(void* addr, std::size_t bytes) override;

  stream_view create_stream() override;
  void destroy_stream(stream_view stream) noexcept override;
  void synchronize(stream_view stream) override;
  void synchronize_device() override;
  event_view create_event() override;
  void destroy_event(event_view event) noexcept override;
  void record_event(event_view event, stream_view stream) override;
  [[nodiscard]] bool event_done(event_view event) override;
  void synchronize_event(event_view event) override;
  void stream_wait_event(stream_view stream, event_view event) override;
  void launch_host_func(stream_view stream, std::function<void()> fn) override;

  /// True when `ptr` lies inside a live simulated device allocation or a mapped range.
  [[nodiscard]] bool is_device_pointer(const void* ptr) const;
  [[nodiscard]] host_sim_counters counters() const;
  /// Fails the n-th device allocation from now (1 = the next one) with out_of_memory; 0 disarms.
  void fail_allocation_after(std::size_t n);
  /// Holds every stream's worker before its next operation until resume() (for ordering tests).
  void pause();
  void resume();

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace vramkit
