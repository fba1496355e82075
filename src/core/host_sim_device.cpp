// Simulated device: device memory in host memory behind a capacity limit, one worker thread per
// stream running a FIFO of operations, events that complete when their queue reaches them.
#include "vramkit/core/host_sim_device.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <iterator>
#include <map>
#include <mutex>
#include <thread>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "vramkit/core/error.hpp"
#include "vramkit/core/units.hpp"

namespace vramkit {
namespace {

constexpr std::size_t sim_alignment = 256;

struct sim_event {
  std::mutex m;
  std::condition_variable cv;
  std::uint64_t recorded = 0;   // generation of the last record
  std::uint64_t completed = 0;  // generation reached by the stream

  bool done_locked(std::uint64_t gen) const { return completed >= gen; }
};

struct sim_stream {
  std::mutex m;
  std::condition_variable cv;       // wakes the worker
  std::condition_variable idle_cv;  // wakes synchronize()
  std::deque<std::function<void()>> queue;
  std::uint64_t submitted = 0;
  std::uint64_t completed = 0;
  bool stopping = false;
  std::string first_error;
  std::thread worker;
};

}  // namespace

struct host_sim_device::impl {
  host_sim_options options;
  mutable std::mutex mem_mutex;
  std::map<std::uintptr_t, std::size_t> device_blocks;  // start -> size
  host_sim_counters counters;
  std::size_t fail_countdown = 0;

  std::mutex pause_mutex;
  std::condition_variable pause_cv;
  bool paused = false;

  std::mutex streams_mutex;
  std::map<sim_stream*, std::unique_ptr<sim_stream>> streams;
  sim_stream* default_stream = nullptr;

  static thread_local int current_device;

  // Virtual memory: physical memory is extents of one memory file (a file per handle would run
  // out of descriptors at a few thousand granules), mapped MAP_SHARED into reserved ranges.
  struct physical_extent {
    std::size_t offset = 0;
    std::size_t size = 0;
    std::size_t mappings = 0;
    bool released = false;
  };
  struct mapping {
    std::size_t size = 0;
    std::uint64_t handle = 0;
  };
  int memory_file = -1;
  std::size_t memory_file_size = 0;
  std::map<std::size_t, std::size_t> free_extents;  // offset -> size, in the memory file
  std::map<std::uint64_t, physical_extent> physical;
  std::uint64_t next_handle = 1;
  std::map<std::uintptr_t, std::size_t> reservations;  // start -> size
  std::map<std::uintptr_t, mapping> mappings;          // start -> mapping

  std::size_t granularity() const { return options.vmm_granularity; }

  void require_vmm(const char* what) const {
    if (granularity() == 0) {
      throw cuda_error(801, std::string("host_sim_device: ") + what +
                                ": virtual memory management is not supported (granularity 0)");
    }
  }

  void require_multiple(std::size_t value, const char* what) const {
    if (value == 0 || value % granularity() != 0) {
      throw cuda_error(1, std::string("host_sim_device: ") + what + " " + std::to_string(value) +
                              " is not a positive multiple of the granularity " +
                              std::to_string(granularity()));
    }
  }

  // Frees an extent's pages and returns it to the file's free list (mem_mutex held).
  void drop_extent(std::uint64_t handle) {
    auto it = physical.find(handle);
    const physical_extent e = it->second;
    physical.erase(it);
    ::fallocate(memory_file, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                static_cast<off_t>(e.offset), static_cast<off_t>(e.size));
    auto [pos, inserted] = free_extents.emplace(e.offset, e.size);
    if (auto next = std::next(pos);
        next != free_extents.end() && pos->first + pos->second == next->first) {
      pos->second += next->second;
      free_extents.erase(next);
    }
    if (pos != free_extents.begin()) {
      auto prev = std::prev(pos);
      if (prev->first + prev->second == pos->first) {
        prev->second += pos->second;
        free_extents.erase(pos);
      }
    }
    counters.physical_bytes -= e.size;
    counters.device_bytes_in_use -= e.size;
  }

  bool inside_reservation(std::uintptr_t a, std::size_t bytes) const {
    auto it = reservations.upper_bound(a);
    if (it == reservations.begin()) return false;
    --it;
    return a >= it->first && a + bytes <= it->first + it->second;
  }

  sim_stream* resolve(stream_view s) {
    return s.handle == nullptr ? default_stream : static_cast<sim_stream*>(s.handle);
  }

  sim_stream* start_stream() {
    auto owned = std::make_unique<sim_stream>();
    sim_stream* s = owned.get();
    s->worker = std::thread([this, s] { run(s); });
    std::lock_guard lock(streams_mutex);
    streams.emplace(s, std::move(owned));
    return s;
  }

  void stop_stream(sim_stream* s) {
    {
      std::lock_guard lock(s->m);
      s->stopping = true;
    }
    s->cv.notify_all();
    if (s->worker.joinable()) s->worker.join();
  }

  void run(sim_stream* s) {
    for (;;) {
      std::function<void()> op;
      {
        std::unique_lock lock(s->m);
        s->cv.wait(lock, [s] { return s->stopping || !s->queue.empty(); });
        if (s->queue.empty()) return;  // stopping and drained
        op = std::move(s->queue.front());
        s->queue.pop_front();
      }
      {
        std::unique_lock lock(pause_mutex);
        pause_cv.wait(lock, [this] { return !paused; });
      }
      try {
        op();
      } catch (const std::exception& e) {
        std::lock_guard lock(s->m);
        if (s->first_error.empty()) s->first_error = e.what();
      } catch (...) {
        std::lock_guard lock(s->m);
        if (s->first_error.empty()) s->first_error = "unknown exception in stream operation";
      }
      {
        std::lock_guard lock(s->m);
        ++s->completed;
      }
      s->idle_cv.notify_all();
    }
  }

  void enqueue(stream_view sv, std::function<void()> op) {
    sim_stream* s = resolve(sv);
    {
      std::lock_guard lock(s->m);
      if (s->stopping) throw logic_error("host_sim_device: operation on a destroyed stream");
      s->queue.push_back(std::move(op));
      ++s->submitted;
    }
    s->cv.notify_one();
  }

  void wait_idle(sim_stream* s) {
    std::unique_lock lock(s->m);
    const std::uint64_t target = s->submitted;
    s->idle_cv.wait(lock, [&] { return s->completed >= target; });
    if (!s->first_error.empty()) {
      std::string message = std::move(s->first_error);
      s->first_error.clear();
      throw error("stream operation failed: " + message);
    }
  }

  void simulate_transfer(std::size_t bytes) const {
    auto delay = std::chrono::duration<double>(options.copy_latency);
    if (options.copy_bandwidth_bytes_per_s > 0.0) {
      delay += std::chrono::duration<double>(static_cast<double>(bytes) /
                                             options.copy_bandwidth_bytes_per_s);
    }
    if (delay.count() > 0.0) std::this_thread::sleep_for(delay);
  }

  void* allocate_tracked(std::size_t bytes) {
    if (bytes == 0) return nullptr;
    const std::size_t rounded = align_up(bytes, sim_alignment);
    {
      std::lock_guard lock(mem_mutex);
      if (fail_countdown > 0 && --fail_countdown == 0) {
        throw out_of_memory(bytes, "host_sim_device", "injected allocation failure");
      }
      if (counters.device_bytes_in_use + rounded > options.device_memory_bytes) {
        throw out_of_memory(bytes, "host_sim_device",
                            "simulated device has " +
                                format_bytes(static_cast<double>(options.device_memory_bytes -
                                                                 counters.device_bytes_in_use)) +
                                " free of " +
                                format_bytes(static_cast<double>(options.device_memory_bytes)));
      }
      counters.device_bytes_in_use += rounded;
    }
    void* p = std::aligned_alloc(sim_alignment, rounded);
    if (p == nullptr) {
      std::lock_guard lock(mem_mutex);
      counters.device_bytes_in_use -= rounded;
      throw out_of_memory(bytes, "host_sim_device", "host allocation failed");
    }
    if (options.poison_byte >= 0) std::memset(p, options.poison_byte, rounded);
    std::lock_guard lock(mem_mutex);
    device_blocks.emplace(reinterpret_cast<std::uintptr_t>(p), rounded);
    ++counters.device_allocations;
    if (counters.device_bytes_in_use > counters.device_bytes_peak) {
      counters.device_bytes_peak = counters.device_bytes_in_use;
    }
    return p;
  }

  void free_tracked(void* p) noexcept {
    if (p == nullptr) return;
    {
      std::lock_guard lock(mem_mutex);
      auto it = device_blocks.find(reinterpret_cast<std::uintptr_t>(p));
      if (it == device_blocks.end()) {
        std::fprintf(stderr, "vramkit host_sim_device: free of unknown device pointer %p\n", p);
        return;
      }
      counters.device_bytes_in_use -= it->second;
      ++counters.device_frees;
      device_blocks.erase(it);
    }
    std::free(p);
  }
};

thread_local int host_sim_device::impl::current_device = 0;

host_sim_device::host_sim_device(host_sim_options options) : impl_(std::make_unique<impl>()) {
  impl_->options = options;
  impl_->default_stream = impl_->start_stream();
}

host_sim_device::~host_sim_device() {
  std::map<sim_stream*, std::unique_ptr<sim_stream>> streams;
  {
    std::lock_guard lock(impl_->streams_mutex);
    streams.swap(impl_->streams);
  }
  resume();
  for (auto& [ptr, s] : streams) impl_->stop_stream(ptr);
  std::lock_guard lock(impl_->mem_mutex);
  for (auto& [start, size] : impl_->device_blocks) std::free(reinterpret_cast<void*>(start));
  for (auto& [start, size] : impl_->reservations) ::munmap(reinterpret_cast<void*>(start), size);
  if (impl_->memory_file >= 0) ::close(impl_->memory_file);
}

std::string host_sim_device::name() const { return "host_sim"; }
int host_sim_device::device_count() { return impl_->options.device_count; }

void host_sim_device::set_device(int ordinal) {
  if (ordinal < 0 || ordinal >= impl_->options.device_count) {
    throw cuda_error(101, "host_sim_device: invalid device ordinal " + std::to_string(ordinal));
  }
  impl::current_device = ordinal;
}

int host_sim_device::current_device() { return impl::current_device; }

device_properties host_sim_device::properties(int ordinal) {
  device_properties p;
  p.ordinal = ordinal;
  p.name = "vramkit simulated device";
  p.compute_major = 0;
  p.multiprocessor_count = 1;
  p.total_memory_bytes = impl_->options.device_memory_bytes;
  p.unified_addressing = true;
  p.concurrent_managed_access = true;
  p.can_map_host_memory = true;
  p.async_engine_count = 2;
  return p;
}

device_memory_info host_sim_device::memory_info() {
  std::lock_guard lock(impl_->mem_mutex);
  return {impl_->options.device_memory_bytes - impl_->counters.device_bytes_in_use,
          impl_->options.device_memory_bytes};
}

void* host_sim_device::allocate_device(std::size_t bytes) { return impl_->allocate_tracked(bytes); }
void host_sim_device::free_device(void* ptr) noexcept { impl_->free_tracked(ptr); }

void* host_sim_device::allocate_device_async(std::size_t bytes, stream_view) {
  return impl_->allocate_tracked(bytes);
}

void host_sim_device::free_device_async(void* ptr, stream_view stream) noexcept {
  if (ptr == nullptr) return;
  try {
    impl_->enqueue(stream, [this, ptr] { impl_->free_tracked(ptr); });
  } catch (...) {
    impl_->free_tracked(ptr);
  }
}

void* host_sim_device::allocate_pinned_host(std::size_t bytes) {
  if (bytes == 0) return nullptr;
  void* p = std::aligned_alloc(sim_alignment, align_up(bytes, sim_alignment));
  if (p == nullptr) throw out_of_memory(bytes, "host_sim_device pinned host", "");
  return p;
}
void host_sim_device::free_pinned_host(void* ptr) noexcept { std::free(ptr); }

void* host_sim_device::allocate_managed(std::size_t bytes) {
  if (bytes == 0) return nullptr;
  void* p = std::aligned_alloc(sim_alignment, align_up(bytes, sim_alignment));
  if (p == nullptr) throw out_of_memory(bytes, "host_sim_device managed", "");
  return p;
}
void host_sim_device::free_managed(void* ptr) noexcept { std::free(ptr); }

void host_sim_device::advise_managed(const void*, std::size_t, managed_advice, memory_location) {}

void host_sim_device::prefetch_managed(const void*, std::size_t bytes, memory_location,
                                       stream_view stream) {
  impl_->enqueue(stream, [this, bytes] { impl_->simulate_transfer(bytes); });
}

void host_sim_device::register_host(void*, std::size_t) {}
void host_sim_device::unregister_host(void*) noexcept {}

void host_sim_device::copy_async(void* dst, const void* src, std::size_t bytes, copy_kind kind,
                                 stream_view stream) {
  if (bytes == 0) return;
  if (dst == nullptr || src == nullptr)
    throw cuda_error(1, "host_sim_device: copy with null pointer");
  const bool crosses = kind != copy_kind::device_to_device && kind != copy_kind::host_to_host;
  impl_->enqueue(stream, [this, dst, src, bytes, crosses] {
    if (crosses) impl_->simulate_transfer(bytes);
    std::memmove(dst, src, bytes);
    std::lock_guard lock(impl_->mem_mutex);
    ++impl_->counters.copies;
    impl_->counters.bytes_copied += bytes;
  });
}

void host_sim_device::fill_async(void* dst, int byte_value, std::size_t bytes, stream_view stream) {
  if (bytes == 0) return;
  impl_->enqueue(stream, [dst, byte_value, bytes] { std::memset(dst, byte_value, bytes); });
}

std::size_t host_sim_device::vmm_granularity() { return impl_->granularity(); }

void* host_sim_device::reserve_address_range(std::size_t bytes) {
  impl_->require_vmm("reserve_address_range");
  impl_->require_multiple(bytes, "reserve_address_range size");
  const std::size_t g = impl_->granularity();
  void* raw =
      ::mmap(nullptr, bytes + g, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED) {
    throw out_of_memory(bytes, "host_sim_device address space", std::strerror(errno));
  }
  // Over-reserve by one granule and trim both ends, so the range is granularity-aligned.
  const auto start = reinterpret_cast<std::uintptr_t>(raw);
  const std::uintptr_t aligned = align_up(start, g);
  if (aligned > start) ::munmap(raw, aligned - start);
  const std::uintptr_t end = start + bytes + g;
  if (end > aligned + bytes)
    ::munmap(reinterpret_cast<void*>(aligned + bytes), end - aligned - bytes);
  std::lock_guard lock(impl_->mem_mutex);
  impl_->reservations.emplace(aligned, bytes);
  ++impl_->counters.reserved_ranges;
  return reinterpret_cast<void*>(aligned);
}

void host_sim_device::free_address_range(void* base, std::size_t bytes) noexcept {
  const auto a = reinterpret_cast<std::uintptr_t>(base);
  std::lock_guard lock(impl_->mem_mutex);
  auto it = impl_->reservations.find(a);
  if (it == impl_->reservations.end() || it->second != bytes) {
    std::fprintf(stderr, "vramkit host_sim_device: free of unknown address range %p\n", base);
    return;
  }
  auto m = impl_->mappings.lower_bound(a);
  if (m != impl_->mappings.end() && m->first < a + bytes) {
    std::fprintf(stderr, "vramkit host_sim_device: address range %p freed while still mapped\n",
                 base);
    return;
  }
  ::munmap(base, bytes);
  impl_->reservations.erase(it);
  --impl_->counters.reserved_ranges;
}

physical_handle host_sim_device::create_physical(std::size_t bytes) {
  impl_->require_vmm("create_physical");
  impl_->require_multiple(bytes, "create_physical size");
  std::lock_guard lock(impl_->mem_mutex);
  if (impl_->fail_countdown > 0 && --impl_->fail_countdown == 0) {
    throw out_of_memory(bytes, "host_sim_device", "injected allocation failure");
  }
  const std::size_t capacity = impl_->options.device_memory_bytes;
  if (impl_->counters.device_bytes_in_use + bytes > capacity) {
    throw out_of_memory(
        bytes, "host_sim_device",
        "simulated device has " +
            format_bytes(static_cast<double>(capacity - impl_->counters.device_bytes_in_use)) +
            " free of " + format_bytes(static_cast<double>(capacity)));
  }
  if (impl_->memory_file < 0) {
    impl_->memory_file = ::memfd_create("vramkit-host-sim-physical", MFD_CLOEXEC);
    if (impl_->memory_file < 0)
      throw cuda_error(2, std::string("memfd_create: ") + std::strerror(errno));
    impl_->memory_file_size = align_up(capacity, impl_->granularity());
    if (::ftruncate(impl_->memory_file, static_cast<off_t>(impl_->memory_file_size)) != 0) {
      throw cuda_error(
          2, std::string("ftruncate of the physical memory file: ") + std::strerror(errno));
    }
    impl_->free_extents.emplace(0, impl_->memory_file_size);
  }
  auto it = impl_->free_extents.begin();
  while (it != impl_->free_extents.end() && it->second < bytes) ++it;
  if (it == impl_->free_extents.end()) {
    throw out_of_memory(bytes, "host_sim_device", "physical memory file fragmented");
  }
  const std::size_t offset = it->first;
  const std::size_t left = it->second - bytes;
  impl_->free_extents.erase(it);
  if (left > 0) impl_->free_extents.emplace(offset + bytes, left);
  if (impl_->options.commit_physical &&
      ::fallocate(impl_->memory_file, 0, static_cast<off_t>(offset), static_cast<off_t>(bytes)) !=
          0) {
    impl_->free_extents.emplace(offset, bytes);  // merged back lazily; the extent is unused
    throw out_of_memory(bytes, "host_sim_device",
                        std::string("fallocate: ") + std::strerror(errno));
  }
  const std::uint64_t h = impl_->next_handle++;
  impl_->physical.emplace(h, impl::physical_extent{offset, bytes, 0, false});
  impl_->counters.physical_bytes += bytes;
  impl_->counters.device_bytes_in_use += bytes;
  impl_->counters.device_bytes_peak =
      std::max(impl_->counters.device_bytes_peak, impl_->counters.device_bytes_in_use);
  return physical_handle{h};
}

void host_sim_device::release_physical(physical_handle handle) noexcept {
  std::lock_guard lock(impl_->mem_mutex);
  auto it = impl_->physical.find(handle.value);
  if (it == impl_->physical.end() || it->second.released) {
    std::fprintf(stderr, "vramkit host_sim_device: release of unknown physical handle %llu\n",
                 static_cast<unsigned long long>(handle.value));
    return;
  }
  it->second.released = true;
  if (it->second.mappings == 0) impl_->drop_extent(handle.value);
}

void host_sim_device::map_physical(void* addr, std::size_t bytes, physical_handle handle) {
  impl_->require_vmm("map_physical");
  impl_->require_multiple(bytes, "map_physical size");
  const auto a = reinterpret_cast<std::uintptr_t>(addr);
  if (a % impl_->granularity() != 0)
    throw cuda_error(1, "host_sim_device: map_physical address not aligned");
  std::lock_guard lock(impl_->mem_mutex);
  auto h = impl_->physical.find(handle.value);
  if (h == impl_->physical.end() || h->second.released) {
    throw cuda_error(1, "host_sim_device: map_physical of an unknown or released handle");
  }
  if (h->second.size != bytes) {
    throw cuda_error(1, "host_sim_device: map_physical must map a whole handle (offset 0)");
  }
  if (!impl_->inside_reservation(a, bytes)) {
    throw cuda_error(1, "host_sim_device: map_physical outside a reserved address range");
  }
  auto next = impl_->mappings.lower_bound(a);
  const bool overlaps_next = next != impl_->mappings.end() && next->first < a + bytes;
  const bool overlaps_prev =
      next != impl_->mappings.begin() && std::prev(next)->first + std::prev(next)->second.size > a;
  if (overlaps_next || overlaps_prev) {
    throw cuda_error(1, "host_sim_device: map_physical over a range that is mapped already");
  }
  void* p = ::mmap(addr, bytes, PROT_NONE, MAP_SHARED | MAP_FIXED, impl_->memory_file,
                   static_cast<off_t>(h->second.offset));
  if (p == MAP_FAILED)
    throw cuda_error(2, std::string("host_sim_device: mmap: ") + std::strerror(errno));
  impl_->mappings.emplace(a, impl::mapping{bytes, handle.value});
  ++h->second.mappings;
  impl_->counters.mapped_bytes += bytes;
  ++impl_->counters.maps;
}

void host_sim_device::set_access(void* addr, std::size_t bytes) {
  impl_->require_vmm("set_access");
  const auto a = reinterpret_cast<std::uintptr_t>(addr);
  std::lock_guard lock(impl_->mem_mutex);
  // The whole range must be mapped, as cuMemSetAccess requires.
  std::uintptr_t at = a;
  auto it = impl_->mappings.upper_bound(a);
  if (it != impl_->mappings.begin()) --it;
  while (at < a + bytes) {
    if (it == impl_->mappings.end() || it->first > at || it->first + it->second.size <= at) {
      throw cuda_error(1, "host_sim_device: set_access over a range that is not wholly mapped");
    }
    at = it->first + it->second.size;
    ++it;
  }
  if (::mprotect(addr, bytes, PROT_READ | PROT_WRITE) != 0) {
    throw cuda_error(2, std::string("host_sim_device: mprotect: ") + std::strerror(errno));
  }
}

void host_sim_device::unmap(void* addr, std::size_t bytes) {
  impl_->require_vmm("unmap");
  const auto a = reinterpret_cast<std::uintptr_t>(addr);
  std::lock_guard lock(impl_->mem_mutex);
  // Only whole mappings, covering the range without gaps.
  std::uintptr_t at = a;
  for (auto it = impl_->mappings.find(a); at < a + bytes; ++it) {
    if (it == impl_->mappings.end() || it->first != at || at + it->second.size > a + bytes) {
      throw cuda_error(1, "host_sim_device: unmap of a range that is not a run of whole mappings");
    }
    at += it->second.size;
  }
  // Re-reserve instead of munmap, so no other thread's mmap can take the hole (mmap(2)).
  void* p = ::mmap(addr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE,
                   -1, 0);
  if (p == MAP_FAILED)
    throw cuda_error(2, std::string("host_sim_device: mmap: ") + std::strerror(errno));
  for (auto it = impl_->mappings.find(a); it != impl_->mappings.end() && it->first < a + bytes;) {
    auto h = impl_->physical.find(it->second.handle);
    impl_->counters.mapped_bytes -= it->second.size;
    ++impl_->counters.unmaps;
    if (--h->second.mappings == 0 && h->second.released) impl_->drop_extent(it->second.handle);
    it = impl_->mappings.erase(it);
  }
}

stream_view host_sim_device::create_stream() { return stream_view{impl_->start_stream()}; }

void host_sim_device::destroy_stream(stream_view stream) noexcept {
  if (stream.handle == nullptr) return;
  auto* s = static_cast<sim_stream*>(stream.handle);
  std::unique_ptr<sim_stream> owned;
  {
    std::lock_guard lock(impl_->streams_mutex);
    auto it = impl_->streams.find(s);
    if (it == impl_->streams.end()) return;
    owned = std::move(it->second);
    impl_->streams.erase(it);
  }
  impl_->stop_stream(s);  // drains queued work first, as cudaStreamDestroy lets it complete
}

void host_sim_device::synchronize(stream_view stream) { impl_->wait_idle(impl_->resolve(stream)); }

void host_sim_device::synchronize_device() {
  std::vector<sim_stream*> all;
  {
    std::lock_guard lock(impl_->streams_mutex);
    for (auto& [ptr, s] : impl_->streams) all.push_back(ptr);
  }
  for (sim_stream* s : all) impl_->wait_idle(s);
}

event_view host_sim_device::create_event() { return event_view{new sim_event}; }

void host_sim_device::destroy_event(event_view event) noexcept {
  // Deferred: a stream may still hold a pending wait on it, as CUDA allows destroying an event
  // whose work is outstanding. Delete once it has completed.
  auto* e = static_cast<sim_event*>(event.handle);
  if (e == nullptr) return;
  {
    std::unique_lock lock(e->m);
    e->cv.wait(lock, [e] { return e->completed >= e->recorded; });
  }
  delete e;
}

void host_sim_device::record_event(event_view event, stream_view stream) {
  auto* e = static_cast<sim_event*>(event.handle);
  std::uint64_t gen = 0;
  {
    std::lock_guard lock(e->m);
    gen = ++e->recorded;
  }
  impl_->enqueue(stream, [e, gen] {
    // Notify under the lock: destroy_event may delete the event as soon as it sees completion.
    std::lock_guard lock(e->m);
    if (e->completed < gen) e->completed = gen;
    e->cv.notify_all();
  });
}

bool host_sim_device::event_done(event_view event) {
  auto* e = static_cast<sim_event*>(event.handle);
  std::lock_guard lock(e->m);
  return e->completed >= e->recorded;
}

void host_sim_device::synchronize_event(event_view event) {
  auto* e = static_cast<sim_event*>(event.handle);
  std::unique_lock lock(e->m);
  const std::uint64_t gen = e->recorded;
  e->cv.wait(lock, [e, gen] { return e->completed >= gen; });
}

void host_sim_device::stream_wait_event(stream_view stream, event_view event) {
  auto* e = static_cast<sim_event*>(event.handle);
  std::uint64_t gen = 0;
  {
    std::lock_guard lock(e->m);
    gen = e->recorded;
  }
  impl_->enqueue(stream, [e, gen] {
    std::unique_lock lock(e->m);
    e->cv.wait(lock, [e, gen] { return e->completed >= gen; });
  });
}

void host_sim_device::launch_host_func(stream_view stream, std::function<void()> fn) {
  impl_->enqueue(stream, std::move(fn));
}

bool host_sim_device::is_device_pointer(const void* ptr) const {
  const auto p = reinterpret_cast<std::uintptr_t>(ptr);
  std::lock_guard lock(impl_->mem_mutex);
  auto it = impl_->device_blocks.upper_bound(p);
  if (it != impl_->device_blocks.begin() && p < std::prev(it)->first + std::prev(it)->second) {
    return true;
  }
  auto m = impl_->mappings.upper_bound(p);
  return m != impl_->mappings.begin() && p < std::prev(m)->first + std::prev(m)->second.size;
}

host_sim_counters host_sim_device::counters() const {
  std::lock_guard lock(impl_->mem_mutex);
  return impl_->counters;
}

void host_sim_device::fail_allocation_after(std::size_t n) {
  std::lock_guard lock(impl_->mem_mutex);
  impl_->fail_countdown = n;
}

void host_sim_device::pause() {
  std::lock_guard lock(impl_->pause_mutex);
  impl_->paused = true;
}

void host_sim_device::resume() {
  {
    std::lock_guard lock(impl_->pause_mutex);
    impl_->paused = false;
  }
  impl_->pause_cv.notify_all();
}

}  // namespace vramkit
