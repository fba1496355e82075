// The CUDA allocation model against the free-memory deltas measured on an H200, and the planner's
// arithmetic on folders and manifests, including files made by nvcompress and astcenc.
#include "vramkit/texture/texture_plan.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "texture_test_support.hpp"

namespace vramkit::texture {
namespace {

using testing::temp_dir;
using tf = texture_format;

// Every footprint measured on an H200 (driver 580, CUDA 13.0) by texture_alloc_measure: the
// cudaMemGetInfo delta of N identical arrays, per array. The model predicts the delta of the same
// N arrays (whole 2 MiB pages) within 2%.
TEST(CudaAllocationModel, ReproducesEveryMeasuredH200Footprint) {
  std::ifstream in(VRAMKIT_TEXTURE_DATA "/h200-alloc.json");
  ASSERT_TRUE(in) << VRAMKIT_TEXTURE_DATA "/h200-alloc.json";
  const auto j = nlohmann::json::parse(in);
  const cuda_allocation_model m;
  int cases = 0;
  for (const auto& c : j.at("cases")) {
    const auto f = parse_pixel_format(c.at("format").get<std::string>());
    ASSERT_TRUE(f) << c.at("format");
    const int w = c.at("width"), h = c.at("height"), levels = c.at("mip_levels");
    const int layers = c.at("layers");
    const auto n = c.at("arrays").get<std::uint64_t>();
    const double measured = c.at("measured_bytes").get<double>();
    const double model = static_cast<double>(m.device_bytes_of(n, *f, w, h, levels, 0, layers)) /
                         static_cast<double>(n);
    EXPECT_NEAR(model / measured, 1.0, 0.02)
        << f->name() << " " << w << "x" << h << " levels " << levels << " layers " << layers << " x"
        << n << ": model " << model << " measured " << measured;
    ++cases;
  }
  EXPECT_EQ(cases, 150);
  // A chain that starts at level 1 costs what a chain of the half-size texture costs.
  EXPECT_EQ(m.device_bytes(pixel_format::of(tf::bc7), 4096, 4096, 13, 1),
            m.device_bytes(pixel_format::of(tf::bc7), 2048, 2048, 12));
  // Small arrays share pages: five 343.5 KiB arrays fill a 2 MiB page, so each costs a fifth.
  EXPECT_EQ(m.array_bytes(pixel_format::of(tf::rgba8), 256, 256, 9), 351744u);
  EXPECT_EQ(m.device_bytes(pixel_format::of(tf::rgba8), 256, 256, 9), (2u << 20) / 5 + 1);
  EXPECT_EQ(m.device_bytes_of(6, pixel_format::of(tf::rgba8), 256, 256, 9), 4u << 20);
}

TEST(TexturePlan, ManifestChoicesArraysAndBudget) {
  temp_dir dir;
  testing::write_all(dir / "m.json", [] {
    const std::string s = R"({"textures": [
      {"name": "rock", "width": 2048, "height": 2048, "format": "BC7"},
      {"name": "grass", "width": 2048, "height": 2048, "format": "BC7"},
      {"name": "ui", "width": 300, "height": 200, "format": "RGBA8", "mips": 1},
      {"name": "phone", "width": 1024, "height": 1024, "format": "ASTC_6x6", "mips": 1}]})";
    return std::vector<std::uint8_t>(s.begin(), s.end());
  }());
  const auto entries = load_entries(dir / "m.json");
  ASSERT_EQ(entries.size(), 4u);
  EXPECT_EQ(entries[0].mip_levels, 12);
  EXPECT_EQ(entries[0].data_bytes, 5592432u);
  const cuda_allocation_model m;
  plan_options opt;
  opt.budget_bytes = 4u << 20;
  const auto plan = plan_textures(entries, opt);
  EXPECT_EQ(plan["schema_version"], 1);
  const auto& rock = plan["textures"][0];
  for (const char* key :
       {"file", "format", "width", "height", "mip_levels", "data_bytes", "device_bytes"}) {
    EXPECT_TRUE(rock.contains(key)) << key;
  }
  EXPECT_EQ(rock["file"], "rock");
  EXPECT_EQ(rock["device_bytes"], m.device_bytes(pixel_format::of(tf::bc7), 2048, 2048, 12));
  EXPECT_EQ(rock["choices"]["RGBA8"]["full_chain_bytes"],
            m.device_bytes(pixel_format::of(tf::rgba8), 2048, 2048, 12));
  EXPECT_EQ(rock["choices"]["BC1"]["top_level_bytes"],
            m.device_bytes(pixel_format::of(tf::bc1), 2048, 2048, 1));
  EXPECT_EQ(rock["choices"]["ASTC_8x8"]["target"], "mobile");
  EXPECT_EQ(rock["choices"]["ASTC_8x8"]["full_chain_bytes"],
            chain_bytes(pixel_format::astc(8, 8), 2048, 2048, 12));
  const auto& phone = plan["textures"][3];
  EXPECT_EQ(phone["sampled_by_cuda"], false);
  EXPECT_EQ(phone["device_bytes"], 171 * 171 * 16);  // tight: no CUDA allocation for ASTC
  std::uint64_t sum = 0;
  for (const auto& t : plan["textures"]) sum += t["device_bytes"].get<std::uint64_t>();
  EXPECT_EQ(plan["totals"]["device_bytes"], sum);
  // rock and grass share one layered array.
  ASSERT_EQ(plan["arrays"]["groups"].size(), 1u);
  EXPECT_EQ(plan["arrays"]["groups"][0]["layers"], 2);
  EXPECT_EQ(plan["arrays"]["array_bytes"],
            m.device_bytes(pixel_format::of(tf::bc7), 2048, 2048, 12, 0, 2));
  // 4 MiB: the full set (~12 MiB) does not fit; dropping levels until it does.
  const auto& b = plan["budget"];
  EXPECT_TRUE(b["fits"].get<bool>());
  EXPECT_GE(b["mip_drop"].get<int>(), 1);
  EXPECT_LE(b["device_bytes"].get<std::uint64_t>(), 4u << 20);
  const int drop = b["mip_drop"].get<int>();
  EXPECT_EQ(b["textures"][0]["first_level"], drop);
  EXPECT_EQ(b["textures"][2]["first_level"], 0);  // one level only: kept
  EXPECT_EQ(b["textures"][0]["device_bytes"],
            m.device_bytes(pixel_format::of(tf::bc7), 2048, 2048, 12, drop));
  const double bc7_saving = plan["savings"]["bc7_vs_rgba8"].get<double>();
  EXPECT_GT(bc7_saving, 0.70);
  EXPECT_LT(bc7_saving, 0.80);
  EXPECT_NE(render_plan_table(plan).find("rock"), std::string::npos);
}

TEST(TexturePlan, ManifestErrorsNameTheEntry) {
  temp_dir dir;
  auto check = [&](const std::string& body, const std::string& needle) {
    testing::write_all(dir / "m.json", std::vector<std::uint8_t>(body.begin(), body.end()));
    try {
      (void)load_entries(dir / "m.json");
      ADD_FAILURE() << "accepted " << body;
    } catch (const texture_file_error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  check("{", "not valid JSON");
  check(R"({"textures": []})", "non-empty");
  check(R"({"textures": [{"width": 4, "height": 4, "format": "BC9"}]})",
        "textures[0]: unknown format");
  check(R"({"textures": [{"width": 4, "format": "BC1"}]})",
        R"(textures[0] has neither "file" nor "height")");
  check(R"({"textures": [{"width": 4, "height": 4, "format": "BC1", "mips": 9}]})", "mips must be");
  check(R"({"textures": [{"width": 0, "height": 4, "format": "BC1"}]})", "width and height");
  check(R"({"textures": [{"file": "nothere.dds"}]})", "nothere.dds");
}

// A folder of files made by nvcompress and astcenc: data_bytes is the file less its header.
TEST(TexturePlan, FolderOfToolOutputs) {
  if (!testing::have_tool("nvcompress") || !testing::have_tool("astcenc")) {
    GTEST_SKIP() << "nvcompress (libnvtt-bin) or astcenc not installed";
  }
  temp_dir dir;
  const auto src = dir / "src.png";
  write_png_rgba8(src, 256, 256, testing::test_picture(256, 256));
  std::filesystem::create_directories(dir / "set");
  ASSERT_EQ(
      testing::run_quiet("nvcompress -bc1 " + src.string() + " " + (dir / "set/a.dds").string()),
      0);
  ASSERT_EQ(
      testing::run_quiet("nvcompress -bc5 " + src.string() + " " + (dir / "set/b.dds").string()),
      0);
  ASSERT_EQ(testing::run_quiet("astcenc -cl " + src.string() + " " + (dir / "set/c.astc").string() +
                               " 8x8 -fastest"),
            0);
  std::filesystem::copy_file(src, dir / "set/d.png");
  testing::write_all(dir / "set/readme.txt", {'x'});
  const auto entries = load_entries(dir / "set");
  ASSERT_EQ(entries.size(), 4u);
  const auto plan = plan_textures(entries, {});
  const auto& t = plan["textures"];
  EXPECT_EQ(t[0]["file"], "a.dds");
  EXPECT_EQ(t[0]["data_bytes"], 43832 - 128);
  // Measured on the H200: 47104 bytes per 256^2 BC1 chain (1024 arrays, tests/data/texture/
  // h200-alloc.json); the planner must be within 2% of it.
  EXPECT_NEAR(t[0]["device_bytes"].get<double>(), 47104.0, 0.02 * 47104.0);
  EXPECT_EQ(t[1]["format"], "BC5");
  EXPECT_EQ(t[1]["data_bytes"], std::filesystem::file_size(dir / "set/b.dds") - 128);
  EXPECT_EQ(t[2]["format"], "ASTC_8x8");
  EXPECT_EQ(t[2]["data_bytes"], std::filesystem::file_size(dir / "set/c.astc") - 16);
  EXPECT_EQ(t[3]["format"], "RGBA8_SRGB");
  EXPECT_EQ(t[3]["data_bytes"], 256 * 256 * 4);
  EXPECT_THROW((void)load_entries(dir / "nothing"), texture_file_error);
}

}  // namespace
}  // namespace vramkit::texture
