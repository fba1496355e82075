// The device API seam: every CUDA call that vramkit's memory logic needs (allocate, free, copy,
// memset, streams, events, host registration, device properties) goes through `device_api`.
// Two implementations: the CUDA runtime (cuda_device_api.hpp) and a device simulated in host memory
// (host_sim_device.hpp) so that allocators, tiers and pipelines run and are tested without a GPU.
// An implementation is thread-safe: any call may come from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace vramkit {

/// A non-owning reference to a stream of the device API (a cudaStream_t for CUDA, a queue for
/// the simulated device). The default-constructed value is the device's default stream.
struct stream_view {
  void* handle = nullptr;
  constexpr stream_view() = default;
  constexpr explicit stream_view(void* h) : handle(h) {}
  friend constexpr bool operator==(stream_view a, stream_view b) { return a.handle == b.handle; }
};

/// A non-owning reference to an event of the device API.
struct event_view {
  void* handle = nullptr;
  constexpr event_view() = default;
  constexpr explicit event_view(void* h) : handle(h) {}
  friend constexpr bool operator==(event_view a, event_view b) { return a.handle == b.handle; }
};

/// Direction of a copy. `automatic` lets the device infer it from the pointers (unified
/// addressing).
enum class copy_kind { host_to_host, host_to_device, device_to_host, device_to_device, automatic };

/// Free and total device memory in bytes, as cudaMemGetInfo reports them.
struct device_memory_info {
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
};

/// The properties of one device that memory logic and reports need.
struct device_properties {
  int ordinal = 0;
  std::string name;
  std::string pci_bus_id;  ///< "0000:1b:00.0"; empty when unknown
  int compute_major = 0;
  int compute_minor = 0;
  int multiprocessor_count = 0;
  int max_threads_per_multiprocessor = 0;
  std::size_t total_memory_bytes = 0;
  std::size_t l2_cache_bytes = 0;
  int memory_clock_khz = 0;       ///< 0 when the runtime does not report it
  int memory_bus_width_bits = 0;  ///< 0 when the runtime does not report it
  bool unified_addressing = false;
  bool concurrent_managed_access = false;
  bool can_map_host_memory = false;
  int async_engine_count = 0;
};

/// Which device (or the host) a managed-memory advice or prefetch refers to.
struct memory_location {
  static constexpr int host = -1;
  int device = 0;  ///< device ordinal, or memory_location::host
};

enum class managed_advice {
  set_read_mostly,
  unset_read_mostly,
  set_preferred_location,
  unset_preferred_location,
  set_accessed_by,
  unset_accessed_by,
};

/// The operations vramkit's memory logic performs on a device. Failed calls throw cuda_error
/// (allocation failures throw out_of_memory); functions marked noexcept report failures to stderr
/// instead. Asynchronous operations are ordered on their stream as in CUDA.
class device_api {
 public:
  virtual ~device_api() = default;

  /// "cuda" or "host_sim".
  [[nodiscard]] virtual std::string name() const = 0;
  [[nodiscard]] virtual int device_count() = 0;
  /// Makes `ordinal` the calling thread's current device.
  virtual void set_device(int ordinal) = 0;
  [[nodiscard]] virtual int current_device() = 0;
  [[nodiscard]] virtual device_properties properties(int ordinal) = 0;
  /// Free and total memory of the current device.
  [[nodiscard]] virtual device_memory_info memory_info() = 0;

  // Memory. Each allocation returns at least 256-byte aligned memory; a zero-byte request returns
  // nullptr. Allocation failure throws out_of_memory.
  virtual void* allocate_device(std::size_t bytes) = 0;
  virtual void free_device(void* ptr) noexcept = 0;
  /// Stream-ordered allocation from the device's default memory pool (cudaMallocAsync).
  virtual void* allocate_device_async(std::size_t bytes, stream_view stream) = 0;
  virtual void free_device_async(void* ptr, stream_view stream) noexcept = 0;
  /// Page-locked host memory, mapped into the device's address space where the device allows.
  virtual void* allocate_pinned_host(std::size_t bytes) = 0;
  virtual void free_pinned_host(void* ptr) noexcept = 0;
  virtual void* allocate_managed(std::size_t bytes) = 0;
  virtual void free_managed(void* ptr) noexcept = 0;
  virtual void advise_managed(const void* ptr, std::size_t bytes, managed_advice advice,
                              memory_location where) = 0;
  virtual void prefetch_managed(const void* ptr, std::size_t bytes, memory_location where,
                                stream_view stream) = 0;
  /// Page-locks existing host memory (cudaHostRegister) and unlocks it again.
  virtual void register_host(void* ptr, std::size_t bytes) = 0;
  virtual void unregister_host(void* ptr) noexcept = 0;

  // Copies and fills, ordered on `stream`.
  virtual void copy_async(void* dst, const void* src, std::size_t bytes, copy_kind kind,
                          stream_view stream) = 0;
  virtual void fill_async(void* dst, int byte_value, std::size_t bytes, stream_view stream) = 0;

  // Streams and events.
  virtual stream_view create_stream() = 0;
  virtual void destroy_stream(stream_view stream) noexcept = 0;
  virtual void synchronize(stream_view stream) = 0;
  virtual void synchronize_device() = 0;
  virtual event_view create_event() = 0;  ///< timing disabled: cheap, for ordering
  virtual void destroy_event(event_view event) noexcept = 0;
  virtual void record_event(event_view event, stream_view stream) = 0;
  /// True once all work captured by the last record_event has completed.
  [[nodiscard]] virtual bool event_done(event_view event) = 0;
  virtual void synchronize_event(event_view event) = 0;
  /// Work submitted to `stream` after this call waits for `event` (no host blocking).
  virtual void stream_wait_event(stream_view stream, event_view event) = 0;
  /// Runs `fn` on a runtime thread once all earlier work on `stream` has completed; later work on
  /// the stream waits for it. `fn` must not call the device API (as with cudaLaunchHostFunc).
  virtual void launch_host_func(stream_view stream, std::function<void()> fn) = 0;
};

/// RAII owner of a stream of a device_api.
class owned_stream {
 public:
  explicit owned_stream(device_api& api) : api_(&api), stream_(api.create_stream()) {}
  owned_stream(const owned_stream&) = delete;
  owned_stream& operator=(const owned_stream&) = delete;
  owned_stream(owned_stream&& o) noexcept : api_(o.api_), stream_(o.stream_) { o.api_ = nullptr; }
  ~owned_stream() {
    if (api_ != nullptr) api_->destroy_stream(stream_);
  }
  [[nodiscard]] stream_view view() const noexcept { return stream_; }
  operator stream_view() const noexcept { return stream_; }  // NOLINT

 private:
  device_api* api_;
  stream_view stream_;
};

/// RAII owner of an event of a device_api.
class owned_event {
 public:
  explicit owned_event(device_api& api) : api_(&api), event_(api.create_event()) {}
  owned_event(const owned_event&) = delete;
  owned_event& operator=(const owned_event&) = delete;
  owned_event(owned_event&& o) noexcept : api_(o.api_), event_(o.event_) { o.api_ = nullptr; }
  ~owned_event() {
    if (api_ != nullptr) api_->destroy_event(event_);
  }
  [[nodiscard]] event_view view() const noexcept { return event_; }
  operator event_view() const noexcept { return event_; }  // NOLINT

 private:
  device_api* api_;
  event_view event_;
};

}  // namespace vramkit
