// The arithmetic of `hsgd fidelity`: the same job run on a real runtime (mpi
// over emulated hosts, or threads) and on the simulator with the same
// network and costs, reduced to a few figures per run and compared over
// rounds. Pure functions (no training, no processes); cli/fidelity.cc runs
// the jobs.
#pragma once
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "hsgd/metrics/compare.h"
#include "hsgd/metrics/recorder.h"

namespace hsgd {

// One run's figures.
struct RunFigures {
  double samples_per_s = std::nan("");   // summary.json samples / train_s
  double updates = std::nan("");         // summary.json updates
  double time_to_target = std::nan("");  // time_to_accuracy(); NaN if never reached
  double mean_test_acc = std::nan("");   // interval_mean() of test_acc
  double final_test_acc = std::nan("");  // the last row's
  double idle_frac = std::nan("");       // interval_mean() of idle_frac (rows after the first)
  double link_util = std::nan("");       // the server's link: busy fraction (NaN: unknown)
  // One worker's push cycle (pull, compute, push, wait), seconds: train_s x
  // workers / gradients; and the part of it spent waiting on the policy
  // (cycle x idle fraction). The rest is compute, wire and server time.
  double cycle_s = std::nan("");
  double wait_s = std::nan("");
};

// Training time at which test_acc first reaches `target`, interpolated
// linearly between the last row below it and the first row at or above it;
// NaN if no row reaches it. Rows in time order.
double time_to_accuracy(const std::vector<MetricsRow>& rows, double target);

// The time-weighted mean over [first row, last row] of a column: test_acc
// by the trapezoid rule between rows (a curve); idle_frac as the interval
// figure it is (each row's value holds over the interval it closes). NaN
// for fewer than two rows or a zero span.
double interval_mean_test_acc(const std::vector<MetricsRow>& rows);
double interval_mean_idle(const std::vector<MetricsRow>& rows);

// test_acc's interval mean over the last `share` (in (0, 1]) of the rows'
// span, [last - share x span, last row], the curve cut linearly where the
// window starts; share 1 is interval_mean_test_acc. auto's pilot ranks its
// candidates by it (policy.auto_pilot_window, runtime/pilot.h).
double late_mean_test_acc(const std::vector<MetricsRow>& rows, double share);

// The figures of a run from its rows and summary.json; link_util is left NaN
// (the caller knows the link).
RunFigures run_figures(const std::vector<MetricsRow>& rows, const nlohmann::json& summary,
                       double target);

// One figure compared: real and simulated over rounds, and the difference
// of the means, relative (sim / real - 1, for rates and times) or absolute
// (sim - real, in fraction points, for accuracies and fractions).
struct FigureComparison {
  std::string name;
  bool relative = true;
  double tolerance = 0;  // |diff| within this is a hit (relative: fraction; absolute: points)
  Stat real, sim;
  double diff = std::nan("");
  // (1e-12: a difference printed as exactly the tolerance is within it.)
  bool within() const { return std::isfinite(diff) && std::fabs(diff) <= tolerance + 1e-12; }
};

// real[r], sim[r]: round r's figures (the same number of rounds, >= 1).
// Tolerances: samples/s and updates 5 %; time to target 10 %; mean test
// accuracy 1 pp; final accuracy, idle fraction and link utilisation are
// reported with 1 pp, 5 pp and 5 pp; the push cycle and its busy and
// waiting parts with 5 %.
std::vector<FigureComparison> compare_figures(const std::vector<RunFigures>& real,
                                              const std::vector<RunFigures>& sim);

// A markdown table: one row per (label, figure): real mean ± sd, sim mean ±
// sd, the difference and whether it is within its tolerance.
std::string fidelity_markdown(const std::vector<std::string>& labels,
                              const std::vector<std::vector<FigureComparison>>& cells);
nlohmann::json fidelity_json(const std::vector<std::string>& labels,
                             const std::vector<std::vector<FigureComparison>>& cells);

// "100mbit", "1gbit", "500kbit", "20000000bit" (tc's units, bits per second)
// -> bytes per second. Throws InputError naming `what` on anything else.
double parse_rate(const std::string& rate, const std::string& what);

}  // namespace hsgd
