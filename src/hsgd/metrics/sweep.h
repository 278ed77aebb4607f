// The arithmetic of `hsgd sweep`: a grid of cells (one value per axis), each
// run with several policies over several seeds; per cell, each policy's
// interval-mean and final test accuracy (mean ± std over seeds), the best
// fixed policy and the differences. Pure functions on MetricsRow vectors (no
// training, no torch); the gnuplot call is plot_sweep_heatmap().
//
// Method (README, "Sweep a grid"):
//  - interval mean of a run = the mean of its test_acc over the evaluation
//    times of the cell's longest run of the same seed (the first policy's on
//    a tie; interpolated as in metrics/compare.h, a run that stopped early
//    for divergence held at its last value), so every policy of a seed is
//    measured on one grid; when that longest run too stopped before the
//    cell's budget (every policy of the seed diverged, or the sweep has one
//    policy), the grid is the evaluations a whole run makes (its first
//    time, every eval_every seconds, the budget), so a run that diverged is
//    scored over the budget, not over its own short life, and on the grid a
//    sweep with a whole run would give it;
//  - final = the run's last row's test_acc;
//  - over seeds: mean and sample standard deviation (compare.h: mean_std);
//  - best fixed = the fixed policy (not `candidate`, and not `auto` in any
//    variant: auto chooses its K while it runs) with the highest mean
//    interval mean (the first in list order on a tie); the runner-up = the
//    next fixed policy;
//  - differences (pp): candidate − best fixed, candidate − async, best fixed −
//    async, best fixed − runner-up (those naming a policy absent from the
//    sweep are NaN);
//  - paired standard error of candidate − best fixed and of best fixed −
//    runner-up: the sample std of the per-seed differences over √seeds (a
//    seed's runs share its initial model, data order and straggler draws;
//    NaN with one seed).
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "hsgd/metrics/compare.h"
#include "hsgd/metrics/recorder.h"

namespace hsgd {

struct SweepAxis {
  std::string key;                  // a config key, "optim.lr"
  std::vector<std::string> values;  // as written in the grid (TOML text)
};

struct SweepInput {
  std::vector<SweepAxis> axes;
  std::vector<std::string> policies;
  std::vector<uint64_t> seeds;
  std::string candidate;  // the policy compared against the best fixed one ("" = none)
  // cells[c]: the axis values' indices of cell c (one per axis), and
  // runs[c][p][s] = the metrics rows of policy p with seed s in cell c.
  std::vector<std::vector<size_t>> cells;
  std::vector<std::vector<std::vector<std::vector<MetricsRow>>>> runs;
  // ends[c]: cell c's budget and evaluation spacing, the grid of a seed whose
  // runs all stopped early (extend_to_budget). Empty, or a budget of 0: the
  // longest run's evaluations only.
  std::vector<RunEnd> ends;
};

struct SweepPolicy {
  std::string policy;
  std::vector<double> interval, final;  // per seed (fraction)
  Stat interval_mean, final_acc;
};

struct SweepCell {
  std::vector<size_t> index;  // into each axis's values
  std::vector<SweepPolicy> policies;
  int best_fixed = -1;  // index into policies (-1: no fixed policy)
  int runner_up = -1;   // the second fixed policy (-1: fewer than two)
  int candidate = -1, async = -1;
  // Differences of the interval means and of the final accuracies (fractions).
  double cand_minus_best = 0, cand_minus_async = 0, best_minus_async = 0;
  double cand_minus_best_final = 0;
  double best_minus_runner_up = 0;
  // Paired standard errors of the interval-mean differences (fractions).
  double cand_minus_best_se = 0, best_minus_runner_up_se = 0;
};

struct SweepResult {
  std::vector<SweepAxis> axes;
  std::vector<std::string> policies;
  std::vector<uint64_t> seeds;
  std::string candidate;
  std::vector<SweepCell> cells;
};

// Throws InputError for inconsistent input (sizes, empty runs).
SweepResult sweep_results(const SweepInput& in);

// Whether a sweep policy ("auto", "auto+policy.auto_rule=9") is `auto`,
// which no "best fixed" names.
bool is_adaptive_policy(const std::string& policy);

// "optim.lr=0.1, stragglers.sigma=0.25".
std::string cell_label(const SweepResult& r, const SweepCell& c);

// Markdown: a header, the summary table (per cell: best fixed, candidate,
// the differences) and, per measure, a table of every policy per cell
// ("mean ± std" in %, "n/a" for NaN).
std::string sweep_markdown(const SweepResult& r);

nlohmann::json sweep_json(const SweepResult& r);

// Heat maps of candidate − best fixed (interval mean, pp) over axes x and y
// (indices into r.axes): one per combination of the other axes' values.
// Each map's gnuplot data is "xi yi value" rows; `suffix` names the other
// axes' values ("" when there are only two axes).
struct HeatMap {
  std::string suffix;
  std::string title;
  std::string data;
};
std::vector<HeatMap> sweep_heatmaps(const SweepResult& r, size_t x, size_t y);

// Draws `png` from `data_file` (holding map.data) with gnuplot: a labelled
// grid, one number per square. Throws std::runtime_error if gnuplot fails.
void plot_sweep_heatmap(const SweepResult& r, size_t x, size_t y, const HeatMap& map,
                        const std::string& data_file, const std::string& png);

}  // namespace hsgd
