// Requested against used GPU memory per Slurm job, from sacct's parsable output; the report's
// JSON and text; running sacct.
#include "vramkit/cluster/slurm_report.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <map>

#include <fmt/format.h>
#include <fmt/printf.h>
#include <nlohmann/json.hpp>

#include "vramkit/cluster/memory_request.hpp"
#include "vramkit/core/error.hpp"
#include "vramkit/core/units.hpp"
#include "vramkit/monitor/safe_text.hpp"

namespace vramkit::cluster {
namespace {

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  while (true) {
    const std::size_t at = s.find(sep);
    out.push_back(s.substr(0, at));
    if (at == std::string_view::npos) return out;
    s.remove_prefix(at + 1);
  }
}

// "a=1,gres/gpumem=4G,b=2" -> "4G" for key "gres/gpumem"; TRES names may carry a type
// ("gres/gpumem:a100"), summed by the caller when it wants all types.
std::vector<std::string_view> tres_values(std::string_view tres, std::string_view key) {
  std::vector<std::string_view> out;
  if (tres.empty()) return out;
  for (std::string_view item : split(tres, ',')) {
    const std::size_t eq = item.find('=');
    if (eq == std::string_view::npos) continue;
    const std::string_view name = item.substr(0, eq);
    if (name == key ||
        (name.size() > key.size() && name.substr(0, key.size()) == key && name[key.size()] == ':'))
      out.push_back(item.substr(eq + 1));
  }
  return out;
}

// The request a comment names, as job_submit.lua reads it: a vram=<size> item among
// comma/space/semicolon separated ones. nullopt when none or not a size.
std::optional<std::uint64_t> comment_request(std::string_view comment) {
  std::size_t at = 0;
  while ((at = comment.find("vram=", at)) != std::string_view::npos) {
    const bool starts_item =
        at == 0 || comment[at - 1] == ',' || comment[at - 1] == ';' || comment[at - 1] == ' ';
    at += 5;
    if (!starts_item) continue;
    const std::size_t end = std::min(comment.find_first_of(",; ", at), comment.size());
    try {
      return parse_memory_request(comment.substr(at, end - at));
    } catch (const std::exception&) {
      return std::nullopt;  // job_submit.lua refused such a job; nothing was asked for
    }
  }
  return std::nullopt;
}

std::string base_job_id(std::string_view id) { return std::string(id.substr(0, id.find('.'))); }

}  // namespace

std::optional<std::uint64_t> parse_tres_bytes(std::string_view text) {
  if (text.empty()) return std::nullopt;
  std::uint64_t scale = 1;
  const char last = static_cast<char>(std::toupper(static_cast<unsigned char>(text.back())));
  constexpr std::string_view units = "KMGTP";
  if (const std::size_t u = units.find(last); u != std::string_view::npos) {
    scale = std::uint64_t{1} << (10 * (u + 1));
    text.remove_suffix(1);
  }
  if (text.empty()) return std::nullopt;
  double v = 0;
  bool dot = false;
  double frac = 0.1;
  for (const char c : text) {
    if (c == '.' && !dot) {
      dot = true;
    } else if (std::isdigit(static_cast<unsigned char>(c)) != 0) {
      if (dot) {
        v += (c - '0') * frac;
        frac /= 10;
      } else {
        v = v * 10 + (c - '0');
      }
    } else {
      return std::nullopt;
    }
  }
  const double bytes = v * static_cast<double>(scale);
  if (bytes >= 1.8e19) return std::nullopt;
  return static_cast<std::uint64_t>(std::llround(bytes));
}

std::vector<slurm_job_usage> parse_sacct_usage(std::string_view text, std::uint64_t shard_bytes) {
  std::vector<std::string> names;
  for (std::string_view f : split(sacct_report_fields, ',')) names.emplace_back(f);
  std::map<std::string, std::size_t> column;
  auto index_columns = [&] {
    column.clear();
    for (std::size_t i = 0; i < names.size(); ++i) column[names[i]] = i;
  };
  index_columns();
  std::vector<slurm_job_usage> jobs;
  std::map<std::string, std::size_t> by_id;
  std::size_t line_no = 0;
  bool first = true;
  while (!text.empty()) {
    const std::size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    std::vector<std::string_view> fields = split(line, '|');
    // sacct --parsable (not 2) ends every line with a '|'.
    if (fields.size() == names.size() + 1 && fields.back().empty()) fields.pop_back();
    if (first) {
      first = false;
      if (std::any_of(fields.begin(), fields.end(),
                      [](std::string_view f) { return f == "JobID" || f == "JobIDRaw"; })) {
        names.assign(fields.begin(), fields.end());
        if (!fields.empty() && fields.back().empty()) names.pop_back();
        index_columns();
        if (column.count("JobIDRaw") != 0 && column.count("JobID") == 0)
          column["JobID"] = column["JobIDRaw"];
        continue;
      }
    }
    if (fields.size() != names.size())
      throw invalid_input(fmt::format("sacct line {}: {} fields, expected {} ({})", line_no,
                                      fields.size(), names.size(), fmt::join(names, "|")));
    auto get = [&](const char* name) -> std::string_view {
      auto it = column.find(name);
      return it == column.end() ? std::string_view() : fields[it->second];
    };
    const std::string_view raw_id = get("JobID");
    if (raw_id.empty()) throw invalid_input(fmt::format("sacct line {}: no JobID", line_no));
    const std::string id = base_job_id(raw_id);
    auto [it, fresh] = by_id.try_emplace(id, jobs.size());
    if (fresh) {
      jobs.emplace_back();
      jobs.back().job_id = id;
    }
    slurm_job_usage& j = jobs[it->second];
    const bool job_row = raw_id.find('.') == std::string_view::npos;
    if (job_row) {
      j.name = std::string(get("JobName"));
      j.user = std::string(get("User"));
      j.state = std::string(get("State"));
      if (auto r = comment_request(get("Comment"))) {
        j.requested_bytes = r;
        j.requested_from = "comment";
      } else if (shard_bytes > 0) {
        std::uint64_t shards = 0;
        for (std::string_view v : tres_values(get("AllocTRES"), "gres/shard")) {
          if (auto n = parse_tres_bytes(v)) shards += *n;
        }
        if (shards > 0) {
          j.requested_bytes = shards * shard_bytes;
          j.requested_from = "shards";
        }
      }
    }
    for (std::string_view v : tres_values(get("TRESUsageInMax"), "gres/gpumem")) {
      if (auto b = parse_tres_bytes(v)) j.peak_bytes = std::max(j.peak_bytes.value_or(0), *b);
    }
  }
  return jobs;
}

slurm_usage_report over_requested_jobs(const std::vector<slurm_job_usage>& jobs,
                                       const over_request_rule& rule) {
  slurm_usage_report r;
  r.jobs = jobs.size();
  for (const slurm_job_usage& j : jobs) {
    if (!j.requested_bytes) continue;
    if (!j.peak_bytes) {
      ++r.without_usage;
      continue;
    }
    ++r.judged;
    r.requested_bytes += *j.requested_bytes;
    r.used_bytes += *j.peak_bytes;
    const std::uint64_t unused =
        *j.requested_bytes > *j.peak_bytes ? *j.requested_bytes - *j.peak_bytes : 0;
    if (static_cast<double>(*j.requested_bytes) >=
            rule.min_ratio * static_cast<double>(*j.peak_bytes) &&
        unused >= rule.min_unused_bytes)
      r.over_requested.push_back(j);
  }
  std::stable_sort(r.over_requested.begin(), r.over_requested.end(),
                   [](const slurm_job_usage& a, const slurm_job_usage& b) {
                     return *a.requested_bytes - *a.peak_bytes > *b.requested_bytes - *b.peak_bytes;
                   });
  return r;
}

std::string to_json(const slurm_usage_report& r, const over_request_rule& rule) {
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
  return out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
}

namespace {

std::string bytes_text(std::uint64_t b) { return format_bytes(static_cast<double>(b)); }

std::string job_row(const slurm_job_usage& j) {
  return fmt::sprintf(
      "%-14s %-12s %-20s %-11s %11s %11s %5.0f%% %11s  %s\n", monitor::printable(j.job_id),
      monitor::printable(j.user.substr(0, 12)), monitor::printable(j.name.substr(0, 20)),
      monitor::printable(j.state.substr(0, 11)), bytes_text(*j.requested_bytes),
      bytes_text(*j.peak_bytes),
      100.0 * static_cast<double>(*j.peak_bytes) / static_cast<double>(*j.requested_bytes),
      bytes_text(*j.requested_bytes - *j.peak_bytes), j.requested_from);
}

}  // namespace

std::string to_text(const slurm_usage_report& r, const over_request_rule& rule) {
  std::string out = fmt::sprintf(
      "%zu jobs read, %zu with a request and a recorded peak (gres/gpumem), %zu without a "
      "recorded peak\n",
      r.jobs, r.judged, r.without_usage);
  if (r.judged > 0) {
    out += fmt::sprintf("asked %s, used at peak %s (%.0f%%)\n", bytes_text(r.requested_bytes),
                        bytes_text(r.used_bytes),
                        r.requested_bytes > 0 ? 100.0 * static_cast<double>(r.used_bytes) /
                                                    static_cast<double>(r.requested_bytes)
                                              : 0.0);
  }
  out += fmt::sprintf("%zu asked for at least %.3gx what they used and %s more:\n",
                      r.over_requested.size(), rule.min_ratio, bytes_text(rule.min_unused_bytes));
  if (!r.over_requested.empty()) {
    out += fmt::sprintf("%-14s %-12s %-20s %-11s %11s %11s %6s %11s  %s\n", "JOB", "USER", "NAME",
                        "STATE", "ASKED", "PEAK", "USED", "UNUSED", "FROM");
    for (const auto& j : r.over_requested) out += job_row(j);
  }
  return out;
}

std::string run_sacct(const std::string& since) {
  const std::string fields = std::string("--format=") + std::string(sacct_report_fields);
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

}  // namespace vramkit::cluster
