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

/// Physical device memory made by device_api::create_physical, as an opaque value (a
/// CUmemGenericAllocationHandle for CUDA, an extent of a memory file for the simulated device).
/// Zero is never a valid handle.
struct physical_handle {
  std::uint64_t value = 0;
  friend constexpr bool operator==(physical_handle a, physical_handle b) {
    return a.value == b.value;
  }
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
///
/// Ownership convention (mr and tier alike): the device is created and owned by the application.
/// A component that keeps the device after its constructor returns and may outlive the caller's
/// scope (every memory resource) shares ownership through std::shared_ptr<device_api>; a component
/// that borrows other objects by reference too (tier's residency_manager and stream_pipeline,
/// which borrow their memory_resource) borrows the device the same way, as device_api&, and the
/// caller keeps it alive for the component's lifetime. Nothing ever deletes a device it borrowed.
class device_api {
 public:
  virtual ~device_api() = default;

  /// A short name of the implementation: "cuda" or "host_sim" (wrappers report their target's).
  [[nodiscard]] virtual std::string name() const = 0;
  /// The number of devices this API can address (>= 0).
  [[nodiscard]] virtual int device_count() = 0;
  /// Makes `ordinal` the calling thread's current device; throws cuda_error for a bad ordinal.
  virtual void set_device(int ordinal) = 0;
  /// The calling thread's current device ordinal.
  [[nodiscard]] virtual int current_device() = 0;
  /// The properties of device `ordinal`; throws cuda_error for a bad ordinal.
  [[nodiscard]] virtual device_properties properties(int ordinal) = 0;
  /// Free and total memory of the current device.
  [[nodiscard]] virtual device_memory_info memory_info() = 0;

  // Memory. Each allocation returns at least 256-byte aligned memory; a zero-byte request returns
  // nullptr. Allocation failure throws out_of_memory.
  /// Device memory (cudaMalloc), usable by work on any stream once this returns.
  virtual void* allocate_device(std::size_t bytes) = 0;
  /// Frees memory of allocate_device after all work on the device completes (cudaFree); nullptr is
  /// a no-op.
  virtual void free_device(void* ptr) noexcept = 0;
  /// Stream-ordered allocation from the device's default memory pool (cudaMallocAsync): valid for
  /// work ordered on `stream` after this call.
  virtual void* allocate_device_async(std::size_t bytes, stream_view stream) = 0;
  /// Frees memory of allocate_device_async once earlier work on `stream` has completed.
  virtual void free_device_async(void* ptr, stream_view stream) noexcept = 0;
  /// Page-locked host memory, mapped into the device's address space where the device allows.
  virtual void* allocate_pinned_host(std::size_t bytes) = 0;
  /// Frees memory of allocate_pinned_host; the caller guarantees no queued work still uses it.
  virtual void free_pinned_host(void* ptr) noexcept = 0;
  /// Managed (unified) memory, accessible from host and device (cudaMallocManaged).
  virtual void* allocate_managed(std::size_t bytes) = 0;
  /// Frees memory of allocate_managed after all work on the device completes.
  virtual void free_managed(void* ptr) noexcept = 0;
  /// Gives the driver a placement hint for managed memory; never changes its contents.
  virtual void advise_managed(const void* ptr, std::size_t bytes, managed_advice advice,
                              memory_location where) = 0;
  /// Migrates managed memory to `where`, ordered on `stream`; never changes its contents.
  virtual void prefetch_managed(const void* ptr, std::size_t bytes, memory_location where,
                                stream_view stream) = 0;
  /// Page-locks existing host memory (cudaHostRegister); throws cuda_error on failure.
  virtual void register_host(void* ptr, std::size_t bytes) = 0;
  /// Unlocks memory of register_host; the caller guarantees no queued work still uses it.
  virtual void unregister_host(void* ptr) noexcept = 0;

  // Copies and fills, ordered on `stream`.
  /// Copies `bytes` from `src` to `dst` after earlier work on `stream`; the ranges must not
  /// overlap and must stay valid until the copy completes.
  virtual void copy_async(void* dst, const void* src, std::size_t bytes, copy_kind kind,
                          stream_view stream) = 0;
  /// Sets `bytes` bytes at `dst` to `byte_value` after earlier work on `stream`.
  virtual void fill_async(void* dst, int byte_value, std::size_t bytes, stream_view stream) = 0;

  // Virtual memory management (CUDA's cuMem* calls). Sizes and addresses are multiples of
  // vmm_granularity(); a device without virtual memory management reports 0 there and throws
  // cuda_error from every other call of this group.
  /// The physical-memory and mapping granularity of the current device in bytes, or 0.
  [[nodiscard]] virtual std::size_t vmm_granularity() = 0;
  /// Reserves `bytes` of address space with nothing mapped (cuMemAddressReserve), aligned to the
  /// granularity; throws out_of_memory when no such range is free.
  virtual void* reserve_address_range(std::size_t bytes) = 0;
  /// Frees a range of reserve_address_range whose mappings have all been unmapped.
  virtual void free_address_range(void* base, std::size_t bytes) noexcept = 0;
  /// Creates `bytes` of physical memory on the current device (cuMemCreate); it counts as used
  /// device memory until released and unmapped. Throws out_of_memory when the device is full.
  virtual physical_handle create_physical(std::size_t bytes) = 0;
  /// Releases a handle (cuMemRelease); the memory is freed once its last mapping is unmapped.
  virtual void release_physical(physical_handle handle) noexcept = 0;
  /// Maps the whole of `handle` (`bytes` long) at `addr` inside a reserved range, with no access
  /// yet (cuMemMap); throws cuda_error when part of the range is mapped already.
  virtual void map_physical(void* addr, std::size_t bytes, physical_handle handle) = 0;
  /// Grants the current device read and write access to the mapped range (cuMemSetAccess).
  virtual void set_access(void* addr, std::size_t bytes) = 0;
  /// Unmaps the whole mappings that make up `[addr, addr + bytes)` (cuMemUnmap); not stream
  /// ordered: the caller guarantees that no queued work still uses the range.
  virtual void unmap(void* addr, std::size_t bytes) = 0;

  // Streams and events.
  /// A new stream, independent of every other; destroy it with destroy_stream.
  virtual stream_view create_stream() = 0;
  /// Destroys a stream after its queued work completes; the default stream is never destroyed.
  virtual void destroy_stream(stream_view stream) noexcept = 0;
  /// Blocks the host until all work queued on `stream` has completed; rethrows a failure of it.
  virtual void synchronize(stream_view stream) = 0;
  /// Blocks the host until all work on every stream of the device has completed.
  virtual void synchronize_device() = 0;
  /// A new event with timing disabled (cheap, for ordering); destroy it with destroy_event.
  virtual event_view create_event() = 0;
  /// Destroys an event; waits already queued on it still complete.
  virtual void destroy_event(event_view event) noexcept = 0;
  /// Captures the work queued on `stream` so far into `event` (replacing an earlier capture).
  virtual void record_event(event_view event, stream_view stream) = 0;
  /// True once all work captured by the last record_event has completed.
  [[nodiscard]] virtual bool event_done(event_view event) = 0;
  /// Blocks the host until the work captured by the last record_event has completed.
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
