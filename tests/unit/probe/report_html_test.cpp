// The HTML report is one well-formed, self-contained page with a chart per curve.
#include "vramkit/probe/report_html.hpp"

#include <regex>
#include <set>
#include <vector>

#include <gtest/gtest.h>

#include "vramkit/probe/report_table.hpp"

namespace vramkit::probe {
namespace {

probe_report sample_report() {
  probe_report r;
  r.header["hostname"] = "node <7> & \"friends\"";
  auto m = make_measurement("host.bw.copy.all_threads", "host", "<script>alert(1)</script>", "",
                            "GB/s", {20.5, 21.0, 20.7});
  m.convention = byte_convention::read_plus_written;
  m.size_bytes = 256ull << 20;
  m.verdict = verdict_kind::low;
  m.verdict_reason = "buffer on the far NUMA node";
  r.results.push_back(m);
  curve bw = make_curve("gpu0.h2d.pinned.sweep", "", "pinned H2D vs size", "bytes", "GB/s", true);
  for (double x = 4096; x <= (1 << 30); x *= 4)
    bw.points.push_back({x, {1, x / 3e7, 60}, {x / 3e7}});
  r.curves.push_back(bw);
  curve lat = make_curve("host.latency", "", "", "bytes", "ns", true);
  lat.points.push_back({4096, {1, 1, 1}, {1}});
  lat.points.push_back({1 << 20, {4, 4, 4}, {4}});
  lat.points.push_back({1 << 28, {90, 95, 99}, {95}});
  r.curves.push_back(lat);
  r.levels.push_back({"L2", "host", 4, 1 << 20, 1 << 20});
  r.skips.push_back({"gpu", "no CUDA driver", false});
  return r;
}

// Checks that every non-void element is closed in order; returns the first problem or "".
std::string check_balanced(const std::string& html) {
  static const std::set<std::string> void_tags = {"meta", "link", "br", "hr", "img", "input"};
  std::vector<std::string> stack;
  const std::regex tag(R"(<(/?)([a-zA-Z][a-zA-Z0-9]*)([^>]*)>)");
  // Script and style bodies are not markup.
  std::string body =
      std::regex_replace(html, std::regex(R"(<script>[\s\S]*?</script>)"), "<script></script>");
  body = std::regex_replace(body, std::regex(R"(<style>[\s\S]*?</style>)"), "<style></style>");
  for (auto it = std::sregex_iterator(body.begin(), body.end(), tag); it != std::sregex_iterator();
       ++it) {
    const std::string name = (*it)[2];
    const bool closing = (*it)[1] == "/";
    const std::string attrs = (*it)[3];
    const bool self_closed = !attrs.empty() && attrs.back() == '/';
    if (closing) {
      if (stack.empty() || stack.back() != name) return "unexpected </" + name + ">";
      stack.pop_back();
    } else if (!self_closed && !void_tags.count(name)) {
      stack.push_back(name);
    }
  }
  return stack.empty() ? "" : "unclosed <" + stack.back() + ">";
}

TEST(ReportHtml, IsWellFormed) {
  const auto html = to_html(sample_report());
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_EQ(check_balanced(html), "");
}

TEST(ReportHtml, CheckerCatchesBrokenMarkup) {
  EXPECT_NE(check_balanced("<html><body><table><tr><td>x</tr></table></body></html>"), "");
  EXPECT_NE(check_balanced("<html><body>"), "");
}

TEST(ReportHtml, NeedsNoNetwork) {
  const auto html = to_html(sample_report());
  for (const char* s : {"http://", "https://", "src=", "href=", "@import", "url("}) {
    EXPECT_EQ(html.find(s), std::string::npos) << s;
  }
}

TEST(ReportHtml, DrawsOneChartPerCurveWithLevels) {
  const auto html = to_html(sample_report());
  std::size_t charts = 0;
  const std::string chart = "<svg class=\"chart\"";
  for (auto p = html.find(chart); p != std::string::npos; p = html.find(chart, p + 1)) ++charts;
  EXPECT_EQ(charts, 2u);
  // Plus the hierarchy picture at the top, before the first chart.
  EXPECT_LT(html.find("<svg class=\"hier\""), html.find(chart));
  EXPECT_NE(html.find("log scale"), std::string::npos);
  EXPECT_NE(html.find("class=\"lvl\""), std::string::npos) << "latency levels are marked";
  EXPECT_NE(html.find("host.bw.copy.all_threads"), std::string::npos);
  EXPECT_NE(html.find("buffer on the far NUMA node"), std::string::npos);
}

TEST(ReportHtml, EscapesText) {
  const auto html = to_html(sample_report());
  EXPECT_EQ(html.find("<script>alert"), std::string::npos);
  EXPECT_NE(html.find("&lt;script&gt;alert(1)&lt;/script&gt;"), std::string::npos);
  EXPECT_NE(html.find("node &lt;7&gt; &amp; &quot;friends&quot;"), std::string::npos);
}

TEST(ReportTable, GroupsBySectionAndSaysWhyNoGpu) {
  const auto t = to_table(sample_report());
  EXPECT_NE(t.find("[host]"), std::string::npos);
  EXPECT_NE(t.find("read_plus_written"), std::string::npos);
  EXPECT_NE(t.find("no GPU: no CUDA driver"), std::string::npos);
  EXPECT_NE(t.find("buffer on the far NUMA node"), std::string::npos);
  EXPECT_EQ(format_figure(12345.6), "12346");
  EXPECT_EQ(format_figure(3.14159), "3.14");
  EXPECT_EQ(format_figure(0.01234), "0.012");
}

}  // namespace
}  // namespace vramkit::probe
