// Reading cache levels off a bandwidth-over-working-set curve (the GPU cache section): the flat
// runs (plateaus) of the curve, the working set where each one ends, and which level each is.
// Exposed for tests. Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "vramkit/probe/measurement.hpp"

namespace vramkit::probe::detail {

/// A flat run of a bandwidth curve: points [first, last], their median bandwidth, and where the
/// curve falls past it.
struct bandwidth_plateau {
  std::size_t first = 0, last = 0;  ///< point indices
  double bandwidth = 0;             ///< median of the points' medians
  /// Where the curve leaves the plateau for the next one: between the first point after the run
  /// that lies beyond the tolerance band on the next plateau's side and the last point before it
  /// inside the band, interpolated in log x to the band's edge; 0 for the last plateau.
  double end_x = 0;
  std::string name;  ///< set by name_l2_sweep_plateaus ("L2 near", "L2", "HBM") or the caller
};

/// The plateaus of `points` (ascending x, bandwidth y): a run continues while each point stays
/// within `tolerance` (relative) of the run's median; a single point between two runs is a
/// transition and joins neither. At least one plateau for a non-empty curve.
std::vector<bandwidth_plateau> find_bandwidth_plateaus(const std::vector<curve::point>& points,
                                                       double tolerance = 0.12);

/// How far a plateau of an L2 sweep must reach (its last working set over its first) to be the
/// L2: a narrower run is a step of the curve's descent to device memory.
inline constexpr double l2_min_span = 1.25;

/// Names the plateaus of an L2 sweep (sets from below the L2 size the driver reports,
/// `l2_bytes`, to past it): the last plateau, when it starts past half the L2, is "HBM"; the last
/// one before it that starts below the L2 size and reaches l2_min_span (or the only plateau,
/// when it starts below the L2 size) is "L2"; any earlier ones are "L2 near" (a partition of the
/// L2 that answers sooner). Runs between the L2 and device memory (steps of the descent) stay
/// unnamed.
void name_l2_sweep_plateaus(std::vector<bandwidth_plateau>& plateaus,
                            const std::vector<curve::point>& points, std::uint64_t l2_bytes);

/// The plateaus for a reader, "7.50 MiB-52.50 MiB at 8774 GB/s (L2); ...", and the curve's
/// spread (fastest over slowest point): what a report says when it finds no level.
std::string describe_plateaus(const std::vector<bandwidth_plateau>& plateaus,
                              const std::vector<curve::point>& points);

/// Why name_l2_sweep_plateaus named no "L2" (a sentence), or empty when it named one.
std::string why_no_l2_plateau(const std::vector<bandwidth_plateau>& plateaus,
                              const std::vector<curve::point>& points, std::uint64_t l2_bytes);

}  // namespace vramkit::probe::detail
