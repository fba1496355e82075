// The GPU probe's named test cases (nvbandwidth's idea): one table of {key, section, description,
// run} from which `vramkit probe --list`, the `--only` section names and the run loop are all
// read, and against which every key a GPU section emits is checked, so the list cannot drift from
// what runs. Shared by the CUDA and the CPU-only build (where `run` is null). Immutable;
// thread-safe.
#pragma once

#include <string>
#include <vector>

#include "vramkit/probe/measurement.hpp"

namespace vramkit::probe::detail {

struct gpu_context;

/// How often a case runs: once per GPU (`ctx` is that GPU), or once per probe with every GPU
/// taking part (`ctx` is GPU 0; the case reaches the others itself).
enum class case_scope { per_gpu, all_gpus };

/// Runs a case; it appends its measurements, curves, levels and skips to `ctx.report`.
using case_runner = void (*)(gpu_context& ctx);

/// One named test. `key` has placeholders: {N} a GPU ordinal, {A}->{B} a pair of GPUs, other
/// {X} a word (a stride, element size, offset). Cases that share a `run` are produced by one call
/// of it (e.g. a figure and its size sweep); the run loop calls each runner once, in table order.
struct probe_case {
  const char* key;
  const char* section;
  const char* description;
  case_runner run;  ///< null in a build without CUDA
  case_scope scope = case_scope::per_gpu;
};

/// Every GPU case, in the order they run and are listed.
const std::vector<probe_case>& gpu_cases();

/// "gpu" (all of them), then each case's section once, in table order.
std::vector<std::string> gpu_sections();

/// True when `options` selects GPU section `section` ("gpu" selects all of them).
bool wants_gpu_section(const probe_options& options, const std::string& section);

/// True when `options` selects at least one GPU section.
bool wants_any_gpu_section(const probe_options& options);

/// The registered case whose key pattern matches `key` (a concrete key such as
/// "gpu0.device.read"), or nullptr.
const probe_case* find_gpu_case(const std::string& key);

/// `key` itself when a registered case matches it; throws logic_error otherwise (a section
/// emitting a key that --list does not show is a bug).
const std::string& registered_key(const std::string& key);

}  // namespace vramkit::probe::detail
