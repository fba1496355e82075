// run_gpu_probe: the device header (CUDA attributes, NVML, NUMA node) and the per-device loop over
// the GPU sections, plus the shared timing and verification helpers of gpu_probe_detail.hpp.
#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <optional>
#include <thread>

#include <sys/syscall.h>
#include <unistd.h>

#include "common/cuda_check.hpp"
#include "gpu_probe_detail.hpp"
#include "vramkit/core/cuda_device_api.hpp"
#include "vramkit/core/error.hpp"
#include "vramkit/core/nvml_api.hpp"
#include "vramkit/probe/gpu_probe.hpp"
#include "vramkit/probe/memory_budget.hpp"

namespace vramkit::probe {
namespace detail {

// --- RAII owners --------------------------------------------------------------------------------

device_buffer::device_buffer(std::size_t bytes) : bytes_(bytes) {
  VRAMKIT_CUDA_TRY(cudaMalloc(&ptr_, bytes));
}
device_buffer::~device_buffer() { VRAMKIT_CUDA_ASSERT(cudaFree(ptr_)); }

pinned_buffer::pinned_buffer(std::size_t bytes, mapping m) : bytes_(bytes) {
  unsigned flags = cudaHostAllocPortable | (m == mapping::mapped ? cudaHostAllocMapped : 0u);
  VRAMKIT_CUDA_TRY(cudaHostAlloc(&ptr_, bytes, flags));
}
pinned_buffer::~pinned_buffer() { VRAMKIT_CUDA_ASSERT(cudaFreeHost(ptr_)); }
void* pinned_buffer::device_ptr() const {
  void* d = nullptr;
  VRAMKIT_CUDA_TRY(cudaHostGetDevicePointer(&d, ptr_, 0));
  return d;
}

owned_cuda_stream::owned_cuda_stream() {
  VRAMKIT_CUDA_TRY(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking));
}
owned_cuda_stream::~owned_cuda_stream() { VRAMKIT_CUDA_ASSERT(cudaStreamDestroy(s_)); }

owned_cuda_event::owned_cuda_event() { VRAMKIT_CUDA_TRY(cudaEventCreate(&e_)); }
owned_cuda_event::~owned_cuda_event() { VRAMKIT_CUDA_ASSERT(cudaEventDestroy(e_)); }

double elapsed_ms(cudaEvent_t from, cudaEvent_t to) {
  float ms = 0;
  VRAMKIT_CUDA_TRY(cudaEventElapsedTime(&ms, from, to));
  return ms;
}

// --- stream blocker -----------------------------------------------------------------------------

namespace {
// Long enough for any enqueue burst, short enough that a stuck run ends instead of hanging.
constexpr std::uint64_t spin_timeout_ns = 5'000'000'000ull;
}  // namespace

stream_blocker::stream_blocker() : flags_(2 * sizeof(int), pinned_buffer::mapping::mapped) {
  static_cast<volatile int*>(flags_.get())[0] = 0;
  static_cast<volatile int*>(flags_.get())[1] = 0;
}

stream_blocker::~stream_blocker() { release(); }

void stream_blocker::block(cudaStream_t stream) {
  auto* h = static_cast<volatile int*>(flags_.get());
  h[0] = 0;
  h[1] = 0;
  auto* d = static_cast<int*>(flags_.device_ptr());
  VRAMKIT_CUDA_TRY(launch_spin(d, spin_timeout_ns, d + 1, stream));
}

void stream_blocker::release() {
  auto* h = static_cast<volatile int*>(flags_.get());
  std::atomic_thread_fence(std::memory_order_seq_cst);
  h[0] = 1;
}

void stream_blocker::check() {
  if (static_cast<volatile int*>(flags_.get())[1] != 0) {
    throw cuda_error(0, "the stream blocker timed out: enqueueing the timed work took over 5 s");
  }
}

std::vector<double> time_blocked(stream_blocker& blocker, cudaStream_t stream, int samples,
                                 int loops, int warmup, const std::function<void()>& op) {
  owned_cuda_event start, stop;
  std::vector<double> out;
  out.reserve(samples);
  // One call before any blocking: the first launch of a kernel loads its module (lazy loading, the
  // default since CUDA 12.2), which waits for the device to go idle, i.e. for the spin kernel.
  // Behind the blocker that wait ends only when the spin kernel gives up, so prime it here.
  op();
  VRAMKIT_CUDA_TRY(cudaStreamSynchronize(stream));
  for (int s = 0; s < samples; ++s) {
    blocker.block(stream);
    for (int i = 0; i < warmup; ++i) op();
    VRAMKIT_CUDA_TRY(cudaEventRecord(start.get(), stream));
    for (int i = 0; i < loops; ++i) op();
    VRAMKIT_CUDA_TRY(cudaEventRecord(stop.get(), stream));
    blocker.release();
    VRAMKIT_CUDA_TRY(cudaStreamSynchronize(stream));
    blocker.check();
    out.push_back(elapsed_ms(start.get(), stop.get()) / 1e3 / loops);
  }
  return out;
}

// --- context and measurement helpers ------------------------------------------------------------

void gpu_context::progress(const std::string& line) const {
  if (options->progress) options->progress(tag + ": " + line);
}

std::size_t gpu_context::host_fit(std::size_t wanted, int count, std::size_t floor) const {
  return static_cast<std::size_t>(
      fit_in_budget(options->host_memory_bytes, wanted, count, 0.5, floor, std::size_t{1} << 20));
}

launch_config gpu_context::default_launch() const {
  launch_config c;
  c.threads = 256;
  c.blocks = sm_count * std::max(1, max_threads_per_sm / c.threads);
  return c;
}

measurement bandwidth_measurement(const gpu_context& ctx, const std::string& key,
                                  const std::string& section, const std::string& title,
                                  byte_convention convention, std::uint64_t size_bytes,
                                  double bytes_per_op, const std::vector<double>& seconds) {
  measurement m;
  m.key = key;
  m.section = section;
  m.title = title;
  m.device = ctx.tag;
  m.unit = "GB/s";
  m.convention = convention;
  m.size_bytes = size_bytes;
  m.repetitions = static_cast<int>(seconds.size());
  for (double s : seconds) m.samples.push_back(gbps(bytes_per_op, s));
  m.stats = sample_stats::of(m.samples);
  return m;
}

std::string mismatch_text(std::uint64_t bad, std::size_t words) {
  return std::to_string(bad) + " of " + std::to_string(words) + " words differ from the pattern";
}

void add_curve(const gpu_context& ctx, curve c) {
  const probe_case* pc = find_gpu_case(c.key);
  if (pc == nullptr) throw logic_error("GPU probe curve '" + c.key + "' is not in the case table");
  c.section = pc->section;
  ctx.report->curves.push_back(std::move(c));
}

void add_verified(const gpu_context& ctx, measurement m, bool ok, const std::string& failure) {
  const probe_case* pc = find_gpu_case(m.key);
  if (pc == nullptr) throw logic_error("GPU probe key '" + m.key + "' is not in the case table");
  m.section = pc->section;
  if (!ok) {
    ctx.report->skips.push_back({m.key, "verification failed, figure withheld: " + failure, true});
    return;
  }
  m.verified = true;
  ctx.report->results.push_back(std::move(m));
}

std::uint64_t device_mismatches(const std::uint32_t* p, std::size_t n_words, std::uint32_t seed,
                                cudaStream_t stream) {
  device_buffer count(sizeof(unsigned long long));
  auto* c = static_cast<unsigned long long*>(count.get());
  VRAMKIT_CUDA_TRY(cudaMemsetAsync(c, 0, sizeof *c, stream));
  VRAMKIT_CUDA_TRY(launch_count_mismatches(p, n_words, seed, c, stream));
  unsigned long long host = 0;
  VRAMKIT_CUDA_TRY(cudaMemcpyAsync(&host, c, sizeof host, cudaMemcpyDeviceToHost, stream));
  VRAMKIT_CUDA_TRY(cudaStreamSynchronize(stream));
  return host;
}

namespace {
template <typename Fn>
void for_chunks(std::size_t n_words, Fn&& fn) {
  const std::size_t min_chunk = std::size_t{1}
                                << 22;  // below 16 MiB a thread costs more than it saves
  const unsigned hw = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
  const std::size_t parts =
      std::max<std::size_t>(1, std::min<std::size_t>(hw, n_words / min_chunk));
  if (parts == 1) {
    fn(0, n_words, 0);
    return;
  }
  std::vector<std::thread> threads;
  const std::size_t per = (n_words + parts - 1) / parts;
  for (std::size_t p = 0; p < parts; ++p) {
    const std::size_t b = p * per, e = std::min(n_words, b + per);
    if (b < e) threads.emplace_back([&fn, b, e, p] { fn(b, e, p); });
  }
  for (auto& t : threads) t.join();
}
}  // namespace

void parallel_fill(std::uint32_t* p, std::size_t n_words, std::uint32_t seed) {
  for_chunks(n_words, [&](std::size_t b, std::size_t e, std::size_t) {
    for (std::size_t i = b; i < e; ++i) p[i] = pattern_word(i, seed);
  });
}

std::uint64_t parallel_mismatches(const std::uint32_t* p, std::size_t n_words, std::uint32_t seed) {
  std::vector<std::uint64_t> bad(16, 0);
  for_chunks(n_words, [&](std::size_t b, std::size_t e, std::size_t part) {
    std::uint64_t n = 0;
    for (std::size_t i = b; i < e; ++i) n += p[i] != pattern_word(i, seed) ? 1 : 0;
    bad[part] = n;
  });
  std::uint64_t total = 0;
  for (auto b : bad) total += b;
  return total;
}

int host_numa_node(const void* p) {
#ifdef SYS_get_mempolicy
  // get_mempolicy(MPOL_F_NODE | MPOL_F_ADDR) reports the node of the page at the address.
  int node = -1;
  constexpr unsigned long mpol_f_node = 1, mpol_f_addr = 2;
  if (syscall(SYS_get_mempolicy, &node, nullptr, 0UL, const_cast<void*>(p),
              mpol_f_node | mpol_f_addr) == 0) {
    return node;
  }
#endif
  return -1;
}

// --- header -------------------------------------------------------------------------------------

namespace {

int attribute(cudaDeviceAttr attr, int ordinal) {
  int v = 0;
  if (cudaDeviceGetAttribute(&v, attr, ordinal) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return v;
}

// PCIe rate per lane and direction in GB/s, after line encoding, for generation `gen`.
std::optional<double> pcie_lane_gbps(unsigned gen, std::string& basis) {
  struct generation {
    const char* basis;
    double lane_gbps;
  };
  static constexpr generation generations[] = {
      {"2.5 GT/s x 8b/10b", 2.5 * 0.8 / 8},
      {"5 GT/s x 8b/10b", 5.0 * 0.8 / 8},
      {"8 GT/s x 128b/130b", 8.0 * 128 / 130 / 8},
      {"16 GT/s x 128b/130b", 16.0 * 128 / 130 / 8},
      {"32 GT/s x 128b/130b", 32.0 * 128 / 130 / 8},
      {"64 GT/s x 242/256 (FLIT)", 64.0 * 242 / 256 / 8},
  };
  if (gen < 1 || gen > std::size(generations)) return std::nullopt;
  basis = generations[gen - 1].basis;
  return generations[gen - 1].lane_gbps;
}

std::string format_gbps(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// What NVML adds to the CUDA attributes of one GPU; each field is empty where NVML has no answer.
struct nvml_facts {
  std::optional<std::string> uuid;
  std::optional<nvml_pcie_link> link, max_link;
  std::optional<nvml_clocks> clocks, max_clocks;
  std::optional<unsigned> bus_width_bits;
};

// NVML's view of the GPU at `bus_id`, found by bus id because NVML's device order need not be
// CUDA's; or why there is none.
result<nvml_facts> read_nvml(const result<std::shared_ptr<nvml_api>>& nvml,
                             const std::string& bus_id) {
  if (!nvml) return unavailable{nvml.error().kind, "NVML unavailable: " + nvml.error().reason};
  if (bus_id.empty()) return unavailable{unavailable_kind::failed, "CUDA gave no PCI bus id"};
  auto index = (*nvml)->device_index_by_pci_bus_id(bus_id);
  if (!index.ok()) {
    return unavailable{unavailable_kind::failed, "NVML has no device at " + bus_id + ": " +
                                                     to_string(index.status) + " (" + index.detail +
                                                     ")"};
  }
  nvml_api& api = **nvml;
  nvml_facts f;
  f.uuid = api.device_uuid(index.value).to_optional();
  f.link = api.pcie_link(index.value, nvml_reading::current).to_optional();
  f.max_link = api.pcie_link(index.value, nvml_reading::max).to_optional();
  f.clocks = api.clocks(index.value, nvml_reading::current).to_optional();
  f.max_clocks = api.clocks(index.value, nvml_reading::max).to_optional();
  f.bus_width_bits = api.memory_bus_width_bits(index.value).to_optional();
  return f;
}

gpu_context describe_device(int ordinal, const probe_options& options, probe_report& report,
                            const result<std::shared_ptr<nvml_api>>& nvml) {
  gpu_context ctx;
  ctx.ordinal = ordinal;
  ctx.tag = "gpu" + std::to_string(ordinal);
  ctx.options = &options;
  ctx.report = &report;
  auto& h = report.header;
  const std::string p = "gpu." + std::to_string(ordinal) + ".";

  cudaDeviceProp prop{};
  VRAMKIT_CUDA_TRY(cudaGetDeviceProperties(&prop, ordinal));
  ctx.name = prop.name;
  ctx.sm_count = attribute(cudaDevAttrMultiProcessorCount, ordinal);
  ctx.cc_major = prop.major;
  ctx.max_threads_per_sm =
      std::max(256, attribute(cudaDevAttrMaxThreadsPerMultiProcessor, ordinal));
  ctx.l2_bytes = static_cast<std::size_t>(attribute(cudaDevAttrL2CacheSize, ordinal));
  ctx.smem_per_sm = attribute(cudaDevAttrMaxSharedMemoryPerMultiprocessor, ordinal);
  ctx.smem_per_block_optin = attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin, ordinal);
  ctx.total_bytes = prop.totalGlobalMem;
  ctx.concurrent_managed = attribute(cudaDevAttrConcurrentManagedAccess, ordinal) != 0;
  ctx.can_map_host = attribute(cudaDevAttrCanMapHostMemory, ordinal) != 0;
  std::size_t free_b = 0, total_b = 0;
  VRAMKIT_CUDA_TRY(cudaMemGetInfo(&free_b, &total_b));
  ctx.free_bytes = free_b;

  char bus[32] = {};
  std::string bus_id;
  if (cudaDeviceGetPCIBusId(bus, sizeof bus, ordinal) == cudaSuccess)
    bus_id = bus;
  else
    (void)cudaGetLastError();

  h[p + "name"] = ctx.name;
  if (!bus_id.empty()) h[p + "pci_bus_id"] = bus_id;
  h[p + "memory_total"] = std::to_string(ctx.total_bytes);
  h[p + "memory_free"] = std::to_string(ctx.free_bytes);
  h[p + "sm_count"] = std::to_string(ctx.sm_count);
  h[p + "cc"] = std::to_string(prop.major) + "." + std::to_string(prop.minor);
  h[p + "l2_bytes"] = std::to_string(ctx.l2_bytes);

  nvml_facts nv;
  if (auto q = read_nvml(nvml, bus_id)) {
    nv = *q;
  } else {
    h[p + "nvml"] = q.error().reason;
  }
  int mem_khz = attribute(cudaDevAttrMemoryClockRate, ordinal);
  if (mem_khz <= 0 && nv.max_clocks) mem_khz = static_cast<int>(nv.max_clocks->memory_mhz * 1000);
  int bus_bits = attribute(cudaDevAttrGlobalMemoryBusWidth, ordinal);
  if (bus_bits <= 0 && nv.bus_width_bits) bus_bits = static_cast<int>(*nv.bus_width_bits);
  if (mem_khz > 0) h[p + "memory_clock_khz"] = std::to_string(mem_khz);
  if (bus_bits > 0) h[p + "bus_width_bits"] = std::to_string(bus_bits);
  if (nv.bus_width_bits && static_cast<int>(*nv.bus_width_bits) != bus_bits) {
    h[p + "nvml.bus_width_bits"] = std::to_string(*nv.bus_width_bits);
  }
  if (mem_khz > 0 && bus_bits > 0) {
    // HBM and GDDR move data on both clock edges: 2 transfers per memory clock per pin.
    const double peak = 2.0 * mem_khz * 1000.0 * bus_bits / 8.0 / 1e9;
    ctx.hbm_peak_gbps = peak;
    ctx.hbm_peak_basis = "2 (double data rate) x memory clock " + std::to_string(mem_khz / 1000) +
                         " MHz x " + std::to_string(bus_bits) +
                         "-bit bus / 8 = " + format_gbps(peak) + " GB/s";
  }
  if (nv.uuid) {
    h[p + "uuid"] = *nv.uuid;
  } else {
    char u[64];
    const auto* b = reinterpret_cast<const unsigned char*>(prop.uuid.bytes);
    std::snprintf(u, sizeof u,
                  "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                  b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
                  b[14], b[15]);
    h[p + "uuid"] = u;
  }
  // One header key per field of a reading NVML gave.
  auto put = [&](const char* key, const auto& reading, auto field) {
    if (reading) h[p + key] = std::to_string((*reading).*field);
  };
  put("pcie.gen.current", nv.link, &nvml_pcie_link::generation);
  put("pcie.gen.max", nv.max_link, &nvml_pcie_link::generation);
  put("pcie.width.current", nv.link, &nvml_pcie_link::width);
  put("pcie.width.max", nv.max_link, &nvml_pcie_link::width);
  put("clock.sm.current", nv.clocks, &nvml_clocks::sm_mhz);
  put("clock.sm.max", nv.max_clocks, &nvml_clocks::sm_mhz);
  put("clock.memory.current", nv.clocks, &nvml_clocks::memory_mhz);
  put("clock.memory.max", nv.max_clocks, &nvml_clocks::memory_mhz);

  // The link's rate: at idle a link may train down to save power, so the theoretical rate uses
  // the maximum generation and width the device and slot support.
  if (const auto link = nv.max_link ? nv.max_link : nv.link) {
    const unsigned gen = link->generation;
    const unsigned width = link->width;
    std::string enc;
    if (auto lane = pcie_lane_gbps(gen, enc)) {
      ctx.pcie_peak_gbps = *lane * width;
      ctx.pcie_peak_basis = "PCIe gen" + std::to_string(gen) + " x" + std::to_string(width) +
                            " (max link): " + enc + " x " + std::to_string(width) +
                            " lanes / 8 = " + format_gbps(*ctx.pcie_peak_gbps) +
                            " GB/s per direction";
      if (nv.link) {
        ctx.pcie_peak_basis += "; link now gen" + std::to_string(nv.link->generation) + " x" +
                               std::to_string(nv.link->width);
      }
    }
  }
  if (!bus_id.empty()) {
    std::ifstream numa("/sys/bus/pci/devices/" + lower(bus_id) + "/numa_node");
    int node = -1;
    if (numa >> node) h[p + "numa_node"] = std::to_string(node);
  }
  return ctx;
}

// Runs `pc` unless its section is not wanted; a case that throws becomes a failed skip of its
// own key, and the other cases carry on.
void run_case(gpu_context& ctx, const probe_case& pc) {
  if (!wants_gpu_section(*ctx.options, pc.section) || pc.run == nullptr) return;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    VRAMKIT_CUDA_TRY(cudaSetDevice(ctx.ordinal));
    pc.run(ctx);
  } catch (const std::exception& e) {
    (void)cudaGetLastError();
    std::string key = pc.key;
    if (const auto at = key.find("gpu{N}"); at != std::string::npos) key.replace(at, 6, ctx.tag);
    ctx.report->skips.push_back({key, std::string("failed: ") + e.what(), true});
  }
  // Wall time per section, in run order ("device 812, h2d 1230"), so a slow section shows.
  const auto ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0);
  const std::string hk = pc.scope == case_scope::all_gpus
                             ? std::string("gpus.section_ms")
                             : "gpu." + std::to_string(ctx.ordinal) + ".section_ms";
  std::string& v = ctx.report->header[hk];
  v += (v.empty() ? "" : ", ") + std::string(pc.section) + " " +
       std::to_string(static_cast<long long>(std::llround(ms.count())));
}

// Each runner once, in table order: the first case of a group stands for all of it.
template <typename Pred>
void run_cases(gpu_context& ctx, Pred&& in_scope) {
  std::vector<case_runner> done;
  for (const auto& pc : gpu_cases()) {
    if (!in_scope(pc) || std::find(done.begin(), done.end(), pc.run) != done.end()) continue;
    done.push_back(pc.run);
    run_case(ctx, pc);
  }
}

}  // namespace
}  // namespace detail

void run_gpu_probe(const probe_options& options, probe_report& report) {
  using namespace detail;
  if (!wants_any_gpu_section(options)) return;
  auto status = cuda_runtime_status();
  if (!status) {
    report.skips.push_back({"gpu", status.error().reason});
    return;
  }
  auto& h = report.header;
  h["gpu.count"] = std::to_string(status->device_count);
  h["gpu.cuda_driver_version"] = format_cuda_version(status->driver_version);
  h["gpu.cuda_runtime_version"] = format_cuda_version(status->runtime_version);
  // One NVML session for the whole run; without the library every device says why in gpu.N.nvml.
  const auto nvml = load_nvml();
  if (nvml) {
    if (auto v = (*nvml)->driver_version(); v.ok()) h["gpu.driver_version"] = v.value;
  }

  std::optional<gpu_context> first;
  for (int d = 0; d < status->device_count; ++d) {
    VRAMKIT_CUDA_TRY(cudaSetDevice(d));
    gpu_context ctx = describe_device(d, options, report, nvml);
    ctx.device_count = status->device_count;
    ctx.progress(ctx.name);
    run_cases(ctx, [](const probe_case& pc) { return pc.scope == case_scope::per_gpu; });
    if (d == 0) first = ctx;
  }
  if (first) {
    run_cases(*first, [](const probe_case& pc) { return pc.scope == case_scope::all_gpus; });
  }
}

}  // namespace vramkit::probe
