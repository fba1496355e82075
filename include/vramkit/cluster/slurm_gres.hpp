// Slurm configuration for memory-sized GPU shards: each GPU is exposed as GRES `shard` tokens of
// one fixed byte size (and as a `gpu`), so Slurm's own select/cons_tres places jobs by memory; and
// the shards a job's memory request asks for. Pure functions (except local_node_name and
// write_slurm_gres_files); thread-safe.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
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

/// One GPU as the configuration exposes it.
struct slurm_gpu_shards {
  int index = 0;
  std::string name;
  std::string uuid;
  std::uint64_t total_bytes = 0;
  std::string type;          ///< the Gres type (slurm_gpu_type of the name)
  std::uint64_t shards = 0;  ///< shards_per_gpu
};

/// The three texts an operator installs, and what they were made from.
struct slurm_gres_config {
  std::string gres_conf;      ///< gres.conf lines: one gpu and one shard line per GPU
  std::string node_line;      ///< slurm.conf NodeName=... Gres=gpu:TYPE:N,shard:S line
  std::string submit_config;  ///< key=value file read by slurm/job_submit.lua
  std::uint64_t max_gpu_shards = 0;
  std::string node_name;
  std::uint64_t shard_bytes = 0;
  std::vector<slurm_gpu_shards> gpus;  ///< in the order given to make_slurm_gres
};

/// Slurm GRES type name for a GPU product: lower case letters and digits of the first word that
/// holds a digit, up to a hyphen ("NVIDIA H200" -> "h200", "NVIDIA A100-SXM4-80GB" -> "a100");
/// "gpu" if no word holds one.
[[nodiscard]] std::string slurm_gpu_type(const std::string& product_name);

/// True for a Slurm NodeName that can stand in a gres.conf line: a host name or a hostlist
/// expression (gpu[01-04]) of letters, digits, '.', '-', '_', '[', ']' and ',', 1-255 characters.
[[nodiscard]] bool is_slurm_node_name(std::string_view name) noexcept;

/// This host's name up to its first dot (Slurm's default NodeName); "localhost" when the system
/// gives none.
[[nodiscard]] std::string local_node_name();

/// Builds the configuration for one node. Throws invalid_input when there are no GPUs, the shard
/// size is zero, the node name is not is_slurm_node_name, or a GPU is smaller than one shard.
[[nodiscard]] slurm_gres_config make_slurm_gres(const std::vector<gpu_state>& gpus,
                                                const slurm_gres_options& options);

/// gres.conf, the slurm.conf line and the submit settings, one after the other under comment
/// headings, as `vramkit slurm gres` prints them.
[[nodiscard]] std::string to_text(const slurm_gres_config& config);

/// The configuration as a JSON document (schema_version 1; node, shard_bytes, max_gpu_shards, the
/// three texts, and per GPU index, name, uuid, total_bytes, type, shards), indented by two.
[[nodiscard]] std::string to_json(const slurm_gres_config& config);

/// Writes gres.conf, slurm-node.conf and vramkit-slurm.conf (the submit settings) into `dir`,
/// creating it when missing. Throws error naming the folder or file that could not be written.
void write_slurm_gres_files(const slurm_gres_config& config, const std::filesystem::path& dir);

/// The settings of a submit_config text (vramkit-slurm.conf) that were given.
struct slurm_shard_settings {
  std::optional<std::uint64_t> shard_bytes;
  std::optional<std::uint64_t> max_gpu_shards;
};

/// Reads a submit_config text: each line blank, a '#' comment, or shard_bytes=N or
/// max_gpu_shards=N with N a whole number. Throws invalid_input "ORIGIN:LINE: ..." naming the first
/// line that is none of these.
[[nodiscard]] slurm_shard_settings parse_slurm_shard_settings(std::string_view text,
                                                              std::string_view origin);

/// What a per-GPU memory request asks of Slurm: `shards` of `shard_bytes`, and whether that fits
/// on the largest GPU (always, when max_gpu_shards is unknown).
struct shard_request {
  std::uint64_t request_bytes = 0;
  std::uint64_t shard_bytes = 0;
  std::uint64_t shards = 0;
  std::optional<std::uint64_t> max_gpu_shards;
  bool fits = true;
};

/// The shards for `request_bytes` (shards_for_request) checked against `max_gpu_shards`. Throws
/// invalid_input when shard_bytes is zero.
[[nodiscard]] shard_request make_shard_request(std::uint64_t request_bytes,
                                               std::uint64_t shard_bytes,
                                               std::optional<std::uint64_t> max_gpu_shards);

/// One line: "24 shards of 1.00 GiB for 24.00 GiB: sbatch --gres=shard:24", with the reason when
/// it does not fit; ends with a newline.
[[nodiscard]] std::string to_text(const shard_request& r);

/// JSON (schema_version 1): request_bytes, shard_bytes, shards, fits, gres ("gres:shard:N") and
/// max_gpu_shards when known; indented by two.
[[nodiscard]] std::string to_json(const shard_request& r);

}  // namespace vramkit::cluster
