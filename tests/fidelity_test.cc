// The arithmetic of `hsgd fidelity` on hand-made rows: time to a target
// accuracy, interval means, the comparison of real and simulated rounds, and
// tc's rate units.
#include "hsgd/metrics/fidelity.h"

#include <gtest/gtest.h>

#include <cmath>

#include "hsgd/core/error.h"

namespace hsgd {
namespace {

MetricsRow row(double t, double acc, double idle = 0) {
  MetricsRow r;
  r.time_s = t;
  r.test_acc = acc;
  r.idle_frac = idle;
  return r;
}

TEST(Fidelity, TimeToAccuracyInterpolatesBetweenTheRowsAroundTheTarget) {
  const std::vector<MetricsRow> rows = {row(0, 0.1), row(10, 0.6), row(20, 0.9), row(30, 0.95)};
  EXPECT_DOUBLE_EQ(time_to_accuracy(rows, 0.75), 15.0);  // halfway from 0.6 to 0.9
  EXPECT_DOUBLE_EQ(time_to_accuracy(rows, 0.9), 20.0);
  EXPECT_DOUBLE_EQ(time_to_accuracy(rows, 0.05), 0.0);
  EXPECT_TRUE(std::isnan(time_to_accuracy(rows, 0.96)));
  // A dip after reaching it does not move it.
  const std::vector<MetricsRow> dip = {row(0, 0.1), row(10, 0.9), row(20, 0.5), row(30, 0.95)};
  EXPECT_DOUBLE_EQ(time_to_accuracy(dip, 0.9), 10.0);
}

TEST(Fidelity, IntervalMeansWeightByTime) {
  // test_acc: trapezoids 10 * (0 + 1) / 2 + 30 * 1 = 35 over 40 s.
  const std::vector<MetricsRow> rows = {row(0, 0.0, 0.9), row(10, 1.0, 0.5), row(40, 1.0, 0.1)};
  EXPECT_DOUBLE_EQ(interval_mean_test_acc(rows), 35.0 / 40.0);
  // idle: each row's value holds over the interval it closes (the first
  // row's is not counted): (10 * 0.5 + 30 * 0.1) / 40.
  EXPECT_DOUBLE_EQ(interval_mean_idle(rows), (5.0 + 3.0) / 40.0);
  EXPECT_TRUE(std::isnan(interval_mean_test_acc({row(0, 0.5)})));
  EXPECT_TRUE(std::isnan(interval_mean_idle({row(3, 0.5), row(3, 0.6)})));
}

// auto's pilot ranks by the mean over the last share of a curve: the
// window [last - share x span, last], the curve cut linearly where it starts.
TEST(Fidelity, LateMeanIsTheIntervalMeanOverTheCurvesLastShare) {
  const std::vector<MetricsRow> rows = {row(0, 0.0), row(10, 1.0), row(40, 0.4)};
  EXPECT_DOUBLE_EQ(late_mean_test_acc(rows, 1), interval_mean_test_acc(rows));
  // Last half, [20, 40]: from 0.8 at t = 20 (cut) to 0.4 at 40.
  EXPECT_NEAR(late_mean_test_acc(rows, 0.5), 0.6, 1e-12);
  // Last 0.8, [8, 40]: 2 s from 0.8 to 1, then the 30 s from 1 to 0.4.
  EXPECT_NEAR(late_mean_test_acc(rows, 0.8), (2 * 0.9 + 30 * 0.7) / 32, 1e-12);
  EXPECT_TRUE(std::isnan(late_mean_test_acc({row(0, 0.5)}, 0.5)));
}

TEST(Fidelity, RunFiguresReadTheSummaryAndTheRows) {
  const nlohmann::json summary = {{"samples_per_s", 1200.0}, {"updates", 640}};
  const RunFigures f = run_figures({row(0, 0.1), row(10, 0.9)}, summary, 0.5);
  EXPECT_DOUBLE_EQ(f.samples_per_s, 1200.0);
  EXPECT_DOUBLE_EQ(f.updates, 640.0);
  EXPECT_DOUBLE_EQ(f.time_to_target, 5.0);
  EXPECT_DOUBLE_EQ(f.mean_test_acc, 0.5);
  EXPECT_DOUBLE_EQ(f.final_test_acc, 0.9);
  EXPECT_TRUE(std::isnan(f.link_util));
  EXPECT_TRUE(std::isnan(f.cycle_s));  // no gradients in the summary
  EXPECT_TRUE(std::isnan(run_figures({}, nlohmann::json::object(), 0.5).samples_per_s));
  // 100 pushes of 2 workers in 10 s: a 0.2 s cycle each, a quarter waiting.
  const nlohmann::json s2 = {{"train_s", 10.0}, {"workers", 2}, {"gradients", 100}};
  const RunFigures g = run_figures({row(0, 0.1, 0.9), row(10, 0.9, 0.25)}, s2, 0.5);
  EXPECT_DOUBLE_EQ(g.cycle_s, 0.2);
  EXPECT_DOUBLE_EQ(g.wait_s, 0.05);
  const std::vector<FigureComparison> c = compare_figures({g}, {g});
  EXPECT_NE(fidelity_markdown({"sync"}, {c})
                .find("| sync | busy part (ms) | 150 ± 0 | 150 ± 0 | +0.0 % | yes (5 %) |"),
            std::string::npos)
      << fidelity_markdown({"sync"}, {c});
}

TEST(Fidelity, ComparesRatesRelativelyAndAccuraciesInPoints) {
  RunFigures r1, r2, s1, s2;
  r1.samples_per_s = 1000, r2.samples_per_s = 1100;  // mean 1050
  s1.samples_per_s = 1100, s2.samples_per_s = 1100;  // +4.76 %: within 5 %
  r1.updates = r2.updates = 100;
  s1.updates = s2.updates = 106;  // +6 %: outside
  r1.mean_test_acc = r2.mean_test_acc = 0.80;
  s1.mean_test_acc = 0.815, s2.mean_test_acc = 0.805;  // +1.0 pp: at the edge, within
  r1.final_test_acc = r2.final_test_acc = 0.85;
  s1.final_test_acc = s2.final_test_acc = 0.87;  // +2 pp: outside 1 pp
  const std::vector<FigureComparison> c = compare_figures({r1, r2}, {s1, s2});
  const auto find = [&](const std::string& name) {
    for (const FigureComparison& f : c)
      if (f.name == name) return f;
    ADD_FAILURE() << name;
    return FigureComparison{};
  };
  EXPECT_NEAR(find("samples/s").diff, 1100.0 / 1050.0 - 1, 1e-12);
  EXPECT_TRUE(find("samples/s").within());
  EXPECT_NEAR(find("samples/s").real.std, std::sqrt(5000.0), 1e-9);
  EXPECT_FALSE(find("updates").within());
  EXPECT_NEAR(find("mean test acc").diff, 0.01, 1e-12);
  EXPECT_TRUE(find("mean test acc").within());
  EXPECT_FALSE(find("final test acc").within());
  // Unknown on both sides: no verdict.
  EXPECT_FALSE(find("server link util").within());
  EXPECT_TRUE(std::isnan(find("server link util").diff));
  const std::string md = fidelity_markdown({"async"}, {c});
  EXPECT_NE(md.find("| async | samples/s | 1050 ± 71 | 1100 ± 0 | +4.8 % | yes (5 %) |"),
            std::string::npos)
      << md;
  EXPECT_NE(
      md.find(
          "| async | final test acc (%) | 85.00 ± 0.00 | 87.00 ± 0.00 | +2.00 pp | no (1 pp) |"),
      std::string::npos)
      << md;
  const nlohmann::json j = fidelity_json({"async"}, {c});
  EXPECT_EQ(j[0]["figures"][1]["within"], false);
  EXPECT_TRUE(j[0]["figures"][6]["diff"].is_null());
  EXPECT_THROW(compare_figures({r1}, {s1, s2}), InputError);
}

TEST(Fidelity, ParsesTcRatesToBytesPerSecond) {
  EXPECT_DOUBLE_EQ(parse_rate("100mbit", "--rate"), 12.5e6);
  EXPECT_DOUBLE_EQ(parse_rate("1gbit", "--rate"), 125e6);
  EXPECT_DOUBLE_EQ(parse_rate("2.5gbit", "--rate"), 312.5e6);
  EXPECT_DOUBLE_EQ(parse_rate("800kbit", "--rate"), 1e5);
  EXPECT_DOUBLE_EQ(parse_rate("8000bit", "--rate"), 1e3);
  for (const char* bad : {"100", "mbit", "100mbps", "-1mbit", "0mbit", "1e3mbit", ""}) {
    try {
      parse_rate(bad, "--rate");
      ADD_FAILURE() << bad;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("--rate: expected a rate like 100mbit"),
                std::string::npos);
    }
  }
}

}  // namespace
}  // namespace hsgd
