// streaming_demo: `vramkit texture demo`. A camera flies over a grid of textured quads (BC1
// textures written to DDS files, together at least 4x the budget); a CUDA kernel ray-casts each
// frame, sampling every quad at the finest resident level (the streamer's min-LOD clamp) and
// recording per quad the LOD it needed and the pixels it covered, which feed the mip_streamer.
// The same camera path is rendered with an unlimited budget as the reference: the result has the
// per-frame CSV, PSNR against the reference, frame times and the checks the run must pass.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>

#include <nlohmann/json.hpp>

namespace vramkit::texture {

struct demo_options {
  int surfaces = 24;        ///< textured quads in the scene
  int texture_size = 1024;  ///< side of each texture (power of two)
  int frames = 150;  ///< frames rendered in all, the last `still_frames` with the camera stopped
  int still_frames = 30;
  int width = 1280;
  int height = 720;
  int samples = 4;                            ///< samples per pixel: 1, 4, 9 or 16
  std::optional<std::uint64_t> budget_bytes;  ///< default: a quarter of the full-resolution set
  std::filesystem::path out_dir = "texture-demo";
  int png_every = 50;  ///< write frame k as PNG when k % png_every == 0, and the last
};

struct demo_result {
  nlohmann::json summary;  ///< figures and checks (docs/texture.md)
  bool passed = false;     ///< every check met
};

/// Runs the demo on CUDA device 0. Throws vramkit::error when there is no CUDA build or device.
demo_result run_streaming_demo(const demo_options& options);

}  // namespace vramkit::texture
