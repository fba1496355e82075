// csv_writer: one header however many runs append to a file, whole samples that read back as a
// recording, and the errors for a file that cannot be written.
#include "vramkit/monitor/csv_writer.hpp"

#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "vramkit/core/error.hpp"
#include "vramkit/monitor/recording.hpp"

namespace vramkit::monitor {
namespace {

namespace fs = std::filesystem;

sample at(std::int64_t ms, unsigned gpus) {
  sample s;
  s.timestamp_ms = ms;
  s.gpu_source = "fake";
  for (unsigned i = 0; i < gpus; ++i) {
    gpu_sample g;
    g.index = i;
    g.name = "NVIDIA H200";
    g.memory_total_bytes = 150754820096ULL;
    g.memory_used_bytes = 1000 * (i + 1);
    s.gpus.push_back(g);
  }
  s.host.memory = host_memory{};
  s.host.memory->total_bytes = 1ULL << 30;
  return s;
}

std::string text_of(const fs::path& p) {
  std::ifstream in(p);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// A folder of its own for each test, removed after it.
struct scratch_dir {
  scratch_dir()
      : path(fs::temp_directory_path() / ("vramkit-csv-writer-" + std::to_string(::getpid()))) {
    fs::remove_all(path);  // a crashed run's
    fs::create_directories(path);
  }
  ~scratch_dir() { fs::remove_all(path); }
  scratch_dir(const scratch_dir&) = delete;
  scratch_dir& operator=(const scratch_dir&) = delete;
  fs::path path;
};

TEST(CsvWriter, ANewFileGetsTheHeaderThenOneRowPerGpu) {
  const scratch_dir dir;
  const auto path = dir.path / "new.csv";
  {
    csv_writer w(path.string());
    w.write(at(1000, 2));
  }
  const std::string text = text_of(path);
  EXPECT_EQ(text.rfind(csv_header() + "\n", 0), 0u);
  EXPECT_EQ(count(text, "\n"), 3u);
}

TEST(CsvWriter, AppendingRunsKeepOneHeaderAndReadBackAsOneRecording) {
  const scratch_dir dir;
  const auto path = dir.path / "runs.csv";
  csv_writer(path.string()).write(at(1000, 2));
  csv_writer(path.string()).write(at(2000, 2));
  const std::string text = text_of(path);
  EXPECT_EQ(count(text, csv_header()), 1u);
  const recording r = read_recording(path);
  EXPECT_TRUE(r.errors.empty());
  ASSERT_EQ(r.samples.size(), 2u);
  EXPECT_EQ(r.samples[1].timestamp_ms, 2000);
  ASSERT_EQ(r.samples[1].gpus.size(), 2u);
  EXPECT_EQ(r.samples[1].gpus[1].memory_used_bytes, 2000u);
}

TEST(CsvWriter, AnEmptyFileGetsTheHeaderToo) {
  const scratch_dir dir;
  const auto path = dir.path / "empty.csv";
  std::ofstream(path).close();
  csv_writer(path.string()).write(at(1000, 1));
  EXPECT_EQ(text_of(path).rfind(csv_header() + "\n", 0), 0u);
}

TEST(CsvWriter, AFileThatCannotBeOpenedIsBadInput) {
  const scratch_dir dir;
  EXPECT_THROW(csv_writer((dir.path / "no" / "such" / "folder.csv").string()), invalid_input);
}

TEST(CsvWriter, AFailedWriteIsAnError) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full on this system";
  csv_writer w("/dev/full");
  EXPECT_THROW(w.write(at(1000, 1)), error);
}

}  // namespace
}  // namespace vramkit::monitor
