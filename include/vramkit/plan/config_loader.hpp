// Reads model descriptions from Hugging Face config.json files and from the built-in presets
// (config files and torchvision shapes compiled into the library). Thread-safe: no shared state.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "vramkit/plan/model_description.hpp"

namespace vramkit::plan {

/// Parses a config.json text. `source` names the file in errors. Throws invalid_input naming the
/// source and the missing or wrong field, or listing the supported model types for an unknown one.
model_description parse_model_config(std::string_view json_text, std::string_view source);

/// Reads and parses a config.json file; throws invalid_input when it cannot be read or parsed.
model_description load_model_config(const std::string& path);

/// Parses a mixture-of-experts routing for plan_request::expert_load: a JSON array with, per MoE
/// forward, the tokens each expert received ([[n0, n1, ...], ...]), or an object whose "calls"
/// holds them, each entry either such an array or a [module, [n0, n1, ...]] pair (what
/// bench/plan/measure_ground_truth.py --record-routing writes). Throws invalid_input naming the
/// source and the first malformed entry.
std::vector<std::vector<std::int64_t>> parse_expert_load(std::string_view json_text,
                                                         std::string_view source);

/// Reads and parses an expert-load file (parse_expert_load).
std::vector<std::vector<std::int64_t>> load_expert_load(const std::string& path);

/// The built-in preset of that name (e.g. "gpt2", "llama-3-8b", "resnet-50"); throws invalid_input
/// listing the presets when there is none.
model_description preset_model(std::string_view name);

/// Names of every built-in preset, sorted.
std::vector<std::string> preset_names();

/// `model_type` values parse_model_config accepts.
std::vector<std::string> supported_model_types();

/// A preset name, or else a path to a config.json (anything containing '/' or ending in .json).
model_description resolve_model(std::string_view name_or_path);

}  // namespace vramkit::plan
