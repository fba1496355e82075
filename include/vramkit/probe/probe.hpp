// `vramkit probe` as a library call: the machine header, the host sections, the GPU sections and
// the verdicts in one report; plus the section names and stable keys for --only and --list.
// Call from one thread at a time.
#pragma once

#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "vramkit/probe/measurement.hpp"

namespace vramkit::probe {

/// Every --only section name: the host ones ("host", "latency"), then the GPU ones.
std::vector<std::string> probe_sections();

/// Throws vramkit::invalid_input naming the first unknown name in `only` and listing the valid
/// ones.
void check_sections(const std::set<std::string>& only);

/// Stable keys of every test, host then GPU, with one-line descriptions.
std::vector<std::pair<std::string, std::string>> probe_keys();

/// Runs the probe: header, the selected host and GPU sections, then the verdicts. A GPU section
/// that throws is recorded as a failed `skipped{"gpu", reason}` and the host results are kept.
/// Host buffers are sized within the memory available to the process (options.host_memory_bytes,
/// else memory_budget.hpp), which the header records ("host.memory.available", ".limits").
/// Throws invalid_input for unknown sections in `options.only` and, before measuring anything,
/// for a requested host size (host_buffer_bytes, max_latency_bytes) that does not fit.
probe_report run_probe(const probe_options& options);

/// True when a test of the report failed its verification (a `skipped` with `failed` set).
bool has_failures(const probe_report& report);

/// Why a run measured nothing of what it was asked: "section 'S' was skipped: REASON" for the
/// first section of `only` that was skipped whole and not failed (a skip's key names its section
/// as "gpu", "host.latency" or "gpu0.zerocopy"; the key "gpu" covers every GPU section), else "the
/// probe" when the report holds no result and no curve; nullopt when something asked was measured.
std::optional<std::string> unmeasured_section(const probe_report& report,
                                              const std::set<std::string>& only);

}  // namespace vramkit::probe
