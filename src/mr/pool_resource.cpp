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

#include "mr/nvtx_range.hpp"
#include "stream_pool.hpp"
#include "vramkit/core/error.hpp"

namespace vramkit::mr {
namespace {

struct block;
struct chunk;

// Chunks are handed back to the upstream as pointers; the pool's arithmetic is on integers.
void* as_ptr(std::uintptr_t addr) noexcept {
  return reinterpret_cast<void*>(addr);  // NOLINT(performance-no-int-to-ptr)
}
using stream_state = detail::stream_state<block>;

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
  [[nodiscard]] bool is_free() const noexcept { return free; }
  void mark_free() noexcept { free = true; }
  void mark_taken() noexcept { free = false; }
};

struct chunk {
  std::uintptr_t base = 0;
  std::size_t size = 0;
  bool small = false;
  block* first = nullptr;
  std::size_t index = 0;  // position in impl::chunks
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

struct pimpl::pool_resource_state : detail::stream_pool_core<pimpl::pool_resource_state, block> {
  std::shared_ptr<memory_resource> upstream;
  pool_options opt;
  std::vector<chunk*> chunks;
  std::size_t next_large_chunk = 0;

  // --- blocks and lists (lock held) ----------------------------------------------------------
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
    return count_out(st, b, bytes);
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
      out.push_back({as_ptr(c->base), c->size, stream_view{}});
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
      out.push_back({as_ptr(c->base), c->size, c->first->stream->stream});
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
};

template class detail::stream_pool_resource<pimpl::pool_resource_state>;

pool_resource::pool_resource(std::shared_ptr<memory_resource> upstream,
                             std::shared_ptr<device_api> api, pool_options options) {
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
    all.push_back({as_ptr(c->base), c->size, stream_view{}});
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
  s.destroy_events();
}

memory_kind pool_resource::kind() const noexcept { return impl_->upstream->kind(); }
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
    if (block* b = s.fit_or_steal(st, small, size)) return s.hand_out(st, b, size, bytes);
    // Grow: the upstream call runs without the lock; the new chunk joins st's list and the search
    // starts over (another thread may have freed or taken memory meanwhile).
    std::size_t want = s.chunk_size_for(small, size);
    const std::size_t minimum = small ? s.opt.small_chunk_size : align_up(size, s.opt.rounding);
    const auto reserved = static_cast<std::size_t>(s.stats.reserved_bytes.all.current);
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
    // OOM ladder: return cached chunks to the upstream, then try once more.
    if (s.retry_after_trim(lock, trimmed, [this] { trim(); })) continue;
    detail::nvtx_mark("vramkit pool out of memory");
    std::string detail = "upstream: " + upstream_error.substr(0, upstream_error.find('\n')) + "\n" +
                         memory_summary(*this);
    throw out_of_memory(bytes, s.name, detail);
  }
}

std::size_t pool_resource::trim() {
  const detail::nvtx_range range("vramkit pool trim");
  impl& s = *impl_;
  auto lock = s.lock_synced();
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

std::size_t pool_resource::free_block_count() const {
  return impl_->locked([](const impl& s) { return s.free_block_count; });
}

std::size_t pool_resource::chunk_count() const {
  return impl_->locked([](const impl& s) { return s.chunks.size(); });
}

}  // namespace vramkit::mr
