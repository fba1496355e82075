// `vramkit probe`: measures the host and GPU memory hierarchy and prints the table (stdout),
// progress (stderr), and optionally JSON and a self-contained HTML page.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "commands.hpp"
#include "vramkit/core/error.hpp"
#include "vramkit/core/units.hpp"
#include "vramkit/probe/probe.hpp"
#include "vramkit/probe/report_html.hpp"
#include "vramkit/probe/report_json.hpp"
#include "vramkit/probe/report_table.hpp"

namespace vramkit::cli {
namespace {

struct probe_args {
  probe::probe_options options;  // --quick is bound here; the checked options are below
  bool list = false;
  std::vector<std::string> only;
  std::string json_file;
  std::string html_file;
  std::optional<int> threads;  // unset: all
  std::string size;
  std::string latency_size;
};

void write_file(const std::string& path, const std::string& text, const char* what) {
  if (path == "-") {
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
    return;
  }
  std::ofstream out(path, std::ios::binary);
  if (!out) throw invalid_input(fmt::format("{}: cannot write '{}'", what, path));
  out << text;
  if (!out.flush()) throw error(fmt::format("{}: writing '{}' failed", what, path));
}

// The --only section names, comma-separated, for its help.
std::string section_names() {
  std::string all;
  for (const auto& name : probe::probe_sections()) all += (all.empty() ? "" : ", ") + name;
  return all;
}

void run(const probe_args& a, command_context& ctx) {
  if (a.list) {
    for (const auto& [key, text] : probe::probe_keys())
      std::printf("%-46s %s\n", key.c_str(), text.c_str());
    return;
  }
  probe::probe_options o = a.options;
  for (const auto& s : a.only) {
    if (s.empty()) throw invalid_input("--only: empty section name");
    o.only.insert(s);
  }
  probe::check_sections(o.only);
  if (a.threads && *a.threads < 1)
    throw invalid_input("--threads: must be >= 1 (got " + std::to_string(*a.threads) + ")");
  o.host_threads = a.threads.value_or(0);
  if (!a.size.empty()) {
    o.host_buffer_bytes = parse_bytes(a.size);
    if (o.host_buffer_bytes < 64 * KiB) {
      throw invalid_input("--size: host buffer must be at least 64 KiB (got '" + a.size + "')");
    }
  }
  if (!a.latency_size.empty()) {
    o.max_latency_bytes = parse_bytes(a.latency_size);
    if (o.max_latency_bytes < 4 * KiB) {
      throw invalid_input("--latency-size: must be at least 4 KiB (got '" + a.latency_size + "')");
    }
  }
  o.progress = [](const std::string& line) {
    std::fprintf(stderr, "%s\n", line.c_str());
    std::fflush(stderr);
  };
  // Output files must be writable before minutes of measuring.
  for (const auto* f : {&a.json_file, &a.html_file}) {
    if (f->empty() || *f == "-") continue;
    std::ofstream probe_open(*f, std::ios::app);
    if (!probe_open)
      throw invalid_input(
          fmt::format("{}: cannot write '{}'", f == &a.json_file ? "--json" : "--html", *f));
  }

  const probe::probe_report report = probe::run_probe(o);
  // When stdout carries a document, the table goes to stderr so the document stays parseable.
  const bool document_to_stdout = a.json_file == "-" || a.html_file == "-";
  const std::string table = probe::to_table(report);
  std::fwrite(table.data(), 1, table.size(), document_to_stdout ? stderr : stdout);
  if (!a.json_file.empty()) write_file(a.json_file, probe::to_json(report) + "\n", "--json");
  if (!a.html_file.empty()) write_file(a.html_file, probe::to_html(report), "--html");
  if (probe::has_failures(report)) {
    std::fprintf(stderr, "vramkit: probe: a result failed its verification (see FAILED above)\n");
    ctx.exit_code = 1;
  } else if (auto missing = probe::unmeasured_section(report, o.only)) {
    std::fprintf(stderr, "vramkit: probe: %s: nothing measured (exit 3)\n", missing->c_str());
    ctx.exit_code = 3;
  }
}

}  // namespace

void add_probe_command(CLI::App& app, command_context& ctx) {
  auto args = std::make_shared<probe_args>();
  auto* sub =
      app.add_subcommand("probe", "measure the host and GPU memory hierarchy of this machine");
  sub->add_flag("--quick", args->options.quick,
                "shorter run (a few seconds on the host, <= 15 s with one H200)");
  sub->add_option("--only", args->only,
                  "sections to run, comma list or repeated: " + section_names())
      ->delimiter(',');
  sub->add_flag("--list", args->list,
                "print the stable key of every test with its description, then exit");
  sub->add_option("--json", args->json_file, "write the report as JSON to FILE ('-' = stdout)");
  sub->add_option("--html", args->html_file,
                  "write a self-contained HTML report to FILE ('-' = stdout)");
  sub->add_option("--threads", args->threads,
                  "host threads for the all-thread figures (default: all)");
  sub->add_option("--size", args->size,
                  "host bandwidth array size, e.g. 512MiB (default: >= 4x last-level cache)")
      ->check(byte_size_check());
  sub->add_option("--latency-size", args->latency_size,
                  "largest host latency working set, e.g. 64MiB (default: 1 GiB, quick 256 MiB)")
      ->check(byte_size_check());
  sub->callback([args, &ctx] { run(*args, ctx); });
}

}  // namespace vramkit::cli
