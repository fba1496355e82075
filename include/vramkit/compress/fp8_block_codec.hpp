// fp8_block_codec: tensors stored as 8-bit floats with one fp32 scale per block of 128 elements
// (activation compression, vramkit.compress_activations). A host reference, and CUDA launchers
// (CUDA builds) that produce the same bits. Stateless; every function is safe to call from any
// thread.
#pragma once

#include <cstddef>
#include <cstdint>

namespace vramkit::compress {

/// The 8-bit formats: e4m3 (OCP "e4m3fn": max 448, no infinity) and e5m2 (max 57344).
enum class fp8_format : std::uint8_t { e4m3 = 0, e5m2 = 1 };

/// Element types of the uncompressed tensor.
enum class element_type : std::uint8_t { float32 = 0, bfloat16 = 1, float16 = 2 };

/// Elements sharing one scale.
inline constexpr std::size_t k_block_elements = 128;

/// Scales of an n-element tensor: ceil(n / 128).
constexpr std::size_t scale_count(std::size_t n) {
  return (n + k_block_elements - 1) / k_block_elements;
}
/// Payload bytes of an n-element tensor (the last block padded to 128 with zeros).
constexpr std::size_t payload_bytes(std::size_t n) { return scale_count(n) * k_block_elements; }

/// Largest finite value of the format.
float fp8_max(fp8_format f);

/// The scale's multiplier: 1/fp8_max rounded once from double to float (what PyTorch computes
/// for `amax * (1.0 / fmax)`), so the host, the kernels and the torch fallback agree bit for bit.
float fp8_inverse_max(fp8_format f);

/// x rounded to the nearest value of the format (ties to even), saturating at +-fp8_max (also
/// for infinities); NaN gives 0x7F.
std::uint8_t encode_fp8(float x, fp8_format f);

/// The value of an fp8 code (exact in float): NaN codes give NaN, e5m2's 0x7C/0xFC +-infinity.
float decode_fp8(std::uint8_t code, fp8_format f);

/// A block's scale from s = amax * fp8_inverse_max: s, or 1 where s is zero or subnormal (its
/// reciprocal could overflow); NaN stays NaN.
float block_scale(float s);

/// Encodes n elements of `src` (type t) into `q` (payload_bytes(n) bytes) and `scales`
/// (scale_count(n) floats): per block, scale = block_scale(amax * fp8_inverse_max) and
/// q = encode_fp8(x * r) with r = 1 / scale rounded once to float (a multiply, not a divide, per
/// element: the kernels stay memory-bound). A block holding NaN or infinity gets a non-finite
/// scale, so it decodes to NaN. Host memory only.
void encode_blocks_host(const void* src, element_type t, std::size_t n, fp8_format f,
                        std::uint8_t* q, float* scales);

/// Writes the n decoded elements (decode_fp8(q) * scale, rounded to nearest-even into type t)
/// to `dst`. Host memory only.
void decode_blocks_host(const std::uint8_t* q, const float* scales, std::size_t n, fp8_format f,
                        void* dst, element_type t);

/// encode_blocks_host's result, computed by a CUDA kernel enqueued on `stream` (a cudaStream_t,
/// nullptr for the legacy default stream). `src` is device memory; `q` (4-byte aligned; 16-byte
/// aligned `src` and 8-byte aligned `q` take the vector path) and
/// `scales` may be device memory or pinned host memory, which the kernel then writes over the
/// link directly (the copy to host fused into the encode). `max_ctas` > 0 bounds the thread
/// blocks, to leave SMs to concurrent compute. Throws cuda_error when a CUDA call fails,
/// invalid_input for pageable host or misaligned pointers, logic_error in builds without CUDA.
void encode_blocks_cuda(const void* src, element_type t, std::size_t n, fp8_format f, void* q,
                        void* scales, void* stream, int max_ctas = 0);

/// decode_blocks_host's result, by a CUDA kernel on `stream`; `q` and `scales` may be device or
/// pinned host memory, `dst` is device memory; `max_ctas` > 0 bounds the thread blocks (a decode
/// beside backward's kernels, on a stream of its own). Throws as encode_blocks_cuda.
void decode_blocks_cuda(const void* q, const void* scales, std::size_t n, fp8_format f, void* dst,
                        element_type t, void* stream, int max_ctas = 0);

/// The tensors a gated MLP (SwiGLU: silu(gate) * up) saves for backward, restored in one pass
/// from the fp8 copies of gate and up (n elements each, one format): g and u decoded as
/// decode_blocks_* gives them, act = silu(g) = g / (1 + exp(-g)) and h = act * u, each computed
/// in float from the values rounded to the element type and rounded to it once (what PyTorch's
/// silu and mul kernels do with the decoded tensors).
struct swiglu_args {
  const void* qg;  ///< gate: payload and scales
  const void* sg;
  const void* qu;  ///< up: payload and scales
  const void* su;
  void* g;  ///< outputs, n elements of the element type each
  void* u;
  void* act;
  void* h;
};

/// decode_swiglu_cuda's result in host memory.
void decode_swiglu_host(const swiglu_args& a, std::size_t n, fp8_format f, element_type t);

/// The same by one CUDA kernel on `stream` (the inputs in device or pinned host memory, the
/// outputs in device memory); max_ctas as decode_blocks_cuda's. Throws as encode_blocks_cuda.
void decode_swiglu_cuda(const swiglu_args& a, std::size_t n, fp8_format f, element_type t,
                        void* stream, int max_ctas = 0);

/// True in builds with the CUDA kernels.
bool have_cuda_kernels();

}  // namespace vramkit::compress
