// `vramkit slurm report`: Slurm jobs that asked for far more GPU memory than they used, from
// sacct (run here, or its --parsable2 output from a file or stdin).
#include <cstdio>
#include <iostream>
#include <iterator>
#include <string>

#include "commands.hpp"
#include "vramkit/cluster/slurm_report.hpp"
#include "vramkit/core/error.hpp"
#include "vramkit/core/units.hpp"

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
    text = cluster::run_sacct(a.since);
  }
  const auto jobs = cluster::parse_sacct_usage(text, shard_bytes);
  const auto r = cluster::over_requested_jobs(jobs, rule);
  if (a.json)
    std::puts(cluster::to_json(r, rule).c_str());
  else
    std::fputs(cluster::to_text(r, rule).c_str(), stdout);
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
  report
      ->add_option("--shard-size", a->shard_size,
                   "bytes per shard, to price jobs that asked by --gres=shard:N")
      ->check(byte_size_check());
  report
      ->add_option("--min-ratio", a->min_ratio,
                   "list jobs that asked for at least this many times their peak")
      ->capture_default_str();
  report->add_option("--min-unused", a->min_unused, "... and left at least this much unused")
      ->check(byte_size_check())
      ->capture_default_str();
  report->add_flag("--json", a->json, "print as JSON");
  report->callback([a, &ctx] { run_report(*a, ctx); });
}

}  // namespace vramkit::cli
