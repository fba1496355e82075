// texture_streaming: a camera moves past a grid of textured items; each frame the streamer keeps
// the finest mip levels the budget allows for the nearest items. Runs on the simulated device
// (with copy delays), checks every level it uses against its checksum, and prints what each frame
// chose. Usage: texture_streaming [--frames N] [--budget BYTES] [--trace FILE]
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include "texture_streamer.hpp"
#include "vramkit/core/error.hpp"
#include "vramkit/core/host_sim_device.hpp"
#include "vramkit/core/units.hpp"

int main(int argc, char** argv) try {
  using namespace vramkit;
  int frames = 40;
  std::size_t budget = 6 * MiB;
  std::string trace_path;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) throw invalid_input("texture_streaming: " + a + " needs a value");
    if (a == "--frames")
      frames = std::stoi(argv[++i]);
    else if (a == "--budget")
      budget = static_cast<std::size_t>(parse_bytes(argv[++i]));
    else if (a == "--trace")
      trace_path = argv[++i];
    else
      throw invalid_input("texture_streaming: unknown argument '" + a + "'");
  }
  host_sim_options sim;
  sim.copy_bandwidth_bytes_per_s = 4e9;
  sim.copy_latency = std::chrono::microseconds(10);
  host_sim_device device(sim);
  tier::residency_manager manager(device, {.device_budget_bytes = budget});
  examples::texture_streamer streamer(device, manager, 2.0);
  for (int gy = 0; gy < 4; ++gy) {
    for (int gx = 0; gx < 8; ++gx) {
      streamer.add_item({gx * 4.0, gy * 3.0}, 1 * MiB, 5, static_cast<std::uint32_t>(gy * 8 + gx));
    }
  }
  owned_stream stream(device);
  std::size_t bad = 0;  // written by host functions on the one stream, read after synchronize
  auto verify = [&](const void* d, std::size_t bytes, std::uint64_t expected, stream_view s) {
    device.launch_host_func(
        s, [d, bytes, expected, &bad] { bad += examples::checksum(d, bytes) != expected; });
  };
  for (int f = 0; f < frames; ++f) {
    const examples::point camera{f * 28.0 / frames, 4.5};
    const auto r = streamer.frame(camera, stream, verify);
    int level0 = 0;
    for (int l : r.finest_level) level0 += l == 0;
    std::printf("frame %3d camera (%5.1f, %.1f): %2d items at level 0, planned %s, resident %s\n",
                f, camera.x, camera.y, level0, format_bytes(double(r.planned_bytes)).c_str(),
                format_bytes(double(r.resident_bytes)).c_str());
  }
  device.synchronize(stream);
  const std::size_t host_bad = streamer.verify_host_copies();
  const auto st = manager.stats();
  std::printf(
      "\nbudget %s, peak resident %s; %llu hits, %llu misses, %llu prefetch hits, %llu evictions; "
      "%s host->device, %s device->host; stream waited %.2f ms\n",
      format_bytes(double(budget)).c_str(), format_bytes(double(st.peak_resident_bytes)).c_str(),
      (unsigned long long)st.hits, (unsigned long long)st.misses,
      (unsigned long long)st.prefetch_hits, (unsigned long long)st.evictions,
      format_bytes(double(st.bytes_h2d)).c_str(), format_bytes(double(st.bytes_d2h)).c_str(),
      st.stream_wait.count() / 1e6);
  std::printf("checksums: %zu device mismatches, %zu host mismatches\n", bad, host_bad);
  if (!trace_path.empty()) {
    std::ofstream out(trace_path);
    manager.write_trace(out);
  }
  return bad == 0 && host_bad == 0 && st.peak_resident_bytes <= budget ? 0 : 1;
} catch (const vramkit::invalid_input& e) {
  std::fprintf(stderr, "%s\n", e.what());
  return 2;
} catch (const std::exception& e) {
  std::fprintf(stderr, "texture_streaming: %s\n", e.what());
  return 1;
}
