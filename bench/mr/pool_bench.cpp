// Allocator benchmarks (Google Benchmark): a random trace (2000 sizes uniform in 256 B..64 MiB,
// allocate all then free all, warm) and a recorded PyTorch training step (compact trace), each
// replayed on vramkit's pools (the classic pool, the virtual-memory pool, and the virtual-memory
// pool behind the C API entry points PyTorch's pluggable allocator calls) and on the baselines of
// the same machine: cudaMallocAsync from a warm pool and cudaMalloc/cudaFree on a GPU; the
// simulated device's own allocation on the CPU.
// Before timing, every resource replays the trace once with each block filled on its stream and
// checked at its free (a broken allocator cannot report a speed). Figures per allocation:
// median allocate and free latency (host clock around each call, ~20 ns of clock overhead
// included), their sum, and for the pools peak reserved / peak requested.
//
//   mr_pool_bench [--device=auto|cuda|sim] [--trace=FILE] [benchmark flags]
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "mr/c_api_testing.hpp"
#include "vramkit/core/cuda_device_api.hpp"
#include "vramkit/core/host_sim_device.hpp"
#include "vramkit/core/sample_stats.hpp"
#include "vramkit/core/units.hpp"
#include "vramkit/mr/c_api.h"
#include "vramkit/mr/cuda_async_resource.hpp"
#include "vramkit/mr/cuda_device_resource.hpp"
#include "vramkit/mr/device_api_resource.hpp"
#include "vramkit/mr/pool_resource.hpp"
#include "vramkit/mr/trace.hpp"
#include "vramkit/mr/vmm_pool_resource.hpp"

namespace {

using namespace vramkit;
using namespace vramkit::mr;

struct bench_stack {
  std::shared_ptr<device_api> api;
  std::shared_ptr<memory_resource> top;
  std::function<std::uint64_t()> peak_reserved;  // set for the pools
  std::vector<std::unique_ptr<owned_stream>> streams;
};

// Device 0's pool behind the C API (vramkit_torch_malloc / vramkit_free, what PyTorch's pluggable
// allocator calls), as a memory_resource so the replay loop is the same; the pool is the C API's
// default kind.
class c_api_resource final : public memory_resource {
 public:
  [[nodiscard]] memory_kind kind() const noexcept override { return memory_kind::device; }
  [[nodiscard]] std::string name() const override { return "vramkit C API"; }
  static std::uint64_t peak_reserved() {
    std::string s(vramkit_memory_stats_json(0, nullptr, 0), '\0');
    vramkit_memory_stats_json(0, s.data(), s.size() + 1);
    const std::string key = "\"reserved_bytes.all.peak\":";
    const auto at = s.find(key);
    return at == std::string::npos ? 0 : std::stoull(s.substr(at + key.size()));
  }

 private:
  void* do_allocate(std::size_t bytes, std::size_t, stream_view stream) override {
    return vramkit_torch_malloc(static_cast<ssize_t>(bytes), 0, stream.handle);
  }
  void do_deallocate(void* p, std::size_t bytes, std::size_t,
                     stream_view stream) noexcept override {
    vramkit_free(p, static_cast<ssize_t>(bytes), 0, stream.handle);
  }
};

template <typename Pool>
void set_pool(bench_stack& s, std::shared_ptr<Pool> pool) {
  s.top = pool;
  s.peak_reserved = [pool] {
    return static_cast<std::uint64_t>(pool->report().reserved_bytes.all.peak);
  };
}

void set_c_api(bench_stack& s) {
  vramkit_trim(0);
  vramkit_reset_peak(0);
  s.top = std::make_shared<c_api_resource>();
  s.peak_reserved = c_api_resource::peak_reserved;
}

using factory = std::function<bench_stack()>;

double median(std::vector<double> v) { return sample_stats::of(std::move(v)).median; }

// Replays `t` filling the first bytes of each block with a value of its own on its stream and
// checking them back at the free. Returns an empty string or what went wrong.
std::string verify(bench_stack& s, const trace& t, const std::vector<stream_view>& streams) {
  struct live {
    void* p;
    std::size_t n;
    stream_view st;
    unsigned char v;
  };
  std::unordered_map<std::uint64_t, live> blocks;
  std::vector<unsigned char> back(256);
  std::string problem;
  auto check_and_free = [&](live& b) {
    const std::size_t m = std::min<std::size_t>(b.n, 256);
    s.api->copy_async(back.data(), b.p, m, copy_kind::automatic, b.st);
    s.api->synchronize(b.st);
    for (std::size_t i = 0; i < m; ++i) {
      if (back[i] != b.v && problem.empty()) problem = "block contents changed while live";
    }
    s.top->deallocate(b.p, b.n, 256, b.st);
  };
  for (const auto& e : t.events) {
    const stream_view st = streams.empty() ? stream_view{} : streams[e.stream % streams.size()];
    if (e.op == trace_event::op_t::allocate) {
      void* p = s.top->allocate(e.bytes, 256, st);
      if (p == nullptr && e.bytes > 0) return "allocation returned null";
      const auto v = static_cast<unsigned char>(1 + e.id % 251);
      if (p != nullptr) s.api->fill_async(p, v, std::min<std::uint64_t>(e.bytes, 256), st);
      blocks[e.id] = {p, e.bytes, st, v};
    } else {
      auto it = blocks.find(e.id);
      if (it->second.p != nullptr) check_and_free(it->second);
      blocks.erase(it);
    }
  }
  for (auto& [id, b] : blocks) {
    if (b.p != nullptr) check_and_free(b);
  }
  return problem;
}

void run_replay(benchmark::State& state, const trace& t, const factory& make) {
  bench_stack s = make();
  for (std::uint32_t i = 0; i < std::max<std::uint32_t>(1, t.stream_count()); ++i) {
    s.streams.push_back(std::make_unique<owned_stream>(*s.api));
  }
  std::vector<stream_view> streams;
  for (auto& st : s.streams) streams.push_back(*st);
  const std::string problem = verify(s, t, streams);
  if (!problem.empty()) {
    state.SkipWithError(("verification failed: " + problem).c_str());
    return;
  }
  s.api->synchronize_device();
  (void)replay(*s.top, t, streams);  // warm
  if (s.peak_reserved) {
    if (dynamic_cast<c_api_resource*>(s.top.get()) != nullptr) {
      vramkit_reset_peak(0);
    } else {
      reset_peak_stats(*s.top);
    }
  }
  std::vector<double> alloc_ns;
  std::vector<double> free_ns;
  std::uint64_t peak_live = 0;
  replay_options o;
  o.record_latencies = true;
  for (auto _ : state) {
    replay_result r = replay(*s.top, t, streams, o);
    alloc_ns.insert(alloc_ns.end(), r.allocate_ns.begin(), r.allocate_ns.end());
    free_ns.insert(free_ns.end(), r.free_ns.begin(), r.free_ns.end());
    peak_live = r.peak_live_bytes;
    state.PauseTiming();
    s.api->synchronize_device();
    state.ResumeTiming();
  }
  const double a = median(alloc_ns);
  const double f = median(free_ns);
  state.counters["alloc_median_ns"] = a;
  state.counters["free_median_ns"] = f;
  state.counters["alloc_free_median_ns"] = a + f;
  state.counters["allocations"] = static_cast<double>(t.events.size() / 2);
  if (s.peak_reserved && peak_live > 0) {
    const auto peak = static_cast<double>(s.peak_reserved());
    state.counters["peak_reserved_over_peak_requested"] = peak / static_cast<double>(peak_live);
    state.counters["peak_reserved_MiB"] = peak / MiB;
  }
  state.counters["peak_requested_MiB"] = static_cast<double>(peak_live) / MiB;
}

std::vector<std::pair<std::string, factory>> cuda_factories(std::shared_ptr<device_api> api) {
  std::vector<std::pair<std::string, factory>> out;
  out.reserve(8);
  out.emplace_back("vramkit_pool/cuda_async", [api] {
    bench_stack s;
    s.api = api;
    set_pool(s, std::make_shared<pool_resource>(std::make_shared<cuda_async_resource>(), api));
    return s;
  });
  out.emplace_back("vramkit_pool/cuda", [api] {
    bench_stack s;
    s.api = api;
    set_pool(s, std::make_shared<pool_resource>(std::make_shared<cuda_device_resource>(), api));
    return s;
  });
  out.emplace_back("vramkit_vmm_pool/cuda", [api] {
    bench_stack s;
    s.api = api;
    set_pool(s, std::make_shared<vmm_pool_resource>(api));
    return s;
  });
  out.emplace_back("vramkit_c_api/cuda", [api] {
    bench_stack s;
    s.api = api;
    set_c_api(s);
    return s;
  });
  out.emplace_back("cuda_async_warm", [api] {
    bench_stack s;
    s.api = api;
    s.top = std::make_shared<cuda_async_resource>();  // release threshold: never
    return s;
  });
  out.emplace_back("cuda_malloc", [api] {
    bench_stack s;
    s.api = api;
    s.top = std::make_shared<cuda_device_resource>();
    return s;
  });
  return out;
}

std::vector<std::pair<std::string, factory>> sim_factories() {
  auto make_dev = [] {
    host_sim_options o;
    o.device_memory_bytes = std::size_t{1} << 40;  // address space only: poison is off
    o.poison_byte = -1;
    o.commit_physical = false;  // the virtual-memory pool's granules take host pages on first touch
    return std::make_shared<host_sim_device>(o);
  };
  std::vector<std::pair<std::string, factory>> out;
  out.reserve(8);
  out.emplace_back("vramkit_pool/host_sim", [make_dev] {
    bench_stack s;
    auto dev = make_dev();
    s.api = dev;
    set_pool(s, std::make_shared<pool_resource>(std::make_shared<device_api_resource>(dev), dev));
    return s;
  });
  out.emplace_back("vramkit_vmm_pool/host_sim", [make_dev] {
    bench_stack s;
    auto dev = make_dev();
    s.api = dev;
    set_pool(s, std::make_shared<vmm_pool_resource>(dev));
    return s;
  });
  out.emplace_back("vramkit_c_api/host_sim", [make_dev] {
    bench_stack s;
    auto dev = make_dev();
    s.api = dev;
    detail::set_c_api_device_api(dev);  // fresh C API pools over this device
    set_c_api(s);
    return s;
  });
  out.emplace_back("host_sim_direct", [make_dev] {
    bench_stack s;
    auto dev = make_dev();
    s.api = dev;
    s.top = std::make_shared<device_api_resource>(dev);
    return s;
  });
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string device = "auto";
  std::string trace_path = std::string(VRAMKIT_SOURCE_DIR) + "/tests/data/mr/llama_step.trace";
  std::vector<char*> rest;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--device=", 0) == 0) {
      device = a.substr(9);
    } else if (a.rfind("--trace=", 0) == 0) {
      trace_path = a.substr(8);
    } else {
      rest.push_back(argv[i]);
    }
  }
  int rest_argc = static_cast<int>(rest.size());
  benchmark::Initialize(&rest_argc, rest.data());
  if (device != "auto" && device != "cuda" && device != "sim") {
    std::fprintf(stderr, "mr_pool_bench: --device must be auto, cuda or sim (got '%s')\n",
                 device.c_str());
    return 2;
  }
  std::vector<std::pair<std::string, factory>> resources;
  auto cuda = vramkit::cuda_device_api();
  if (device == "cuda" && !cuda) {
    std::fprintf(stderr, "mr_pool_bench: %s\n", cuda.error().reason.c_str());
    return 1;
  }
  if (cuda && device != "sim") {
    resources = cuda_factories(*cuda);
    std::printf("device: %s (CUDA)\n", (*cuda)->properties(0).name.c_str());
  } else {
    resources = sim_factories();
    std::printf("device: simulated (host memory; %s)\n",
                cuda ? "forced" : cuda.error().reason.c_str());
  }
  static std::vector<std::pair<std::string, vramkit::mr::trace>> traces;
  traces.emplace_back("random2000", vramkit::mr::random_trace(2000, 256, 64 * vramkit::MiB, 1));
  if (std::filesystem::exists(trace_path)) {
    traces.emplace_back("llama_step", vramkit::mr::read_trace(trace_path));
  } else {
    std::printf("replayed trace %s not found: only the random trace runs\n", trace_path.c_str());
  }
  for (const auto& [tname, t] : traces) {
    for (const auto& [rname, make] : resources) {
      const trace* tp = &t;
      factory f = make;
      auto* b =
          benchmark::RegisterBenchmark(("BM_Replay/" + tname + "/" + rname).c_str(),
                                       [tp, f](benchmark::State& st) { run_replay(st, *tp, f); });
      b->Unit(benchmark::kMillisecond)->Iterations(rname == "cuda_malloc" ? 2 : 5);
    }
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
