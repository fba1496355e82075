// NVML through dlopen, with the handful of declarations the probe needs (NVML's ABI: functions
// return 0 on success; a device is an opaque pointer). See nvml_loader.hpp.
#include "nvml_loader.hpp"

#include <dlfcn.h>

#include <mutex>

namespace vramkit::probe::detail {
namespace {

using nvml_return = int;
using nvml_device = struct nvml_device_opaque*;
constexpr nvml_return nvml_success = 0;
constexpr int nvml_clock_sm = 1;
constexpr int nvml_clock_mem = 2;

struct nvml_api {
  bool loaded = false;
  std::string reason;
  nvml_return (*init)() = nullptr;
  nvml_return (*handle_by_bus_id)(const char*, nvml_device*) = nullptr;
  nvml_return (*driver_version)(char*, unsigned) = nullptr;
  nvml_return (*uuid)(nvml_device, char*, unsigned) = nullptr;
  nvml_return (*gen_current)(nvml_device, unsigned*) = nullptr;
  nvml_return (*gen_max)(nvml_device, unsigned*) = nullptr;
  nvml_return (*width_current)(nvml_device, unsigned*) = nullptr;
  nvml_return (*width_max)(nvml_device, unsigned*) = nullptr;
  nvml_return (*clock)(nvml_device, int, unsigned*) = nullptr;
  nvml_return (*max_clock)(nvml_device, int, unsigned*) = nullptr;
  nvml_return (*bus_width)(nvml_device, unsigned*) = nullptr;
};

template <typename Fn>
void bind(void* lib, const char* name, Fn& fn) {
  fn = reinterpret_cast<Fn>(dlsym(lib, name));
}

const nvml_api& api() {
  static nvml_api a;
  static std::once_flag once;
  std::call_once(once, [] {
    void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      a.reason = "NVML (libnvidia-ml.so.1) not found";
      return;
    }
    bind(lib, "nvmlInit_v2", a.init);
    bind(lib, "nvmlDeviceGetHandleByPciBusId_v2", a.handle_by_bus_id);
    bind(lib, "nvmlSystemGetDriverVersion", a.driver_version);
    bind(lib, "nvmlDeviceGetUUID", a.uuid);
    bind(lib, "nvmlDeviceGetCurrPcieLinkGeneration", a.gen_current);
    bind(lib, "nvmlDeviceGetMaxPcieLinkGeneration", a.gen_max);
    bind(lib, "nvmlDeviceGetCurrPcieLinkWidth", a.width_current);
    bind(lib, "nvmlDeviceGetMaxPcieLinkWidth", a.width_max);
    bind(lib, "nvmlDeviceGetClockInfo", a.clock);
    bind(lib, "nvmlDeviceGetMaxClockInfo", a.max_clock);
    bind(lib, "nvmlDeviceGetMemoryBusWidth", a.bus_width);
    if (a.init == nullptr || a.handle_by_bus_id == nullptr) {
      a.reason = "NVML lacks nvmlInit_v2 or nvmlDeviceGetHandleByPciBusId_v2";
      return;
    }
    const nvml_return rc = a.init();
    if (rc != nvml_success) {
      a.reason = "nvmlInit_v2 failed (NVML error " + std::to_string(rc) + ")";
      return;
    }
    a.loaded = true;
  });
  return a;
}

std::optional<unsigned> query_uint(nvml_return (*fn)(nvml_device, unsigned*), nvml_device dev) {
  unsigned v = 0;
  if (fn == nullptr || fn(dev, &v) != nvml_success) return std::nullopt;
  return v;
}

std::optional<unsigned> query_clock(nvml_return (*fn)(nvml_device, int, unsigned*),
                                    nvml_device dev, int which) {
  unsigned v = 0;
  if (fn == nullptr || fn(dev, which, &v) != nvml_success) return std::nullopt;
  return v;
}

}  // namespace

result<nvml_gpu_info> nvml_query(const std::string& pci_bus_id) {
  const nvml_api& a = api();
  if (!a.loaded) return unavailable{unavailable_kind::not_supported, a.reason};
  nvml_device dev = nullptr;
  if (const nvml_return rc = a.handle_by_bus_id(pci_bus_id.c_str(), &dev); rc != nvml_success) {
    return unavailable{unavailable_kind::failed, "NVML has no device at " + pci_bus_id +
                                                     " (NVML error " + std::to_string(rc) + ")"};
  }
  nvml_gpu_info info;
  char uuid[96] = {};
  if (a.uuid != nullptr && a.uuid(dev, uuid, sizeof uuid) == nvml_success) info.uuid = uuid;
  info.pcie_gen_current = query_uint(a.gen_current, dev);
  info.pcie_gen_max = query_uint(a.gen_max, dev);
  info.pcie_width_current = query_uint(a.width_current, dev);
  info.pcie_width_max = query_uint(a.width_max, dev);
  info.memory_clock_mhz = query_clock(a.clock, dev, nvml_clock_mem);
  info.memory_clock_max_mhz = query_clock(a.max_clock, dev, nvml_clock_mem);
  info.sm_clock_mhz = query_clock(a.clock, dev, nvml_clock_sm);
  info.sm_clock_max_mhz = query_clock(a.max_clock, dev, nvml_clock_sm);
  info.bus_width_bits = query_uint(a.bus_width, dev);
  return info;
}

result<std::string> nvml_driver_version() {
  const nvml_api& a = api();
  if (!a.loaded) return unavailable{unavailable_kind::not_supported, a.reason};
  char v[96] = {};
  if (a.driver_version == nullptr || a.driver_version(v, sizeof v) != nvml_success) {
    return unavailable{unavailable_kind::failed, "nvmlSystemGetDriverVersion failed"};
  }
  return std::string(v);
}

}  // namespace vramkit::probe::detail
