// `loom report`: a self-contained HTML page whose charts are drawn by its script. The test opens
// it in headless Chromium (Debian's `chromium`) and reads back the DOM after the script ran.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <vector>

#include "e2e/json_output.h"
#include "e2e/language_model_fixture.h"
#include "tools/test_support.h"

namespace loom::test {
namespace {

const int kWidths[] = {1400, 640};  // a wide window and a narrow one

// Headless Chromium's path in `browser`; the test is skipped, saying how to get it, without one.
#define CHROMIUM_OR_SKIP(browser)         \
  const std::string browser = chromium(); \
  if (browser.empty())                    \
  GTEST_SKIP() << "chromium is not installed (scripts/install-deps.sh installs it)"

// Runs `train` (a `loom` command line that trains into `run`), then `loom report run`.
::testing::AssertionResult trained_and_reported(const std::string& train, const std::string& run) {
  const auto trained = run_loom(train);
  if (trained.exit_code != 0) return ::testing::AssertionFailure() << trained.output;
  const auto report = run_loom("report " + run);
  if (report.exit_code != 0) return ::testing::AssertionFailure() << report.output;
  return ::testing::AssertionSuccess();
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

// The opening tag of the element whose id is `id` ("" when there is none).
std::string tag_with_id(const std::string& dom, const std::string& id) {
  const auto at = dom.find(" id=\"" + id + "\"");
  if (at == std::string::npos) return "";
  const auto open = dom.rfind('<', at);
  return dom.substr(open, dom.find('>', at) - open + 1);
}

// An attribute's value in a tag ("" when it has none).
std::string attribute(const std::string& tag, const std::string& name) {
  std::smatch m;
  return std::regex_search(tag, m, std::regex(" " + name + "=\"([^\"]*)\"")) ? m[1].str() : "";
}

// The keys of the configuration rows the page shows (<tr data-key="...">).
std::set<std::string> shown_keys(const std::string& dom) {
  const std::regex row("<tr data-key=\"([^\"]+)\"");
  std::set<std::string> keys;
  for (std::sregex_iterator it(dom.begin(), dom.end(), row), end; it != end; ++it) {
    keys.insert((*it)[1]);
  }
  return keys;
}

// The chart's points, as its script placed them (data-points on its <svg>, pixels), each checked
// against its plot area (data-plot: left, top, right, bottom), with the page's own count of
// points outside it (data-outside). Returns the points.
std::vector<std::pair<double, double>> expect_points_inside(const std::string& dom,
                                                            const std::string& id,
                                                            const std::string& at) {
  const std::string markup = chart(dom, id);
  const auto svg_at = markup.find("<svg");
  if (svg_at == std::string::npos) {
    ADD_FAILURE() << id << at << ": no chart drawn: " << markup.substr(0, 300);
    return {};
  }
  const std::string svg = markup.substr(svg_at, markup.find('>', svg_at) - svg_at);
  EXPECT_EQ(attribute(svg, "data-outside"), "0") << id << at;
  const auto plot = nlohmann::json::parse(attribute(svg, "data-plot"));
  const auto points = nlohmann::json::parse(attribute(svg, "data-points"));
  const double left = plot[0], top = plot[1], right = plot[2], bottom = plot[3];
  EXPECT_LT(left, right) << id << at;
  EXPECT_LT(top, bottom) << id << at;
  std::vector<std::pair<double, double>> out;
  for (const auto& p : points) {
    const double x = p[0], y = p[1];
    EXPECT_TRUE(x >= left - 0.5 && x <= right + 0.5 && y >= top - 0.5 && y <= bottom + 0.5)
        << id << at << ": point (" << x << ", " << y << ") outside [" << left << ", " << top << ", "
        << right << ", " << bottom << "]";
    out.emplace_back(x, y);
  }
  return out;
}

// The centres of the evaluation dots a chart drew (<circle ... r="5">), by x.
std::vector<double> dot_xs(const std::string& chart_markup) {
  const std::regex dot("<circle cx=\"([^\"]+)\" cy=\"[^\"]+\" r=\"5\"");
  std::vector<double> xs;
  for (std::sregex_iterator it(chart_markup.begin(), chart_markup.end(), dot), end; it != end;
       ++it) {
    xs.push_back(std::stod((*it)[1]));
  }
  return xs;
}

TEST(Report, RendersItsChartsInHeadlessChromium) {
  CHROMIUM_OR_SKIP(browser);
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
// every point drawn inside its chart's axes, and no text covers another or leaves its chart
// (the page counts those itself, in the browser that lays it out, into <body data-overlaps>), on
// a wide page and a narrow one. A log line every 20 steps and an evaluation every 16: the first
// evaluation comes before the first log line, and must still sit right of the y axis.
TEST(Report, ChartsHaveLabelledTicksAndTheirPointsInsideTheirAxesAtTwoWidths) {
  CHROMIUM_OR_SKIP(browser);
  TempDir dir;
  ASSERT_TRUE(trained_and_reported("train " + tiny_synthetic_args() +
                                       " --set train.epochs=3 --set train.log_every=20 --out " +
                                       (dir / "run"),
                                   dir / "run"));
  const auto logged = metrics_records(dir / "run", "step");
  const auto evaluated = metrics_records(dir / "run", "epoch");
  ASSERT_GE(logged.size(), 3u);
  ASSERT_EQ(evaluated.size(), 3u);
  ASSERT_LT(evaluated[0]["step"].get<double>(), logged.front()["step"].get<double>());
  const double first = evaluated[0]["step"], last = logged.back()["step"];
  double max_loss = 0, max_rate = 0;
  for (const auto& r : logged) {
    max_loss = std::max(max_loss, r["loss"].get<double>());
    max_rate = std::max(max_rate, r["samples_per_second"].get<double>());
  }

  int widths[2] = {0, 0};
  for (int i = 0; i < 2; ++i) {
    const int window = kWidths[i];
    const auto dom = rendered_dom(browser, dir / "run/report.html", dir / "profile", window);
    ASSERT_EQ(dom.exit_code, 0) << dom.output;
    const std::string at = " at " + std::to_string(window) + " px";
    EXPECT_NE(dom.output.find("data-charts=\"3\""), std::string::npos) << at;
    EXPECT_NE(dom.output.find("data-overlaps=\"0\""), std::string::npos)
        << at << ": " << dom.output.substr(0, 300);
    // Both axes of every chart: x within the steps drawn (evaluations and log lines), y from
    // zero up to a tick at or above the largest value drawn (the stacked phases' total is not
    // in the records).
    for (const std::string id : {"phases", "throughput", "loss"}) {
      const std::string markup = chart(dom.output, id);
      const auto x = ticks(markup, "x"), y = ticks(markup, "y");
      expect_nice(x, id + " x" + at);
      expect_nice(y, id + " y" + at);
      expect_points_inside(dom.output, id, at);
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
    // Test accuracy on its own scale: 0 to 100% in steps of 20%, titled, on the right; a dot
    // for each evaluation, each at its own step.
    const std::string loss = chart(dom.output, "loss");
    EXPECT_EQ(ticks(loss, "y2"), (std::vector<double>{0, 0.2, 0.4, 0.6, 0.8, 1})) << at;
    EXPECT_EQ(count_of(loss, "class=\"title y2\""), 1) << at;
    const auto dots = dot_xs(loss);
    EXPECT_EQ(dots.size(), 3u) << at;
    EXPECT_TRUE(std::is_sorted(dots.begin(), dots.end()) &&
                std::adjacent_find(dots.begin(), dots.end()) == dots.end())
        << at;
    widths[i] = svg_width(loss);
  }
  // Drawn to the page's width, so the text keeps its size on the narrow page.
  EXPECT_GT(widths[0], widths[1]);
  EXPECT_GT(widths[1], 0);
}

// A run shorter than train.log_every logs every step, so its charts have a point per step (not
// one point, or none), its evaluations spread along x, all inside the axes. The page also says
// how the run was laid out, and shows the settings a CNN on synthetic data reads and no others.
TEST(Report, AShortRunHasAPointPerStepInsideEveryChart) {
  CHROMIUM_OR_SKIP(browser);
  TempDir dir;
  ASSERT_TRUE(trained_and_reported("train " + tiny_synthetic_args() +
                                       " --set train.epochs=2 --set train.log_every=50 --out " +
                                       (dir / "run"),
                                   dir / "run"));
  const auto summary = json_file(dir / "run/summary.json");
  const int steps = summary["steps"];
  ASSERT_EQ(steps, 32);  // 256 samples, 16 a step, 2 epochs: fewer than log_every
  const auto logged = metrics_records(dir / "run", "step");
  ASSERT_EQ(logged.size(), static_cast<size_t>(steps));
  for (int i = 0; i < steps; ++i) EXPECT_EQ(logged[static_cast<size_t>(i)]["step"], i + 1);

  for (const int window : kWidths) {
    const auto dom = rendered_dom(browser, dir / "run/report.html", dir / "profile", window);
    ASSERT_EQ(dom.exit_code, 0) << dom.output;
    const std::string at = " at " + std::to_string(window) + " px";
    EXPECT_NE(dom.output.find("data-charts=\"3\""), std::string::npos) << at;
    EXPECT_NE(dom.output.find("data-overlaps=\"0\""), std::string::npos) << at;
    // The stacked phases draw each step twice per phase (the area's upper and lower edge).
    EXPECT_GE(expect_points_inside(dom.output, "phases", at).size(), 2u * steps) << at;
    EXPECT_GE(expect_points_inside(dom.output, "throughput", at).size(), 1u * steps) << at;
    EXPECT_GE(expect_points_inside(dom.output, "loss", at).size(), steps + 2u) << at;
    const auto dots = dot_xs(chart(dom.output, "loss"));
    ASSERT_EQ(dots.size(), 2u) << at;
    EXPECT_GT(dots[1] - dots[0], 50) << at << ": the evaluations of steps 16 and 32 apart";

    // One process: its layout and mesh, as summary.json records them.
    const std::string layout = tag_with_id(dom.output, "layout");
    EXPECT_EQ(attribute(layout, "data-ranks"), "1") << layout;
    EXPECT_EQ(attribute(layout, "data-servers"), "0") << layout;
    for (const char* dim : {"data", "pipeline", "tensor"}) {
      EXPECT_EQ(attribute(layout, std::string("data-mesh-") + dim), "1") << layout;
    }

    // A CNN on synthetic data: its model and source keys, not the GPT's, the ViT's or the
    // token and image-file sources'.
    const auto keys = shown_keys(dom.output);
    for (const char* key :
         {"model.name", "model.width", "model.depth", "model.dropout", "data.source",
          "data.channels", "data.classes", "data.image_size", "optimizer.lr", "train.log_every"}) {
      EXPECT_EQ(keys.count(key), 1u) << key << at;
    }
    for (const std::string& key : keys) {
      EXPECT_NE(key.rfind("model.gpt.", 0), 0u) << key << at;
      EXPECT_NE(key.rfind("parallel.ps.", 0), 0u) << key << at;
    }
    for (const char* key : {"model.patch_size", "model.torchscript", "data.path", "data.seq_len",
                            "data.val_path", "data.max_pixels"}) {
      EXPECT_EQ(keys.count(key), 0u) << key << at;
    }
    EXPECT_GT(std::stoi(attribute(tag_with_id(dom.output, "config-hidden"), "data-count")), 5)
        << at;
  }
}

// Two ranks with ZeRO-1: the page names the layout and its mesh as summary.json records them,
// and the machine's cores apart from each rank's share of them.
TEST(Report, ATwoRankRunStatesItsLayoutAndTheMachinesCoresApartFromARanks) {
  CHROMIUM_OR_SKIP(browser);
  TempDir dir;
  ASSERT_TRUE(trained_and_reported(
      "launch --nproc-per-node 2 -- " + test::loom_binary() + " train " + tiny_synthetic_args() +
          " --set train.epochs=1 --set parallel.zero=1 --out " + (dir / "run"),
      dir / "run"));
  const auto summary = json_file(dir / "run/summary.json");
  const auto dom = rendered_dom(browser, dir / "run/report.html", dir / "profile", 1400);
  ASSERT_EQ(dom.exit_code, 0) << dom.output;

  const std::string layout = tag_with_id(dom.output, "layout");
  EXPECT_EQ(attribute(layout, "data-ranks"), "2") << layout;
  EXPECT_EQ(attribute(layout, "data-servers"), "0") << layout;
  EXPECT_EQ(attribute(layout, "data-zero"), "1") << layout;
  EXPECT_EQ(attribute(layout, "data-mesh-data"), "2") << layout;
  EXPECT_EQ(attribute(layout, "data-mesh-pipeline"), "1") << layout;
  EXPECT_EQ(attribute(layout, "data-mesh-tensor"), "1") << layout;
  EXPECT_EQ(summary["layout"]["mesh"]["data"], 2);

  // The machine's usable cores, and each of the two ranks' share of them.
  const auto& machine = summary["machine"];
  ASSERT_TRUE(machine.contains("cores") && machine.contains("rank_cores")) << machine.dump();
  const int cores = machine["cores"], rank_cores = machine["rank_cores"];
  EXPECT_EQ(rank_cores, std::max(1, cores / 2)) << machine.dump();
  EXPECT_EQ(attribute(tag_with_id(dom.output, "machine"), "data-cores"), std::to_string(cores));
  EXPECT_EQ(attribute(tag_with_id(dom.output, "rank-cores"), "data-cores"),
            std::to_string(rank_cores));
  // The batch grew with the replicas (no data.global_batch): the page says what the run said.
  EXPECT_EQ(summary["notices"][0]["id"], "batch_per_replica") << summary["notices"];
  EXPECT_NE(dom.output.find("data-id=\"batch_per_replica\""), std::string::npos);
}

// A GPT's report: the settings a GPT on token data reads (model.gpt.*, data.seq_len), not the
// CNN's model.width and model.dropout. And a long run's many validations (thirty epochs of 13
// steps, a log line every 50: the first three validations come before the first log line) drawn
// inside the axes with perplexity labels that do not cover one another.
class ReportOfALanguageModel : public LanguageModelTrain {};

TEST_F(ReportOfALanguageModel, ShowsTheGptsSettingsAndLabelsManyValidationsApart) {
  CHROMIUM_OR_SKIP(browser);
  TempDir dir;
  ASSERT_TRUE(trained_and_reported("train" + gpt_args() + " --out " + (dir / "run"), dir / "run"));
  const auto dom = rendered_dom(browser, dir / "run/report.html", dir / "profile", 1400);
  ASSERT_EQ(dom.exit_code, 0) << dom.output;
  const auto keys = shown_keys(dom.output);
  for (const char* key : {"model.name", "model.gpt.n_layer", "model.gpt.dropout", "data.source",
                          "data.path", "data.seq_len"}) {
    EXPECT_EQ(keys.count(key), 1u) << key;
  }
  for (const char* key : {"model.width", "model.depth", "model.dropout", "model.patch_size",
                          "data.channels", "data.classes", "data.augment", "data.transforms"}) {
    EXPECT_EQ(keys.count(key), 0u) << key;
  }

  // The long run: this run's summary and configuration, its first log line's record as the
  // pattern of every log line, and validations whose perplexity falls and then rises.
  const auto logged = metrics_records(dir / "run", "step");
  ASSERT_FALSE(logged.empty());
  std::filesystem::create_directory(dir / "long");
  for (const std::string file : {"summary.json", "config.yaml"}) {
    std::filesystem::copy_file(dir / ("run/" + file), dir / ("long/" + file));
  }
  std::string metrics;
  for (int step = 1; step <= 390; ++step) {
    if (step % 50 == 0) {
      auto record = logged.front();
      record["step"] = step;
      record["loss"] = 6.5 - step / 100.0;
      metrics += record.dump() + "\n";
    }
    if (step % 13 == 0) {
      const int epoch = step / 13;
      const double loss = 5.3 - 0.2 * std::min(epoch, 10) + 0.03 * std::max(0, epoch - 10);
      metrics += nlohmann::json{{"type", "epoch"},      {"epoch", epoch},
                                {"step", step},         {"train_loss", 4.0},
                                {"seconds", 1.0},       {"test_loss", loss},
                                {"test_accuracy", 0.2}, {"test_perplexity", std::exp(loss)}}
                     .dump() +
                 "\n";
    }
  }
  write_text(dir / "long/metrics.jsonl", metrics);
  ASSERT_EQ(run_loom("report " + (dir / "long")).exit_code, 0);
  for (const int window : kWidths) {
    const auto page = rendered_dom(browser, dir / "long/report.html", dir / "profile", window);
    ASSERT_EQ(page.exit_code, 0) << page.output;
    const std::string at = " at " + std::to_string(window) + " px";
    EXPECT_NE(page.output.find("data-charts=\"3\""), std::string::npos) << at;
    EXPECT_NE(page.output.find("data-overlaps=\"0\""), std::string::npos) << at;
    for (const std::string id : {"phases", "throughput", "loss"}) {
      expect_points_inside(page.output, id, at);
    }
    const std::string loss = chart(page.output, "loss");
    EXPECT_EQ(dot_xs(loss).size(), 30u) << at;
    const int labels = count_of(loss, "class=\"dot-label\"");
    EXPECT_GE(labels, 2) << at << ": the last validation's and the best's";
    EXPECT_LE(labels, 30) << at;
  }
}

TEST(Report, RunWithoutSummaryIsAConfigError) {
  TempDir dir;
  const auto r = run_loom("report " + dir.path());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("summary.json"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace loom::test
