// Plots of metrics.csv files with gnuplot.
#pragma once
#include <string>
#include <vector>

namespace hsgd {

// Draws test accuracy, test loss, mean staleness and worker idle fraction
// against time for each run directory
// (each holding metrics.csv) into `png`, one curve per run labelled by its
// policy (and the directory name when two runs share a policy). Runs gnuplot;
// throws InputError for a missing or malformed metrics.csv and
// std::runtime_error if gnuplot fails.
void plot_runs(const std::vector<std::string>& run_dirs, const std::string& png);

// The gnuplot script plot_runs runs, writing `png + ".partial"`. Each panel
// plots one metrics.csv column found by its header name (time_s against
// test_acc, test_loss, staleness_mean, idle_frac: kPlotColumns), never by
// position: the values are copied as written into one inline datablock per
// run ($run0, $run1, ...; a comment line names their columns), and each
// panel's `using 1:N` reads column N of it.
std::string plot_script(const std::vector<std::string>& run_dirs, const std::string& png);
// effective_k is optional (mixture models, issue 31): "nan" where absent.
inline constexpr const char* kPlotColumns[] = {"time_s",         "test_acc",  "test_loss",
                                               "staleness_mean", "idle_frac", "effective_k"};

// A single-quoted gnuplot string.
std::string gnuplot_quote(const std::string& s);

// Runs gnuplot on `script`, which must set its output to `png + ".partial"`,
// then renames that file to `png`. gnuplot's own output (its warnings, e.g.
// an "empty y range" of a constant series) is kept from the terminal: it
// goes to `png + ".gnuplot.log"`, which is removed, and its first lines are
// in the error when gnuplot fails. Throws std::runtime_error if gnuplot is
// missing or fails, InputError if the PNG cannot be put in place.
void run_gnuplot(const std::string& script, const std::string& png);

}  // namespace hsgd
