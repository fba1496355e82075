// HTML report of a probe run: one page, charts as inline SVG (see report_html.hpp).
#include "vramkit/probe/report_html.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <set>

#include <fmt/format.h>

#include "vramkit/core/units.hpp"
#include "vramkit/probe/hierarchy.hpp"
#include "vramkit/probe/report_table.hpp"

namespace vramkit::probe {
namespace {

constexpr double chart_w = 720, chart_h = 380;
constexpr double pad_l = 70, pad_r = 20, pad_t = 30, pad_b = 50;

std::string short_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  return fmt::format("{:g} {}", std::round(b * 10) / 10, units[u]);
}

// Series colours, in order; the first is the single-curve colour.
constexpr const char* palette[] = {"#1f6fb2", "#d9730d", "#2e8b57", "#8e44ad", "#c0392b", "#555"};

struct series {
  const curve* c;
  std::string label;
};

struct axis {
  bool log = false;
  double lo = 0, hi = 1;
  std::vector<double> ticks;
};

// A y axis over [ymin, ymax]: log for latencies spanning orders of magnitude, else linear from 0
// with ticks at 1, 2 or 5 x a power of ten.
axis y_axis(double ymin, double ymax, bool allow_log) {
  axis a;
  if (ymax <= 0) ymax = 1;
  a.log = allow_log && ymin > 0 && ymax / ymin > 20;
  if (a.log) {
    a.lo = std::pow(10.0, std::floor(std::log10(ymin)));
    a.hi = std::pow(10.0, std::ceil(std::log10(ymax)));
    for (double d = a.lo; d <= a.hi * 1.0001; d *= 10) {
      for (double m : {1.0, 2.0, 5.0}) {
        if (d * m <= a.hi * 1.0001) a.ticks.push_back(d * m);
      }
    }
    return a;
  }
  const double raw = ymax / 5;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double step = raw <= mag       ? mag
                      : raw <= 2 * mag ? 2 * mag
                      : raw <= 5 * mag ? 5 * mag
                                       : 10 * mag;
  a.hi = std::ceil(ymax * 1.02 / step) * step;
  for (double t = 0; t <= a.hi * 1.0001; t += step) a.ticks.push_back(t);
  return a;
}

double y_pos(const axis& a, double y) {
  const double t = a.log ? (std::log10(std::max(y, a.lo)) - std::log10(a.lo)) /
                               (std::log10(a.hi) - std::log10(a.lo))
                         : y / a.hi;
  return chart_h - pad_b - t * (chart_h - pad_t - pad_b);
}

std::string x_text(const std::string& x_label, double x) {
  return x_label == "bytes" ? short_bytes(x) : format_figure(x);
}

void y_range(const std::vector<series>& v, double& lo, double& hi) {
  lo = 1e300;
  hi = 0;
  for (const auto& sr : v) {
    for (const auto& p : sr.c->points) {
      hi = std::max({hi, p.y.max, p.y.median});
      lo = std::min({lo, p.y.min, p.y.median});
    }
  }
}

// The dashed level lines of a single latency chart: each level's latency, and the size where the
// curve steps past it.
std::string level_lines(const curve& c, const std::vector<memory_level>& levels, const axis& ya,
                        double xmin, double xmax, const std::function<double(double)>& fx) {
  std::string s;
  for (const auto& l : levels) {
    if (c.key.rfind(l.device + ".", 0) != 0 || l.latency_ns > ya.hi || l.latency_ns <= 0) continue;
    s += fmt::format(
        "<line x1=\"{0}\" y1=\"{1:.1f}\" x2=\"{2}\" y2=\"{1:.1f}\" class=\"lvl\"/>"
        "<text x=\"{3}\" y=\"{4:.1f}\" class=\"lt\">{5} {6} ns</text>\n",
        pad_l, y_pos(ya, l.latency_ns), chart_w - pad_r, pad_l + 4, y_pos(ya, l.latency_ns) - 3,
        html_escape(l.name), format_figure(l.latency_ns));
    const auto sz = static_cast<double>(l.measured_size_bytes);
    if (l.measured_size_bytes > 0 && sz >= xmin && sz <= xmax) {
      s +=
          fmt::format("<line x1=\"{0:.1f}\" y1=\"{1}\" x2=\"{0:.1f}\" y2=\"{2}\" class=\"lvl\"/>\n",
                      fx(sz), pad_t, chart_h - pad_b);
    }
  }
  return s;
}

// Axes, grid and labels of a chart.
std::string chart_frame(const std::string& title, const curve& c0, const axis& ya, const axis* yb,
                        const std::string& right_unit, bool logx, double xmin, double xmax,
                        const std::function<double(double)>& fx) {
  std::string s;
  s += fmt::format("<text x=\"{}\" y=\"18\" class=\"ct\">{}</text>\n", pad_l, html_escape(title));
  s += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" class=\"axis\"/>\n", pad_l,
                   chart_h - pad_b, chart_w - pad_r);
  s += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\" class=\"axis\"/>\n", pad_l,
                   pad_t, chart_h - pad_b);
  for (double y : ya.ticks) {
    s += fmt::format(
        "<line x1=\"{0}\" y1=\"{1:.1f}\" x2=\"{2}\" y2=\"{1:.1f}\" class=\"grid\"/>"
        "<text x=\"{3}\" y=\"{4:.1f}\" class=\"yl\">{5}</text>\n",
        pad_l, y_pos(ya, y), chart_w - pad_r, pad_l - 6, y_pos(ya, y) + 4, format_figure(y));
  }
  if (yb != nullptr) {
    s += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\" class=\"axis\"/>\n",
                     chart_w - pad_r, pad_t, chart_h - pad_b);
    for (double y : yb->ticks) {
      s += fmt::format("<text x=\"{}\" y=\"{:.1f}\" class=\"yr\">{}</text>\n", chart_w - pad_r + 4,
                       y_pos(*yb, y) + 4, format_figure(y));
    }
    s += fmt::format(
        "<text x=\"{0}\" y=\"{1}\" class=\"yl\" transform=\"rotate(90 {0} {1})\">{2}{3}</text>\n",
        chart_w - 4, chart_h / 2, html_escape(right_unit), yb->log ? " (log scale)" : "");
  }
  if (logx) {
    // Ticks at powers of two, thinned to at most ~10 labels.
    const int lo = static_cast<int>(std::ceil(std::log2(xmin)));
    const int hi = static_cast<int>(std::floor(std::log2(xmax)));
    const int step = std::max(1, (hi - lo + 8) / 8);
    for (int e = lo; e <= hi; e += step) {
      const double x = std::ldexp(1.0, e);
      s += fmt::format(
          "<line x1=\"{0:.1f}\" y1=\"{1}\" x2=\"{0:.1f}\" y2=\"{2}\" class=\"grid\"/>"
          "<text x=\"{0:.1f}\" y=\"{3}\" class=\"xl\">{4}</text>\n",
          fx(x), pad_t, chart_h - pad_b, chart_h - pad_b + 16, x_text(c0.x_label, x));
    }
  } else {
    for (int i = 0; i <= 5; ++i) {
      const double x = xmin + (xmax - xmin) * i / 5;
      s += fmt::format("<text x=\"{:.1f}\" y=\"{}\" class=\"xl\">{}</text>\n", fx(x),
                       chart_h - pad_b + 16, x_text(c0.x_label, x));
    }
  }
  s += fmt::format("<text x=\"{}\" y=\"{}\" class=\"xl\">{}{}</text>\n", (chart_w + pad_l) / 2,
                   chart_h - 8, html_escape(c0.x_label), logx ? " (log scale)" : "");
  s += fmt::format(
      "<text x=\"14\" y=\"{}\" class=\"yl\" transform=\"rotate(-90 14 {})\">{}{}</text>\n",
      chart_h / 2, chart_h / 2, html_escape(c0.y_unit), ya.log ? " (log scale)" : "");
  return s;
}

// One chart of one or more curves over the same x; `right` curves (optional) against their own y
// axis on the right (bandwidth and latency over one working-set axis). Levels of the device are
// drawn on a chart of a single latency curve.
std::string svg_chart(const std::string& title, const std::vector<series>& left,
                      const std::vector<memory_level>& levels, int id,
                      const std::vector<series>& right = {}) {
  std::vector<series> all = left;
  all.insert(all.end(), right.begin(), right.end());
  if (left.empty() || left.front().c->points.empty()) return {};
  const curve& c0 = *left.front().c;
  double xmin = c0.points.front().x, xmax = xmin;
  for (const auto& sr : all) {
    for (const auto& p : sr.c->points) {
      xmin = std::min(xmin, p.x);
      xmax = std::max(xmax, p.x);
    }
  }
  double lmin = 0, lmax = 0;
  y_range(left, lmin, lmax);
  const axis ya = y_axis(lmin, lmax, c0.y_unit == "ns");
  axis yb;
  if (!right.empty()) {
    double rmin = 0, rmax = 0;
    y_range(right, rmin, rmax);
    yb = y_axis(rmin, rmax, right.front().c->y_unit == "ns");
  }
  const bool logx = c0.log_x && xmin > 0;
  const std::function<double(double)> fx = [&](double x) {
    if (xmax <= xmin) return pad_l + (chart_w - pad_l - pad_r) / 2;
    const double t = logx ? (std::log2(x) - std::log2(xmin)) / (std::log2(xmax) - std::log2(xmin))
                          : (x - xmin) / (xmax - xmin);
    return pad_l + t * (chart_w - pad_l - pad_r);
  };

  std::string s =
      fmt::format("<svg class=\"chart\" id=\"chart{}\" viewBox=\"0 0 {} {}\" role=\"img\">\n", id,
                  chart_w, chart_h);
  s += chart_frame(title, c0, ya, right.empty() ? nullptr : &yb,
                   right.empty() ? std::string() : right.front().c->y_unit, logx, xmin, xmax, fx);
  if (all.size() == 1 && c0.y_unit == "ns") s += level_lines(c0, levels, ya, xmin, xmax, fx);
  // Per series: min-max bars, the median line, points with a tooltip, a legend entry.
  for (std::size_t k = 0; k < all.size(); ++k) {
    const curve& c = *all[k].c;
    const axis& ax = k < left.size() ? ya : yb;
    const char* colour = palette[k % (sizeof palette / sizeof *palette)];
    std::string line;
    for (const auto& p : c.points) {
      s += fmt::format(
          "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" class=\"rng\" "
          "stroke=\"{3}\"/>\n",
          fx(p.x), y_pos(ax, p.y.min), y_pos(ax, p.y.max), colour);
      line += fmt::format("{:.1f},{:.1f} ", fx(p.x), y_pos(ax, p.y.median));
    }
    s += fmt::format("<polyline class=\"med\" stroke=\"{}\" points=\"{}\"/>\n", colour, line);
    for (const auto& p : c.points) {
      s += fmt::format(
          "<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\" class=\"pt\" fill=\"{}\"><title>{}: median "
          "{} {} (min {}, max {}, {} samples)</title></circle>\n",
          fx(p.x), y_pos(ax, p.y.median), colour,
          c.x_label == "bytes" ? html_escape(format_bytes(p.x)) : format_figure(p.x),
          format_figure(p.y.median), html_escape(c.y_unit), format_figure(p.y.min),
          format_figure(p.y.max), p.samples.size());
    }
    if (all.size() > 1) {
      const double ly = pad_t + 6 + 14.0 * static_cast<double>(k);
      s += fmt::format(
          "<rect x=\"{}\" y=\"{:.1f}\" width=\"12\" height=\"4\" fill=\"{}\"/>"
          "<text x=\"{}\" y=\"{:.1f}\" class=\"lg\">{}</text>\n",
          chart_w - pad_r - 250, ly, colour, chart_w - pad_r - 234, ly + 5,
          html_escape(all[k].label));
    }
  }
  s += "</svg>\n";
  return s;
}

std::string svg_chart(const curve& c, const std::vector<memory_level>& levels, int id) {
  return svg_chart(c.title.empty() ? c.key : c.title, {{&c, c.key}}, levels, id);
}

// The hierarchy as a picture: one bar per level, its length the bandwidth on a log scale, its
// colour the verdict, with size, bandwidth, latency and % of peak written beside it.
std::string hierarchy_svg(const std::vector<hierarchy_level>& levels) {
  const double row = 34, w = 1000, label_w = 300, bar_w = 300;
  const double h = 30 + row * static_cast<double>(levels.size());
  double bmin = 1e300, bmax = 0;
  for (const auto& l : levels) {
    if (!l.bandwidth_gbps || *l.bandwidth_gbps <= 0) continue;
    bmin = std::min(bmin, *l.bandwidth_gbps);
    bmax = std::max(bmax, *l.bandwidth_gbps);
  }
  const double lo = bmax > 0 ? std::pow(10.0, std::floor(std::log10(bmin))) : 1;
  const double hi = bmax > 0 ? std::pow(10.0, std::ceil(std::log10(bmax))) : 10;
  std::string s = fmt::format(
      "<svg class=\"hier\" viewBox=\"0 0 {} {}\" role=\"img\" aria-label=\"memory hierarchy\">\n",
      w, h);
  s += fmt::format(
      "<text x=\"8\" y=\"18\" class=\"ct\">level</text><text x=\"{}\" y=\"18\" class=\"ct\">"
      "bandwidth (log scale; colour: verdict)</text><text x=\"{}\" y=\"18\" class=\"ct\">"
      "size / bandwidth / latency / % of peak / verdict</text>\n",
      label_w, label_w + bar_w + 10);
  double y = 30;
  for (const auto& l : levels) {
    const std::string label = l.device == "host" ? l.name : l.device + " " + l.name;
    s += fmt::format("<text x=\"8\" y=\"{:.0f}\" class=\"hl\">{}</text>\n", y + 20,
                     html_escape(label));
    double len = 4;
    if (l.bandwidth_gbps && *l.bandwidth_gbps > 0 && hi > lo) {
      len = std::max(4.0, bar_w * (std::log10(*l.bandwidth_gbps) - std::log10(lo) + 0.3) /
                              (std::log10(hi) - std::log10(lo) + 0.3));
    }
    s += fmt::format(
        "<rect x=\"{}\" y=\"{:.0f}\" width=\"{:.1f}\" height=\"22\" class=\"hb {}\"><title>{}"
        "</title></rect>\n",
        label_w, y + 5, len, to_string(l.verdict),
        html_escape(l.bandwidth_key.empty() ? l.latency_key : l.bandwidth_key));
    const std::string text =
        (l.size_bytes ? short_bytes(static_cast<double>(*l.size_bytes)) : std::string("-")) +
        " / " + (l.bandwidth_gbps ? format_figure(*l.bandwidth_gbps) + " GB/s" : "-") + " / " +
        (l.latency_ns ? format_figure(*l.latency_ns) + " ns" : "-") + " / " +
        (l.percent_of_peak ? fmt::format("{:.1f}%", *l.percent_of_peak) : "-") + " / " +
        to_string(l.verdict) + (l.note.empty() ? "" : " (" + l.note + ")");
    s += fmt::format("<text x=\"{}\" y=\"{:.0f}\" class=\"hl\">{}</text>\n", label_w + bar_w + 10,
                     y + 20, html_escape(text));
    y += row;
  }
  s += "</svg>\n";
  return s;
}

// Curves that read best side by side, one chart per group of at least two; marks the curves used.
std::string grouped_charts(const probe_report& r, std::vector<bool>& used, int& id) {
  using keyed = std::vector<std::pair<std::string, std::string>>;
  auto find = [&](const std::string& key) -> int {
    for (std::size_t i = 0; i < r.curves.size(); ++i)
      if (r.curves[i].key == key && !r.curves[i].points.empty()) return static_cast<int>(i);
    return -1;
  };
  std::string out;
  auto group = [&](const std::string& title, const keyed& keys, const keyed& right = {}) {
    std::vector<series> l, rt;
    std::vector<int> idx;
    for (const auto& [k, label] : keys) {
      if (const int i = find(k); i >= 0) {
        l.push_back({&r.curves[static_cast<std::size_t>(i)], label});
        idx.push_back(i);
      }
    }
    for (const auto& [k, label] : right) {
      if (const int i = find(k); i >= 0) {
        rt.push_back({&r.curves[static_cast<std::size_t>(i)], label});
        idx.push_back(i);
      }
    }
    if (l.empty()) std::swap(l, rt);
    if (l.size() + rt.size() < 2) return;  // a lone curve keeps its own chart
    for (int i : idx) used[static_cast<std::size_t>(i)] = true;
    out += svg_chart(title, l, r.levels, id++, rt);
  };
  std::set<std::string> gpus;
  for (const auto& c : r.curves) {
    const auto dot = c.key.find('.');
    if (c.key.rfind("gpu", 0) == 0 && dot != std::string::npos) gpus.insert(c.key.substr(0, dot));
  }
  for (const auto& g : gpus) {
    group(g + ": host to device, device to host and both at once (pinned)",
          {{g + ".h2d.pinned.sweep", "H2D"},
           {g + ".d2h.pinned.sweep", "D2H"},
           {g + ".bidir.pinned.sweep", "both at once"}});
    group(g + ": pinned against pageable", {{g + ".h2d.pinned.sweep", "H2D pinned"},
                                            {g + ".h2d.pageable.sweep", "H2D pageable"},
                                            {g + ".d2h.pinned.sweep", "D2H pinned"},
                                            {g + ".d2h.pageable.sweep", "D2H pageable"}});
    group(g + ": read bandwidth (left) and load latency (right) over the working set",
          {{g + ".cache.sweep", "read bandwidth, whole set per multiprocessor, GB/s"},
           {g + ".cache.l2_sweep", "read bandwidth, L2 only, set read once a pass, GB/s"}},
          {{g + ".latency.sweep", "latency, ns"}});
    group(g + ": strided reads, ratio to the unit-stride read",
          {{g + ".pattern.read.stride.e4", "4-byte elements"},
           {g + ".pattern.read.stride.e8", "8-byte elements"},
           {g + ".pattern.read.stride.e16", "16-byte elements"}});
    group(g + ": strided writes, ratio to the unit-stride write",
          {{g + ".pattern.write.stride.e4", "4-byte elements"},
           {g + ".pattern.write.stride.e8", "8-byte elements"},
           {g + ".pattern.write.stride.e16", "16-byte elements"}});
    group(g + ": misaligned warps, ratio to unit stride",
          {{g + ".pattern.read.misaligned", "reads"}, {g + ".pattern.write.misaligned", "writes"}});
  }
  return out;
}

constexpr const char* style = R"(
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px;color:#1c1c1c;background:#fafafa}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:1.6em}
table{border-collapse:collapse;font-size:0.86em;background:#fff}
th,td{border:1px solid #ddd;padding:3px 7px;text-align:left;vertical-align:top}
th{background:#eee;cursor:pointer}td.n{text-align:right;font-variant-numeric:tabular-nums}
tr.low td.v{background:#fde2e1}tr.high td.v{background:#fff3cd}tr.normal td.v{background:#e3f5e1}
tr.samples td{color:#555;font-size:0.9em}tr.samples{display:none}tr.samples.open{display:table-row}
.chart{width:720px;max-width:100%;background:#fff;border:1px solid #ddd;margin:8px 8px 8px 0}
.axis{stroke:#333}.grid{stroke:#eee}.med{fill:none;stroke-width:2}
.lvl{stroke:#c0392b;stroke-dasharray:4 3}
.lt{fill:#c0392b;font-size:11px}.xl{font-size:11px;text-anchor:middle;fill:#333}
.yl{font-size:11px;text-anchor:end;fill:#333}.ct{font-size:13px;font-weight:600}
.skip{color:#7a5b00}.fail{color:#b00020;font-weight:600}
td.w{min-width:16em;max-width:32em;font-size:0.9em;color:#444}
.rng{stroke-width:3;stroke-opacity:0.35}.yr{font-size:11px;fill:#333}.lg{font-size:11px}
.hier{width:980px;max-width:100%;background:#fff;border:1px solid #ddd}.hl{font-size:13px}
.hb.normal{fill:#4caf50}.hb.low{fill:#e53935}.hb.high{fill:#f0ad00}.hb.unknown{fill:#9e9e9e}
details{margin-top:1.6em}summary{font-size:1.2em;font-weight:600;cursor:pointer}
)";

constexpr const char* script = R"(
document.querySelectorAll('tr.result').forEach(function(r){r.addEventListener('click',function(){
  var s=document.getElementById(r.dataset.samples);if(s){s.classList.toggle('open');}});});
document.querySelectorAll('th[data-col]').forEach(function(h){h.addEventListener('click',function(){
  var col=+h.dataset.col,body=h.closest('table').tBodies[0],rows=[],i;
  for(i=0;i<body.rows.length;i++){if(body.rows[i].classList.contains('result')){rows.push([body.rows[i],body.rows[i+1]]);}}
  var asc=h.dataset.asc!=='1';h.dataset.asc=asc?'1':'0';
  rows.sort(function(a,b){var x=a[0].cells[col].dataset.v||a[0].cells[col].textContent,
    y=b[0].cells[col].dataset.v||b[0].cells[col].textContent,nx=parseFloat(x),ny=parseFloat(y);
    var c=(!isNaN(nx)&&!isNaN(ny))?nx-ny:x.localeCompare(y);return asc?c:-c;});
  rows.forEach(function(p){body.appendChild(p[0]);body.appendChild(p[1]);});});});
)";

}  // namespace

std::string html_escape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char ch : text) {
    switch (ch) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += ch;
    }
  }
  return out;
}

std::string to_html(const probe_report& report) {
  std::string h;
  h += "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  h += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  const auto host = report.header.find("hostname");
  h += "<title>vramkit probe" +
       (host != report.header.end() ? " - " + html_escape(host->second) : std::string{}) +
       "</title>\n<style>" + style + "</style>\n</head>\n<body>\n";
  h += "<h1>vramkit probe</h1>\n";
  {
    // One line to say what was measured; the full header is folded at the end.
    std::string who;
    for (const char* k : {"gpu.0.name", "host.cpu.model", "hostname", "date"}) {
      const auto it = report.header.find(k);
      if (it != report.header.end()) who += (who.empty() ? "" : " · ") + it->second;
    }
    if (!who.empty()) h += "<p class=\"who\">" + html_escape(who) + "</p>\n";
  }
  const auto levels = hierarchy(report);
  if (!levels.empty()) {
    h += "<h2>The hierarchy at a glance</h2>\n";
    h += "<p>Each level with its measured bandwidth and latency (medians), the bandwidth's share "
         "of its physical peak and the verdict against the reference table.</p>\n";
    h += hierarchy_svg(levels);
  }

  if (!report.curves.empty()) {
    h += "<h2>Curves</h2>\n<div class=\"charts\">\n";
    int id = 0;
    std::vector<bool> used(report.curves.size(), false);
    h += grouped_charts(report, used, id);
    for (std::size_t i = 0; i < report.curves.size(); ++i)
      if (!used[i]) h += svg_chart(report.curves[i], report.levels, id++);
    h += "</div>\n";
  }

  h += "<h2>Results</h2>\n<p>Click a row for its raw samples; click a column title to sort.</p>\n";
  h += "<table class=\"results\">\n<thead><tr>";
  const char* cols[] = {"section", "test",       "size",      "median",  "min", "max",
                        "unit",    "convention", "% of peak", "verdict", "why", "note"};
  for (int i = 0; i < 12; ++i) h += fmt::format("<th data-col=\"{}\">{}</th>", i, cols[i]);
  h += "</tr></thead>\n<tbody>\n";
  int row = 0;
  for (const auto& m : report.results) {
    const auto pct = m.percent_of_peak();
    h += fmt::format("<tr class=\"result {}\" data-samples=\"s{}\">", to_string(m.verdict), row);
    h += "<td>" + html_escape(m.section) + "</td>";
    h += "<td title=\"" + html_escape(m.title) + "\">" + html_escape(m.key) + "</td>";
    h += fmt::format(
        "<td class=\"n\" data-v=\"{}\">{}</td>", m.size_bytes,
        m.size_bytes ? html_escape(format_bytes(static_cast<double>(m.size_bytes))) : "-");
    h += "<td class=\"n\">" + format_figure(m.stats.median) + "</td>";
    h += "<td class=\"n\">" + format_figure(m.stats.min) + "</td>";
    h += "<td class=\"n\">" + format_figure(m.stats.max) + "</td>";
    h += "<td>" + html_escape(m.unit) + "</td>";
    h += std::string("<td>") + to_string(m.convention) + "</td>";
    h += "<td class=\"n\">" + (pct ? fmt::format("{:.1f}", *pct) : std::string("-")) + "</td>";
    h += std::string("<td class=\"v\">") + to_string(m.verdict) + "</td>";
    h += "<td class=\"w\">" + html_escape(m.verdict_reason) + "</td>";
    h += "<td class=\"w\">" + html_escape(m.note) + (m.verified ? "" : " (not verified)") +
         "</td></tr>\n";
    std::string samples;
    for (double v : m.samples) samples += (samples.empty() ? "" : ", ") + format_figure(v);
    h += fmt::format(
        "<tr class=\"samples\" id=\"s{}\"><td colspan=\"12\">{} samples ({}): {}{}</td></tr>\n",
        row, m.samples.size(), html_escape(m.unit), samples,
        m.peak ? html_escape(
                     fmt::format("; peak {} {} ({})", format_figure(*m.peak), m.unit, m.peak_basis))
               : std::string{});
    ++row;
  }
  h += "</tbody>\n</table>\n";

  if (!report.levels.empty()) {
    h +=
        "<h2>Memory levels</h2>\n<table class=\"levels\">\n<thead><tr><th>device</th><th>level</th>"
        "<th>latency (ns)</th><th>curve steps after</th><th>reported "
        "size</th></tr></thead>\n<tbody>\n";
    for (const auto& l : report.levels) {
      h += "<tr><td>" + html_escape(l.device) + "</td><td>" + html_escape(l.name) +
           "</td><td class=\"n\">" + format_figure(l.latency_ns) + "</td><td class=\"n\">" +
           (l.measured_size_bytes
                ? html_escape(format_bytes(static_cast<double>(l.measured_size_bytes)))
                : std::string("-")) +
           "</td><td class=\"n\">" +
           (l.reported_size_bytes
                ? html_escape(format_bytes(static_cast<double>(*l.reported_size_bytes)))
                : std::string("-")) +
           "</td></tr>\n";
    }
    h += "</tbody>\n</table>\n";
  }
  if (!report.skips.empty()) {
    h += "<h2>Skipped</h2>\n<ul>\n";
    for (const auto& s : report.skips) {
      h += std::string("<li class=\"") + (s.failed ? "fail" : "skip") + "\">" +
           (s.failed ? "FAILED " : "") + html_escape(s.key) + ": " + html_escape(s.reason) +
           "</li>\n";
    }
    h += "</ul>\n";
  }
  h += "<details class=\"machine\"><summary>Machine keys</summary>\n<table class=\"header\">\n"
       "<tbody>\n";
  for (const auto& [k, v] : report.header) {
    h += "<tr><th>" + html_escape(k) + "</th><td>" + html_escape(v) + "</td></tr>\n";
  }
  h += fmt::format("<tr><th>schema_version</th><td>{}</td></tr>\n", report.schema);
  h += "</tbody>\n</table>\n</details>\n";
  h += std::string("<script>") + script + "</script>\n</body>\n</html>\n";
  return h;
}

}  // namespace vramkit::probe
