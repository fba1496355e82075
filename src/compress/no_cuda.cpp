// The CUDA launchers of the fp8 block codec in builds without CUDA: they refuse with a
// logic_error (fp8_block_codec.hpp), so a caller can fall back to the host reference.
#include "vramkit/compress/fp8_block_codec.hpp"
#include "vramkit/core/error.hpp"

namespace vramkit::compress {

bool have_cuda_kernels() { return false; }

void encode_blocks_cuda(const void*, element_type, std::size_t, fp8_format, void*, void*, void*,
                        int) {
  throw logic_error("fp8 codec: this vramkit was built without CUDA");
}

void decode_blocks_cuda(const void*, const void*, std::size_t, fp8_format, void*, element_type,
                        void*, int) {
  throw logic_error("fp8 codec: this vramkit was built without CUDA");
}

void decode_swiglu_cuda(const swiglu_args&, std::size_t, fp8_format, element_type, void*, int) {
  throw logic_error("fp8 codec: this vramkit was built without CUDA");
}

}  // namespace vramkit::compress
