// `vramkit slurm report`: Slurm jobs that asked for far more GPU memory than they used, from
// sacct (run here, or its --parsable2 output from a file or stdin).
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "vramkit/cluster/slurm_report.hpp"
#include "vramkit/core/error.hpp"
#include "vramkit/core/units.hpp"
#include "vramkit/monitor/safe_text.hpp"

namespace vramkit::cli {
namespace {

struct report_args {
  std::string sacct_file;
  std::string since = "now-7days";
  std::string shard_size;
  double min_ratio = 2.0;
  std::string min_unused = "1GiB";
  bool json = false;
};

// Runs `sacct` with a fixed argument list (no shell) and returns its standard output; throws
// error with its exit status or why it could not start.
std::string run_sacct(const std::string& since) {
  const std::string fields = std::string("--format=") + std::string(cluster::sacct_report_fields);
  const std::string start = "--starttime=" + since;
  std::vector<const char*> argv = {"sacct",       "--parsable2",  "--allusers",
                                   start.c_str(), fields.c_str(), nullptr};
  int fds[2];
  if (pipe(fds) != 0) throw error(fmt::format("cannot run sacct: {}", std::strerror(errno)));
  const pid_t pid = fork();
  if (pid < 0) throw error(fmt::format("cannot run sacct: {}", std::strerror(errno)));
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    close(fds[0]);
    close(fds[1]);
    execvp("sacct", const_cast<char* const*>(argv.data()));
    _exit(127);
  }
  close(fds[1]);
  std::string out;
  char buf[65536];
  for (;;) {
    const ssize_t n = read(fds[0], buf, sizeof buf);
    if (n > 0) {
      out.append(buf, static_cast<std::size_t>(n));
    } else if (n == 0 || errno != EINTR) {
      break;
    }
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 127)
    throw error("cannot run sacct (not on PATH): give its output with --sacct FILE");
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    throw error(
        fmt::format("sacct failed (exit status {})", WIFEXITED(status) ? WEXITSTATUS(status) : -1));
  return out;
}

std::string bytes_text(std::uint64_t b) { return format_bytes(static_cast<double>(b)); }

void run_report(const report_args& a, command_context& ctx) {
  if (!(a.min_ratio >= 1.0)) throw invalid_input("--min-ratio must be at least 1");
  const std::uint64_t shard_bytes = a.shard_size.empty() ? 0 : parse_bytes(a.shard_size);
  if (!a.shard_size.empty() && shard_bytes == 0)
    throw invalid_input("--shard-size must be above zero");
  cluster::over_request_rule rule;
  rule.min_ratio = a.min_ratio;
  rule.min_unused_bytes = parse_bytes(a.min_unused);
  std::string text;
  if (a.sacct_file == "-") {
    text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  } else if (!a.sacct_file.empty()) {
    text = read_input_file(a.sacct_file, "sacct output");
  } else {
    text = run_sacct(a.since);
  }
  const auto jobs = cluster::parse_sacct_usage(text, shard_bytes);
  const auto r = cluster::over_requested_jobs(jobs, rule);
  if (a.json) {
    nlohmann::json rows = nlohmann::json::array();
    for (const auto& j : r.over_requested) {
      rows.push_back({{"job_id", j.job_id},
                      {"name", j.name},
                      {"user", j.user},
                      {"state", j.state},
                      {"requested_bytes", *j.requested_bytes},
                      {"requested_from", j.requested_from},
                      {"peak_bytes", *j.peak_bytes},
                      {"unused_bytes", *j.requested_bytes - *j.peak_bytes}});
    }
    nlohmann::json out{{"schema_version", 1},
                       {"jobs", r.jobs},
                       {"judged", r.judged},
                       {"without_usage", r.without_usage},
                       {"requested_bytes", r.requested_bytes},
                       {"used_bytes", r.used_bytes},
                       {"min_ratio", rule.min_ratio},
                       {"min_unused_bytes", rule.min_unused_bytes},
                       {"over_requested", std::move(rows)}};
    std::puts(out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    std::printf(
        "%zu jobs read, %zu with a request and a recorded peak (gres/gpumem), %zu without "
        "a recorded peak\n",
        r.jobs, r.judged, r.without_usage);
    if (r.judged > 0) {
      std::printf("asked %s, used at peak %s (%.0f%%)\n", bytes_text(r.requested_bytes).c_str(),
                  bytes_text(r.used_bytes).c_str(),
                  r.requested_bytes > 0 ? 100.0 * static_cast<double>(r.used_bytes) /
                                              static_cast<double>(r.requested_bytes)
                                        : 0.0);
    }
    std::printf("%zu asked for at least %.3gx what they used and %s more:\n",
                r.over_requested.size(), rule.min_ratio, bytes_text(rule.min_unused_bytes).c_str());
    if (!r.over_requested.empty()) {
      std::printf("%-14s %-12s %-20s %-11s %11s %11s %6s %11s  %s\n", "JOB", "USER", "NAME",
                  "STATE", "ASKED", "PEAK", "USED", "UNUSED", "FROM");
      for (const auto& j : r.over_requested) {
        std::printf(
            "%-14s %-12s %-20s %-11s %11s %11s %5.0f%% %11s  %s\n",
            monitor::printable(j.job_id).c_str(), monitor::printable(j.user.substr(0, 12)).c_str(),
            monitor::printable(j.name.substr(0, 20)).c_str(),
            monitor::printable(j.state.substr(0, 11)).c_str(),
            bytes_text(*j.requested_bytes).c_str(), bytes_text(*j.peak_bytes).c_str(),
            100.0 * static_cast<double>(*j.peak_bytes) / static_cast<double>(*j.requested_bytes),
            bytes_text(*j.requested_bytes - *j.peak_bytes).c_str(), j.requested_from.c_str());
      }
    }
  }
  ctx.exit_code = 0;
}

}  // namespace

void add_slurm_report_command(CLI::App& slurm, command_context& ctx) {
  auto a = std::make_shared<report_args>();
  auto* report = slurm.add_subcommand(
      "report", "jobs that asked for far more GPU memory than they used (from sacct)");
  auto* file = report->add_option(
      "--sacct", a->sacct_file,
      "read `sacct --parsable2 --format=" + std::string(cluster::sacct_report_fields) +
          "` output from FILE ('-': stdin) instead of running sacct");
  report
      ->add_option("--since", a->since, "with sacct run here: jobs started since (its --starttime)")
      ->capture_default_str()
      ->excludes(file);
  report->add_option("--shard-size", a->shard_size,
                     "bytes per shard, to price jobs that asked by --gres=shard:N");
  report
      ->add_option("--min-ratio", a->min_ratio,
                   "list jobs that asked for at least this many times their peak")
      ->capture_default_str();
  report->add_option("--min-unused", a->min_unused, "... and left at least this much unused")
      ->capture_default_str();
  report->add_flag("--json", a->json, "print as JSON");
  report->callback([a, &ctx] { run_report(*a, ctx); });
}

}  // namespace vramkit::cli
