// statistics, limit and tracing adaptors, and the summary they feed.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "vramkit/core/error.hpp"
#include "vramkit/core/host_sim_device.hpp"
#include "vramkit/mr/device_api_resource.hpp"
#include "vramkit/mr/limit_adaptor.hpp"
#include "vramkit/mr/memory_summary.hpp"
#include "vramkit/mr/pool_resource.hpp"
#include "vramkit/mr/statistics_adaptor.hpp"
#include "vramkit/mr/tracing_adaptor.hpp"

namespace vramkit::mr {
namespace {

struct fixture {
  std::shared_ptr<host_sim_device> dev = std::make_shared<host_sim_device>();
  std::shared_ptr<pool_resource> pool =
      std::make_shared<pool_resource>(std::make_shared<device_api_resource>(dev), dev);
};

TEST(StatisticsAdaptor, CountsSmallAndLargeRequestsWithPeaks) {
  fixture f;
  statistics_adaptor stats(f.pool);
  void* a = stats.allocate(1000);
  void* b = stats.allocate(3 * MiB);
  stats.deallocate(a, 1000);
  void* c = stats.allocate(10);
  statistics_report r = stats.report();
  EXPECT_EQ(r.bytes.small.current, 10);
  EXPECT_EQ(r.bytes.small.peak, 1000);
  EXPECT_EQ(r.bytes.large.current, static_cast<std::int64_t>(3 * MiB));
  EXPECT_EQ(r.bytes.all.peak, static_cast<std::int64_t>(3 * MiB + 1000));
  EXPECT_EQ(r.bytes.all.total_in, static_cast<std::int64_t>(3 * MiB + 1010));
  EXPECT_EQ(r.allocations.all.current, 2);
  EXPECT_EQ(r.allocations.all.total_out, 1);
  stats.reset_peak();
  EXPECT_EQ(stats.report().bytes.all.peak, static_cast<std::int64_t>(3 * MiB + 10));
  stats.deallocate(b, 3 * MiB);
  stats.deallocate(c, 10);
  EXPECT_EQ(stats.report().bytes.all.current, 0);
}

TEST(StatisticsAdaptor, CountsFailedAllocations) {
  host_sim_options o;
  o.device_memory_bytes = 4 * MiB;
  auto dev = std::make_shared<host_sim_device>(o);
  statistics_adaptor stats(std::make_shared<device_api_resource>(dev));
  EXPECT_THROW((void)stats.allocate(8 * MiB), out_of_memory);
  EXPECT_EQ(stats.report().failed_allocations, 1u);
  EXPECT_EQ(stats.report().bytes.all.current, 0);
}

TEST(LimitAdaptor, RejectsPastTheBudgetWithTheSummaryInTheError) {
  fixture f;
  auto limit = std::make_shared<limit_adaptor>(f.pool, 8 * MiB);
  statistics_adaptor top(limit);
  void* a = top.allocate(6 * MiB);
  try {
    (void)top.allocate(3 * MiB);
    FAIL() << "expected out_of_memory";
  } catch (const out_of_memory& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("limit of 8388608 bytes"), std::string::npos) << what;
    EXPECT_NE(what.find("vramkit memory summary"), std::string::npos) << what;
    EXPECT_NE(what.find("limit(8.00 MiB)"), std::string::npos) << what;
    EXPECT_NE(what.find("pool(host_sim)"), std::string::npos) << what;
  }
  EXPECT_EQ(limit->used_bytes(), 6 * MiB);
  EXPECT_EQ(top.report().failed_allocations, 1u);
  void* b = top.allocate(2 * MiB);  // exactly up to the limit is fine
  top.deallocate(a, 6 * MiB);
  top.deallocate(b, 2 * MiB);
  EXPECT_EQ(limit->used_bytes(), 0u);
}

TEST(LimitAdaptor, GivesTheChargeBackWhenTheUpstreamFails) {
  host_sim_options o;
  o.device_memory_bytes = 4 * MiB;
  auto dev = std::make_shared<host_sim_device>(o);
  limit_adaptor limit(std::make_shared<device_api_resource>(dev), 1 * GiB);
  EXPECT_THROW((void)limit.allocate(8 * MiB), out_of_memory);
  EXPECT_EQ(limit.used_bytes(), 0u);
}

TEST(TracingAdaptor, RecordsEventsWithStreamsAndTagsAndReplaysThem) {
  fixture f;
  owned_stream s1(*f.dev);
  tracing_adaptor tracing(f.pool);
  void* a = tracing.allocate(100);
  void* b = nullptr;
  {
    trace_tag_scope tag("forward");
    b = tracing.allocate(5 * MiB, 256, s1);
  }
  EXPECT_EQ(current_trace_tag(), "");
  tracing.deallocate(a, 100);
  tracing.deallocate(b, 5 * MiB, 256, s1);
  const auto events = tracing.events();
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[1].event.stream, 1u);
  EXPECT_EQ(tracing.tags()[events[1].tag], "forward");
  const trace t = tracing.to_trace();
  std::stringstream text;
  write_trace(text, t);
  const trace back = parse_trace(text);
  EXPECT_EQ(back.events, t.events);
  EXPECT_EQ(back.events[3].op, trace_event::op_t::free);
  EXPECT_EQ(back.events[3].id, back.events[1].id);
  // The recorded trace replays on another resource.
  fixture g;
  const replay_result r = replay(*g.pool, back);
  EXPECT_EQ(r.allocations, 2u);
  EXPECT_EQ(r.peak_live_bytes, 5 * MiB + 100);
}

TEST(TracingAdaptor, WritesChromeTraceJsonAndCompactFiles) {
  fixture f;
  const std::string base = std::string(VRAMKIT_BINARY_DIR) + "/mr_tracing_test";
  {
    tracing_options o;
    o.chrome_trace_path = base + ".json";
    o.compact_trace_path = base + ".trace";
    tracing_adaptor tracing(f.pool, o);
    trace_tag_scope tag("step \"1\"");
    void* p = tracing.allocate(4096);
    void* q = tracing.allocate(8192);
    tracing.deallocate(p, 4096);
    tracing.deallocate(q, 8192);
  }
  std::ifstream in(base + ".json");
  const auto j = nlohmann::json::parse(in);
  int counters = 0, begins = 0, ends = 0;
  std::int64_t last_bytes = -1;
  for (const auto& e : j["traceEvents"]) {
    const std::string ph = e["ph"];
    if (ph == "C") {
      ++counters;
      last_bytes = e["args"]["bytes"];
    }
    if (ph == "b") ++begins;
    if (ph == "e") ++ends;
  }
  EXPECT_EQ(counters, 4);
  EXPECT_EQ(begins, 2);
  EXPECT_EQ(ends, 2);
  EXPECT_EQ(last_bytes, 0);
  const trace t = read_trace(base + ".trace");
  EXPECT_EQ(t.events.size(), 4u);
  std::remove((base + ".json").c_str());
  std::remove((base + ".trace").c_str());
}

TEST(MemorySummary, IsA75ColumnTableOfTheWholeStack) {
  fixture f;
  auto stats = std::make_shared<statistics_adaptor>(f.pool);
  limit_adaptor top(stats, 1 * GiB);
  void* p = top.allocate(3 * MiB);
  void* q = top.allocate(1000);
  const std::string s = memory_summary(top);
  std::istringstream lines(s);
  std::string line;
  int n = 0;
  while (std::getline(lines, line)) {
    ++n;
    EXPECT_EQ(line.size(), 77u) << "line " << n << ": '" << line << "'";
  }
  EXPECT_GT(n, 30);
  EXPECT_NE(s.find("limit(1.00 GiB) -> statistics -> pool(host_sim) -> host_sim"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("Reserved memory"), std::string::npos);
  EXPECT_NE(s.find("largest free block"), std::string::npos);
  EXPECT_NE(s.find("reserved / peak allocated"), std::string::npos);
  top.deallocate(p, 3 * MiB);
  top.deallocate(q, 1000);
}

TEST(MemorySummary, StatsJsonUsesPyTorchKeysAndResetPeakWalksTheStack) {
  fixture f;
  auto stats = std::make_shared<statistics_adaptor>(f.pool);
  void* p = stats->allocate(3 * MiB);
  stats->deallocate(p, 3 * MiB);
  auto j = nlohmann::json::parse(memory_stats_json(*stats));
  EXPECT_EQ(j["schema_version"], 1);
  EXPECT_EQ(j["allocated_bytes.all.current"], 0);
  EXPECT_EQ(j["allocated_bytes.all.peak"], static_cast<std::int64_t>(3 * MiB));
  EXPECT_EQ(j["reserved_bytes.large_pool.current"], static_cast<std::int64_t>(20 * MiB));
  EXPECT_EQ(j["segment.all.current"], 1);
  EXPECT_EQ(j["largest_free_block"], 20 * MiB);
  EXPECT_EQ(j["statistics"][0]["requested_bytes.all.peak"], static_cast<std::int64_t>(3 * MiB));
  reset_peak_stats(*stats);
  j = nlohmann::json::parse(memory_stats_json(*stats));
  EXPECT_EQ(j["allocated_bytes.all.peak"], 0);
  EXPECT_EQ(j["statistics"][0]["requested_bytes.all.peak"], 0);
}

}  // namespace
}  // namespace vramkit::mr
