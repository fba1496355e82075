// GPU tests of the texture module (label gpu): each BC format uploaded into a CUDA mipmapped array
// and sampled in a kernel at every texel centre of every level, against the CPU reference decoder;
// chains grown on the device; the streamer on CUDA; the demo at a small size with a quarter budget.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>

#include "common/cuda_check.hpp"
#include "texture/cuda/texture_kernels.hpp"
#include "vramkit/core/cuda_device_api.hpp"
#include "vramkit/texture/block_codec.hpp"
#include "vramkit/texture/cuda_mip_storage.hpp"
#include "vramkit/texture/mip_streamer.hpp"
#include "vramkit/texture/streaming_demo.hpp"

namespace vramkit::texture {
namespace {

using tf = texture_format;

bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}
// gpu-check sets VRAMKIT_REQUIRE_GPU=1: there a missing device is a failure, not a skip.
#define REQUIRE_GPU()                                                     \
  do {                                                                    \
    if (!have_gpu()) {                                                    \
      if (std::getenv("VRAMKIT_REQUIRE_GPU")) FAIL() << "no CUDA device"; \
      GTEST_SKIP() << "no CUDA device";                                   \
    }                                                                     \
  } while (0)

std::vector<std::uint8_t> random_chain(const pixel_format& f, int w, int h, int levels,
                                       std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::uint8_t> d(chain_bytes(f, w, h, levels));
  for (auto& b : d) b = static_cast<std::uint8_t>(rng());
  if (f.format == tf::bc7) {
    // Every mode, and the reserved one, appears.
    for (std::size_t i = 0; i < d.size(); i += 16) {
      const int mode = static_cast<int>((i / 16) % 9);
      d[i] = mode == 8 ? 0 : static_cast<std::uint8_t>((d[i] & ~((2u << mode) - 1)) | (1u << mode));
    }
  }
  return d;
}

struct pinned {
  void* p = nullptr;
  explicit pinned(std::size_t n) {
    VRAMKIT_CUDA_TRY(cudaMallocHost(&p, std::max<std::size_t>(n, 1)));
  }
  ~pinned() { cudaFreeHost(p); }
};

// Samples level `level` of `chain` (relative LOD level - first) at texel centres.
std::vector<texel> sample(const mip_chain* chain, int level) {
  const int w = level_extent(chain->desc.width, level);
  const int h = level_extent(chain->desc.height, level);
  float* d = nullptr;
  VRAMKIT_CUDA_TRY(cudaMalloc(&d, static_cast<std::size_t>(w) * h * 16));
  detail::launch_sample_level(cuda_mip_storage::texture_object(chain), w, h,
                              static_cast<float>(level - chain->first_level), d, nullptr);
  std::vector<texel> out(static_cast<std::size_t>(w) * h);
  VRAMKIT_CUDA_TRY(cudaMemcpy(out.data(), d, out.size() * 16, cudaMemcpyDeviceToHost));
  VRAMKIT_CUDA_TRY(cudaFree(d));
  return out;
}

float max_error(const std::vector<texel>& a, const std::vector<texel>& b) {
  float e = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    e = std::max({e, std::fabs(a[i].r - b[i].r), std::fabs(a[i].g - b[i].g),
                  std::fabs(a[i].b - b[i].b), std::fabs(a[i].a - b[i].a)});
  }
  return e;
}

struct format_case {
  pixel_format format;
  float tolerance;  // in [0, 1] units
};

TEST(TextureGpu, EveryBcFormatSamplesAsTheCpuDecoder) {
  REQUIRE_GPU();
  const format_case cases[] = {{pixel_format::of(tf::rgba8), 0.5f / 255},
                               {pixel_format::of(tf::bc7), 0.5f / 255},
                               {pixel_format::of(tf::bc1), 3.0f / 255},
                               {pixel_format::of(tf::bc2), 3.0f / 255},
                               {pixel_format::of(tf::bc3), 3.0f / 255},
                               {pixel_format::of(tf::bc4), 2.0f / 255},
                               {pixel_format::of(tf::bc4, false, true), 2.0f / 127},
                               {pixel_format::of(tf::bc5), 2.0f / 255},
                               {pixel_format::of(tf::bc5, false, true), 2.0f / 127}};
  cuda_mip_storage storage(texture_filter::point);
  const int w = 72, h = 40, levels = full_mip_levels(w, h);
  for (const auto& c : cases) {
    const auto data = random_chain(c.format, w, h, levels, 11);
    pinned host(data.size());
    std::memcpy(host.p, data.data(), data.size());
    const mip_chain_desc desc{c.format, w, h, levels};
    mip_chain* chain = storage.create_chain(desc, 0);
    for (int l = 0; l < levels; ++l) {
      storage.upload_level(chain, l,
                           static_cast<std::uint8_t*>(host.p) + chain_bytes(c.format, w, h, l), {});
    }
    VRAMKIT_CUDA_TRY(cudaDeviceSynchronize());
    float worst = 0;
    for (int l = 0; l < levels; ++l) {
      const int lw = level_extent(w, l), lh = level_extent(h, l);
      const auto cpu = decode_level(
          c.format, lw, lh,
          std::span(data).subspan(chain_bytes(c.format, w, h, l), level_bytes(c.format, lw, lh)));
      const float e = max_error(sample(chain, l), cpu);
      worst = std::max(worst, e);
      EXPECT_LE(e, c.tolerance) << c.format.name() << " level " << l << " (" << lw << "x" << lh
                                << ")";
    }
    std::printf("[texture] %s: max |GPU - CPU decoder| over %d levels = %.6f (%.2f/255)\n",
                c.format.name().c_str(), levels, worst, worst * 255);
    storage.destroy_chain(chain);
  }
}

TEST(TextureGpu, GrowingAChainKeepsTheSharedLevelsBitExact) {
  REQUIRE_GPU();
  const auto f = pixel_format::of(tf::bc7);
  const int w = 256, h = 128, levels = full_mip_levels(w, h);
  const auto data = random_chain(f, w, h, levels, 5);
  pinned host(data.size());
  std::memcpy(host.p, data.data(), data.size());
  auto* src = static_cast<std::uint8_t*>(host.p);
  cuda_mip_storage storage(texture_filter::point);
  const mip_chain_desc desc{f, w, h, levels};
  mip_chain* coarse = storage.create_chain(desc, 2);
  for (int l = 2; l < levels; ++l)
    storage.upload_level(coarse, l, src + chain_bytes(f, w, h, l), {});
  mip_chain* fine = storage.create_chain(desc, 0);
  storage.copy_shared_levels(fine, coarse, {});
  storage.upload_level(fine, 0, src, {});
  storage.upload_level(fine, 1, src + chain_bytes(f, w, h, 1), {});
  VRAMKIT_CUDA_TRY(cudaDeviceSynchronize());
  for (int l = 0; l < levels; ++l) {
    const int lw = level_extent(w, l), lh = level_extent(h, l);
    const auto cpu = decode_level(
        f, lw, lh, std::span(data).subspan(chain_bytes(f, w, h, l), level_bytes(f, lw, lh)));
    EXPECT_LE(max_error(sample(fine, l), cpu), 0.5f / 255) << "level " << l;
  }
  storage.destroy_chain(coarse);
  storage.destroy_chain(fine);
}

TEST(TextureGpu, StreamerOnCudaEndsWithTheFilesLevels) {
  REQUIRE_GPU();
  auto api = cuda_device_api();
  ASSERT_TRUE(api);
  const auto dir = std::filesystem::temp_directory_path() / "vramkit-texture-gpu-streamer";
  std::filesystem::create_directories(dir);
  const auto f = pixel_format::of(tf::bc1);
  std::vector<std::vector<std::uint8_t>> files;
  for (int i = 0; i < 3; ++i) {
    texture_image img;
    img.info.format = f;
    img.info.width = img.info.height = 512;
    img.info.mip_levels = 10;
    img.data = random_chain(f, 512, 512, 10, 40 + i);
    img.info.data_bytes = img.data.size();
    write_dds(dir / ("s" + std::to_string(i) + ".dds"), img);
    files.push_back(img.data);
  }
  cuda_mip_storage storage(texture_filter::point);
  mip_streamer_options o;
  o.policy.budget_bytes = 8 << 20;
  mip_streamer s(*api, storage, o);
  for (int i = 0; i < 3; ++i) s.add_texture(dir / ("s" + std::to_string(i) + ".dds"));
  s.prepare_staging();
  cudaStream_t render = nullptr;
  VRAMKIT_CUDA_TRY(cudaStreamCreate(&render));
  for (int frame = 0; frame < 200; ++frame) {
    s.begin_frame();
    for (int i = 0; i < 3; ++i) s.request(i, static_cast<float>(i), 1000.0 * (3 - i));
    s.update(stream_view(render));
    VRAMKIT_CUDA_TRY(cudaStreamSynchronize(render));
  }
  s.drain(stream_view(render));
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(s.first_level(i), i);
    const auto* chain = s.chain(i);
    for (int l = s.first_level(i); l < 10; ++l) {
      const int lw = level_extent(512, l);
      const auto cpu = decode_level(
          f, lw, lw,
          std::span(files[i]).subspan(chain_bytes(f, 512, 512, l), level_bytes(f, lw, lw)));
      EXPECT_LE(max_error(sample(chain, l), cpu), 3.0f / 255) << "texture " << i << " level " << l;
    }
  }
  VRAMKIT_CUDA_TRY(cudaStreamDestroy(render));
  std::filesystem::remove_all(dir);
}

TEST(TextureGpu, DemoWithAQuarterBudgetMeetsItsChecks) {
  REQUIRE_GPU();
  demo_options o;
  o.surfaces = 12;
  o.texture_size = 512;
  o.frames = 120;
  o.still_frames = 40;
  o.width = 480;
  o.height = 270;
  o.out_dir = std::filesystem::temp_directory_path() / "vramkit-texture-demo-test";
  const auto r = run_streaming_demo(o);
  std::printf("[texture] demo summary: %s\n", r.summary.dump().c_str());
  for (const auto& [k, v] : r.summary["checks"].items()) EXPECT_TRUE(v.get<bool>()) << k;
  EXPECT_TRUE(r.passed);
  std::filesystem::remove_all(o.out_dir);
}

}  // namespace
}  // namespace vramkit::texture
