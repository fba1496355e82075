// The plain baselines vramkit probe's GPU figures are compared with, measured the simplest way:
// a loop of cudaMemcpyAsync (pinned H2D, D2H), cudaMemcpy device-to-device, and a plain float4
// read kernel, each timed with CUDA events around the loop after a warm-up. Prints JSON.
//   probe_gpu_baselines [--h2d-bytes N] [--device-bytes N] [--samples N] [--json FILE]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "vramkit/core/sample_stats.hpp"

namespace {

#define CHECK(call)                                                                                \
  do {                                                                                             \
    cudaError_t e_ = (call);                                                                       \
    if (e_ != cudaSuccess) {                                                                       \
      std::fprintf(stderr, "probe_gpu_baselines: %s failed: %s\n", #call, cudaGetErrorString(e_)); \
      std::exit(1);                                                                                \
    }                                                                                              \
  } while (0)

__global__ void read_float4(const float4* __restrict__ p, std::size_t n, float* out) {
  float acc = 0;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const float4 v = p[i];
    acc += v.x + v.y + v.z + v.w;
  }
  if (acc == 1234.5f) *out = acc;  // keeps the loads; practically never true
}

// GB/s per sample of `loops` calls of `op` between two events, after `warmup` calls.
template <typename Op>
std::vector<double> time_loop(int samples, int loops, double bytes, Op op) {
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  for (int i = 0; i < 2; ++i) op();
  std::vector<double> gbps;
  for (int s = 0; s < samples; ++s) {
    CHECK(cudaEventRecord(a));
    for (int i = 0; i < loops; ++i) op();
    CHECK(cudaEventRecord(b));
    CHECK(cudaEventSynchronize(b));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    gbps.push_back(bytes * loops / (ms / 1e3) / 1e9);
  }
  CHECK(cudaEventDestroy(a));
  CHECK(cudaEventDestroy(b));
  return gbps;
}

void put(std::string& json, const char* key, const std::vector<double>& gbps, std::size_t size,
         const char* convention, bool last = false) {
  const vramkit::sample_stats s = vramkit::sample_stats::of(gbps);
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "  \"%s\": {\"median\": %.3f, \"min\": %.3f, \"max\": %.3f, \"size_bytes\": %zu, "
                "\"samples\": %zu, \"unit\": \"GB/s\", \"convention\": \"%s\"}%s\n",
                key, s.median, s.min, s.max, size, gbps.size(), convention, last ? "" : ",");
  json += buf;
  std::fprintf(stderr, "%-16s %10.1f GB/s (min %.1f, max %.1f, %zu samples, %zu bytes, %s)\n", key,
               s.median, s.min, s.max, gbps.size(), size, convention);
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t h2d_bytes = std::size_t{1} << 30, dev_bytes = std::size_t{2} << 30;
  int samples = 10;
  std::string json_file;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "probe_gpu_baselines: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--h2d-bytes")
      h2d_bytes = std::stoull(next());
    else if (a == "--device-bytes")
      dev_bytes = std::stoull(next());
    else if (a == "--samples")
      samples = std::stoi(next());
    else if (a == "--json")
      json_file = next();
    else {
      std::fprintf(stderr, "probe_gpu_baselines: unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::fprintf(stderr, "probe_gpu_baselines: no CUDA device\n");
    return 1;
  }
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::string json = "{\n  \"device\": \"" + std::string(prop.name) + "\",\n";

  // Pinned host <-> device, a plain loop of cudaMemcpyAsync on the default stream.
  void *h = nullptr, *d = nullptr;
  CHECK(cudaHostAlloc(&h, h2d_bytes, cudaHostAllocDefault));
  CHECK(cudaMalloc(&d, h2d_bytes));
  std::memset(h, 0x5A, h2d_bytes);
  const int loops =
      static_cast<int>(std::max<std::size_t>(1, (std::size_t{256} << 20) / h2d_bytes));
  auto up = time_loop(samples, loops, double(h2d_bytes),
                      [&] { CHECK(cudaMemcpyAsync(d, h, h2d_bytes, cudaMemcpyHostToDevice, 0)); });
  CHECK(cudaMemset(d, 0x3C, h2d_bytes));
  auto down = time_loop(samples, loops, double(h2d_bytes), [&] {
    CHECK(cudaMemcpyAsync(h, d, h2d_bytes, cudaMemcpyDeviceToHost, 0));
  });
  CHECK(cudaDeviceSynchronize());
  const bool copies_ok = static_cast<unsigned char*>(h)[0] == 0x3C &&
                         static_cast<unsigned char*>(h)[h2d_bytes - 1] == 0x3C;
  CHECK(cudaFreeHost(h));
  CHECK(cudaFree(d));
  put(json, "h2d_pinned", up, h2d_bytes, "copied_once");
  put(json, "d2h_pinned", down, h2d_bytes, "copied_once");

  // Device to device, cudaMemcpy, and a plain float4 read kernel.
  void *a = nullptr, *b = nullptr;
  float* sink = nullptr;
  CHECK(cudaMalloc(&a, dev_bytes));
  CHECK(cudaMalloc(&b, dev_bytes));
  CHECK(cudaMalloc(&sink, sizeof(float)));
  CHECK(cudaMemset(a, 0x11, dev_bytes));
  auto d2d = time_loop(samples, 10, double(dev_bytes), [&] {
    CHECK(cudaMemcpyAsync(b, a, dev_bytes, cudaMemcpyDeviceToDevice, 0));
  });
  int sms = 0, tps = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  CHECK(cudaDeviceGetAttribute(&tps, cudaDevAttrMaxThreadsPerMultiProcessor, 0));
  const int blocks = sms * (tps / 256);
  auto rd = time_loop(samples, 10, double(dev_bytes), [&] {
    read_float4<<<blocks, 256>>>(static_cast<const float4*>(a), dev_bytes / 16, sink);
    CHECK(cudaGetLastError());
  });
  unsigned char last = 0;
  CHECK(
      cudaMemcpy(&last, static_cast<unsigned char*>(b) + dev_bytes - 1, 1, cudaMemcpyDeviceToHost));
  CHECK(cudaFree(a));
  CHECK(cudaFree(b));
  CHECK(cudaFree(sink));
  put(json, "d2d_memcpy", d2d, dev_bytes, "copied_once");
  put(json, "read_float4", rd, dev_bytes, "read");
  json += "  \"verified\": " + std::string(copies_ok && last == 0x11 ? "true" : "false") + "\n}\n";
  if (!(copies_ok && last == 0x11))
    std::fprintf(stderr, "probe_gpu_baselines: copy check FAILED\n");
  if (json_file.empty()) {
    std::fputs(json.c_str(), stdout);
  } else {
    FILE* f = std::fopen(json_file.c_str(), "w");
    if (f == nullptr) {
      std::fprintf(stderr, "probe_gpu_baselines: cannot write %s\n", json_file.c_str());
      return 1;
    }
    std::fputs(json.c_str(), f);
    std::fclose(f);
  }
  return copies_ok && last == 0x11 ? 0 : 1;
}
