// The host<->device section: H2D, D2H and both at once, from pinned and from pageable memory, over
// a size sweep; every size's destination checked word by word.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <memory>
#include <optional>
#include <thread>

#include "common/cuda_check.hpp"
#include "gpu_probe_detail.hpp"
#include "vramkit/core/error.hpp"

namespace vramkit::probe::detail {
namespace {
constexpr std::size_t MiB = std::size_t{1} << 20;
constexpr std::size_t GiB = std::size_t{1} << 30;

enum class direction { h2d, d2h, bidir };

const char* dir_name(direction d) {
  return d == direction::h2d ? "h2d" : d == direction::d2h ? "d2h" : "bidir";
}

double wall_seconds(std::chrono::steady_clock::time_point a,
                    std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Transfer sizes from 4 KiB up to 1 GiB (quick 256 MiB), within a quarter of the free device
// memory and, for the two host buffers, half of the host memory the probe may use.
std::vector<std::size_t> transfer_sizes(const gpu_context& ctx) {
  std::size_t max_size = std::min<std::size_t>(ctx.quick() ? 256 * MiB : GiB, ctx.free_bytes / 4);
  max_size = ctx.host_fit(max_size, 2, 0);
  std::vector<std::size_t> sizes;
  for (std::size_t sz = 4096; sz <= max_size; sz *= (ctx.quick() ? 16 : 4)) sizes.push_back(sz);
  return sizes;
}

// The buffers of one memory kind's sweep, sized for its largest transfer: a device source and
// destination, and a host source (pattern) and destination, pinned or pageable (malloc'd and
// touched so their pages exist before timing).
struct transfer_buffers {
  transfer_buffers(std::size_t top, bool pinned) : d_dst(top), d_src(top) {
    if (pinned) {
      p_src.emplace(top, pinned_buffer::mapping::unmapped);
      p_dst.emplace(top, pinned_buffer::mapping::unmapped);
      src = p_src->words();
      dst = p_dst->words();
    } else {
      g_src.reset(new std::uint32_t[top / 4]);
      g_dst.reset(new std::uint32_t[top / 4]);
      src = g_src.get();
      dst = g_dst.get();
    }
    parallel_fill(src, top / 4, host_seed);
    parallel_fill(dst, top / 4, 7);
  }
  static constexpr std::uint32_t host_seed = 0x5EED0001u;
  device_buffer d_dst, d_src;
  std::optional<pinned_buffer> p_src, p_dst;
  std::unique_ptr<std::uint32_t[]> g_src, g_dst;
  std::uint32_t* src = nullptr;  // pattern source for H2D
  std::uint32_t* dst = nullptr;  // destination for D2H
};

// Streams, events and the blocker one sweep times with, and the copies of `size` bytes it times.
struct transfer_timer {
  transfer_buffers& b;
  const gpu_context& ctx;
  owned_cuda_stream s1, s2;
  stream_blocker blocker;
  owned_cuda_event e_go, e_start, e_end1, e_end2;

  void h2d(std::size_t size, cudaStream_t st) const {
    VRAMKIT_CUDA_TRY(cudaMemcpyAsync(b.d_dst.get(), b.src, size, cudaMemcpyHostToDevice, st));
  }
  void d2h(std::size_t size, cudaStream_t st) const {
    VRAMKIT_CUDA_TRY(cudaMemcpyAsync(b.dst, b.d_src.get(), size, cudaMemcpyDeviceToHost, st));
  }
  void one(bool to_device, std::size_t size, cudaStream_t st) const {
    if (to_device)
      h2d(size, st);
    else
      d2h(size, st);
  }

  // Pinned, one direction: events around the copies on a held stream.
  std::vector<double> pinned_one(direction dir, std::size_t size, int samples, int loops) {
    auto op = dir == direction::h2d ? std::function<void()>([&] { h2d(size, s1.get()); })
                                    : std::function<void()>([&] { d2h(size, s1.get()); });
    return time_blocked(blocker, s1.get(), samples, loops, 1, op);
  }

  // Pinned, both directions at once: s2 starts when s1 is released; the interval ends when both
  // end.
  std::vector<double> pinned_bidir(std::size_t size, int samples, int loops) {
    std::vector<double> secs;
    for (int smp = 0; smp < samples; ++smp) {
      blocker.block(s1.get());
      VRAMKIT_CUDA_TRY(cudaEventRecord(e_go.get(), s1.get()));
      VRAMKIT_CUDA_TRY(cudaStreamWaitEvent(s2.get(), e_go.get(), 0));
      h2d(size, s1.get());
      d2h(size, s2.get());
      VRAMKIT_CUDA_TRY(cudaEventRecord(e_end2.get(), s2.get()));
      VRAMKIT_CUDA_TRY(cudaStreamWaitEvent(s1.get(), e_end2.get(), 0));
      VRAMKIT_CUDA_TRY(cudaEventRecord(e_start.get(), s1.get()));
      VRAMKIT_CUDA_TRY(cudaStreamWaitEvent(s2.get(), e_start.get(), 0));
      for (int i = 0; i < loops; ++i) {
        h2d(size, s1.get());
        d2h(size, s2.get());
      }
      VRAMKIT_CUDA_TRY(cudaEventRecord(e_end1.get(), s1.get()));
      VRAMKIT_CUDA_TRY(cudaEventRecord(e_end2.get(), s2.get()));
      VRAMKIT_CUDA_TRY(cudaStreamWaitEvent(s1.get(), e_end2.get(), 0));
      VRAMKIT_CUDA_TRY(cudaEventRecord(e_go.get(), s1.get()));
      blocker.release();
      VRAMKIT_CUDA_TRY(cudaStreamSynchronize(s1.get()));
      VRAMKIT_CUDA_TRY(cudaStreamSynchronize(s2.get()));
      blocker.check();
      secs.push_back(elapsed_ms(e_start.get(), e_go.get()) / 1e3 / loops);
    }
    return secs;
  }

  // Pageable copies go through the driver's staging buffers and block the host, so they are timed
  // by the host clock around synchronised copies (as bandwidthTest does).
  std::vector<double> pageable_one(direction dir, std::size_t size, int samples, int loops) {
    std::vector<double> secs;
    for (int smp = 0; smp < samples; ++smp) {
      one(dir == direction::h2d, size, s1.get());
      VRAMKIT_CUDA_TRY(cudaStreamSynchronize(s1.get()));
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < loops; ++i) {
        one(dir == direction::h2d, size, s1.get());
        VRAMKIT_CUDA_TRY(cudaStreamSynchronize(s1.get()));
      }
      secs.push_back(wall_seconds(t0, std::chrono::steady_clock::now()) / loops);
    }
    return secs;
  }

  // Pageable, both directions: one host thread per direction, started together.
  std::vector<double> pageable_bidir(std::size_t size, int samples, int loops) {
    std::vector<double> secs;
    for (int smp = 0; smp < samples; ++smp) {
      std::atomic<int> ready{0};
      std::atomic<bool> go{false};
      std::exception_ptr err[2];
      auto worker = [&](int which) {
        try {
          VRAMKIT_CUDA_TRY(cudaSetDevice(ctx.ordinal));
          cudaStream_t st = which == 0 ? s1.get() : s2.get();
          one(which == 0, size, st);
          VRAMKIT_CUDA_TRY(cudaStreamSynchronize(st));
          ready.fetch_add(1);
          while (!go.load()) std::this_thread::yield();
          for (int i = 0; i < loops; ++i) {
            one(which == 0, size, st);
            VRAMKIT_CUDA_TRY(cudaStreamSynchronize(st));
          }
        } catch (...) {
          err[which] = std::current_exception();
          ready.fetch_add(1);
        }
      };
      std::thread t0(worker, 0), t1(worker, 1);
      while (ready.load() < 2) std::this_thread::yield();
      const auto start = std::chrono::steady_clock::now();
      go.store(true);
      t0.join();
      t1.join();
      const auto stop = std::chrono::steady_clock::now();
      for (auto& e : err)
        if (e) std::rethrow_exception(e);
      secs.push_back(wall_seconds(start, stop) / loops);
    }
    return secs;
  }
};

// One direction's sweep: the curve, the seconds at the largest size, or why it failed.
struct direction_sweep {
  curve c;
  std::vector<double> top_secs;
  std::string failure;
};

direction_sweep sweep_direction(const gpu_context& ctx, transfer_timer& t,
                                const std::vector<std::size_t>& sizes, direction dir, bool pinned) {
  direction_sweep out;
  const char* kind = pinned ? "pinned" : "pageable";
  curve& c = out.c;
  c.key = ctx.key(std::string(dir_name(dir)) + "." + kind + ".sweep");
  c.section = "h2d";
  c.title = std::string(dir == direction::h2d   ? "host to device"
                        : dir == direction::d2h ? "device to host"
                                                : "bidirectional (both summed)") +
            ", " + kind + ", " + ctx.tag;
  c.x_label = "bytes";
  c.y_unit = "GB/s";
  const launch_config def = ctx.default_launch();
  for (std::size_t k = 0; k < sizes.size(); ++k) {
    const std::size_t size = sizes[k];
    const std::size_t words = size / 4;
    const bool big = size >= 256 * MiB;
    const int samples = ctx.quick() ? (big ? 3 : 5) : (big ? 5 : 10);
    const int loops =
        static_cast<int>(std::clamp<std::size_t>((pinned ? 64 : 16) * MiB / size, 1, 100));
    const std::uint32_t dev_seed = 0xD0000000u + static_cast<std::uint32_t>(k) * 17 +
                                   (pinned ? 0 : 5) + static_cast<std::uint32_t>(dir);
    // Fresh data in the source, stale data in the destination, so a copy that does nothing fails.
    VRAMKIT_CUDA_TRY(cudaMemsetAsync(t.b.d_dst.get(), 0, size, t.s1.get()));
    VRAMKIT_CUDA_TRY(launch_fill(t.b.d_src.words(), words, dev_seed, def, t.s1.get()));
    VRAMKIT_CUDA_TRY(cudaStreamSynchronize(t.s1.get()));
    const std::vector<double> secs =
        pinned                    ? (dir == direction::bidir ? t.pinned_bidir(size, samples, loops)
                                                             : t.pinned_one(dir, size, samples, loops))
        : dir == direction::bidir ? t.pageable_bidir(size, samples, loops)
                                  : t.pageable_one(dir, size, samples, loops);
    // Verify what the copies delivered.
    std::uint64_t bad = 0;
    if (dir != direction::d2h)
      bad += device_mismatches(t.b.d_dst.words(), words, transfer_buffers::host_seed, t.s1.get());
    if (dir != direction::h2d) bad += parallel_mismatches(t.b.dst, words, dev_seed);
    if (bad != 0) {
      out.failure = mismatch_text(bad, words) + " at " + std::to_string(size) + " bytes";
      continue;
    }
    const double bytes_per_op = dir == direction::bidir ? 2.0 * size : double(size);
    curve::point pt;
    pt.x = double(size);
    for (double sec : secs) pt.samples.push_back(gbps(bytes_per_op, sec));
    pt.y = sample_stats::of(pt.samples);
    c.points.push_back(std::move(pt));
    if (k + 1 == sizes.size()) out.top_secs = secs;
  }
  return out;
}

// The measurement at the largest size of a verified sweep, against the PCIe peak.
void report_direction(gpu_context& ctx, const direction_sweep& sw, direction dir, bool pinned,
                      std::size_t top, const std::uint32_t* host_src) {
  const char* kind = pinned ? "pinned" : "pageable";
  const double bytes_per_op = dir == direction::bidir ? 2.0 * top : double(top);
  auto m = bandwidth_measurement(ctx, ctx.key(std::string(dir_name(dir)) + "." + kind), "h2d",
                                 sw.c.title, byte_convention::copied_once, top, bytes_per_op,
                                 sw.top_secs);
  if (ctx.pcie_peak_gbps) {
    m.peak = *ctx.pcie_peak_gbps * (dir == direction::bidir ? 2 : 1);
    m.peak_basis =
        ctx.pcie_peak_basis + (dir == direction::bidir ? ", both directions summed" : "");
  }
  if (const int node = host_numa_node(host_src); node >= 0) m.extra["host_numa_node"] = node;
  m.note = std::string(pinned ? "cudaMemcpyAsync, events around the copies on a held stream"
                              : "synchronised copies timed by the host clock") +
           "; destination checked word by word";
  add_verified(ctx, std::move(m), true, "");
}

// Both memory kinds share the buffers' sizes and the sweep; `pinned` picks one.
void run_transfers(gpu_context& ctx, bool pinned) {
  ctx.progress(pinned ? "host<->device copies, pinned (size sweep)"
                      : "host<->device copies, pageable (size sweep)");
  const auto sizes = transfer_sizes(ctx);
  if (sizes.empty()) {
    ctx.report->skips.push_back(
        {ctx.key(std::string("h2d.") + (pinned ? "pinned" : "pageable")),
         "too little free device or host memory for two 4 KiB transfer buffers"});
    return;
  }
  const std::size_t top = sizes.back();
  transfer_buffers bufs(top, pinned);
  transfer_timer timer{bufs, ctx, {}, {}, {}, {}, {}, {}, {}};
  for (direction dir : {direction::h2d, direction::d2h, direction::bidir}) {
    direction_sweep sw = sweep_direction(ctx, timer, sizes, dir, pinned);
    if (!sw.failure.empty()) {
      ctx.report->skips.push_back(
          {sw.c.key, "verification failed, curve withheld: " + sw.failure, true});
      continue;
    }
    add_curve(ctx, sw.c);
    report_direction(ctx, sw, dir, pinned, top, bufs.src);
  }
}

}  // namespace

void run_transfers_pinned(gpu_context& ctx) { run_transfers(ctx, true); }
void run_transfers_pageable(gpu_context& ctx) { run_transfers(ctx, false); }

}  // namespace vramkit::probe::detail
