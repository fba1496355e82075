// stream_pool: what the two stream-ordered pools (pool_resource over chunks of an upstream,
// vmm_pool_resource over growable virtual address ranges) share, internal to src/mr: a stream's
// free lists and the bookkeeping of its frees against the event recorded on it, finding a
// stream's state, cross-stream reuse through an event wait, making pending frees complete,
// deallocate with its misuse reports, and the figures every pool reports.
//
// stream_pool_core<Derived, Block> is the base of each pool's impl (CRTP). Block needs the
// members of free_index's blocks plus ptr, requested, seq, stream, owner (whose `small` says the
// class) and is_free() / mark_free() / mark_taken(); Derived provides
//   Block* find_fit(stream_state<Block>*, bool small, std::size_t size)  (a block that may serve)
//   void insert_free(stream_state<Block>*, Block*)  (a freed block back, merged with neighbours)
//   opt.rounding, opt.on_misuse  (its options)
// Every member function expects the lock `m` held unless it says otherwise.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "free_index.hpp"
#include "pointer_map.hpp"
#include "vramkit/core/device_api.hpp"
#include "vramkit/core/units.hpp"
#include "vramkit/mr/detail/stream_pool_resource.hpp"
#include "vramkit/mr/memory_summary.hpp"
#include "vramkit/mr/pool_resource.hpp"

namespace vramkit::mr::detail {

/// One stream's side of a pool.
template <class Block>
struct stream_state {
  stream_view stream;
  event_view event;
  bool has_event = false;
  bool dirty = false;              // frees since the last record of `event`
  std::uint64_t free_seq = 0;      // frees so far
  std::uint64_t recorded_seq = 0;  // free_seq covered by the last record
  std::uint64_t synced_seq = 0;    // free_seq known complete on the device
  free_index<Block> free_small;
  free_index<Block> free_large;
  free_index<Block>& list(bool small) { return small ? free_small : free_large; }
};

template <class Derived, class Block>
struct stream_pool_core {
  using stream_t = stream_state<Block>;

  std::shared_ptr<device_api> api;  // may be null (pool_resource over a host upstream)
  std::string name;
  mutable std::mutex m;
  std::vector<std::unique_ptr<stream_t>> streams;
  stream_t* last_stream = nullptr;
  pointer_map<Block> live;  // blocks handed out, by address
  std::vector<Block*> spare;
  std::size_t free_block_count = 0;
  mutable pool_report stats;

  Derived& derived() { return static_cast<Derived&>(*this); }

  // --- blocks and lists ------------------------------------------------------------------------
  Block* new_block() {
    if (spare.empty()) return new Block;
    Block* b = spare.back();
    spare.pop_back();
    *b = Block{};
    return b;
  }
  void recycle(Block* b) { spare.push_back(b); }

  void list_insert(stream_t* st, Block* b) {
    b->mark_free();
    b->stream = st;
    st->list(b->owner->small).insert(b);
    ++free_block_count;
  }
  void list_erase(Block* b) {
    b->stream->list(b->owner->small).erase(b);
    --free_block_count;
  }

  // Counts a block handed out of st's lists (already split to `size` and erased from them).
  void* count_out(stream_t* st, Block* b, std::size_t bytes) {
    b->mark_taken();
    b->requested = bytes;
    b->stream = st;
    live.insert(b->ptr, b);
    const bool small = b->owner->small;
    stats.allocated_bytes.add(small, static_cast<std::int64_t>(b->size));
    stats.requested_bytes.add(small, static_cast<std::int64_t>(bytes));
    stats.allocations.add(small, 1);
    return reinterpret_cast<void*>(b->ptr);  // NOLINT(performance-no-int-to-ptr)
  }

  // --- streams and events ----------------------------------------------------------------------
  stream_t* stream_for(stream_view s) {
    if (last_stream != nullptr && last_stream->stream == s) return last_stream;
    for (auto& st : streams) {
      if (st->stream == s) {
        last_stream = st.get();
        return last_stream;
      }
    }
    streams.push_back(std::make_unique<stream_t>());
    streams.back()->stream = s;
    last_stream = streams.back().get();
    stats.streams = streams.size();
    return last_stream;
  }

  // Records st's event so that it covers every free made on st so far (no-op without an API).
  void record(stream_t* st) {
    if (api) {
      if (!st->has_event) {
        st->event = api->create_event();
        st->has_event = true;
      }
      api->record_event(st->event, st->stream);
    }
    st->recorded_seq = st->free_seq;
    st->dirty = false;
  }

  // Takes the free lists of another stream that has a fitting block: `st` waits (on the device)
  // for an event recorded on that stream now, then owns all of its free blocks.
  bool steal(stream_t* st, bool small, std::size_t size) {
    for (auto& other_owned : streams) {
      stream_t* other = other_owned.get();
      if (other == st || derived().find_fit(other, small, size) == nullptr) continue;
      record(other);
      if (api) api->stream_wait_event(st->stream, other->event);
      ++stats.cross_stream_waits;
      std::vector<Block*> moved = other->free_small.take_all();
      std::vector<Block*> large = other->free_large.take_all();
      moved.insert(moved.end(), large.begin(), large.end());
      free_block_count -= moved.size();
      // The moved blocks count as freed on st now: st's next event covers them, since st waits
      // for `other`.
      ++st->free_seq;
      st->dirty = true;
      for (Block* b : moved) {
        b->mark_taken();  // not free until re-inserted, so that merges stay correct
        b->seq = st->free_seq;
      }
      for (Block* b : moved) derived().insert_free(st, b);
      return true;
    }
    return false;
  }

  // A block that may serve `size` on st: from st's own lists, else from another stream's (steal).
  Block* fit_or_steal(stream_t* st, bool small, std::size_t size) {
    if (Block* b = derived().find_fit(st, small, size)) return b;
    return steal(st, small, size) ? derived().find_fit(st, small, size) : nullptr;
  }

  // The OOM ladder after growing failed: counts the failure; the first time (`trimmed` false)
  // runs `trim` without the lock and returns true (search again); after that counts an
  // out-of-memory error and returns false with the lock released.
  template <class Trim>
  bool retry_after_trim(std::unique_lock<std::mutex>& lock, bool& trimmed, Trim&& trim) {
    ++stats.upstream_failures;
    if (!trimmed) {
      trimmed = true;
      lock.unlock();
      std::forward<Trim>(trim)();
      lock.lock();
      return true;
    }
    ++stats.out_of_memory_errors;
    lock.unlock();
    return false;
  }

  // Frees whose events have been seen complete no longer need a synchronization.
  void refresh_completed() {
    if (!api) return;
    for (auto& st : streams) {
      if (st->has_event && st->recorded_seq > st->synced_seq && api->event_done(st->event)) {
        st->synced_seq = st->recorded_seq;
      }
    }
  }

  // Makes every free so far known complete by synchronizing the device without the lock (not a
  // per-stream event: a stream passed to deallocate may have been destroyed since). Returns with
  // the lock held; the caller re-reads the state.
  void sync_frees(std::unique_lock<std::mutex>& lock) {
    std::vector<std::pair<stream_t*, std::uint64_t>> pending;
    for (auto& st : streams) {
      if (st->free_seq > st->synced_seq) pending.emplace_back(st.get(), st->free_seq);
    }
    if (pending.empty()) return;
    if (api) {
      lock.unlock();
      api->synchronize_device();
      lock.lock();
    }
    for (auto& [st, seq] : pending) st->synced_seq = std::max(st->synced_seq, seq);
  }

  void destroy_events() {
    if (!api) return;
    for (auto& st : streams) {
      if (st->has_event) api->destroy_event(st->event);
    }
  }

  // The figures with the free space's: free bytes, free blocks, the largest free block.
  [[nodiscard]] pool_report snapshot() const {
    pool_report r = stats;
    r.resource = name;
    r.free_bytes = static_cast<std::size_t>(stats.reserved_bytes.all.current -
                                            stats.allocated_bytes.all.current);
    r.free_blocks = free_block_count;
    std::size_t largest = 0;
    for (const auto& st : streams) {
      largest = std::max({largest, st->free_small.largest(), st->free_large.largest()});
    }
    r.largest_free_block = largest;
    return r;
  }

  // --- under the lock it takes itself ---------------------------------------------------------
  // The lock, taken after every free so far has completed on the device (trim's start).
  [[nodiscard]] std::unique_lock<std::mutex> lock_synced() {
    std::unique_lock lock(m);
    sync_frees(lock);
    return lock;
  }
  // f(the derived pool) under the lock: one of its figures, read consistently.
  template <class F>
  [[nodiscard]] auto locked(F f) const {
    std::lock_guard lock(m);
    return f(static_cast<const Derived&>(*this));
  }
  // The derived pool's figures.
  [[nodiscard]] pool_report locked_report() const {
    std::lock_guard lock(m);
    return static_cast<const Derived&>(*this).snapshot();
  }
  void reset_peaks() const noexcept {
    std::lock_guard lock(m);
    stats.reset_peaks();
  }

  // --- deallocate (takes the lock itself) --------------------------------------------------------
  // Puts the block at ptr (null: nothing) back on `stream`'s list; a pointer this pool did not
  // hand out (or handed out and got back already) or a size that does not round to the block's
  // is reported to opt.on_misuse (stderr when empty), outside the lock, and changes nothing.
  void deallocate_block(void* ptr, std::size_t bytes, stream_view stream) noexcept {
    if (ptr == nullptr) return;
    const std::size_t rounding = derived().opt.rounding;
    const misuse_handler& on_misuse = derived().opt.on_misuse;
    misuse_report misuse;
    {
      std::lock_guard lock(m);
      const std::size_t slot = live.find(reinterpret_cast<std::uintptr_t>(ptr));
      if (slot == pointer_map<Block>::npos) {
        misuse.kind = misuse_report::kind_t::foreign_pointer;
      } else if (Block* b = live.at(slot);
                 align_up(bytes, rounding) != align_up(b->requested, rounding)) {
        misuse.kind = misuse_report::kind_t::wrong_size;
        misuse.expected_bytes = b->requested;
      } else {
        live.erase_at(slot);
        const bool small = b->owner->small;
        stats.allocated_bytes.remove(small, static_cast<std::int64_t>(b->size));
        stats.requested_bytes.remove(small, static_cast<std::int64_t>(b->requested));
        stats.allocations.remove(small, 1);
        stream_t* st = stream_for(stream);
        b->seq = ++st->free_seq;
        st->dirty = true;
        derived().insert_free(st, b);
        return;
      }
      ++stats.misuse_reports;
    }
    misuse.ptr = ptr;
    misuse.bytes = bytes;
    misuse.resource = name;
    try {
      if (on_misuse) {
        on_misuse(misuse);
      } else {
        std::fprintf(stderr, "%s\n", misuse.message().c_str());
      }
    } catch (...) {
      std::fprintf(stderr, "vramkit %s: misuse handler threw\n", name.c_str());
    }
  }
};

// --- the pools' shared members (stream_pool_resource.hpp), on this core --------------------------

template <class State>
std::string stream_pool_resource<State>::name() const {
  return this->impl_->name;
}

template <class State>
pool_report stream_pool_resource<State>::report() const {
  return this->impl_->locked_report();
}

template <class State>
void stream_pool_resource<State>::reset_peak() const noexcept {
  this->impl_->reset_peaks();
}

template <class State>
void stream_pool_resource<State>::do_deallocate(void* ptr, std::size_t bytes, std::size_t,
                                                stream_view stream) noexcept {
  this->impl_->deallocate_block(ptr, bytes, stream);
}

}  // namespace vramkit::mr::detail
