/* C API of the fp8 block codec (libvramkit_compress.so), what the Python package loads with
 * ctypes. Every function returns 0 on success and -1 on failure, with the reason in
 * vramkit_fp8_last_error (per thread). Element types: 0 float32, 1 bfloat16, 2 float16; formats:
 * 0 e4m3, 1 e5m2. The format is vramkit/compress/fp8_block_codec.hpp's. */
#ifndef VRAMKIT_COMPRESS_C_API_H
#define VRAMKIT_COMPRESS_C_API_H

#include <stddef.h> /* NOLINT(modernize-deprecated-headers): a C header */
#include <stdint.h> /* NOLINT(modernize-deprecated-headers): a C header */

#ifdef __cplusplus
extern "C" {
#endif

/* Encodes n elements of src into q (ceil(n/128)*128 bytes, 4-byte aligned) and scales
 * (ceil(n/128) floats). on_gpu = 0: host memory, computed now; on_gpu = 1: a kernel enqueued on
 * `stream` (a cudaStream_t), src in device memory, q and scales in device or pinned host memory;
 * max_ctas > 0 bounds its thread blocks. */
int vramkit_fp8_encode(const void* src, int element_type, uint64_t n, int format, void* q,
                       void* scales, int on_gpu, void* stream, int max_ctas);

/* Decodes n elements into dst (element_type); on_gpu as above (dst in device memory),
 * max_ctas > 0 bounds the kernel's thread blocks. */
int vramkit_fp8_decode(const void* q, const void* scales, uint64_t n, int format, void* dst,
                       int element_type, int on_gpu, void* stream, int max_ctas);

/* A gated MLP's saved tensors from the fp8 copies of gate and up (n elements each):
 * in = {gate payload, gate scales, up payload, up scales}, out = {gate, up, silu(gate),
 * silu(gate) * up} (element_type each); see decode_swiglu_cuda in fp8_block_codec.hpp. on_gpu
 * and max_ctas as vramkit_fp8_decode's. */
int vramkit_fp8_decode_swiglu(const void* const* in, uint64_t n, int format, void* const* out,
                              int element_type, int on_gpu, void* stream, int max_ctas);

/* 1 when the library has the CUDA kernels, else 0. */
int vramkit_fp8_has_cuda(void);

/* Copies the calling thread's last error message into buf (NUL-terminated, truncated to len);
 * returns its full length. */
size_t vramkit_fp8_last_error(char* buf, size_t len);

#ifdef __cplusplus
}
#endif

#endif /* VRAMKIT_COMPRESS_C_API_H */
