// pinned_host_pool: per size class, a list of cached blocks each gated by the event recorded at
// its free. Lock discipline: `m` guards impl; upstream calls and host waits run without it.
#include "vramkit/mr/pinned_host_pool.hpp"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "vramkit/core/error.hpp"
#include "vramkit/mr/pool_resource.hpp"

namespace vramkit::mr {
namespace {

struct cached_block {
  void* ptr = nullptr;
  event_view event;  // null handle: reusable at once
};

}  // namespace

struct pimpl::pinned_host_pool_state {
  std::shared_ptr<memory_resource> upstream;
  std::shared_ptr<device_api> api;
  pinned_pool_options opt;
  std::string name;
  mutable std::mutex m;
  std::map<std::size_t, std::vector<cached_block>> cache;  // class size -> blocks
  struct live_info {
    std::size_t cls;
    std::size_t requested;
  };
  std::unordered_map<void*, live_info> live;
  std::vector<event_view> spare_events;
  std::size_t held = 0;  // in use + cached
  std::size_t cached = 0;
  mutable pool_report stats;

  bool small(std::size_t cls) const { return cls <= MiB; }

  bool ready(const cached_block& b) {
    return b.event.handle == nullptr || api->event_done(b.event);
  }

  void recycle_event(event_view e) {
    if (e.handle != nullptr) spare_events.push_back(e);
  }

  // Removes cached blocks whose frees have completed until `need` more bytes fit under the cap.
  std::vector<std::pair<void*, std::size_t>> evict_for(std::size_t need) {
    std::vector<std::pair<void*, std::size_t>> out;
    for (auto it = cache.rbegin(); it != cache.rend() && held + need > opt.byte_cap; ++it) {
      auto& list = it->second;
      for (std::size_t i = 0; i < list.size() && held + need > opt.byte_cap;) {
        if (!ready(list[i])) {
          ++i;
          continue;
        }
        out.emplace_back(list[i].ptr, it->first);
        recycle_event(list[i].event);
        held -= it->first;
        cached -= it->first;
        stats.reserved_bytes.remove(small(it->first), static_cast<std::int64_t>(it->first));
        stats.chunks.remove(small(it->first), 1);
        ++stats.upstream_frees;
        list[i] = list.back();
        list.pop_back();
      }
    }
    return out;
  }

  void release(const std::vector<std::pair<void*, std::size_t>>& blocks) {
    for (const auto& [p, size] : blocks) upstream->deallocate(p, size, default_alignment, {});
  }
};

pinned_host_pool::pinned_host_pool(std::shared_ptr<memory_resource> upstream,
                                   std::shared_ptr<device_api> api, pinned_pool_options options) {
  if (!upstream) throw logic_error("pinned_host_pool: upstream is null");
  if (!is_power_of_two(options.pow2_max) || options.large_granularity == 0) {
    throw logic_error(
        "pinned_host_pool: pow2_max must be a power of two and large_granularity > 0");
  }
  impl_->upstream = std::move(upstream);
  impl_->api = std::move(api);
  impl_->opt = options;
  impl_->name = "pinned_pool(" + impl_->upstream->name() + ")";
  impl_->stats.resource = impl_->name;
}

pinned_host_pool::~pinned_host_pool() {
  impl& s = *impl_;
  std::vector<std::pair<void*, std::size_t>> all;
  {
    std::lock_guard lock(s.m);
    for (auto& [cls, list] : s.cache) {
      for (auto& b : list) {
        if (b.event.handle != nullptr) {
          try {
            s.api->synchronize_event(b.event);
          } catch (const std::exception& e) {
            std::fprintf(stderr, "vramkit %s: %s\n", s.name.c_str(), e.what());
          }
          s.api->destroy_event(b.event);
        }
        all.emplace_back(b.ptr, cls);
      }
    }
    s.cache.clear();
    for (event_view e : s.spare_events) s.api->destroy_event(e);
    s.spare_events.clear();
  }
  s.release(all);
}

std::string pinned_host_pool::name() const { return impl_->name; }
const memory_resource* pinned_host_pool::upstream() const noexcept { return impl_->upstream.get(); }

std::size_t pinned_host_pool::class_size(std::size_t bytes) const noexcept {
  if (bytes <= 512) return 512;
  if (bytes <= impl_->opt.pow2_max) return std::bit_ceil(bytes);
  return align_up(bytes, impl_->opt.large_granularity);
}

void* pinned_host_pool::do_allocate(std::size_t bytes, std::size_t alignment, stream_view) {
  if (bytes == 0) return nullptr;
  if (!is_power_of_two(alignment) || alignment > default_alignment) {
    throw logic_error(impl_->name + ": alignment " + std::to_string(alignment) +
                      " not supported (power of two up to 256)");
  }
  impl& s = *impl_;
  const std::size_t cls = class_size(bytes);
  const bool small = s.small(cls);
  std::unique_lock lock(s.m);
  auto account = [&](void* p) {
    s.live.emplace(p, impl::live_info{cls, bytes});
    s.stats.allocated_bytes.add(small, static_cast<std::int64_t>(cls));
    s.stats.requested_bytes.add(small, static_cast<std::int64_t>(bytes));
    s.stats.allocations.add(small, 1);
    return p;
  };
  if (auto it = s.cache.find(cls); it != s.cache.end()) {
    auto& list = it->second;
    for (std::size_t i = 0; i < list.size(); ++i) {
      if (!s.ready(list[i])) continue;
      void* p = list[i].ptr;
      s.recycle_event(list[i].event);
      list[i] = list.back();
      list.pop_back();
      s.cached -= cls;
      return account(p);
    }
  }
  auto evicted = s.evict_for(cls);
  if (s.held + cls > s.opt.byte_cap && s.api) {
    // Cached blocks whose copies are still running would make room once done: wait for them
    // (without the lock), then evict again.
    std::vector<event_view> pending;
    for (auto& [c, list] : s.cache) {
      for (auto& b : list) {
        if (b.event.handle != nullptr) pending.push_back(b.event);
      }
    }
    if (!pending.empty()) {
      lock.unlock();
      for (event_view e : pending) s.api->synchronize_event(e);
      lock.lock();
      auto more = s.evict_for(cls);
      evicted.insert(evicted.end(), more.begin(), more.end());
    }
  }
  if (s.held + cls > s.opt.byte_cap) {
    ++s.stats.out_of_memory_errors;
    lock.unlock();
    s.release(evicted);
    throw out_of_memory(bytes, s.name,
                        "byte cap of " + std::to_string(s.opt.byte_cap) + " bytes reached\n" +
                            memory_summary(*this));
  }
  s.held += cls;  // reserve before unlocking so concurrent callers respect the cap
  lock.unlock();
  s.release(evicted);
  void* p = nullptr;
  try {
    p = s.upstream->allocate(cls, default_alignment, {});
  } catch (const std::bad_alloc& e) {
    lock.lock();
    s.held -= cls;
    ++s.stats.out_of_memory_errors;
    ++s.stats.upstream_failures;
    lock.unlock();
    throw out_of_memory(bytes, s.name, std::string("upstream: ") + e.what());
  }
  lock.lock();
  s.stats.reserved_bytes.add(small, static_cast<std::int64_t>(cls));
  s.stats.chunks.add(small, 1);
  ++s.stats.upstream_allocations;
  return account(p);
}

void pinned_host_pool::do_deallocate(void* ptr, std::size_t bytes, std::size_t,
                                     stream_view stream) noexcept {
  if (ptr == nullptr) return;
  impl& s = *impl_;
  misuse_report misuse;
  {
    std::lock_guard lock(s.m);
    auto it = s.live.find(ptr);
    if (it == s.live.end()) {
      misuse.kind = misuse_report::kind_t::foreign_pointer;
    } else if (class_size(bytes) != it->second.cls) {
      misuse.kind = misuse_report::kind_t::wrong_size;
      misuse.expected_bytes = it->second.requested;
    } else {
      const std::size_t cls = it->second.cls;
      const bool small = s.small(cls);
      s.stats.allocated_bytes.remove(small, static_cast<std::int64_t>(cls));
      s.stats.requested_bytes.remove(small, static_cast<std::int64_t>(it->second.requested));
      s.stats.allocations.remove(small, 1);
      s.live.erase(it);
      cached_block b{ptr, {}};
      if (s.api) {
        try {
          if (s.spare_events.empty()) {
            b.event = s.api->create_event();
          } else {
            b.event = s.spare_events.back();
            s.spare_events.pop_back();
          }
          s.api->record_event(b.event, stream);
        } catch (const std::exception& e) {
          // Without an event the block cannot be gated: wait for the stream instead.
          std::fprintf(stderr, "vramkit %s: recording a free event failed (%s)\n", s.name.c_str(),
                       e.what());
          try {
            s.api->synchronize(stream);
          } catch (...) {
          }
          s.recycle_event(b.event);
          b.event = {};
        }
      }
      s.cache[cls].push_back(b);
      s.cached += cls;
      return;
    }
    ++s.stats.misuse_reports;
  }
  misuse.ptr = ptr;
  misuse.bytes = bytes;
  misuse.resource = s.name;
  std::fprintf(stderr, "%s\n", misuse.message().c_str());
}

std::size_t pinned_host_pool::trim() {
  impl& s = *impl_;
  std::vector<event_view> pending;
  {
    std::lock_guard lock(s.m);
    for (auto& [cls, list] : s.cache) {
      for (auto& b : list) {
        if (b.event.handle != nullptr) pending.push_back(b.event);
      }
    }
  }
  // Events are only re-recorded after their block left the cache; waiting on a recycled one is
  // harmless (it covers at least as much).
  for (event_view e : pending) s.api->synchronize_event(e);
  std::vector<std::pair<void*, std::size_t>> out;
  {
    std::lock_guard lock(s.m);
    const std::size_t cap = s.opt.byte_cap;
    s.opt.byte_cap = 0;  // evict everything ready
    out = s.evict_for(0);
    s.opt.byte_cap = cap;
    ++s.stats.trims;
  }
  s.release(out);
  std::size_t bytes = 0;
  for (const auto& b : out) bytes += b.second;
  return bytes;
}

pool_report pinned_host_pool::report() const {
  std::lock_guard lock(impl_->m);
  pool_report r = impl_->stats;
  r.free_bytes = impl_->cached;
  std::size_t blocks = 0;
  std::size_t largest = 0;
  for (const auto& [cls, list] : impl_->cache) {
    blocks += list.size();
    if (!list.empty()) largest = std::max(largest, cls);
  }
  r.free_blocks = blocks;
  r.largest_free_block = largest;
  return r;
}

std::size_t pinned_host_pool::cached_bytes() const {
  std::lock_guard lock(impl_->m);
  return impl_->cached;
}

void pinned_host_pool::describe(summary_builder& builder) const {
  builder.add_layer(impl_->name);
  builder.add(report());
}

void pinned_host_pool::reset_peak() const noexcept {
  std::lock_guard lock(impl_->m);
  impl_->stats.reset_peaks();
}

}  // namespace vramkit::mr
