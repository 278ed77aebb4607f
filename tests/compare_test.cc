// The arithmetic of `hsgd compare` on hand-made metrics rows: interpolation,
// differences against the baseline, statistics over rounds, the table.
#include "hsgd/metrics/compare.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "hsgd/core/error.h"

namespace hsgd {
namespace {

namespace fs = std::filesystem;

const double kNaN = std::nan("");

MetricsRow row(double t, double acc, double loss, double train) {
  MetricsRow r;
  r.time_s = t;
  r.test_acc = acc;
  r.test_loss = loss;
  r.train_loss = train;
  return r;
}

// Two policies, two rounds. Round 0: sync evaluates at other times than the
// baseline (interpolated); round 1: at the same times.
CompareInput example() {
  CompareInput in;
  in.policies = {"sync", "async"};
  in.baseline = 1;
  in.config = "x.toml";
  in.runtime = "threads";
  in.runs = {
      {{row(0, 0.1, 2.0, kNaN), row(0.5, 0.3, 1.6, 1.9), row(1.5, 0.7, 0.8, 1.0),
        row(2.5, 0.9, 0.4, 0.5)},
       {row(0, 0.2, 2.0, kNaN), row(1, 0.6, 1.0, 1.2), row(2, 0.6, 0.5, 0.7)}},
      {{row(0, 0.1, 2.0, kNaN), row(1, 0.5, 1.0, 1.5), row(2, 0.7, 0.6, 0.8)},
       {row(0, 0.2, 2.0, kNaN), row(1, 0.6, 0.9, 1.2), row(2, 0.8, 0.5, 0.7)}},
  };
  return in;
}

TEST(Interpolate, LinearBetweenPointsAndHeldOutside) {
  const std::vector<double> t = {0, 1, 3}, v = {10, 20, 0};
  EXPECT_DOUBLE_EQ(interpolate(t, v, 0), 10);
  EXPECT_DOUBLE_EQ(interpolate(t, v, 0.25), 12.5);
  EXPECT_DOUBLE_EQ(interpolate(t, v, 1), 20);
  EXPECT_DOUBLE_EQ(interpolate(t, v, 2.5), 5);
  EXPECT_DOUBLE_EQ(interpolate(t, v, 3), 0);
  EXPECT_DOUBLE_EQ(interpolate(t, v, 7), 0);    // after the end: the last value
  EXPECT_DOUBLE_EQ(interpolate(t, v, -1), 10);  // before the start: the first value
}

TEST(Interpolate, SkipsNanPoints) {
  const std::vector<double> t = {0, 1, 2, 3}, v = {kNaN, 4, kNaN, 8};
  EXPECT_DOUBLE_EQ(interpolate(t, v, 0), 4);  // held back to the first finite point
  EXPECT_DOUBLE_EQ(interpolate(t, v, 2), 6);  // across the NaN point
  EXPECT_TRUE(std::isnan(interpolate({0, 1}, {kNaN, kNaN}, 0.5)));
  EXPECT_TRUE(std::isnan(interpolate({}, {}, 0.5)));
}

TEST(Interpolate, EqualTimesTakeTheLaterPoint) {
  const std::vector<double> t = {0, 1, 1, 2}, v = {0, 5, 7, 9};
  EXPECT_DOUBLE_EQ(interpolate(t, v, 1), 7);
  EXPECT_DOUBLE_EQ(interpolate(t, v, 1.5), 8);
  EXPECT_DOUBLE_EQ(interpolate(t, v, 0.5), 2.5);
}

TEST(MeanStd, SampleStdZeroForOneNanLeftOut) {
  Stat s = mean_std({1, 2, 3});
  EXPECT_DOUBLE_EQ(s.mean, 2);
  EXPECT_DOUBLE_EQ(s.std, 1);
  s = mean_std({4});
  EXPECT_DOUBLE_EQ(s.mean, 4);
  EXPECT_DOUBLE_EQ(s.std, 0);
  s = mean_std({1, kNaN, 3});
  EXPECT_DOUBLE_EQ(s.mean, 2);
  EXPECT_DOUBLE_EQ(s.std, std::sqrt(2.0));
  s = mean_std({kNaN});
  EXPECT_TRUE(std::isnan(s.mean));
  EXPECT_TRUE(std::isnan(s.std));
}

TEST(DiffRound, UnequalGridsAreInterpolatedOntoTheBaselineTimes) {
  const CompareInput in = example();
  const RoundDiff d = diff_round(in.runs[1][0], in.runs[0][0]);
  // sync on {0, 1, 2}: acc 0.1, 0.5, 0.8 vs 0.1, 0.5, 0.7.
  EXPECT_NEAR(d.test_acc.avg, 0.1 / 3, 1e-12);
  EXPECT_NEAR(d.test_acc.end, 0.1, 1e-12);
  // loss 2.0, 1.2, 0.6 vs 2.0, 1.0, 0.6.
  EXPECT_NEAR(d.test_loss.avg, 0.2 / 3, 1e-12);
  EXPECT_NEAR(d.test_loss.end, 0.0, 1e-12);
  // train loss: the baseline's NaN first row is left out; 1.45, 0.75 vs 1.5, 0.8.
  EXPECT_NEAR(d.train_loss.avg, -0.05, 1e-12);
  EXPECT_NEAR(d.train_loss.end, -0.05, 1e-12);
  EXPECT_DOUBLE_EQ(d.final_test_acc, 0.9);
}

TEST(DiffRound, AgainstItselfIsZero) {
  const CompareInput in = example();
  const RoundDiff d = diff_round(in.runs[1][0], in.runs[1][0]);
  EXPECT_DOUBLE_EQ(d.test_acc.avg, 0);
  EXPECT_DOUBLE_EQ(d.test_loss.end, 0);
  EXPECT_DOUBLE_EQ(d.train_loss.avg, 0);
}

TEST(DiffRound, EmptyRunsAreInputErrors) {
  const CompareInput in = example();
  EXPECT_THROW(diff_round({}, in.runs[0][0]), InputError);
  EXPECT_THROW(diff_round(in.runs[1][0], {}), InputError);
}

TEST(CompareRuns, StatisticsOverRounds) {
  const CompareResult r = compare_runs(example());
  ASSERT_EQ(r.policies.size(), 2u);
  EXPECT_EQ(r.baseline, "async");
  EXPECT_EQ(r.rounds, 2u);
  const PolicyResult& sync = r.policies[0];
  const double s2 = std::sqrt(2.0);
  // Round 0 (above) and round 1: acc 0, 0, -0.2; loss 0, 0.1, 0; train 0, 0.
  EXPECT_NEAR(sync.acc_avg.mean, (0.1 / 3 - 0.2 / 3) / 2, 1e-12);
  EXPECT_NEAR(sync.acc_avg.std, 0.1 / s2, 1e-12);
  EXPECT_NEAR(sync.acc_end.mean, -0.05, 1e-12);
  EXPECT_NEAR(sync.acc_end.std, 0.3 / s2, 1e-12);
  EXPECT_NEAR(sync.test_loss_avg.mean, 0.05, 1e-12);
  EXPECT_NEAR(sync.train_loss_avg.mean, -0.025, 1e-12);
  EXPECT_NEAR(sync.train_loss_avg.std, 0.05 / s2, 1e-12);
  EXPECT_NEAR(sync.final_test_acc.mean, 0.75, 1e-12);
  const PolicyResult& async = r.policies[1];
  EXPECT_DOUBLE_EQ(async.acc_avg.mean, 0);
  EXPECT_DOUBLE_EQ(async.acc_end.std, 0);
  EXPECT_NEAR(async.final_test_acc.mean, 0.75, 1e-12);
  EXPECT_NEAR(async.final_test_acc.std, 0.1 / s2, 1e-12);
  // Plot curves on round 0's baseline times: mean and min..max over rounds.
  EXPECT_EQ(r.plot_grid, (std::vector<double>{0, 1, 2}));
  EXPECT_NEAR(sync.acc_mean[2], 0.7, 1e-12);
  EXPECT_NEAR(sync.acc_min[2], 0.6, 1e-12);
  EXPECT_NEAR(sync.acc_max[2], 0.8, 1e-12);
  EXPECT_NEAR(sync.loss_mean[1], 1.1, 1e-12);
}

TEST(CompareRuns, OneRoundHasZeroStd) {
  CompareInput in = example();
  for (auto& runs : in.runs) runs.resize(1);
  const CompareResult r = compare_runs(in);
  EXPECT_DOUBLE_EQ(r.policies[0].acc_end.std, 0);
  EXPECT_NEAR(r.policies[0].acc_end.mean, 0.1, 1e-12);
}

// The baseline (async) diverged at 1 s and stopped (train's exit 3): with
// the flag it is held at its last row (chance) to the end of the other
// run, so the differences cover 0..4 s; without it they cover 0..1 s only.
TEST(CompareRuns, ABaselineThatStoppedEarlyIsHeldToTheEndOfTheRound) {
  CompareInput in;
  in.policies = {"kasync:4", "async"};
  in.baseline = 1;
  in.runs = {{{row(0, 0.1, 2.3, kNaN), row(1, 0.5, 1.5, 2.0), row(2, 0.7, 0.9, 1.2),
               row(3, 0.8, 0.6, 0.8), row(4, 0.9, 0.4, 0.5)}},
             {{row(0, 0.1, 2.3, kNaN), row(1, 0.1, kNaN, 1e30)}}};
  const CompareResult cut = compare_runs(in);  // no flags: the baseline's two points
  EXPECT_NEAR(cut.policies[0].acc_avg.mean, 0.2, 1e-12);
  EXPECT_EQ(cut.plot_grid, (std::vector<double>{0, 1}));
  in.stopped = {{false}, {true}};
  const CompareResult r = compare_runs(in);
  EXPECT_NEAR(r.policies[0].acc_avg.mean, (0 + 0.4 + 0.6 + 0.7 + 0.8) / 5, 1e-12);
  EXPECT_NEAR(r.policies[0].acc_end.mean, 0.8, 1e-12);
  EXPECT_NEAR(r.policies[0].final_test_acc.mean, 0.9, 1e-12);
  EXPECT_EQ(r.plot_grid, (std::vector<double>{0, 1, 2, 3, 4}));
  EXPECT_NEAR(r.policies[1].acc_mean[4], 0.1, 1e-12);  // held at its last row
  EXPECT_EQ(r.baseline_stopped, (std::vector<size_t>{0}));
  EXPECT_NE(markdown_table(r).find("async stopped early (diverged) in round 0"), std::string::npos);
  EXPECT_EQ(to_json(r)["baseline_stopped_rounds"], nlohmann::json::array({0}));
  EXPECT_FALSE(to_json(cut).contains("baseline_stopped_rounds"));
  // The test loss the diverged baseline no longer has stays out of the mean.
  EXPECT_NEAR(r.policies[0].test_loss_avg.mean, 0, 1e-12);
  // A flag set for a run that did not stop early is harmless: nothing is longer.
  in.stopped = {{true}, {false}};
  EXPECT_NEAR(compare_runs(in).policies[0].acc_avg.mean, 0.2, 1e-12);
}

// Every run of the round stopped early (diverged): the baseline is held to
// the budget, at the times a whole run evaluates (every eval_every, and the
// budget), so the differences cover the round's whole budget, not the
// longest run's first seconds. The other run is held at its last row too.
TEST(CompareRuns, ARoundWhoseEveryRunStoppedIsMeasuredToTheBudget) {
  CompareInput in;
  in.policies = {"kasync:4", "async"};
  in.baseline = 1;
  in.runs = {{{row(0, 0.1, 2.3, kNaN), row(1, 0.7, 1.0, 1.1), row(2, 0.2, kNaN, 1e30)}},
             {{row(0, 0.1, 2.3, kNaN), row(1, 0.1, kNaN, 1e30)}}};
  in.stopped = {{true}, {true}};
  const CompareResult longest = compare_runs(in);  // no budget: to 2 s only
  EXPECT_EQ(longest.plot_grid, (std::vector<double>{0, 1, 2}));
  EXPECT_NEAR(longest.policies[0].acc_avg.mean, (0 + 0.6 + 0.1) / 3, 1e-12);
  in.end = {6, 1};
  const CompareResult r = compare_runs(in);
  EXPECT_EQ(r.plot_grid, (std::vector<double>{0, 1, 2, 3, 4, 5, 6}));
  EXPECT_NEAR(r.policies[0].acc_avg.mean, (0 + 0.6 + 0.1 * 5) / 7, 1e-12);
  EXPECT_NEAR(r.policies[0].acc_end.mean, 0.1, 1e-12);
  EXPECT_NEAR(r.policies[1].acc_mean[6], 0.1, 1e-12);
  // An off-spacing budget: the baseline's own times, then 2, 4 and 5.
  in.end = {5, 2};
  EXPECT_EQ(compare_runs(in).plot_grid, (std::vector<double>{0, 1, 2, 4, 5}));
  EXPECT_NEAR(compare_runs(in).policies[0].acc_avg.mean, (0 + 0.6 + 0.1 * 3) / 5, 1e-12);
  // A run that reached the budget: nothing is added.
  in.end = {2, 1};
  EXPECT_EQ(compare_runs(in).plot_grid, (std::vector<double>{0, 1, 2}));
}

TEST(CompareRuns, BadShapesAreInputErrors) {
  CompareInput in = example();
  in.runs[0].pop_back();  // sync has one round, async two
  EXPECT_THROW(compare_runs(in), InputError);
  in = example();
  in.baseline = 2;
  EXPECT_THROW(compare_runs(in), InputError);
  in = example();
  in.runs[1][1].clear();
  EXPECT_THROW(compare_runs(in), InputError);
  in = example();
  in.stopped = {{false, false}, {false}};  // async's flags: one of two rounds
  EXPECT_THROW(compare_runs(in), InputError);
}

TEST(MarkdownTable, HeaderAndExpectedNumbers) {
  const std::string t = markdown_table(compare_runs(example()));
  EXPECT_EQ(t.rfind("Compare: config `x.toml`, 2 rounds, baseline async, runtime threads\n", 0), 0u)
      << t;
  EXPECT_NE(t.find("| sync | 75.00 ± 21.21 | -1.67 ± 7.07 | -5.00 ± 21.21 | +0.0500 ± 0.0236 |"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("| -0.0250 ± 0.0354 |"), std::string::npos) << t;
  EXPECT_NE(t.find("| async (baseline) | 75.00 ± 7.07 | +0.00 ± 0.00 |"), std::string::npos) << t;
}

TEST(MarkdownTable, NanIsNotAvailable) {
  CompareInput in = example();
  // A policy whose runs never have a train loss.
  for (auto& run : in.runs[0]) {
    for (MetricsRow& r : run) r.train_loss = kNaN;
  }
  const CompareResult r = compare_runs(in);
  EXPECT_TRUE(std::isnan(r.policies[0].train_loss_avg.mean));
  EXPECT_NE(markdown_table(r).find("| n/a | n/a |"), std::string::npos);
  const nlohmann::json j = to_json(r);
  EXPECT_TRUE(j["policies"][0]["diff_train_loss"]["avg"]["mean"].is_null()) << j.dump();
}

TEST(ToJson, EveryNumberPerRound) {
  const nlohmann::json j = to_json(compare_runs(example()));
  EXPECT_EQ(j["baseline"], "async");
  EXPECT_EQ(j["rounds"], 2);
  EXPECT_EQ(j["policies"][0]["policy"], "sync");
  EXPECT_NEAR(j["policies"][0]["diff_test_acc"]["end"]["rounds"][0].get<double>(), 0.1, 1e-12);
  EXPECT_NEAR(j["policies"][0]["final_test_acc"]["mean"].get<double>(), 0.75, 1e-12);
}

TEST(CurveData, OneLinePerGridPoint) {
  const CompareResult r = compare_runs(example());
  const std::string d = curve_data(r, 0);
  EXPECT_NE(d.find("\n2 0.7 0.6 0.8 "), std::string::npos) << d;
  EXPECT_EQ(std::count(d.begin(), d.end(), '\n'), 2 + 3);
}

TEST(PlotCompare, DrawsAPng) {
  if (std::system("command -v gnuplot > /dev/null") != 0) GTEST_SKIP() << "no gnuplot";
  const fs::path dir = fs::path(::testing::TempDir()) / "hsgd_compare_plot";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const CompareResult r = compare_runs(example());
  std::vector<std::string> files;
  for (size_t p = 0; p < r.policies.size(); ++p) {
    files.push_back((dir / (r.policies[p].policy + ".curve.dat")).string());
    write_file_atomic(files.back(), curve_data(r, p));
  }
  const std::string png = (dir / "compare.png").string();
  plot_compare(r, files, png);
  EXPECT_GT(fs::file_size(png), 1000u);
  EXPECT_FALSE(fs::exists(png + ".partial"));
}

// A mixture model's runs (dpgmm) have no accuracy: the plot is the test
// loss (the negative held-out log-likelihood) alone, not a gnuplot error.
TEST(PlotCompare, RunsWithoutAccuracyDrawTheLossAlone) {
  if (std::system("command -v gnuplot > /dev/null") != 0) GTEST_SKIP() << "no gnuplot";
  const fs::path dir = fs::path(::testing::TempDir()) / "hsgd_compare_plot_mixture";
  fs::remove_all(dir);
  fs::create_directories(dir);
  CompareInput in = example();
  for (auto& policy : in.runs) {
    for (auto& round : policy) {
      for (MetricsRow& r : round) r.test_acc = kNaN;
    }
  }
  const CompareResult r = compare_runs(in);
  std::vector<std::string> files;
  for (size_t p = 0; p < r.policies.size(); ++p) {
    files.push_back((dir / (r.policies[p].policy + ".curve.dat")).string());
    write_file_atomic(files.back(), curve_data(r, p));
  }
  const std::string png = (dir / "compare.png").string();
  plot_compare(r, files, png);
  EXPECT_GT(fs::file_size(png), 1000u);
}

}  // namespace
}  // namespace hsgd
