// trace: the compact allocation-trace format (reader, writer) and a replayer that runs a trace
// against any resource on N streams. Format, one event per line after '#' comment lines:
//   # vramkit-trace v1
//   a <id> <bytes> <stream> <time_ns>      allocate; id unique among live allocations
//   f <id> <bytes> <stream> <time_ns>      free the live allocation id
// Blocks still live at the end are freed by the replayer. Functions are thread-safe (no shared
// state); a trace object is a plain value.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <span>
#include <string>
#include <vector>

#include "vramkit/mr/memory_resource.hpp"

namespace vramkit::mr {

inline constexpr const char* trace_magic = "# vramkit-trace v1";

struct trace_event {
  enum class op_t : char { allocate = 'a', free = 'f' };
  op_t op = op_t::allocate;
  std::uint64_t id = 0;
  std::uint64_t bytes = 0;
  std::uint32_t stream = 0;  ///< small integer; 0 = the default stream
  std::int64_t time_ns = 0;
  friend bool operator==(const trace_event&, const trace_event&) = default;
};

struct trace {
  std::vector<std::string> comments;  ///< lines after the magic line, without the leading '#'
  std::vector<trace_event> events;
  /// The largest stream number used, plus one.
  [[nodiscard]] std::uint32_t stream_count() const;
};

/// Parses a trace; throws vramkit::invalid_input "<source>:<line>: <what is wrong>" on a wrong
/// magic line, a malformed or negative field, decreasing time, a live id allocated again, a free of
/// an id that is not live, or a free whose size differs from the allocation's.
trace parse_trace(std::istream& in, const std::string& source = "trace");
/// Reads and parses a file; throws invalid_input when it cannot be opened or is malformed.
trace read_trace(const std::string& path);
void write_trace(std::ostream& out, const trace& t);
/// Writes a file; throws vramkit::error when it cannot be written.
void write_trace(const std::string& path, const trace& t);

struct replay_options {
  bool record_latencies = false;  ///< keep the duration of each allocate and free
  std::size_t alignment = default_alignment;
};

struct replay_result {
  std::size_t allocations = 0;
  std::size_t frees = 0;              ///< including those of blocks left live by the trace
  double seconds = 0.0;               ///< wall time of the whole replay
  std::vector<double> allocate_ns;    ///< per allocate, when recorded
  std::vector<double> free_ns;        ///< per free, when recorded
  std::uint64_t peak_live_bytes = 0;  ///< of the requests, as the trace states them
};

/// Replays `t` on `resource`; trace stream k runs on streams[k % streams.size()] (an empty span
/// means the default stream for all). Allocation failures propagate (out_of_memory); blocks
/// already allocated are freed first.
replay_result replay(memory_resource& resource, const trace& t,
                     std::span<const stream_view> streams = {}, replay_options options = {});

/// A synthetic trace: `count` allocations of sizes uniform in [min_bytes, max_bytes] (seeded),
/// then their frees in allocation order; all on stream 0.
trace random_trace(std::size_t count, std::uint64_t min_bytes, std::uint64_t max_bytes,
                   std::uint64_t seed);

}  // namespace vramkit::mr
