// GPU tests of the texture module (label gpu): each BC format uploaded into a CUDA mipmapped array
// and sampled in a kernel at every texel centre of every level, against the CPU reference decoder;
// chains grown on the device; the streamer on CUDA; the demo at a small size with a quarter budget.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <span>
#include <string>

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

// "Bit-exact" allows the float conversion of an 8-bit value a few ulps (the texture unit's
// UNORM-to-float need not round k/255 as the CPU does); one 8-bit step is 3.9e-3.
constexpr float float_ulps = 1e-6f;

// How a format's GPU texels are checked against the CPU decoder.
enum class check {
  exact,    // the reference decoder, bit-exact (RGBA8, BC7: the formats specify their arithmetic)
  nvidia,   // the NVIDIA-mode decoder, bit-exact (BC1, BC2: colour formulas derived on the H200)
  palette,  // BC1-colour channels bit-exact in NVIDIA mode; each BC4-style channel (BC3 alpha,
            // BC4, BC5) nearer to its own palette entry than to any other (docs/texture.md)
};

struct format_case {
  pixel_format format;
  check how;
};

// The exact palette of the BC4-style channel whose 8 bytes start at `ch`: entry k decoded from a
// block whose 16 indices are all k.
std::array<float, 8> bc4_palette(const std::uint8_t* ch, bool snorm) {
  std::array<float, 8> p{};
  for (int k = 0; k < 8; ++k) {
    std::uint8_t b[8] = {ch[0], ch[1]};
    std::uint64_t idx = 0;
    for (int i = 0; i < 16; ++i) idx |= static_cast<std::uint64_t>(k) << (3 * i);
    for (int i = 0; i < 6; ++i) b[2 + i] = static_cast<std::uint8_t>(idx >> (8 * i));
    texel t[16];
    decode_block(pixel_format::of(tf::bc4, false, snorm), b, t);
    p[static_cast<std::size_t>(k)] = t[0].r;
  }
  return p;
}

// Checks one BC4-style channel of a level: the GPU value `gpu` of texel (x, y) must lie nearer to
// the exact value of the index the block stores than to any different palette entry (at least
// within one quantization step). Prints the worst texel per (mode, index) so that the hardware's
// interpolation can be derived from the log. Returns the texels that fail.
int check_bc4_channel(const pixel_format& f, int w, int h, std::span<const std::uint8_t> level,
                      int channel_offset, const std::vector<texel>& gpu, int component,
                      const std::string& what) {
  const bool snorm = f.snorm;
  const float step = snorm ? 1.0f / 127 : 1.0f / 255;
  const int bw = (w + 3) / 4;
  int failures = 0;
  struct worst {
    float err = -1;
    int e0 = 0, e1 = 0;
    float gpu = 0, ref = 0;
  } worst_of[2][8];
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      const std::uint8_t* block =
          &level[(static_cast<std::size_t>(y / 4) * bw + x / 4) * f.block_bytes + channel_offset];
      const auto pal = bc4_palette(block, snorm);
      std::uint64_t idx = 0;
      for (int i = 0; i < 6; ++i) idx |= static_cast<std::uint64_t>(block[2 + i]) << (8 * i);
      const int k = static_cast<int>((idx >> (3 * ((y % 4) * 4 + x % 4))) & 7);
      const texel& g = gpu[static_cast<std::size_t>(y) * w + x];
      const float v = component == 0 ? g.r : component == 1 ? g.g : g.a;
      const float ref = pal[static_cast<std::size_t>(k)];
      float gap = 2.0f;
      for (float q : pal) {
        if (q != ref) gap = std::min(gap, std::fabs(q - ref));
      }
      const float err = std::fabs(v - ref);
      if (err > std::max(step, 0.5f * gap)) ++failures;
      const bool six =
          snorm ? !(static_cast<std::int8_t>(block[0]) > static_cast<std::int8_t>(block[1]))
                : !(block[0] > block[1]);
      auto& wo = worst_of[six ? 1 : 0][k];
      if (err > wo.err) {
        wo = {err, snorm ? static_cast<std::int8_t>(block[0]) : block[0],
              snorm ? static_cast<std::int8_t>(block[1]) : block[1], v, ref};
      }
    }
  }
  for (int m = 0; m < 2; ++m) {
    for (int k = 0; k < 8; ++k) {
      const auto& wo = worst_of[m][k];
      if (wo.err <= 0) continue;
      std::printf("[texture-bc4] %s %s index %d: e0 %d e1 %d gpu %.6f ref %.6f (x255: %.4f %.4f)\n",
                  what.c_str(), m ? "6-value" : "8-value", k, wo.e0, wo.e1, wo.gpu, wo.ref,
                  wo.gpu * 255, wo.ref * 255);
    }
  }
  return failures;
}

TEST(TextureGpu, EveryBcFormatSamplesAsTheCpuDecoder) {
  REQUIRE_GPU();
  const format_case cases[] = {{pixel_format::of(tf::rgba8), check::exact},
                               {pixel_format::of(tf::bc7), check::exact},
                               {pixel_format::of(tf::bc1), check::nvidia},
                               {pixel_format::of(tf::bc2), check::nvidia},
                               {pixel_format::of(tf::bc3), check::palette},
                               {pixel_format::of(tf::bc4), check::palette},
                               {pixel_format::of(tf::bc4, false, true), check::palette},
                               {pixel_format::of(tf::bc5), check::palette},
                               {pixel_format::of(tf::bc5, false, true), check::palette}};
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
    float worst_ref = 0, worst_nv = 0;
    for (int l = 0; l < levels; ++l) {
      const int lw = level_extent(w, l), lh = level_extent(h, l);
      const auto level =
          std::span(data).subspan(chain_bytes(c.format, w, h, l), level_bytes(c.format, lw, lh));
      const auto gpu = sample(chain, l);
      const auto ref = decode_level(c.format, lw, lh, level);
      const auto nv = decode_level(c.format, lw, lh, level, bc_decoder::nvidia);
      worst_ref = std::max(worst_ref, max_error(gpu, ref));
      worst_nv = std::max(worst_nv, max_error(gpu, nv));
      const std::string what = c.format.name() + " level " + std::to_string(l) + " (" +
                               std::to_string(lw) + "x" + std::to_string(lh) + ")";
      switch (c.how) {
        case check::exact:
          EXPECT_LE(max_error(gpu, ref), float_ulps) << what;
          break;
        case check::nvidia:
          EXPECT_LE(max_error(gpu, nv), float_ulps) << what;
          break;
        case check::palette: {
          int failures = 0;
          if (c.format.format == tf::bc3) {
            std::vector<texel> g = gpu, n = nv;
            for (auto& t : g) t.a = 0;
            for (auto& t : n) t.a = 0;
            EXPECT_LE(max_error(g, n), float_ulps) << what << " colour";
            failures += check_bc4_channel(c.format, lw, lh, level, 0, gpu, 3, what + " alpha");
          } else {
            failures += check_bc4_channel(c.format, lw, lh, level, 0, gpu, 0, what + " red");
            if (c.format.format == tf::bc5)
              failures += check_bc4_channel(c.format, lw, lh, level, 8, gpu, 1, what + " green");
          }
          EXPECT_EQ(failures, 0) << what << ": texels nearer another palette entry";
          break;
        }
      }
    }
    std::printf(
        "[texture] %s: max |GPU - CPU| over %d levels: reference %.6f (%.2f/255), NVIDIA mode "
        "%.6f (%.2f/255)\n",
        c.format.name().c_str(), levels, worst_ref, worst_ref * 255, worst_nv, worst_nv * 255);
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
    // Texture i wants level i, or its always-resident tail when that is finer.
    EXPECT_EQ(s.first_level(i), std::min(i, s.policy().tail_level(i)));
    const auto* chain = s.chain(i);
    for (int l = s.first_level(i); l < 10; ++l) {
      const int lw = level_extent(512, l);
      const auto cpu = decode_level(
          f, lw, lw,
          std::span(files[i]).subspan(chain_bytes(f, 512, 512, l), level_bytes(f, lw, lw)),
          bc_decoder::nvidia);
      EXPECT_LE(max_error(sample(chain, l), cpu), float_ulps) << "texture " << i << " level " << l;
    }
  }
  VRAMKIT_CUDA_TRY(cudaStreamDestroy(render));
  std::filesystem::remove_all(dir);
}

TEST(TextureGpu, DemoWithAQuarterBudgetMeetsItsChecks) {
  REQUIRE_GPU();
  demo_options o;
  // 12 x 1024^2 BC1: a quarter of the full set (12 MiB) holds the 12 always-resident tails and
  // room to stream (at 512^2 the tails alone exceed a quarter).
  o.surfaces = 12;
  o.texture_size = 1024;
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
