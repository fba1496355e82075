// DDS/PNG/ASTC readers: mip arithmetic, headers written by vramkit, by hand (legacy FourCCs) and by
// Debian's nvcompress and astcenc, and one-line errors for malformed or truncated files.
#include "vramkit/texture/texture_file.hpp"

#include <gtest/gtest.h>

#include <cstring>

#include "texture_test_support.hpp"

namespace vramkit::texture {
namespace {

using testing::read_all;
using testing::temp_dir;
using testing::write_all;
using tf = texture_format;

TEST(TextureFormat, ChainBytesMatchPublishedFigures) {
  EXPECT_EQ(chain_bytes(pixel_format::of(tf::bc1), 256, 256, 9), 43704u);
  EXPECT_EQ(chain_bytes(pixel_format::of(tf::bc6h), 256, 256, 9), 87408u);
  EXPECT_EQ(chain_bytes(pixel_format::of(tf::bc1), 4096, 4096, 13), 11184824u);
  EXPECT_EQ(chain_bytes(pixel_format::of(tf::bc7), 4096, 4096, 13), 22369648u);
  EXPECT_EQ(chain_bytes(pixel_format::of(tf::rgba8), 4096, 4096, 13), 89478484u);
  EXPECT_EQ(chain_bytes(pixel_format::of(tf::bc1), 1000, 600, full_mip_levels(1000, 600)), 400744u);
  EXPECT_EQ(chain_bytes(pixel_format::astc(6, 6), 4096, 4096, 13), 9961536u);
  EXPECT_EQ(chain_bytes(pixel_format::astc(8, 8), 4096, 4096, 13), 5592448u);
  EXPECT_EQ(chain_bytes(pixel_format::astc(12, 12), 4096, 4096, 13), 2497728u);
  EXPECT_EQ(chain_bytes(pixel_format::of(tf::bc7), 4096, 4096, 13, 1), 5592432u);
  EXPECT_EQ(chain_bytes(pixel_format::of(tf::bc1), 4, 4, 3), 24u);
  EXPECT_EQ(full_mip_levels(300, 200), 9);
  EXPECT_EQ(full_mip_levels(1, 1), 1);
  EXPECT_EQ(level_extent(300, 8), 1);
  EXPECT_EQ(level_extent(300, 1), 150);
}

TEST(TextureFormat, NamesRoundTrip) {
  for (const auto& f :
       {pixel_format::of(tf::bc1), pixel_format::of(tf::bc7, true),
        pixel_format::of(tf::bc4, false, true), pixel_format::of(tf::bc6h, false, true),
        pixel_format::astc(6, 6), pixel_format::astc(10, 8), pixel_format::of(tf::rgba8)}) {
    auto parsed = parse_pixel_format(f.name());
    ASSERT_TRUE(parsed) << f.name();
    EXPECT_EQ(*parsed, f) << f.name();
  }
  EXPECT_EQ(parse_pixel_format("astc-8x8")->block_width, 8);
  EXPECT_FALSE(parse_pixel_format("BC8"));
  EXPECT_FALSE(parse_pixel_format("ASTC_7x7"));
}

texture_image make_image(pixel_format f, int w, int h, int levels, int layers, int faces) {
  texture_image img;
  img.info.format = f;
  img.info.width = w;
  img.info.height = h;
  img.info.mip_levels = levels;
  img.info.array_layers = layers;
  img.info.faces = faces;
  img.info.data_bytes = chain_bytes(f, w, h, levels, 0, layers * faces);
  img.data =
      testing::random_bytes(img.info.data_bytes, static_cast<std::uint32_t>(w * 31 + levels));
  return img;
}

TEST(TextureFile, Dx10RoundTripEveryFormatArraysAndCubes) {
  temp_dir dir;
  struct shape {
    int w, h, levels, layers, faces;
  };
  const shape shapes[] = {{256, 256, 9, 1, 1},
                          {300, 200, 9, 1, 1},
                          {64, 32, 3, 4, 1},
                          {16, 16, 5, 1, 6},
                          {1, 1, 1, 1, 1}};
  const pixel_format formats[] = {
      pixel_format::of(tf::bc1),  pixel_format::of(tf::bc3),
      pixel_format::of(tf::bc4),  pixel_format::of(tf::bc5, false, true),
      pixel_format::of(tf::bc6h), pixel_format::of(tf::bc7, true),
      pixel_format::of(tf::rgba8)};
  for (const auto& f : formats) {
    for (const auto& s : shapes) {
      const auto img = make_image(f, s.w, s.h, s.levels, s.layers, s.faces);
      const auto path = dir / (f.name() + std::to_string(s.w) + ".dds");
      write_dds(path, img);
      const auto back = load_texture(path);
      EXPECT_EQ(back.info.format, f);
      EXPECT_EQ(back.info.width, s.w);
      EXPECT_EQ(back.info.height, s.h);
      EXPECT_EQ(back.info.mip_levels, s.levels);
      EXPECT_EQ(back.info.array_layers, s.layers);
      EXPECT_EQ(back.info.faces, s.faces);
      EXPECT_EQ(back.info.data_offset, 148u);
      EXPECT_EQ(back.info.file_bytes, 148u + img.data.size());
      EXPECT_EQ(back.data, img.data) << f.name();
      // The last level of the last surface ends at the end of the data.
      const int last = back.info.surfaces() - 1;
      EXPECT_EQ(back.info.level_offset(last, s.levels - 1) + back.info.level_size(s.levels - 1),
                img.data.size());
      EXPECT_EQ(back.level(last, s.levels - 1).size(), back.info.level_size(s.levels - 1));
    }
  }
}

// Every DXGI code read, and the code written for each format: DXGI_FORMAT values of dxgiformat.h
// (typeless codes read as UNORM; BGRA ones are read only).
TEST(TextureFile, DxgiCodesReadAndWritten) {
  temp_dir dir;
  struct code {
    std::uint32_t dxgi;
    const char* name;
    bool written;
  };
  const code codes[] = {
      {27, "RGBA8", false},     {28, "RGBA8", true},     {29, "RGBA8_SRGB", true},
      {87, "RGBA8", false},     {90, "RGBA8", false},    {91, "RGBA8_SRGB", false},
      {70, "BC1", false},       {71, "BC1", true},       {72, "BC1_SRGB", true},
      {73, "BC2", false},       {74, "BC2", true},       {75, "BC2_SRGB", true},
      {76, "BC3", false},       {77, "BC3", true},       {78, "BC3_SRGB", true},
      {79, "BC4", false},       {80, "BC4", true},       {81, "BC4_SNORM", true},
      {82, "BC5", false},       {83, "BC5", true},       {84, "BC5_SNORM", true},
      {94, "BC6H_UF16", false}, {95, "BC6H_UF16", true}, {96, "BC6H_SF16", true},
      {97, "BC7", false},       {98, "BC7", true},       {99, "BC7_SRGB", true}};
  for (const auto& c : codes) {
    const auto f = parse_pixel_format(c.name);
    ASSERT_TRUE(f) << c.name;
    const auto path = dir / (std::to_string(c.dxgi) + ".dds");
    write_dds(path, make_image(*f, 8, 8, 1, 1, 1));
    auto bytes = read_all(path);
    std::uint32_t written = 0;
    std::memcpy(&written, &bytes[128], 4);
    if (c.written) {
      EXPECT_EQ(written, c.dxgi) << c.name;
    }
    std::memcpy(&bytes[128], &c.dxgi, 4);
    write_all(path, bytes);
    EXPECT_EQ(read_texture_info(path).format.name(), c.name) << c.dxgi;
  }
  std::vector<std::uint8_t> unknown = read_all(dir / "98.dds");
  const std::uint32_t r8 = 61;  // DXGI_FORMAT_R8_UNORM: not a format vramkit reads
  std::memcpy(&unknown[128], &r8, 4);
  write_all(dir / "r8.dds", unknown);
  EXPECT_THROW((void)read_texture_info(dir / "r8.dds"), texture_file_error);
}

// A legacy (no DX10) header with the given pixel-format fields.
std::vector<std::uint8_t> legacy_header(int w, int h, int mips, std::uint32_t pf_flags,
                                        const char* fourcc, std::uint32_t bits = 0,
                                        std::uint32_t r = 0, std::uint32_t g = 0,
                                        std::uint32_t b = 0, std::uint32_t a = 0) {
  std::vector<std::uint8_t> hd(128, 0);
  auto put = [&](int o, std::uint32_t v) { std::memcpy(&hd[o], &v, 4); };
  std::memcpy(hd.data(), "DDS ", 4);
  put(4, 124);
  put(8, 0x1007);
  put(12, static_cast<std::uint32_t>(h));
  put(16, static_cast<std::uint32_t>(w));
  put(28, static_cast<std::uint32_t>(mips));
  put(76, 32);
  put(80, pf_flags);
  if (fourcc) std::memcpy(&hd[84], fourcc, 4);
  put(88, bits);
  put(92, r);
  put(96, g);
  put(100, b);
  put(104, a);
  put(108, 0x1000);
  return hd;
}

TEST(TextureFile, LegacyFourCCsAndBgraMasks) {
  temp_dir dir;
  struct c {
    const char* code;
    tf format;
    bool snorm;
  };
  for (const auto& k :
       {c{"DXT1", tf::bc1, false}, c{"DXT3", tf::bc2, false}, c{"DXT5", tf::bc3, false},
        c{"ATI1", tf::bc4, false}, c{"BC4U", tf::bc4, false}, c{"BC4S", tf::bc4, true},
        c{"ATI2", tf::bc5, false}, c{"BC5U", tf::bc5, false}, c{"BC5S", tf::bc5, true}}) {
    auto bytes = legacy_header(8, 8, 0, 0x4, k.code);  // mip count 0 reads as one level
    const auto f = pixel_format::of(k.format, false, k.snorm);
    bytes.resize(128 + level_bytes(f, 8, 8), 0x5A);
    write_all(dir / "l.dds", bytes);
    const auto info = read_texture_info(dir / "l.dds");
    EXPECT_EQ(info.format, f) << k.code;
    EXPECT_EQ(info.mip_levels, 1);
    EXPECT_EQ(info.data_bytes, level_bytes(f, 8, 8));
  }
  // A8R8G8B8 (B,G,R,A bytes in the file) reads back as R,G,B,A.
  auto bytes =
      legacy_header(2, 1, 1, 0x41, nullptr, 32, 0x00FF0000, 0x0000FF00, 0x000000FF, 0xFF000000);
  for (std::uint8_t v : {10, 20, 30, 40, 50, 60, 70, 80}) bytes.push_back(v);
  write_all(dir / "bgra.dds", bytes);
  const auto img = load_texture(dir / "bgra.dds");
  EXPECT_EQ(img.info.format.format, tf::rgba8);
  EXPECT_EQ(img.data, (std::vector<std::uint8_t>{30, 20, 10, 40, 70, 60, 50, 80}));
}

void expect_error(const std::filesystem::path& p, const std::string& needle) {
  try {
    (void)read_texture_info(p);
    ADD_FAILURE() << "no error for " << p;
  } catch (const texture_file_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(p.string()), std::string::npos) << what;
    EXPECT_NE(what.find(needle), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << "one line: " << what;
  }
}

TEST(TextureFile, MalformedFilesGiveOneLineErrorsNamingFileAndProblem) {
  temp_dir dir;
  const auto good = legacy_header(16, 16, 5, 0x4, "DXT1");
  auto with_data = good;
  with_data.resize(128 + chain_bytes(pixel_format::of(tf::bc1), 16, 16, 5));
  auto p = dir / "bad.dds";

  write_all(p, {});
  expect_error(p, "unknown magic");
  write_all(p, {'G', 'I', 'F', '8', '9', 'a', 0, 0});
  expect_error(p, "unknown magic");
  write_all(p, std::vector<std::uint8_t>(good.begin(), good.begin() + 60));
  expect_error(p, "truncated DDS header");
  auto t = with_data;
  t.resize(t.size() - 1);
  write_all(p, t);
  expect_error(p, "truncated: the header promises 184 bytes");
  t = with_data;
  t[4] = 100;
  write_all(p, t);
  expect_error(p, "header size is 100");
  t = with_data;
  t[28] = 9;
  write_all(p, t);
  expect_error(p, "mip count 9 exceeds the 5 levels");
  t = with_data;
  std::memcpy(&t[84], "XYZW", 4);
  write_all(p, t);
  expect_error(p, "FourCC 'XYZW' is not supported");
  t = with_data;
  t[12] = t[13] = t[14] = t[15] = 0;
  write_all(p, t);
  expect_error(p, "out of range");
  t = with_data;
  std::memcpy(&t[84], "DX10", 4);
  write_all(p, std::vector<std::uint8_t>(t.begin(), t.begin() + 140));
  expect_error(p, "truncated DX10 header");
  t.resize(148 + 128, 0);
  const std::uint32_t dx10[5] = {2, 3, 0, 1, 0};  // DXGI 2 = R32G32B32A32_FLOAT
  std::memcpy(&t[128], dx10, sizeof dx10);
  write_all(p, t);
  expect_error(p, "DXGI format 2 is not supported");
  const std::uint32_t zero_array[5] = {71, 3, 0, 0, 0};
  std::memcpy(&t[128], zero_array, sizeof zero_array);
  write_all(p, t);
  expect_error(p, "array size 0");

  auto a = dir / "bad.astc";
  std::vector<std::uint8_t> astc = {0x13, 0xAB, 0xA1, 0x5C, 6, 6, 1, 44, 1, 0, 200, 0, 0, 1, 0, 0};
  write_all(a, astc);
  expect_error(a, "truncated: ASTC_6x6 300x200 needs 27200 bytes");
  astc[4] = 7;
  write_all(a, astc);
  expect_error(a, "ASTC block 7x6 is not a valid 2-D footprint");
  write_all(a, {0x13, 0xAB, 0xA1, 0x5C, 6});
  expect_error(a, "truncated ASTC header");
  expect_error(dir / "missing.dds", "cannot read the file");
  auto png = dir / "bad.png";
  write_all(png, {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A, 0, 0, 0, 13});
  expect_error(png, "not a readable PNG");
}

TEST(TextureFile, PngRoundTripThroughLibpng) {
  temp_dir dir;
  const auto px = testing::test_picture(37, 23);
  write_png_rgba8(dir / "p.png", 37, 23, px);
  const auto img = load_texture(dir / "p.png");
  EXPECT_EQ(img.info.container, file_container::png);
  EXPECT_EQ(img.info.format.format, tf::rgba8);
  EXPECT_EQ(img.info.width, 37);
  EXPECT_EQ(img.info.height, 23);
  EXPECT_EQ(img.info.data_bytes, 37u * 23 * 4);
  EXPECT_EQ(img.data, px);
}

// Files made by Debian's nvcompress (libnvtt-bin): always a legacy header, mips to 1x1.
TEST(TextureFile, ReadsNvcompressOutput) {
  if (!testing::have_tool("nvcompress"))
    GTEST_SKIP() << "nvcompress not installed (Debian package libnvtt-bin)";
  temp_dir dir;
  write_png_rgba8(dir / "src.png", 300, 200, testing::test_picture(300, 200));
  struct c {
    const char* flag;
    tf format;
  };
  for (const auto& k : {c{"-bc1", tf::bc1}, c{"-bc2", tf::bc2}, c{"-bc3", tf::bc3},
                        c{"-bc4", tf::bc4}, c{"-bc5", tf::bc5}, c{"-rgb", tf::rgba8}}) {
    const auto out = dir / (std::string(k.flag + 1) + ".dds");
    ASSERT_EQ(testing::run_quiet("nvcompress " + std::string(k.flag) + " " +
                                 (dir / "src.png").string() + " " + out.string()),
              0);
    const auto info = read_texture_info(out);
    EXPECT_EQ(info.format.format, k.format) << k.flag;
    EXPECT_EQ(info.width, 300);
    EXPECT_EQ(info.height, 200);
    EXPECT_EQ(info.mip_levels, 9);
    EXPECT_EQ(info.data_offset, 128u);
    EXPECT_EQ(info.data_bytes, info.file_bytes - 128) << k.flag;
    EXPECT_EQ(info.data_bytes, chain_bytes(info.format, 300, 200, 9));
  }
  EXPECT_EQ(read_texture_info(dir / "bc1.dds").file_bytes, 40456u);
  const auto nomips = dir / "nomips.dds";
  ASSERT_EQ(testing::run_quiet("nvcompress -bc3 -nomips " + (dir / "src.png").string() + " " +
                               nomips.string()),
            0);
  const auto info = read_texture_info(nomips);
  EXPECT_EQ(info.mip_levels, 1);
  EXPECT_EQ(info.file_bytes, 60128u);
  // nvcompress -rgb stores B,G,R,A: the reader swaps to R,G,B,A, so the top level is the picture.
  const auto rgb = load_texture(dir / "rgb.dds");
  const auto src = testing::test_picture(300, 200);
  const auto top = rgb.level(0, 0);
  ASSERT_EQ(top.size(), src.size());
  int diff = 0;
  for (std::size_t i = 0; i < src.size(); i += 4)
    diff += top[i] != src[i] || top[i + 2] != src[i + 2];
  EXPECT_EQ(diff, 0);
}

TEST(TextureFile, ReadsAstcencOutput) {
  if (!testing::have_tool("astcenc"))
    GTEST_SKIP() << "astcenc not installed (Debian package astcenc)";
  temp_dir dir;
  write_png_rgba8(dir / "src.png", 300, 200, testing::test_picture(300, 200));
  for (auto [bx, by] : {std::pair{4, 4}, std::pair{6, 6}, std::pair{8, 8}, std::pair{12, 10}}) {
    const std::string block = std::to_string(bx) + "x" + std::to_string(by);
    const auto out = dir / ("a" + block + ".astc");
    ASSERT_EQ(testing::run_quiet("astcenc -cl " + (dir / "src.png").string() + " " + out.string() +
                                 " " + block + " -fastest"),
              0);
    const auto info = read_texture_info(out);
    EXPECT_EQ(info.format, pixel_format::astc(bx, by));
    EXPECT_EQ(info.width, 300);
    EXPECT_EQ(info.height, 200);
    EXPECT_EQ(info.mip_levels, 1);
    EXPECT_EQ(info.data_bytes, info.file_bytes - 16);
    EXPECT_EQ(info.data_bytes,
              static_cast<std::uint64_t>((300 + bx - 1) / bx) * ((200 + by - 1) / by) * 16);
  }
  EXPECT_EQ(read_texture_info(dir / "a6x6.astc").file_bytes, 27216u);
}

}  // namespace
}  // namespace vramkit::texture
