// `loom report`: a self-contained HTML page whose charts are drawn by its script. The test opens
// it in headless Chromium (Debian's `chromium`) and reads back the DOM after the script ran.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <vector>

#include "tools/test_support.h"

namespace loom::test {
namespace {

// The page after its script ran in a window this many pixels wide.
CommandResult dom_at_width(const std::string& browser, const std::string& html,
                           const std::string& profile_dir, int width) {
  return run_command(browser + " --headless --no-sandbox --disable-gpu --user-data-dir=" +
                     profile_dir + " --window-size=" + std::to_string(width) +
                     ",1000 --dump-dom file://" + html + " 2>/dev/null");
}

// The markup of one chart (<div id="ID" class="chart">, which holds an svg and no div).
std::string chart(const std::string& dom, const std::string& id) {
  const auto at = dom.find("<div id=\"" + id + "\" class=\"chart\">");
  if (at == std::string::npos) return "";
  return dom.substr(at, dom.find("</div>", at) - at);
}

// The values of a chart's tick labels on one axis: "x", "y" or "y2" (the right-hand scale).
std::vector<double> ticks(const std::string& chart_markup, const std::string& axis) {
  const std::regex tick("class=\"tick " + axis + "\" data-value=\"([^\"]+)\"");
  std::vector<double> values;
  for (std::sregex_iterator it(chart_markup.begin(), chart_markup.end(), tick), end; it != end;
       ++it) {
    values.push_back(std::stod((*it)[1]));
  }
  return values;
}

// Ticks a reader can use: at least three, evenly spaced by 1, 2, 2.5 or 5 x 10^k.
void expect_nice(const std::vector<double>& values, const std::string& what) {
  ASSERT_GE(values.size(), 3u) << what;
  const double step = values[1] - values[0];
  ASSERT_GT(step, 0) << what;
  for (std::size_t i = 1; i < values.size(); ++i) {
    EXPECT_NEAR(values[i] - values[i - 1], step, 1e-9 * step) << what << " tick " << i;
  }
  const double mantissa = step / std::pow(10.0, std::floor(std::log10(step) + 1e-9));
  const double nice[] = {1.0, 2.0, 2.5, 5.0};
  EXPECT_TRUE(std::any_of(std::begin(nice), std::end(nice),
                          [&](double m) { return std::abs(mantissa - m) < 1e-9; }))
      << what << ": spacing " << step;
}

// The width the chart's svg was drawn at.
int svg_width(const std::string& chart_markup) {
  std::smatch m;
  const std::regex width("<svg[^>]* width=\"([0-9]+)\"");
  return std::regex_search(chart_markup, m, width) ? std::stoi(m[1]) : 0;
}

TEST(Report, RendersItsChartsInHeadlessChromium) {
  const std::string browser = chromium();
  if (browser.empty())
    GTEST_SKIP() << "chromium is not installed (scripts/install-deps.sh installs it)";
  TempDir dir;
  const auto trained = run_loom("train " + tiny_synthetic_args() + " " + quick_autotune_args() +
                                " --set train.epochs=3 --out " + (dir / "run"));
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  const auto report = run_loom("report " + (dir / "run"));
  ASSERT_EQ(report.exit_code, 0) << report.output;
  const std::string page = read_text(dir / "run/report.html");
  // Self-contained: the only URL is the SVG namespace name, which is not fetched.
  EXPECT_EQ(count_of(page, "http"), count_of(page, "http://www.w3.org/2000/svg"))
      << page.substr(0, 500);

  const auto dom = rendered_dom(browser, dir / "run/report.html", dir / "profile");
  ASSERT_EQ(dom.exit_code, 0) << dom.output;
  // Three charts drawn: the stacked phases (one area per phase), throughput, loss (+ accuracy
  // dots).
  EXPECT_NE(dom.output.find("data-charts=\"3\""), std::string::npos) << dom.output.substr(0, 2000);
  EXPECT_GE(count_of(dom.output, "class=\"series\""), 7 + 1 + 1 + 2) << dom.output.substr(0, 2000);
  EXPECT_NE(dom.output.find("samples/s</b>"), std::string::npos);  // the headline was filled in
  // The autotuner's trials, one row each after the header.
  const auto summary = nlohmann::json::parse(read_text(dir / "run/summary.json"));
  const auto at = dom.output.find("<table id=\"trials\">");
  ASSERT_NE(at, std::string::npos) << dom.output.substr(0, 2000);
  const std::string table = dom.output.substr(at, dom.output.find("</table>", at) - at);
  EXPECT_EQ(count_of(table, "<tr>"), 1 + static_cast<int>(summary["autotune"]["trials"].size()))
      << table;
  EXPECT_NE(dom.output.find("Not used: every batch was built by this host"), std::string::npos);
}

// Every chart has labelled ticks on both axes, test accuracy its own 0..100% scale on the right,
// and no text covers another or leaves its chart (the page counts those itself, in the browser
// that lays it out, into <body data-overlaps>), on a wide page and a narrow one.
TEST(Report, ChartsHaveLabelledTicksAndAnAccuracyScaleAtTwoWidths) {
  const std::string browser = chromium();
  if (browser.empty())
    GTEST_SKIP() << "chromium is not installed (scripts/install-deps.sh installs it)";
  TempDir dir;
  const auto trained =
      run_loom("train " + tiny_synthetic_args() + " --set train.epochs=3 --out " + (dir / "run"));
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  ASSERT_EQ(run_loom("report " + (dir / "run")).exit_code, 0);
  std::vector<nlohmann::json> logged;
  std::istringstream lines(read_text(dir / "run/metrics.jsonl"));
  for (std::string line; std::getline(lines, line);) {
    const auto record = nlohmann::json::parse(line);
    if (record["type"] == "step") logged.push_back(record);
  }
  ASSERT_GE(logged.size(), 3u);
  const double first = logged.front()["step"], last = logged.back()["step"];
  double max_loss = 0, max_rate = 0;
  for (const auto& r : logged) {
    max_loss = std::max(max_loss, r["loss"].get<double>());
    max_rate = std::max(max_rate, r["samples_per_second"].get<double>());
  }

  int widths[2] = {0, 0};
  for (int i = 0; i < 2; ++i) {
    const int window = i == 0 ? 1400 : 640;
    const auto dom = dom_at_width(browser, dir / "run/report.html", dir / "profile", window);
    ASSERT_EQ(dom.exit_code, 0) << dom.output;
    const std::string at = " at " + std::to_string(window) + " px";
    EXPECT_NE(dom.output.find("data-charts=\"3\""), std::string::npos) << at;
    EXPECT_NE(dom.output.find("data-overlaps=\"0\""), std::string::npos)
        << at << ": " << dom.output.substr(0, 300);
    // Both axes of every chart: x within the logged steps, y from zero up to a tick at or
    // above the largest value drawn (the stacked phases' total is not in the records).
    for (const std::string id : {"phases", "throughput", "loss"}) {
      const std::string markup = chart(dom.output, id);
      const auto x = ticks(markup, "x"), y = ticks(markup, "y");
      expect_nice(x, id + " x" + at);
      expect_nice(y, id + " y" + at);
      if (x.empty() || y.empty()) continue;
      EXPECT_LE(x.size(), 8u) << id << at;
      EXPECT_GE(x.front(), first) << id << at;
      EXPECT_LE(x.back(), last) << id << at;
      EXPECT_EQ(y.front(), 0) << id << at;
      EXPECT_LE(y.size(), 7u) << id << at;
      const double top = id == "loss" ? max_loss : id == "throughput" ? max_rate : 0;
      EXPECT_GE(y.back(), top) << id << at;
      EXPECT_TRUE(id == "loss" || ticks(markup, "y2").empty()) << id << at;
    }
    // Test accuracy on its own scale: 0 to 100% in steps of 20%, titled, on the right.
    const std::string loss = chart(dom.output, "loss");
    EXPECT_EQ(ticks(loss, "y2"), (std::vector<double>{0, 0.2, 0.4, 0.6, 0.8, 1})) << at;
    EXPECT_EQ(count_of(loss, "class=\"title y2\""), 1) << at;
    widths[i] = svg_width(loss);
  }
  // Drawn to the page's width, so the text keeps its size on the narrow page.
  EXPECT_GT(widths[0], widths[1]);
  EXPECT_GT(widths[1], 0);
}

TEST(Report, RunWithoutSummaryIsAConfigError) {
  TempDir dir;
  const auto r = run_loom("report " + dir.path());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("summary.json"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace loom::test
