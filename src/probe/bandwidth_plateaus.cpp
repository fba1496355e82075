// Plateaus of a bandwidth curve (see bandwidth_plateaus.hpp).
#include "vramkit/probe/detail/bandwidth_plateaus.hpp"

#include <algorithm>
#include <cmath>

namespace vramkit::probe::detail {
namespace {

double median_of(std::vector<double> v) { return sample_stats::of(std::move(v)).median; }

}  // namespace

std::vector<bandwidth_plateau> find_bandwidth_plateaus(const std::vector<curve::point>& points,
                                                       double tolerance) {
  std::vector<bandwidth_plateau> runs;
  if (points.empty()) return runs;
  auto y = [&](std::size_t i) { return points[i].y.median; };
  std::size_t start = 0;
  std::vector<double> ys = {y(0)};
  auto close_run = [&](std::size_t last) { runs.push_back({start, last, median_of(ys), 0, {}}); };
  for (std::size_t i = 1; i < points.size(); ++i) {
    const double ref = median_of(ys);
    if (std::abs(y(i) - ref) <= tolerance * ref) {
      ys.push_back(y(i));
      continue;
    }
    close_run(i - 1);
    start = i;
    ys = {y(i)};
  }
  close_run(points.size() - 1);
  // A lone point between two runs is the working set partly fitting, not a level.
  std::vector<bandwidth_plateau> kept;
  for (std::size_t r = 0; r < runs.size(); ++r) {
    const bool lone = runs[r].first == runs[r].last;
    if (lone && r > 0 && r + 1 < runs.size()) continue;
    kept.push_back(runs[r]);
  }
  // Where each plateau ends: the curve crosses the midpoint to the next plateau's bandwidth.
  for (std::size_t r = 0; r + 1 < kept.size(); ++r) {
    const double mid = 0.5 * (kept[r].bandwidth + kept[r + 1].bandwidth);
    const bool falling = kept[r + 1].bandwidth < kept[r].bandwidth;
    for (std::size_t i = kept[r].last; i + 1 <= kept[r + 1].first; ++i) {
      const double a = y(i), b = y(i + 1);
      const bool crosses = falling ? (a >= mid && b <= mid) : (a <= mid && b >= mid);
      if (!crosses) continue;
      const double t = a == b ? 0.0 : (a - mid) / (a - b);
      const double lx =
          std::log2(points[i].x) + t * (std::log2(points[i + 1].x) - std::log2(points[i].x));
      kept[r].end_x = std::exp2(lx);
      break;
    }
    if (kept[r].end_x == 0) kept[r].end_x = points[kept[r].last].x;
  }
  return kept;
}

void name_gpu_cache_plateaus(std::vector<bandwidth_plateau>& plateaus,
                             const std::vector<curve::point>& points, std::uint64_t l2_bytes) {
  if (plateaus.empty() || points.empty()) return;
  const double l2 = static_cast<double>(l2_bytes);
  std::size_t end = plateaus.size();
  if (plateaus.size() >= 2 && points[plateaus.back().first].x > 0.5 * l2) {
    plateaus.back().name = "HBM";
    end = plateaus.size() - 1;
  }
  // Between L1 and device memory: the last plateau is the L2; one before it that also ends past
  // a quarter of the L2 is its near part (an L2 in two partitions holds data read by every SM in
  // both, so the fastest run ends near half the L2).
  bool have_l2 = false;
  for (std::size_t r = end; r-- > 0;) {
    const double e = plateaus[r].end_x > 0 ? plateaus[r].end_x : points[plateaus[r].last].x;
    if (e <= 0.25 * l2) {
      plateaus[r].name = "L1";
      break;
    }
    plateaus[r].name = have_l2 ? "L2 near" : "L2";
    have_l2 = true;
  }
}

}  // namespace vramkit::probe::detail
