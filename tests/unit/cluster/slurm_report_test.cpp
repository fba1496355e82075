// Requested against used GPU memory per Slurm job, from sacct --parsable2 output as Slurm 23.02+
// writes it with gres/gpumem accounting (tests/data/cluster/sacct/report.psv) and as Debian's
// 22.05 writes it without.
#include "vramkit/cluster/slurm_report.hpp"

#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "vramkit/core/error.hpp"

namespace vramkit::cluster {
namespace {

constexpr std::uint64_t GiB = std::uint64_t{1} << 30;
constexpr std::uint64_t MiB = std::uint64_t{1} << 20;

std::string fixture() {
  std::ifstream in(std::string(VRAMKIT_SOURCE_DIR) + "/tests/data/cluster/sacct/report.psv");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

const slurm_job_usage& job(const std::vector<slurm_job_usage>& jobs, const std::string& id) {
  for (const auto& j : jobs)
    if (j.job_id == id) return j;
  throw std::runtime_error("no job " + id);
}

TEST(SlurmReport, FoldsStepsIntoJobsWithRequestsAndPeaks) {
  const auto jobs = parse_sacct_usage(fixture(), 4 * GiB);
  ASSERT_EQ(jobs.size(), 8U);
  EXPECT_EQ(jobs.front().job_id, "4242");
  const auto& train = job(jobs, "4242");
  EXPECT_EQ(train.user, "alice");
  EXPECT_EQ(train.requested_bytes, 24 * GiB);
  EXPECT_EQ(train.requested_from, "comment");
  EXPECT_EQ(train.peak_bytes, 20480 * MiB);  // the batch step's, not the extern step's 0
  EXPECT_EQ(job(jobs, "4250").peak_bytes, static_cast<std::uint64_t>(5.5 * GiB));
  const auto& shards = job(jobs, "4251");
  EXPECT_EQ(shards.requested_bytes, 8 * 4 * GiB);
  EXPECT_EQ(shards.requested_from, "shards");
  EXPECT_FALSE(job(jobs, "4260").peak_bytes) << "no gres/gpumem recorded";
  EXPECT_EQ(job(jobs, "4270_3").peak_bytes, 7 * GiB);
  EXPECT_EQ(job(jobs, "4280").requested_bytes, 80'000'000'000U);  // GB is decimal
  EXPECT_EQ(job(jobs, "4280").state, "CANCELLED by 1001");
  EXPECT_FALSE(job(jobs, "4290").requested_bytes);
  EXPECT_EQ(job(jobs, "4300").peak_bytes, 0U);
  // Without a shard size, a shards-only request is unknown.
  EXPECT_FALSE(job(parse_sacct_usage(fixture(), 0), "4251").requested_bytes);
}

TEST(SlurmReport, ListsJobsThatAskedForFarMoreThanTheyUsed) {
  const auto r = over_requested_jobs(parse_sacct_usage(fixture(), 4 * GiB), over_request_rule{});
  EXPECT_EQ(r.jobs, 8U);
  EXPECT_EQ(r.judged, 6U);  // 4260 has no peak, 4290 no request
  EXPECT_EQ(r.without_usage, 1U);
  std::vector<std::string> ids;
  for (const auto& j : r.over_requested) ids.push_back(j.job_id);
  // Most unused first: 80 GB - 1000 MiB, 40 GiB - 5.5 GiB, 32 GiB - 2 GiB, 2 GiB - 0. Not listed:
  // 4242 (20 of 24 GiB) and 4270_3 (7 of 8 GiB) used most of theirs.
  EXPECT_EQ(ids, (std::vector<std::string>{"4280", "4250", "4251", "4300"}));
  over_request_rule strict;
  strict.min_ratio = 8;
  strict.min_unused_bytes = 4 * GiB;
  const auto s = over_requested_jobs(parse_sacct_usage(fixture(), 4 * GiB), strict);
  ids.clear();
  for (const auto& j : s.over_requested) ids.push_back(j.job_id);
  EXPECT_EQ(ids, (std::vector<std::string>{"4280", "4251"}));
}

TEST(SlurmReport, HeaderlessAndParsableOneOutputAndBadLines) {
  // --noheader: the documented field order; --parsable (not 2) ends lines with '|'.
  const std::string text =
      "77|a|u|COMPLETED|vram=10GiB|gres/shard=10|\n"
      "77.batch|batch||COMPLETED||gres/shard=10|gres/gpumem=1G|\n";
  const auto jobs = parse_sacct_usage(text, 0);
  ASSERT_EQ(jobs.size(), 1U);
  EXPECT_EQ(jobs[0].requested_bytes, 10 * GiB);
  EXPECT_EQ(jobs[0].peak_bytes, GiB);
  // Another field order, with extra fields.
  const auto other = parse_sacct_usage(
      "User|JobIDRaw|Elapsed|TRESUsageInMax|Comment\nu|9||| "
      "vram=1GiB\nu|9.0|00:01|gres/gpumem=1K|\n",
      0);
  ASSERT_EQ(other.size(), 1U);
  EXPECT_EQ(other[0].job_id, "9");
  EXPECT_EQ(other[0].peak_bytes, 1024U);
  EXPECT_THROW((void)parse_sacct_usage("JobID|Comment\n1|a|b\n", 0), invalid_input);
  EXPECT_THROW((void)parse_sacct_usage("garbage without fields\n", 0), invalid_input);
  EXPECT_EQ(parse_tres_bytes("38888M"), 38888 * MiB);
  EXPECT_EQ(parse_tres_bytes("0"), 0U);
  EXPECT_EQ(parse_tres_bytes("10372780K"), std::uint64_t{10372780} * 1024);
  EXPECT_FALSE(parse_tres_bytes("4X"));
  EXPECT_FALSE(parse_tres_bytes("G"));
  EXPECT_FALSE(parse_tres_bytes(""));
}

}  // namespace
}  // namespace vramkit::cluster
