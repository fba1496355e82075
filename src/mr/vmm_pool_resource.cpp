// vmm_pool_resource: per-stream free lists over two growable address ranges; see the header for
// the contract. Lock discipline: `m` guards every field of impl, including the device's VMM calls
// made for the pool; it is released only around synchronize_device, after which the caller starts
// its search over.
#include "vramkit/mr/vmm_pool_resource.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <vector>

#include "mr/nvtx_range.hpp"
#include "stream_pool.hpp"
#include "vramkit/core/error.hpp"

namespace vramkit::mr {
namespace {

struct block;
struct arena;
using stream_state = detail::stream_state<block>;

// The device API takes pointers; the pool does its address arithmetic on integers.
void* as_ptr(std::uintptr_t addr) noexcept {
  return reinterpret_cast<void*>(addr);  // NOLINT(performance-no-int-to-ptr)
}

enum class block_state : std::uint8_t { allocated, free, unmapped };

struct block {
  std::uintptr_t ptr = 0;
  std::size_t size = 0;
  std::size_t requested = 0;
  block* prev = nullptr;  // address neighbours inside the arena
  block* next = nullptr;
  block* free_prev = nullptr;
  block* free_next = nullptr;
  arena* owner = nullptr;
  stream_state* stream = nullptr;
  std::uint64_t seq = 0;
  std::uint32_t bin = 0;
  block_state state = block_state::unmapped;
  [[nodiscard]] bool is_free() const noexcept { return state == block_state::free; }
  void mark_free() noexcept { state = block_state::free; }
  void mark_taken() noexcept { state = block_state::allocated; }
};

// One reserved address range: blocks cover it without gaps, and unmapped blocks (holes and the
// unused top) are also indexed by address. handles[i] is the physical granule mapped at granule i.
struct arena {
  std::uintptr_t base = 0;
  std::size_t size = 0;
  bool small = false;
  std::vector<physical_handle> handles;
  // evicted[i]: granule i was unmapped from free space to be mapped elsewhere (a remap), and has
  // not been mapped since; a growth that maps it again is the pool moving memory back and forth.
  std::vector<std::uint8_t> evicted;
  // moved[i]: the granule mapped at i was placed there by a remap.
  std::vector<std::uint8_t> moved;
  std::map<std::uintptr_t, block*> holes;
  block* first = nullptr;
};

std::uint64_t elapsed_ns(std::chrono::steady_clock::time_point since) {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - since)
          .count());
}

}  // namespace

struct pimpl::vmm_pool_state : detail::stream_pool_core<pimpl::vmm_pool_state, block> {
  vmm_pool_options opt;
  std::size_t g = 0;  // granularity

  arena small_arena, large_arena;
  std::vector<physical_handle> cache;  // unmapped granules, ready to map anywhere
  std::size_t cache_from_reclaim = 0;  // of `cache`, granules unmapped from free space
  std::size_t physical_bytes = 0;
  std::size_t mapped = 0;
  std::size_t allocated_high = 0;  // the most bytes ever handed out at once (or asked for)
  // Granules of growth allowance above growth_slack, earned by remaps that moved memory back to
  // where an earlier remap took it from or moved it a second time (see creatable).
  std::size_t thrash_granules = 0;
  // Growths met by remapping, by where they happened: a request of the same size arriving with
  // the same bytes allocated and about the same memory held is the same point of a repeated step
  // (a training loop's step allocates the same sizes in the same order every time).
  // Direct-mapped, a collision only restarts a count.
  struct remap_point {
    std::uint64_t key = 0;
    std::uint32_t count = 0;
  };
  static constexpr std::size_t remap_points = 4096;
  std::vector<remap_point> remapped_at = std::vector<remap_point>(remap_points);

  arena& arena_for(bool small) { return small ? small_arena : large_arena; }

  // --- blocks and lists (lock held) ----------------------------------------------------------
  block* find_fit(stream_state* st, bool small, std::size_t size) {
    return st->list(small).find(size);
  }

  // Links `b` after `at` (or first when at is null) in b's arena.
  static void link_after(block* at, block* b) {
    b->prev = at;
    if (at == nullptr) {
      b->next = b->owner->first;
      b->owner->first = b;
    } else {
      b->next = at->next;
      at->next = b;
    }
    if (b->next != nullptr) b->next->prev = b;
  }
  void unlink(block* b) {
    if (b->prev != nullptr) {
      b->prev->next = b->next;
    } else {
      b->owner->first = b->next;
    }
    if (b->next != nullptr) b->next->prev = b->prev;
    recycle(b);
  }

  // Absorbs `n` (the block after b) into b.
  void absorb_next(block* b) {
    block* n = b->next;
    b->size += n->size;
    b->seq = std::max(b->seq, n->seq);
    unlink(n);
  }

  void insert_free(stream_state* st, block* b) {
    if (block* p = b->prev; p != nullptr && p->is_free() && p->stream == st) {
      list_erase(p);
      b->seq = std::max(b->seq, p->seq);
      p->seq = b->seq;
      absorb_next(p);
      b = p;
    }
    if (block* n = b->next; n != nullptr && n->is_free() && n->stream == st) {
      list_erase(n);
      absorb_next(b);
    }
    list_insert(st, b);
  }

  void* hand_out(stream_state* st, block* b, std::size_t size, std::size_t bytes) {
    list_erase(b);
    if (b->size - size >= opt.rounding) {
      block* rest = new_block();
      rest->ptr = b->ptr + size;
      rest->size = b->size - size;
      rest->owner = b->owner;
      rest->seq = b->seq;
      link_after(b, rest);
      b->size = size;
      list_insert(st, rest);
    }
    return count_out(st, b, bytes);
  }

  // --- granules (lock held) ------------------------------------------------------------------
  bool granule_mapped(const arena& a, std::uintptr_t addr) const {
    if (addr < a.base || addr >= a.base + a.size) return false;
    return a.handles[(addr - a.base) / g].value != 0;
  }

  // Maps `handles` at addr..; on failure unmaps what was mapped and puts the handles back.
  void map_run(arena& a, std::uintptr_t addr, const std::vector<physical_handle>& hs) {
    const auto start = std::chrono::steady_clock::now();
    std::size_t done = 0;
    try {
      for (; done < hs.size(); ++done) {
        api->map_physical(as_ptr(addr + done * g), g, hs[done]);
      }
      api->set_access(as_ptr(addr), hs.size() * g);
    } catch (...) {
      if (done > 0) {
        try {
          api->unmap(as_ptr(addr), done * g);
        } catch (...) {
          std::fprintf(stderr, "vramkit %s: unmapping after a failed map failed\n", name.c_str());
        }
      }
      cache.insert(cache.end(), hs.begin(), hs.end());
      throw;
    }
    stats.vmm.map_ns += elapsed_ns(start);
    stats.vmm.granules_mapped += hs.size();
    const std::size_t n = hs.size();
    const int joined = static_cast<int>(granule_mapped(a, addr - g)) +
                       static_cast<int>(granule_mapped(a, addr + n * g));
    for (std::size_t i = 0; i < n; ++i) {
      a.handles[(addr - a.base) / g + i] = hs[i];
      a.evicted[(addr - a.base) / g + i] = 0;
    }
    mapped += n;
    if (joined == 0) stats.chunks.add(a.small, 1);
    if (joined == 2) stats.chunks.remove(a.small, 1);
    stats.reserved_bytes.remove(false, static_cast<std::int64_t>(n * g));  // left the cache
    stats.reserved_bytes.add(a.small, static_cast<std::int64_t>(n * g));
  }

  void unmap_run(arena& a, std::uintptr_t addr, std::size_t n, bool evict) {
    const auto start = std::chrono::steady_clock::now();
    api->unmap(as_ptr(addr), n * g);
    stats.vmm.unmap_ns += elapsed_ns(start);
    stats.vmm.granules_unmapped += n;
    for (std::size_t i = 0; i < n; ++i) {
      physical_handle& h = a.handles[(addr - a.base) / g + i];
      cache.push_back(h);
      h = physical_handle{};
      a.evicted[(addr - a.base) / g + i] = static_cast<std::uint8_t>(evict);
      if (evict) thrash_granules += a.moved[(addr - a.base) / g + i];
      a.moved[(addr - a.base) / g + i] = 0;
    }
    cache_from_reclaim += n;
    mapped -= n;
    const int joined = static_cast<int>(granule_mapped(a, addr - g)) +
                       static_cast<int>(granule_mapped(a, addr + n * g));
    if (joined == 0) stats.chunks.remove(a.small, 1);
    if (joined == 2) stats.chunks.add(a.small, 1);
    stats.reserved_bytes.remove(a.small, static_cast<std::int64_t>(n * g));
    stats.reserved_bytes.add(false, static_cast<std::int64_t>(n * g));
  }

  // Turns [addr, addr + len) of free block b into a hole (unmapped), keeping the rest of b free
  // on its stream.
  void carve_hole(block* b, std::uintptr_t addr, std::size_t len, bool evict) {
    arena& a = *b->owner;
    stream_state* st = b->stream;
    const std::uint64_t seq = b->seq;
    list_erase(b);
    unmap_run(a, addr, len / g, evict);
    const std::uintptr_t end = b->ptr + b->size;
    block* left = nullptr;
    if (addr > b->ptr) {
      left = b;
      b->size = addr - b->ptr;
      list_insert(st, b);
    }
    block* hole = left != nullptr ? new_block() : b;
    hole->ptr = addr;
    hole->size = len;
    hole->owner = &a;
    hole->state = block_state::unmapped;
    hole->stream = nullptr;
    hole->seq = 0;
    if (left != nullptr) link_after(left, hole);
    if (addr + len < end) {
      block* right = new_block();
      right->ptr = addr + len;
      right->size = end - addr - len;
      right->owner = &a;
      right->seq = seq;
      link_after(hole, right);
      list_insert(st, right);
    }
    add_hole(hole);
  }

  // Indexes an unmapped block, merging it with unmapped neighbours.
  void add_hole(block* h) {
    arena& a = *h->owner;
    if (block* p = h->prev; p != nullptr && p->state == block_state::unmapped) {
      a.holes.erase(p->ptr);
      absorb_next(p);
      h = p;
    }
    if (block* n = h->next; n != nullptr && n->state == block_state::unmapped) {
      a.holes.erase(n->ptr);
      absorb_next(h);
    }
    a.holes[h->ptr] = h;
  }

  bool complete(const block* b) const { return b->seq <= b->stream->synced_seq; }

  // Merges the free blocks after b whose frees are complete into b, whichever streams' lists
  // hold them: no stream has work left on them, so the merged block needs no wait (seq 0).
  void merge_completed_run(block* b, const block* keep, const block* keep2) {
    block* n = b->next;
    if (n == nullptr || !n->is_free() || n == keep || n == keep2 || !complete(n)) return;
    list_erase(b);
    while ((n = b->next) != nullptr && n->is_free() && n != keep && n != keep2 && complete(n)) {
      list_erase(n);
      absorb_next(b);
    }
    b->seq = 0;
    list_insert(b->stream, b);
  }

  // Unmaps up to `want` granules lying wholly in free space whose frees are known complete,
  // skipping block `keep`; returns the granules gained.
  std::size_t reclaim(std::size_t want, const block* keep, const block* keep2, bool evict) {
    std::size_t gained = 0;
    for (arena* a : {&large_arena, &small_arena}) {
      block* b = a->first;
      while (b != nullptr && gained < want) {
        block* next = b->next;
        if (b->is_free() && b != keep && b != keep2 && complete(b)) {
          merge_completed_run(b, keep, keep2);
          next = b->next;
          const std::uintptr_t lo = align_up(b->ptr, g);
          const std::uintptr_t hi = (b->ptr + b->size) / g * g;
          if (hi >= lo + g) {
            const std::size_t n = std::min((hi - lo) / g, want - gained);
            carve_hole(b, lo, n * g, evict);
            gained += n;
            // The hole may have merged with its neighbours: continue after it.
            auto it = a->holes.upper_bound(lo);
            --it;
            next = it->second->next;
          }
        }
        b = next;
      }
    }
    return gained;
  }

  // Granules that reclaim could unmap now: wholly inside runs of free blocks (runs of blocks with
  // completed frees, or single blocks when `completed_only` is false).
  std::size_t reclaimable(bool completed_only, const block* keep, const block* keep2) const {
    std::size_t n = 0;
    for (const arena* a : {&large_arena, &small_arena}) {
      for (const block* b = a->first; b != nullptr; b = b->next) {
        if (!b->is_free() || b == keep) continue;
        if (completed_only && !complete(b)) continue;
        const std::uintptr_t start = b->ptr;
        if (completed_only) {
          while (b->next != nullptr && b->next->is_free() && b->next != keep && complete(b->next)) {
            b = b->next;
          }
        }
        const std::uintptr_t lo = align_up(start, g);
        const std::uintptr_t hi = (b->ptr + b->size) / g * g;
        if (hi >= lo + g) n += (hi - lo) / g;
      }
    }
    return n;
  }

  struct growth_plan {
    block* hole = nullptr;
    std::uintptr_t at = 0;  // where the granules go, inside the hole
    std::size_t granules = 0;
    block* prev_free = nullptr;  // st's free blocks beside the hole that the growth extends
    block* next_free = nullptr;
  };

  // The placement that needs the fewest granules mapped, the lowest such: at a hole's low end
  // (extending st's free block below it), at its high end (extending the one above), or the
  // whole hole (joining both).
  growth_plan plan_growth(stream_state* st, arena& a, std::size_t size) const {
    growth_plan best;
    auto consider = [&](block* h, std::uintptr_t at, std::size_t n, block* p, block* q) {
      if (n == 0 || n * g > h->size || (best.hole != nullptr && n >= best.granules)) return;
      best = {h, at, n, p, q};
    };
    for (auto& [addr, h] : a.holes) {
      block* p = h->prev;
      block* q = h->next;
      const bool p_ok = p != nullptr && p->is_free() && p->stream == st;
      const bool q_ok = q != nullptr && q->is_free() && q->stream == st;
      const std::size_t below = p_ok ? p->size : 0;
      const std::size_t above = q_ok ? q->size : 0;
      const std::size_t n_low =
          std::max<std::size_t>((size > below ? size - below : 0) + g - 1, g) / g;
      consider(h, h->ptr, n_low, p_ok ? p : nullptr, nullptr);
      if (q_ok) {
        const std::size_t n_high =
            std::max<std::size_t>((size > above ? size - above : 0) + g - 1, g) / g;
        if (n_high * g <= h->size) {
          consider(h, h->ptr + h->size - n_high * g, n_high, nullptr, q);
        }
        if (below + h->size + above >= size)
          consider(h, h->ptr, h->size / g, p_ok ? p : nullptr, q);
      }
    }
    return best;
  }

  // How many granules growth may create instead of unmapping free ones from elsewhere: while the
  // physical memory stays within growth_slack (plus what recurring remaps earned, up to
  // growth_slack_max) of the most ever allocated, and under the maximum. Remapping a granule costs
  // an unmap and a map with its access (~57 us on the H200, docs/mr.md) and, for frees still
  // running, a device synchronization; a loop that repeats its step paid it on every step when its
  // free space fell apart the same way each time (the H200 training step: 218 granules a step).
  [[nodiscard]] std::size_t creatable() const {
    const std::size_t room =
        opt.maximum_size > physical_bytes ? opt.maximum_size - physical_bytes : 0;
    const auto high = static_cast<double>(allocated_high);
    const double budget =
        std::min(high * (1.0 + opt.growth_slack) + static_cast<double>(thrash_granules * g),
                 high * (1.0 + std::max(opt.growth_slack, opt.growth_slack_max)));
    const double left = budget - static_cast<double>(physical_bytes);
    if (left < static_cast<double>(g)) return 0;
    return std::min(room, static_cast<std::size_t>(left)) / g;
  }

  // The point of a growth: the request's size, the bytes allocated, and the physical memory held
  // (to 1/128 of the highest allocation, so that a pool that changes between repetitions, as
  // the first passes of a trace grow it, does not count as repeating).
  [[nodiscard]] std::uint64_t point_key(std::size_t size) const {
    const auto live = static_cast<std::uint64_t>(stats.allocated_bytes.all.current);
    const std::size_t held = physical_bytes / std::max<std::size_t>(g, allocated_high / 128);
    std::uint64_t k = (static_cast<std::uint64_t>(size) * 0x9E3779B97F4A7C15ull) ^ live;
    k = (k * 0x94D049BB133111EBull) ^ static_cast<std::uint64_t>(held);
    k ^= k >> 29;
    k *= 0xBF58476D1CE4E5B9ull;
    return (k ^ (k >> 32)) | 1;  // never 0, the empty slot's key
  }
  // Whether a growth of `size` here was met by remapping max_repeated_remaps times already: then
  // remapping it again every step costs more than the memory it saves, and growth creates.
  [[nodiscard]] bool remapped_here_before(std::size_t size) const {
    if (opt.max_repeated_remaps == 0) return false;
    const std::uint64_t k = point_key(size);
    const remap_point& p = remapped_at[k % remap_points];
    return p.key == k && p.count >= opt.max_repeated_remaps;
  }
  void count_remap_here(std::size_t size) {
    const std::uint64_t k = point_key(size);
    remap_point& p = remapped_at[k % remap_points];
    if (p.key != k) p = {k, 0};
    ++p.count;
  }

  // Whether a repeated growth of `granules` is met by creating them: while the pool stays within
  // growth_slack + growth_slack_max (5%) of its highest allocation, or when the growth alone is
  // larger than the slack (a tensor that remapping would move on every step and that no slack
  // absorbs: a language model's logits; the H200 LLaMA-shaped step's 500 MiB against a 360 MiB
  // slack).
  // Never past maximum_size: there, remapping is what can still meet the request.
  [[nodiscard]] bool worth_creating(std::size_t granules) const {
    if (granules * g >
        (opt.maximum_size > physical_bytes ? opt.maximum_size - physical_bytes : 0)) {
      return false;
    }
    const auto high = static_cast<double>(allocated_high);
    const auto more = static_cast<double>(granules * g);
    return static_cast<double>(physical_bytes) + more <=
               high * (1.0 + opt.growth_slack + std::max(opt.growth_slack, opt.growth_slack_max)) ||
           more >= high * opt.growth_slack;
  }

  enum class grow_result { grown, retry, failed };

  // Maps granules so that a block of `size` fits on st: cached granules first, then granules
  // unmapped from free space (after a synchronization if their frees may still be running), then
  // newly created ones.
  grow_result grow(stream_state* st, bool small, std::size_t size, bool& synced,
                   std::unique_lock<std::mutex>& lock, std::string& why) {
    arena& a = arena_for(small);
    growth_plan plan = plan_growth(st, a, size);
    if (plan.hole == nullptr) {
      why = "address range of " + std::to_string(a.size) + " bytes exhausted";
      return grow_result::failed;
    }
    allocated_high = std::max(allocated_high,
                              static_cast<std::size_t>(stats.allocated_bytes.all.current) + size);
    if (!synced) {  // (a retry after synchronizing counted them already)
      // Granules this growth maps where an earlier remap unmapped them: the pool is moving the
      // same memory back and forth (a repeated step whose free space falls apart the same way each
      // time). Each such granule raises the allowance by one, so the next round creates instead.
      const std::size_t first = (plan.at - a.base) / g;
      std::size_t again = 0;
      for (std::size_t i = 0; i < plan.granules; ++i) again += a.evicted[first + i];
      thrash_granules += again;
    }
    // Growth creates granules only when all it needs beyond the cache fits the allowance (creating
    // part of it and remapping the rest held more memory on every trace for no fewer remaps).
    const std::size_t wanted = plan.granules > cache.size() ? plan.granules - cache.size() : 0;
    if (wanted > creatable() && !(remapped_here_before(size) && worth_creating(wanted))) {
      const std::size_t shortfall = wanted;
      refresh_completed();
      const std::size_t ready = reclaimable(true, plan.prev_free, plan.next_free);
      if (ready < shortfall && !synced &&
          reclaimable(false, plan.prev_free, plan.next_free) > ready) {
        // Free space whose frees may still run on the device: wait for them rather than grow.
        synced = true;
        const auto start = std::chrono::steady_clock::now();
        sync_frees(lock);
        ++stats.vmm.growth_syncs;
        stats.vmm.growth_sync_ns += elapsed_ns(start);
        return grow_result::retry;
      }
      std::size_t reclaimed = 0;
      {
        const detail::nvtx_range range("vramkit vmm remap");
        reclaimed = reclaim(shortfall, plan.prev_free, plan.next_free, true);
      }
      if (reclaimed > 0) {
        count_remap_here(size);
        ++stats.vmm.defragmentations;
        plan = plan_growth(st, a, size);  // holes merged: the old plan's pointers are stale
        if (plan.hole == nullptr) {
          why = "address range exhausted";
          return grow_result::failed;
        }
      }
    }
    std::vector<physical_handle> hs;
    hs.reserve(plan.granules);
    while (hs.size() < plan.granules && !cache.empty()) {
      hs.push_back(cache.back());
      cache.pop_back();
    }
    const std::size_t from_cache = hs.size();
    const std::size_t remapped = std::min(from_cache, cache_from_reclaim);
    cache_from_reclaim -= remapped;
    const std::size_t to_create = plan.granules - hs.size();
    if (to_create * g >
        (opt.maximum_size > physical_bytes ? opt.maximum_size - physical_bytes : 0)) {
      cache.insert(cache.end(), hs.begin(), hs.end());
      cache_from_reclaim += remapped;
      why = "pool maximum_size " + std::to_string(opt.maximum_size) + " bytes reached";
      return grow_result::failed;
    }
    try {
      for (std::size_t i = 0; i < to_create; ++i) {
        hs.push_back(api->create_physical(g));
        physical_bytes += g;
        stats.reserved_bytes.add(false, static_cast<std::int64_t>(g));  // counted as cached
        ++stats.vmm.physical_creates;
        ++stats.upstream_allocations;
      }
    } catch (const std::bad_alloc& e) {
      cache.insert(cache.end(), hs.begin(), hs.end());
      cache_from_reclaim += remapped;
      why = e.what();
      why = why.substr(0, why.find('\n'));
      return grow_result::failed;
    }
    const std::uintptr_t at = plan.at;
    map_run(a, at, hs);
    stats.vmm.granules_remapped += remapped;
    if (remapped > 0) {
      std::fill_n(a.moved.begin() + static_cast<std::ptrdiff_t>((at - a.base) / g), hs.size(), 1);
    }
    // The mapped range becomes a free block of st.
    block* fresh = split_hole(a, plan.hole, at, hs.size() * g);
    fresh->state = block_state::allocated;
    fresh->seq = 0;  // fresh or reclaimed after completion: nothing to wait for
    insert_free(st, fresh);
    return grow_result::grown;
  }

  // Cuts the newly mapped range [at, at + len) out of `hole`; what stays unmapped before and after
  // it remains a hole of `a`. Returns the block of the mapped range, whose state the caller sets.
  block* split_hole(arena& a, block* hole, std::uintptr_t at, std::size_t len) {
    block* h = hole;
    a.holes.erase(h->ptr);
    const std::uintptr_t hole_end = h->ptr + h->size;
    if (at > h->ptr) {
      block* mid = new_block();
      mid->ptr = at;
      mid->size = len;
      mid->owner = &a;
      h->size = at - h->ptr;
      link_after(h, mid);
      a.holes[h->ptr] = h;
      h = mid;
    }
    h->size = len;
    if (at + len < hole_end) {
      block* rest = new_block();
      rest->ptr = at + len;
      rest->size = hole_end - at - len;
      rest->owner = &a;
      rest->state = block_state::unmapped;
      link_after(h, rest);
      a.holes[rest->ptr] = rest;
    }
    return h;
  }

  // Releases every cached granule (lock held).
  std::size_t release_cache() {
    const auto start = std::chrono::steady_clock::now();
    for (physical_handle h : cache) api->release_physical(h);
    const std::size_t bytes = cache.size() * g;
    stats.vmm.physical_releases += cache.size();
    stats.upstream_frees += cache.size();
    stats.reserved_bytes.remove(false, static_cast<std::int64_t>(bytes));
    physical_bytes -= bytes;
    cache.clear();
    cache_from_reclaim = 0;
    stats.vmm.unmap_ns += elapsed_ns(start);
    return bytes;
  }

  void init_arena(arena& a, bool small, std::size_t bytes) {
    a.small = small;
    a.size = bytes;
    a.base = reinterpret_cast<std::uintptr_t>(api->reserve_address_range(bytes));
    a.handles.assign(bytes / g, physical_handle{});
    a.evicted.assign(bytes / g, 0);
    a.moved.assign(bytes / g, 0);
    block* top = new_block();
    top->ptr = a.base;
    top->size = bytes;
    top->owner = &a;
    top->state = block_state::unmapped;
    a.first = top;
    a.holes[top->ptr] = top;
  }

  void destroy_arena(arena& a) {
    if (a.base == 0) return;
    for (std::size_t i = 0; i < a.handles.size();) {
      if (a.handles[i].value == 0) {
        ++i;
        continue;
      }
      std::size_t j = i;
      while (j < a.handles.size() && a.handles[j].value != 0) ++j;
      try {
        api->unmap(as_ptr(a.base + i * g), (j - i) * g);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "vramkit %s: unmap at destruction failed: %s\n", name.c_str(),
                     e.what());
      }
      for (std::size_t k = i; k < j; ++k) api->release_physical(a.handles[k]);
      i = j;
    }
    api->free_address_range(as_ptr(a.base), a.size);
    for (block* b = a.first; b != nullptr;) {
      block* n = b->next;
      delete b;
      b = n;
    }
    a.first = nullptr;
  }

  [[nodiscard]] pool_report snapshot() const {
    pool_report r = stream_pool_core::snapshot();
    r.vmm.present = true;
    r.vmm.granularity = g;
    r.vmm.cached_bytes = cache.size() * g;
    return r;
  }
};

template class detail::stream_pool_resource<pimpl::vmm_pool_state>;

vmm_pool_resource::vmm_pool_resource(std::shared_ptr<device_api> api, vmm_pool_options options) {
  if (!api) throw logic_error("vmm_pool_resource: device API is null");
  if (!is_power_of_two(options.rounding) || options.rounding < default_alignment) {
    throw logic_error("vmm_pool_resource: rounding must be a power of two >= 256");
  }
  if (!(options.growth_slack >= 0.0) || options.growth_slack > 1000.0) {
    throw logic_error("vmm_pool_resource: growth_slack must be a fraction from 0 to 1000");
  }
  if (!(options.growth_slack_max >= 0.0) || options.growth_slack_max > 1000.0) {
    throw logic_error("vmm_pool_resource: growth_slack_max must be a fraction from 0 to 1000");
  }
  impl& s = *impl_;
  s.api = std::move(api);
  s.opt = std::move(options);
  s.g = s.api->vmm_granularity();
  if (s.g == 0) {
    throw logic_error("vmm_pool_resource: device " + s.api->name() +
                      " has no virtual memory management");
  }
  if (s.opt.small_size >= s.g) {
    throw logic_error("vmm_pool_resource: small_size must be below the granularity");
  }
  s.name = "vmm_pool(" + s.api->name() + ")";
  s.stats.resource = s.name;
  s.stats.vmm.present = true;
  s.stats.vmm.granularity = s.g;
  std::size_t va = s.opt.address_space_bytes;
  if (va == 0) va = 2 * s.api->properties(s.api->current_device()).total_memory_bytes;
  va = align_up(std::max(va, s.g), s.g);
  s.init_arena(s.large_arena, false, va);
  try {
    s.init_arena(s.small_arena, true, va);
  } catch (...) {
    s.destroy_arena(s.large_arena);
    throw;
  }
}

vmm_pool_resource::~vmm_pool_resource() {
  impl& s = *impl_;
  try {
    s.api->synchronize_device();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "vramkit %s: synchronizing at destruction failed: %s\n", s.name.c_str(),
                 e.what());
  }
  std::lock_guard lock(s.m);
  s.destroy_arena(s.large_arena);
  s.destroy_arena(s.small_arena);
  for (physical_handle h : s.cache) s.api->release_physical(h);
  for (block* b : s.spare) delete b;
  s.destroy_events();
}

std::size_t vmm_pool_resource::granularity() const noexcept { return impl_->g; }
const vmm_pool_options& vmm_pool_resource::options() const noexcept { return impl_->opt; }

void* vmm_pool_resource::do_allocate(std::size_t bytes, std::size_t alignment, stream_view stream) {
  if (bytes == 0) return nullptr;
  impl& s = *impl_;
  if (!is_power_of_two(alignment) || alignment > default_alignment) {
    throw logic_error(s.name + ": alignment " + std::to_string(alignment) +
                      " not supported (power of two up to 256)");
  }
  if (bytes > s.large_arena.size) {
    {
      std::lock_guard lock(s.m);
      ++s.stats.out_of_memory_errors;
    }
    detail::nvtx_mark("vramkit vmm out of memory");
    throw out_of_memory(bytes, s.name,
                        "larger than the address range of " + std::to_string(s.large_arena.size) +
                            " bytes\n" + memory_summary(*this));
  }
  const std::size_t size = align_up(bytes, s.opt.rounding);
  const bool small = size <= s.opt.small_size;
  std::unique_lock lock(s.m);
  stream_state* st = s.stream_for(stream);
  bool synced = false;
  bool trimmed = false;
  std::string why;
  for (;;) {
    if (block* b = s.fit_or_steal(st, small, size)) return s.hand_out(st, b, size, bytes);
    impl::grow_result r = impl::grow_result::failed;
    {
      const detail::nvtx_range range("vramkit vmm grow");
      r = s.grow(st, small, size, synced, lock, why);
    }
    if (r != impl::grow_result::failed) {
      st = s.stream_for(stream);
      continue;
    }
    // OOM ladder: synchronize, unmap and release all free space, then try once more.
    if (s.retry_after_trim(lock, trimmed, [this] { trim(); })) {
      st = s.stream_for(stream);
      synced = false;
      continue;
    }
    detail::nvtx_mark("vramkit vmm out of memory");
    throw out_of_memory(bytes, s.name, "cannot grow: " + why + "\n" + memory_summary(*this));
  }
}

std::size_t vmm_pool_resource::trim() {
  const detail::nvtx_range range("vramkit vmm trim");
  impl& s = *impl_;
  auto lock = s.lock_synced();
  s.reclaim(std::numeric_limits<std::size_t>::max(), nullptr, nullptr, false);
  for (arena* a : {&s.small_arena, &s.large_arena}) {
    std::fill(a->evicted.begin(), a->evicted.end(), 0);
  }
  s.thrash_granules = 0;  // what recurring remaps earned restarts with the slack
  std::fill(s.remapped_at.begin(), s.remapped_at.end(), impl::remap_point{});
  ++s.stats.trims;
  // The growth slack counts from what is allocated now: after torch.cuda.empty_cache-style trims
  // between workloads, an earlier workload's high mark would otherwise let a smaller one grow up
  // to 2% of the larger one without remapping (the H200 replay of random after llama_step: 1.147
  // x requested against 1.026 when replayed first).
  s.allocated_high = static_cast<std::size_t>(s.stats.allocated_bytes.all.current);
  return s.release_cache();
}

std::size_t vmm_pool_resource::mapped_granules() const {
  return impl_->locked([](const impl& s) { return s.mapped; });
}

std::size_t vmm_pool_resource::cached_granules() const {
  return impl_->locked([](const impl& s) { return s.cache.size(); });
}

std::vector<pool_segment_info> vmm_pool_resource::layout() const {
  std::lock_guard lock(impl_->m);
  std::vector<pool_segment_info> out;
  for (const arena* a : {&impl_->small_arena, &impl_->large_arena}) {
    pool_segment_info* seg = nullptr;
    for (const block* b = a->first; b != nullptr; b = b->next) {
      if (b->state == block_state::unmapped) {
        seg = nullptr;
        continue;
      }
      if (seg == nullptr) {
        seg = &out.emplace_back();
        seg->address = b->ptr;
        seg->small = a->small;
        seg->expandable = true;
      }
      const bool allocated = b->state == block_state::allocated;
      seg->blocks.push_back({b->ptr, b->size, allocated ? b->requested : 0, allocated});
      seg->size += b->size;
    }
  }
  return out;
}

std::size_t vmm_pool_resource::segment_count() const {
  std::lock_guard lock(impl_->m);
  return static_cast<std::size_t>(impl_->stats.chunks.all.current);
}

}  // namespace vramkit::mr
