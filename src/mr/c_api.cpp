// The C ABI: one pool per device, created at the first call for that device from environment
// variables; every exception is caught here. The per-device stacks are never destroyed, because
// PyTorch frees memory during interpreter shutdown after C++ static destructors may have run.
#include "vramkit/mr/c_api.h"

#include <array>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "mr/c_api_testing.hpp"
#include "mr/nvtx_range.hpp"
#include "mr/torch_error.hpp"
#include "vramkit/core/cuda_device_api.hpp"
#include "vramkit/core/error.hpp"
#include "vramkit/core/units.hpp"
#include "vramkit/mr/cuda_async_resource.hpp"
#include "vramkit/mr/device_api_resource.hpp"
#include "vramkit/mr/memory_summary.hpp"
#include "vramkit/mr/pool_layout.hpp"
#include "vramkit/mr/pool_resource.hpp"
#include "vramkit/mr/tracing_adaptor.hpp"
#include "vramkit/mr/vmm_pool_resource.hpp"

namespace vramkit::mr {
namespace {

constexpr int max_devices = 64;

struct device_stack {
  std::shared_ptr<device_api> api;
  std::shared_ptr<cuda_async_resource> async_upstream;  // when the upstream is cudaMallocAsync
  std::shared_ptr<pool_resource> pool;                  // VRAMKIT_POOL_KIND=pool
  std::shared_ptr<vmm_pool_resource> vmm;               // VRAMKIT_POOL_KIND=vmm
  std::shared_ptr<memory_resource> pool_top;            // whichever of the two
  std::shared_ptr<tracing_adaptor> tracing;             // when VRAMKIT_TRACE_FILE is set
  memory_resource* top = nullptr;
};

struct state {
  std::mutex m;
  std::mutex error_m;
  std::string last_error;  // of the most recent failed allocation, any thread
  std::shared_ptr<device_api> override_api;
  std::array<std::atomic<device_stack*>, max_devices> stacks{};
};

state& global() {
  static state* s = new state;  // never destroyed (see the file comment)
  return *s;
}

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return (v != nullptr && *v != '\0') ? v : nullptr;
}

std::size_t env_bytes(const char* name, std::size_t fallback) {
  const char* v = env(name);
  if (v == nullptr) return fallback;
  try {
    return static_cast<std::size_t>(parse_bytes(v));
  } catch (const std::exception& e) {
    throw invalid_input(std::string(name) + ": " + e.what());
  }
}

// A fraction: "0.02" or "2%"; throws invalid_input naming the variable otherwise.
double env_fraction(const char* name, double fallback) {
  const char* v = env(name);
  if (v == nullptr) return fallback;
  char* end = nullptr;
  double x = std::strtod(v, &end);
  if (end != v && *end == '%') {
    x /= 100.0;
    ++end;
  }
  if (end == v || *end != '\0' || !(x >= 0.0) || x > 1000.0) {
    throw invalid_input(std::string(name) + ": expected a fraction such as 0.02 or 2% (got '" + v +
                        "')");
  }
  return x;
}

unsigned env_count(const char* name, unsigned fallback) {
  const char* v = env(name);
  if (v == nullptr) return fallback;
  char* end = nullptr;
  errno = 0;
  const unsigned long x = std::strtoul(v, &end, 10);
  if (end == v || *end != '\0' || *v == '-' || errno != 0 || x > 1000000) {
    throw invalid_input(std::string(name) + ": expected a count such as 0 or 2 (got '" + v + "')");
  }
  return static_cast<unsigned>(x);
}

std::string with_device(const std::string& path, int device) {
  return device == 0 ? path : path + "." + std::to_string(device);
}

void flush_traces() {
  for (auto& slot : global().stacks) {
    device_stack* d = slot.load();
    if (d != nullptr && d->tracing) {
      try {
        d->tracing->flush();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "vramkit: %s\n", e.what());
      }
    }
  }
}

// Makes `device` current for the calling thread while it lives (the upstream allocates on the
// current device).
class device_guard {
 public:
  device_guard(device_api& api, int device) : api_(api) {
    previous_ = api_.current_device();
    if (previous_ != device) api_.set_device(device);
  }
  ~device_guard() {
    try {
      if (api_.current_device() != previous_) api_.set_device(previous_);
    } catch (...) {
    }
  }
  device_guard(const device_guard&) = delete;
  device_guard& operator=(const device_guard&) = delete;

 private:
  device_api& api_;
  int previous_ = 0;
};

// The pool kinds of the C API. The default is the virtual-memory pool: replayed side by side on an
// H200 (six traces: five recorded from real PyTorch programs, one random), it reserved 1.000-1.030
// x the peak requested, at or below PyTorch's expandable segments on every trace, 4.5-15.8 % below
// PyTorch's native allocator and 3.9 % (llama_step) to 13 % (random) below the classic pool
// (docs/results/2026-12-01-h200-final-run.md). The classic
// pool stays one variable away (VRAMKIT_POOL_KIND=pool), and is what a device without virtual
// memory management gets.
enum class kind_choice { vmm, pool, vmm_if_supported };

kind_choice pool_kind() {
  const char* kind = env("VRAMKIT_POOL_KIND");
  if (kind == nullptr) return kind_choice::vmm_if_supported;
  const std::string k = kind;
  if (k == "vmm") return kind_choice::vmm;
  if (k == "pool") return kind_choice::pool;
  throw invalid_input("VRAMKIT_POOL_KIND must be 'pool' or 'vmm' (got '" + k + "')");
}

// Variables that configure the classic pool only.
constexpr std::array<const char*, 7> classic_only = {
    "VRAMKIT_POOL_UPSTREAM",    "VRAMKIT_POOL_INITIAL",     "VRAMKIT_POOL_MAX_SPLIT",
    "VRAMKIT_POOL_LARGE_CHUNK", "VRAMKIT_POOL_LARGE_EXACT", "VRAMKIT_POOL_MIN_SPLIT_REMAINDER",
    "VRAMKIT_POOL_GROWTH"};

device_stack* make_stack(int device) {
  auto d = std::make_unique<device_stack>();
  state& g = global();
  if (g.override_api) {
    d->api = g.override_api;
  } else {
    auto api = cuda_device_api();
    if (!api) throw error("vramkit allocator: " + api.error().reason);
    d->api = *api;
  }
  device_guard guard(*d->api, device);
  detail::check_nvtx_setting();
  const kind_choice choice = pool_kind();
  bool use_vmm = choice == kind_choice::vmm;
  if (choice == kind_choice::vmm_if_supported) {
    use_vmm = d->api->vmm_granularity() != 0;
    if (!use_vmm) {
      std::fprintf(stderr,
                   "vramkit: device %d has no virtual memory management; using the classic pool "
                   "(VRAMKIT_POOL_KIND=pool)\n",
                   device);
    }
  }
  if (use_vmm) {
    vmm_pool_options v;
    v.rounding = env_bytes("VRAMKIT_POOL_ROUNDING", v.rounding);
    v.maximum_size = env_bytes("VRAMKIT_POOL_MAXIMUM", v.maximum_size);
    v.growth_slack = env_fraction("VRAMKIT_POOL_SLACK", v.growth_slack);
    v.growth_slack_max = env_fraction("VRAMKIT_POOL_SLACK_MAX", v.growth_slack_max);
    v.max_repeated_remaps = env_count("VRAMKIT_POOL_REMAP_REPEATS", v.max_repeated_remaps);
    for (const char* other : classic_only) {
      if (env(other) != nullptr) {
        throw invalid_input(std::string(other) +
                            " applies to the classic pool only: set VRAMKIT_POOL_KIND=pool "
                            "(the default is the virtual-memory pool, vmm)");
      }
    }
    d->vmm = std::make_shared<vmm_pool_resource>(d->api, v);
    d->pool_top = d->vmm;
  }
  if (!d->vmm) {
    for (const char* vmm_only :
         {"VRAMKIT_POOL_SLACK", "VRAMKIT_POOL_SLACK_MAX", "VRAMKIT_POOL_REMAP_REPEATS"}) {
      if (env(vmm_only) == nullptr) continue;
      throw invalid_input(std::string(vmm_only) + " applies to the virtual-memory pool only (" +
                          std::string(choice == kind_choice::pool
                                          ? "VRAMKIT_POOL_KIND=pool"
                                          : "this device has no virtual memory management") +
                          ")");
    }
    // The classic pool's upstream (the vmm pool maps physical memory itself).
    std::shared_ptr<memory_resource> upstream;
    const char* kind = env("VRAMKIT_POOL_UPSTREAM");
    const std::string up = kind != nullptr ? kind : "async";
    if (g.override_api) {
      upstream = std::make_shared<device_api_resource>(d->api);
    } else if (up == "async") {
      cuda_async_options a;
      a.device = device;
      d->async_upstream = std::make_shared<cuda_async_resource>(a);
      upstream = d->async_upstream;
    } else if (up == "cuda") {
      upstream = std::make_shared<device_api_resource>(d->api);
    } else {
      throw invalid_input("VRAMKIT_POOL_UPSTREAM must be 'async' or 'cuda' (got '" + up + "')");
    }
    pool_options o;
    o.initial_size = env_bytes("VRAMKIT_POOL_INITIAL", 0);
    o.rounding = env_bytes("VRAMKIT_POOL_ROUNDING", o.rounding);
    o.max_split = env_bytes("VRAMKIT_POOL_MAX_SPLIT", o.max_split);
    o.large_chunk_size = env_bytes("VRAMKIT_POOL_LARGE_CHUNK", o.large_chunk_size);
    o.large_exact_size = env_bytes("VRAMKIT_POOL_LARGE_EXACT", o.large_exact_size);
    o.large_min_split_remainder =
        env_bytes("VRAMKIT_POOL_MIN_SPLIT_REMAINDER", o.large_min_split_remainder);
    o.maximum_size = env_bytes("VRAMKIT_POOL_MAXIMUM", o.maximum_size);
    // Returning idle chunks before growing suits a stream-ordered upstream only (no host sync). Not
    // the default: on the replayed LLaMA step it cost ~2 us per torch.empty in cudaMallocAsync
    // calls.
    const char* growth = env("VRAMKIT_POOL_GROWTH");
    const std::string g_policy = growth != nullptr ? growth : "keep";
    if (g_policy == "release") {
      if (!d->async_upstream && !g.override_api) {
        throw invalid_input("VRAMKIT_POOL_GROWTH=release needs VRAMKIT_POOL_UPSTREAM=async");
      }
      o.growth = pool_options::growth_policy::release_on_grow;
    } else if (g_policy != "keep") {
      throw invalid_input("VRAMKIT_POOL_GROWTH must be 'keep' or 'release' (got '" + g_policy +
                          "')");
    }
    d->pool = std::make_shared<pool_resource>(upstream, d->api, o);
    d->pool_top = d->pool;
  }
  d->top = d->pool_top.get();
  const char* trace_file = env("VRAMKIT_TRACE_FILE");
  const char* chrome_file = env("VRAMKIT_TRACE_CHROME_FILE");
  if (trace_file != nullptr || chrome_file != nullptr) {
    tracing_options t;
    if (trace_file != nullptr) t.compact_trace_path = with_device(trace_file, device);
    if (chrome_file != nullptr) t.chrome_trace_path = with_device(chrome_file, device);
    d->tracing = std::make_shared<tracing_adaptor>(d->pool_top, t);
    d->top = d->tracing.get();
    static std::once_flag once;
    std::call_once(once, [] { std::atexit(flush_traces); });
  }
  return d.release();
}

// The stack of `device`, created on first use; throws on a bad ordinal or a failed creation.
device_stack& stack_for(int device) {
  if (device < 0 || device >= max_devices) {
    throw invalid_input("device ordinal " + std::to_string(device) + " out of range");
  }
  state& g = global();
  device_stack* d = g.stacks[device].load(std::memory_order_acquire);
  if (d != nullptr) return *d;
  std::lock_guard lock(g.m);
  d = g.stacks[device].load(std::memory_order_relaxed);
  if (d == nullptr) {
    d = make_stack(device);
    g.stacks[device].store(d, std::memory_order_release);
  }
  return *d;
}

device_stack* existing(int device) {
  if (device < 0 || device >= max_devices) return nullptr;
  return global().stacks[device].load(std::memory_order_acquire);
}

std::size_t copy_out(const std::string& s, char* buf, std::size_t cap) {
  if (buf != nullptr && cap > 0) {
    const std::size_t n = std::min(cap - 1, s.size());
    std::memcpy(buf, s.data(), n);
    buf[n] = '\0';
  }
  return s.size();
}

void set_last_error(const std::string& message) {
  state& g = global();
  std::lock_guard lock(g.error_m);
  g.last_error = message;
}

void* allocate_on(ssize_t size, int device, void* stream) {
  device_stack& d = stack_for(device);
  device_guard guard(*d.api, device);
  return d.top->allocate(static_cast<std::size_t>(size), default_alignment, stream_view{stream});
}

// For callers whose `device` is the calling thread's current device: no device guard and its two
// cudaGetDevice calls, the main difference in code between a cached allocation through the C API
// (alloc median 385 ns from C++) and the pool called directly (135-164 ns; H200, 2026-12-01).
void* allocate_on_current(ssize_t size, int device, void* stream) {
  device_stack& d = stack_for(device);
  return d.top->allocate(static_cast<std::size_t>(size), default_alignment, stream_view{stream});
}

std::string failure_message(ssize_t size, int device, const char* what) {
  return "vramkit_malloc(" + std::to_string(size) + " bytes, device " + std::to_string(device) +
         ") failed: " + what;
}

}  // namespace

namespace detail {

void set_c_api_device_api(std::shared_ptr<device_api> api) {
  state& g = global();
  std::lock_guard lock(g.m);
  for (auto& slot : g.stacks) {
    delete slot.exchange(nullptr);
  }
  g.override_api = std::move(api);
}

}  // namespace detail
}  // namespace vramkit::mr

using vramkit::mr::device_stack;

extern "C" void* vramkit_malloc(ssize_t size, int device, void* stream) {
  if (size <= 0) return nullptr;
  try {
    return vramkit::mr::allocate_on(size, device, stream);
  } catch (const std::exception& e) {
    const std::string m = vramkit::mr::failure_message(size, device, e.what());
    vramkit::mr::set_last_error(m);
    std::fprintf(stderr, "%s\n", m.c_str());
  } catch (...) {
    const std::string m = vramkit::mr::failure_message(size, device, "unknown exception");
    vramkit::mr::set_last_error(m);
    std::fprintf(stderr, "%s\n", m.c_str());
  }
  return nullptr;
}

extern "C" void* vramkit_torch_malloc(ssize_t size, int device, void* stream) {
  if (size <= 0) return nullptr;
  try {
    // PyTorch's CUDAPluggableAllocator passes the current device (c10::cuda::GetDevice in its
    // allocate, raw_alloc and raw_alloc_with_stream).
    return vramkit::mr::allocate_on_current(size, device, stream);
  } catch (const vramkit::out_of_memory& e) {
    const std::string m = vramkit::mr::failure_message(size, device, e.what());
    vramkit::mr::set_last_error(m);
    vramkit::mr::detail::rethrow_as_torch_out_of_memory(m);
  } catch (const std::exception& e) {
    vramkit::mr::set_last_error(vramkit::mr::failure_message(size, device, e.what()));
    throw;
  }
}

extern "C" size_t vramkit_last_error(char* buf, size_t cap) {
  vramkit::mr::state& g = vramkit::mr::global();
  std::string copy;
  {
    std::lock_guard lock(g.error_m);
    copy = g.last_error;
  }
  return vramkit::mr::copy_out(copy, buf, cap);
}

extern "C" void vramkit_free(void* ptr, ssize_t size, int device, void* stream) {
  if (ptr == nullptr) return;
  device_stack* d = vramkit::mr::existing(device);
  if (d == nullptr) {
    std::fprintf(stderr, "vramkit_free(%p): device %d has no vramkit pool; ignored\n", ptr, device);
    return;
  }
  d->top->deallocate(ptr, size > 0 ? static_cast<std::size_t>(size) : 0,
                     vramkit::mr::default_alignment, vramkit::stream_view{stream});
}

extern "C" size_t vramkit_memory_summary(int device, char* buf, size_t cap) {
  try {
    device_stack* d = vramkit::mr::existing(device);
    if (d == nullptr) {
      return vramkit::mr::copy_out(
          "vramkit: device " + std::to_string(device) + " has no pool yet (no allocation)\n", buf,
          cap);
    }
    return vramkit::mr::copy_out(
        vramkit::mr::memory_summary(*d->top,
                                    "vramkit memory summary, device " + std::to_string(device)),
        buf, cap);
  } catch (const std::exception& e) {
    return vramkit::mr::copy_out(std::string("vramkit: summary failed: ") + e.what() + "\n", buf,
                                 cap);
  }
}

extern "C" size_t vramkit_memory_stats_json(int device, char* buf, size_t cap) {
  try {
    device_stack* d = vramkit::mr::existing(device);
    if (d == nullptr) {
      return vramkit::mr::copy_out("{\"schema_version\":1,\"stack\":[],\"pools\":[]}", buf, cap);
    }
    return vramkit::mr::copy_out(vramkit::mr::memory_stats_json(*d->top), buf, cap);
  } catch (const std::exception& e) {
    return vramkit::mr::copy_out("{\"schema_version\":1,\"error\":\"stats failed\"}", buf, cap);
  }
}

extern "C" size_t vramkit_memory_snapshot_json(int device, int device_count, char* buf,
                                               size_t cap) {
  try {
    device_stack* d = vramkit::mr::existing(device);
    std::vector<vramkit::mr::pool_segment_info> segments;
    std::vector<vramkit::mr::traced_event> events;
    if (d != nullptr) {
      segments = d->vmm ? d->vmm->layout() : d->pool->layout();
      if (d->tracing) events = d->tracing->events();
    }
    return vramkit::mr::copy_out(
        vramkit::mr::torch_snapshot_json(segments, device, device_count,
                                         d != nullptr && d->tracing ? &events : nullptr),
        buf, cap);
  } catch (const std::exception& e) {
    return vramkit::mr::copy_out("{\"error\":\"snapshot failed\"}", buf, cap);
  }
}

extern "C" void vramkit_reset_peak(int device) {
  device_stack* d = vramkit::mr::existing(device);
  if (d != nullptr) vramkit::mr::reset_peak_stats(*d->top);
}

extern "C" int vramkit_trim(int device) {
  try {
    device_stack* d = vramkit::mr::existing(device);
    if (d == nullptr) return 0;
    vramkit::mr::device_guard guard(*d->api, device);
    if (d->vmm) {
      d->vmm->trim();
    } else {
      d->pool->trim();
    }
    if (d->async_upstream) {
      // The chunks went back with cudaFreeAsync: the CUDA pool keeps them reserved until those
      // frees have run, so wait for them first (torch.cuda.empty_cache synchronizes too).
      d->api->synchronize_device();
      d->async_upstream->trim_to(0);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "vramkit_trim(device %d) failed: %s\n", device, e.what());
    return -1;
  }
}
