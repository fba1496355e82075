// A main for the fuzz harnesses where libFuzzer is not linked (any compiler): runs the harness
// once on every file named or found in the directories named, so the committed corpus and every
// input that once crashed (tests/fuzz/regressions/<name>/) are checked by the normal test suite.
// Exit code 0 when every input passed; a failing input aborts inside the harness.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

// NOLINTNEXTLINE(readability-identifier-naming)
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace {

std::size_t run_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)),
                                std::istreambuf_iterator<char>());
  std::fprintf(stderr, "replay: %s (%zu bytes)\n", path.string().c_str(), bytes.size());
  LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t inputs = 0;
  for (int i = 1; i < argc; ++i) {
    const std::filesystem::path arg(argv[i]);
    if (std::filesystem::is_directory(arg)) {
      for (const auto& entry : std::filesystem::directory_iterator(arg)) {
        if (entry.is_regular_file()) inputs += run_file(entry.path());
      }
    } else if (std::filesystem::exists(arg)) {
      inputs += run_file(arg);
    }
  }
  if (inputs == 0) {
    std::fprintf(stderr, "replay: no input found\n");
    return 1;
  }
  std::printf("replay: %zu inputs passed\n", inputs);
  return 0;
}
