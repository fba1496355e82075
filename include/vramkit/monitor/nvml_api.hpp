// The monitor's names for the NVML interface, which lives in core (vramkit/core/nvml_api.hpp) so
// that the probe shares the one loader without depending on the monitor. `monitor::nvml_api`,
// `monitor::load_nvml` and the value types stay valid spellings of the core ones.
#pragma once

#include "vramkit/core/nvml_api.hpp"

namespace vramkit::monitor {

using vramkit::load_nvml;
using vramkit::nvml_api;
using vramkit::nvml_clocks;
using vramkit::nvml_ecc;
using vramkit::nvml_memory;
using vramkit::nvml_mig_instance;
using vramkit::nvml_nvlink;
using vramkit::nvml_pcie;
using vramkit::nvml_pcie_counters;
using vramkit::nvml_pcie_link;
using vramkit::nvml_process;
using vramkit::nvml_process_kind;
using vramkit::nvml_status;
using vramkit::nvml_utilization;
using vramkit::nvml_value;
using vramkit::to_string;

}  // namespace vramkit::monitor
