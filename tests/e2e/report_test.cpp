// `loom report`: a self-contained HTML page whose charts are drawn by its script. The test opens
// it in headless Chromium (Debian's `chromium`) and reads back the DOM after the script ran.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tools/test_support.h"

namespace loom::test {
namespace {

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

TEST(Report, RunWithoutSummaryIsAConfigError) {
  TempDir dir;
  const auto r = run_loom("report " + dir.path());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("summary.json"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace loom::test
