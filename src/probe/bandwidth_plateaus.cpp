// Plateaus of a bandwidth curve (see bandwidth_plateaus.hpp).
#include "vramkit/probe/detail/bandwidth_plateaus.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "vramkit/core/units.hpp"

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
  // Where each plateau ends: the curve's first point after the run that lies beyond the band on
  // the side of the next plateau ends it; the crossing is interpolated in log x from the
  // last point before it that lies inside the band. Points on the other side (faster than an L2
  // plateau: a set re-read sooner than the sweep intends) neither extend it nor end it, and a
  // return into the band after the fall does not extend it either.
  for (std::size_t r = 0; r + 1 < kept.size(); ++r) {
    const double bw = kept[r].bandwidth;
    const bool falling = kept[r + 1].bandwidth < bw;
    const double lo = (1 - tolerance) * bw, hi = (1 + tolerance) * bw;
    auto past = [&](std::size_t i) { return falling ? y(i) < lo : y(i) > hi; };
    auto inside = [&](std::size_t i) { return y(i) >= lo && y(i) <= hi; };
    std::size_t j = kept[r].last + 1;
    while (j < points.size() && !past(j)) ++j;
    if (j == points.size()) {
      kept[r].end_x = points[kept[r].last].x;
      continue;
    }
    std::size_t i = j - 1;
    while (i > kept[r].first && !inside(i)) --i;
    const double bound = falling ? lo : hi;
    const double a = y(i), c = y(j);
    const double t = a == c ? 0.0 : std::clamp((a - bound) / (a - c), 0.0, 1.0);
    const double lx =
        std::log2(points[i].x) + t * (std::log2(points[j].x) - std::log2(points[i].x));
    kept[r].end_x = std::exp2(lx);
  }
  return kept;
}

void name_l2_sweep_plateaus(std::vector<bandwidth_plateau>& plateaus,
                            const std::vector<curve::point>& points, std::uint64_t l2_bytes) {
  if (plateaus.empty() || points.empty()) return;
  const auto l2 = static_cast<double>(l2_bytes);
  std::size_t end = plateaus.size();  // plateaus [0, end) may hold the L2
  if (plateaus.size() >= 2 && points[plateaus.back().first].x > 0.5 * l2) {
    plateaus.back().name = "HBM";
    end = plateaus.size() - 1;
  }
  // A level holds over a range of working sets; a run narrower than l2_min_span is a step of the
  // descent to the next level. With one plateau only, it is all the curve has.
  const double min_span = plateaus.size() == 1 ? 1.0 : l2_min_span;
  for (std::size_t r = end; r-- > 0;) {
    const auto& p = plateaus[r];
    if (points[p.first].x >= l2 || points[p.last].x < min_span * points[p.first].x) continue;
    plateaus[r].name = "L2";
    for (std::size_t q = 0; q < r; ++q) plateaus[q].name = "L2 near";
    return;
  }
}

std::string describe_plateaus(const std::vector<bandwidth_plateau>& plateaus,
                              const std::vector<curve::point>& points) {
  if (points.empty()) return "the curve has no points";
  std::string out;
  for (const auto& p : plateaus) {
    if (!out.empty()) out += "; ";
    out += format_bytes(points[p.first].x);
    if (p.last != p.first) out += "-" + format_bytes(points[p.last].x);
    out += fmt::format(" at {:.0f} GB/s", p.bandwidth);
    if (!p.name.empty()) out += " (" + p.name + ")";
  }
  const auto [lo, hi] = std::minmax_element(
      points.begin(), points.end(),
      [](const curve::point& a, const curve::point& b) { return a.y.median < b.y.median; });
  const double spread = lo->y.median > 0 ? hi->y.median / lo->y.median : 0;
  return fmt::format("plateaus {}; the curve spans {:.0f} to {:.0f} GB/s ({:.2f}x)", out,
                     lo->y.median, hi->y.median, spread);
}

std::string why_no_l2_plateau(const std::vector<bandwidth_plateau>& plateaus,
                              const std::vector<curve::point>& points, std::uint64_t l2_bytes) {
  for (const auto& p : plateaus)
    if (p.name == "L2") return {};
  if (points.empty()) return "the curve has no points";
  const std::string reported = format_bytes(static_cast<double>(l2_bytes));
  std::string why;
  if (points.front().x >= static_cast<double>(l2_bytes))
    why = "the sweep starts at " + format_bytes(points.front().x) +
          ", not below the reported L2 size (" + reported + ")";
  else
    why = fmt::format(
        "no plateau before device memory both starts below the reported L2 size ({}) and "
        "spans {:.2f}x in working set",
        reported, l2_min_span);
  return why + ": " + describe_plateaus(plateaus, points);
}

}  // namespace vramkit::probe::detail
