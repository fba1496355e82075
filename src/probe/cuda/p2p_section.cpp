// The peer-to-peer section: copy engine and copy kernel, one way and both ways, from this GPU to
// every peer it can reach.
#include <string>

#include "common/cuda_check.hpp"
#include "gpu_probe_detail.hpp"
#include "vramkit/core/error.hpp"

namespace vramkit::probe::detail {
namespace {
constexpr std::size_t MiB = std::size_t{1} << 20;
}  // namespace

void run_p2p_from(gpu_context& ctx) {
  const probe_options& options = *ctx.options;
  probe_report& report = *ctx.report;
  const int device_count = ctx.device_count;
  if (device_count < 2) {
    report.skips.push_back({"p2p", "only one GPU: peer-to-peer needs two or more"});
    return;
  }
  const std::size_t bytes = options.quick ? 64 * MiB : 256 * MiB;
  const std::size_t words = bytes / 4;
  const int samples = options.quick ? 3 : 5, loops = options.quick ? 2 : 4;
  {
    const int a = ctx.ordinal;
    for (int bdev = 0; bdev < device_count; ++bdev) {
      if (a == bdev) continue;
      const std::string pair = "gpu" + std::to_string(a) + "->gpu" + std::to_string(bdev);
      int ab = 0, ba = 0;
      VRAMKIT_CUDA_TRY(cudaDeviceCanAccessPeer(&ab, a, bdev));
      VRAMKIT_CUDA_TRY(cudaDeviceCanAccessPeer(&ba, bdev, a));
      if (!ab || !ba) {
        report.skips.push_back(
            {pair + ".p2p", "peer access between the two GPUs is not supported"});
        continue;
      }
      if (options.progress) options.progress(pair + ": peer copies");
      auto enable = [](int from, int to) {
        VRAMKIT_CUDA_TRY(cudaSetDevice(from));
        const cudaError_t st = cudaDeviceEnablePeerAccess(to, 0);
        if (st == cudaErrorPeerAccessAlreadyEnabled)
          (void)cudaGetLastError();
        else
          VRAMKIT_CUDA_TRY(st);
      };
      enable(a, bdev);
      enable(bdev, a);
      gpu_context ca;
      ca.ordinal = a;
      ca.tag = pair;
      ca.options = &options;
      ca.report = &report;
      VRAMKIT_CUDA_TRY(cudaSetDevice(a));
      int sms = 0, tps = 0;
      VRAMKIT_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, a));
      VRAMKIT_CUDA_TRY(cudaDeviceGetAttribute(&tps, cudaDevAttrMaxThreadsPerMultiProcessor, a));
      ca.sm_count = sms;
      ca.max_threads_per_sm = tps;
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
      VRAMKIT_CUDA_TRY(cudaSetDevice(bdev));
      const std::uint32_t seed_a = 0xA0A0A0A0u, seed_b = 0x0B0B0B0Bu;
      VRAMKIT_CUDA_TRY(launch_fill(src_b.words(), words, seed_b, cfg, sb.get()));
      VRAMKIT_CUDA_TRY(cudaMemsetAsync(dst_b.get(), 0, bytes, sb.get()));
      VRAMKIT_CUDA_TRY(cudaStreamSynchronize(sb.get()));
      VRAMKIT_CUDA_TRY(cudaSetDevice(a));
      VRAMKIT_CUDA_TRY(launch_fill(src_a.words(), words, seed_a, cfg, sa.get()));
      VRAMKIT_CUDA_TRY(cudaMemsetAsync(dst_a.get(), 0, bytes, sa.get()));
      VRAMKIT_CUDA_TRY(cudaStreamSynchronize(sa.get()));

      for (bool sm : {false, true}) {
        // a -> b on stream sa (device a); for bidir also b -> a on stream sb (device b).
        auto fwd = [&] {
          if (sm)
            VRAMKIT_CUDA_TRY(launch_copy(dst_b.words(), src_a.words(), words, cfg, sa.get()));
          else
            VRAMKIT_CUDA_TRY(
                cudaMemcpyPeerAsync(dst_b.get(), bdev, src_a.get(), a, bytes, sa.get()));
        };
        auto back = [&] {
          if (sm)
            VRAMKIT_CUDA_TRY(launch_copy(dst_a.words(), src_b.words(), words, cfg, sb.get()));
          else
            VRAMKIT_CUDA_TRY(
                cudaMemcpyPeerAsync(dst_a.get(), a, src_b.get(), bdev, bytes, sb.get()));
        };
        VRAMKIT_CUDA_TRY(cudaSetDevice(a));
        auto uni = time_blocked(blocker, sa.get(), samples, loops, 1, fwd);
        std::uint64_t bad = device_mismatches(dst_b.words(), words, seed_a, sa.get());
        const std::string mech = sm ? "sm" : "ce";
        auto m = bandwidth_measurement(
            ca, registered_key(pair + ".p2p." + mech + ".unidir"), "p2p",
            std::string(sm ? "copy kernel on " : "cudaMemcpyPeerAsync ") + pair,
            byte_convention::copied_once, bytes, double(bytes), uni);
        m.note = "destination checked word by word";
        add_verified(ca, std::move(m), bad == 0, mismatch_text(bad, words));

        std::vector<double> bi;
        for (int smp = 0; smp < samples; ++smp) {
          VRAMKIT_CUDA_TRY(cudaSetDevice(a));
          blocker.block(sa.get());
          VRAMKIT_CUDA_TRY(cudaEventRecord(go.get(), sa.get()));
          fwd();
          VRAMKIT_CUDA_TRY(cudaEventRecord(start.get(), sa.get()));
          VRAMKIT_CUDA_TRY(cudaSetDevice(bdev));
          VRAMKIT_CUDA_TRY(cudaStreamWaitEvent(sb.get(), start.get(), 0));
          for (int i = 0; i < loops; ++i) back();
          VRAMKIT_CUDA_TRY(cudaEventRecord(end_b.get(), sb.get()));
          VRAMKIT_CUDA_TRY(cudaSetDevice(a));
          for (int i = 0; i < loops; ++i) fwd();
          VRAMKIT_CUDA_TRY(cudaStreamWaitEvent(sa.get(), end_b.get(), 0));
          VRAMKIT_CUDA_TRY(cudaEventRecord(end_a.get(), sa.get()));
          blocker.release();
          VRAMKIT_CUDA_TRY(cudaStreamSynchronize(sa.get()));
          blocker.check();
          bi.push_back(elapsed_ms(start.get(), end_a.get()) / 1e3 / loops);
        }
        bad = device_mismatches(dst_b.words(), words, seed_a, sa.get());
        VRAMKIT_CUDA_TRY(cudaSetDevice(bdev));
        bad += device_mismatches(dst_a.words(), words, seed_b, sb.get());
        VRAMKIT_CUDA_TRY(cudaSetDevice(a));
        auto mb = bandwidth_measurement(
            ca, registered_key(pair + ".p2p." + mech + ".bidir"), "p2p",
            std::string(sm ? "copy kernels, both ways, " : "cudaMemcpyPeerAsync both ways, ") +
                pair,
            byte_convention::copied_once, bytes, 2.0 * bytes, bi);
        mb.note = "both directions summed; both destinations checked word by word";
        add_verified(ca, std::move(mb), bad == 0, mismatch_text(bad, 2 * words));
        // Fresh destinations for the next mechanism.
        VRAMKIT_CUDA_TRY(cudaMemsetAsync(dst_a.get(), 0, bytes, sa.get()));
        VRAMKIT_CUDA_TRY(cudaStreamSynchronize(sa.get()));
        VRAMKIT_CUDA_TRY(cudaSetDevice(bdev));
        VRAMKIT_CUDA_TRY(cudaMemsetAsync(dst_b.get(), 0, bytes, sb.get()));
        VRAMKIT_CUDA_TRY(cudaStreamSynchronize(sb.get()));
      }
      VRAMKIT_CUDA_TRY(cudaSetDevice(a));
      VRAMKIT_CUDA_ASSERT(cudaDeviceDisablePeerAccess(bdev));
      VRAMKIT_CUDA_TRY(cudaSetDevice(bdev));
      VRAMKIT_CUDA_ASSERT(cudaDeviceDisablePeerAccess(a));
      VRAMKIT_CUDA_TRY(cudaSetDevice(a));
    }
  }
}

}  // namespace vramkit::probe::detail
