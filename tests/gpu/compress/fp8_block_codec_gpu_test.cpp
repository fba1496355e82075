// The fp8 block codec's CUDA kernels produce the host reference's bits (payload and scales) for
// float32, bfloat16 and float16 inputs of many sizes and alignments, writing into device memory
// and straight into pinned host memory, and decode back to the reference's values; pageable
// destinations are refused. Skips without a GPU unless VRAMKIT_REQUIRE_GPU=1.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "vramkit/compress/fp8_block_codec.hpp"
#include "vramkit/core/error.hpp"

namespace vc = vramkit::compress;

namespace {

#define CHECK_CUDA(x) ASSERT_EQ((x), cudaSuccess) << #x << ": " << cudaGetErrorString(x)

class Fp8Gpu : public ::testing::Test {  // NOLINT(readability-identifier-naming): gtest fixture
 protected:
  void SetUp() override {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
      (void)cudaGetLastError();
      const char* require = std::getenv("VRAMKIT_REQUIRE_GPU");
      if (require != nullptr && std::string(require) == "1")
        FAIL() << "VRAMKIT_REQUIRE_GPU=1 but no GPU";
      GTEST_SKIP() << "no GPU";
    }
    ASSERT_EQ(cudaStreamCreate(&stream_), cudaSuccess);
  }
  void TearDown() override {
    if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
  }
  cudaStream_t stream_ = nullptr;
};

std::size_t element_size(vc::element_type t) { return t == vc::element_type::float32 ? 4 : 2; }

/// n random elements of type t (raw bytes), with magnitudes over six decades and a few zeros.
std::vector<unsigned char> random_input(vc::element_type t, std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0F, 1.0F);
  std::uniform_real_distribution<float> decades(-3.0F, 3.0F);
  std::vector<float> f(n);
  for (std::size_t i = 0; i < n; ++i)
    f[i] = (i % 97 == 0) ? 0.0F : normal(rng) * std::pow(10.0F, decades(rng));
  if (t == vc::element_type::float32) {
    std::vector<unsigned char> out(n * 4);
    std::memcpy(out.data(), f.data(), out.size());
    return out;
  }
  // Half types: encode through the reference's own decode path (float32 -> half via decode of
  // a float32 "payload" is not available), so round with the host codec's store: decode a
  // trivial block whose scale is the value itself.
  std::vector<unsigned char> out(n * 2);
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint8_t one = 0x38;  // 1.0 in e4m3
    float s = f[i];
    vc::decode_blocks_host(&one, &s, 1, vc::fp8_format::e4m3, out.data() + 2 * i, t);
  }
  return out;
}

}  // namespace

TEST_F(Fp8Gpu, KernelsMatchTheHostReferenceIntoDeviceAndPinnedMemory) {
  for (auto t :
       {vc::element_type::float32, vc::element_type::bfloat16, vc::element_type::float16}) {
    for (auto f : {vc::fp8_format::e4m3, vc::fp8_format::e5m2}) {
      for (std::size_t n : {1UL, 100UL, 128UL, 4095UL, 4096UL, 4097UL, 333333UL}) {
        // 1 element off, and the payload 4 bytes off its 8-byte alignment: the scalar path.
        for (std::size_t misalign : {0UL, 1UL}) {
          const std::size_t es = element_size(t);
          const auto host_in = random_input(t, n, static_cast<unsigned>(n + misalign));
          const std::size_t nq = vc::payload_bytes(n), ns = vc::scale_count(n);
          std::vector<std::uint8_t> ref_q(nq);
          std::vector<float> ref_s(ns);
          vc::encode_blocks_host(host_in.data(), t, n, f, ref_q.data(), ref_s.data());

          unsigned char* d_in = nullptr;
          void *d_q = nullptr, *d_s = nullptr, *d_out = nullptr, *h_q = nullptr, *h_s = nullptr;
          CHECK_CUDA(cudaMalloc(&d_in, (n + 1) * es));
          const std::size_t q_off = 4 * misalign;
          CHECK_CUDA(cudaMalloc(&d_q, nq + q_off));
          CHECK_CUDA(cudaMalloc(&d_s, ns * 4));
          CHECK_CUDA(cudaMalloc(&d_out, (n + 1) * es));
          CHECK_CUDA(cudaHostAlloc(&h_q, nq + q_off, cudaHostAllocDefault));
          CHECK_CUDA(cudaHostAlloc(&h_s, ns * 4, cudaHostAllocDefault));
          unsigned char* src = d_in + misalign * es;
          void* q_dev = static_cast<unsigned char*>(d_q) + q_off;
          void* q_host = static_cast<unsigned char*>(h_q) + q_off;
          CHECK_CUDA(cudaMemcpy(src, host_in.data(), n * es, cudaMemcpyHostToDevice));
          vc::encode_blocks_cuda(src, t, n, f, q_dev, d_s, stream_);
          vc::encode_blocks_cuda(src, t, n, f, q_host, h_s, stream_,
                                 4);  // fused into pinned memory
          CHECK_CUDA(cudaStreamSynchronize(stream_));
          std::vector<std::uint8_t> got_q(nq);
          std::vector<float> got_s(ns);
          CHECK_CUDA(cudaMemcpy(got_q.data(), q_dev, nq, cudaMemcpyDeviceToHost));
          CHECK_CUDA(cudaMemcpy(got_s.data(), d_s, ns * 4, cudaMemcpyDeviceToHost));
          ASSERT_EQ(got_q, ref_q) << "n " << n << " type " << int(t) << " fmt " << int(f);
          ASSERT_EQ(got_s, ref_s);
          ASSERT_EQ(std::memcmp(q_host, ref_q.data(), nq), 0) << "pinned payload, n " << n;
          ASSERT_EQ(std::memcmp(h_s, ref_s.data(), ns * 4), 0) << "pinned scales, n " << n;

          // Decode from device memory and from the pinned copy (read over the link).
          std::vector<unsigned char> ref_out(n * es);
          vc::decode_blocks_host(ref_q.data(), ref_s.data(), n, f, ref_out.data(), t);
          unsigned char* dst = static_cast<unsigned char*>(d_out) + misalign * es;
          for (int from_host = 0; from_host < 2; ++from_host) {
            CHECK_CUDA(cudaMemset(d_out, 0, (n + 1) * es));
            vc::decode_blocks_cuda(from_host != 0 ? q_host : q_dev, from_host != 0 ? h_s : d_s, n,
                                   f, dst, t, stream_);
            CHECK_CUDA(cudaStreamSynchronize(stream_));
            std::vector<unsigned char> got(n * es);
            CHECK_CUDA(cudaMemcpy(got.data(), dst, n * es, cudaMemcpyDeviceToHost));
            ASSERT_EQ(got, ref_out) << "decode n " << n << " from host " << from_host;
          }
          CHECK_CUDA(cudaFree(d_in));
          CHECK_CUDA(cudaFree(d_q));
          CHECK_CUDA(cudaFree(d_s));
          CHECK_CUDA(cudaFree(d_out));
          CHECK_CUDA(cudaFreeHost(h_q));
          CHECK_CUDA(cudaFreeHost(h_s));
        }
      }
    }
  }
}

TEST_F(Fp8Gpu, ZeroTinyAndNonFiniteBlocksAsTheHostReference) {
  // Block 0: zeros (scale 1); block 1: magnitudes whose s is subnormal (scale 1, codes 0); block
  // 2: a NaN; block 3: an infinity (both decode to NaN); block 4: ordinary values.
  std::vector<float> x(std::size_t{5} * 128, 0.0F);
  for (int i = 128; i < 256; ++i) x[i] = 1e-38F * static_cast<float>(i % 7);
  x[300] = std::nanf("");
  x[301] = 1.0F;
  x[400] = std::numeric_limits<float>::infinity();
  for (int i = 512; i < 640; ++i) x[i] = 0.01F * static_cast<float>(i - 570);
  const std::size_t n = x.size();
  std::vector<std::uint8_t> ref_q(n);
  std::vector<float> ref_s(5);
  vc::encode_blocks_host(x.data(), vc::element_type::float32, n, vc::fp8_format::e4m3, ref_q.data(),
                         ref_s.data());
  float *d_x = nullptr, *d_s = nullptr, *d_out = nullptr;
  void* d_q = nullptr;
  CHECK_CUDA(cudaMalloc(&d_x, n * 4));
  CHECK_CUDA(cudaMalloc(&d_q, n));
  CHECK_CUDA(cudaMalloc(&d_s, std::size_t{5} * 4));
  CHECK_CUDA(cudaMalloc(&d_out, n * 4));
  CHECK_CUDA(cudaMemcpy(d_x, x.data(), n * 4, cudaMemcpyHostToDevice));
  vc::encode_blocks_cuda(d_x, vc::element_type::float32, n, vc::fp8_format::e4m3, d_q, d_s,
                         stream_);
  vc::decode_blocks_cuda(d_q, d_s, n, vc::fp8_format::e4m3, d_out, vc::element_type::float32,
                         stream_);
  CHECK_CUDA(cudaStreamSynchronize(stream_));
  std::vector<std::uint8_t> q(n);
  std::vector<float> s(5), back(n);
  CHECK_CUDA(cudaMemcpy(q.data(), d_q, n, cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaMemcpy(s.data(), d_s, std::size_t{5} * 4, cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaMemcpy(back.data(), d_out, n * 4, cudaMemcpyDeviceToHost));
  EXPECT_EQ(s[0], 1.0F);
  EXPECT_EQ(s[1], 1.0F);
  EXPECT_TRUE(std::isnan(s[2]) && std::isnan(ref_s[2]));
  EXPECT_TRUE(std::isinf(s[3]) && std::isinf(ref_s[3]));
  EXPECT_EQ(s[4], ref_s[4]);
  for (std::size_t i = 0; i < 256; ++i) EXPECT_EQ(q[i], ref_q[i]) << i;
  for (std::size_t i = 512; i < n; ++i) EXPECT_EQ(q[i], ref_q[i]) << i;
  for (std::size_t i = 256; i < 512; ++i) EXPECT_TRUE(std::isnan(back[i])) << i;
  for (std::size_t i = 0; i < 256; ++i) EXPECT_EQ(back[i], 0.0F) << i;
  CHECK_CUDA(cudaFree(d_x));
  CHECK_CUDA(cudaFree(d_q));
  CHECK_CUDA(cudaFree(d_s));
  CHECK_CUDA(cudaFree(d_out));
}

TEST_F(Fp8Gpu, PageableDestinationsAndMisalignedPayloadsAreRefused) {
  float* d_in = nullptr;
  ASSERT_EQ(cudaMalloc(&d_in, std::size_t{1024} * 4), cudaSuccess);
  ASSERT_EQ(cudaMemset(d_in, 0, std::size_t{1024} * 4), cudaSuccess);
  std::vector<std::uint8_t> pageable_q(1024);
  std::vector<float> pageable_s(8);
  EXPECT_THROW(vc::encode_blocks_cuda(d_in, vc::element_type::float32, 1024, vc::fp8_format::e4m3,
                                      pageable_q.data(), pageable_s.data(), stream_),
               vramkit::invalid_input);
  void* d_q = nullptr;
  ASSERT_EQ(cudaMalloc(&d_q, 2048), cudaSuccess);
  EXPECT_THROW(vc::encode_blocks_cuda(d_in, vc::element_type::float32, 1024, vc::fp8_format::e4m3,
                                      static_cast<char*>(d_q) + 1, pageable_s.data(), stream_),
               vramkit::invalid_input);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // nothing left behind
  EXPECT_TRUE(vc::have_cuda_kernels());
  ASSERT_EQ(cudaFree(d_q), cudaSuccess);
  ASSERT_EQ(cudaFree(d_in), cudaSuccess);
}

namespace {

/// Element i of raw bytes of type t, widened.
float widen(const std::vector<unsigned char>& raw, vc::element_type t, std::size_t i) {
  if (t == vc::element_type::float32) {
    float f = 0;
    std::memcpy(&f, raw.data() + 4 * i, 4);
    return f;
  }
  std::uint16_t h = 0;
  std::memcpy(&h, raw.data() + 2 * i, 2);
  if (t == vc::element_type::bfloat16) {
    const std::uint32_t w = static_cast<std::uint32_t>(h) << 16;
    float f = 0;
    std::memcpy(&f, &w, 4);
    return f;
  }
  // float16: decode the half through the codec's own rounding-free path (its value is exact in
  // float): sign, exponent, mantissa.
  const int e = (h >> 10) & 0x1F;
  const int m = h & 0x3FF;
  const float mag = e == 0 ? std::ldexp(static_cast<float>(m), -24)
                           : std::ldexp(static_cast<float>(m | 0x400), e - 25);
  return (h & 0x8000) != 0 ? -mag : mag;
}

}  // namespace

TEST_F(Fp8Gpu, SwigluRestoreAndBoundedDecodeAsTheHostReference) {
  // gate and up decoded exactly as the host reference; silu(gate) and its product with up
  // within one and two units of the element type of the reference's (the device's expf against
  // the host's); a decode with its thread blocks bounded gives the same bits.
  const vc::element_type types[] = {vc::element_type::float32, vc::element_type::bfloat16,
                                    vc::element_type::float16};
  for (auto t : types) {
    const std::size_t es = element_size(t);
    // One unit of the type for silu(gate) (float32: a few of float's, the device's expf
    // against the host's), two for the product (its factor may be one unit off already).
    const double unit = t == vc::element_type::float32    ? 0x1p-20
                        : t == vc::element_type::bfloat16 ? 0x1p-7
                                                          : 0x1p-10;
    for (std::size_t n :
         {std::size_t{1}, std::size_t{127}, std::size_t{1000}, std::size_t{70001}}) {
      const auto g_in = random_input(t, n, 11);
      const auto u_in = random_input(t, n, 12);
      const std::size_t nq = vc::payload_bytes(n), ns = vc::scale_count(n);
      std::vector<std::uint8_t> qg(nq), qu(nq);
      std::vector<float> sg(ns), su(ns);
      vc::encode_blocks_host(g_in.data(), t, n, vc::fp8_format::e4m3, qg.data(), sg.data());
      vc::encode_blocks_host(u_in.data(), t, n, vc::fp8_format::e4m3, qu.data(), su.data());
      std::vector<std::vector<unsigned char>> ref(4, std::vector<unsigned char>(n * es));
      vc::decode_swiglu_host({qg.data(), sg.data(), qu.data(), su.data(), ref[0].data(),
                              ref[1].data(), ref[2].data(), ref[3].data()},
                             n, vc::fp8_format::e4m3, t);
      void* d_in[4] = {};
      const std::size_t in_bytes[4] = {nq, ns * 4, nq, ns * 4};
      const void* in_host[4] = {qg.data(), sg.data(), qu.data(), su.data()};
      for (int k = 0; k < 4; ++k) {
        CHECK_CUDA(cudaMalloc(&d_in[k], in_bytes[k]));
        CHECK_CUDA(cudaMemcpy(d_in[k], in_host[k], in_bytes[k], cudaMemcpyHostToDevice));
      }
      void* d_out[4] = {};
      for (auto& p : d_out) CHECK_CUDA(cudaMalloc(&p, n * es));
      vc::decode_swiglu_cuda(
          {d_in[0], d_in[1], d_in[2], d_in[3], d_out[0], d_out[1], d_out[2], d_out[3]}, n,
          vc::fp8_format::e4m3, t, stream_, 3);
      CHECK_CUDA(cudaStreamSynchronize(stream_));
      for (int k = 0; k < 4; ++k) {
        std::vector<unsigned char> got(n * es);
        CHECK_CUDA(cudaMemcpy(got.data(), d_out[k], n * es, cudaMemcpyDeviceToHost));
        if (k < 2) {
          ASSERT_EQ(got, ref[k]) << "output " << k << " n " << n << " type " << int(t);
          continue;
        }
        for (std::size_t i = 0; i < n; ++i) {
          const double want = widen(ref[k], t, i);
          ASSERT_LE(std::fabs(widen(got, t, i) - want), (k - 1) * unit * std::fabs(want) + 1e-30)
              << "output " << k << " element " << i << " n " << n << " type " << int(t);
        }
      }
      // The plain decode with 2 thread blocks: the reference's bits.
      CHECK_CUDA(cudaMemset(d_out[0], 0, n * es));
      vc::decode_blocks_cuda(d_in[0], d_in[1], n, vc::fp8_format::e4m3, d_out[0], t, stream_, 2);
      CHECK_CUDA(cudaStreamSynchronize(stream_));
      std::vector<unsigned char> got(n * es);
      CHECK_CUDA(cudaMemcpy(got.data(), d_out[0], n * es, cudaMemcpyDeviceToHost));
      ASSERT_EQ(got, ref[0]) << "bounded decode n " << n;
      for (auto* p : d_in) CHECK_CUDA(cudaFree(p));
      for (auto* p : d_out) CHECK_CUDA(cudaFree(p));
    }
  }
}
