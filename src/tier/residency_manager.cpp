// residency_manager: LRU residency of tiered buffers under a device byte budget. All device memory
// is allocated and freed in stream order on the manager's copy stream, so an eviction's copy back,
// its free and the next copy in into the same memory are ordered by the stream itself.
#include "vramkit/tier/residency_manager.hpp"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <ostream>
#include <sstream>
#include <utility>
#include <vector>

#include "detail/default_resources.hpp"
#include "detail/trace_recorder.hpp"
#include "vramkit/core/error.hpp"
#include "vramkit/core/units.hpp"

namespace vramkit::tier {

const char* to_string(access_mode mode) noexcept {
  switch (mode) {
    case access_mode::read:
      return "read";
    case access_mode::write:
      return "write";
    case access_mode::read_write:
      return "read_write";
  }
  return "unknown";
}

namespace {

constexpr std::size_t device_alignment = mr::default_alignment;

struct buffer_slot {
  std::uint32_t generation = 0;
  bool live = false;
  std::size_t bytes = 0;
  std::size_t device_bytes = 0;  // bytes rounded to the device alignment: what the budget counts
  buffer_flags flags = buffer_flags::none;
  void* host = nullptr;
  void* device = nullptr;
  bool resident = false;
  bool dirty = false;          // the device copy is newer than the host copy
  bool from_prefetch = false;  // resident through a prefetch and not acquired since
  bool ready_pending = false;  // `ready` guards a copy in that may still be running
  event_view ready{};
  std::uint32_t acquire_count = 0;
  std::vector<std::pair<stream_view, std::uint32_t>> acquirers;  // stream -> open acquires
  std::vector<std::pair<stream_view, event_view>> use_events;    // stream -> last release
  std::uint64_t lru_tick = 0;  // key in the LRU map while evictable, 0 otherwise
};

}  // namespace

struct residency_manager::impl {
  device_api& api;
  std::unique_ptr<mr::memory_resource> owned_device;
  std::unique_ptr<mr::memory_resource> owned_pinned;
  mr::memory_resource* device_mr;
  mr::memory_resource* pinned_mr;
  residency_options options;
  owned_stream copy;

  mutable std::mutex mutex;
  std::vector<buffer_slot> slots;
  std::vector<std::uint32_t> free_slots;
  std::vector<event_view> event_pool;
  std::map<std::uint64_t, std::uint32_t> lru;  // tick -> slot, evictable buffers only
  std::uint64_t tick = 0;
  std::size_t evictable_bytes = 0;
  residency_stats counters;
  std::shared_ptr<std::atomic<std::int64_t>> wait_ns =
      std::make_shared<std::atomic<std::int64_t>>(0);
  std::shared_ptr<detail::trace_recorder> trace;

  impl(device_api& a, mr::memory_resource* dev, mr::memory_resource* pin, residency_options o)
      : api(a), device_mr(dev), pinned_mr(pin), options(o), copy(a) {
    if (options.device_budget_bytes == 0) {
      throw logic_error("residency_manager: the device budget must be greater than 0 bytes");
    }
    counters.budget_bytes = options.device_budget_bytes;
    trace =
        std::make_shared<detail::trace_recorder>(options.record_trace ? options.trace_capacity : 0);
  }

  // --- helpers, all called with `mutex` held ----------------------------------------------------

  // Only an event whose last record has completed is reused: a wait already enqueued on it then
  // stays satisfied whichever stream records it next (an event recorded again on another stream
  // must not stand in for its earlier record).
  event_view take_event() {
    for (std::size_t i = event_pool.size(); i-- > 0;) {
      if (api.event_done(event_pool[i])) {
        event_view e = event_pool[i];
        event_pool[i] = event_pool.back();
        event_pool.pop_back();
        return e;
      }
    }
    return api.create_event();
  }
  void give_event(event_view e) {
    if (e.handle != nullptr) event_pool.push_back(e);
  }

  buffer_slot& checked(tiered_buffer b, const char* operation) {
    if (!b.valid() || b.index() >= slots.size() || !slots[b.index()].live ||
        slots[b.index()].generation != b.generation()) {
      throw logic_error(std::string("residency_manager: ") + operation +
                        " of a destroyed or unknown tiered buffer (handle #" +
                        (b.valid() ? std::to_string(b.index()) : std::string("invalid")) +
                        ", generation " + std::to_string(b.generation()) + ")");
    }
    return slots[b.index()];
  }
  const buffer_slot& checked(tiered_buffer b, const char* operation) const {
    return const_cast<impl*>(this)->checked(b, operation);
  }

  bool evictable(const buffer_slot& s) const {
    return s.resident && s.acquire_count == 0 && !has_flag(s.flags, buffer_flags::pinned_in_place);
  }
  void lru_remove(buffer_slot& s) {
    if (s.lru_tick != 0) {
      lru.erase(s.lru_tick);
      evictable_bytes -= s.device_bytes;
      s.lru_tick = 0;
    }
  }
  void lru_touch(buffer_slot& s, std::uint32_t index) {
    lru_remove(s);
    if (evictable(s)) {
      s.lru_tick = ++tick;
      lru.emplace(s.lru_tick, index);
      evictable_bytes += s.device_bytes;
    }
  }

  // The copy stream waits for every recorded use of `s` (its last releases on each stream).
  void copy_waits_for_uses(buffer_slot& s) {
    for (auto& [stream, event] : s.use_events) api.stream_wait_event(copy, event);
  }
  void drop_use_events(buffer_slot& s) {
    for (auto& [stream, event] : s.use_events) give_event(event);
    s.use_events.clear();
  }

  void copy_out(buffer_slot& s, std::uint32_t index) {
    api.copy_async(s.host, s.device, s.bytes, copy_kind::device_to_host, copy);
    trace->copy_enqueued(api, copy, "copy_out", index, s.bytes);
    counters.bytes_d2h += s.bytes;
    ++counters.copies_out;
    s.dirty = false;
  }

  // Frees the device copy in stream order after its last uses, copying it back first when dirty
  // (unless `contents` is discard). The device calls that can fail (the waits, the copy back) come
  // before any state changes: when one throws, the buffer stays resident, evictable and dirty as
  // it was (a wait already enqueued only orders the copy stream more).
  enum class contents { keep, discard };
  void evict(std::uint32_t index, const char* reason, contents what = contents::keep) {
    buffer_slot& s = slots[index];
    copy_waits_for_uses(s);
    if (what == contents::keep && s.dirty && !has_flag(s.flags, buffer_flags::read_only))
      copy_out(s, index);
    lru_remove(s);
    device_mr->deallocate(s.device, s.device_bytes, device_alignment, copy);
    trace->instant(reason, index, s.bytes);
    s.device = nullptr;
    s.resident = false;
    s.dirty = false;
    s.from_prefetch = false;
    s.ready_pending = false;
    counters.resident_bytes -= s.device_bytes;
    if (has_flag(s.flags, buffer_flags::pinned_in_place)) counters.pinned_bytes -= s.device_bytes;
    --counters.resident_buffers;
    drop_use_events(s);
  }

  // Evicts least recently used buffers until `bytes` more fit in the budget; false (and nothing
  // evicted) when even evicting every evictable buffer would not make room.
  bool make_room(std::size_t bytes) {
    const std::size_t budget = options.device_budget_bytes;
    if (bytes > budget) return false;
    if (counters.resident_bytes - evictable_bytes + bytes > budget) return false;
    while (counters.resident_bytes + bytes > budget) {
      evict(lru.begin()->second, "evict");
      ++counters.evictions;
    }
    return true;
  }

  // Allocates the device copy of `s` on the copy stream; on a device out-of-memory (the device is
  // shared), evicts more LRU buffers and retries before giving up.
  void allocate_device(buffer_slot& s) {
    for (;;) {
      try {
        s.device = device_mr->allocate(s.device_bytes, device_alignment, copy);
        return;
      } catch (const out_of_memory&) {
        if (lru.empty()) throw;
        evict(lru.begin()->second, "evict");
        ++counters.evictions;
      }
    }
  }

  // Makes `s` resident: allocation and, unless `fill` is false, the copy in, then `ready`. All or
  // nothing: when the copy or the event fails, the memory goes back (in stream order, after
  // whatever was enqueued into it) and `s` stays as it was, so no later acquire trusts a device
  // copy that was never filled or a `ready` that was never recorded.
  void bring_in(buffer_slot& s, std::uint32_t index, bool fill, const char* what) {
    allocate_device(s);
    try {
      if (fill) {
        api.copy_async(s.device, s.host, s.bytes, copy_kind::host_to_device, copy);
        trace->copy_enqueued(api, copy, what, index, s.bytes);
      }
      if (s.ready.handle == nullptr) s.ready = take_event();
      api.record_event(s.ready, copy);
    } catch (...) {
      device_mr->deallocate(s.device, s.device_bytes, device_alignment, copy);
      s.device = nullptr;
      throw;
    }
    if (fill) {
      counters.bytes_h2d += s.bytes;
      ++counters.copies_in;
    }
    s.resident = true;
    counters.resident_bytes += s.device_bytes;
    counters.peak_resident_bytes = std::max(counters.peak_resident_bytes, counters.resident_bytes);
    if (has_flag(s.flags, buffer_flags::pinned_in_place)) counters.pinned_bytes += s.device_bytes;
    ++counters.resident_buffers;
    s.ready_pending = true;
  }

  std::string summary_locked() const {
    std::ostringstream o;
    const auto& c = counters;
    auto b = [](std::size_t v) { return format_bytes(static_cast<double>(v)); };
    o << "residency_manager summary\n"
      << "  budget    " << b(c.budget_bytes) << "\n"
      << "  resident  " << b(c.resident_bytes) << " in " << c.resident_buffers << " of "
      << c.buffers << " buffers (peak " << b(c.peak_resident_bytes) << ")\n"
      << "  acquired  " << b(c.acquired_bytes) << "\n"
      << "  pinned    " << b(c.pinned_bytes) << " (pinned in place, never evicted)\n"
      << "  evictable " << b(evictable_bytes) << "\n"
      << "  acquires  " << c.acquires << " (hits " << c.hits << ", misses " << c.misses
      << ", prefetch hits " << c.prefetch_hits << "), evictions " << c.evictions << "\n"
      << "  moved     " << b(c.bytes_h2d) << " host->device, " << b(c.bytes_d2h) << " device->host";
    return o.str();
  }

  // Makes `stream` wait for the copy that brings `s` in (while it may still run) and for earlier
  // uses on other streams (a write there, a read here, or the reverse). Throws when a wait cannot
  // be enqueued; waits already enqueued only order `stream` more.
  void order_after_copy_and_uses(buffer_slot& s, stream_view stream) {
    if (s.ready_pending) {
      if (options.measure_stream_wait) {
        auto arrived = std::make_shared<std::atomic<std::int64_t>>(0);
        api.launch_host_func(stream, [arrived] { arrived->store(detail::now_ns()); });
        api.stream_wait_event(stream, s.ready);
        api.launch_host_func(stream, [arrived, total = wait_ns] {
          total->fetch_add(std::max<std::int64_t>(0, detail::now_ns() - arrived->load()));
        });
      } else {
        api.stream_wait_event(stream, s.ready);
      }
      ++counters.stream_waits;
    }
    for (auto& [other, event] : s.use_events) {
      if (!(other == stream)) api.stream_wait_event(stream, event);
    }
  }

  static void remove_acquirer(buffer_slot& s, stream_view stream) {
    for (auto it = s.acquirers.begin(); it != s.acquirers.end(); ++it) {
      if (it->first == stream) {
        if (--it->second == 0) s.acquirers.erase(it);
        return;
      }
    }
  }
};

residency_manager::residency_manager(device_api& api, mr::memory_resource& device_memory,
                                     mr::memory_resource& pinned_memory, residency_options options)
    : impl_(std::make_unique<impl>(api, &device_memory, &pinned_memory, options)) {
  if (device_memory.kind() != mr::memory_kind::device) {
    throw logic_error("residency_manager: the device resource '" + device_memory.name() +
                      "' does not serve device memory");
  }
}

residency_manager::residency_manager(device_api& api, residency_options options)
    : impl_(std::make_unique<impl>(api, nullptr, nullptr, options)) {
  impl_->owned_device = detail::make_device_resource(api);
  impl_->owned_pinned = detail::make_pinned_resource(api);
  impl_->device_mr = impl_->owned_device.get();
  impl_->pinned_mr = impl_->owned_pinned.get();
}

residency_manager::~residency_manager() {
  impl& m = *impl_;
  std::vector<std::pair<void*, std::size_t>> homes;
  {
    std::lock_guard lock(m.mutex);
    for (std::uint32_t i = 0; i < m.slots.size(); ++i) {
      buffer_slot& s = m.slots[i];
      if (!s.live) continue;
      if (s.resident) {
        try {
          m.copy_waits_for_uses(s);
        } catch (const std::exception&) {
          // The copy stream cannot wait for the last uses: wait for them here instead.
          for (auto& [stream, event] : s.use_events) {
            try {
              m.api.synchronize_event(event);
            } catch (const std::exception& e) {
              std::fprintf(stderr,
                           "vramkit: residency_manager: a use event failed at teardown: %s\n",
                           e.what());
            }
          }
        }
        m.device_mr->deallocate(s.device, s.device_bytes, device_alignment, m.copy);
      }
      m.drop_use_events(s);
      m.give_event(s.ready);
      homes.emplace_back(s.host, s.bytes);
    }
  }
  try {
    m.api.synchronize(m.copy);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "vramkit: residency_manager: copy stream failed at teardown: %s\n",
                 e.what());
  }
  for (auto& [host, bytes] : homes) m.pinned_mr->deallocate(host, bytes);
  for (event_view e : m.event_pool) m.api.destroy_event(e);
}

tiered_buffer residency_manager::create(std::size_t bytes, buffer_flags flags) {
  if (bytes == 0) throw logic_error("residency_manager: create of a zero-byte buffer");
  // Pinned allocation blocks (and is slow): outside the lock.
  void* host = impl_->pinned_mr->allocate(bytes, device_alignment);
  std::memset(host, 0, bytes);
  std::lock_guard lock(impl_->mutex);
  impl& m = *impl_;
  std::uint32_t index = 0;
  if (!m.free_slots.empty()) {
    index = m.free_slots.back();
    m.free_slots.pop_back();
  } else {
    index = static_cast<std::uint32_t>(m.slots.size());
    m.slots.emplace_back();
  }
  buffer_slot& s = m.slots[index];
  const std::uint32_t generation = s.generation;
  s = buffer_slot{};
  s.generation = generation;
  s.live = true;
  s.bytes = bytes;
  s.device_bytes = align_up(bytes, device_alignment);
  s.flags = flags;
  s.host = host;
  ++m.counters.buffers;
  return {index, generation};
}

void residency_manager::destroy(tiered_buffer buffer) {
  impl& m = *impl_;
  void* host = nullptr;
  std::size_t bytes = 0;
  event_view done{};
  {
    std::lock_guard lock(m.mutex);
    buffer_slot& s = m.checked(buffer, "destroy");
    if (s.acquire_count > 0) {
      throw logic_error("residency_manager: destroy of tiered buffer #" +
                        std::to_string(buffer.index()) + " while it is acquired (" +
                        std::to_string(s.acquire_count) + " open acquires)");
    }
    // A copy still queued on the copy stream may read the home: free it once the stream is past
    // this point. Recorded first, so that a failure leaves the buffer as it was; what the eviction
    // enqueues after it never reads the home (its contents die with it: no copy back).
    done = m.take_event();
    try {
      m.api.record_event(done, m.copy);
      if (s.resident) m.evict(buffer.index(), "destroy", impl::contents::discard);
    } catch (...) {
      m.give_event(done);
      throw;
    }
    m.drop_use_events(s);
    m.give_event(s.ready);
    s.ready = {};
    host = s.host;
    bytes = s.bytes;
    s.host = nullptr;
    s.live = false;
    ++s.generation;
    m.free_slots.push_back(buffer.index());
    --m.counters.buffers;
  }
  m.api.synchronize_event(done);
  m.pinned_mr->deallocate(host, bytes, device_alignment);
  std::lock_guard lock(m.mutex);
  m.give_event(done);
}

void* residency_manager::acquire(tiered_buffer buffer, stream_view stream, access_mode access) {
  impl& m = *impl_;
  std::lock_guard lock(m.mutex);
  buffer_slot& s = m.checked(buffer, "acquire");
  const std::uint32_t index = buffer.index();
  if (access != access_mode::read && has_flag(s.flags, buffer_flags::read_only)) {
    throw logic_error("residency_manager: acquire for " + std::string(to_string(access)) +
                      " of read-only tiered buffer #" + std::to_string(index));
  }
  if (!s.resident) {
    if (s.device_bytes > m.options.device_budget_bytes) {
      throw out_of_memory(
          s.bytes, "residency_manager",
          "the buffer is larger than the whole device budget\n" + m.summary_locked());
    }
    if (!m.make_room(s.device_bytes)) {
      throw out_of_memory(
          s.bytes, "residency_manager",
          "acquired and pinned-in-place buffers leave no room for it\n" + m.summary_locked());
    }
    m.bring_in(s, index, access != access_mode::write, "copy_in");
    ++m.counters.misses;
  } else {
    ++m.counters.hits;
    if (s.from_prefetch) ++m.counters.prefetch_hits;
    if (s.ready_pending && m.api.event_done(s.ready)) s.ready_pending = false;
  }
  try {
    m.order_after_copy_and_uses(s, stream);
  } catch (...) {
    // The buffer may have come in above: it stays resident (its `ready` recorded), evictable.
    if (s.acquire_count == 0) m.lru_touch(s, index);
    throw;
  }
  ++m.counters.acquires;
  s.from_prefetch = false;
  m.lru_remove(s);
  if (s.acquire_count == 0) m.counters.acquired_bytes += s.device_bytes;
  ++s.acquire_count;
  bool found = false;
  for (auto& [st, n] : s.acquirers) {
    if (st == stream) {
      ++n;
      found = true;
    }
  }
  if (!found) s.acquirers.emplace_back(stream, 1);
  if (access != access_mode::read) s.dirty = true;
  return s.device;
}

void residency_manager::release(tiered_buffer buffer, stream_view stream) {
  impl& m = *impl_;
  std::lock_guard lock(m.mutex);
  buffer_slot& s = m.checked(buffer, "release");
  const bool open = std::any_of(s.acquirers.begin(), s.acquirers.end(),
                                [stream](const auto& a) { return a.first == stream; });
  if (!open) {
    throw logic_error("residency_manager: release of tiered buffer #" +
                      std::to_string(buffer.index()) + " on a stream without a matching acquire");
  }
  // A fresh event takes the stream's place only once recorded: when the record fails, the acquire
  // stays open and the last use event keeps meaning what it did (an event whose record failed
  // would let an eviction skip this use).
  const event_view use = m.take_event();
  try {
    m.api.record_event(use, stream);
  } catch (...) {
    m.give_event(use);
    throw;
  }
  bool replaced = false;
  for (auto& [st, e] : s.use_events) {
    if (st == stream) {
      m.give_event(e);
      e = use;
      replaced = true;
    }
  }
  if (!replaced) s.use_events.emplace_back(stream, use);
  impl::remove_acquirer(s, stream);
  if (--s.acquire_count == 0) m.counters.acquired_bytes -= s.device_bytes;
  m.lru_touch(s, buffer.index());
}

void residency_manager::prefetch(tiered_buffer buffer, stream_view) {
  impl& m = *impl_;
  std::lock_guard lock(m.mutex);
  buffer_slot& s = m.checked(buffer, "prefetch");
  if (s.resident) {
    if (s.acquire_count == 0) m.lru_touch(s, buffer.index());
    return;
  }
  if (!m.make_room(s.device_bytes)) {
    ++m.counters.prefetches_dropped;
    m.trace->instant("prefetch_dropped", buffer.index(), s.bytes);
    return;
  }
  try {
    m.bring_in(s, buffer.index(), true, "prefetch");
  } catch (const out_of_memory&) {
    ++m.counters.prefetches_dropped;
    m.trace->instant("prefetch_dropped", buffer.index(), s.bytes);
    return;
  }
  s.from_prefetch = true;
  ++m.counters.prefetches;
  m.lru_touch(s, buffer.index());
}

void* residency_manager::host_data(tiered_buffer buffer, access_mode access) {
  impl& m = *impl_;
  event_view done{};
  void* host = nullptr;
  {
    std::lock_guard lock(m.mutex);
    buffer_slot& s = m.checked(buffer, "host_data");
    if (s.acquire_count > 0) {
      throw logic_error("residency_manager: host access to tiered buffer #" +
                        std::to_string(buffer.index()) + " while it is acquired on the device");
    }
    host = s.host;
    done = m.take_event();
    if (s.resident) {
      try {
        if (access != access_mode::read) {
          m.evict(buffer.index(), "drop_for_host_write");  // copies back first when dirty
        } else if (s.dirty) {
          m.copy_waits_for_uses(s);
          m.copy_out(s, buffer.index());
        }
      } catch (...) {
        m.give_event(done);
        throw;
      }
    }
    // When this record fails, a copy back may be queued with `dirty` cleared: the next call's
    // record still orders after it, so the home it returns is up to date.
    try {
      m.api.record_event(done, m.copy);
    } catch (...) {
      m.give_event(done);
      throw;
    }
  }
  m.api.synchronize_event(done);
  std::lock_guard lock(m.mutex);
  m.give_event(done);
  return host;
}

std::size_t residency_manager::size(tiered_buffer buffer) const {
  std::lock_guard lock(impl_->mutex);
  return impl_->checked(buffer, "size").bytes;
}

bool residency_manager::is_resident(tiered_buffer buffer) const {
  std::lock_guard lock(impl_->mutex);
  return impl_->checked(buffer, "is_resident").resident;
}

residency_stats residency_manager::stats() const {
  std::lock_guard lock(impl_->mutex);
  residency_stats s = impl_->counters;
  s.stream_wait = std::chrono::nanoseconds(impl_->wait_ns->load());
  return s;
}

void residency_manager::reset_counters() {
  std::lock_guard lock(impl_->mutex);
  residency_stats& c = impl_->counters;
  residency_stats fresh;
  fresh.budget_bytes = c.budget_bytes;
  fresh.resident_bytes = c.resident_bytes;
  fresh.peak_resident_bytes = c.resident_bytes;
  fresh.acquired_bytes = c.acquired_bytes;
  fresh.pinned_bytes = c.pinned_bytes;
  fresh.buffers = c.buffers;
  fresh.resident_buffers = c.resident_buffers;
  c = fresh;
  impl_->wait_ns->store(0);
}

std::string residency_manager::summary() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->summary_locked();
}

void residency_manager::synchronize() { impl_->api.synchronize(impl_->copy); }

void residency_manager::write_trace(std::ostream& out) const { impl_->trace->write_json(out); }
std::size_t residency_manager::trace_size() const { return impl_->trace->size(); }
std::size_t residency_manager::trace_dropped() const { return impl_->trace->dropped(); }
stream_view residency_manager::copy_stream() const noexcept { return impl_->copy.view(); }

}  // namespace vramkit::tier
