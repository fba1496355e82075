// pool_resource: per-stream free lists of blocks carved from upstream chunks; see the header for
// the contract. Lock discipline: `m` guards every field of impl; it is released around upstream
// allocate/free and host synchronization, and the state is re-read after re-locking.
#include "vramkit/mr/pool_resource.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cinttypes>
#include <cstdio>
#include <mutex>
#include <vector>

#include "free_index.hpp"
#include "mr/nvtx_range.hpp"
#include "pointer_map.hpp"
#include "vramkit/core/error.hpp"

namespace vramkit::mr {
namespace {

struct stream_state;
struct chunk;

struct block {
  std::uintptr_t ptr = 0;
  std::size_t size = 0;
  std::size_t requested = 0;  // bytes the caller asked for (allocated blocks)
  block* prev = nullptr;      // address neighbours inside the chunk
  block* next = nullptr;
  block* free_prev = nullptr;  // neighbours in a free_index bin (free blocks)
  block* free_next = nullptr;
  chunk* owner = nullptr;
  stream_state* stream = nullptr;  // free list holding the block (free) or allocating stream
  std::uint64_t seq = 0;           // the owning stream's free sequence number at the free
  std::uint32_t bin = 0;
  bool free = false;
};

using free_index = detail::free_index<block>;

struct chunk {
  std::uintptr_t base = 0;
  std::size_t size = 0;
  bool small = false;
  block* first = nullptr;
  std::size_t index = 0;  // position in impl::chunks
};

struct stream_state {
  stream_view stream;
  event_view event;
  bool has_event = false;
  bool dirty = false;              // frees since the last record of `event`
  std::uint64_t free_seq = 0;      // frees so far
  std::uint64_t recorded_seq = 0;  // free_seq covered by the last record
  std::uint64_t synced_seq = 0;    // free_seq known complete on the device
  free_index free_small;
  free_index free_large;
  free_index& list(bool small) { return small ? free_small : free_large; }
};

struct released_chunk {
  void* ptr;
  std::size_t size;
  stream_view stream;
};

}  // namespace

std::string misuse_report::message() const {
  char line[256];
  if (kind == kind_t::foreign_pointer) {
    std::snprintf(line, sizeof line,
                  "deallocate of %p (%zu bytes): pointer not allocated by this resource (foreign "
                  "or already freed); ignored",
                  ptr, bytes);
  } else {
    std::snprintf(line, sizeof line,
                  "deallocate of %p with %zu bytes but it was allocated with %zu bytes; block left "
                  "allocated",
                  ptr, bytes, expected_bytes);
  }
  return "vramkit " + resource + ": " + line;
}

struct pool_resource::impl {
  std::shared_ptr<memory_resource> upstream;
  std::shared_ptr<device_api> api;
  pool_options opt;
  std::string name;

  mutable std::mutex m;
  std::vector<std::unique_ptr<stream_state>> streams;
  stream_state* last_stream = nullptr;
  detail::pointer_map<block> live;  // blocks handed out, by address
  std::vector<chunk*> chunks;
  std::vector<block*> spare;
  std::size_t next_large_chunk = 0;
  std::size_t free_block_count = 0;
  mutable pool_report stats;

  // --- blocks and lists (lock held) ----------------------------------------------------------
  block* new_block() {
    if (spare.empty()) return new block;
    block* b = spare.back();
    spare.pop_back();
    *b = block{};
    return b;
  }
  void recycle(block* b) { spare.push_back(b); }

  void list_insert(stream_state* st, block* b) {
    b->free = true;
    b->stream = st;
    st->list(b->owner->small).insert(b);
    ++free_block_count;
  }
  void list_erase(block* b) {
    b->stream->list(b->owner->small).erase(b);
    --free_block_count;
  }

  // Inserts a newly free block into st's list, merging it with free neighbours of the same list.
  void insert_free(stream_state* st, block* b) {
    if (block* p = b->prev; p != nullptr && p->free && p->stream == st) {
      list_erase(p);
      p->size += b->size;
      p->next = b->next;
      if (b->next != nullptr) b->next->prev = p;
      p->seq = std::max(p->seq, b->seq);
      recycle(b);
      b = p;
    }
    if (block* n = b->next; n != nullptr && n->free && n->stream == st) {
      list_erase(n);
      b->size += n->size;
      b->next = n->next;
      if (n->next != nullptr) n->next->prev = b;
      b->seq = std::max(b->seq, n->seq);
      recycle(n);
    }
    list_insert(st, b);
  }

  block* find_fit(stream_state* st, bool small, std::size_t size) {
    block* b = st->list(small).find(size);
    if (b == nullptr) return nullptr;
    if (!small) {
      // Oversize blocks (>= max_split) serve only oversize requests that waste little of them.
      if (size < opt.max_split && b->size >= opt.max_split) return nullptr;
      if (size >= opt.max_split && b->size - size >= opt.max_oversize_waste) return nullptr;
    }
    return b;
  }

  bool should_split(const block* b, std::size_t size) const {
    const std::size_t rest = b->size - size;
    if (b->owner->small) return rest >= opt.rounding;
    if (b->size >= opt.max_split) return false;
    return rest >= std::max(opt.large_min_split_remainder, opt.rounding);
  }

  void* hand_out(stream_state* st, block* b, std::size_t size, std::size_t bytes) {
    list_erase(b);
    if (should_split(b, size)) {
      block* rest = new_block();
      rest->ptr = b->ptr + size;
      rest->size = b->size - size;
      rest->owner = b->owner;
      rest->prev = b;
      rest->next = b->next;
      rest->seq = b->seq;
      if (b->next != nullptr) b->next->prev = rest;
      b->next = rest;
      b->size = size;
      list_insert(st, rest);
    }
    b->free = false;
    b->requested = bytes;
    b->stream = st;
    live.insert(b->ptr, b);
    const bool small = b->owner->small;
    stats.allocated_bytes.add(small, static_cast<std::int64_t>(b->size));
    stats.requested_bytes.add(small, static_cast<std::int64_t>(bytes));
    stats.allocations.add(small, 1);
    return reinterpret_cast<void*>(b->ptr);
  }

  // --- streams and events (lock held) --------------------------------------------------------
  stream_state* stream_for(stream_view s) {
    if (last_stream != nullptr && last_stream->stream == s) return last_stream;
    for (auto& st : streams) {
      if (st->stream == s) {
        last_stream = st.get();
        return last_stream;
      }
    }
    streams.push_back(std::make_unique<stream_state>());
    streams.back()->stream = s;
    last_stream = streams.back().get();
    stats.streams = streams.size();
    return last_stream;
  }

  // Records st's event so that it covers every free made on st so far (no-op without an API).
  void record(stream_state* st) {
    if (!api) {
      st->recorded_seq = st->free_seq;
      st->dirty = false;
      return;
    }
    if (!st->has_event) {
      st->event = api->create_event();
      st->has_event = true;
    }
    api->record_event(st->event, st->stream);
    st->recorded_seq = st->free_seq;
    st->dirty = false;
  }

  // Takes the free lists of another stream that has a fitting block: `st` waits (on the device)
  // for an event recorded on that stream now, then owns all of its free blocks.
  bool steal(stream_state* st, bool small, std::size_t size) {
    for (auto& other_owned : streams) {
      stream_state* other = other_owned.get();
      if (other == st || find_fit(other, small, size) == nullptr) continue;
      record(other);
      if (api) api->stream_wait_event(st->stream, other->event);
      ++stats.cross_stream_waits;
      std::vector<block*> moved = other->free_small.take_all();
      std::vector<block*> large = other->free_large.take_all();
      moved.insert(moved.end(), large.begin(), large.end());
      free_block_count -= moved.size();
      // The moved blocks count as freed on st now: st's next event covers them, since st waits
      // for `other`.
      ++st->free_seq;
      st->dirty = true;
      for (block* b : moved) {
        b->free = false;
        b->seq = st->free_seq;
      }
      for (block* b : moved) insert_free(st, b);
      return true;
    }
    return false;
  }

  // --- chunks (lock held) --------------------------------------------------------------------
  std::size_t chunk_size_for(bool small, std::size_t size) {
    if (small) return opt.small_chunk_size;
    if (size >= opt.large_exact_size || size >= opt.max_split) {
      return align_up(size, opt.chunk_rounding);
    }
    std::size_t chosen = std::max(next_large_chunk, align_up(size, opt.chunk_rounding));
    // A chunk for a request below max_split must stay below it too, or none of it could serve
    // such requests after the first.
    if (chosen >= opt.max_split) {
      const std::size_t cap = (opt.max_split - 1) / opt.chunk_rounding * opt.chunk_rounding;
      chosen = cap >= size ? cap : align_up(size, opt.rounding);
    }
    const double grown = static_cast<double>(next_large_chunk) * opt.large_chunk_growth;
    next_large_chunk = std::min(opt.large_chunk_max,
                                align_up(static_cast<std::size_t>(grown), opt.chunk_rounding));
    next_large_chunk = std::max(next_large_chunk, opt.large_chunk_size);
    return chosen;
  }

  block* add_chunk(stream_state* st, void* p, std::size_t size, bool small) {
    auto* c = new chunk;
    c->base = reinterpret_cast<std::uintptr_t>(p);
    c->size = size;
    c->small = small;
    c->index = chunks.size();
    chunks.push_back(c);
    block* b = new_block();
    b->ptr = c->base;
    b->size = size;
    b->owner = c;
    b->seq = 0;  // fresh memory: no free to wait for
    c->first = b;
    list_insert(st, b);
    stats.reserved_bytes.add(small, static_cast<std::int64_t>(size));
    stats.chunks.add(small, 1);
    ++stats.upstream_allocations;
    return b;
  }

  void remove_chunk(chunk* c) {
    chunks[c->index] = chunks.back();
    chunks[c->index]->index = c->index;
    chunks.pop_back();
    stats.reserved_bytes.remove(c->small, static_cast<std::int64_t>(c->size));
    stats.chunks.remove(c->small, 1);
    ++stats.upstream_frees;
    recycle(c->first);
    delete c;
  }

  // Unlinks every chunk whose blocks are all free with their frees known complete (whichever
  // streams' lists hold them); lock held.
  std::vector<released_chunk> take_releasable() {
    std::vector<released_chunk> out;
    for (std::size_t i = 0; i < chunks.size();) {
      chunk* c = chunks[i];
      bool releasable = true;
      for (block* b = c->first; b != nullptr && releasable; b = b->next) {
        releasable = b->free && b->seq <= b->stream->synced_seq;
      }
      if (!releasable) {
        ++i;
        continue;
      }
      // Synchronized already: the default stream orders the upstream free.
      out.push_back({reinterpret_cast<void*>(c->base), c->size, stream_view{}});
      block* b = c->first;
      while (b != nullptr) {
        block* n = b->next;
        list_erase(b);
        if (b != c->first) recycle(b);
        b = n;
      }
      remove_chunk(c);  // recycles c->first and moves the last chunk to index i
    }
    return out;
  }

  // Unlinks wholly free chunks of one class (largest first) until `bytes` are gathered, each to
  // be freed on the stream whose list holds it (stream-ordered upstreams only); lock held.
  std::vector<released_chunk> take_idle_chunks(bool small, std::size_t bytes) {
    std::vector<chunk*> idle;
    for (chunk* c : chunks) {
      block* b = c->first;
      if (c->small == small && b->free && b->next == nullptr) idle.push_back(c);
    }
    std::sort(idle.begin(), idle.end(), [](chunk* a, chunk* b) { return a->size > b->size; });
    std::vector<released_chunk> out;
    std::size_t gathered = 0;
    for (chunk* c : idle) {
      if (gathered >= bytes) break;
      out.push_back({reinterpret_cast<void*>(c->base), c->size, c->first->stream->stream});
      gathered += c->size;
      list_erase(c->first);
      remove_chunk(c);
    }
    return out;
  }

  std::size_t release(std::vector<released_chunk>& chunks_out) {
    std::size_t bytes = 0;
    for (const auto& c : chunks_out) {
      upstream->deallocate(c.ptr, c.size, default_alignment, c.stream);
      bytes += c.size;
    }
    return bytes;
  }

  // Makes every free so far known complete by synchronizing the device without the lock (not a
  // per-stream event: a stream passed to deallocate may have been destroyed since). Returns with
  // the lock held.
  void sync_frees(std::unique_lock<std::mutex>& lock) {
    std::vector<std::pair<stream_state*, std::uint64_t>> pending;
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

  pool_report snapshot() const {
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
};

pool_resource::pool_resource(std::shared_ptr<memory_resource> upstream,
                             std::shared_ptr<device_api> api, pool_options options)
    : impl_(std::make_unique<impl>()) {
  if (!upstream) throw logic_error("pool_resource: upstream is null");
  const auto& o = options;
  if (!is_power_of_two(o.rounding) || o.rounding < default_alignment) {
    throw logic_error("pool_resource: rounding must be a power of two >= 256 (got " +
                      std::to_string(o.rounding) + ")");
  }
  if (o.small_chunk_size < o.small_size || o.small_chunk_size % o.rounding != 0 ||
      o.chunk_rounding % o.rounding != 0 || o.chunk_rounding == 0 || o.large_chunk_size == 0 ||
      o.large_chunk_growth < 1.0) {
    throw logic_error(
        "pool_resource: chunk sizes must be multiples of the rounding, the small chunk must hold "
        "a small request, and large_chunk_growth must be >= 1");
  }
  impl_->upstream = std::move(upstream);
  impl_->api = std::move(api);
  impl_->opt = std::move(options);
  impl_->opt.large_chunk_size = align_up(impl_->opt.large_chunk_size, impl_->opt.chunk_rounding);
  impl_->next_large_chunk = impl_->opt.large_chunk_size;
  impl_->name = "pool(" + impl_->upstream->name() + ")";
  impl_->stats.resource = impl_->name;
  if (impl_->opt.initial_size > 0) {
    const std::size_t size = align_up(impl_->opt.initial_size, impl_->opt.chunk_rounding);
    void* p = impl_->upstream->allocate(size, default_alignment, stream_view{});
    std::lock_guard lock(impl_->m);
    impl_->add_chunk(impl_->stream_for(stream_view{}), p, size, false);
  }
}

pool_resource::~pool_resource() {
  impl& s = *impl_;
  std::unique_lock lock(s.m);
  try {
    s.sync_frees(lock);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "vramkit %s: synchronizing frees at destruction failed: %s\n",
                 s.name.c_str(), e.what());
  }
  std::vector<released_chunk> all;
  for (chunk* c : s.chunks) {
    all.push_back({reinterpret_cast<void*>(c->base), c->size, stream_view{}});
    for (block* b = c->first; b != nullptr;) {
      block* n = b->next;
      delete b;
      b = n;
    }
    delete c;
  }
  s.chunks.clear();
  for (block* b : s.spare) delete b;
  s.spare.clear();
  lock.unlock();
  s.release(all);
  if (s.api) {
    for (auto& st : s.streams) {
      if (st->has_event) s.api->destroy_event(st->event);
    }
  }
}

memory_kind pool_resource::kind() const noexcept { return impl_->upstream->kind(); }
std::string pool_resource::name() const { return impl_->name; }
const memory_resource* pool_resource::upstream() const noexcept { return impl_->upstream.get(); }
const pool_options& pool_resource::options() const noexcept { return impl_->opt; }

void* pool_resource::do_allocate(std::size_t bytes, std::size_t alignment, stream_view stream) {
  if (bytes == 0) return nullptr;
  if (!is_power_of_two(alignment) || alignment > default_alignment) {
    throw logic_error(impl_->name + ": alignment " + std::to_string(alignment) +
                      " not supported (power of two up to 256)");
  }
  impl& s = *impl_;
  if (bytes > std::numeric_limits<std::size_t>::max() - s.opt.chunk_rounding) {
    throw out_of_memory(bytes, s.name, "request larger than any chunk");
  }
  const std::size_t size = align_up(bytes, s.opt.rounding);
  const bool small = size <= s.opt.small_size;
  std::unique_lock lock(s.m);
  stream_state* st = s.stream_for(stream);
  bool trimmed = false;
  std::string upstream_error;
  for (;;) {
    if (block* b = s.find_fit(st, small, size)) return s.hand_out(st, b, size, bytes);
    if (s.steal(st, small, size)) {
      if (block* b = s.find_fit(st, small, size)) return s.hand_out(st, b, size, bytes);
    }
    // Grow: the upstream call runs without the lock; the new chunk joins st's list and the search
    // starts over (another thread may have freed or taken memory meanwhile).
    std::size_t want = s.chunk_size_for(small, size);
    const std::size_t minimum = small ? s.opt.small_chunk_size : align_up(size, s.opt.rounding);
    const std::size_t reserved = static_cast<std::size_t>(s.stats.reserved_bytes.all.current);
    const std::size_t room = s.opt.maximum_size > reserved ? s.opt.maximum_size - reserved : 0;
    if (want > room) want = minimum;
    void* p = nullptr;
    if (want <= room) {
      std::vector<released_chunk> given_back;
      if (s.opt.growth == pool_options::growth_policy::release_on_grow) {
        given_back = s.take_idle_chunks(small, want);
      }
      lock.unlock();
      const detail::nvtx_range range("vramkit pool grow");
      s.release(given_back);
      try {
        p = s.upstream->allocate(want, default_alignment, stream);
      } catch (const std::bad_alloc& e) {
        upstream_error = e.what();
        if (want > minimum) {
          want = minimum;
          try {
            p = s.upstream->allocate(want, default_alignment, stream);
          } catch (const std::bad_alloc& e2) {
            upstream_error = e2.what();
          }
        }
      }
      lock.lock();
    } else {
      upstream_error = "pool maximum_size " + std::to_string(s.opt.maximum_size) + " bytes reached";
    }
    if (p != nullptr) return s.hand_out(st, s.add_chunk(st, p, want, small), size, bytes);
    ++s.stats.upstream_failures;
    if (!trimmed) {
      // OOM ladder: return cached chunks to the upstream, then try once more.
      trimmed = true;
      lock.unlock();
      trim();
      lock.lock();
      continue;
    }
    ++s.stats.out_of_memory_errors;
    lock.unlock();
    detail::nvtx_mark("vramkit pool out of memory");
    std::string detail = "upstream: " + upstream_error.substr(0, upstream_error.find('\n')) + "\n" +
                         memory_summary(*this);
    throw out_of_memory(bytes, s.name, detail);
  }
}

void pool_resource::do_deallocate(void* ptr, std::size_t bytes, std::size_t,
                                  stream_view stream) noexcept {
  if (ptr == nullptr) return;
  impl& s = *impl_;
  misuse_report misuse;
  {
    std::lock_guard lock(s.m);
    const std::size_t slot = s.live.find(reinterpret_cast<std::uintptr_t>(ptr));
    if (slot == detail::pointer_map<block>::npos) {
      misuse.kind = misuse_report::kind_t::foreign_pointer;
    } else if (block* b = s.live.at(slot);
               align_up(bytes, s.opt.rounding) != align_up(b->requested, s.opt.rounding)) {
      misuse.kind = misuse_report::kind_t::wrong_size;
      misuse.expected_bytes = b->requested;
    } else {
      s.live.erase_at(slot);
      const bool small = b->owner->small;
      s.stats.allocated_bytes.remove(small, static_cast<std::int64_t>(b->size));
      s.stats.requested_bytes.remove(small, static_cast<std::int64_t>(b->requested));
      s.stats.allocations.remove(small, 1);
      stream_state* st = s.stream_for(stream);
      b->seq = ++st->free_seq;
      st->dirty = true;
      s.insert_free(st, b);
      return;
    }
    ++s.stats.misuse_reports;
  }
  misuse.ptr = ptr;
  misuse.bytes = bytes;
  misuse.resource = s.name;
  try {
    if (s.opt.on_misuse) {
      s.opt.on_misuse(misuse);
    } else {
      std::fprintf(stderr, "%s\n", misuse.message().c_str());
    }
  } catch (...) {
    std::fprintf(stderr, "vramkit %s: misuse handler threw\n", s.name.c_str());
  }
}

std::size_t pool_resource::trim() {
  const detail::nvtx_range range("vramkit pool trim");
  impl& s = *impl_;
  std::unique_lock lock(s.m);
  s.sync_frees(lock);
  auto chunks = s.take_releasable();
  ++s.stats.trims;
  lock.unlock();
  return s.release(chunks);
}

std::vector<pool_segment_info> pool_resource::layout() const {
  std::lock_guard lock(impl_->m);
  std::vector<pool_segment_info> out;
  out.reserve(impl_->chunks.size());
  for (const chunk* c : impl_->chunks) {
    pool_segment_info& seg = out.emplace_back();
    seg.address = c->base;
    seg.size = c->size;
    seg.small = c->small;
    for (const block* b = c->first; b != nullptr; b = b->next) {
      seg.blocks.push_back({b->ptr, b->size, b->free ? 0 : b->requested, !b->free});
    }
  }
  return out;
}

pool_report pool_resource::report() const {
  std::lock_guard lock(impl_->m);
  return impl_->snapshot();
}

void pool_resource::describe(summary_builder& builder) const {
  builder.add_layer(impl_->name);
  builder.add(report());
}

void pool_resource::reset_peak() const noexcept {
  std::lock_guard lock(impl_->m);
  impl_->stats.reset_peaks();
}

std::size_t pool_resource::reserved_bytes() const {
  std::lock_guard lock(impl_->m);
  return static_cast<std::size_t>(impl_->stats.reserved_bytes.all.current);
}

std::size_t pool_resource::allocated_bytes() const {
  std::lock_guard lock(impl_->m);
  return static_cast<std::size_t>(impl_->stats.allocated_bytes.all.current);
}

std::size_t pool_resource::free_block_count() const {
  std::lock_guard lock(impl_->m);
  return impl_->free_block_count;
}

std::size_t pool_resource::chunk_count() const {
  std::lock_guard lock(impl_->m);
  return impl_->chunks.size();
}

}  // namespace vramkit::mr
