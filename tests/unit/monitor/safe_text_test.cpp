// printable(): what reaches a terminal or a CSV file from process names, command lines and GPU
// names; and the callers that must use it (snapshot table, CSV lines).
#include "vramkit/monitor/safe_text.hpp"

#include <gtest/gtest.h>

#include "vramkit/monitor/recording.hpp"
#include "vramkit/monitor/terminal_view.hpp"

namespace vramkit::monitor {
namespace {

bool has_control(const std::string& s) {
  for (unsigned char c : s)
    if ((c < 0x20 && c != '\n') || c == 0x7f) return true;
  return s.find("\xc2\x9b") != std::string::npos;
}

TEST(Printable, EscapesTerminalControlsAndKeepsText) {
  EXPECT_EQ(printable("\x1b]0;owned\a"), "\\x1b]0;owned\\x07");
  EXPECT_EQ(printable("python3 train.py --lr 3e-4"), "python3 train.py --lr 3e-4");
  EXPECT_EQ(printable("tab\there\nnew\rcr\x7f"), "tab\\x09here\\x0anew\\x0dcr\\x7f");
  EXPECT_EQ(printable("C1 CSI \xc2\x9b"
                      "2J"),
            "C1 CSI \\u009b2J");
  EXPECT_EQ(printable("caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x9a\x80"),
            "caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x9a\x80");
  // Invalid UTF-8: a lone continuation byte, an overlong NUL, a truncated sequence.
  EXPECT_EQ(printable("a\x80z"), "a\\x80z");
  EXPECT_EQ(printable("\xc0\x80"), "\\xc0\\x80");
  EXPECT_EQ(printable("end\xe6\x97"), "end\\xe6\\x97");
  // A backslash is doubled, so "\x1b" typed by a user is not confused with an escaped ESC.
  EXPECT_EQ(printable("C:\\x1b"), "C:\\\\x1b");
  EXPECT_EQ(printable(std::string("nul\0byte", 8)), "nul\\x00byte");
}

sample hostile_sample() {
  sample s;
  s.timestamp_ms = 1764547200000;
  gpu_sample g;
  g.index = 0;
  g.name = "H200\x1b[2J";
  g.uuid = "GPU-\x07";
  g.memory_used_bytes = 1048576000;
  gpu_process p;
  p.pid = 42;
  p.user = "root\x1b";
  p.command = "\x1b]0;owned\a --arg";
  p.used_bytes = 1;
  g.processes.push_back(p);
  s.gpus.push_back(g);
  return s;
}

TEST(Printable, SnapshotTableNeverPrintsRawControls) {
  const std::string text = format_snapshot(hostile_sample());
  EXPECT_FALSE(has_control(text)) << text;
  EXPECT_NE(text.find("\\x1b]0;owned\\x07 --arg"), std::string::npos) << text;
  EXPECT_NE(text.find("H200\\x1b[2J"), std::string::npos) << text;
}

TEST(Printable, CsvLinesNeverCarryRawControls) {
  for (const auto& line : to_csv_lines(hostile_sample())) {
    EXPECT_FALSE(has_control(line)) << line;
    EXPECT_NE(line.find(",1048576000,"), std::string::npos) << line;
  }
}

TEST(RecordingNumbers, NegativeOrFractionalCountsAreRefusedByLine) {
  const std::string base =
      R"({"schema_version":SV,"timestamp_ms":1,"gpus":[{"index":0,"memory_used_bytes":V}]})";
  auto line = [&](const std::string& v) {
    std::string s = base;
    s.replace(s.find("SV"), 2, std::to_string(sample_schema_version));
    s.replace(s.find('V', s.find("memory_used_bytes")), 1, v);
    return s + "\n";
  };
  auto ok = parse_recording(line("1048576000"));
  ASSERT_EQ(ok.samples.size(), 1U);
  EXPECT_EQ(*ok.samples[0].gpus[0].memory_used_bytes, 1048576000U);
  for (const char* v : {"-5", "1.5", "1e30", "\"12\""}) {
    auto rec = parse_recording(line(v));
    EXPECT_TRUE(rec.samples.empty()) << v;
    ASSERT_EQ(rec.errors.size(), 1U) << v;
    EXPECT_NE(rec.errors[0].message.find("memory_used_bytes"), std::string::npos)
        << rec.errors[0].message;
  }
}

TEST(RecordingNumbers, NegativeCsvCountsAreRefused) {
  std::string csv = csv_header() + "\n";
  auto lines = to_csv_lines(hostile_sample());
  std::string row = lines.front();
  row.replace(row.find("1048576000"), 10, "-1048576000");
  auto rec = parse_recording(csv + row + "\n");
  ASSERT_EQ(rec.errors.size(), 1U);
  EXPECT_NE(rec.errors[0].message.find("negative"), std::string::npos) << rec.errors[0].message;
}

}  // namespace
}  // namespace vramkit::monitor
