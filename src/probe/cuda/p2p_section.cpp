// The peer-to-peer section: copy engine and copy kernel, one way and both ways, from this GPU to
// every peer it can reach.
#include <functional>
#include <string>
#include <vector>

#include "common/cuda_check.hpp"
#include "gpu_probe_detail.hpp"
#include "vramkit/core/error.hpp"

namespace vramkit::probe::detail {
namespace {
constexpr std::size_t MiB = std::size_t{1} << 20;

void enable_peer(int from, int to) {
  VRAMKIT_CUDA_TRY(cudaSetDevice(from));
  const cudaError_t st = cudaDeviceEnablePeerAccess(to, 0);
  if (st == cudaErrorPeerAccessAlreadyEnabled)
    (void)cudaGetLastError();
  else
    VRAMKIT_CUDA_TRY(st);
}

// The context the pair's figures are reported under: device a, keys "gpuA->gpuB...".
gpu_context pair_context(const gpu_context& ctx, int a, const std::string& pair) {
  gpu_context ca;
  ca.ordinal = a;
  ca.tag = pair;
  ca.options = ctx.options;
  ca.report = ctx.report;
  VRAMKIT_CUDA_TRY(cudaSetDevice(a));
  int sms = 0, tps = 0;
  VRAMKIT_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, a));
  VRAMKIT_CUDA_TRY(cudaDeviceGetAttribute(&tps, cudaDevAttrMaxThreadsPerMultiProcessor, a));
  ca.sm_count = sms;
  ca.max_threads_per_sm = tps;
  return ca;
}

// What one pair's measurements use, owned by run_p2p_pair (in the order it creates them).
struct p2p_setup {
  int a, b;
  std::size_t bytes, words;
  int samples, loops;
  launch_config cfg;
  device_buffer &src_a, &dst_a, &src_b, &dst_b;
  owned_cuda_stream &sa, &sb;
  owned_cuda_event &go, &start, &end_a, &end_b;
  stream_blocker& blocker;
  std::uint32_t seed_a, seed_b;
};

// Both directions at once: b -> a on sb starts when a -> b on sa does; the interval ends when
// both end. Seconds per pair of copies, per sample.
std::vector<double> time_both_ways(p2p_setup& p, const std::function<void()>& fwd,
                                   const std::function<void()>& back) {
  std::vector<double> bi;
  for (int smp = 0; smp < p.samples; ++smp) {
    VRAMKIT_CUDA_TRY(cudaSetDevice(p.a));
    p.blocker.block(p.sa.get());
    VRAMKIT_CUDA_TRY(cudaEventRecord(p.go.get(), p.sa.get()));
    fwd();
    VRAMKIT_CUDA_TRY(cudaEventRecord(p.start.get(), p.sa.get()));
    VRAMKIT_CUDA_TRY(cudaSetDevice(p.b));
    VRAMKIT_CUDA_TRY(cudaStreamWaitEvent(p.sb.get(), p.start.get(), 0));
    for (int i = 0; i < p.loops; ++i) back();
    VRAMKIT_CUDA_TRY(cudaEventRecord(p.end_b.get(), p.sb.get()));
    VRAMKIT_CUDA_TRY(cudaSetDevice(p.a));
    for (int i = 0; i < p.loops; ++i) fwd();
    VRAMKIT_CUDA_TRY(cudaStreamWaitEvent(p.sa.get(), p.end_b.get(), 0));
    VRAMKIT_CUDA_TRY(cudaEventRecord(p.end_a.get(), p.sa.get()));
    p.blocker.release();
    VRAMKIT_CUDA_TRY(cudaStreamSynchronize(p.sa.get()));
    p.blocker.check();
    bi.push_back(elapsed_ms(p.start.get(), p.end_a.get()) / 1e3 / p.loops);
  }
  return bi;
}

// One mechanism (copy engine, or copy kernel when `sm`): a -> b alone, then both ways at once;
// every destination checked; fresh destinations left for the next mechanism.
void measure_mechanism(gpu_context& ca, const std::string& pair, p2p_setup& p, bool sm) {
  // a -> b on stream sa (device a); for both ways also b -> a on stream sb (device b).
  auto fwd = [&] {
    if (sm)
      VRAMKIT_CUDA_TRY(launch_copy(p.dst_b.words(), p.src_a.words(), p.words, p.cfg, p.sa.get()));
    else
      VRAMKIT_CUDA_TRY(
          cudaMemcpyPeerAsync(p.dst_b.get(), p.b, p.src_a.get(), p.a, p.bytes, p.sa.get()));
  };
  auto back = [&] {
    if (sm)
      VRAMKIT_CUDA_TRY(launch_copy(p.dst_a.words(), p.src_b.words(), p.words, p.cfg, p.sb.get()));
    else
      VRAMKIT_CUDA_TRY(
          cudaMemcpyPeerAsync(p.dst_a.get(), p.a, p.src_b.get(), p.b, p.bytes, p.sb.get()));
  };
  VRAMKIT_CUDA_TRY(cudaSetDevice(p.a));
  auto uni = time_blocked(p.blocker, p.sa.get(), p.samples, p.loops, 1, fwd);
  std::uint64_t bad = device_mismatches(p.dst_b.words(), p.words, p.seed_a, p.sa.get());
  const std::string mech = sm ? "sm" : "ce";
  auto m =
      bandwidth_measurement(ca, registered_key(pair + ".p2p." + mech + ".unidir"), "p2p",
                            std::string(sm ? "copy kernel on " : "cudaMemcpyPeerAsync ") + pair,
                            byte_convention::copied_once, p.bytes, double(p.bytes), uni);
  m.note = "destination checked word by word";
  add_verified(ca, std::move(m), bad == 0, mismatch_text(bad, p.words));

  const auto bi = time_both_ways(p, fwd, back);
  bad = device_mismatches(p.dst_b.words(), p.words, p.seed_a, p.sa.get());
  VRAMKIT_CUDA_TRY(cudaSetDevice(p.b));
  bad += device_mismatches(p.dst_a.words(), p.words, p.seed_b, p.sb.get());
  VRAMKIT_CUDA_TRY(cudaSetDevice(p.a));
  auto mb = bandwidth_measurement(
      ca, registered_key(pair + ".p2p." + mech + ".bidir"), "p2p",
      std::string(sm ? "copy kernels, both ways, " : "cudaMemcpyPeerAsync both ways, ") + pair,
      byte_convention::copied_once, p.bytes, 2.0 * p.bytes, bi);
  mb.note = "both directions summed; both destinations checked word by word";
  add_verified(ca, std::move(mb), bad == 0, mismatch_text(bad, 2 * p.words));
  VRAMKIT_CUDA_TRY(cudaMemsetAsync(p.dst_a.get(), 0, p.bytes, p.sa.get()));
  VRAMKIT_CUDA_TRY(cudaStreamSynchronize(p.sa.get()));
  VRAMKIT_CUDA_TRY(cudaSetDevice(p.b));
  VRAMKIT_CUDA_TRY(cudaMemsetAsync(p.dst_b.get(), 0, p.bytes, p.sb.get()));
  VRAMKIT_CUDA_TRY(cudaStreamSynchronize(p.sb.get()));
}

// Peer copies from GPU a to GPU b (peer access already checked both ways).
void run_p2p_pair(gpu_context& ctx, int a, int bdev) {
  const probe_options& options = *ctx.options;
  const std::string pair = "gpu" + std::to_string(a) + "->gpu" + std::to_string(bdev);
  if (options.progress) options.progress(pair + ": peer copies");
  enable_peer(a, bdev);
  enable_peer(bdev, a);
  gpu_context ca = pair_context(ctx, a, pair);
  const std::size_t bytes = options.quick ? 64 * MiB : 256 * MiB;
  const std::size_t words = bytes / 4;
  const launch_config cfg = ca.default_launch();
  // Buffers first, so they outlive every stream, event and the blocker (which releases a held
  // stream when an exception unwinds); an event is recorded on streams of the device that was
  // current at its creation: end_b belongs to device b.
  device_buffer src_a(bytes), dst_a(bytes);
  VRAMKIT_CUDA_TRY(cudaSetDevice(bdev));
  device_buffer src_b(bytes), dst_b(bytes);
  owned_cuda_stream sb;
  owned_cuda_event end_b;
  VRAMKIT_CUDA_TRY(cudaSetDevice(a));
  owned_cuda_stream sa;
  owned_cuda_event go, end_a, start;
  stream_blocker blocker;
  p2p_setup p{a,
              bdev,
              bytes,
              words,
              options.quick ? 3 : 5,
              options.quick ? 2 : 4,
              cfg,
              src_a,
              dst_a,
              src_b,
              dst_b,
              sa,
              sb,
              go,
              start,
              end_a,
              end_b,
              blocker,
              0xA0A0A0A0u,
              0x0B0B0B0Bu};
  VRAMKIT_CUDA_TRY(cudaSetDevice(bdev));
  VRAMKIT_CUDA_TRY(launch_fill(src_b.words(), words, p.seed_b, cfg, sb.get()));
  VRAMKIT_CUDA_TRY(cudaMemsetAsync(dst_b.get(), 0, bytes, sb.get()));
  VRAMKIT_CUDA_TRY(cudaStreamSynchronize(sb.get()));
  VRAMKIT_CUDA_TRY(cudaSetDevice(a));
  VRAMKIT_CUDA_TRY(launch_fill(src_a.words(), words, p.seed_a, cfg, sa.get()));
  VRAMKIT_CUDA_TRY(cudaMemsetAsync(dst_a.get(), 0, bytes, sa.get()));
  VRAMKIT_CUDA_TRY(cudaStreamSynchronize(sa.get()));
  for (bool sm : {false, true}) measure_mechanism(ca, pair, p, sm);
  VRAMKIT_CUDA_TRY(cudaSetDevice(a));
  VRAMKIT_CUDA_ASSERT(cudaDeviceDisablePeerAccess(bdev));
  VRAMKIT_CUDA_TRY(cudaSetDevice(bdev));
  VRAMKIT_CUDA_ASSERT(cudaDeviceDisablePeerAccess(a));
  VRAMKIT_CUDA_TRY(cudaSetDevice(a));
}

}  // namespace

void run_p2p_from(gpu_context& ctx) {
  if (ctx.device_count < 2) {
    ctx.report->skips.push_back({"p2p", "only one GPU: peer-to-peer needs two or more"});
    return;
  }
  const int a = ctx.ordinal;
  for (int bdev = 0; bdev < ctx.device_count; ++bdev) {
    if (a == bdev) continue;
    int ab = 0, ba = 0;
    VRAMKIT_CUDA_TRY(cudaDeviceCanAccessPeer(&ab, a, bdev));
    VRAMKIT_CUDA_TRY(cudaDeviceCanAccessPeer(&ba, bdev, a));
    if (!ab || !ba) {
      ctx.report->skips.push_back(
          {"gpu" + std::to_string(a) + "->gpu" + std::to_string(bdev) + ".p2p",
           "peer access between the two GPUs is not supported"});
      continue;
    }
    run_p2p_pair(ctx, a, bdev);
  }
}

}  // namespace vramkit::probe::detail
