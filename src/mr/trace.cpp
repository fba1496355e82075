// Compact trace format: parse, write, replay, synthesize.
#include "vramkit/mr/trace.hpp"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <fstream>
#include <random>
#include <sstream>
#include <unordered_map>

#include "vramkit/core/error.hpp"

namespace vramkit::mr {
namespace {

bool parse_u64(std::string_view s, std::uint64_t& out) {
  if (s.empty() || s[0] == '-' || s[0] == '+') return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc{} && p == s.data() + s.size();
}

std::vector<std::string_view> split_fields(std::string_view line) {
  std::vector<std::string_view> out;
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    std::size_t j = i;
    while (j < line.size() && line[j] != ' ' && line[j] != '\t') ++j;
    if (j > i) out.push_back(line.substr(i, j - i));
    i = j;
  }
  return out;
}

}  // namespace

std::uint32_t trace::stream_count() const {
  std::uint32_t n = 0;
  for (const auto& e : events) n = std::max(n, e.stream + 1);
  return n;
}

trace parse_trace(std::istream& in, const std::string& source) {
  trace t;
  std::unordered_map<std::uint64_t, std::uint64_t> live;
  std::string line;
  std::size_t number = 0;
  std::int64_t last_time = 0;
  auto fail = [&](const std::string& what) -> void {
    throw invalid_input(source + ":" + std::to_string(number) + ": " + what);
  };
  while (std::getline(in, line)) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (number == 1) {
      if (line != trace_magic)
        fail(std::string("expected '") + trace_magic + "' as the first line");
      continue;
    }
    std::string_view v(line);
    while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
    if (v.empty()) continue;
    if (v.front() == '#') {
      t.comments.emplace_back(v.substr(1));
      continue;
    }
    const auto f = split_fields(v);
    if (f.size() != 5 || f[0].size() != 1 || (f[0][0] != 'a' && f[0][0] != 'f')) {
      fail("expected 'a|f <id> <bytes> <stream> <time_ns>', got '" + std::string(v.substr(0, 60)) +
           "'");
    }
    std::uint64_t id = 0, bytes = 0, stream = 0, time = 0;
    if (!parse_u64(f[1], id) || !parse_u64(f[2], bytes) || !parse_u64(f[3], stream) ||
        !parse_u64(f[4], time)) {
      fail("fields must be non-negative integers in '" + std::string(v.substr(0, 60)) + "'");
    }
    if (stream > 0xFFFF) fail("stream " + std::to_string(stream) + " is not a small integer");
    if (time > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
      fail("time out of range");
    }
    if (static_cast<std::int64_t>(time) < last_time) {
      fail("time " + std::to_string(time) + " goes back from " + std::to_string(last_time));
    }
    last_time = static_cast<std::int64_t>(time);
    trace_event e;
    e.op = f[0][0] == 'a' ? trace_event::op_t::allocate : trace_event::op_t::free;
    e.id = id;
    e.bytes = bytes;
    e.stream = static_cast<std::uint32_t>(stream);
    e.time_ns = static_cast<std::int64_t>(time);
    if (e.op == trace_event::op_t::allocate) {
      if (!live.emplace(id, bytes).second) {
        fail("id " + std::to_string(id) + " allocated while still live");
      }
    } else {
      auto it = live.find(id);
      if (it == live.end()) fail("free of id " + std::to_string(id) + " that is not live");
      if (it->second != bytes) {
        fail("free of id " + std::to_string(id) + " with " + std::to_string(bytes) +
             " bytes, allocated with " + std::to_string(it->second));
      }
      live.erase(it);
    }
    t.events.push_back(e);
  }
  if (number == 0) throw invalid_input(source + ": empty trace (no '" + trace_magic + "' line)");
  return t;
}

trace read_trace(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw invalid_input("cannot open trace file '" + path + "'");
  return parse_trace(in, path);
}

void write_trace(std::ostream& out, const trace& t) {
  out << trace_magic << '\n';
  for (const auto& c : t.comments) out << '#' << c << '\n';
  std::string line;
  for (const auto& e : t.events) {
    line.clear();
    line += static_cast<char>(e.op);
    line += ' ';
    line += std::to_string(e.id);
    line += ' ';
    line += std::to_string(e.bytes);
    line += ' ';
    line += std::to_string(e.stream);
    line += ' ';
    line += std::to_string(e.time_ns);
    line += '\n';
    out << line;
  }
}

void write_trace(const std::string& path, const trace& t) {
  std::ofstream out(path);
  if (!out) throw error("cannot write trace file '" + path + "'");
  write_trace(out, t);
  out.flush();
  if (!out) throw error("writing trace file '" + path + "' failed");
}

replay_result replay(memory_resource& resource, const trace& t,
                     std::span<const stream_view> streams, replay_options options) {
  using clock = std::chrono::steady_clock;
  // Dense slots, computed before timing so the replay loop does no hashing.
  struct op {
    bool alloc;
    std::uint32_t slot;
    std::size_t bytes;
    stream_view stream;
  };
  std::vector<op> ops;
  ops.reserve(t.events.size());
  std::unordered_map<std::uint64_t, std::uint32_t> slot_of;
  std::vector<std::uint32_t> free_slots;
  std::uint32_t slots = 0;
  std::uint64_t live_bytes = 0;
  replay_result r;
  for (const auto& e : t.events) {
    const stream_view s = streams.empty() ? stream_view{} : streams[e.stream % streams.size()];
    if (e.op == trace_event::op_t::allocate) {
      std::uint32_t slot;
      if (!free_slots.empty()) {
        slot = free_slots.back();
        free_slots.pop_back();
      } else {
        slot = slots++;
      }
      slot_of[e.id] = slot;
      ops.push_back({true, slot, static_cast<std::size_t>(e.bytes), s});
      live_bytes += e.bytes;
      r.peak_live_bytes = std::max(r.peak_live_bytes, live_bytes);
    } else {
      auto it = slot_of.find(e.id);
      if (it == slot_of.end())
        throw invalid_input("replay: free of id " + std::to_string(e.id) + " that is not live");
      ops.push_back({false, it->second, static_cast<std::size_t>(e.bytes), s});
      free_slots.push_back(it->second);
      slot_of.erase(it);
      live_bytes -= e.bytes;
    }
  }
  struct live_block {
    void* ptr = nullptr;
    std::size_t bytes = 0;
    stream_view stream;
    bool live = false;
  };
  std::vector<live_block> blocks(slots);
  if (options.record_latencies) {
    r.allocate_ns.reserve(ops.size());
    r.free_ns.reserve(ops.size());
  }
  auto free_rest = [&] {
    for (auto& b : blocks) {
      if (!b.live) continue;
      resource.deallocate(b.ptr, b.bytes, options.alignment, b.stream);
      b.live = false;
      ++r.frees;
    }
  };
  const auto start = clock::now();
  try {
    for (const op& o : ops) {
      live_block& b = blocks[o.slot];
      if (o.alloc) {
        if (options.record_latencies) {
          const auto t0 = clock::now();
          b.ptr = resource.allocate(o.bytes, options.alignment, o.stream);
          const auto t1 = clock::now();
          r.allocate_ns.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count());
        } else {
          b.ptr = resource.allocate(o.bytes, options.alignment, o.stream);
        }
        b.bytes = o.bytes;
        b.stream = o.stream;
        b.live = true;
        ++r.allocations;
      } else {
        if (options.record_latencies) {
          const auto t0 = clock::now();
          resource.deallocate(b.ptr, b.bytes, options.alignment, o.stream);
          const auto t1 = clock::now();
          r.free_ns.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count());
        } else {
          resource.deallocate(b.ptr, b.bytes, options.alignment, o.stream);
        }
        b.live = false;
        ++r.frees;
      }
    }
  } catch (...) {
    free_rest();
    throw;
  }
  free_rest();
  r.seconds = std::chrono::duration<double>(clock::now() - start).count();
  return r;
}

trace random_trace(std::size_t count, std::uint64_t min_bytes, std::uint64_t max_bytes,
                   std::uint64_t seed) {
  if (min_bytes > max_bytes) throw invalid_input("random_trace: min_bytes > max_bytes");
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::uint64_t> size(min_bytes, max_bytes);
  trace t;
  t.comments.push_back(" source: vramkit random_trace seed " + std::to_string(seed));
  std::int64_t time = 0;
  for (std::size_t i = 0; i < count; ++i) {
    t.events.push_back({trace_event::op_t::allocate, i, size(rng), 0, time++});
  }
  for (std::size_t i = 0; i < count; ++i) {
    t.events.push_back({trace_event::op_t::free, i, t.events[i].bytes, 0, time++});
  }
  return t;
}

}  // namespace vramkit::mr
