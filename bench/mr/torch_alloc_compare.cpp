// torch_alloc_compare: replays a compact allocation trace against PyTorch's CUDA caching allocator
// (c10 raw_alloc_with_stream / raw_delete) and against vramkit's pool (vramkit_torch_malloc /
// vramkit_free, dlopen()ed from libvramkit_torch.so) in one process, and compares the per-call
// cost of each allocator without PyTorch's Python dispatch in the way. Single-threaded.
//
// Not part of the CMake build (torch is no build dependency): scripts/gpu-check.d/30-mr.sh
// compiles it against the installed PyTorch's headers and libraries (TI = torch/include,
// TL = torch/lib; the ABI flag as torch.compiled_with_cxx11_abi(); the stage also puts the
// directory of the libcudart that libc10_cuda.so loads on the rpath, before the toolkit's):
//   g++ -O2 -std=c++17 -D_GLIBCXX_USE_CXX11_ABI=1 -I$TI -I$TI/torch/csrc/api/include
//     -I$CUDA_HOME/include -Iinclude bench/mr/torch_alloc_compare.cpp src/core/sample_stats.cpp
//     -L$TL -lc10_cuda -lc10
//     -L$CUDA_HOME/lib64 -lcudart -ldl -Wl,-rpath,$TL -Wl,-rpath,$CUDA_HOME/lib64 -o ...
// and runs
//   torch_alloc_compare --trace FILE --lib libvramkit_torch.so [--repeats 5] [--json OUT]
//
// Method: one untimed verification pass per allocator (each block's first min(size, 256) bytes
// are set on the GPU at allocation and checked at its free; live blocks must not overlap), then
// `--repeats` timed passes per allocator, alternating torch, vramkit, torch, ... so that drift of
// the machine hits both alike. Every call is timed on its own with std::chrono::steady_clock. All
// work is on the legacy default stream (stream 0), PyTorch's default stream.
// Exit status: 0 ok, 1 runtime failure (CUDA error, allocation failure, verification mismatch),
// 2 usage error or malformed trace.

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <sys/types.h>
#include <unistd.h>  // environ

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "vramkit/core/sample_stats.hpp"

// The PyTorch-facing surface is everything inside torch_api below; the rest of the file does not
// include or name c10.
#include <c10/cuda/CUDACachingAllocator.h>

namespace {

struct invalid_input : std::runtime_error {
  using std::runtime_error::runtime_error;
};
struct run_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string format(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  va_list ap2;
  va_copy(ap2, ap);
  const int n = std::vsnprintf(nullptr, 0, fmt, ap);
  std::string s(n > 0 ? static_cast<std::size_t>(n) : 0, '\0');
  if (n > 0) std::vsnprintf(&s[0], s.size() + 1, fmt, ap2);
  va_end(ap2);
  va_end(ap);
  return s;
}

void cuda_check(cudaError_t rc, const char* what, const char* file, int line) {
  if (rc != cudaSuccess) {
    (void)cudaGetLastError();  // clear a sticky-free error so that later reports are not confused
    throw run_error(format("%s:%d: %s failed: %s (%s)", file, line, what, cudaGetErrorName(rc),
                           cudaGetErrorString(rc)));
  }
}
#define VRAMKIT_CUDA_CHECK(call) cuda_check((call), #call, __FILE__, __LINE__)

// ---- trace ------------------------------------------------------------------------------------

// One call of the replay. Frees name their allocation by its ordinal (`slot`), so that a timed
// pass indexes a vector and never hashes.
struct op {
  bool is_alloc = false;
  std::uint32_t slot = 0;
  std::size_t bytes = 0;
  unsigned char fill = 0;  // 1 + id % 251, the byte its first bytes are set to when verified
};

struct trace {
  std::string path;
  std::vector<op> ops;                // zero-size allocations and their frees left out
  std::size_t events = 0;             // a|f lines in the file
  std::size_t allocs = 0;             // size > 0
  std::size_t frees = 0;              // of size > 0
  std::size_t zero_size_skipped = 0;  // allocation events of 0 bytes
  std::size_t left_live = 0;          // allocations the trace never frees (freed untimed per pass)
  std::size_t peak_requested_bytes = 0;
};

bool parse_u64(const std::string& s, std::uint64_t& out) {
  if (s.empty() || s[0] == '-' || s[0] == '+') return false;
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  if (errno != 0 || end == s.c_str() || *end != '\0') return false;
  out = v;
  return true;
}

trace read_trace(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw invalid_input(path + ": cannot open");
  trace t;
  t.path = path;
  std::string line;
  std::size_t n = 1;
  if (!std::getline(in, line) || (line != "# vramkit-trace v1" && line != "# vramkit-trace v1\r")) {
    throw invalid_input(path + ":1: expected '# vramkit-trace v1'");
  }
  struct live_entry {
    std::uint32_t slot;
    std::uint64_t bytes;
  };
  std::unordered_map<std::uint64_t, live_entry> live;  // trace id -> allocation
  std::uint64_t last_time = 0;
  std::size_t live_bytes = 0;
  std::uint32_t next_slot = 0;
  constexpr std::uint32_t zero_slot = UINT32_MAX;  // a live zero-size allocation
  while (std::getline(in, line)) {
    ++n;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const std::size_t first = line.find_first_not_of(" \t");
    if (first == std::string::npos || line[first] == '#') continue;
    std::vector<std::string> f;
    for (std::size_t i = first; i < line.size();) {
      const std::size_t j = line.find_first_of(" \t", i);
      f.push_back(line.substr(i, j == std::string::npos ? std::string::npos : j - i));
      if (j == std::string::npos) break;
      i = line.find_first_not_of(" \t", j);
      if (i == std::string::npos) break;
    }
    auto bad = [&](const std::string& why) {
      return invalid_input(format("%s:%zu: %s", path.c_str(), n, why.c_str()));
    };
    if (f.size() != 5 || (f[0] != "a" && f[0] != "f")) {
      throw bad("expected 'a|f id bytes stream time_ns'");
    }
    std::uint64_t id = 0, bytes = 0, stream = 0, time_ns = 0;
    if (!parse_u64(f[1], id)) throw bad("bad id '" + f[1] + "'");
    if (!parse_u64(f[2], bytes) || bytes > (std::uint64_t{1} << 50)) {
      throw bad("bad byte count '" + f[2] + "'");
    }
    if (!parse_u64(f[3], stream)) throw bad("bad stream '" + f[3] + "'");
    if (!parse_u64(f[4], time_ns)) throw bad("bad time '" + f[4] + "'");
    if (stream != 0) {
      throw bad("stream " + f[3] + ": only stream 0 is replayed (PyTorch's default stream)");
    }
    if (time_ns < last_time) throw bad("time goes back");
    last_time = time_ns;
    ++t.events;
    const unsigned char fill = static_cast<unsigned char>(1 + id % 251);
    if (f[0] == "a") {
      if (live.count(id) != 0) throw bad("id " + f[1] + " allocated again while live");
      if (bytes == 0) {
        ++t.zero_size_skipped;
        live[id] = {zero_slot, 0};
        continue;
      }
      const std::uint32_t slot = next_slot++;
      live[id] = {slot, bytes};
      t.ops.push_back({true, slot, static_cast<std::size_t>(bytes), fill});
      ++t.allocs;
      live_bytes += bytes;
      t.peak_requested_bytes = std::max(t.peak_requested_bytes, live_bytes);
    } else {
      auto it = live.find(id);
      if (it == live.end()) throw bad("free of id " + f[1] + ", which is not live");
      if (it->second.bytes != bytes) {
        throw bad(format("free of id %s with %" PRIu64 " bytes, allocated with %" PRIu64,
                         f[1].c_str(), bytes, it->second.bytes));
      }
      if (it->second.slot != zero_slot) {
        t.ops.push_back({false, it->second.slot, static_cast<std::size_t>(bytes), fill});
        ++t.frees;
        live_bytes -= bytes;
      }
      live.erase(it);
    }
  }
  if (in.bad()) throw invalid_input(path + ": read error");
  for (const auto& kv : live) {
    if (kv.second.slot != zero_slot) ++t.left_live;
  }
  if (t.allocs == 0) throw invalid_input(path + ": no allocation of more than 0 bytes");
  return t;
}

// ---- the two allocators -----------------------------------------------------------------------

// PyTorch's CUDA caching allocator through c10's free functions (c10/cuda/CUDACachingAllocator.h).
// Allocation failure throws c10::Error (a std::exception).
namespace torch_api {
namespace cca = c10::cuda::CUDACachingAllocator;

void init(int device_count) { cca::init(device_count); }

inline void* alloc(std::size_t bytes, cudaStream_t stream) {
  return cca::raw_alloc_with_stream(bytes, stream);
}
inline void free(void* p) { cca::raw_delete(p); }

struct peaks {
  std::int64_t reserved = 0;
  std::int64_t allocated = 0;
};

// StatArray index 0 is StatType::AGGREGATE in every PyTorch 2.x.
peaks peak_stats(int device) {
  const auto stats = cca::getDeviceStats(static_cast<c10::DeviceIndex>(device));
  return {stats.reserved_bytes[0].peak, stats.allocated_bytes[0].peak};
}
void reset_peaks(int device) { cca::resetPeakStats(static_cast<c10::DeviceIndex>(device)); }

// The allocator backend's name ("native" or "cudaMallocAsync") where the allocator object has
// name(); "unknown" otherwise, so that a PyTorch without it still compiles.
template <class A>
auto name_of(A* a, int) -> decltype(std::string(a->name())) {
  return a == nullptr ? std::string("none") : std::string(a->name());
}
template <class A>
std::string name_of(A*, long) {
  return "unknown";
}
std::string backend_name() { return name_of(cca::get(), 0); }
}  // namespace torch_api

// vramkit's C ABI (include/vramkit/mr/c_api.h), resolved with dlsym.
struct vramkit_api {
  using malloc_fn = void* (*)(ssize_t, int, void*);
  using free_fn = void (*)(void*, ssize_t, int, void*);
  using stats_fn = std::size_t (*)(int, char*, std::size_t);
  using reset_fn = void (*)(int);
  void* handle = nullptr;
  malloc_fn malloc = nullptr;
  free_fn free = nullptr;
  stats_fn stats_json = nullptr;
  reset_fn reset_peak = nullptr;
};

vramkit_api load_vramkit(const std::string& path) {
  vramkit_api v;
  v.handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (v.handle == nullptr) {
    const char* e = dlerror();
    throw run_error("dlopen(" + path + "): " + (e != nullptr ? e : "unknown error"));
  }
  auto sym = [&](const char* name) {
    dlerror();
    void* s = dlsym(v.handle, name);
    if (s == nullptr) throw run_error(path + ": no symbol " + name);
    return s;
  };
  // The entry point PyTorch's pluggable allocator calls (vramkit_torch.use_vramkit_allocator).
  v.malloc = reinterpret_cast<vramkit_api::malloc_fn>(sym("vramkit_torch_malloc"));
  v.free = reinterpret_cast<vramkit_api::free_fn>(sym("vramkit_free"));
  v.stats_json = reinterpret_cast<vramkit_api::stats_fn>(sym("vramkit_memory_stats_json"));
  v.reset_peak = reinterpret_cast<vramkit_api::reset_fn>(sym("vramkit_reset_peak"));
  return v;
}

std::string vramkit_stats(const vramkit_api& v, int device) {
  std::string buf(1 << 16, '\0');
  std::size_t n = v.stats_json(device, &buf[0], buf.size());
  if (n + 1 > buf.size()) {
    buf.assign(n + 1, '\0');
    n = v.stats_json(device, &buf[0], buf.size());
  }
  buf.resize(std::min(n, buf.size() - 1));
  return buf;
}

// The number under `key` in the top-level object of `json` (not inside "pools" or other nested
// values, which repeat some keys); false when absent or not a number.
bool top_level_number(const std::string& json, const std::string& key, double& out) {
  int depth = 0;
  for (std::size_t i = 0; i < json.size(); ++i) {
    const char c = json[i];
    if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      --depth;
    } else if (c == '"') {
      std::size_t j = i + 1;
      std::string s;
      while (j < json.size() && json[j] != '"') {
        if (json[j] == '\\' && j + 1 < json.size()) ++j;
        s += json[j++];
      }
      std::size_t k = json.find_first_not_of(" \t\r\n", j + 1);
      if (depth == 1 && s == key && k != std::string::npos && json[k] == ':') {
        const char* start = json.c_str() + k + 1;
        char* end = nullptr;
        out = std::strtod(start, &end);
        return end != start;
      }
      i = j;
    }
  }
  return false;
}

// The two allocators behind one shape, so that the replay loops are the same code for both.
struct torch_side {
  static constexpr const char* name = "torch";
  void* alloc(std::size_t bytes) const { return torch_api::alloc(bytes, stream); }
  void free(void* p, std::size_t /*bytes*/) const { torch_api::free(p); }
  cudaStream_t stream = nullptr;
};

struct vramkit_side {
  static constexpr const char* name = "vramkit";
  void* alloc(std::size_t bytes) const {
    return api->malloc(static_cast<ssize_t>(bytes), device, stream);
  }
  void free(void* p, std::size_t bytes) const {
    api->free(p, static_cast<ssize_t>(bytes), device, stream);
  }
  const vramkit_api* api = nullptr;
  int device = 0;
  void* stream = nullptr;
};

// ---- replay -----------------------------------------------------------------------------------

constexpr std::size_t checked_bytes = 256;

// Untimed: sets the first min(size, 256) bytes of each block to its own byte on stream 0 and reads
// them back at its free; also rejects a block that overlaps a live one. Throws run_error on the
// first mismatch.
template <class Side>
std::size_t verify_pass(const Side& side, const trace& t) {
  std::vector<void*> ptrs(t.allocs, nullptr);
  std::map<std::uintptr_t, std::uintptr_t> live;  // start -> end of live blocks
  unsigned char back[checked_bytes];
  std::size_t checked = 0;
  for (const op& o : t.ops) {
    const std::size_t n = std::min(o.bytes, checked_bytes);
    if (o.is_alloc) {
      void* p = side.alloc(o.bytes);
      if (p == nullptr) {
        throw run_error(format("%s: allocation of %zu bytes returned NULL (verification pass)",
                               Side::name, o.bytes));
      }
      const auto a = reinterpret_cast<std::uintptr_t>(p);
      auto next = live.upper_bound(a);
      const bool hits_next = next != live.end() && next->first < a + o.bytes;
      const bool hits_prev = next != live.begin() && std::prev(next)->second > a;
      if (hits_next || hits_prev) {
        const auto other = hits_next ? *next : *std::prev(next);
        throw run_error(format("%s: block %p (%zu bytes) overlaps live block [%#" PRIxPTR
                               ", %#" PRIxPTR ")",
                               Side::name, p, o.bytes, other.first, other.second));
      }
      live.emplace(a, a + o.bytes);
      VRAMKIT_CUDA_CHECK(cudaMemsetAsync(p, o.fill, n, nullptr));
      ptrs[o.slot] = p;
    } else {
      void* p = ptrs[o.slot];
      // cudaMemcpy on the legacy stream waits for the memset and everything before it.
      VRAMKIT_CUDA_CHECK(cudaMemcpy(back, p, n, cudaMemcpyDeviceToHost));
      for (std::size_t i = 0; i < n; ++i) {
        if (back[i] != o.fill) {
          throw run_error(
              format("%s: verification failed: block %p (%zu bytes, trace fill %u) "
                     "reads %u at byte %zu when freed",
                     Side::name, p, o.bytes, unsigned{o.fill}, unsigned{back[i]}, i));
        }
      }
      ++checked;
      live.erase(reinterpret_cast<std::uintptr_t>(p));
      side.free(p, o.bytes);
      ptrs[o.slot] = nullptr;
    }
  }
  // Blocks the trace leaves live: check them too, then free them.
  for (const op& o : t.ops) {
    if (!o.is_alloc || ptrs[o.slot] == nullptr) continue;
    const std::size_t n = std::min(o.bytes, checked_bytes);
    VRAMKIT_CUDA_CHECK(cudaMemcpy(back, ptrs[o.slot], n, cudaMemcpyDeviceToHost));
    for (std::size_t i = 0; i < n; ++i) {
      if (back[i] != o.fill) {
        throw run_error(
            format("%s: verification failed: block %p (%zu bytes, trace fill %u) "
                   "reads %u at byte %zu at the end of the trace",
                   Side::name, ptrs[o.slot], o.bytes, unsigned{o.fill}, unsigned{back[i]}, i));
      }
    }
    ++checked;
    side.free(ptrs[o.slot], o.bytes);
    ptrs[o.slot] = nullptr;
  }
  VRAMKIT_CUDA_CHECK(cudaDeviceSynchronize());
  VRAMKIT_CUDA_CHECK(cudaGetLastError());
  return checked;
}

using clock_type = std::chrono::steady_clock;

struct pass_times {
  std::vector<std::int64_t> alloc_ns;
  std::vector<std::int64_t> free_ns;
};

// Timed: every allocation and free of the trace, each call between two clock reads. Blocks the
// trace leaves live are freed afterwards, untimed.
template <class Side>
pass_times timed_pass(const Side& side, const trace& t, std::vector<void*>& ptrs) {
  pass_times r;
  r.alloc_ns.reserve(t.allocs);
  r.free_ns.reserve(t.frees);
  std::fill(ptrs.begin(), ptrs.end(), nullptr);
  for (const op& o : t.ops) {
    if (o.is_alloc) {
      const auto t0 = clock_type::now();
      void* p = side.alloc(o.bytes);
      const auto t1 = clock_type::now();
      if (p == nullptr) {
        throw run_error(
            format("%s: allocation of %zu bytes returned NULL (timed pass)", Side::name, o.bytes));
      }
      ptrs[o.slot] = p;
      r.alloc_ns.push_back(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count());
    } else {
      void* p = ptrs[o.slot];
      const auto t0 = clock_type::now();
      side.free(p, o.bytes);
      const auto t1 = clock_type::now();
      ptrs[o.slot] = nullptr;
      r.free_ns.push_back(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count());
    }
  }
  for (const op& o : t.ops) {
    if (o.is_alloc && ptrs[o.slot] != nullptr) {
      side.free(ptrs[o.slot], o.bytes);
      ptrs[o.slot] = nullptr;
    }
  }
  VRAMKIT_CUDA_CHECK(cudaDeviceSynchronize());
  VRAMKIT_CUDA_CHECK(cudaGetLastError());
  return r;
}

// ---- statistics -------------------------------------------------------------------------------

double quantile(const std::vector<std::int64_t>& v, double q) {
  return vramkit::percentile(std::vector<double>(v.begin(), v.end()), q);
}

double mean(const std::vector<std::int64_t>& v) {
  if (v.empty()) return 0.0;
  long double s = 0;
  for (auto x : v) s += x;
  return static_cast<double>(s / static_cast<long double>(v.size()));
}

struct dist {
  std::size_t samples = 0;
  double median = 0, p10 = 0, p90 = 0, p99 = 0, min = 0, max = 0, mean = 0;
};

dist describe(const std::vector<std::int64_t>& v) {
  dist d;
  d.samples = v.size();
  if (v.empty()) return d;
  d.median = quantile(v, 0.5);
  d.p10 = quantile(v, 0.1);
  d.p90 = quantile(v, 0.9);
  d.p99 = quantile(v, 0.99);
  d.min = static_cast<double>(*std::min_element(v.begin(), v.end()));
  d.max = static_cast<double>(*std::max_element(v.begin(), v.end()));
  d.mean = mean(v);
  return d;
}

struct pass_summary {
  double alloc_median_ns, free_median_ns, alloc_mean_ns, free_mean_ns;
};

struct allocator_result {
  std::string name;
  std::vector<std::int64_t> alloc_ns, free_ns;  // all timed passes together
  std::vector<pass_summary> passes;
  std::size_t verified_blocks = 0;
  double peak_reserved_bytes = 0, peak_allocated_bytes = 0;
  double pool_peak_reserved_bytes = -1, device_reserved_peak_bytes = -1;  // vramkit only
};

void add_pass(allocator_result& r, pass_times&& p) {
  r.passes.push_back(
      {quantile(p.alloc_ns, 0.5), quantile(p.free_ns, 0.5), mean(p.alloc_ns), mean(p.free_ns)});
  r.alloc_ns.insert(r.alloc_ns.end(), p.alloc_ns.begin(), p.alloc_ns.end());
  r.free_ns.insert(r.free_ns.end(), p.free_ns.begin(), p.free_ns.end());
}

struct clock_cost {
  std::size_t samples = 0;
  double median_ns = 0, mean_ns = 0;
};

// The cost of one steady_clock read: the gap between back-to-back reads.
clock_cost measure_clock() {
  constexpr std::size_t n = 200000;
  std::vector<std::int64_t> d;
  d.reserve(n);
  auto prev = clock_type::now();
  const auto start = prev;
  for (std::size_t i = 0; i < n; ++i) {
    const auto now = clock_type::now();
    d.push_back(std::chrono::duration_cast<std::chrono::nanoseconds>(now - prev).count());
    prev = now;
  }
  clock_cost c;
  c.samples = n;
  c.median_ns = quantile(d, 0.5);
  c.mean_ns = static_cast<double>(
                  std::chrono::duration_cast<std::chrono::nanoseconds>(prev - start).count()) /
              static_cast<double>(n);
  return c;
}

// ---- report -----------------------------------------------------------------------------------

std::string json_str(const std::string& s) {
  std::string o = "\"";
  for (const char c : s) {
    switch (c) {
      case '"':
        o += "\\\"";
        break;
      case '\\':
        o += "\\\\";
        break;
      case '\n':
        o += "\\n";
        break;
      case '\t':
        o += "\\t";
        break;
      case '\r':
        o += "\\r";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          o += format("\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
        } else {
          o += c;
        }
    }
  }
  return o + "\"";
}

std::string json_num(double v) {
  if (!std::isfinite(v)) return "null";
  if (v == std::floor(v) && std::fabs(v) < 9e15) return format("%.0f", v);  // byte counts exact
  return format("%.9g", v);
}

double ratio(double a, double b) {
  return b > 0 ? a / b : std::numeric_limits<double>::quiet_NaN();
}

std::string dist_json(const dist& d) {
  return format(
      "{\"samples\": %zu, \"median_ns\": %s, \"p10_ns\": %s, \"p90_ns\": %s, "
      "\"p99_ns\": %s, \"min_ns\": %s, \"max_ns\": %s, \"mean_ns\": %s}",
      d.samples, json_num(d.median).c_str(), json_num(d.p10).c_str(), json_num(d.p90).c_str(),
      json_num(d.p99).c_str(), json_num(d.min).c_str(), json_num(d.max).c_str(),
      json_num(d.mean).c_str());
}

struct figures {
  dist alloc, free;
  double alloc_free_median_ns = 0;  // median alloc + median free
  double alloc_free_mean_ns = 0;    // (all alloc time + all free time) / allocations
};

figures figures_of(const allocator_result& r) {
  figures f;
  f.alloc = describe(r.alloc_ns);
  f.free = describe(r.free_ns);
  f.alloc_free_median_ns = f.alloc.median + f.free.median;
  long double total = 0;
  for (auto x : r.alloc_ns) total += x;
  for (auto x : r.free_ns) total += x;
  f.alloc_free_mean_ns =
      r.alloc_ns.empty() ? 0.0
                         : static_cast<double>(total / static_cast<long double>(r.alloc_ns.size()));
  return f;
}

std::string allocator_json(const allocator_result& r, const figures& f,
                           std::size_t peak_requested) {
  std::string o = "{\n";
  o += "  \"allocator\": " + json_str(r.name) + ",\n";
  o += "  \"alloc\": " + dist_json(f.alloc) + ",\n";
  o += "  \"free\": " + dist_json(f.free) + ",\n";
  o += "  \"alloc_median_ns\": " + json_num(f.alloc.median) + ",\n";
  o += "  \"free_median_ns\": " + json_num(f.free.median) + ",\n";
  o += "  \"alloc_free_median_ns\": " + json_num(f.alloc_free_median_ns) + ",\n";
  o += "  \"alloc_mean_ns\": " + json_num(f.alloc.mean) + ",\n";
  o += "  \"free_mean_ns\": " + json_num(f.free.mean) + ",\n";
  o += "  \"alloc_free_mean_ns\": " + json_num(f.alloc_free_mean_ns) + ",\n";
  o += "  \"passes\": [";
  for (std::size_t i = 0; i < r.passes.size(); ++i) {
    const auto& p = r.passes[i];
    o += format(
        "%s{\"alloc_median_ns\": %s, \"free_median_ns\": %s, \"alloc_mean_ns\": %s, "
        "\"free_mean_ns\": %s}",
        i ? ", " : "", json_num(p.alloc_median_ns).c_str(), json_num(p.free_median_ns).c_str(),
        json_num(p.alloc_mean_ns).c_str(), json_num(p.free_mean_ns).c_str());
  }
  o += "],\n";
  o += format("  \"verified_blocks\": %zu,\n", r.verified_blocks);
  o += "  \"peak_reserved_bytes\": " + json_num(r.peak_reserved_bytes) + ",\n";
  o += "  \"peak_allocated_bytes\": " + json_num(r.peak_allocated_bytes) + ",\n";
  if (r.pool_peak_reserved_bytes >= 0) {
    o += "  \"pool_peak_reserved_bytes\": " + json_num(r.pool_peak_reserved_bytes) + ",\n";
    o += "  \"device_reserved_peak_bytes\": " + json_num(r.device_reserved_peak_bytes) + ",\n";
  }
  o += "  \"peak_reserved_over_peak_allocated\": " +
       json_num(ratio(r.peak_reserved_bytes, r.peak_allocated_bytes)) + ",\n";
  o += "  \"peak_reserved_over_peak_requested\": " +
       json_num(ratio(r.peak_reserved_bytes, static_cast<double>(peak_requested))) + "\n";
  return o + "}";
}

std::string read_first_line_matching(const char* path, const char* prefix) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(prefix, 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) {
        const auto start = line.find_first_not_of(" \t", colon + 1);
        return start == std::string::npos ? "" : line.substr(start);
      }
    }
  }
  return "unknown";
}

std::string cuda_version_string(int v) { return format("%d.%d", v / 1000, (v % 1000) / 10); }

struct options {
  std::string trace_path, lib_path, json_path, torch_version;
  int repeats = 5;
  std::string command_line;
};

void usage(FILE* to) {
  std::fprintf(to,
               "usage: torch_alloc_compare --trace FILE --lib PATH/libvramkit_torch.so "
               "[--repeats N (5)] [--json OUT] [--torch-version TEXT]\n");
}

options parse_args(int argc, char** argv) {
  options o;
  for (int i = 0; i < argc; ++i) o.command_line += (i ? " " : "") + std::string(argv[i]);
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    std::string value;
    bool has_value = false;
    const auto eq = a.find('=');
    if (a.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = a.substr(eq + 1);
      a = a.substr(0, eq);
      has_value = true;
    }
    auto need = [&]() {
      if (has_value) return value;
      if (i + 1 >= argc) throw invalid_input(a + " needs a value");
      return std::string(argv[++i]);
    };
    if (a == "--trace") {
      o.trace_path = need();
    } else if (a == "--lib") {
      o.lib_path = need();
    } else if (a == "--json") {
      o.json_path = need();
    } else if (a == "--torch-version") {
      o.torch_version = need();
    } else if (a == "--repeats") {
      const std::string v = need();
      std::uint64_t n = 0;
      if (!parse_u64(v, n) || n < 1 || n > 1000) throw invalid_input("--repeats: 1..1000");
      o.repeats = static_cast<int>(n);
    } else if (a == "-h" || a == "--help") {
      usage(stdout);
      std::exit(0);
    } else {
      throw invalid_input("unknown argument '" + std::string(argv[i]) + "'");
    }
  }
  if (o.trace_path.empty()) throw invalid_input("--trace is required");
  if (o.lib_path.empty()) throw invalid_input("--lib is required");
  return o;
}

int run(const options& opt) {
  const trace t = read_trace(opt.trace_path);
  const clock_cost clk = measure_clock();

  int device_count = 0;
  VRAMKIT_CUDA_CHECK(cudaGetDeviceCount(&device_count));
  if (device_count < 1) throw run_error("no CUDA device");
  constexpr int device = 0;
  VRAMKIT_CUDA_CHECK(cudaSetDevice(device));
  VRAMKIT_CUDA_CHECK(cudaFree(nullptr));  // create the primary context before anything is timed
  cudaDeviceProp prop{};
  VRAMKIT_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  int driver = 0, runtime = 0;
  VRAMKIT_CUDA_CHECK(cudaDriverGetVersion(&driver));
  VRAMKIT_CUDA_CHECK(cudaRuntimeGetVersion(&runtime));

  torch_api::init(device_count);
  const std::string backend = torch_api::backend_name();
  const vramkit_api vk = load_vramkit(opt.lib_path);

  const torch_side torch_alloc{};  // stream 0: the legacy default stream, PyTorch's default
  vramkit_side vramkit_alloc;
  vramkit_alloc.api = &vk;
  vramkit_alloc.device = device;

  const char* conf = std::getenv("PYTORCH_CUDA_ALLOC_CONF");
  std::string vramkit_env;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, "VRAMKIT_", 8) == 0)
      vramkit_env += (vramkit_env.empty() ? "" : " ") + std::string(*e);
  }

  std::string head;
  head += "# torch_alloc_compare: replayed trace, allocator calls from C++ (one process)\n";
  head += "command: " + opt.command_line + "\n";
  head += format("device: %s (%d visible), driver %s, runtime %s; host CPU: %s\n", prop.name,
                 device_count, cuda_version_string(driver).c_str(),
                 cuda_version_string(runtime).c_str(),
                 read_first_line_matching("/proc/cpuinfo", "model name").c_str());
  head += "PyTorch: " +
          (opt.torch_version.empty() ? std::string("version not given") : opt.torch_version) +
          ", caching allocator backend '" + backend +
          "', PYTORCH_CUDA_ALLOC_CONF=" + (conf != nullptr ? conf : "(unset)") + "\n";
  head += "vramkit: " + opt.lib_path + ", environment: " +
          (vramkit_env.empty() ? std::string("(no VRAMKIT_ variables)") : vramkit_env) + "\n";
  head += format(
      "trace: %s: %zu events, %zu allocations and %zu frees replayed; %zu zero-size "
      "allocations skipped for both (PyTorch never calls its allocator for 0 bytes); "
      "%zu blocks left live at the end (freed after each pass, untimed); peak "
      "requested %.1f MiB\n",
      t.path.c_str(), t.events, t.allocs, t.frees, t.zero_size_skipped, t.left_live,
      static_cast<double>(t.peak_requested_bytes) / 1048576.0);
  head += format(
      "clock: std::chrono::steady_clock, one read costs %.1f ns (median of %zu "
      "back-to-back reads; mean %.1f ns); each timed call includes about one read\n",
      clk.median_ns, clk.samples, clk.mean_ns);
  std::fputs(head.c_str(), stdout);
  std::fflush(stdout);

  allocator_result tr, vr;
  tr.name = "torch";
  vr.name = "vramkit";

  // Verification first; nothing is timed or reported until both allocators pass.
  tr.verified_blocks = verify_pass(torch_alloc, t);
  vr.verified_blocks = verify_pass(vramkit_alloc, t);
  std::printf(
      "verification: torch passed (%zu blocks), vramkit passed (%zu blocks); first "
      "min(size, %zu) bytes of each block set at allocation and checked at its free, no "
      "two live blocks overlapping\n",
      tr.verified_blocks, vr.verified_blocks, checked_bytes);
  std::fflush(stdout);

  torch_api::reset_peaks(device);
  vk.reset_peak(device);

  std::vector<void*> ptrs(t.allocs, nullptr);
  for (int r = 0; r < opt.repeats; ++r) {
    add_pass(tr, timed_pass(torch_alloc, t, ptrs));
    add_pass(vr, timed_pass(vramkit_alloc, t, ptrs));
  }

  const torch_api::peaks tp = torch_api::peak_stats(device);
  tr.peak_reserved_bytes = static_cast<double>(tp.reserved);
  tr.peak_allocated_bytes = static_cast<double>(tp.allocated);
  const std::string vs = vramkit_stats(vk, device);
  double pool_reserved = 0, allocated = 0, device_reserved = 0;
  if (!top_level_number(vs, "reserved_bytes.all.peak", pool_reserved) ||
      !top_level_number(vs, "allocated_bytes.all.peak", allocated)) {
    throw run_error(
        "vramkit_memory_stats_json lacks reserved_bytes.all.peak or "
        "allocated_bytes.all.peak: " +
        vs.substr(0, 200));
  }
  if (!top_level_number(vs, "device_reserved_bytes.peak", device_reserved)) device_reserved = 0;
  // Which pool the library built (VRAMKIT_POOL_KIND, or its default): the first pool's name.
  std::string pool_name = "unknown";
  if (const auto at = vs.find("\"resource\":\""); at != std::string::npos) {
    const auto from = at + 12;
    pool_name = vs.substr(from, vs.find('"', from) - from);
  }
  vr.pool_peak_reserved_bytes = pool_reserved;
  vr.device_reserved_peak_bytes = device_reserved;
  // As torch_replay.py: the pool's peak, or the CUDA pool's below it where higher.
  vr.peak_reserved_bytes = std::max(pool_reserved, device_reserved);
  vr.peak_allocated_bytes = allocated;

  const figures tf = figures_of(tr), vf = figures_of(vr);
  const double req = static_cast<double>(t.peak_requested_bytes);

  std::string out;
  out += format(
      "\n%d timed passes per allocator, alternating torch, vramkit, torch, ...; "
      "per call, ns; alloc+free median = median alloc + median free, alloc+free mean "
      "= all timed alloc and free time / allocations\n\n",
      opt.repeats);
  out += format("%-8s %9s %8s %8s %8s %8s | %9s %8s %8s %8s %8s | %11s %11s\n", "", "allocs",
                "median", "p10", "p90", "mean", "frees", "median", "p10", "p90", "mean",
                "a+f median", "a+f mean");
  for (const auto* p : {&tr, &vr}) {
    const figures& f = p == &tr ? tf : vf;
    out += format(
        "%-8s %9zu %8.0f %8.0f %8.0f %8.1f | %9zu %8.0f %8.0f %8.0f %8.1f | %11.0f "
        "%11.1f\n",
        p->name.c_str(), f.alloc.samples, f.alloc.median, f.alloc.p10, f.alloc.p90, f.alloc.mean,
        f.free.samples, f.free.median, f.free.p10, f.free.p90, f.free.mean, f.alloc_free_median_ns,
        f.alloc_free_mean_ns);
  }
  out += format(
      "vramkit / torch: alloc median %.3f, free median %.3f, alloc+free median %.3f; "
      "alloc mean %.3f, free mean %.3f, alloc+free mean %.3f\n",
      ratio(vf.alloc.median, tf.alloc.median), ratio(vf.free.median, tf.free.median),
      ratio(vf.alloc_free_median_ns, tf.alloc_free_median_ns), ratio(vf.alloc.mean, tf.alloc.mean),
      ratio(vf.free.mean, tf.free.mean), ratio(vf.alloc_free_mean_ns, tf.alloc_free_mean_ns));
  out += "\nper pass (alloc median / free median, ns):\n";
  for (std::size_t i = 0; i < tr.passes.size(); ++i) {
    out += format("  pass %zu: torch %.0f / %.0f, vramkit %.0f / %.0f\n", i + 1,
                  tr.passes[i].alloc_median_ns, tr.passes[i].free_median_ns,
                  vr.passes[i].alloc_median_ns, vr.passes[i].free_median_ns);
  }
  out += "\npeak memory over the timed passes (peaks reset after verification):\n";
  out += format(
      "  torch:   reserved %.1f MiB, allocated %.1f MiB, reserved/allocated %.3f, "
      "reserved/requested %.3f\n",
      tr.peak_reserved_bytes / 1048576.0, tr.peak_allocated_bytes / 1048576.0,
      ratio(tr.peak_reserved_bytes, tr.peak_allocated_bytes), ratio(tr.peak_reserved_bytes, req));
  out += format(
      "  vramkit (%s): reserved %.1f MiB (pool %.1f MiB, device level %.1f MiB), allocated "
      "%.1f MiB, reserved/allocated %.3f, reserved/requested %.3f\n",
      pool_name.c_str(), vr.peak_reserved_bytes / 1048576.0, pool_reserved / 1048576.0,
      device_reserved / 1048576.0, vr.peak_allocated_bytes / 1048576.0,
      ratio(vr.peak_reserved_bytes, vr.peak_allocated_bytes), ratio(vr.peak_reserved_bytes, req));
  out += format("  vramkit / torch peak reserved: %.3f\n",
                ratio(vr.peak_reserved_bytes, tr.peak_reserved_bytes));
  std::fputs(out.c_str(), stdout);

  if (!opt.json_path.empty()) {
    std::string j = "{\n";
    j += "\"schema_version\": 1,\n";
    j += "\"tool\": \"torch_alloc_compare\",\n";
    j += "\"command_line\": " + json_str(opt.command_line) + ",\n";
    j += "\"device\": {\"name\": " + json_str(prop.name) +
         format(", \"visible_devices\": %d", device_count) +
         ", \"driver\": " + json_str(cuda_version_string(driver)) +
         ", \"runtime\": " + json_str(cuda_version_string(runtime)) +
         ", \"host_cpu\": " + json_str(read_first_line_matching("/proc/cpuinfo", "model name")) +
         "},\n";
    j += "\"torch_version\": " + json_str(opt.torch_version) + ",\n";
    j += "\"torch_allocator_backend\": " + json_str(backend) + ",\n";
    j += "\"pytorch_cuda_alloc_conf\": " + json_str(conf != nullptr ? conf : "") + ",\n";
    j += "\"vramkit_lib\": " + json_str(opt.lib_path) + ",\n";
    j += "\"vramkit_env\": " + json_str(vramkit_env) + ",\n";
    j += "\"vramkit_pool\": " + json_str(pool_name) + ",\n";
    j += "\"trace\": {\"path\": " + json_str(t.path) +
         format(
             ", \"events\": %zu, \"allocs\": %zu, \"frees\": %zu, \"zero_size_skipped\": %zu, "
             "\"left_live\": %zu, \"peak_requested_bytes\": %zu},\n",
             t.events, t.allocs, t.frees, t.zero_size_skipped, t.left_live, t.peak_requested_bytes);
    j += format("\"repeats\": %d,\n", opt.repeats);
    j += "\"order\": \"alternating passes, torch first\",\n";
    j += "\"stream\": \"legacy default stream (0)\",\n";
    j += format(
        "\"clock\": {\"name\": \"std::chrono::steady_clock\", \"read_median_ns\": %s, "
        "\"read_mean_ns\": %s, \"samples\": %zu},\n",
        json_num(clk.median_ns).c_str(), json_num(clk.mean_ns).c_str(), clk.samples);
    j += format(
        "\"verification\": {\"passed\": true, \"checked_bytes_per_block\": %zu, "
        "\"overlap_checked\": true},\n",
        checked_bytes);
    j += "\"torch\": " + allocator_json(tr, tf, t.peak_requested_bytes) + ",\n";
    j += "\"vramkit\": " + allocator_json(vr, vf, t.peak_requested_bytes) + ",\n";
    j += "\"ratios\": {";
    j +=
        "\"alloc_median_vramkit_over_torch\": " + json_num(ratio(vf.alloc.median, tf.alloc.median));
    j += ", \"free_median_vramkit_over_torch\": " + json_num(ratio(vf.free.median, tf.free.median));
    j += ", \"alloc_free_median_vramkit_over_torch\": " +
         json_num(ratio(vf.alloc_free_median_ns, tf.alloc_free_median_ns));
    j += ", \"alloc_mean_vramkit_over_torch\": " + json_num(ratio(vf.alloc.mean, tf.alloc.mean));
    j += ", \"free_mean_vramkit_over_torch\": " + json_num(ratio(vf.free.mean, tf.free.mean));
    j += ", \"alloc_free_mean_vramkit_over_torch\": " +
         json_num(ratio(vf.alloc_free_mean_ns, tf.alloc_free_mean_ns));
    j += ", \"peak_reserved_vramkit_over_torch\": " +
         json_num(ratio(vr.peak_reserved_bytes, tr.peak_reserved_bytes));
    j += "}\n}\n";
    FILE* f = std::fopen(opt.json_path.c_str(), "w");
    if (f == nullptr)
      throw run_error("cannot write " + opt.json_path + ": " + std::strerror(errno));
    const bool ok = std::fwrite(j.data(), 1, j.size(), f) == j.size();
    if (std::fclose(f) != 0 || !ok) throw run_error("write to " + opt.json_path + " failed");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  options opt;
  try {
    opt = parse_args(argc, argv);
  } catch (const invalid_input& e) {
    std::fprintf(stderr, "torch_alloc_compare: %s\n", e.what());
    usage(stderr);
    return 2;
  }
  try {
    return run(opt);
  } catch (const invalid_input& e) {
    std::fprintf(stderr, "torch_alloc_compare: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "torch_alloc_compare: %s\n", e.what());
    return 1;
  }
}
