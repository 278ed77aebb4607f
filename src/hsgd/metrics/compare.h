// The arithmetic of `hsgd compare`: several policies, each run for several
// rounds (round r of every policy from the same seed), compared against a
// baseline policy on a common time grid. Pure functions on MetricsRow vectors
// (no training, no torch); the gnuplot call is plot_compare().
//
// Method (README, "Compare policies"):
//  - The grid of round r is the baseline's round-r evaluation times.
//  - Every run's test_acc, test_loss and train_loss are interpolated linearly
//    onto that grid (interpolate()). NaN points are skipped; before a curve's
//    first and after its last finite point the nearest finite value is held.
//  - For each metric, diff(t) = policy(t) - baseline(t). "avg" is the mean of
//    diff over the grid points, "end" is diff at the last grid point. The
//    train_loss grid leaves out the points where the baseline's own
//    train_loss is NaN (its first row).
//  - Over rounds: mean and sample standard deviation (0 for one round).
#pragma once
#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "hsgd/metrics/recorder.h"

namespace hsgd {

// Linear interpolation of (times[i], values[i]) at `t`. `times` must be
// non-decreasing; points whose value is NaN are skipped; on equal times the
// later point wins. Outside the range of the finite points the nearest
// finite value is held. NaN if there is no finite point.
double interpolate(const std::vector<double>& times, const std::vector<double>& values, double t);

// How long a whole run goes: train.budget and train.eval_every, in seconds.
// A budget of 0: no time limit, or an epoch limit that may end a whole run
// before any budget.
struct RunEnd {
  double budget = 0, eval_every = 0;
};

// The grid a comparison measures on when every run it has stopped early
// (diverged): if `grid` (the evaluation times of the longest run) ends before
// end.budget, it becomes the evaluations a whole run makes: grid's first
// time, every eval_every after it, and the budget. The runs are then held at
// their last values to the budget, so a run that diverged at 17 s of 100 is
// measured over 100 s, not 17. Unchanged with a budget of 0. `hsgd sweep`
// (per seed) and `hsgd compare` (per round) both measure this way.
void extend_to_budget(std::vector<double>& grid, const RunEnd& end);

// A run's curves on a grid (same length as the grid).
struct Curves {
  std::vector<double> time, test_acc, test_loss, train_loss;
};
Curves resample(const std::vector<MetricsRow>& rows, const std::vector<double>& grid);

// Mean and sample standard deviation of the finite values (NaN entries are
// left out); std is 0 for one value; both NaN for none.
struct Stat {
  double mean = 0, std = 0;
};
Stat mean_std(const std::vector<double>& values);

// policy - baseline for one metric in one round.
struct Diff {
  double avg = 0;  // mean over the grid (NaN if no grid point has both values)
  double end = 0;  // at the last grid point
};
// policy - baseline in one round, on the grid of the baseline's times. Both
// row vectors must be non-empty (throws InputError otherwise).
struct RoundDiff {
  Diff test_acc, test_loss, train_loss;
  double final_test_acc = 0;  // the policy run's own last row
};
RoundDiff diff_round(const std::vector<MetricsRow>& baseline, const std::vector<MetricsRow>& run);

// Input: runs[p][r] = the metrics rows of policy p in round r; every policy
// has the same number of rounds (>= 1) and every run at least one row.
// `baseline` indexes `policies`. Violations throw InputError.
struct CompareInput {
  std::vector<std::string> policies;
  size_t baseline = 0;
  std::vector<std::vector<std::vector<MetricsRow>>> runs;
  // stopped[p][r]: run r of policy p stopped early (diverged; `hsgd train`'s
  // exit 3). Empty: none did. A baseline run that stopped early is held at
  // its last row up to the end of the round's longest run, so the
  // differences cover the whole round, not the baseline's first seconds;
  // when every run of the round stopped early, on to end.budget
  // (extend_to_budget).
  std::vector<std::vector<bool>> stopped;
  RunEnd end;
  // For the header line only.
  std::string config, runtime;
};

struct PolicyResult {
  std::string policy;
  std::vector<RoundDiff> rounds;  // per round
  Stat final_test_acc;            // own final test accuracy (fraction)
  Stat acc_avg, acc_end;          // test accuracy differences (fraction; table shows pp)
  Stat test_loss_avg, test_loss_end;
  Stat train_loss_avg, train_loss_end;
  // Mean and band over rounds on the plot grid (round 0's baseline times).
  std::vector<double> acc_mean, acc_min, acc_max, loss_mean, loss_min, loss_max;
};

struct CompareResult {
  std::string config, runtime, baseline;
  size_t rounds = 0;
  std::vector<double> plot_grid;
  std::vector<PolicyResult> policies;    // in input order, baseline included
  std::vector<size_t> baseline_stopped;  // rounds in which the baseline stopped early
};

CompareResult compare_runs(const CompareInput& in);

// The table, as markdown: one header line (config, rounds, baseline,
// runtime), a blank line, then one row per policy. Accuracy differences in
// percentage points, loss differences as they are; "mean ± std" over rounds;
// "n/a" for NaN.
std::string markdown_table(const CompareResult& r);

// Every number of the result (NaN as null), per round included.
nlohmann::json to_json(const CompareResult& r);

// Gnuplot data for one policy: a comment header, then per plot-grid point
// "time acc_mean acc_min acc_max loss_mean loss_min loss_max".
std::string curve_data(const CompareResult& r, size_t policy);

// Draws `png` with gnuplot: test accuracy and test loss against time, one
// curve per policy (mean over rounds) with a min..max band. `data_files[p]`
// holds curve_data(r, p). Throws std::runtime_error if gnuplot fails.
void plot_compare(const CompareResult& r, const std::vector<std::string>& data_files,
                  const std::string& png);

}  // namespace hsgd
