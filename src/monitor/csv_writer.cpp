// csv_writer (csv_writer.hpp).
#include "vramkit/monitor/csv_writer.hpp"

#include <filesystem>
#include <system_error>

#include "vramkit/core/error.hpp"
#include "vramkit/monitor/recording.hpp"

namespace vramkit::monitor {

csv_writer::csv_writer(const std::string& path) : path_(path) {
  std::error_code ec;
  const bool fresh =
      !std::filesystem::exists(path, ec) || std::filesystem::file_size(path, ec) == 0;
  out_.open(path, std::ios::app);
  if (!out_) throw invalid_input("cannot write CSV file " + path);
  if (fresh) out_ << csv_header() << '\n';
}

void csv_writer::write(const sample& s) {
  for (const auto& line : to_csv_lines(s)) out_ << line << '\n';
  out_.flush();
  if (!out_) throw error("writing " + path_ + " failed");
}

}  // namespace vramkit::monitor
