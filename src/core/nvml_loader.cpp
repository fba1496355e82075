// The real nvml_api: libnvidia-ml.so.1 opened with dlopen, entry points resolved with dlsym
// (newest versioned symbol first), every return code checked and mapped to nvml_status. The ABI
// declarations below are written from the public NVML documentation; no NVML header is used.
// Thread-safe: NVML itself is thread-safe and dl_nvml changes nothing after construction.
#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cstring>

#include "vramkit/core/nvml_api.hpp"

namespace vramkit {

const char* to_string(nvml_status s) noexcept {
  switch (s) {
    case nvml_status::ok:
      return "ok";
    case nvml_status::not_supported:
      return "not_supported";
    case nvml_status::no_permission:
      return "no_permission";
    case nvml_status::gpu_lost:
      return "gpu_lost";
    case nvml_status::not_found:
      return "not_found";
    case nvml_status::uninitialized:
      return "uninitialized";
    case nvml_status::error:
      return "error";
  }
  return "error";
}

namespace {

// ---- NVML ABI (LP64), as documented -------------------------------------------------------------
using nvml_return = int;
using nvml_device = struct nvml_device_st*;
constexpr nvml_return k_success = 0;
constexpr nvml_return k_uninitialized = 1;
constexpr nvml_return k_not_supported = 3;
constexpr nvml_return k_no_permission = 4;
constexpr nvml_return k_not_found = 6;
constexpr nvml_return k_insufficient_size = 7;
constexpr nvml_return k_gpu_is_lost = 15;
constexpr nvml_return k_gpu_not_found = 28;
constexpr unsigned long long k_value_not_available = ~0ULL;

constexpr unsigned struct_version(unsigned size, unsigned ver) { return size | (ver << 24U); }

struct nvml_memory_v1 {
  unsigned long long total, free, used;
};
struct nvml_memory_v2 {
  unsigned int version;
  unsigned long long total, reserved, free, used;
};
static_assert(sizeof(nvml_memory_v2) == 40);
struct nvml_utilization_raw {
  unsigned int gpu, memory;
};
// The process record is read by byte offset (pid @0, usedGpuMemory @8) with a stride probed at
// run time, because one driver branch wrote 32-byte records under the 24-byte _v3 name.
constexpr std::size_t k_process_v1_size = 16;
constexpr std::size_t k_process_v2_size = 24;
constexpr std::size_t k_process_wide_size = 32;
union nvml_value_raw {
  double d;
  int si;
  unsigned int ui;
  unsigned long ul;
  unsigned long long ull;
  long long sll;
  unsigned short us;
};
struct nvml_field_value {
  unsigned int field_id;
  unsigned int scope_id;
  long long timestamp;
  long long latency_usec;
  int value_type;
  nvml_return nvml_return_code;
  nvml_value_raw value;
};
static_assert(sizeof(nvml_field_value) == 40);
struct nvml_temperature_v1 {
  unsigned int version;
  int sensor_type;
  int temperature;
};
constexpr unsigned k_fi_nvlink_link_count = 91;
constexpr unsigned k_fi_pcie_count_tx_bytes = 197;  // cumulative bytes
constexpr unsigned k_fi_pcie_count_rx_bytes = 198;
constexpr unsigned k_fi_nvlink_data_tx = 138;  // KiB counters
constexpr unsigned k_fi_nvlink_data_rx = 139;
constexpr int k_value_type_ull = 3;
constexpr int k_value_type_ui = 1;
constexpr int k_value_type_ul = 2;
constexpr int k_clock_sm = 1;  // nvmlClockType_t
constexpr int k_clock_mem = 2;

using fn_void = nvml_return (*)();
using fn_error_string = const char* (*)(nvml_return);
using fn_str = nvml_return (*)(char*, unsigned);
using fn_uint_ptr = nvml_return (*)(unsigned*);
using fn_handle = nvml_return (*)(unsigned, nvml_device*);
using fn_handle_by_bus_id = nvml_return (*)(const char*, nvml_device*);
using fn_dev_str = nvml_return (*)(nvml_device, char*, unsigned);
using fn_dev_ptr = nvml_return (*)(nvml_device, void*);
using fn_dev_procs = nvml_return (*)(nvml_device, unsigned*, void*);
using fn_dev_enum_uint = nvml_return (*)(nvml_device, int, unsigned*);
using fn_dev_uint = nvml_return (*)(nvml_device, unsigned*);
using fn_dev_uint2 = nvml_return (*)(nvml_device, unsigned*, unsigned*);
using fn_dev_fields = nvml_return (*)(nvml_device, int, nvml_field_value*);
using fn_dev_ecc = nvml_return (*)(nvml_device, int, int, unsigned long long*);
using fn_dev_retired = nvml_return (*)(nvml_device, int, unsigned*, unsigned long long*);
using fn_dev_remapped = nvml_return (*)(nvml_device, unsigned*, unsigned*, unsigned*, unsigned*);
using fn_dev_mig_handle = nvml_return (*)(nvml_device, unsigned, nvml_device*);

template <typename F>
F resolve(void* lib, std::initializer_list<const char*> names) {
  for (const char* n : names) {
    if (void* p = dlsym(lib, n)) return reinterpret_cast<F>(p);
  }
  return nullptr;
}

nvml_status map_status(nvml_return r) {
  switch (r) {
    case k_success:
      return nvml_status::ok;
    case k_not_supported:
      return nvml_status::not_supported;
    case k_no_permission:
      return nvml_status::no_permission;
    case k_gpu_is_lost:
      return nvml_status::gpu_lost;
    case k_not_found:
    case k_gpu_not_found:
      return nvml_status::not_found;
    case k_uninitialized:
      return nvml_status::uninitialized;
    default:
      return nvml_status::error;
  }
}

class dl_nvml final : public nvml_api {
 public:
  explicit dl_nvml(void* lib) : lib_(lib) {
    error_string_ = resolve<fn_error_string>(lib, {"nvmlErrorString"});
    shutdown_ = resolve<fn_void>(lib, {"nvmlShutdown"});
    driver_version_ = resolve<fn_str>(lib, {"nvmlSystemGetDriverVersion"});
    count_ = resolve<fn_uint_ptr>(lib, {"nvmlDeviceGetCount_v2", "nvmlDeviceGetCount"});
    handle_ =
        resolve<fn_handle>(lib, {"nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex"});
    handle_by_bus_id_ = resolve<fn_handle_by_bus_id>(
        lib, {"nvmlDeviceGetHandleByPciBusId_v2", "nvmlDeviceGetHandleByPciBusId"});
    index_ = resolve<fn_dev_uint>(lib, {"nvmlDeviceGetIndex"});
    name_ = resolve<fn_dev_str>(lib, {"nvmlDeviceGetName"});
    uuid_ = resolve<fn_dev_str>(lib, {"nvmlDeviceGetUUID"});
    memory_v2_ = resolve<fn_dev_ptr>(lib, {"nvmlDeviceGetMemoryInfo_v2"});
    memory_v1_ = resolve<fn_dev_ptr>(lib, {"nvmlDeviceGetMemoryInfo"});
    // Index = record layout generation: 3 and 2 share the 24-byte layout (stride probed), 1 is
    // the 16-byte original.
    compute_[3] = resolve<fn_dev_procs>(lib, {"nvmlDeviceGetComputeRunningProcesses_v3"});
    compute_[2] = resolve<fn_dev_procs>(lib, {"nvmlDeviceGetComputeRunningProcesses_v2"});
    compute_[1] = resolve<fn_dev_procs>(lib, {"nvmlDeviceGetComputeRunningProcesses"});
    graphics_[3] = resolve<fn_dev_procs>(lib, {"nvmlDeviceGetGraphicsRunningProcesses_v3"});
    graphics_[2] = resolve<fn_dev_procs>(lib, {"nvmlDeviceGetGraphicsRunningProcesses_v2"});
    graphics_[1] = resolve<fn_dev_procs>(lib, {"nvmlDeviceGetGraphicsRunningProcesses"});
    utilization_ = resolve<fn_dev_ptr>(lib, {"nvmlDeviceGetUtilizationRates"});
    pcie_ = resolve<fn_dev_enum_uint>(lib, {"nvmlDeviceGetPcieThroughput"});
    fields_ = resolve<fn_dev_fields>(lib, {"nvmlDeviceGetFieldValues"});
    clock_ = resolve<fn_dev_enum_uint>(lib, {"nvmlDeviceGetClockInfo"});
    max_clock_ = resolve<fn_dev_enum_uint>(lib, {"nvmlDeviceGetMaxClockInfo"});
    bus_width_ = resolve<fn_dev_uint>(lib, {"nvmlDeviceGetMemoryBusWidth"});
    link_gen_ = resolve<fn_dev_uint>(lib, {"nvmlDeviceGetCurrPcieLinkGeneration"});
    link_width_ = resolve<fn_dev_uint>(lib, {"nvmlDeviceGetCurrPcieLinkWidth"});
    max_link_gen_ = resolve<fn_dev_uint>(lib, {"nvmlDeviceGetMaxPcieLinkGeneration"});
    max_link_width_ = resolve<fn_dev_uint>(lib, {"nvmlDeviceGetMaxPcieLinkWidth"});
    temperature_v_ = resolve<fn_dev_ptr>(lib, {"nvmlDeviceGetTemperatureV"});
    temperature_ = resolve<fn_dev_enum_uint>(lib, {"nvmlDeviceGetTemperature"});
    power_ = resolve<fn_dev_uint>(lib, {"nvmlDeviceGetPowerUsage"});
    ecc_ = resolve<fn_dev_ecc>(lib, {"nvmlDeviceGetTotalEccErrors"});
    retired_ = resolve<fn_dev_retired>(lib, {"nvmlDeviceGetRetiredPages"});
    remapped_ = resolve<fn_dev_remapped>(lib, {"nvmlDeviceGetRemappedRows"});
    mig_mode_ = resolve<fn_dev_uint2>(lib, {"nvmlDeviceGetMigMode"});
    mig_max_ = resolve<fn_dev_uint>(lib, {"nvmlDeviceGetMaxMigDeviceCount"});
    mig_handle_ = resolve<fn_dev_mig_handle>(lib, {"nvmlDeviceGetMigDeviceHandleByIndex"});
    gi_id_ = resolve<fn_dev_uint>(lib, {"nvmlDeviceGetGpuInstanceId"});
    ci_id_ = resolve<fn_dev_uint>(lib, {"nvmlDeviceGetComputeInstanceId"});
  }

  ~dl_nvml() override {
    if (shutdown_ != nullptr) shutdown_();
    // The library stays loaded: NVML keeps threads whose code must not be unmapped under them.
  }

  // Required entry points; init fails without them.
  [[nodiscard]] std::string missing_required() const {
    if (count_ == nullptr) return "nvmlDeviceGetCount";
    if (handle_ == nullptr) return "nvmlDeviceGetHandleByIndex";
    if (memory_v1_ == nullptr && memory_v2_ == nullptr) return "nvmlDeviceGetMemoryInfo";
    return {};
  }

  [[nodiscard]] std::string name() const override { return "nvml"; }

  nvml_value<std::string> driver_version() override {
    if (driver_version_ == nullptr) return missing<std::string>("nvmlSystemGetDriverVersion");
    std::array<char, 96> buf{};
    nvml_return r = driver_version_(buf.data(), buf.size());
    if (r != k_success) return fail<std::string>(r);
    return nvml_value<std::string>::success(buf.data());
  }

  nvml_value<unsigned> device_count() override {
    unsigned n = 0;
    nvml_return r = count_(&n);
    if (r != k_success) return fail<unsigned>(r);
    return nvml_value<unsigned>::success(n);
  }

  nvml_value<unsigned> device_index_by_pci_bus_id(const std::string& pci_bus_id) override {
    if (handle_by_bus_id_ == nullptr || index_ == nullptr)
      return missing<unsigned>("nvmlDeviceGetHandleByPciBusId_v2 or nvmlDeviceGetIndex");
    nvml_device d = nullptr;
    nvml_return r = handle_by_bus_id_(pci_bus_id.c_str(), &d);
    if (r != k_success) return fail<unsigned>(r);
    unsigned index = 0;
    r = index_(d, &index);
    if (r != k_success) return fail<unsigned>(r);
    return nvml_value<unsigned>::success(index);
  }

  nvml_value<std::string> device_name(unsigned index) override {
    return dev_string(index, name_, "nvmlDeviceGetName");
  }
  nvml_value<std::string> device_uuid(unsigned index) override {
    return dev_string(index, uuid_, "nvmlDeviceGetUUID");
  }

  nvml_value<nvml_memory> memory(unsigned index) override {
    nvml_device d = nullptr;
    if (auto st = get_handle(index, &d)) return fail<nvml_memory>(*st);
    return memory_of(d);
  }

  nvml_value<std::vector<nvml_process>> processes(unsigned index) override {
    nvml_device d = nullptr;
    if (auto st = get_handle(index, &d)) return fail<std::vector<nvml_process>>(*st);
    auto compute = list_processes(d, compute_);
    if (!compute.ok() && compute.status != nvml_status::not_supported) return compute;
    auto graphics = list_processes(d, graphics_);
    if (!compute.ok() && !graphics.ok()) return compute;
    std::vector<nvml_process> merged;
    if (compute.ok()) merged = compute.value;
    if (graphics.ok()) {
      for (auto p : graphics.value) {
        auto it = std::find_if(merged.begin(), merged.end(),
                               [&](const nvml_process& q) { return q.pid == p.pid; });
        if (it == merged.end()) {
          p.kind = nvml_process_kind::graphics;
          merged.push_back(p);
        } else {
          it->kind = nvml_process_kind::compute_and_graphics;
          // The same context is listed in both; its memory is counted once.
          if (!it->used_bytes) it->used_bytes = p.used_bytes;
        }
      }
    }
    return nvml_value<std::vector<nvml_process>>::success(std::move(merged));
  }

  nvml_value<nvml_utilization> utilization(unsigned index) override {
    if (utilization_ == nullptr) return missing<nvml_utilization>("nvmlDeviceGetUtilizationRates");
    nvml_device d = nullptr;
    if (auto st = get_handle(index, &d)) return fail<nvml_utilization>(*st);
    nvml_utilization_raw u{};
    nvml_return r = utilization_(d, &u);
    if (r != k_success) return fail<nvml_utilization>(r);
    return nvml_value<nvml_utilization>::success({u.gpu, u.memory});
  }

  nvml_value<nvml_pcie> pcie_throughput(unsigned index) override {
    if (pcie_ == nullptr) return missing<nvml_pcie>("nvmlDeviceGetPcieThroughput");
    nvml_device d = nullptr;
    if (auto st = get_handle(index, &d)) return fail<nvml_pcie>(*st);
    unsigned tx_kb = 0, rx_kb = 0;
    nvml_return r = pcie_(d, 0 /*TX*/, &tx_kb);
    if (r != k_success) return fail<nvml_pcie>(r);
    r = pcie_(d, 1 /*RX*/, &rx_kb);
    if (r != k_success) return fail<nvml_pcie>(r);
    // NVML reports KB/s; nvtop and nvidia-smi dmon treat the unit as 1024 bytes.
    return nvml_value<nvml_pcie>::success(
        {std::uint64_t{rx_kb} * 1024, std::uint64_t{tx_kb} * 1024});
  }

  nvml_value<nvml_pcie_counters> pcie_counters(unsigned index) override {
    if (fields_ == nullptr) return missing<nvml_pcie_counters>("nvmlDeviceGetFieldValues");
    nvml_device d = nullptr;
    if (auto st = get_handle(index, &d)) return fail<nvml_pcie_counters>(*st);
    std::array<nvml_field_value, 2> f{};
    f[0].field_id = k_fi_pcie_count_tx_bytes;
    f[1].field_id = k_fi_pcie_count_rx_bytes;
    nvml_return r = fields_(d, static_cast<int>(f.size()), f.data());
    if (r != k_success) return fail<nvml_pcie_counters>(r);
    for (const auto& v : f) {
      if (v.nvml_return_code != k_success) return fail<nvml_pcie_counters>(v.nvml_return_code);
    }
    return nvml_value<nvml_pcie_counters>::success({field_as_u64(f[1]), field_as_u64(f[0])});
  }

  nvml_value<nvml_nvlink> nvlink_counters(unsigned index) override {
    if (fields_ == nullptr) return missing<nvml_nvlink>("nvmlDeviceGetFieldValues");
    nvml_device d = nullptr;
    if (auto st = get_handle(index, &d)) return fail<nvml_nvlink>(*st);
    std::array<nvml_field_value, 3> f{};
    f[0].field_id = k_fi_nvlink_link_count;
    f[1].field_id = k_fi_nvlink_data_tx;
    f[1].scope_id = UINT_MAX;
    f[2].field_id = k_fi_nvlink_data_rx;
    f[2].scope_id = UINT_MAX;
    nvml_return r = fields_(d, static_cast<int>(f.size()), f.data());
    if (r != k_success) return fail<nvml_nvlink>(r);
    // GetFieldValues succeeds if any field was filled: each field carries its own status.
    for (const auto& v : f) {
      if (v.nvml_return_code != k_success) return fail<nvml_nvlink>(v.nvml_return_code);
    }
    nvml_nvlink out;
    out.link_count = static_cast<unsigned>(field_as_u64(f[0]));
    if (out.link_count == 0)
      return nvml_value<nvml_nvlink>::failure(nvml_status::not_supported, "no NVLink links");
    out.tx_bytes = field_as_u64(f[1]) * 1024;
    out.rx_bytes = field_as_u64(f[2]) * 1024;
    return nvml_value<nvml_nvlink>::success(out);
  }

  nvml_value<nvml_clocks> clocks(unsigned index, nvml_reading which) override {
    if (which == nvml_reading::max)
      return clocks_of(index, max_clock_, "nvmlDeviceGetMaxClockInfo");
    return clocks_of(index, clock_, "nvmlDeviceGetClockInfo");
  }

  nvml_value<unsigned> memory_bus_width_bits(unsigned index) override {
    if (bus_width_ == nullptr) return missing<unsigned>("nvmlDeviceGetMemoryBusWidth");
    nvml_device d = nullptr;
    if (auto st = get_handle(index, &d)) return fail<unsigned>(*st);
    unsigned bits = 0;
    nvml_return r = bus_width_(d, &bits);
    if (r != k_success) return fail<unsigned>(r);
    return nvml_value<unsigned>::success(bits);
  }

  nvml_value<nvml_pcie_link> pcie_link(unsigned index, nvml_reading which) override {
    if (which == nvml_reading::max)
      return link_of(index, max_link_gen_, max_link_width_, "nvmlDeviceGetMaxPcieLink*");
    return link_of(index, link_gen_, link_width_, "nvmlDeviceGetCurrPcieLink*");
  }

  nvml_value<double> temperature_celsius(unsigned index) override {
    nvml_device d = nullptr;
    if (auto st = get_handle(index, &d)) return fail<double>(*st);
    if (temperature_v_ != nullptr) {
      nvml_temperature_v1 t{};
      t.version = struct_version(sizeof(nvml_temperature_v1), 1);
      t.sensor_type = 0;  // GPU die
      if (temperature_v_(d, &t) == k_success) return nvml_value<double>::success(t.temperature);
    }
    if (temperature_ == nullptr) return missing<double>("nvmlDeviceGetTemperature");
    unsigned c = 0;
    nvml_return r = temperature_(d, 0, &c);
    if (r != k_success) return fail<double>(r);
    return nvml_value<double>::success(c);
  }

  nvml_value<double> power_watts(unsigned index) override {
    if (power_ == nullptr) return missing<double>("nvmlDeviceGetPowerUsage");
    nvml_device d = nullptr;
    if (auto st = get_handle(index, &d)) return fail<double>(*st);
    unsigned mw = 0;
    nvml_return r = power_(d, &mw);
    if (r != k_success) return fail<double>(r);
    return nvml_value<double>::success(mw / 1000.0);
  }

  nvml_value<nvml_ecc> ecc(unsigned index) override {
    nvml_device d = nullptr;
    if (auto st = get_handle(index, &d)) return fail<nvml_ecc>(*st);
    nvml_ecc e;
    nvml_return last = k_not_supported;
    if (ecc_ != nullptr) {
      unsigned long long v = 0;
      // error type 0 corrected / 1 uncorrected; counter type 1 = aggregate (lifetime)
      if ((last = ecc_(d, 0, 1, &v)) == k_success) e.corrected = v;
      if ((last = ecc_(d, 1, 1, &v)) == k_success) e.uncorrected = v;
    }
    if (remapped_ != nullptr) {
      unsigned corr = 0, unc = 0, pending = 0, failure = 0;
      if ((last = remapped_(d, &corr, &unc, &pending, &failure)) == k_success)
        e.retired_pages = std::uint64_t{corr} + unc;
    }
    if (!e.retired_pages && retired_ != nullptr) {
      std::uint64_t total = 0;
      bool any = false;
      for (int cause = 0; cause < 2; ++cause) {
        unsigned count = 0;
        nvml_return r = retired_(d, cause, &count, nullptr);
        if (r == k_success || r == k_insufficient_size) {
          total += count;
          any = true;
        } else {
          last = r;
        }
      }
      if (any) e.retired_pages = total;
    }
    if (!e.corrected && !e.uncorrected && !e.retired_pages) return fail<nvml_ecc>(last);
    return nvml_value<nvml_ecc>::success(e);
  }

  nvml_value<std::vector<nvml_mig_instance>> mig_instances(unsigned index) override {
    using out_t = std::vector<nvml_mig_instance>;
    if (mig_mode_ == nullptr || mig_max_ == nullptr || mig_handle_ == nullptr)
      return missing<out_t>("nvmlDeviceGetMigMode");
    nvml_device d = nullptr;
    if (auto st = get_handle(index, &d)) return fail<out_t>(*st);
    unsigned current = 0, pending = 0;
    nvml_return r = mig_mode_(d, &current, &pending);
    if (r != k_success) return fail<out_t>(r);
    out_t out;
    if (current != 1) return nvml_value<out_t>::success(out);
    unsigned max = 0;
    if ((r = mig_max_(d, &max)) != k_success) return fail<out_t>(r);
    for (unsigned i = 0; i < max; ++i) {
      nvml_device m = nullptr;
      if (mig_handle_(d, i, &m) != k_success) continue;  // unpopulated slot
      nvml_mig_instance inst;
      if (gi_id_ != nullptr) gi_id_(m, &inst.gpu_instance_id);
      if (ci_id_ != nullptr) ci_id_(m, &inst.compute_instance_id);
      if (uuid_ != nullptr) {
        std::array<char, 96> buf{};
        if (uuid_(m, buf.data(), buf.size()) == k_success) inst.uuid = buf.data();
      }
      auto mem = memory_of(m);
      if (mem.ok()) inst.memory = mem.value;
      out.push_back(std::move(inst));
    }
    return nvml_value<out_t>::success(std::move(out));
  }

 private:
  [[nodiscard]] std::string describe(nvml_return r) const {
    const char* s = error_string_ != nullptr ? error_string_(r) : nullptr;
    return (s != nullptr ? std::string(s) : std::string("NVML error")) + " (" + std::to_string(r) +
           ")";
  }
  template <typename T>
  [[nodiscard]] nvml_value<T> fail(nvml_return r) const {
    return nvml_value<T>::failure(map_status(r), describe(r));
  }
  template <typename T>
  [[nodiscard]] nvml_value<T> fail(const std::pair<nvml_status, std::string>& st) const {
    return nvml_value<T>::failure(st.first, st.second);
  }
  template <typename T>
  static nvml_value<T> missing(const char* symbol) {
    return nvml_value<T>::failure(nvml_status::not_supported,
                                  std::string(symbol) + " not exported by this driver");
  }

  static std::uint64_t field_as_u64(const nvml_field_value& v) {
    switch (v.value_type) {
      case k_value_type_ull:
        return v.value.ull;
      case k_value_type_ui:
        return v.value.ui;
      case k_value_type_ul:
        return v.value.ul;
      default:
        return v.value.ull;
    }
  }

  // Returns nothing on success, else the status and reason.
  std::optional<std::pair<nvml_status, std::string>> get_handle(unsigned index, nvml_device* out) {
    nvml_device d = nullptr;
    nvml_return r = handle_(index, &d);
    if (r != k_success) return std::make_pair(map_status(r), describe(r));
    *out = d;
    return std::nullopt;
  }

  nvml_value<std::string> dev_string(unsigned index, fn_dev_str fn, const char* symbol) {
    if (fn == nullptr) return missing<std::string>(symbol);
    nvml_device d = nullptr;
    if (auto st = get_handle(index, &d)) return fail<std::string>(*st);
    std::array<char, 96> buf{};
    nvml_return r = fn(d, buf.data(), buf.size());
    if (r != k_success) return fail<std::string>(r);
    return nvml_value<std::string>::success(buf.data());
  }

  nvml_value<nvml_clocks> clocks_of(unsigned index, fn_dev_enum_uint fn, const char* symbol) {
    if (fn == nullptr) return missing<nvml_clocks>(symbol);
    nvml_device d = nullptr;
    if (auto st = get_handle(index, &d)) return fail<nvml_clocks>(*st);
    nvml_clocks c;
    nvml_return r = fn(d, k_clock_sm, &c.sm_mhz);
    if (r != k_success) return fail<nvml_clocks>(r);
    r = fn(d, k_clock_mem, &c.memory_mhz);
    if (r != k_success) return fail<nvml_clocks>(r);
    return nvml_value<nvml_clocks>::success(c);
  }

  nvml_value<nvml_pcie_link> link_of(unsigned index, fn_dev_uint generation, fn_dev_uint width,
                                     const char* symbol) {
    if (generation == nullptr || width == nullptr) return missing<nvml_pcie_link>(symbol);
    nvml_device d = nullptr;
    if (auto st = get_handle(index, &d)) return fail<nvml_pcie_link>(*st);
    nvml_pcie_link link;
    nvml_return r = generation(d, &link.generation);
    if (r != k_success) return fail<nvml_pcie_link>(r);
    r = width(d, &link.width);
    if (r != k_success) return fail<nvml_pcie_link>(r);
    return nvml_value<nvml_pcie_link>::success(link);
  }

  nvml_value<nvml_memory> memory_of(nvml_device d) {
    if (memory_v2_ != nullptr) {
      nvml_memory_v2 m{};
      m.version = struct_version(sizeof(nvml_memory_v2), 2);
      nvml_return r = memory_v2_(d, &m);
      if (r == k_success)
        return nvml_value<nvml_memory>::success({m.total, m.used, m.free, m.reserved});
      if (r == k_gpu_is_lost || memory_v1_ == nullptr) return fail<nvml_memory>(r);
    }
    nvml_memory_v1 m{};
    nvml_return r = memory_v1_(d, &m);
    if (r != k_success) return fail<nvml_memory>(r);
    return nvml_value<nvml_memory>::success({m.total, m.used, m.free, std::nullopt});
  }

  // Reads one process list with the newest entry point exported; grows the buffer while the
  // driver answers INSUFFICIENT_SIZE (the list changes between calls).
  nvml_value<std::vector<nvml_process>> list_processes(nvml_device d,
                                                       const std::array<fn_dev_procs, 4>& fns) {
    int gen = fns[3] != nullptr ? 3 : fns[2] != nullptr ? 2 : fns[1] != nullptr ? 1 : 0;
    if (gen == 0) return missing<std::vector<nvml_process>>("nvmlDevice*RunningProcesses");
    fn_dev_procs fn = fns[gen];
    unsigned capacity = 16;
    for (int attempt = 0; attempt < 5; ++attempt) {
      // Room for the widest record so a driver that writes 32-byte records cannot overrun.
      std::vector<unsigned char> buf(std::size_t{capacity} * k_process_wide_size, 0xA5);
      unsigned count = capacity;
      nvml_return r = fn(d, &count, buf.data());
      if (r == k_insufficient_size) {
        capacity = std::max(capacity * 2, count + 8);
        continue;
      }
      if (r != k_success) return fail<std::vector<nvml_process>>(r);
      std::size_t stride = gen == 1 ? k_process_v1_size : probe_stride(buf, count);
      std::vector<nvml_process> out;
      for (unsigned i = 0; i < count; ++i) {
        const unsigned char* rec = buf.data() + i * stride;
        nvml_process p;
        std::uint32_t pid = 0;
        unsigned long long used = 0;
        std::memcpy(&pid, rec, sizeof(pid));
        std::memcpy(&used, rec + 8, sizeof(used));
        p.pid = pid;
        if (used != k_value_not_available) p.used_bytes = used;
        out.push_back(p);
      }
      return nvml_value<std::vector<nvml_process>>::success(std::move(out));
    }
    return nvml_value<std::vector<nvml_process>>::failure(nvml_status::error,
                                                          "process list kept growing");
  }

  // With `count` records written into a buffer pre-filled with 0xA5, a 24-byte record layout
  // leaves bytes [24*count, 32*count) untouched; a 32-byte layout writes its last record's
  // 8-byte tail there. Checked once per call: cheap, and a driver update cannot fool a cache.
  static std::size_t probe_stride(const std::vector<unsigned char>& buf, unsigned count) {
    if (count == 0) return k_process_v2_size;
    for (std::size_t i = std::size_t{count} * k_process_v2_size;
         i < std::size_t{count} * k_process_wide_size; ++i) {
      if (buf[i] != 0xA5) return k_process_wide_size;
    }
    return k_process_v2_size;
  }

  void* lib_;
  fn_error_string error_string_ = nullptr;
  fn_void shutdown_ = nullptr;
  fn_str driver_version_ = nullptr;
  fn_uint_ptr count_ = nullptr;
  fn_handle handle_ = nullptr;
  fn_handle_by_bus_id handle_by_bus_id_ = nullptr;
  fn_dev_uint index_ = nullptr;
  fn_dev_str name_ = nullptr;
  fn_dev_str uuid_ = nullptr;
  fn_dev_ptr memory_v2_ = nullptr;
  fn_dev_ptr memory_v1_ = nullptr;
  std::array<fn_dev_procs, 4> compute_{};
  std::array<fn_dev_procs, 4> graphics_{};
  fn_dev_ptr utilization_ = nullptr;
  fn_dev_enum_uint pcie_ = nullptr;
  fn_dev_fields fields_ = nullptr;
  fn_dev_enum_uint clock_ = nullptr;
  fn_dev_enum_uint max_clock_ = nullptr;
  fn_dev_uint bus_width_ = nullptr;
  fn_dev_uint link_gen_ = nullptr;
  fn_dev_uint link_width_ = nullptr;
  fn_dev_uint max_link_gen_ = nullptr;
  fn_dev_uint max_link_width_ = nullptr;
  fn_dev_ptr temperature_v_ = nullptr;
  fn_dev_enum_uint temperature_ = nullptr;
  fn_dev_uint power_ = nullptr;
  fn_dev_ecc ecc_ = nullptr;
  fn_dev_retired retired_ = nullptr;
  fn_dev_remapped remapped_ = nullptr;
  fn_dev_uint2 mig_mode_ = nullptr;
  fn_dev_uint mig_max_ = nullptr;
  fn_dev_mig_handle mig_handle_ = nullptr;
  fn_dev_uint gi_id_ = nullptr;
  fn_dev_uint ci_id_ = nullptr;
};

}  // namespace

result<std::shared_ptr<nvml_api>> load_nvml(const std::string& library) {
  dlerror();
  void* lib = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = dlerror();
    return unavailable{unavailable_kind::no_driver,
                       "no NVIDIA driver found (" + library + " not loadable" +
                           (why != nullptr ? std::string(": ") + why : std::string()) + ")"};
  }
  auto init = resolve<fn_void>(lib, {"nvmlInit_v2", "nvmlInit"});
  if (init == nullptr) {
    dlclose(lib);
    return unavailable{unavailable_kind::no_driver, library + " has no nvmlInit entry point"};
  }
  nvml_return r = init();
  if (r != k_success) {
    auto err = resolve<fn_error_string>(lib, {"nvmlErrorString"});
    std::string why = err != nullptr && err(r) != nullptr ? err(r) : "error";
    dlclose(lib);
    return unavailable{unavailable_kind::no_driver,
                       "nvmlInit failed: " + why + " (" + std::to_string(r) + ")"};
  }
  auto api = std::make_shared<dl_nvml>(lib);
  if (auto m = api->missing_required(); !m.empty()) {
    return unavailable{unavailable_kind::no_driver, library + " lacks " + m};
  }
  return std::shared_ptr<nvml_api>(std::move(api));
}

}  // namespace vramkit
