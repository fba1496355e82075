// lru_simulation: an LRU cache of byte-sized entries, replayed over a trace of buffer uses.
#include "vramkit/tier/lru_simulation.hpp"

#include <map>
#include <string>
#include <vector>

#include "vramkit/core/error.hpp"
#include "vramkit/core/units.hpp"

namespace vramkit::tier {

lru_simulation_result simulate_lru(std::span<const std::size_t> buffer_bytes,
                                   std::span<const buffer_use> trace, std::size_t budget_bytes) {
  struct entry {
    bool resident = false;
    bool dirty = false;
    std::uint64_t tick = 0;
  };
  std::vector<entry> state(buffer_bytes.size());
  std::map<std::uint64_t, std::uint32_t> lru;  // tick -> buffer
  std::uint64_t tick = 0;
  std::size_t resident = 0;
  lru_simulation_result r;
  for (const buffer_use& use : trace) {
    if (use.buffer >= buffer_bytes.size()) {
      throw logic_error("simulate_lru: trace names buffer " + std::to_string(use.buffer) + " of " +
                        std::to_string(buffer_bytes.size()));
    }
    entry& e = state[use.buffer];
    const std::size_t bytes = align_up(buffer_bytes[use.buffer], 256);
    if (e.resident) {
      ++r.hits;
      lru.erase(e.tick);
    } else {
      if (bytes > budget_bytes) {
        throw logic_error("simulate_lru: buffer " + std::to_string(use.buffer) +
                          " is larger than the budget");
      }
      while (resident + bytes > budget_bytes) {
        const std::uint32_t victim = lru.begin()->second;
        lru.erase(lru.begin());
        entry& v = state[victim];
        if (v.dirty) r.bytes_d2h += buffer_bytes[victim];
        v = entry{};
        resident -= align_up(buffer_bytes[victim], 256);
        ++r.evictions;
      }
      ++r.misses;
      if (use.access != access_mode::write) r.bytes_h2d += buffer_bytes[use.buffer];
      e.resident = true;
      resident += bytes;
    }
    if (use.access != access_mode::read) e.dirty = true;
    e.tick = ++tick;
    lru.emplace(e.tick, use.buffer);
  }
  return r;
}

}  // namespace vramkit::tier
