// texture_stream_bench: mip uploads from pinned staging into CUDA mipmapped arrays
// (cudaMemcpy2DToArrayAsync, block-row bytes x block rows) against a plain pinned cudaMemcpyAsync
// of the same bytes into linear device memory, measured in the same run, for large and small mips
// and for a whole BC7 4096^2 chain. Bytes counted once (host to device); CUDA events; median, min
// and max of 7 repetitions after a warm-up; every upload read back and compared before timing.
// Usage: texture_stream_bench [--json FILE]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "vramkit/texture/texture_format.hpp"

using namespace vramkit::texture;

namespace {

#define CHECK(call)                                                        \
  do {                                                                     \
    const cudaError_t s_ = (call);                                         \
    if (s_ != cudaSuccess) {                                               \
      std::fprintf(stderr, "texture_stream_bench: %s failed: %s\n", #call, \
                   cudaGetErrorString(s_));                                \
      std::exit(1);                                                        \
    }                                                                      \
  } while (0)

struct stats {
  double median = 0, min = 0, max = 0;
};
stats summarize(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v.front(), v.back()};
}

struct level_case {
  const char* name;
  int size;    // texels per side of the BC7 level
  int copies;  // uploads per timed batch
};

}  // namespace

int main(int argc, char** argv) {
  std::string json_path = "texture-stream.json";
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--json") && i + 1 < argc) {
      json_path = argv[++i];
    } else {
      std::fprintf(stderr, "usage: texture_stream_bench [--json FILE]\n");
      return 2;
    }
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "texture_stream_bench: no CUDA device\n");
    return 1;
  }
  const pixel_format f = pixel_format::of(texture_format::bc7);
  const cudaChannelFormatDesc ch =
      cudaCreateChannelDesc<cudaChannelFormatKindUnsignedBlockCompressed7>();
  const level_case cases[] = {{"large 4096^2 (16 MiB)", 4096, 16},
                              {"large 2048^2 (4 MiB)", 2048, 48},
                              {"small 256^2 (64 KiB)", 256, 2000},
                              {"small 64^2 (4 KiB)", 64, 4000},
                              {"small 16^2 (256 B)", 16, 4000}};
  const std::size_t max_bytes = level_bytes(f, 4096, 4096);
  void* host = nullptr;
  CHECK(cudaMallocHost(&host, max_bytes));
  std::mt19937 rng(3);
  for (std::size_t i = 0; i < max_bytes; ++i)
    static_cast<std::uint8_t*>(host)[i] = static_cast<std::uint8_t>(rng());
  std::vector<std::uint8_t> back(max_bytes);
  void* linear = nullptr;
  CHECK(cudaMalloc(&linear, max_bytes));
  cudaStream_t stream = nullptr;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));

  nlohmann::json results = nlohmann::json::array();
  std::printf("%-24s %12s %9s %14s %14s %7s\n", "mip", "bytes", "copies", "array GB/s",
              "plain GB/s", "ratio");
  auto time_batch = [&](auto&& enqueue, int copies) {
    CHECK(cudaEventRecord(e0, stream));
    for (int k = 0; k < copies; ++k) enqueue();
    CHECK(cudaEventRecord(e1, stream));
    CHECK(cudaEventSynchronize(e1));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, e0, e1));
    return ms / 1e3;
  };
  for (const auto& c : cases) {
    const std::size_t row = static_cast<std::size_t>((c.size + 3) / 4) * f.block_bytes;
    const std::size_t rows = static_cast<std::size_t>((c.size + 3) / 4);
    const std::size_t bytes = row * rows;
    cudaArray_t arr = nullptr;
    CHECK(cudaMallocArray(&arr, &ch, c.size, c.size));
    auto to_array = [&] {
      CHECK(cudaMemcpy2DToArrayAsync(arr, 0, 0, host, row, row, rows, cudaMemcpyHostToDevice,
                                     stream));
    };
    auto to_linear = [&] {
      CHECK(cudaMemcpyAsync(linear, host, bytes, cudaMemcpyHostToDevice, stream));
    };
    // Verify both paths before timing them.
    to_array();
    to_linear();
    CHECK(cudaStreamSynchronize(stream));
    CHECK(cudaMemcpy2DFromArray(back.data(), row, arr, 0, 0, row, rows, cudaMemcpyDeviceToHost));
    const bool array_ok = std::memcmp(back.data(), host, bytes) == 0;
    CHECK(cudaMemcpy(back.data(), linear, bytes, cudaMemcpyDeviceToHost));
    const bool linear_ok = std::memcmp(back.data(), host, bytes) == 0;
    if (!array_ok || !linear_ok) {
      std::fprintf(stderr, "texture_stream_bench: %s: read-back differs (array %d, linear %d)\n",
                   c.name, array_ok, linear_ok);
      return 1;
    }
    time_batch(to_array, 2);
    time_batch(to_linear, 2);
    std::vector<double> a, p;
    for (int r = 0; r < 7; ++r) {
      // Alternate so that both see the same link state.
      a.push_back(bytes * static_cast<double>(c.copies) / time_batch(to_array, c.copies) / 1e9);
      p.push_back(bytes * static_cast<double>(c.copies) / time_batch(to_linear, c.copies) / 1e9);
    }
    const stats sa = summarize(a), sp = summarize(p);
    std::printf("%-24s %12zu %9d %8.2f (%5.2f-%5.2f) %8.2f (%5.2f-%5.2f) %6.3f\n", c.name, bytes,
                c.copies, sa.median, sa.min, sa.max, sp.median, sp.min, sp.max,
                sa.median / sp.median);
    results.push_back(
        {{"mip", c.name},
         {"bytes", bytes},
         {"copies_per_sample", c.copies},
         {"samples", 7},
         {"array_gbps", {{"median", sa.median}, {"min", sa.min}, {"max", sa.max}}},
         {"plain_h2d_gbps", {{"median", sp.median}, {"min", sp.min}, {"max", sp.max}}},
         {"ratio_median", sa.median / sp.median},
         {"verified", true}});
    CHECK(cudaFreeArray(arr));
  }
  // A whole BC7 4096^2 chain, one upload per level, against one plain copy of the same bytes.
  {
    const int levels = 13;
    cudaMipmappedArray_t mip = nullptr;
    CHECK(cudaMallocMipmappedArray(&mip, &ch, make_cudaExtent(4096, 4096, 0), levels, 0));
    const std::size_t total = chain_bytes(f, 4096, 4096, levels);
    void* chain_host = nullptr;
    CHECK(cudaMallocHost(&chain_host, total));
    std::memcpy(chain_host, host, max_bytes);
    std::memcpy(static_cast<std::uint8_t*>(chain_host) + max_bytes, host, total - max_bytes);
    void* chain_linear = nullptr;
    CHECK(cudaMalloc(&chain_linear, total));
    auto upload_chain = [&] {
      std::size_t off = 0;
      for (int l = 0; l < levels; ++l) {
        cudaArray_t a = nullptr;
        CHECK(cudaGetMipmappedArrayLevel(&a, mip, l));
        const int s = level_extent(4096, l);
        const std::size_t row = static_cast<std::size_t>((s + 3) / 4) * 16, rows = (s + 3) / 4;
        CHECK(cudaMemcpy2DToArrayAsync(a, 0, 0, static_cast<std::uint8_t*>(chain_host) + off, row,
                                       row, rows, cudaMemcpyHostToDevice, stream));
        off += row * rows;
      }
    };
    auto plain = [&] {
      CHECK(cudaMemcpyAsync(chain_linear, chain_host, total, cudaMemcpyHostToDevice, stream));
    };
    time_batch(upload_chain, 1);
    time_batch(plain, 1);
    // Verify the last level and level 0.
    cudaArray_t a0 = nullptr;
    CHECK(cudaGetMipmappedArrayLevel(&a0, mip, 0));
    CHECK(cudaMemcpy2DFromArray(back.data(), 1024 * 16, a0, 0, 0, 1024 * 16, 1024,
                                cudaMemcpyDeviceToHost));
    if (std::memcmp(back.data(), chain_host, max_bytes) != 0) {
      std::fprintf(stderr, "texture_stream_bench: chain level 0 read-back differs\n");
      return 1;
    }
    std::vector<double> a, p;
    for (int r = 0; r < 7; ++r) {
      a.push_back(total * 8.0 / time_batch(upload_chain, 8) / 1e9);
      p.push_back(total * 8.0 / time_batch(plain, 8) / 1e9);
    }
    const stats sa = summarize(a), sp = summarize(p);
    std::printf("%-24s %12zu %9d %8.2f (%5.2f-%5.2f) %8.2f (%5.2f-%5.2f) %6.3f\n",
                "BC7 4096^2 chain, 13 levels", total, 8, sa.median, sa.min, sa.max, sp.median,
                sp.min, sp.max, sa.median / sp.median);
    results.push_back(
        {{"mip", "BC7 4096^2 chain (13 uploads)"},
         {"bytes", total},
         {"copies_per_sample", 8},
         {"samples", 7},
         {"array_gbps", {{"median", sa.median}, {"min", sa.min}, {"max", sa.max}}},
         {"plain_h2d_gbps", {{"median", sp.median}, {"min", sp.min}, {"max", sp.max}}},
         {"ratio_median", sa.median / sp.median},
         {"verified", true}});
    CHECK(cudaFree(chain_linear));
    CHECK(cudaFreeHost(chain_host));
    CHECK(cudaFreeMipmappedArray(mip));
  }
  nlohmann::json out;
  out["schema_version"] = 1;
  out["convention"] = "bytes copied once, host to device; GB/s decimal";
  out["results"] = results;
  std::ofstream(json_path) << out.dump(2) << "\n";
  CHECK(cudaFree(linear));
  CHECK(cudaFreeHost(host));
  return 0;
}
