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

struct host_side {
  std::uint32_t* src = nullptr;  // pattern source for H2D
  std::uint32_t* dst = nullptr;  // destination for D2H
};

enum class direction { h2d, d2h, bidir };

const char* dir_name(direction d) {
  return d == direction::h2d ? "h2d" : d == direction::d2h ? "d2h" : "bidir";
}

double wall_seconds(std::chrono::steady_clock::time_point a,
                    std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Both memory kinds share the buffers' sizes and the sweep; `pinned` picks one.
void run_transfers(gpu_context& ctx, bool pinned) {
  ctx.progress(pinned ? "host<->device copies, pinned (size sweep)"
                      : "host<->device copies, pageable (size sweep)");
  std::vector<std::size_t> sizes;
  const std::size_t max_size =
      std::min<std::size_t>(ctx.quick() ? 256 * MiB : GiB, ctx.free_bytes / 4);
  for (std::size_t sz = 4096; sz <= max_size; sz *= (ctx.quick() ? 16 : 4)) sizes.push_back(sz);
  if (sizes.empty()) throw logic_error("not enough free device memory for the transfer sweep");
  const std::size_t top = sizes.back();

  device_buffer d_dst(top), d_src(top);
  std::optional<pinned_buffer> p_src, p_dst;
  // Pageable buffers: malloc'd and touched so their pages exist before timing.
  std::unique_ptr<std::uint32_t[]> g_src, g_dst;
  host_side host;
  if (pinned) {
    p_src.emplace(top, pinned_buffer::mapping::unmapped);
    p_dst.emplace(top, pinned_buffer::mapping::unmapped);
    host = {p_src->words(), p_dst->words()};
  } else {
    g_src.reset(new std::uint32_t[top / 4]);
    g_dst.reset(new std::uint32_t[top / 4]);
    host = {g_src.get(), g_dst.get()};
  }
  const std::uint32_t host_seed = 0x5EED0001u;
  parallel_fill(host.src, top / 4, host_seed);
  parallel_fill(host.dst, top / 4, 7);

  owned_cuda_stream s1, s2;
  stream_blocker blocker;
  owned_cuda_event e_go, e_start, e_end1, e_end2;
  const launch_config def = ctx.default_launch();

  {
    const char* kind = pinned ? "pinned" : "pageable";
    for (direction dir : {direction::h2d, direction::d2h, direction::bidir}) {
      curve c;
      c.key = ctx.key(std::string(dir_name(dir)) + "." + kind + ".sweep");
      c.section = "h2d";
      c.title = std::string(dir == direction::h2d   ? "host to device"
                            : dir == direction::d2h ? "device to host"
                                                    : "bidirectional (both summed)") +
                ", " + kind + ", " + ctx.tag;
      c.x_label = "bytes";
      c.y_unit = "GB/s";
      std::vector<double> top_secs;
      bool all_ok = true;
      std::string failure;
      for (std::size_t k = 0; k < sizes.size(); ++k) {
        const std::size_t size = sizes[k];
        const std::size_t words = size / 4;
        const bool big = size >= 256 * MiB;
        const int samples = ctx.quick() ? (big ? 3 : 5) : (big ? 5 : 10);
        const int loops =
            static_cast<int>(std::clamp<std::size_t>((pinned ? 64 : 16) * MiB / size, 1, 100));
        const std::uint32_t dev_seed = 0xD0000000u + static_cast<std::uint32_t>(k) * 17 +
                                       (pinned ? 0 : 5) + static_cast<std::uint32_t>(dir);
        // Fresh data in the source, stale data in the destination, so a copy that does nothing
        // fails.
        VRAMKIT_CUDA_TRY(cudaMemsetAsync(d_dst.get(), 0, size, s1.get()));
        VRAMKIT_CUDA_TRY(launch_fill(d_src.words(), words, dev_seed, def, s1.get()));
        VRAMKIT_CUDA_TRY(cudaStreamSynchronize(s1.get()));
        auto h2d = [&](cudaStream_t st) {
          VRAMKIT_CUDA_TRY(
              cudaMemcpyAsync(d_dst.get(), host.src, size, cudaMemcpyHostToDevice, st));
        };
        auto d2h = [&](cudaStream_t st) {
          VRAMKIT_CUDA_TRY(
              cudaMemcpyAsync(host.dst, d_src.get(), size, cudaMemcpyDeviceToHost, st));
        };
        auto one = [&](bool to_device, cudaStream_t st) {
          if (to_device)
            h2d(st);
          else
            d2h(st);
        };
        std::vector<double> secs;
        double bytes_per_op = dir == direction::bidir ? 2.0 * size : double(size);
        if (pinned && dir != direction::bidir) {
          auto op = dir == direction::h2d ? std::function<void()>([&] { h2d(s1.get()); })
                                          : std::function<void()>([&] { d2h(s1.get()); });
          secs = time_blocked(blocker, s1.get(), samples, loops, 1, op);
        } else if (pinned) {
          // Both directions at once: s2 starts when s1 is released; the interval ends when both
          // end.
          for (int smp = 0; smp < samples; ++smp) {
            blocker.block(s1.get());
            VRAMKIT_CUDA_TRY(cudaEventRecord(e_go.get(), s1.get()));
            VRAMKIT_CUDA_TRY(cudaStreamWaitEvent(s2.get(), e_go.get(), 0));
            h2d(s1.get());
            d2h(s2.get());
            VRAMKIT_CUDA_TRY(cudaEventRecord(e_end2.get(), s2.get()));
            VRAMKIT_CUDA_TRY(cudaStreamWaitEvent(s1.get(), e_end2.get(), 0));
            VRAMKIT_CUDA_TRY(cudaEventRecord(e_start.get(), s1.get()));
            VRAMKIT_CUDA_TRY(cudaStreamWaitEvent(s2.get(), e_start.get(), 0));
            for (int i = 0; i < loops; ++i) {
              h2d(s1.get());
              d2h(s2.get());
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
        } else if (dir != direction::bidir) {
          // Pageable copies go through the driver's staging buffers and block the host, so they
          // are timed by the host clock around synchronised copies (as bandwidthTest does).
          for (int smp = 0; smp < samples; ++smp) {
            one(dir == direction::h2d, s1.get());
            VRAMKIT_CUDA_TRY(cudaStreamSynchronize(s1.get()));
            const auto t0 = std::chrono::steady_clock::now();
            for (int i = 0; i < loops; ++i) {
              one(dir == direction::h2d, s1.get());
              VRAMKIT_CUDA_TRY(cudaStreamSynchronize(s1.get()));
            }
            secs.push_back(wall_seconds(t0, std::chrono::steady_clock::now()) / loops);
          }
        } else {
          // Pageable, both directions: one host thread per direction, started together.
          for (int smp = 0; smp < samples; ++smp) {
            std::atomic<int> ready{0};
            std::atomic<bool> go{false};
            std::exception_ptr err[2];
            auto worker = [&](int which) {
              try {
                VRAMKIT_CUDA_TRY(cudaSetDevice(ctx.ordinal));
                cudaStream_t st = which == 0 ? s1.get() : s2.get();
                one(which == 0, st);
                VRAMKIT_CUDA_TRY(cudaStreamSynchronize(st));
                ready.fetch_add(1);
                while (!go.load()) std::this_thread::yield();
                for (int i = 0; i < loops; ++i) {
                  one(which == 0, st);
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
        }
        // Verify what the copies delivered.
        std::uint64_t bad = 0;
        if (dir != direction::d2h)
          bad += device_mismatches(d_dst.words(), words, host_seed, s1.get());
        if (dir != direction::h2d) bad += parallel_mismatches(host.dst, words, dev_seed);
        if (bad != 0) {
          all_ok = false;
          failure = mismatch_text(bad, words) + " at " + std::to_string(size) + " bytes";
          continue;
        }
        curve::point pt;
        pt.x = double(size);
        for (double sec : secs) pt.samples.push_back(gbps(bytes_per_op, sec));
        pt.y = sample_stats::of(pt.samples);
        c.points.push_back(std::move(pt));
        if (k + 1 == sizes.size()) top_secs = secs;
      }
      if (!all_ok) {
        ctx.report->skips.push_back(
            {c.key, "verification failed, curve withheld: " + failure, true});
        continue;
      }
      add_curve(ctx, c);
      const double bytes_per_op = dir == direction::bidir ? 2.0 * top : double(top);
      auto m =
          bandwidth_measurement(ctx, ctx.key(std::string(dir_name(dir)) + "." + kind), "h2d",
                                c.title, byte_convention::copied_once, top, bytes_per_op, top_secs);
      if (ctx.pcie_peak_gbps) {
        m.peak = *ctx.pcie_peak_gbps * (dir == direction::bidir ? 2 : 1);
        m.peak_basis =
            ctx.pcie_peak_basis + (dir == direction::bidir ? ", both directions summed" : "");
      }
      if (const int node = host_numa_node(host.src); node >= 0) m.extra["host_numa_node"] = node;
      m.note = std::string(pinned ? "cudaMemcpyAsync, events around the copies on a held stream"
                                  : "synchronised copies timed by the host clock") +
               "; destination checked word by word";
      add_verified(ctx, std::move(m), true, "");
    }
  }
}

}  // namespace

void run_transfers_pinned(gpu_context& ctx) { run_transfers(ctx, true); }
void run_transfers_pageable(gpu_context& ctx) { run_transfers(ctx, false); }

}  // namespace vramkit::probe::detail
