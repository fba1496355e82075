// The Slurm report's text and JSON (on the sacct output of tests/data/cluster/sacct/report.psv)
// and run_sacct against stand-in sacct programs on PATH.
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "vramkit/cluster/slurm_report.hpp"
#include "vramkit/core/error.hpp"
#include "vramkit/core/units.hpp"

namespace vramkit::cluster {
namespace {

namespace fs = std::filesystem;

slurm_usage_report fixture_report(const over_request_rule& rule) {
  std::ifstream in(std::string(VRAMKIT_SOURCE_DIR) + "/tests/data/cluster/sacct/report.psv");
  std::ostringstream s;
  s << in.rdbuf();
  return over_requested_jobs(parse_sacct_usage(s.str(), 4 * GiB), rule);
}

TEST(SlurmReportOutput, TextSaysWhatWasReadThenListsTheJobs) {
  const over_request_rule rule;
  const std::string text = to_text(fixture_report(rule), rule);
  EXPECT_EQ(text.rfind("8 jobs read, 6 with a request and a recorded peak (gres/gpumem), 1 without "
                       "a recorded peak\n",
                       0),
            0U)
      << text;
  EXPECT_NE(text.find("\n4 asked for at least 2x what they used and 1.00 GiB more:\n"),
            std::string::npos);
  EXPECT_NE(text.find("\nJOB            USER         NAME                 STATE             ASKED"
                      "        PEAK   USED      UNUSED  FROM\n"),
            std::string::npos)
      << text;
  // The line of one job, column by column (fields cut to their widths).
  EXPECT_NE(text.find("\n4280           frank        big-ask              CANCELLED b   74.51 GiB "
                      "1000.00 MiB     1%   73.53 GiB  comment\n"),
            std::string::npos)
      << text;
}

TEST(SlurmReportOutput, TextPrintsTheRatioAsPrintfsGeneralFormat) {
  over_request_rule rule;
  rule.min_ratio = 1000;  // only the job that used nothing
  const std::string text = to_text(fixture_report(rule), rule);
  EXPECT_NE(text.find("\n1 asked for at least 1e+03x what they used"), std::string::npos) << text;
  EXPECT_NE(text.find("\n4300           hank         idle-gpu"), std::string::npos) << text;
}

TEST(SlurmReportOutput, TextWithoutOverRequestsHasNoTable) {
  over_request_rule rule;
  rule.min_unused_bytes = 1024 * GiB;
  const std::string text = to_text(fixture_report(rule), rule);
  EXPECT_NE(text.find("\n0 asked for at least 2x"), std::string::npos) << text;
  EXPECT_EQ(text.find("JOB "), std::string::npos) << text;
}

TEST(SlurmReportOutput, TextEscapesControlCharactersOfJobFields) {
  slurm_usage_report r;
  // A job name that would set the terminal's title were it printed raw.
  r.over_requested.push_back({.job_id = "1",
                              .name = "x\x1b]0;owned\x07",
                              .user = "u",
                              .state = "COMPLETED",
                              .requested_bytes = 8 * GiB,
                              .requested_from = "comment",
                              .peak_bytes = GiB});
  r.jobs = r.judged = 1;
  const std::string text = to_text(r, {});
  EXPECT_EQ(text.find('\x1b'), std::string::npos) << text;
  EXPECT_EQ(text.find('\x07'), std::string::npos) << text;
}

TEST(SlurmReportOutput, JsonCarriesTheCountsTheRuleAndEachJob) {
  over_request_rule rule;
  rule.min_ratio = 2.5;
  const auto j = nlohmann::json::parse(to_json(fixture_report(rule), rule));
  EXPECT_EQ(j.at("schema_version"), 1);
  EXPECT_EQ(j.at("jobs"), 8);
  EXPECT_EQ(j.at("judged"), 6);
  EXPECT_EQ(j.at("without_usage"), 1);
  EXPECT_EQ(j.at("min_ratio"), 2.5);
  EXPECT_EQ(j.at("min_unused_bytes"), GiB);
  ASSERT_FALSE(j.at("over_requested").empty());
  const auto& first = j.at("over_requested").at(0);
  EXPECT_EQ(first.at("job_id"), "4280");
  EXPECT_EQ(first.at("unused_bytes").get<std::uint64_t>(),
            first.at("requested_bytes").get<std::uint64_t>() -
                first.at("peak_bytes").get<std::uint64_t>());
}

TEST(SlurmReportOutput, JsonReplacesInvalidUtf8) {
  slurm_usage_report r;
  slurm_job_usage j;
  j.job_id = "1";
  j.name = "bad\xff";
  j.requested_bytes = 2 * GiB;
  j.peak_bytes = 0;
  r.over_requested.push_back(j);
  std::string text;
  ASSERT_NO_THROW(text = to_json(r, {}));
  EXPECT_EQ(nlohmann::json::parse(text).at("over_requested").at(0).at("name"), "bad\xef\xbf\xbd");
}

// A folder on PATH holding a stand-in `sacct` script; PATH is restored after the test.
class stand_in_sacct {
 public:
  explicit stand_in_sacct(const std::string& body)
      : dir_(fs::temp_directory_path() / ("vramkit-sacct-" + std::to_string(::getpid()))),
        old_path_(std::getenv("PATH") != nullptr ? std::getenv("PATH") : "") {
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    const fs::path script = dir_ / "sacct";
    std::ofstream(script) << "#!/bin/sh\n" << body << "\n";
    ::chmod(script.c_str(), 0755);
    ::setenv("PATH", (dir_.string() + ":" + old_path_).c_str(), 1);
  }
  ~stand_in_sacct() {
    ::setenv("PATH", old_path_.c_str(), 1);
    fs::remove_all(dir_);
  }
  stand_in_sacct(const stand_in_sacct&) = delete;
  stand_in_sacct& operator=(const stand_in_sacct&) = delete;

 private:
  fs::path dir_;
  std::string old_path_;
};

TEST(SlurmReportOutput, RunSacctPassesItsArgumentsAndReturnsItsOutput) {
  const stand_in_sacct sacct(R"(for a in "$@"; do echo "$a"; done)");
  EXPECT_EQ(run_sacct("now-2days"), "--parsable2\n--allusers\n--starttime=now-2days\n--format=" +
                                        std::string(sacct_report_fields) + "\n");
}

TEST(SlurmReportOutput, RunSacctFailsWithItsExitStatus) {
  const stand_in_sacct sacct("echo partial; exit 3");
  try {
    (void)run_sacct("now-1day");
    FAIL() << "no error";
  } catch (const error& e) {
    EXPECT_STREQ(e.what(), "sacct failed (exit status 3)");
  }
}

TEST(SlurmReportOutput, RunSacctSaysWhenItIsNotOnPath) {
  const char* old = std::getenv("PATH");
  const std::string saved = old != nullptr ? old : "";
  ::setenv("PATH", "/nonexistent", 1);
  try {
    (void)run_sacct("now-1day");
    ADD_FAILURE() << "no error";
  } catch (const error& e) {
    EXPECT_STREQ(e.what(), "cannot run sacct (not on PATH): give its output with --sacct FILE");
  }
  ::setenv("PATH", saved.c_str(), 1);
}

}  // namespace
}  // namespace vramkit::cluster
