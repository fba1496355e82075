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
  /// The working set (x) where the curve, falling from this plateau, crosses halfway down to the
  /// next one (interpolated in log x); 0 for the last plateau.
  double end_x = 0;
  std::string name;  ///< set by name_gpu_cache_plateaus: "L1", "L2", "HBM"
};

/// The plateaus of `points` (ascending x, bandwidth y): a run continues while each point stays
/// within `tolerance` (relative) of the run's median; a single point between two runs is a
/// transition and joins neither. At least one plateau for a non-empty curve.
std::vector<bandwidth_plateau> find_bandwidth_plateaus(const std::vector<curve::point>& points,
                                                       double tolerance = 0.12);

/// Names the plateaus of a GPU cache curve that reaches past the L2 (`l2_bytes` as the driver
/// reports it): the last plateau, when it starts past half the L2, is "HBM"; the one before it
/// is "L2", and one before that which still ends past a quarter of the L2 is "L2 near"; the
/// plateau that ends within a quarter of the L2 is "L1" (L1/shared). Any earlier keep no name.
void name_gpu_cache_plateaus(std::vector<bandwidth_plateau>& plateaus,
                             const std::vector<curve::point>& points, std::uint64_t l2_bytes);

}  // namespace vramkit::probe::detail
