// Data files compiled into the library at build time (data/plan/): model presets and the GPU
// catalogue. Generated definitions live in the build tree (embed_data.cmake). Immutable.
#pragma once

#include <cstddef>

namespace vramkit::plan::detail {

struct embedded_file {
  const char* name;  ///< file stem, e.g. "gpt2" or "gpus"
  const char* text;  ///< file contents
};

extern const embedded_file preset_files[];
extern const std::size_t preset_file_count;
extern const char* const gpu_catalogue_text;

}  // namespace vramkit::plan::detail
