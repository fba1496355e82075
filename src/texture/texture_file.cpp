// DDS, PNG and ASTC readers and the DDS/PNG writers. Layouts: DDS from Microsoft's DDS
// programming guide (DDS_HEADER, DDS_PIXELFORMAT, DDS_HEADER_DXT10), ASTC from the astc-encoder
// file-format notes (docs/texture.md names the sources). PNG goes through libpng's simplified API.
#include "vramkit/texture/texture_file.hpp"

#include <png.h>

#include <algorithm>
#include <cstring>
#include <fstream>

namespace vramkit::texture {
namespace {

constexpr std::uint32_t fourcc(char a, char b, char c, char d) {
  return static_cast<std::uint32_t>(static_cast<unsigned char>(a)) |
         static_cast<std::uint32_t>(static_cast<unsigned char>(b)) << 8 |
         static_cast<std::uint32_t>(static_cast<unsigned char>(c)) << 16 |
         static_cast<std::uint32_t>(static_cast<unsigned char>(d)) << 24;
}

constexpr std::uint32_t dds_magic = fourcc('D', 'D', 'S', ' ');
constexpr std::uint32_t ddpf_fourcc = 0x4;
constexpr std::uint32_t ddpf_rgb = 0x40;
constexpr std::uint32_t caps2_cubemap = 0x200;
constexpr std::uint32_t caps2_volume = 0x200000;
constexpr std::uint32_t caps2_all_faces = 0xFC00;
constexpr int max_extent = 65536;  // past any GPU's texture limit: a corrupt header

std::uint32_t rd32(const std::uint8_t* p) {
  std::uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
void wr32(std::uint8_t* p, std::uint32_t v) { std::memcpy(p, &v, 4); }

std::vector<std::uint8_t> read_bytes(const std::filesystem::path& file, std::size_t max_bytes) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw texture_file_error(file, "cannot open the file");
  std::vector<std::uint8_t> bytes(max_bytes);
  in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(max_bytes));
  bytes.resize(static_cast<std::size_t>(in.gcount()));
  return bytes;
}

std::string fourcc_text(std::uint32_t code) {
  std::string s;
  for (int i = 0; i < 4; ++i) {
    const char c = static_cast<char>((code >> (8 * i)) & 0xFF);
    s += (c >= 32 && c < 127) ? c : '?';
  }
  return s;
}

// The DXGI_FORMAT codes read and written: typeless codes read as UNORM; `write` marks the code
// written for a format (the UNORM, sRGB or SNORM one), BGRA codes are only read.
struct dxgi_code {
  std::uint32_t code;
  texture_format format;
  bool variant;  ///< sRGB for RGBA8, BC1/2/3/7; SNORM (SF16) for BC4/5/6H
  bool bgra;
  bool write;
};
constexpr dxgi_code dxgi_codes[] = {
    {27, texture_format::rgba8, false, false, false},
    {28, texture_format::rgba8, false, false, true},
    {29, texture_format::rgba8, true, false, true},
    {87, texture_format::rgba8, false, true, false},
    {90, texture_format::rgba8, false, true, false},
    {91, texture_format::rgba8, true, true, false},
    {70, texture_format::bc1, false, false, false},
    {71, texture_format::bc1, false, false, true},
    {72, texture_format::bc1, true, false, true},
    {73, texture_format::bc2, false, false, false},
    {74, texture_format::bc2, false, false, true},
    {75, texture_format::bc2, true, false, true},
    {76, texture_format::bc3, false, false, false},
    {77, texture_format::bc3, false, false, true},
    {78, texture_format::bc3, true, false, true},
    {79, texture_format::bc4, false, false, false},
    {80, texture_format::bc4, false, false, true},
    {81, texture_format::bc4, true, false, true},
    {82, texture_format::bc5, false, false, false},
    {83, texture_format::bc5, false, false, true},
    {84, texture_format::bc5, true, false, true},
    {94, texture_format::bc6h, false, false, false},
    {95, texture_format::bc6h, false, false, true},
    {96, texture_format::bc6h, true, false, true},
    {97, texture_format::bc7, false, false, false},
    {98, texture_format::bc7, false, false, true},
    {99, texture_format::bc7, true, false, true},
};

// Whether a format's variant is SNORM (BC4, BC5, BC6H) rather than sRGB.
bool variant_is_snorm(texture_format f) {
  return f == texture_format::bc4 || f == texture_format::bc5 || f == texture_format::bc6h;
}

// Maps a DXGI_FORMAT code to a pixel format.
std::optional<pixel_format> from_dxgi(std::uint32_t code, bool& bgra) {
  bgra = false;
  for (const auto& d : dxgi_codes) {
    if (d.code != code) continue;
    bgra = d.bgra;
    const bool snorm = variant_is_snorm(d.format);
    return pixel_format::of(d.format, d.variant && !snorm, d.variant && snorm);
  }
  return std::nullopt;
}

// The code written for `f`; 0 for ASTC (no DXGI code).
std::uint32_t to_dxgi(const pixel_format& f) {
  const bool variant = variant_is_snorm(f.format) ? f.snorm : f.srgb;
  for (const auto& d : dxgi_codes) {
    if (d.write && d.format == f.format && d.variant == variant) return d.code;
  }
  return 0;
}

struct dds_layout {
  texture_info info;
  bool bgra = false;  // 32-bit data stored B,G,R,A: swizzled to R,G,B,A on load
};

// The DX10 header: DXGI format, dimension, array size, cube flag.
void parse_dx10(const std::filesystem::path& file, const std::vector<std::uint8_t>& h,
                dds_layout& out) {
  if (h.size() < 148) {
    throw texture_file_error(file, "truncated DX10 header: " + std::to_string(h.size()) +
                                       " bytes, a DDS file with a DX10 header needs 148");
  }
  const std::uint32_t dxgi = rd32(&h[128]);
  const std::uint32_t dimension = rd32(&h[132]);
  const std::uint32_t misc = rd32(&h[136]);
  const std::uint32_t array_size = rd32(&h[140]);
  auto f = from_dxgi(dxgi, out.bgra);
  if (!f)
    throw texture_file_error(file, "DXGI format " + std::to_string(dxgi) + " is not supported");
  if (dimension == 4) throw texture_file_error(file, "3-D DX10 textures are not supported");
  if (dimension != 2 && dimension != 3) {
    throw texture_file_error(file, "DX10 resource dimension " + std::to_string(dimension) +
                                       " is not a texture (2 = 1-D, 3 = 2-D)");
  }
  if (array_size == 0 || array_size > 65536) {
    throw texture_file_error(file,
                             "DX10 array size " + std::to_string(array_size) + " is out of range");
  }
  out.info.format = *f;
  out.info.array_layers = static_cast<int>(array_size);
  out.info.faces = (misc & 0x4) ? 6 : 1;
  out.info.data_offset = 148;
}

pixel_format legacy_fourcc_format(const std::filesystem::path& file, std::uint32_t code) {
  using tf = texture_format;
  switch (code) {
    case fourcc('D', 'X', 'T', '1'):
      return pixel_format::of(tf::bc1);
    case fourcc('D', 'X', 'T', '2'):
    case fourcc('D', 'X', 'T', '3'):
      return pixel_format::of(tf::bc2);
    case fourcc('D', 'X', 'T', '4'):
    case fourcc('D', 'X', 'T', '5'):
      return pixel_format::of(tf::bc3);
    case fourcc('A', 'T', 'I', '1'):
    case fourcc('B', 'C', '4', 'U'):
      return pixel_format::of(tf::bc4);
    case fourcc('B', 'C', '4', 'S'):
      return pixel_format::of(tf::bc4, false, true);
    case fourcc('A', 'T', 'I', '2'):
    case fourcc('B', 'C', '5', 'U'):
      return pixel_format::of(tf::bc5);
    case fourcc('B', 'C', '5', 'S'):
      return pixel_format::of(tf::bc5, false, true);
    default:
      throw texture_file_error(file, "DDS FourCC '" + fourcc_text(code) + "' is not supported");
  }
}

// 32-bit uncompressed data: RGBA or BGRA byte order from the channel masks.
void parse_rgb_masks(const std::filesystem::path& file, const std::vector<std::uint8_t>& h,
                     dds_layout& out) {
  const std::uint32_t r = rd32(&h[92]);
  const std::uint32_t g = rd32(&h[96]);
  const std::uint32_t b = rd32(&h[100]);
  if (r == 0x000000FF && g == 0x0000FF00 && b == 0x00FF0000) {
    out.bgra = false;
  } else if (r == 0x00FF0000 && g == 0x0000FF00 && b == 0x000000FF) {
    out.bgra = true;
  } else {
    throw texture_file_error(file, "DDS 32-bit masks are neither RGBA nor BGRA");
  }
  out.info.format = pixel_format::of(texture_format::rgba8);
}

// The DDS_HEADER's sizes and dimensions, into `info`.
void parse_dds_dimensions(const std::filesystem::path& file, const std::vector<std::uint8_t>& h,
                          texture_info& info) {
  if (h.size() < 128) {
    throw texture_file_error(file, "truncated DDS header: " + std::to_string(h.size()) +
                                       " bytes, a DDS header needs 128");
  }
  if (rd32(&h[4]) != 124) {
    throw texture_file_error(file,
                             "DDS header size is " + std::to_string(rd32(&h[4])) + ", not 124");
  }
  if (rd32(&h[76]) != 32) {
    throw texture_file_error(
        file, "DDS pixel-format size is " + std::to_string(rd32(&h[76])) + ", not 32");
  }
  const std::uint32_t height = rd32(&h[12]);
  const std::uint32_t width = rd32(&h[16]);
  const std::uint32_t mips = rd32(&h[28]);
  if (width == 0 || height == 0 || width > max_extent || height > max_extent) {
    throw texture_file_error(file, "DDS size " + std::to_string(width) + "x" +
                                       std::to_string(height) + " is out of range (1 to " +
                                       std::to_string(max_extent) + ")");
  }
  info.width = static_cast<int>(width);
  info.height = static_cast<int>(height);
  // A mip count of 0 means one level (nvcompress -nomips writes 0), as DirectXTex reads it.
  info.mip_levels = mips == 0 ? 1 : static_cast<int>(std::min<std::uint32_t>(mips, 64));
  const int full = full_mip_levels(info.width, info.height);
  if (info.mip_levels > full) {
    throw texture_file_error(file, "DDS mip count " + std::to_string(mips) + " exceeds the " +
                                       std::to_string(full) + " levels of a " +
                                       std::to_string(width) + "x" + std::to_string(height) +
                                       " chain");
  }
}

dds_layout parse_dds(const std::filesystem::path& file, const std::vector<std::uint8_t>& h,
                     std::uint64_t file_bytes) {
  dds_layout out;
  texture_info& info = out.info;
  info.path = file;
  info.container = file_container::dds;
  info.file_bytes = file_bytes;
  parse_dds_dimensions(file, h, info);
  const std::uint32_t pf_flags = rd32(&h[80]);
  const std::uint32_t code = rd32(&h[84]);
  const std::uint32_t bits = rd32(&h[88]);
  const std::uint32_t caps2 = rd32(&h[112]);
  if (caps2 & caps2_volume)
    throw texture_file_error(file, "volume (3-D) DDS textures are not supported");
  info.data_offset = 128;
  if ((pf_flags & ddpf_fourcc) && code == fourcc('D', 'X', '1', '0')) {
    parse_dx10(file, h, out);
  } else if (pf_flags & ddpf_fourcc) {
    info.format = legacy_fourcc_format(file, code);
  } else if ((pf_flags & ddpf_rgb) && bits == 32) {
    parse_rgb_masks(file, h, out);
  } else {
    throw texture_file_error(file, "DDS pixel format (flags " + std::to_string(pf_flags) + ", " +
                                       std::to_string(bits) + " bits) is not supported");
  }
  if (info.faces == 1 && (caps2 & caps2_cubemap)) {
    if ((caps2 & caps2_all_faces) != caps2_all_faces) {
      throw texture_file_error(file, "partial cube maps (not all six faces) are not supported");
    }
    info.faces = 6;
  }
  info.data_bytes =
      chain_bytes(info.format, info.width, info.height, info.mip_levels, 0, info.surfaces());
  if (file_bytes < info.data_offset + info.data_bytes) {
    throw texture_file_error(
        file,
        "truncated: the header promises " + std::to_string(info.data_bytes) + " bytes of " +
            info.format.name() + " data (" + std::to_string(info.width) + "x" +
            std::to_string(info.height) + ", " + std::to_string(info.mip_levels) + " levels, " +
            std::to_string(info.surfaces()) + " surfaces), the file holds " +
            std::to_string(file_bytes > info.data_offset ? file_bytes - info.data_offset : 0));
  }
  return out;
}

texture_info parse_astc(const std::filesystem::path& file, const std::vector<std::uint8_t>& h,
                        std::uint64_t file_bytes) {
  if (h.size() < 16) {
    throw texture_file_error(
        file, "truncated ASTC header: " + std::to_string(h.size()) + " bytes, it needs 16");
  }
  auto rd24 = [&](int o) { return static_cast<int>(h[o] | h[o + 1] << 8 | h[o + 2] << 16); };
  const int bx = h[4];
  const int by = h[5];
  const int bz = h[6];
  const int x = rd24(7);
  const int y = rd24(10);
  const int z = rd24(13);
  if (bz != 1 || z != 1) throw texture_file_error(file, "3-D ASTC textures are not supported");
  texture_info info;
  try {
    info.format = pixel_format::astc(bx, by);
  } catch (const logic_error&) {
    throw texture_file_error(file, "ASTC block " + std::to_string(bx) + "x" + std::to_string(by) +
                                       " is not a valid 2-D footprint");
  }
  if (x == 0 || y == 0)
    throw texture_file_error(
        file, "ASTC size " + std::to_string(x) + "x" + std::to_string(y) + " is empty");
  info.path = file;
  info.container = file_container::astc;
  info.width = x;
  info.height = y;
  info.data_offset = 16;
  info.file_bytes = file_bytes;
  info.data_bytes = level_bytes(info.format, x, y);
  if (file_bytes < 16 + info.data_bytes) {
    throw texture_file_error(
        file, "truncated: " + info.format.name() + " " + std::to_string(x) + "x" +
                  std::to_string(y) + " needs " + std::to_string(info.data_bytes) +
                  " bytes of blocks, the file holds " + std::to_string(file_bytes - 16));
  }
  return info;
}

// libpng's simplified reader opened on `file` (header read). Throws texture_file_error.
png_image begin_png(const std::filesystem::path& file) {
  png_image image;
  std::memset(&image, 0, sizeof image);
  image.version = PNG_IMAGE_VERSION;
  if (png_image_begin_read_from_file(&image, file.c_str()) == 0) {
    const std::string why = image.message;
    png_image_free(&image);
    throw texture_file_error(file, "not a readable PNG (" + why + ")");
  }
  return image;
}

texture_info parse_png(const std::filesystem::path& file, std::uint64_t file_bytes) {
  png_image image = begin_png(file);
  texture_info info;
  info.path = file;
  info.container = file_container::png;
  info.format = pixel_format::of(texture_format::rgba8,
                                 (image.flags & PNG_IMAGE_FLAG_COLORSPACE_NOT_sRGB) == 0);
  info.width = static_cast<int>(image.width);
  info.height = static_cast<int>(image.height);
  info.data_bytes = static_cast<std::uint64_t>(image.width) * image.height * 4;
  info.file_bytes = file_bytes;
  png_image_free(&image);
  return info;
}

struct parsed {
  texture_info info;
  bool bgra = false;
};

parsed parse_any(const std::filesystem::path& file) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(file, ec);
  if (ec) throw texture_file_error(file, "cannot read the file (" + ec.message() + ")");
  const auto h = read_bytes(file, 148);
  if (h.size() >= 4 && rd32(h.data()) == dds_magic) {
    auto d = parse_dds(file, h, size);
    return {d.info, d.bgra};
  }
  if (h.size() >= 4 && h[0] == 0x13 && h[1] == 0xAB && h[2] == 0xA1 && h[3] == 0x5C) {
    return {parse_astc(file, h, size), false};
  }
  if (h.size() >= 8 && png_sig_cmp(h.data(), 0, 8) == 0) return {parse_png(file, size), false};
  throw texture_file_error(file, "not a DDS, PNG or ASTC file (unknown magic bytes)");
}

}  // namespace

std::uint64_t texture_info::level_offset(int surface, int level) const noexcept {
  const std::uint64_t per_surface = chain_bytes(format, width, height, mip_levels);
  return per_surface * static_cast<std::uint64_t>(surface) +
         chain_bytes(format, width, height, level);
}

std::uint64_t texture_info::level_size(int level) const noexcept {
  return level_bytes(format, level_extent(width, level), level_extent(height, level));
}

std::span<const std::uint8_t> texture_image::level(int surface, int lvl) const {
  if (surface < 0 || surface >= info.surfaces() || lvl < 0 || lvl >= info.mip_levels) {
    throw logic_error("texture level (" + std::to_string(surface) + ", " + std::to_string(lvl) +
                      ") out of range for " + info.path.string());
  }
  return {data.data() + info.level_offset(surface, lvl), info.level_size(lvl)};
}

texture_info read_texture_info(const std::filesystem::path& file) { return parse_any(file).info; }

texture_image load_texture(const std::filesystem::path& file) {
  parsed p = parse_any(file);
  texture_image img;
  img.info = p.info;
  img.data.resize(p.info.data_bytes);
  if (p.info.container == file_container::png) {
    png_image image = begin_png(file);
    image.format = PNG_FORMAT_RGBA;
    if (png_image_finish_read(&image, nullptr, img.data.data(), 0, nullptr) == 0) {
      const std::string why = image.message;
      png_image_free(&image);
      throw texture_file_error(file, "PNG data is corrupt (" + why + ")");
    }
    return img;
  }
  std::ifstream in(file, std::ios::binary);
  in.seekg(static_cast<std::streamoff>(p.info.data_offset));
  in.read(reinterpret_cast<char*>(img.data.data()), static_cast<std::streamsize>(img.data.size()));
  if (static_cast<std::uint64_t>(in.gcount()) != p.info.data_bytes) {
    throw texture_file_error(file, "truncated while reading the texel data");
  }
  if (p.bgra) {
    for (std::size_t i = 0; i + 3 < img.data.size(); i += 4)
      std::swap(img.data[i], img.data[i + 2]);
  }
  return img;
}

void write_dds(const std::filesystem::path& file, const texture_image& image) {
  const texture_info& in = image.info;
  if (in.format.format == texture_format::astc)
    throw logic_error("write_dds: DDS cannot hold ASTC");
  if (image.data.size() != in.data_bytes)
    throw logic_error("write_dds: data size differs from the description");
  std::uint8_t h[148] = {};
  wr32(&h[0], dds_magic);
  wr32(&h[4], 124);
  // CAPS | HEIGHT | WIDTH | PIXELFORMAT | MIPMAPCOUNT | LINEARSIZE
  wr32(&h[8], 0x1 | 0x2 | 0x4 | 0x1000 | 0x20000 | 0x80000);
  wr32(&h[12], static_cast<std::uint32_t>(in.height));
  wr32(&h[16], static_cast<std::uint32_t>(in.width));
  wr32(&h[20], static_cast<std::uint32_t>(in.level_size(0)));
  wr32(&h[28], static_cast<std::uint32_t>(in.mip_levels));
  wr32(&h[76], 32);
  wr32(&h[80], ddpf_fourcc);
  wr32(&h[84], fourcc('D', 'X', '1', '0'));
  wr32(&h[108], 0x1000 | (in.mip_levels > 1 ? 0x400008 : 0) | (in.faces == 6 ? 0x8 : 0));
  if (in.faces == 6) wr32(&h[112], caps2_cubemap | caps2_all_faces);
  wr32(&h[128], to_dxgi(in.format));
  wr32(&h[132], 3);
  wr32(&h[136], in.faces == 6 ? 0x4 : 0);
  wr32(&h[140], static_cast<std::uint32_t>(in.array_layers));
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(h), sizeof h);
  out.write(reinterpret_cast<const char*>(image.data.data()),
            static_cast<std::streamsize>(image.data.size()));
  if (!out) throw texture_file_error(file, "cannot write the file");
}

void write_png_rgba8(const std::filesystem::path& file, int width, int height,
                     std::span<const std::uint8_t> rgba) {
  if (rgba.size() != static_cast<std::size_t>(width) * height * 4) {
    throw logic_error("write_png_rgba8: buffer size differs from width x height x 4");
  }
  png_image image;
  std::memset(&image, 0, sizeof image);
  image.version = PNG_IMAGE_VERSION;
  image.width = static_cast<png_uint_32>(width);
  image.height = static_cast<png_uint_32>(height);
  image.format = PNG_FORMAT_RGBA;
  if (png_image_write_to_file(&image, file.c_str(), 0, rgba.data(), 0, nullptr) == 0) {
    const std::string why = image.message;
    png_image_free(&image);
    throw texture_file_error(file, "cannot write the PNG (" + why + ")");
  }
}

}  // namespace vramkit::texture
