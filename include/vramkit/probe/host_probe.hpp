// The host sections of `vramkit probe`: "host" (memory bandwidth: read, write, copy, triad; one
// thread and all threads; per NUMA node where there are several) and "latency" (dependent pointer
// chase from 4 KiB past the last-level cache, with the cache levels read off the curve). Runs on
// every machine; call from one thread at a time (it starts and pins its own worker threads).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "vramkit/probe/measurement.hpp"

namespace vramkit::probe {

/// Adds the host measurements, the latency curve and the levels read off it to `report`, for the
/// sections of `options` that are "host" or "latency". A result that fails its verification is
/// not reported: a `skipped` entry with `failed = true` names it instead. Progress goes to
/// `options.progress`.
void run_host_probe(const probe_options& options, probe_report& report);

/// Fills the machine header: vramkit version, command line, date, hostname, CPU model, cores and
/// threads, NUMA nodes with their memory, caches, OS kernel (keys "vramkit.version", "host.*").
void fill_host_header(const probe_options& options, probe_report& report);

/// Stable keys of the host sections ({N}, {A}->{B} stand for NUMA node numbers, {level} for l1d,
/// l2, l3, dram) with one-line descriptions, for `vramkit probe --list`.
std::vector<std::pair<std::string, std::string>> host_probe_keys();

/// The --only section names the host side understands: "host", "latency".
std::vector<std::string> host_probe_sections();

}  // namespace vramkit::probe
