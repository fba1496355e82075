// Recording and replay of samples: JSON (one object per sample; JSON Lines when written one per
// line) and CSV (one row per device per sample, with a header). Reading tolerates damage: a
// malformed line is reported with its line number and skipped, the rest is read. Pure functions;
// thread-safe.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "vramkit/monitor/sample.hpp"

namespace vramkit::monitor {

/// One JSON object on one line (no trailing newline), schema in docs/monitor.md.
std::string to_json_line(const sample& s);
/// Parses one JSON line written by to_json_line; throws invalid_input naming what is wrong.
sample sample_from_json(const std::string& line);

/// The CSV header line (no newline).
std::string csv_header();
/// One CSV line per GPU (no newlines); a sample without GPUs gives one host-only line with
/// device "-".
std::vector<std::string> to_csv_lines(const sample& s);

/// "2026-11-29T17:12:38.123Z" from milliseconds since the epoch.
std::string format_iso8601_ms(std::int64_t epoch_ms);

struct recording_error {
  std::size_t line = 0;  ///< 1-based
  std::string message;
};

struct recording {
  std::vector<sample> samples;  ///< in file order
  std::vector<recording_error> errors;
  std::string format;  ///< "jsonl" or "csv"
};

/// Parses a recording (format detected from the first non-empty line: '{' -> JSON Lines, else
/// CSV with the header of csv_header()). CSV rows sharing one timestamp form one sample.
recording parse_recording(const std::string& text);
/// Reads and parses a file; throws invalid_input when it cannot be opened.
recording read_recording(const std::filesystem::path& path);

}  // namespace vramkit::monitor
