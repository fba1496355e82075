// HTML report of a probe run: one page, charts as inline SVG (see report_html.hpp).
#include "vramkit/probe/report_html.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "vramkit/core/units.hpp"
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

// One chart for one curve; levels of the same device drawn on latency curves.
std::string svg_chart(const curve& c, const std::vector<memory_level>& levels, int id) {
  std::string s;
  if (c.points.empty()) return s;
  double xmin = c.points.front().x, xmax = c.points.front().x, ymax = 0;
  double ymin = c.points.front().y.min;
  for (const auto& p : c.points) {
    xmin = std::min(xmin, p.x);
    xmax = std::max(xmax, p.x);
    ymax = std::max({ymax, p.y.max, p.y.median});
    ymin = std::min({ymin, p.y.min, p.y.median});
  }
  const bool logx = c.log_x && xmin > 0;
  auto fx = [&](double x) {
    if (xmax <= xmin) return pad_l + (chart_w - pad_l - pad_r) / 2;
    const double t = logx ? (std::log2(x) - std::log2(xmin)) / (std::log2(xmax) - std::log2(xmin))
                          : (x - xmin) / (xmax - xmin);
    return pad_l + t * (chart_w - pad_l - pad_r);
  };
  if (ymax <= 0) ymax = 1;
  // Latencies span orders of magnitude (L1 to DRAM): a log y axis keeps every level visible.
  const bool logy = c.y_unit == "ns" && ymin > 0 && ymax / ymin > 20;
  std::vector<double> yticks;
  double ylo = 0, yhi = ymax;
  if (logy) {
    ylo = std::pow(10.0, std::floor(std::log10(ymin)));
    yhi = std::pow(10.0, std::ceil(std::log10(ymax)));
    for (double d = ylo; d <= yhi * 1.0001; d *= 10) {
      for (double m : {1.0, 2.0, 5.0}) {
        if (d * m <= yhi * 1.0001) yticks.push_back(d * m);
      }
    }
  } else {
    // Ticks at 1, 2 or 5 x a power of ten, about five of them.
    const double raw = ymax / 5;
    const double mag = std::pow(10.0, std::floor(std::log10(raw)));
    const double step = raw <= mag       ? mag
                        : raw <= 2 * mag ? 2 * mag
                        : raw <= 5 * mag ? 5 * mag
                                         : 10 * mag;
    yhi = std::ceil(ymax * 1.02 / step) * step;
    for (double t = 0; t <= yhi * 1.0001; t += step) yticks.push_back(t);
  }
  auto fy = [&](double y) {
    const double t = logy ? (std::log10(std::max(y, ylo)) - std::log10(ylo)) /
                                (std::log10(yhi) - std::log10(ylo))
                          : y / yhi;
    return chart_h - pad_b - t * (chart_h - pad_t - pad_b);
  };

  s += fmt::format("<svg class=\"chart\" id=\"chart{}\" viewBox=\"0 0 {} {}\" role=\"img\">\n", id,
                   chart_w, chart_h);
  s += fmt::format("<text x=\"{}\" y=\"18\" class=\"ct\">{}</text>\n", pad_l,
                   html_escape(c.title.empty() ? c.key : c.title));
  // Axes and grid.
  s += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" class=\"axis\"/>\n", pad_l,
                   chart_h - pad_b, chart_w - pad_r);
  s += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\" class=\"axis\"/>\n", pad_l,
                   pad_t, chart_h - pad_b);
  for (double y : yticks) {
    s += fmt::format(
        "<line x1=\"{0}\" y1=\"{1:.1f}\" x2=\"{2}\" y2=\"{1:.1f}\" class=\"grid\"/>"
        "<text x=\"{3}\" y=\"{4:.1f}\" class=\"yl\">{5}</text>\n",
        pad_l, fy(y), chart_w - pad_r, pad_l - 6, fy(y) + 4, format_figure(y));
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
          fx(x), pad_t, chart_h - pad_b, chart_h - pad_b + 16,
          c.x_label == "bytes" ? short_bytes(x) : format_figure(x));
    }
  } else {
    for (int i = 0; i <= 5; ++i) {
      const double x = xmin + (xmax - xmin) * i / 5;
      s += fmt::format("<text x=\"{:.1f}\" y=\"{}\" class=\"xl\">{}</text>\n", fx(x),
                       chart_h - pad_b + 16,
                       c.x_label == "bytes" ? short_bytes(x) : format_figure(x));
    }
  }
  s += fmt::format("<text x=\"{}\" y=\"{}\" class=\"xl\">{}{}</text>\n", (chart_w + pad_l) / 2,
                   chart_h - 8, html_escape(c.x_label), logx ? " (log scale)" : "");
  s += fmt::format(
      "<text x=\"14\" y=\"{}\" class=\"yl\" transform=\"rotate(-90 14 {})\">{}{}</text>\n",
      chart_h / 2, chart_h / 2, html_escape(c.y_unit), logy ? " (log scale)" : "");
  // Levels: a dashed line at each level's latency and at the size where the curve steps past it.
  if (c.y_unit == "ns") {
    for (const auto& l : levels) {
      if (c.key.rfind(l.device + ".", 0) != 0 || l.latency_ns > yhi || l.latency_ns <= 0) continue;
      s += fmt::format(
          "<line x1=\"{0}\" y1=\"{1:.1f}\" x2=\"{2}\" y2=\"{1:.1f}\" class=\"lvl\"/>"
          "<text x=\"{3}\" y=\"{4:.1f}\" class=\"lt\">{5} {6} ns</text>\n",
          pad_l, fy(l.latency_ns), chart_w - pad_r, pad_l + 4, fy(l.latency_ns) - 3,
          html_escape(l.name), format_figure(l.latency_ns));
      if (l.measured_size_bytes > 0 && l.measured_size_bytes >= xmin &&
          l.measured_size_bytes <= xmax) {
        s += fmt::format(
            "<line x1=\"{0:.1f}\" y1=\"{1}\" x2=\"{0:.1f}\" y2=\"{2}\" class=\"lvl\"/>\n",
            fx(static_cast<double>(l.measured_size_bytes)), pad_t, chart_h - pad_b);
      }
    }
  }
  // min-max bars, the median line, and points with a tooltip.
  std::string line;
  for (const auto& p : c.points) {
    s += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" class=\"rng\"/>\n",
        fx(p.x), fy(p.y.min), fy(p.y.max));
    line += fmt::format("{:.1f},{:.1f} ", fx(p.x), fy(p.y.median));
  }
  s += "<polyline class=\"med\" points=\"" + line + "\"/>\n";
  for (const auto& p : c.points) {
    s += fmt::format(
        "<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\" class=\"pt\"><title>{}: median {} "
        "{} (min {}, max {}, {} samples)</title></circle>\n",
        fx(p.x), fy(p.y.median),
        c.x_label == "bytes" ? html_escape(format_bytes(p.x)) : format_figure(p.x),
        format_figure(p.y.median), html_escape(c.y_unit), format_figure(p.y.min),
        format_figure(p.y.max), p.samples.size());
  }
  s += "</svg>\n";
  return s;
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
.axis{stroke:#333}.grid{stroke:#eee}.med{fill:none;stroke:#1f6fb2;stroke-width:2}
.rng{stroke:#9cc3e6;stroke-width:3}.pt{fill:#1f6fb2}.lvl{stroke:#c0392b;stroke-dasharray:4 3}
.lt{fill:#c0392b;font-size:11px}.xl{font-size:11px;text-anchor:middle;fill:#333}
.yl{font-size:11px;text-anchor:end;fill:#333}.ct{font-size:13px;font-weight:600}
.skip{color:#7a5b00}.fail{color:#b00020;font-weight:600}
td.w{min-width:16em;max-width:32em;font-size:0.9em;color:#444}
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

  h += "<h2>Machine</h2>\n<table class=\"header\">\n<tbody>\n";
  for (const auto& [k, v] : report.header) {
    h += "<tr><th>" + html_escape(k) + "</th><td>" + html_escape(v) + "</td></tr>\n";
  }
  h += fmt::format("<tr><th>schema_version</th><td>{}</td></tr>\n", report.schema);
  h += "</tbody>\n</table>\n";

  if (!report.curves.empty()) {
    h += "<h2>Curves</h2>\n<div class=\"charts\">\n";
    int id = 0;
    for (const auto& c : report.curves) h += svg_chart(c, report.levels, id++);
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
  h += std::string("<script>") + script + "</script>\n</body>\n</html>\n";
  return h;
}

}  // namespace vramkit::probe
