// The demo needs a GPU: without a CUDA build it says so.
#include "vramkit/core/error.hpp"
#include "vramkit/texture/streaming_demo.hpp"

namespace vramkit::texture {

demo_result run_streaming_demo(const demo_options&) {
  throw error("vramkit texture demo: no CUDA build (configure with -DVRAMKIT_CUDA=ON)");
}

}  // namespace vramkit::texture
