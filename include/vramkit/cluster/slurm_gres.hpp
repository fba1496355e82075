// Slurm configuration for memory-sized GPU shards: each GPU is exposed as GRES `shard` tokens of
// one fixed byte size (and as a `gpu`), so Slurm's own select/cons_tres places jobs by memory.
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "vramkit/cluster/gpu_state.hpp"
#include "vramkit/cluster/placement.hpp"

namespace vramkit::cluster {

/// Shards a request needs: ceil(request_bytes / shard_bytes). Throws invalid_input when shard_bytes
/// is zero.
[[nodiscard]] std::uint64_t shards_for_request(std::uint64_t request_bytes,
                                               std::uint64_t shard_bytes);

/// Shards a GPU offers: floor((total - driver-reserved - headroom) / shard_bytes), so the shards
/// of the jobs on one GPU never add up to more than it holds.
[[nodiscard]] std::uint64_t shards_per_gpu(const gpu_state& gpu, std::uint64_t shard_bytes,
                                           const headroom& safety = {});

struct slurm_gres_options {
  std::string node_name;                      ///< NodeName= in both files
  std::uint64_t shard_bytes = 0;              ///< one cluster-wide shard size, e.g. 1 GiB
  std::string device_prefix = "/dev/nvidia";  ///< File= is device_prefix + GPU index
  headroom safety{};                          ///< kept out of the shards on every GPU
};

/// The three texts an operator installs.
struct slurm_gres_config {
  std::string gres_conf;      ///< gres.conf lines: one gpu and one shard line per GPU
  std::string node_line;      ///< slurm.conf NodeName=... Gres=gpu:TYPE:N,shard:S line
  std::string submit_config;  ///< key=value file read by slurm/job_submit.lua
  std::uint64_t max_gpu_shards = 0;
};

/// Slurm GRES type name for a GPU product: lower case letters and digits of the first word that
/// holds a digit, up to a hyphen ("NVIDIA H200" -> "h200", "NVIDIA A100-SXM4-80GB" -> "a100");
/// "gpu" if no word holds one.
[[nodiscard]] std::string slurm_gpu_type(const std::string& product_name);

/// Builds the configuration for one node. Throws invalid_input when there are no GPUs, the shard
/// size is zero, or a GPU is smaller than one shard.
[[nodiscard]] slurm_gres_config make_slurm_gres(const std::vector<gpu_state>& gpus,
                                                const slurm_gres_options& options);

}  // namespace vramkit::cluster
