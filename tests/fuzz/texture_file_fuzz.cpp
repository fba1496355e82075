// Fuzzes the texture file readers (DDS, PNG through libpng, ASTC): the input is handed to
// read_texture_info and load_texture as a file (an in-memory file, rewritten per input). A file
// that loads holds exactly the texel bytes its header describes, and every level lies inside them.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_input.hpp"
#include "vramkit/texture/texture_file.hpp"

namespace {

// One memory-backed file for the whole run, named through /proc/self/fd.
struct memory_file {
  int fd = ::memfd_create("vramkit-texture-fuzz", 0);
  std::string path = "/proc/self/fd/" + std::to_string(fd);

  void replace(const std::uint8_t* data, std::size_t size) const {
    if (fd < 0 || ::ftruncate(fd, 0) != 0) vramkit::fuzz::property_failed("memfd unusable");
    std::size_t done = 0;
    while (done < size) {
      const auto n = ::pwrite(fd, data + done, size - done, static_cast<off_t>(done));
      if (n <= 0) vramkit::fuzz::property_failed("memfd write failed");
      done += static_cast<std::size_t>(n);
    }
  }
};

}  // namespace

// The entry point libFuzzer calls (its name is libFuzzer's).
// NOLINTNEXTLINE(readability-identifier-naming)
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const memory_file file;
  file.replace(data, size);
  vramkit::fuzz::expect_clean([&] { (void)vramkit::texture::read_texture_info(file.path); });
  vramkit::fuzz::expect_clean([&] {
    const auto image = vramkit::texture::load_texture(file.path);
    if (image.data.size() != image.info.data_bytes) {
      vramkit::fuzz::property_failed("texel data of another size than the header says");
    }
    for (int s = 0; s < image.info.surfaces(); ++s) {
      for (int l = 0; l < image.info.mip_levels; ++l) {
        if (image.info.level_offset(s, l) + image.info.level_size(l) > image.data.size()) {
          vramkit::fuzz::property_failed("a level outside the texel data");
        }
      }
    }
  });
  return 0;
}
