// texture_stream_bench: mip uploads from pinned staging into CUDA mipmapped arrays
// (cudaMemcpy2DToArrayAsync, block-row bytes x block rows), measured in one run beside:
//  - a plain pinned cudaMemcpyAsync of the same bytes into linear memory, and one of 256 MiB (the
//    size `vramkit probe` reports its pinned H2D at);
//  - the same uploads alternated over two streams (two copy engines share the link, so one
//    copy's start-up overlaps the other's transfer);
//  - a whole BC7 4096^2 chain, one upload per level;
//  - the streamer's chain rebuilds through cuda_mip_storage (a 2048^2 BC7 chain gains level 0:
//    eleven device-to-device level copies and a 4 MiB upload), with everything on one stream as
//    before, with the level copies on their own stream, and with two upload streams as well.
// Bytes counted once (host to device); CUDA events; median, min and max of the timed batches
// (9 per level variant, in alternating rounds; 7 otherwise) after warm-ups; every destination read
// back and compared with its source.
// Usage: texture_stream_bench [--json FILE]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "vramkit/texture/cuda_mip_storage.hpp"
#include "vramkit/texture/texture_format.hpp"

using namespace vramkit::texture;
using vramkit::stream_view;

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

constexpr std::size_t large_plain_bytes = 256ull << 20;
const pixel_format bc7 = pixel_format::of(texture_format::bc7);

struct stats {
  double median = 0, min = 0, max = 0;
};
stats summarize(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v.front(), v.back()};
}
nlohmann::json to_json(const stats& s) {
  return {{"median", s.median}, {"min", s.min}, {"max", s.max}};
}

// Host and device buffers, streams and events shared by every case.
struct bench {
  std::uint8_t* host = nullptr;  // pinned (cudaHostAlloc, portable), random bytes
  void* linear = nullptr;
  cudaStream_t s[3] = {};
  cudaEvent_t start = nullptr, stop = nullptr, side[3] = {};
  std::vector<std::uint8_t> back;

  bench() {
    CHECK(cudaHostAlloc(reinterpret_cast<void**>(&host), large_plain_bytes, cudaHostAllocPortable));
    std::uint64_t x = 0x9E3779B97F4A7C15ull;  // xorshift64: fast, not constant
    for (std::size_t i = 0; i < large_plain_bytes; i += 8) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      std::memcpy(host + i, &x, 8);
    }
    CHECK(cudaMalloc(&linear, large_plain_bytes));
    for (auto& st : s) CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    CHECK(cudaEventCreate(&start));
    CHECK(cudaEventCreate(&stop));
    for (auto& e : side) CHECK(cudaEventCreate(&e));
    back.resize(large_plain_bytes);
  }
  ~bench() {
    for (auto& e : side) cudaEventDestroy(e);
    cudaEventDestroy(stop);
    cudaEventDestroy(start);
    for (auto& st : s) cudaStreamDestroy(st);
    cudaFree(linear);
    cudaFreeHost(host);
  }

  // Seconds for `enqueue(k)` of k = 0..copies-1 on `streams` streams (enqueue picks its stream
  // from k), from an event all the streams wait for to the end of the last of them.
  double time(const std::function<void(int)>& enqueue, int copies, int streams) {
    CHECK(cudaEventRecord(start, s[0]));
    for (int i = 1; i < streams; ++i) CHECK(cudaStreamWaitEvent(s[i], start, 0));
    for (int k = 0; k < copies; ++k) enqueue(k);
    for (int i = 1; i < streams; ++i) {
      CHECK(cudaEventRecord(side[i], s[i]));
      CHECK(cudaStreamWaitEvent(s[0], side[i], 0));
    }
    CHECK(cudaEventRecord(stop, s[0]));
    CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, start, stop));
    return ms / 1e3;
  }

  // GB/s of `reps` timed batches (after one warm-up) of `copies` x `bytes`.
  std::vector<double> samples(const std::function<void(int)>& enqueue, int copies, int streams,
                              double bytes, int reps) {
    time(enqueue, std::min(copies, 2), streams);
    std::vector<double> v;
    v.reserve(static_cast<std::size_t>(reps));
    for (int r = 0; r < reps; ++r)
      v.push_back(bytes * copies / time(enqueue, copies, streams) / 1e9);
    return v;
  }

  // Median, min, max GB/s of `reps` timed batches (after one warm-up) of `copies` x `bytes`.
  stats gbps(const std::function<void(int)>& enqueue, int copies, int streams, double bytes,
             int reps = 7) {
    return summarize(samples(enqueue, copies, streams, bytes, reps));
  }
};

bool array_holds(bench& b, cudaArray_t a, std::size_t row, std::size_t rows,
                 const std::uint8_t* expect) {
  CHECK(cudaMemcpy2DFromArray(b.back.data(), row, a, 0, 0, row, rows, cudaMemcpyDeviceToHost));
  return std::memcmp(b.back.data(), expect, row * rows) == 0;
}

struct level_case {
  const char* name;
  int size;    // texels per side of the BC7 level
  int copies;  // uploads per timed batch
};

// One level size: into an array on one stream, into two arrays on two streams, plain.
nlohmann::json bench_level(bench& b, const level_case& c) {
  const cudaChannelFormatDesc ch =
      cudaCreateChannelDesc<cudaChannelFormatKindUnsignedBlockCompressed7>();
  const std::size_t row = static_cast<std::size_t>((c.size + 3) / 4) * bc7.block_bytes;
  const auto rows = static_cast<std::size_t>((c.size + 3) / 4);
  const std::size_t bytes = row * rows;
  cudaArray_t arr[2] = {};
  for (auto& a : arr) CHECK(cudaMallocArray(&a, &ch, c.size, c.size));
  auto to_array = [&](int k, int streams) {
    CHECK(cudaMemcpy2DToArrayAsync(arr[k % streams], 0, 0, b.host, row, row, rows,
                                   cudaMemcpyHostToDevice, b.s[k % streams]));
  };
  auto to_linear = [&](int) {
    CHECK(cudaMemcpyAsync(b.linear, b.host, bytes, cudaMemcpyHostToDevice, b.s[0]));
  };
  std::vector<double> a1, a2, p;
  // Alternate the three so that all see the same link state: rounds of 3 batches each, 9 samples.
  for (int r = 0; r < 3; ++r) {
    for (double v : b.samples([&](int k) { to_array(k, 1); }, c.copies, 1, double(bytes), 3))
      a1.push_back(v);
    for (double v : b.samples([&](int k) { to_array(k, 2); }, c.copies, 2, double(bytes), 3))
      a2.push_back(v);
    for (double v : b.samples(to_linear, c.copies, 1, double(bytes), 3)) p.push_back(v);
  }
  CHECK(cudaDeviceSynchronize());
  bool ok = array_holds(b, arr[0], row, rows, b.host) && array_holds(b, arr[1], row, rows, b.host);
  CHECK(cudaMemcpy(b.back.data(), b.linear, bytes, cudaMemcpyDeviceToHost));
  ok = ok && std::memcmp(b.back.data(), b.host, bytes) == 0;
  for (auto& a : arr) CHECK(cudaFreeArray(a));
  if (!ok) {
    std::fprintf(stderr, "texture_stream_bench: %s: read-back differs\n", c.name);
    std::exit(1);
  }
  const stats s1 = summarize(a1), s2 = summarize(a2), sp = summarize(p);
  std::printf("%-30s %10zu %6d %7.2f %7.2f %7.2f %6.3f %6.3f\n", c.name, bytes, c.copies, s1.median,
              s2.median, sp.median, s1.median / sp.median, s2.median / sp.median);
  return {{"mip", c.name},
          {"bytes", bytes},
          {"copies_per_sample", c.copies},
          {"samples", a1.size()},
          {"array_gbps", to_json(s1)},
          {"array_2streams_gbps", to_json(s2)},
          {"plain_h2d_gbps", to_json(sp)},
          {"ratio_median", s1.median / sp.median},
          {"ratio_2streams_median", s2.median / sp.median},
          {"verified", true}};
}

// A whole BC7 4096^2 chain, one upload per level, against one plain copy of the same bytes.
nlohmann::json bench_chain(bench& b) {
  const cudaChannelFormatDesc ch =
      cudaCreateChannelDesc<cudaChannelFormatKindUnsignedBlockCompressed7>();
  const int levels = 13;
  cudaMipmappedArray_t mip = nullptr;
  CHECK(cudaMallocMipmappedArray(&mip, &ch, make_cudaExtent(4096, 4096, 0), levels, 0));
  const std::size_t total = chain_bytes(bc7, 4096, 4096, levels);
  auto upload_chain = [&](int) {
    std::size_t off = 0;
    for (int l = 0; l < levels; ++l) {
      cudaArray_t a = nullptr;
      CHECK(cudaGetMipmappedArrayLevel(&a, mip, l));
      const int s = level_extent(4096, l);
      const std::size_t row = static_cast<std::size_t>((s + 3) / 4) * 16, rows = (s + 3) / 4;
      CHECK(cudaMemcpy2DToArrayAsync(a, 0, 0, b.host + off, row, row, rows, cudaMemcpyHostToDevice,
                                     b.s[0]));
      off += row * rows;
    }
  };
  auto plain = [&](int) {
    CHECK(cudaMemcpyAsync(b.linear, b.host, total, cudaMemcpyHostToDevice, b.s[0]));
  };
  const stats sa = b.gbps(upload_chain, 8, 1, double(total));
  const stats sp = b.gbps(plain, 8, 1, double(total));
  cudaArray_t a0 = nullptr;
  CHECK(cudaGetMipmappedArrayLevel(&a0, mip, 0));
  if (!array_holds(b, a0, std::size_t{1024} * 16, 1024, b.host)) {
    std::fprintf(stderr, "texture_stream_bench: chain level 0 read-back differs\n");
    std::exit(1);
  }
  CHECK(cudaFreeMipmappedArray(mip));
  std::printf("%-30s %10zu %6d %7.2f %7s %7.2f %6.3f\n", "BC7 4096^2 chain, 13 levels", total, 8,
              sa.median, "-", sp.median, sa.median / sp.median);
  return {{"mip", "BC7 4096^2 chain (13 uploads)"},
          {"bytes", total},
          {"copies_per_sample", 8},
          {"samples", 7},
          {"array_gbps", to_json(sa)},
          {"plain_h2d_gbps", to_json(sp)},
          {"ratio_median", sa.median / sp.median},
          {"verified", true}};
}

// The plain pinned copy at the size `vramkit probe` reports (256 MiB), in this process.
nlohmann::json bench_large_plain(bench& b) {
  auto plain = [&](int) {
    CHECK(cudaMemcpyAsync(b.linear, b.host, large_plain_bytes, cudaMemcpyHostToDevice, b.s[0]));
  };
  const stats sp = b.gbps(plain, 2, 1, double(large_plain_bytes));
  CHECK(cudaMemcpy(b.back.data(), b.linear, large_plain_bytes, cudaMemcpyDeviceToHost));
  if (std::memcmp(b.back.data(), b.host, large_plain_bytes) != 0) {
    std::fprintf(stderr, "texture_stream_bench: 256 MiB read-back differs\n");
    std::exit(1);
  }
  std::printf("%-30s %10zu %6d %7s %7s %7.2f\n", "plain 256 MiB (probe's size)", large_plain_bytes,
              2, "-", "-", sp.median);
  return to_json(sp);
}

// The streamer's chain rebuilds (mip_streamer::issue): a 2048^2 BC7 chain whose levels 1..11 are
// resident gains level 0, `n` times into fresh chains. `d2d` and `up` pick the streams of the
// level copies and of the uploads (up alternates when two are given).
struct rebuild_variant {
  const char* name;
  int d2d_stream;
  int upload_streams;  // upload k goes to stream (k % upload_streams == 0 ? 0 : 2)
};

nlohmann::json bench_rebuilds(bench& b) {
  const int size = 2048, levels = full_mip_levels(size, size), n = 24;
  const mip_chain_desc desc{bc7, size, size, levels};
  cuda_mip_storage storage(texture_filter::point);
  mip_chain* old = storage.create_chain(desc, 1);
  for (int l = 1; l < levels; ++l)
    storage.upload_level(old, l, b.host + chain_bytes(bc7, size, size, l), stream_view(b.s[0]));
  std::vector<mip_chain*> fresh;
  fresh.reserve(n);
  for (int k = 0; k < n; ++k) fresh.push_back(storage.create_chain(desc, 0));
  CHECK(cudaDeviceSynchronize());
  const std::size_t level0 = level_bytes(bc7, size, size);
  const rebuild_variant variants[] = {{"one stream (before)", 0, 1},
                                      {"level copies on their own stream", 1, 1},
                                      {"and two upload streams", 1, 2}};
  nlohmann::json out = nlohmann::json::array();
  for (const auto& v : variants) {
    auto rebuild = [&](int k) {
      const cudaStream_t up = b.s[(k % v.upload_streams) == 0 ? 0 : 2];
      const cudaStream_t d2d = v.d2d_stream == 0 ? up : b.s[1];
      storage.copy_shared_levels(fresh[k], old, stream_view(d2d));
      storage.upload_level(fresh[k], 0, b.host + static_cast<std::size_t>(k % 4) * level0,
                           stream_view(up));
    };
    const int streams = v.upload_streams == 2 ? 3 : (v.d2d_stream == 1 ? 2 : 1);
    const stats s = b.gbps(rebuild, n, streams, double(level0));
    CHECK(cudaDeviceSynchronize());
    std::printf("%-30s %10zu %6d %7.2f   (rebuilds of a 2048^2 BC7 chain: %s)\n",
                "streamer rebuild", level0, n, s.median, v.name);
    out.push_back({{"variant", v.name},
                   {"upload_bytes", level0},
                   {"rebuilds", n},
                   {"upload_gbps", to_json(s)}});
  }
  // Every rebuilt chain: level 0 from staging, level 1 copied from the old chain.
  bool ok = true;
  const std::size_t row0 = static_cast<std::size_t>(size / 4) * 16;
  const std::size_t row1 = static_cast<std::size_t>(size / 8) * 16;
  for (int k = 0; k < n; ++k) {
    auto* a0 = static_cast<cudaArray_t>(cuda_mip_storage::level_array(fresh[k], 0));
    auto* a1 = static_cast<cudaArray_t>(cuda_mip_storage::level_array(fresh[k], 1));
    ok =
        ok && array_holds(b, a0, row0, size / 4, b.host + static_cast<std::size_t>(k % 4) * level0);
    ok = ok && array_holds(b, a1, row1, size / 8, b.host + chain_bytes(bc7, size, size, 1));
  }
  for (auto* c : fresh) storage.destroy_chain(c);
  storage.destroy_chain(old);
  if (!ok) {
    std::fprintf(stderr, "texture_stream_bench: a rebuilt chain's read-back differs\n");
    std::exit(1);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) try {
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
  bench b;
  std::printf("%-30s %10s %6s %7s %7s %7s %6s %6s\n", "mip (GB/s medians)", "bytes", "copies",
              "array", "2 strm", "plain", "ratio", "ratio2");
  const level_case cases[] = {{"large 4096^2 (16 MiB)", 4096, 16},
                              {"large 2048^2 (4 MiB)", 2048, 48},
                              {"small 256^2 (64 KiB)", 256, 1000},
                              {"small 64^2 (4 KiB)", 64, 2000},
                              {"small 16^2 (256 B)", 16, 2000}};
  nlohmann::json results = nlohmann::json::array();
  for (const auto& c : cases) results.push_back(bench_level(b, c));
  results.push_back(bench_chain(b));
  nlohmann::json out;
  out["schema_version"] = 2;
  out["convention"] = "bytes copied once, host to device; GB/s decimal";
  out["results"] = results;
  out["plain_256mib_gbps"] = bench_large_plain(b);
  out["streamer_rebuilds"] = bench_rebuilds(b);
  std::ofstream(json_path) << out.dump(2) << "\n";
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "texture_stream_bench: %s\n", e.what());
  return 1;
}
