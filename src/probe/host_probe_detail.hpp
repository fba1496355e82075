// The host sections over a given topology (internal): what run_host_probe does with the machine's,
// and what tests do with a described one (an hwloc XML and a sysfs tree, see host_topology.hpp).
#pragma once

#include "host_topology.hpp"
#include "vramkit/probe/measurement.hpp"

namespace vramkit::probe::detail {

/// The "host", "latency" and "loaded-latency" sections of `options` on `topo`.
void run_host_sections(const host_topology& topo, const probe_options& options,
                       probe_report& report);

}  // namespace vramkit::probe::detail
