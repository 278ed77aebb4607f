// The arithmetic of `hsgd sweep` on hand-made metrics rows: the grid each
// seed is measured on, the interval and final means, the best fixed policy
// and the differences.
#include "hsgd/metrics/sweep.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "hsgd/core/error.h"

namespace hsgd {
namespace {

MetricsRow row(double t, double acc) {
  MetricsRow r;
  r.time_s = t;
  r.test_acc = acc;
  return r;
}

// A run evaluated every second up to `end`, at accuracy `acc(t)`.
template <typename F>
std::vector<MetricsRow> run(int end, F acc) {
  std::vector<MetricsRow> rows;
  for (int t = 0; t <= end; ++t) rows.push_back(row(t, acc(t)));
  return rows;
}

// One cell, one seed; policies in the order given.
SweepInput one_cell(std::vector<std::string> policies,
                    std::vector<std::vector<MetricsRow>> runs_of_policies) {
  SweepInput in;
  in.axes = {{"optim.lr", {"0.1"}}};
  in.policies = std::move(policies);
  in.seeds = {1};
  in.candidate = "auto";
  in.cells = {{0}};
  in.runs.resize(1);
  for (auto& r : runs_of_policies) in.runs[0].push_back({std::move(r)});
  return in;
}

TEST(Sweep, IntervalMeanFinalBestAndDifferences) {
  // async flat at 0.5, kasync:2 rising 0.2 -> 0.8, auto at 0.6, on 0..4 s.
  const SweepResult r = sweep_results(
      one_cell({"async", "kasync:2", "auto"},
               {run(4, [](int) { return 0.5; }), run(4, [](int t) { return 0.2 + 0.15 * t; }),
                run(4, [](int) { return 0.6; })}));
  ASSERT_EQ(r.cells.size(), 1u);
  const SweepCell& c = r.cells[0];
  EXPECT_DOUBLE_EQ(c.policies[0].interval_mean.mean, 0.5);
  EXPECT_DOUBLE_EQ(c.policies[1].interval_mean.mean, 0.5);
  EXPECT_DOUBLE_EQ(c.policies[1].final_acc.mean, 0.8);
  EXPECT_EQ(c.best_fixed, 0);  // a tie: the first listed
  EXPECT_EQ(c.candidate, 2);
  EXPECT_NEAR(c.cand_minus_best, 0.1, 1e-12);
  EXPECT_NEAR(c.cand_minus_async, 0.1, 1e-12);
  EXPECT_NEAR(c.best_minus_async, 0.0, 1e-12);
}

// The first policy diverged at 1 s and stopped (the simulator's exit 3): the
// others are still measured over the whole run, the stopped one held at its
// last value (chance), not over the first second only.
TEST(Sweep, ARunStoppedEarlyDoesNotShortenTheOthersInterval) {
  const SweepResult r = sweep_results(
      one_cell({"async", "kasync:4", "auto"}, {{row(0, 0.1), row(1, 0.1)},
                                               run(9, [](int t) { return t == 0 ? 0.1 : 0.8; }),
                                               run(9, [](int t) { return t == 0 ? 0.1 : 0.7; })}));
  const SweepCell& c = r.cells[0];
  EXPECT_DOUBLE_EQ(c.policies[0].interval_mean.mean, 0.1);
  EXPECT_DOUBLE_EQ(c.policies[1].interval_mean.mean, (0.1 + 9 * 0.8) / 10);
  EXPECT_DOUBLE_EQ(c.policies[2].interval_mean.mean, (0.1 + 9 * 0.7) / 10);
  EXPECT_EQ(c.best_fixed, 1);
  EXPECT_NEAR(c.cand_minus_best, -0.09, 1e-12);
}

// A sweep of one policy, or a seed where every policy diverged: the longest
// run itself stopped early. The seed is measured on the evaluations a whole
// run makes (to the cell's budget), so the diverged run is scored over the
// budget (held at its last value), not over its own first seconds.
TEST(Sweep, ARunStoppedEarlyIsScoredOverTheBudgetWhenNoRunReachedIt) {
  // Evaluated at 0, 2, 4 and diverged at 5 s; the budget is 10 s, every 2 s.
  auto diverged = [] {
    return std::vector<MetricsRow>{row(0, 0.1), row(2, 0.7), row(4, 0.7), row(5, 0.1)};
  };
  SweepInput in = one_cell({"auto"}, {diverged()});
  EXPECT_DOUBLE_EQ(sweep_results(in).cells[0].policies[0].interval_mean.mean,
                   (0.1 + 0.7 + 0.7 + 0.1) / 4);  // without a budget: its own grid
  in.ends = {{10, 2}};
  // A whole run's grid, 0, 2, ..., 10: 6, 8 and 10 held at 0.1 (not 5).
  EXPECT_DOUBLE_EQ(sweep_results(in).cells[0].policies[0].interval_mean.mean,
                   (0.1 + 0.7 + 0.7 + 3 * 0.1) / 6);
  // A budget off the spacing ends the grid at the budget itself: 6, 8, 9.
  in.ends = {{9, 2}};
  EXPECT_DOUBLE_EQ(sweep_results(in).cells[0].policies[0].interval_mean.mean,
                   (0.1 + 0.7 + 0.7 + 3 * 0.1) / 6);
  // A run that reached its budget keeps its own grid (here every 1 s).
  in = one_cell({"auto"}, {run(4, [](int t) { return 0.1 * t; })});
  in.ends = {{4, 2}};
  EXPECT_DOUBLE_EQ(sweep_results(in).cells[0].policies[0].interval_mean.mean, 0.2);
  // No time budget (0): nothing to extend to.
  in = one_cell({"auto"}, {diverged()});
  in.ends = {{0, 2}};
  EXPECT_DOUBLE_EQ(sweep_results(in).cells[0].policies[0].interval_mean.mean, 0.4);
  // Two policies, both diverged: both are measured on the whole run's grid.
  in = one_cell({"async", "auto"}, {diverged(), {row(0, 0.1), row(2, 0.9), row(3, 0.1)}});
  in.ends = {{10, 2}};
  const SweepCell c = sweep_results(in).cells[0];
  EXPECT_DOUBLE_EQ(c.policies[0].interval_mean.mean, (0.1 + 0.7 + 0.7 + 3 * 0.1) / 6);
  EXPECT_DOUBLE_EQ(c.policies[1].interval_mean.mean, (0.1 + 0.9 + 4 * 0.1) / 6);
  in.ends = {{10, 2}, {10, 2}};
  EXPECT_THROW(sweep_results(in), InputError);
}

// auto in any variant chooses its K while it runs: it is never the "best
// fixed" policy, even when it is not the candidate and scores highest.
TEST(Sweep, AnAutoVariantIsNeverTheBestFixedPolicy) {
  const SweepResult r =
      sweep_results(one_cell({"async", "auto+policy.auto_rule=9", "kasync:2", "auto"},
                             {run(4, [](int) { return 0.5; }), run(4, [](int) { return 0.9; }),
                              run(4, [](int) { return 0.4; }), run(4, [](int) { return 0.6; })}));
  const SweepCell& c = r.cells[0];
  EXPECT_EQ(c.best_fixed, 0);
  EXPECT_EQ(c.runner_up, 2);
  EXPECT_NEAR(c.cand_minus_best, 0.1, 1e-12);
  EXPECT_NEAR(c.best_minus_runner_up, 0.1, 1e-12);
  EXPECT_TRUE(is_adaptive_policy("auto"));
  EXPECT_TRUE(is_adaptive_policy("auto+policy.auto_rule=16"));
  EXPECT_FALSE(is_adaptive_policy("async"));
  EXPECT_FALSE(is_adaptive_policy("autumn"));
  // With no fixed policy at all, there is no best fixed one.
  const SweepResult alone =
      sweep_results(one_cell({"auto+policy.auto_rule=9", "auto"},
                             {run(2, [](int) { return 0.5; }), run(2, [](int) { return 0.6; })}));
  EXPECT_EQ(alone.cells[0].best_fixed, -1);
  EXPECT_TRUE(std::isnan(alone.cells[0].cand_minus_best));
}

// Three seeds: the paired standard error is the std of the per-seed
// differences over sqrt(3), not a combination of the two policies' stds.
TEST(Sweep, PairedStandardErrorsOfTheDifferences) {
  SweepInput in;
  in.axes = {{"optim.lr", {"0.1"}}};
  in.policies = {"async", "kasync:2", "auto"};
  in.seeds = {1, 2, 3};
  in.candidate = "auto";
  in.cells = {{0}};
  // Per seed: async 0.50, 0.60, 0.70; kasync:2 0.48, 0.57, 0.66 (differences
  // 0.02, 0.03, 0.04); auto 0.45, 0.60, 0.68 (differences -0.05, 0, -0.02).
  const double as[] = {0.5, 0.6, 0.7}, ks[] = {0.48, 0.57, 0.66}, au[] = {0.45, 0.6, 0.68};
  in.runs.assign(1, std::vector<std::vector<std::vector<MetricsRow>>>(3));
  for (int s = 0; s < 3; ++s) {
    in.runs[0][0].push_back(run(2, [&](int) { return as[s]; }));
    in.runs[0][1].push_back(run(2, [&](int) { return ks[s]; }));
    in.runs[0][2].push_back(run(2, [&](int) { return au[s]; }));
  }
  const SweepCell c = sweep_results(in).cells[0];
  ASSERT_EQ(c.best_fixed, 0);
  ASSERT_EQ(c.runner_up, 1);
  EXPECT_NEAR(c.best_minus_runner_up, 0.03, 1e-12);
  EXPECT_NEAR(c.best_minus_runner_up_se, 0.01 / std::sqrt(3.0), 1e-12);
  const double d[] = {-0.05, 0.0, -0.02};
  const double m = (d[0] + d[1] + d[2]) / 3;
  double ss = 0;
  for (double x : d) ss += (x - m) * (x - m);
  EXPECT_NEAR(c.cand_minus_best, m, 1e-12);
  EXPECT_NEAR(c.cand_minus_best_se, std::sqrt(ss / 2) / std::sqrt(3.0), 1e-12);
  // One seed: no standard error.
  EXPECT_TRUE(std::isnan(
      sweep_results(one_cell({"async", "kasync:2", "auto"},
                             {run(2, [](int) { return 0.5; }), run(2, [](int) { return 0.4; }),
                              run(2, [](int) { return 0.6; })}))
          .cells[0]
          .cand_minus_best_se));
}

TEST(Sweep, InconsistentInputIsAnInputError) {
  SweepInput in = one_cell({"async", "auto"}, {run(2, [](int) { return 0.5; }), {}});
  EXPECT_THROW(sweep_results(in), InputError);
  in = one_cell({"async", "auto"}, {run(2, [](int) { return 0.5; })});
  EXPECT_THROW(sweep_results(in), InputError);
}

}  // namespace
}  // namespace hsgd
