// Slurm shard arithmetic and the generated gres.conf / slurm.conf / job_submit settings.
#include "vramkit/cluster/slurm_gres.hpp"

#include <gtest/gtest.h>

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

TEST(GpuFixture, ReadsTheSharedFakeGpuFormat) {
  const auto gpus = gpus_from_fixture_json(R"({"gpus": [
    {"name": "NVIDIA H200", "uuid": "GPU-1", "memory_total_bytes": 1000, "memory_used_bytes": 300,
     "memory_reserved_bytes": 100, "processes": [{"pid": 7, "used_bytes": 200}]},
    {"name": "NVIDIA H200", "memory_total_bytes": 2000}]})");
  ASSERT_EQ(gpus.size(), 2u);
  EXPECT_EQ(gpus[0].free_bytes, 700u);  // used includes reserved, as NVML reports it
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
