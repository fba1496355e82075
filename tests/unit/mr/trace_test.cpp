// The compact trace format: round trip, every malformed input named with its line, replay.
#include "vramkit/mr/trace.hpp"

#include <gtest/gtest.h>

#include <sstream>

#include "vramkit/core/error.hpp"
#include "vramkit/core/host_sim_device.hpp"
#include "vramkit/mr/device_api_resource.hpp"
#include "vramkit/mr/pool_resource.hpp"

namespace vramkit::mr {
namespace {

trace parse_text(const std::string& s) {
  std::istringstream in(s);
  return parse_trace(in, "t.trace");
}

std::string error_of(const std::string& s) {
  try {
    (void)parse_text(s);
  } catch (const invalid_input& e) {
    return e.what();
  }
  return "";
}

TEST(Trace, RoundTripsThroughText) {
  const trace t = random_trace(50, 256, 64 * MiB, 3);
  std::stringstream text;
  write_trace(text, t);
  const trace back = parse_trace(text);
  EXPECT_EQ(back.events, t.events);
  EXPECT_EQ(back.comments, t.comments);
  EXPECT_EQ(back.stream_count(), 1u);
}

TEST(Trace, RoundTripsThroughAFile) {
  trace t;
  t.comments.push_back(" source: test");
  t.events = {{trace_event::op_t::allocate, 7, 1000, 0, 1},
              {trace_event::op_t::allocate, 8, 5, 2, 2},
              {trace_event::op_t::free, 7, 1000, 0, 3}};
  const std::string path = std::string(VRAMKIT_BINARY_DIR) + "/mr_trace_test.trace";
  write_trace(path, t);
  const trace back = read_trace(path);
  EXPECT_EQ(back.events, t.events);
  EXPECT_EQ(back.stream_count(), 3u);
  std::remove(path.c_str());
}

TEST(Trace, NamesTheLineOfEachMalformedInput) {
  EXPECT_NE(error_of("# other\n").find("t.trace:1: expected '# vramkit-trace v1'"),
            std::string::npos);
  EXPECT_NE(error_of("").find("empty trace"), std::string::npos);
  const std::string m = "# vramkit-trace v1\n";
  EXPECT_NE(error_of(m + "x 1 2 3 4\n").find("t.trace:2: expected 'a|f"), std::string::npos);
  EXPECT_NE(error_of(m + "a 1 2 3\n").find("t.trace:2:"), std::string::npos);
  EXPECT_NE(error_of(m + "a 1 -2 0 0\n").find("non-negative integers"), std::string::npos);
  EXPECT_NE(error_of(m + "a 1 2x 0 0\n").find("non-negative integers"), std::string::npos);
  EXPECT_NE(error_of(m + "a 1 2 0 5\na 2 2 0 4\n").find("t.trace:3: time 4 goes back"),
            std::string::npos);
  EXPECT_NE(error_of(m + "a 1 2 0 0\na 1 2 0 0\n").find("allocated while still live"),
            std::string::npos);
  EXPECT_NE(error_of(m + "f 1 2 0 0\n").find("free of id 1 that is not live"), std::string::npos);
  EXPECT_NE(error_of(m + "a 1 2 0 0\nf 1 3 0 1\n").find("with 3 bytes, allocated with 2"),
            std::string::npos);
  EXPECT_THROW((void)read_trace("/nonexistent/x.trace"), invalid_input);
}

TEST(Trace, AcceptsCommentsBlankLinesAndLiveBlocksAtTheEnd) {
  const trace t =
      parse_text("# vramkit-trace v1\n# source: x\n\na 1 10 0 0\na 2 20 1 5\nf 1 10 0 6\n");
  EXPECT_EQ(t.events.size(), 3u);
  ASSERT_EQ(t.comments.size(), 1u);
  EXPECT_EQ(t.comments[0], " source: x");
}

TEST(Trace, ReplayFreesWhatTheTraceLeavesLiveAndMeasuresThePeak) {
  auto dev = std::make_shared<host_sim_device>();
  owned_stream s0(*dev);
  owned_stream s1(*dev);
  pool_resource pool(std::make_shared<device_api_resource>(dev), dev);
  const trace t = parse_text(
      "# vramkit-trace v1\na 1 1000 0 0\na 2 3000000 1 1\nf 1 1000 0 2\n"
      "a 3 500 0 3\n");
  const stream_view streams[] = {s0, s1};
  replay_options o;
  o.record_latencies = true;
  const replay_result r = replay(pool, t, streams, o);
  EXPECT_EQ(r.allocations, 3u);
  EXPECT_EQ(r.frees, 3u);
  EXPECT_EQ(r.peak_live_bytes, 3001000u);
  EXPECT_EQ(r.allocate_ns.size(), 3u);
  EXPECT_EQ(r.free_ns.size(), 1u);
  EXPECT_EQ(pool.allocated_bytes(), 0u);
  EXPECT_EQ(pool.report().streams, 2u);
}

TEST(Trace, RandomTraceIsDeterministicAndInRange) {
  const trace a = random_trace(2000, 256, 64 * MiB, 42);
  const trace b = random_trace(2000, 256, 64 * MiB, 42);
  EXPECT_EQ(a.events, b.events);
  ASSERT_EQ(a.events.size(), 4000u);
  for (const auto& e : a.events) {
    EXPECT_GE(e.bytes, 256u);
    EXPECT_LE(e.bytes, 64 * MiB);
  }
}

}  // namespace
}  // namespace vramkit::mr
