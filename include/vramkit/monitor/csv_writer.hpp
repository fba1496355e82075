// csv_writer: appends samples to a CSV recording file (the format of to_csv_lines), writing the
// header first when the file is new or empty, so that a file recorded in several runs reads back
// as one recording. Not thread-safe: write from one thread.
#pragma once

#include <fstream>
#include <string>

#include "vramkit/monitor/sample.hpp"

namespace vramkit::monitor {

class csv_writer {
 public:
  /// Opens `path` for appending (creating it) and writes csv_header() when it was missing or
  /// empty. Throws invalid_input "cannot write CSV file PATH" when it cannot be opened.
  explicit csv_writer(const std::string& path);

  /// Appends the sample's rows (one per GPU) and flushes, so that a reader sees whole samples.
  /// Throws vramkit::error "writing PATH failed" when the write fails (a full disk).
  void write(const sample& s);

 private:
  std::string path_;
  std::ofstream out_;
};

}  // namespace vramkit::monitor
