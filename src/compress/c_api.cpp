// C API of the fp8 block codec (include/vramkit/compress/c_api.h): argument checks, the calls,
// and errors turned into return codes with a per-thread message.
#include "vramkit/compress/c_api.h"

#include <cstring>
#include <exception>
#include <string>

#include "vramkit/compress/fp8_block_codec.hpp"

#define VRAMKIT_C_EXPORT __attribute__((visibility("default")))

namespace {

thread_local std::string g_last_error;

int fail(const std::string& why) {
  g_last_error = why;
  return -1;
}

bool parse(int element_type, int format, vramkit::compress::element_type& t,
           vramkit::compress::fp8_format& f) {
  if (element_type < 0 || element_type > 2) {
    fail("fp8 codec: element type " + std::to_string(element_type) +
         " is not 0 (float32), 1 (bfloat16) or 2 (float16)");
    return false;
  }
  if (format < 0 || format > 1) {
    fail("fp8 codec: format " + std::to_string(format) + " is not 0 (e4m3) or 1 (e5m2)");
    return false;
  }
  t = static_cast<vramkit::compress::element_type>(element_type);
  f = static_cast<vramkit::compress::fp8_format>(format);
  return true;
}

}  // namespace

extern "C" {

VRAMKIT_C_EXPORT int vramkit_fp8_encode(const void* src, int element_type, uint64_t n, int format,
                                        void* q, void* scales, int on_gpu, void* stream,
                                        int max_ctas) {
  vramkit::compress::element_type t{};
  vramkit::compress::fp8_format f{};
  if (!parse(element_type, format, t, f)) return -1;
  if (n > 0 && (src == nullptr || q == nullptr || scales == nullptr))
    return fail("fp8 codec: a null pointer for a non-empty tensor");
  try {
    if (on_gpu != 0)
      vramkit::compress::encode_blocks_cuda(src, t, n, f, q, scales, stream, max_ctas);
    else
      vramkit::compress::encode_blocks_host(src, t, n, f, static_cast<std::uint8_t*>(q),
                                            static_cast<float*>(scales));
  } catch (const std::exception& e) {
    return fail(e.what());
  }
  return 0;
}

VRAMKIT_C_EXPORT int vramkit_fp8_decode(const void* q, const void* scales, uint64_t n, int format,
                                        void* dst, int element_type, int on_gpu, void* stream,
                                        int max_ctas) {
  vramkit::compress::element_type t{};
  vramkit::compress::fp8_format f{};
  if (!parse(element_type, format, t, f)) return -1;
  if (n > 0 && (q == nullptr || scales == nullptr || dst == nullptr))
    return fail("fp8 codec: a null pointer for a non-empty tensor");
  try {
    if (on_gpu != 0)
      vramkit::compress::decode_blocks_cuda(q, scales, n, f, dst, t, stream, max_ctas);
    else
      vramkit::compress::decode_blocks_host(static_cast<const std::uint8_t*>(q),
                                            static_cast<const float*>(scales), n, f, dst, t);
  } catch (const std::exception& e) {
    return fail(e.what());
  }
  return 0;
}

VRAMKIT_C_EXPORT int vramkit_fp8_decode_swiglu(const void* const* in, uint64_t n, int format,
                                               void* const* out, int element_type, int on_gpu,
                                               void* stream, int max_ctas) {
  vramkit::compress::element_type t{};
  vramkit::compress::fp8_format f{};
  if (!parse(element_type, format, t, f)) return -1;
  if (in == nullptr || out == nullptr) return fail("fp8 codec: null pointer arrays");
  const vramkit::compress::swiglu_args a{in[0],  in[1],  in[2],  in[3],
                                         out[0], out[1], out[2], out[3]};
  if (n > 0 && (a.qg == nullptr || a.sg == nullptr || a.qu == nullptr || a.su == nullptr ||
                a.g == nullptr || a.u == nullptr || a.act == nullptr || a.h == nullptr))
    return fail("fp8 codec: a null pointer for a non-empty tensor");
  try {
    if (on_gpu != 0)
      vramkit::compress::decode_swiglu_cuda(a, n, f, t, stream, max_ctas);
    else
      vramkit::compress::decode_swiglu_host(a, n, f, t);
  } catch (const std::exception& e) {
    return fail(e.what());
  }
  return 0;
}

VRAMKIT_C_EXPORT int vramkit_fp8_has_cuda(void) {
  return vramkit::compress::have_cuda_kernels() ? 1 : 0;
}

VRAMKIT_C_EXPORT size_t vramkit_fp8_last_error(char* buf, size_t len) {
  if (buf != nullptr && len > 0) {
    const size_t k = g_last_error.size() < len - 1 ? g_last_error.size() : len - 1;
    std::memcpy(buf, g_last_error.data(), k);
    buf[k] = '\0';
  }
  return g_last_error.size();
}

}  // extern "C"
