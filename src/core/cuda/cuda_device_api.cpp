// device_api over the CUDA runtime (linked statically). Only compiled in CUDA builds.
#include "vramkit/core/cuda_device_api.hpp"

#include <cuda.h>  // driver types only: entry points come from the runtime, libcuda is not linked
#include <cuda_runtime.h>

#include <mutex>

#include "common/cuda_check.hpp"
#include "vramkit/core/error.hpp"

namespace vramkit {
namespace {

cudaMemcpyKind to_cuda(copy_kind kind) {
  switch (kind) {
    case copy_kind::host_to_host:
      return cudaMemcpyHostToHost;
    case copy_kind::host_to_device:
      return cudaMemcpyHostToDevice;
    case copy_kind::device_to_host:
      return cudaMemcpyDeviceToHost;
    case copy_kind::device_to_device:
      return cudaMemcpyDeviceToDevice;
    case copy_kind::automatic:
      return cudaMemcpyDefault;
  }
  return cudaMemcpyDefault;
}

cudaStream_t to_cuda(stream_view s) { return static_cast<cudaStream_t>(s.handle); }
cudaEvent_t to_cuda(event_view e) { return static_cast<cudaEvent_t>(e.handle); }

cudaMemLocation to_location(memory_location where) {
  cudaMemLocation loc{};
  if (where.device == memory_location::host) {
    loc.type = cudaMemLocationTypeHost;
    loc.id = 0;
  } else {
    loc.type = cudaMemLocationTypeDevice;
    loc.id = where.device;
  }
  return loc;
}

void host_func_trampoline(void* data) {
  auto* fn = static_cast<std::function<void()>*>(data);
  try {
    (*fn)();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "vramkit: host function on stream threw: %s\n", e.what());
  } catch (...) {
    std::fprintf(stderr, "vramkit: host function on stream threw\n");
  }
  delete fn;
}

// The driver's virtual-memory calls, looked up once through the runtime
// (cudaGetDriverEntryPointByVersion, CUDA 12.0 ABI), so that vramkit never links libcuda.
struct vmm_driver {
  using reserve_fn = CUresult (*)(CUdeviceptr*, size_t, size_t, CUdeviceptr, unsigned long long);
  using free_fn = CUresult (*)(CUdeviceptr, size_t);
  using create_fn = CUresult (*)(CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*,
                                 unsigned long long);
  using release_fn = CUresult (*)(CUmemGenericAllocationHandle);
  using map_fn = CUresult (*)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                              unsigned long long);
  using access_fn = CUresult (*)(CUdeviceptr, size_t, const CUmemAccessDesc*, size_t);
  using unmap_fn = CUresult (*)(CUdeviceptr, size_t);
  using granularity_fn = CUresult (*)(size_t*, const CUmemAllocationProp*,
                                      CUmemAllocationGranularity_flags);
  using error_name_fn = CUresult (*)(CUresult, const char**);
  reserve_fn reserve = nullptr;
  free_fn address_free = nullptr;
  create_fn create = nullptr;
  release_fn release = nullptr;
  map_fn map = nullptr;
  access_fn access = nullptr;
  unmap_fn unmap = nullptr;
  granularity_fn granularity = nullptr;
  error_name_fn error_name = nullptr;
  std::string missing;  // the first symbol that could not be found

  template <typename Fn>
  void load(const char* symbol, Fn& out) {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult status{};
    const cudaError_t e =
        cudaGetDriverEntryPointByVersion(symbol, &fn, 12000, cudaEnableDefault, &status);
    if (e != cudaSuccess || status != cudaDriverEntryPointSuccess || fn == nullptr) {
      (void)cudaGetLastError();
      if (missing.empty()) missing = symbol;
      return;
    }
    out = reinterpret_cast<Fn>(fn);
  }

  vmm_driver() {
    load("cuMemAddressReserve", reserve);
    load("cuMemAddressFree", address_free);
    load("cuMemCreate", create);
    load("cuMemRelease", release);
    load("cuMemMap", map);
    load("cuMemSetAccess", access);
    load("cuMemUnmap", unmap);
    load("cuMemGetAllocationGranularity", granularity);
    load("cuGetErrorName", error_name);
  }

  void check(CUresult r, const char* call) const {
    if (r == CUDA_SUCCESS) return;
    const char* n = nullptr;
    if (error_name != nullptr) error_name(r, &n);
    const std::string message = std::string("CUDA driver error ") + (n ? n : "?") + " in " + call;
    if (r == CUDA_ERROR_OUT_OF_MEMORY) throw out_of_memory(0, call, message);
    throw cuda_error(static_cast<int>(r), message);
  }
  void require() const {
    if (!missing.empty()) {
      throw cuda_error(801, "CUDA driver has no " + missing + ": virtual memory unavailable");
    }
  }
};

const vmm_driver& driver() {
  static const vmm_driver d;
  return d;
}

CUmemAllocationProp device_prop(int device) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  return prop;
}

class cuda_api final : public device_api {
 public:
  [[nodiscard]] std::string name() const override { return "cuda"; }
  [[nodiscard]] int device_count() override {
    int n = 0;
    VRAMKIT_CUDA_TRY(cudaGetDeviceCount(&n));
    return n;
  }
  void set_device(int ordinal) override { VRAMKIT_CUDA_TRY(cudaSetDevice(ordinal)); }
  [[nodiscard]] int current_device() override {
    int d = 0;
    VRAMKIT_CUDA_TRY(cudaGetDevice(&d));
    return d;
  }
  [[nodiscard]] device_properties properties(int ordinal) override {
    cudaDeviceProp p{};
    VRAMKIT_CUDA_TRY(cudaGetDeviceProperties(&p, ordinal));
    device_properties out;
    out.ordinal = ordinal;
    out.name = p.name;
    char bus[32] = {};
    if (cudaDeviceGetPCIBusId(bus, sizeof bus, ordinal) == cudaSuccess)
      out.pci_bus_id = bus;
    else
      (void)cudaGetLastError();
    out.compute_major = p.major;
    out.compute_minor = p.minor;
    out.multiprocessor_count = p.multiProcessorCount;
    out.max_threads_per_multiprocessor = p.maxThreadsPerMultiProcessor;
    out.total_memory_bytes = p.totalGlobalMem;
    out.l2_cache_bytes = static_cast<std::size_t>(p.l2CacheSize);
    // CUDA 13 removed memoryClockRate from cudaDeviceProp: read it as an attribute.
    int clock_khz = 0;
    if (cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, ordinal) == cudaSuccess) {
      out.memory_clock_khz = clock_khz;
    } else {
      (void)cudaGetLastError();
    }
    out.memory_bus_width_bits = p.memoryBusWidth;
    out.unified_addressing = p.unifiedAddressing != 0;
    out.concurrent_managed_access = p.concurrentManagedAccess != 0;
    out.can_map_host_memory = p.canMapHostMemory != 0;
    out.async_engine_count = p.asyncEngineCount;
    return out;
  }
  [[nodiscard]] device_memory_info memory_info() override {
    device_memory_info info;
    VRAMKIT_CUDA_TRY(cudaMemGetInfo(&info.free_bytes, &info.total_bytes));
    return info;
  }

  void* allocate_device(std::size_t bytes) override {
    if (bytes == 0) return nullptr;
    void* p = nullptr;
    const cudaError_t st = cudaMalloc(&p, bytes);
    if (st == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      throw out_of_memory(bytes, "cudaMalloc", "");
    }
    VRAMKIT_CUDA_TRY(st);
    return p;
  }
  void free_device(void* ptr) noexcept override { VRAMKIT_CUDA_ASSERT(cudaFree(ptr)); }
  void* allocate_device_async(std::size_t bytes, stream_view stream) override {
    if (bytes == 0) return nullptr;
    void* p = nullptr;
    const cudaError_t st = cudaMallocAsync(&p, bytes, to_cuda(stream));
    if (st == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      throw out_of_memory(bytes, "cudaMallocAsync", "");
    }
    VRAMKIT_CUDA_TRY(st);
    return p;
  }
  void free_device_async(void* ptr, stream_view stream) noexcept override {
    if (ptr != nullptr) VRAMKIT_CUDA_ASSERT(cudaFreeAsync(ptr, to_cuda(stream)));
  }
  void* allocate_pinned_host(std::size_t bytes) override {
    if (bytes == 0) return nullptr;
    void* p = nullptr;
    const cudaError_t st = cudaHostAlloc(&p, bytes, cudaHostAllocPortable | cudaHostAllocMapped);
    if (st == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      throw out_of_memory(bytes, "cudaHostAlloc", "");
    }
    VRAMKIT_CUDA_TRY(st);
    return p;
  }
  void free_pinned_host(void* ptr) noexcept override {
    if (ptr != nullptr) VRAMKIT_CUDA_ASSERT(cudaFreeHost(ptr));
  }
  void* allocate_managed(std::size_t bytes) override {
    if (bytes == 0) return nullptr;
    void* p = nullptr;
    const cudaError_t st = cudaMallocManaged(&p, bytes, cudaMemAttachGlobal);
    if (st == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      throw out_of_memory(bytes, "cudaMallocManaged", "");
    }
    VRAMKIT_CUDA_TRY(st);
    return p;
  }
  void free_managed(void* ptr) noexcept override {
    if (ptr != nullptr) VRAMKIT_CUDA_ASSERT(cudaFree(ptr));
  }
  void advise_managed(const void* ptr, std::size_t bytes, managed_advice advice,
                      memory_location where) override {
    cudaMemoryAdvise a = cudaMemAdviseSetReadMostly;
    switch (advice) {
      case managed_advice::set_read_mostly:
        a = cudaMemAdviseSetReadMostly;
        break;
      case managed_advice::unset_read_mostly:
        a = cudaMemAdviseUnsetReadMostly;
        break;
      case managed_advice::set_preferred_location:
        a = cudaMemAdviseSetPreferredLocation;
        break;
      case managed_advice::unset_preferred_location:
        a = cudaMemAdviseUnsetPreferredLocation;
        break;
      case managed_advice::set_accessed_by:
        a = cudaMemAdviseSetAccessedBy;
        break;
      case managed_advice::unset_accessed_by:
        a = cudaMemAdviseUnsetAccessedBy;
        break;
    }
    VRAMKIT_CUDA_TRY(cudaMemAdvise(ptr, bytes, a, to_location(where)));
  }
  void prefetch_managed(const void* ptr, std::size_t bytes, memory_location where,
                        stream_view stream) override {
    VRAMKIT_CUDA_TRY(cudaMemPrefetchAsync(ptr, bytes, to_location(where), 0, to_cuda(stream)));
  }
  void register_host(void* ptr, std::size_t bytes) override {
    VRAMKIT_CUDA_TRY(cudaHostRegister(ptr, bytes, cudaHostRegisterPortable));
  }
  void unregister_host(void* ptr) noexcept override {
    VRAMKIT_CUDA_ASSERT(cudaHostUnregister(ptr));
  }

  void copy_async(void* dst, const void* src, std::size_t bytes, copy_kind kind,
                  stream_view stream) override {
    if (bytes == 0) return;
    VRAMKIT_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, to_cuda(kind), to_cuda(stream)));
  }
  void fill_async(void* dst, int byte_value, std::size_t bytes, stream_view stream) override {
    if (bytes == 0) return;
    VRAMKIT_CUDA_TRY(cudaMemsetAsync(dst, byte_value, bytes, to_cuda(stream)));
  }

  [[nodiscard]] std::size_t vmm_granularity() override {
    const vmm_driver& d = driver();
    if (!d.missing.empty()) return 0;
    int supported = 0;
    const int dev = current_device();
    // The runtime's attribute numbers are the driver's; it names no constant for this one.
    const auto attr =
        static_cast<cudaDeviceAttr>(CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED);
    if (cudaDeviceGetAttribute(&supported, attr, dev) != cudaSuccess || supported == 0) {
      (void)cudaGetLastError();
      return 0;
    }
    const CUmemAllocationProp prop = device_prop(dev);
    std::size_t g = 0;
    d.check(d.granularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED),
            "cuMemGetAllocationGranularity");
    return g;
  }
  void* reserve_address_range(std::size_t bytes) override {
    const vmm_driver& d = driver();
    d.require();
    CUdeviceptr p = 0;
    d.check(d.reserve(&p, bytes, 0, 0, 0), "cuMemAddressReserve");
    return reinterpret_cast<void*>(p);
  }
  void free_address_range(void* base, std::size_t bytes) noexcept override {
    const vmm_driver& d = driver();
    if (d.address_free == nullptr) return;
    const CUresult r = d.address_free(reinterpret_cast<CUdeviceptr>(base), bytes);
    if (r != CUDA_SUCCESS) std::fprintf(stderr, "vramkit: cuMemAddressFree failed (%d)\n", r);
  }
  physical_handle create_physical(std::size_t bytes) override {
    const vmm_driver& d = driver();
    d.require();
    const CUmemAllocationProp prop = device_prop(current_device());
    CUmemGenericAllocationHandle h = 0;
    d.check(d.create(&h, bytes, &prop, 0), "cuMemCreate");
    return physical_handle{static_cast<std::uint64_t>(h)};
  }
  void release_physical(physical_handle handle) noexcept override {
    const vmm_driver& d = driver();
    if (d.release == nullptr) return;
    const CUresult r = d.release(static_cast<CUmemGenericAllocationHandle>(handle.value));
    if (r != CUDA_SUCCESS) std::fprintf(stderr, "vramkit: cuMemRelease failed (%d)\n", r);
  }
  void map_physical(void* addr, std::size_t bytes, physical_handle handle) override {
    const vmm_driver& d = driver();
    d.require();
    d.check(d.map(reinterpret_cast<CUdeviceptr>(addr), bytes, 0,
                  static_cast<CUmemGenericAllocationHandle>(handle.value), 0),
            "cuMemMap");
  }
  void set_access(void* addr, std::size_t bytes) override {
    const vmm_driver& d = driver();
    d.require();
    CUmemAccessDesc desc{};
    desc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    desc.location.id = current_device();
    desc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    d.check(d.access(reinterpret_cast<CUdeviceptr>(addr), bytes, &desc, 1), "cuMemSetAccess");
  }
  void unmap(void* addr, std::size_t bytes) override {
    const vmm_driver& d = driver();
    d.require();
    d.check(d.unmap(reinterpret_cast<CUdeviceptr>(addr), bytes), "cuMemUnmap");
  }

  stream_view create_stream() override {
    cudaStream_t s = nullptr;
    VRAMKIT_CUDA_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    return stream_view{s};
  }
  void destroy_stream(stream_view stream) noexcept override {
    if (stream.handle != nullptr) VRAMKIT_CUDA_ASSERT(cudaStreamDestroy(to_cuda(stream)));
  }
  void synchronize(stream_view stream) override {
    VRAMKIT_CUDA_TRY(cudaStreamSynchronize(to_cuda(stream)));
  }
  void synchronize_device() override { VRAMKIT_CUDA_TRY(cudaDeviceSynchronize()); }
  event_view create_event() override {
    cudaEvent_t e = nullptr;
    VRAMKIT_CUDA_TRY(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    return event_view{e};
  }
  void destroy_event(event_view event) noexcept override {
    if (event.handle != nullptr) VRAMKIT_CUDA_ASSERT(cudaEventDestroy(to_cuda(event)));
  }
  void record_event(event_view event, stream_view stream) override {
    VRAMKIT_CUDA_TRY(cudaEventRecord(to_cuda(event), to_cuda(stream)));
  }
  [[nodiscard]] bool event_done(event_view event) override {
    const cudaError_t st = cudaEventQuery(to_cuda(event));
    if (st == cudaErrorNotReady) {
      (void)cudaGetLastError();
      return false;
    }
    VRAMKIT_CUDA_TRY(st);
    return true;
  }
  void synchronize_event(event_view event) override {
    VRAMKIT_CUDA_TRY(cudaEventSynchronize(to_cuda(event)));
  }
  void stream_wait_event(stream_view stream, event_view event) override {
    VRAMKIT_CUDA_TRY(cudaStreamWaitEvent(to_cuda(stream), to_cuda(event), 0));
  }
  void launch_host_func(stream_view stream, std::function<void()> fn) override {
    auto* heap = new std::function<void()>(std::move(fn));
    const cudaError_t st = cudaLaunchHostFunc(to_cuda(stream), host_func_trampoline, heap);
    if (st != cudaSuccess) {
      delete heap;
      VRAMKIT_CUDA_TRY(st);
    }
  }
};

}  // namespace

bool built_with_cuda() noexcept { return true; }

result<cuda_runtime_info> cuda_runtime_status() {
  cuda_runtime_info info;
  (void)cudaRuntimeGetVersion(&info.runtime_version);
  const cudaError_t dv = cudaDriverGetVersion(&info.driver_version);
  if (dv != cudaSuccess || info.driver_version == 0) {
    (void)cudaGetLastError();
    return unavailable{unavailable_kind::no_driver,
                       "no NVIDIA driver found (host-only measurements)"};
  }
  const cudaError_t st = cudaGetDeviceCount(&info.device_count);
  if (st == cudaErrorNoDevice || (st == cudaSuccess && info.device_count == 0)) {
    (void)cudaGetLastError();
    return unavailable{unavailable_kind::no_device, "no CUDA device found"};
  }
  if (st == cudaErrorInsufficientDriver) {
    (void)cudaGetLastError();
    return unavailable{unavailable_kind::no_driver,
                       "the NVIDIA driver (CUDA " + format_cuda_version(info.driver_version) +
                           ") is older than the runtime vramkit was built with (" +
                           format_cuda_version(info.runtime_version) + ")"};
  }
  if (st != cudaSuccess) {
    (void)cudaGetLastError();
    return unavailable{unavailable_kind::failed,
                       std::string("CUDA initialisation failed: ") + cudaGetErrorString(st)};
  }
  return info;
}

result<std::shared_ptr<device_api>> cuda_device_api() {
  auto status = cuda_runtime_status();
  if (!status) return status.error();
  static std::shared_ptr<device_api> api = std::make_shared<cuda_api>();
  return api;
}

}  // namespace vramkit
