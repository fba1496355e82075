// `vramkit watch`: the live terminal view of GPU and host memory, a one-shot table (--once), and
// recording (--json to stdout, --csv FILE) or replay (--replay FILE) of samples.
#include <fmt/format.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <thread>

#include "commands.hpp"
#include "vramkit/core/error.hpp"
#include "vramkit/monitor/csv_writer.hpp"
#include "vramkit/monitor/gpu_source.hpp"
#include "vramkit/monitor/recording.hpp"
#include "vramkit/monitor/sampler.hpp"
#include "vramkit/monitor/terminal_view.hpp"

namespace vramkit::cli {

namespace {

namespace mon = vramkit::monitor;

struct watch_args {
  std::string interval = "1s";
  std::vector<unsigned> devices;
  bool once = false;
  bool json = false;
  std::string csv;
  std::string replay;
  double speed = 1.0;
  std::string max_gap = "5s";
  std::string fake_gpus;
  std::string host_root = "/";
  long count = 0;
};

volatile std::sig_atomic_t g_stop = 0;
void on_stop(int) { g_stop = 1; }

std::string host_only_notice(const result<std::shared_ptr<nvml_api>>& gpus) {
  if (gpus) return {};
  const auto& e = gpus.error();
  if (e.reason.rfind("no NVIDIA driver found", 0) == 0) {
    return "no NVIDIA driver found (libnvidia-ml.so.1 not loadable): showing host memory only";
  }
  return e.reason + ": showing host memory only";
}

void run_replay(const watch_args& a) {
  auto rec = mon::read_recording(a.replay);
  for (const auto& e : rec.errors)
    std::fprintf(stderr, "vramkit: %s:%zu: %s (line skipped)\n", a.replay.c_str(), e.line,
                 e.message.c_str());
  if (rec.samples.empty())
    throw invalid_input("recording " + a.replay + " holds no readable sample");
  if (!(a.speed > 0)) throw invalid_input("--speed must be greater than 0");
  auto max_gap = mon::parse_interval(a.max_gap);
  if (!a.csv.empty()) {  // conversion: every sample of the recording into the CSV file
    mon::csv_writer sink(a.csv);
    for (const auto& s : rec.samples) sink.write(s);
  }
  if (a.once) {
    std::fputs(mon::format_snapshot(rec.samples.back()).c_str(), stdout);
    return;
  }
  if (a.json) {
    for (const auto& s : rec.samples) std::printf("%s\n", mon::to_json_line(s).c_str());
    return;
  }
  if (!a.csv.empty()) return;
  mon::terminal_view_options opt;
  opt.title = "vramkit watch --replay " + std::filesystem::path(a.replay).filename().string();
  opt.recording = std::make_shared<const std::vector<mon::sample>>(std::move(rec.samples));
  opt.speed = a.speed;
  opt.max_gap = max_gap;
  mon::run_terminal_view({}, opt);
}

void run_watch(const watch_args& a, command_context& ctx) {
  if (!a.replay.empty()) {
    run_replay(a);
    return;
  }
  auto interval = mon::parse_interval(a.interval);
  auto gpus = mon::open_gpu_source(a.fake_gpus);
  std::string notice = host_only_notice(gpus);
  mon::sampler_options so;
  so.host_root = a.host_root;
  so.devices = a.devices;
  so.workload_of = workload_reader(a.host_root);
  mon::sampler sampler(std::move(gpus), so);
  sampler.validate_devices();

  std::optional<mon::csv_writer> csv;
  if (!a.csv.empty()) csv.emplace(a.csv);

  if (a.once) {
    if (!notice.empty()) std::fprintf(stderr, "vramkit: %s\n", notice.c_str());
    auto s = sampler.take();
    if (csv) csv->write(s);
    if (a.json)
      std::printf("%s\n", mon::to_json_line(s).c_str());
    else
      std::fputs(mon::format_snapshot(s).c_str(), stdout);
    return;
  }

  bool headless = a.json || (csv && isatty(STDOUT_FILENO) == 0);
  if (headless) {
    if (!notice.empty()) std::fprintf(stderr, "vramkit: %s\n", notice.c_str());
    std::signal(SIGINT, on_stop);
    std::signal(SIGTERM, on_stop);
    auto next = std::chrono::steady_clock::now();
    for (long n = 0; g_stop == 0 && (a.count <= 0 || n < a.count); ++n) {
      if (n > 0) {
        next += interval;
        while (g_stop == 0 && std::chrono::steady_clock::now() < next) {
          std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(
              next - std::chrono::steady_clock::now(), std::chrono::milliseconds(50)));
        }
        if (g_stop != 0) break;
      }
      auto s = sampler.take();
      if (csv) csv->write(s);
      if (a.json) {
        std::printf("%s\n", mon::to_json_line(s).c_str());
        if (std::fflush(stdout) != 0) break;  // reader went away (e.g. | head)
      }
    }
    return;
  }

  mon::terminal_view_options opt;
  opt.interval = interval;
  opt.notice = notice;
  long taken = 0;
  mon::run_terminal_view(
      [&]() -> std::optional<mon::sample> {
        if (a.count > 0 && taken >= a.count) return std::nullopt;
        ++taken;
        auto s = sampler.take();
        if (csv) csv->write(s);
        return s;
      },
      opt);
  (void)ctx;
}

}  // namespace

void add_watch_command(CLI::App& app, command_context& ctx) {
  auto args = std::make_shared<watch_args>();
  auto* sub = app.add_subcommand(
      "watch", "Live view of GPU and host memory; --once, --json, --csv FILE, --replay FILE");
  sub->add_option("--interval", args->interval, "Sampling interval (1s, 500ms, 2m)")
      ->capture_default_str();
  sub->add_option("--device", args->devices, "GPU index to show (repeatable); default all");
  sub->add_flag("--once", args->once,
                "Print one snapshot as a table (or one JSON line with --json) and exit");
  sub->add_flag("--json", args->json,
                "Print one JSON object per sample per line (JSON Lines) on stdout");
  sub->add_option("--csv", args->csv, "Append one CSV line per device per sample to FILE");
  sub->add_option("--count", args->count, "Stop after N samples (0 = until interrupted)");
  auto* replay =
      sub->add_option("--replay", args->replay, "Show a JSON Lines or CSV recording again");
  sub->add_option("--speed", args->speed, "Replay speed factor (2 = twice as fast)")
      ->capture_default_str()
      ->needs(replay);
  sub->add_option("--max-gap", args->max_gap,
                  "Replay: a longer gap between two samples is skipped, not waited through")
      ->capture_default_str()
      ->needs(replay);
  add_fake_gpus_option(*sub, args->fake_gpus);
  add_host_root_option(*sub, args->host_root);
  sub->callback([args, &ctx] { run_watch(*args, ctx); });
}

}  // namespace vramkit::cli
