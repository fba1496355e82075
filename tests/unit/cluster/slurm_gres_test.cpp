// Slurm shard arithmetic, the generated gres.conf / slurm.conf / job_submit settings and their
// text, JSON and file forms, reading the settings back, and the shards of a memory request.
#include "vramkit/cluster/slurm_gres.hpp"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "vramkit/core/error.hpp"
#include "vramkit/core/units.hpp"

namespace vramkit::cluster {
namespace {

gpu_state gpu(int index, const char* name, std::uint64_t total, std::uint64_t reserved = 0) {
  gpu_state g;
  g.index = index;
  g.name = name;
  g.total_bytes = total;
  g.reserved_bytes = reserved;
  g.used_bytes = reserved;
  g.free_bytes = total - reserved;
  return g;
}

TEST(SlurmGres, ShardsForARequestRoundUp) {
  EXPECT_EQ(shards_for_request(24 * GiB, GiB), 24u);
  EXPECT_EQ(shards_for_request(24 * GiB + 1, GiB), 25u);
  EXPECT_EQ(shards_for_request(1, 4 * GiB), 1u);
  EXPECT_EQ(shards_for_request(0, GiB), 0u);
  EXPECT_THROW((void)shards_for_request(GiB, 0), invalid_input);
}

TEST(SlurmGres, ShardsPerGpuRoundDownAfterReservedAndHeadroom) {
  // An H200 reports 143771 MiB (150 754 820 096 bytes): 140 whole GiB.
  EXPECT_EQ(shards_per_gpu(gpu(0, "NVIDIA H200", 150754820096ULL), GiB), 140u);
  EXPECT_EQ(shards_per_gpu(gpu(0, "x", 80 * GiB, GiB / 2), GiB), 79u);
  EXPECT_EQ(shards_per_gpu(gpu(0, "x", 80 * GiB), GiB, headroom{0, 0.05}), 76u);
  EXPECT_EQ(shards_per_gpu(gpu(0, "x", GiB - 1), GiB), 0u);
}

TEST(SlurmGres, GpuTypeNames) {
  EXPECT_EQ(slurm_gpu_type("NVIDIA H200"), "h200");
  EXPECT_EQ(slurm_gpu_type("NVIDIA H100 80GB HBM3"), "h100");
  EXPECT_EQ(slurm_gpu_type("NVIDIA A100-SXM4-80GB"), "a100");
  EXPECT_EQ(slurm_gpu_type("Tesla V100-SXM2-16GB"), "v100");
  EXPECT_EQ(slurm_gpu_type("Fake GPU"), "gpu");
  EXPECT_EQ(slurm_gpu_type(""), "gpu");
}

TEST(SlurmGres, WritesGresConfNodeLineAndSubmitSettings) {
  slurm_gres_options o;
  o.node_name = "gpu01";
  o.shard_bytes = 4 * GiB;
  const auto c = make_slurm_gres(
      {gpu(0, "NVIDIA H100 80GB HBM3", 80 * GiB), gpu(1, "NVIDIA A100-SXM4-40GB", 40 * GiB),
       gpu(2, "NVIDIA H100 80GB HBM3", 80 * GiB)},
      o);
  EXPECT_EQ(c.max_gpu_shards, 20u);
  EXPECT_NE(c.gres_conf.find("NodeName=gpu01 Name=gpu Type=h100 File=/dev/nvidia0\n"),
            std::string::npos);
  EXPECT_NE(c.gres_conf.find("NodeName=gpu01 Name=shard Count=20 File=/dev/nvidia0"),
            std::string::npos);
  EXPECT_NE(c.gres_conf.find("NodeName=gpu01 Name=gpu Type=a100 File=/dev/nvidia1\n"),
            std::string::npos);
  EXPECT_NE(c.gres_conf.find("NodeName=gpu01 Name=shard Count=10 File=/dev/nvidia1"),
            std::string::npos);
  EXPECT_NE(c.node_line.find("\nNodeName=gpu01 Gres=gpu:h100:2,gpu:a100:1,shard:50\n"),
            std::string::npos)
      << c.node_line;
  EXPECT_NE(c.submit_config.find("\nshard_bytes=4294967296\n"), std::string::npos);
  EXPECT_NE(c.submit_config.find("\nmax_gpu_shards=20\n"), std::string::npos);
}

TEST(SlurmGres, RefusesWhatSlurmCouldNotUse) {
  slurm_gres_options o;
  o.node_name = "n";
  o.shard_bytes = GiB;
  EXPECT_THROW((void)make_slurm_gres({}, o), invalid_input);
  EXPECT_THROW((void)make_slurm_gres({gpu(0, "tiny", GiB / 2)}, o), invalid_input);
  o.shard_bytes = 0;
  EXPECT_THROW((void)make_slurm_gres({gpu(0, "x", GiB)}, o), invalid_input);
  o.shard_bytes = GiB;
  o.node_name.clear();
  EXPECT_THROW((void)make_slurm_gres({gpu(0, "x", GiB)}, o), invalid_input);
}

slurm_gres_config two_gpu_config() {
  slurm_gres_options o;
  o.node_name = "gpu[01-02]";
  o.shard_bytes = 4 * GiB;
  o.safety = headroom{GiB, 0};
  auto h100 = gpu(0, "NVIDIA H100 80GB HBM3", 80 * GiB, GiB / 2);
  h100.uuid = "GPU-a";
  auto a100 = gpu(3, "NVIDIA A100-SXM4-40GB", 40 * GiB);
  return make_slurm_gres({h100, a100}, o);
}

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(SlurmGres, NodeNamesThatAGresConfLineCanHold) {
  EXPECT_TRUE(is_slurm_node_name("gpu01"));
  EXPECT_TRUE(is_slurm_node_name("gpu[01-04,07]"));
  EXPECT_TRUE(is_slurm_node_name("rack-1.node_2"));
  EXPECT_TRUE(is_slurm_node_name(std::string(255, 'n')));
  EXPECT_FALSE(is_slurm_node_name(""));
  EXPECT_FALSE(is_slurm_node_name(std::string(256, 'n')));
  EXPECT_FALSE(is_slurm_node_name("gpu 01"));
  EXPECT_FALSE(is_slurm_node_name("gpu01=x"));
  EXPECT_FALSE(is_slurm_node_name("gpu01#"));
  EXPECT_FALSE(is_slurm_node_name("gpu01\nNodeName=evil"));
  slurm_gres_options o;
  o.node_name = "two words";
  o.shard_bytes = GiB;
  EXPECT_THROW((void)make_slurm_gres({gpu(0, "x", 2 * GiB)}, o), invalid_input);
}

TEST(SlurmGres, LocalNodeNameIsTheHostNameUpToItsFirstDot) {
  char buf[256] = {};
  ASSERT_EQ(gethostname(buf, sizeof buf - 1), 0);
  const std::string host(buf);
  const std::string name = local_node_name();
  EXPECT_EQ(name, host.substr(0, host.find('.')));
  EXPECT_EQ(name.find('.'), std::string::npos);
}

TEST(SlurmGres, ConfigRecordsWhatEachGpuOffers) {
  const auto c = two_gpu_config();
  EXPECT_EQ(c.node_name, "gpu[01-02]");
  EXPECT_EQ(c.shard_bytes, 4 * GiB);
  ASSERT_EQ(c.gpus.size(), 2u);
  // 80 GiB - 0.5 reserved - 1 headroom = 78.5 GiB: 19 shards of 4 GiB; 40 - 1 = 39: 9.
  EXPECT_EQ(c.gpus[0].index, 0);
  EXPECT_EQ(c.gpus[0].uuid, "GPU-a");
  EXPECT_EQ(c.gpus[0].type, "h100");
  EXPECT_EQ(c.gpus[0].shards, 19u);
  EXPECT_EQ(c.gpus[1].index, 3);
  EXPECT_EQ(c.gpus[1].type, "a100");
  EXPECT_EQ(c.gpus[1].total_bytes, 40 * GiB);
  EXPECT_EQ(c.gpus[1].shards, 9u);
  EXPECT_EQ(c.max_gpu_shards, 19u);
  EXPECT_NE(c.gres_conf.find("Name=shard Count=9 File=/dev/nvidia3"), std::string::npos);
}

TEST(SlurmGres, TextIsTheThreeFilesUnderHeadings) {
  const auto c = two_gpu_config();
  EXPECT_EQ(to_text(c), c.gres_conf + "\n" + c.node_line +
                            "\n# vramkit-slurm.conf (next to job_submit.lua)\n" + c.submit_config);
}

TEST(SlurmGres, JsonCarriesTheTextsAndEveryGpu) {
  const auto c = two_gpu_config();
  const auto j = nlohmann::json::parse(to_json(c));
  EXPECT_EQ(j.at("schema_version"), 1);
  EXPECT_EQ(j.at("node"), "gpu[01-02]");
  EXPECT_EQ(j.at("shard_bytes"), 4 * GiB);
  EXPECT_EQ(j.at("max_gpu_shards"), 19);
  EXPECT_EQ(j.at("gres_conf"), c.gres_conf);
  EXPECT_EQ(j.at("node_line"), c.node_line);
  EXPECT_EQ(j.at("submit_config"), c.submit_config);
  ASSERT_EQ(j.at("gpus").size(), 2u);
  const auto& g = j.at("gpus").at(1);
  EXPECT_EQ(g.at("index"), 3);
  EXPECT_EQ(g.at("name"), "NVIDIA A100-SXM4-40GB");
  EXPECT_EQ(g.at("uuid"), "");
  EXPECT_EQ(g.at("total_bytes"), 40 * GiB);
  EXPECT_EQ(g.at("type"), "a100");
  EXPECT_EQ(g.at("shards"), 9);
  EXPECT_NE(to_json(c).find("\n  \"gpus\": ["), std::string::npos) << "indented by two";
}

TEST(SlurmGres, WritesTheThreeFilesIntoANewFolder) {
  const auto c = two_gpu_config();
  const auto root = std::filesystem::temp_directory_path() /
                    ("vramkit-slurm-gres-test-" + std::to_string(::getpid()));
  const auto dir = root / "etc" / "slurm";
  write_slurm_gres_files(c, dir);
  EXPECT_EQ(read_file(dir / "gres.conf"), c.gres_conf);
  EXPECT_EQ(read_file(dir / "slurm-node.conf"), c.node_line);
  EXPECT_EQ(read_file(dir / "vramkit-slurm.conf"), c.submit_config);
  // A folder that cannot be made: its parent is a file.
  EXPECT_THROW(write_slurm_gres_files(c, dir / "gres.conf" / "sub"), error);
  std::filesystem::remove_all(root);
}

TEST(SlurmGres, SubmitSettingsReadBackWhatWasWritten) {
  const auto c = two_gpu_config();
  const auto s = parse_slurm_shard_settings(c.submit_config, "vramkit-slurm.conf");
  EXPECT_EQ(s.shard_bytes, 4 * GiB);
  EXPECT_EQ(s.max_gpu_shards, 19u);
  const auto partial = parse_slurm_shard_settings("\r\n  # only one\r\nshard_bytes=2\r\n", "f");
  EXPECT_EQ(partial.shard_bytes, 2u);
  EXPECT_FALSE(partial.max_gpu_shards.has_value());
  const auto empty = parse_slurm_shard_settings("", "f");
  EXPECT_FALSE(empty.shard_bytes || empty.max_gpu_shards);
}

TEST(SlurmGres, SubmitSettingsRefuseOtherLinesByNumber) {
  auto message = [](const char* text) {
    try {
      (void)parse_slurm_shard_settings(text, "conf");
    } catch (const invalid_input& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(message("# ok\nshard_size=1\n"),
            "conf:2: expected shard_bytes=N or max_gpu_shards=N (from vramkit slurm gres), got "
            "'shard_size=1'");
  EXPECT_EQ(message("shard_bytes\n"),
            "conf:1: expected shard_bytes=N or max_gpu_shards=N (from vramkit slurm gres), got "
            "'shard_bytes'");
  EXPECT_EQ(message("shard_bytes=1GiB"), "conf:1: shard_bytes is not a whole number");
  EXPECT_EQ(message("max_gpu_shards="), "conf:1: max_gpu_shards is not a whole number");
  EXPECT_EQ(message("shard_bytes=-1"), "conf:1: shard_bytes is not a whole number");
  EXPECT_EQ(message("\nmax_gpu_shards=99999999999999999999999"),
            "conf:2: max_gpu_shards is out of range");
}

TEST(SlurmGres, ShardRequestFitsOnTheLargestGpuOrSaysWhyNot) {
  const auto fits = make_shard_request(24 * GiB, GiB, std::nullopt);
  EXPECT_EQ(fits.shards, 24u);
  EXPECT_TRUE(fits.fits);
  EXPECT_EQ(to_text(fits), "24 shards of 1.00 GiB for 24.00 GiB: sbatch --gres=shard:24\n");
  const auto edge = make_shard_request(139 * GiB, GiB, 139);
  EXPECT_TRUE(edge.fits);
  const auto big = make_shard_request(200 * GiB, 4 * GiB, 34);
  EXPECT_EQ(big.shards, 50u);
  EXPECT_FALSE(big.fits);
  EXPECT_EQ(to_text(big),
            "50 shards of 4.00 GiB for 200.00 GiB: sbatch --gres=shard:50 (more than the 34 "
            "shards of the largest GPU: no GPU can hold it)\n");
  EXPECT_THROW((void)make_shard_request(GiB, 0, std::nullopt), invalid_input);
}

TEST(SlurmGres, ShardRequestJsonNamesTheGres) {
  const auto j = nlohmann::json::parse(to_json(make_shard_request(GiB + 1, GiB, 10)));
  EXPECT_EQ(j.at("schema_version"), 1);
  EXPECT_EQ(j.at("request_bytes"), GiB + 1);
  EXPECT_EQ(j.at("shard_bytes"), GiB);
  EXPECT_EQ(j.at("shards"), 2);
  EXPECT_EQ(j.at("fits"), true);
  EXPECT_EQ(j.at("gres"), "gres:shard:2");
  EXPECT_EQ(j.at("max_gpu_shards"), 10);
  const auto open = nlohmann::json::parse(to_json(make_shard_request(GiB, GiB, std::nullopt)));
  EXPECT_FALSE(open.contains("max_gpu_shards"));
}

TEST(GpuFixture, ReadsTheSharedFakeGpuFormat) {
  const auto gpus = gpus_from_fixture_json(R"({"gpus": [
    {"name": "NVIDIA H200", "uuid": "GPU-1", "memory_total_bytes": 1000, "memory_used_bytes": 300,
     "memory_reserved_bytes": 100, "processes": [{"pid": 7, "used_bytes": 200}]},
    {"name": "NVIDIA H200", "memory_total_bytes": 2000}]})");
  ASSERT_EQ(gpus.size(), 2u);
  EXPECT_EQ(gpus[0].free_bytes, 600u);  // total = used + reserved + free, as serve exports it
  EXPECT_EQ(gpus[0].reserved_bytes, 100u);
  EXPECT_EQ(gpus[1].index, 1);
  EXPECT_EQ(gpus[1].free_bytes, 2000u);
  EXPECT_THROW((void)gpus_from_fixture_json("{}"), invalid_input);
  EXPECT_THROW((void)gpus_from_fixture_json(R"({"gpus": [{"name": "x"}]})"), invalid_input);
  EXPECT_THROW((void)gpus_from_fixture_json(R"({"gpus": [{"memory_total_bytes": -1}]})"),
               invalid_input);
  EXPECT_THROW((void)gpus_from_fixture_json(
                   R"({"gpus": [{"memory_total_bytes": 1, "memory_used_bytes": 2}]})"),
               invalid_input);
}

}  // namespace
}  // namespace vramkit::cluster
