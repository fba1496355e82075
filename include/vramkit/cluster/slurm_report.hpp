// GPU memory asked for against used, per Slurm job, from Slurm's accounting (`sacct --parsable2`):
// the request from the job's comment (vram=24GiB, as job_submit.lua reads it) or its shards
// (AllocTRES gres/shard=N x the shard size), the use from the largest gres/gpumem of its steps'
// TRESUsageInMax (Slurm 23.02+ gathers it with the gpu/nvml plugin). Pure functions, except
// run_sacct; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace vramkit::cluster {

/// The sacct fields the report reads, in the order used when the text has no header line.
inline constexpr std::string_view sacct_report_fields =
    "JobID,JobName,User,State,Comment,AllocTRES,TRESUsageInMax";

/// One job with its steps folded in.
struct slurm_job_usage {
  std::string job_id;  ///< "4242", "123_4" (array task), "77+1" (heterogeneous component)
  std::string name;
  std::string user;
  std::string state;
  std::optional<std::uint64_t> requested_bytes;  ///< per GPU
  std::string requested_from;                    ///< "comment" or "shards"
  std::optional<std::uint64_t> peak_bytes;       ///< largest gres/gpumem of any step
};

/// Reads `sacct --parsable2` output: a header line naming the fields (any order, others ignored)
/// or, without one, the fields of sacct_report_fields in that order. Rows of one job (4242,
/// 4242.batch, 4242.0, 4242.extern) become one entry, in the order jobs first appear.
/// `shard_bytes` (0: unknown) prices a gres/shard allocation when the comment names no size.
/// Throws invalid_input naming the line when a row has the wrong number of fields or the header
/// lacks JobID.
[[nodiscard]] std::vector<slurm_job_usage> parse_sacct_usage(std::string_view text,
                                                             std::uint64_t shard_bytes);

/// When a job counts as having asked for far more than it used.
struct over_request_rule {
  double min_ratio = 2.0;                                   ///< requested >= min_ratio x used
  std::uint64_t min_unused_bytes = std::uint64_t{1} << 30;  ///< and at least this much unused
};

struct slurm_usage_report {
  std::vector<slurm_job_usage> over_requested;  ///< most unused bytes first
  std::size_t jobs = 0;                         ///< jobs read
  std::size_t judged = 0;                       ///< jobs with both a request and a recorded use
  std::size_t without_usage = 0;                ///< requested, but no gres/gpumem recorded
  std::uint64_t requested_bytes = 0;            ///< sums over the judged jobs
  std::uint64_t used_bytes = 0;
};

/// Applies `rule` to `jobs`.
[[nodiscard]] slurm_usage_report over_requested_jobs(const std::vector<slurm_job_usage>& jobs,
                                                     const over_request_rule& rule);

/// A TRES size as sacct prints it ("38888M", "4G", "10372780K", "0"): binary K/M/G/T/P, no
/// suffix = bytes. nullopt when it is not one.
[[nodiscard]] std::optional<std::uint64_t> parse_tres_bytes(std::string_view text);

/// The report as JSON (schema_version 1): the counts and sums, the rule, and each over-requested
/// job with its unused bytes; indented by two, invalid UTF-8 in job fields replaced.
[[nodiscard]] std::string to_json(const slurm_usage_report& r, const over_request_rule& rule);

/// The report as text: what was read, the sums, then a table of the over-requested jobs (job
/// fields through monitor::printable, so that control characters reach no terminal).
[[nodiscard]] std::string to_text(const slurm_usage_report& r, const over_request_rule& rule);

/// Runs `sacct --parsable2 --allusers --starttime=SINCE --format=<sacct_report_fields>` from PATH
/// (no shell) and returns its standard output. Throws vramkit::error when it cannot start, is not
/// on PATH, or exits with a non-zero status.
[[nodiscard]] std::string run_sacct(const std::string& since);

}  // namespace vramkit::cluster
