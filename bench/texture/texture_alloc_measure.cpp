// texture_alloc_measure: allocates real CUDA mipmapped arrays of each format, size, mip and layer
// configuration the planner offers and records the free-memory delta per array (cudaMemGetInfo
// before and after N identical allocations, divided by N), the deferred-mapping size and
// alignment (cudaMipmappedArrayGetMemoryRequirements), the tight size and the planner's model,
// into a JSON file. Usage: texture_alloc_measure [--json FILE] [--quick]
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "vramkit/texture/cuda_allocation_model.hpp"

using namespace vramkit::texture;

namespace {

#define CHECK(call)                                                         \
  do {                                                                      \
    const cudaError_t s_ = (call);                                          \
    if (s_ != cudaSuccess) {                                                \
      std::fprintf(stderr, "texture_alloc_measure: %s failed: %s\n", #call, \
                   cudaGetErrorString(s_));                                 \
      std::exit(1);                                                         \
    }                                                                       \
  } while (0)

// The CUDA channel description of each format the planner offers, from CUDA's own templates.
struct channel_entry {
  texture_format format;
  cudaChannelFormatDesc (*describe)();
};
constexpr channel_entry channels[] = {
    {texture_format::rgba8, &cudaCreateChannelDesc<uchar4>},
    {texture_format::bc1, &cudaCreateChannelDesc<cudaChannelFormatKindUnsignedBlockCompressed1>},
    {texture_format::bc2, &cudaCreateChannelDesc<cudaChannelFormatKindUnsignedBlockCompressed2>},
    {texture_format::bc3, &cudaCreateChannelDesc<cudaChannelFormatKindUnsignedBlockCompressed3>},
    {texture_format::bc4, &cudaCreateChannelDesc<cudaChannelFormatKindUnsignedBlockCompressed4>},
    {texture_format::bc5, &cudaCreateChannelDesc<cudaChannelFormatKindUnsignedBlockCompressed5>},
    {texture_format::bc6h, &cudaCreateChannelDesc<cudaChannelFormatKindUnsignedBlockCompressed6H>},
    {texture_format::bc7, &cudaCreateChannelDesc<cudaChannelFormatKindUnsignedBlockCompressed7>},
};

cudaChannelFormatDesc channel_of(texture_format f) {
  for (const channel_entry& e : channels) {
    if (e.format == f) return e.describe();
  }
  std::fprintf(stderr, "texture_alloc_measure: no CUDA format\n");
  std::exit(1);
}

struct config {
  pixel_format f;
  int w, h, levels, layers;
  bool cube = false;  // layers are cube faces (cudaArrayCubemap; 6 per cube)
};

// Every format, size and mip count the planner offers, layered arrays, cube maps, and the sweep
// that locates the small/large allocation threshold.
std::vector<config> configurations(bool quick) {
  using tf = texture_format;
  std::vector<config> configs;
  const tf formats[] = {tf::rgba8, tf::bc1, tf::bc4, tf::bc5, tf::bc6h, tf::bc7};
  const std::pair<int, int> sizes[] = {{64, 64},     {256, 256},   {300, 200},  {1000, 600},
                                       {1024, 1024}, {2048, 1024}, {4096, 4096}};
  for (tf f : formats) {
    for (auto [w, h] : sizes) {
      if (quick && f != tf::bc1 && f != tf::bc7 && f != tf::rgba8) continue;
      const int full = full_mip_levels(w, h);
      std::vector<int> level_counts = {full, 1, std::min(full, 7)};
      std::sort(level_counts.begin(), level_counts.end());
      level_counts.erase(std::unique(level_counts.begin(), level_counts.end()), level_counts.end());
      for (int levels : level_counts) configs.push_back({pixel_format::of(f), w, h, levels, 1});
    }
  }
  configs.push_back({pixel_format::of(tf::bc1), 1024, 1024, 11, 16});
  configs.push_back({pixel_format::of(tf::bc7), 512, 512, 10, 8});
  configs.push_back({pixel_format::of(tf::bc7), 2048, 2048, 12, 4});
  configs.push_back({pixel_format::of(tf::rgba8), 256, 256, 9, 32});
  // Cube maps and a cube-map array: the model prices them as 6 (x cubes) layers.
  configs.push_back({pixel_format::of(tf::bc1), 512, 512, 10, 6, true});
  configs.push_back({pixel_format::of(tf::bc6h), 1024, 1024, 11, 6, true});
  configs.push_back({pixel_format::of(tf::bc7), 256, 256, 9, 12, true});
  // The sweep that locates the small/large allocation threshold (between 57 KB and 2.8 MB).
  for (int s : {128, 192, 256, 320, 384, 448, 512, 640, 768, 896, 1024, 1280, 1536}) {
    configs.push_back({pixel_format::of(tf::bc1), s, s, 1, 1});
    configs.push_back({pixel_format::of(tf::bc7), s, s, full_mip_levels(s, s), 1});
  }
  return configs;
}

unsigned array_flags(const config& c) {
  if (c.cube) return c.layers > 6 ? cudaArrayCubemap | cudaArrayLayered : cudaArrayCubemap;
  return c.layers > 1 ? cudaArrayLayered : 0u;
}

// The configuration's fields as they open each case of the JSON file.
nlohmann::json config_json(const config& c) {
  return {{"format", c.f.name()},   {"width", c.w},       {"height", c.h},
          {"mip_levels", c.levels}, {"layers", c.layers}, {"cube", c.cube}};
}

struct measurement {
  std::string unsupported;  // the driver's error when it refuses the configuration
  int n = 0;
  double measured = 0;
  double predicted = 0;
  std::uint64_t deferred_size = 0, deferred_alignment = 0;
};

// The free-memory delta of N identical arrays, per array; the model's prediction for the same N
// (whole pages); the deferred-mapping requirements of one.
measurement measure(const config& c, const cuda_allocation_model& model) {
  measurement m;
  // Enough arrays that the 2 MiB page granularity averages out, within a few GiB.
  m.n = static_cast<int>(std::clamp<std::uint64_t>(
      (256ull << 20) /
          std::max<std::uint64_t>(model.device_bytes(c.f, c.w, c.h, c.levels, 0, c.layers), 1),
      16, 1024));
  m.predicted =
      static_cast<double>(model.device_bytes_of(m.n, c.f, c.w, c.h, c.levels, 0, c.layers)) / m.n;
  const cudaChannelFormatDesc ch = channel_of(c.f.format);
  const cudaExtent extent = make_cudaExtent(c.w, c.h, c.layers > 1 || c.cube ? c.layers : 0);
  const unsigned flags = array_flags(c);
  {
    // A configuration the driver refuses (reported, not measured).
    cudaMipmappedArray_t probe = nullptr;
    const cudaError_t st = cudaMallocMipmappedArray(&probe, &ch, extent, c.levels, flags);
    if (st != cudaSuccess) {
      (void)cudaGetLastError();
      m.unsupported = cudaGetErrorString(st);
      return m;
    }
    CHECK(cudaFreeMipmappedArray(probe));
  }
  std::vector<cudaMipmappedArray_t> arrays(m.n);
  CHECK(cudaDeviceSynchronize());
  std::size_t free0 = 0, free1 = 0, total = 0;
  CHECK(cudaMemGetInfo(&free0, &total));
  for (auto& a : arrays) CHECK(cudaMallocMipmappedArray(&a, &ch, extent, c.levels, flags));
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaMemGetInfo(&free1, &total));
  for (auto& a : arrays) CHECK(cudaFreeMipmappedArray(a));
  m.measured = static_cast<double>(free0 - free1) / m.n;
  cudaMipmappedArray_t deferred = nullptr;
  if (cudaMallocMipmappedArray(&deferred, &ch, extent, c.levels,
                               flags | cudaArrayDeferredMapping) == cudaSuccess) {
    cudaArrayMemoryRequirements req{};
    if (cudaMipmappedArrayGetMemoryRequirements(&req, deferred, 0) == cudaSuccess) {
      m.deferred_size = req.size;
      m.deferred_alignment = req.alignment;
    }
    CHECK(cudaFreeMipmappedArray(deferred));
  } else {
    (void)cudaGetLastError();
  }
  return m;
}

}  // namespace

int main(int argc, char** argv) try {
  std::string json_path = "texture-alloc.json";
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--json") && i + 1 < argc) {
      json_path = argv[++i];
    } else if (!std::strcmp(argv[i], "--quick")) {
      quick = true;
    } else {
      std::fprintf(stderr, "usage: texture_alloc_measure [--json FILE] [--quick]\n");
      return 2;
    }
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "texture_alloc_measure: no CUDA device\n");
    return 1;
  }
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, 0));
  int driver = 0, runtime = 0;
  CHECK(cudaDriverGetVersion(&driver));
  CHECK(cudaRuntimeGetVersion(&runtime));

  const cuda_allocation_model model;
  nlohmann::json cases = nlohmann::json::array();
  double worst = 0;
  int within = 0;
  std::printf("%-10s %11s %4s %5s %5s %12s %12s %12s %12s %9s\n", "format", "size", "lvl", "layer",
              "N", "tight", "measured", "model", "deferred", "model err");
  for (const auto& c : configurations(quick)) {
    const std::uint64_t tight = chain_bytes(c.f, c.w, c.h, c.levels, 0, c.layers);
    const measurement m = measure(c, model);
    if (!m.unsupported.empty()) {
      std::printf("%-10s %5dx%-5d %4d %4d%s refused by the driver: %s\n", c.f.name().c_str(), c.w,
                  c.h, c.levels, c.layers, c.cube ? "c" : " ", m.unsupported.c_str());
      nlohmann::json refused = config_json(c);
      refused["unsupported"] = m.unsupported;
      cases.push_back(refused);
      continue;
    }
    const double err = m.measured > 0 ? (m.predicted - m.measured) / m.measured : 0.0;
    worst = std::max(worst, std::fabs(err));
    within += std::fabs(err) <= 0.02 ? 1 : 0;
    std::printf("%-10s %5dx%-5d %4d %4d%s %5d %12llu %12.0f %12llu %12llu %8.2f%%\n",
                c.f.name().c_str(), c.w, c.h, c.levels, c.layers, c.cube ? "c" : " ", m.n,
                static_cast<unsigned long long>(tight), m.measured,
                static_cast<unsigned long long>(m.predicted),
                static_cast<unsigned long long>(m.deferred_size), 100 * err);
    nlohmann::json measured = config_json(c);
    measured.update({{"arrays", m.n},
                     {"tight_bytes", tight},
                     {"measured_bytes", m.measured},
                     {"model_bytes", m.predicted},
                     {"deferred_size", m.deferred_size},
                     {"deferred_alignment", m.deferred_alignment},
                     {"model_error", err}});
    cases.push_back(measured);
  }
  nlohmann::json out;
  out["schema_version"] = 1;
  out["device"] = prop.name;
  out["driver_version"] = driver;
  out["runtime_version"] = runtime;
  out["method"] =
      "cudaMemGetInfo delta over N identical cudaMallocMipmappedArray calls, divided by N";
  out["cases"] = cases;
  out["within_2pct"] = within;
  out["case_count"] = cases.size();
  out["max_abs_model_error"] = worst;
  std::ofstream(json_path) << out.dump(2) << "\n";
  std::printf("model within 2%% of the measured delta in %d of %zu cases; worst |error| %.2f%%\n",
              within, cases.size(), 100 * worst);
  if (within != static_cast<int>(cases.size())) return 1;
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "texture_alloc_measure: %s\n", e.what());
  return 1;
}
