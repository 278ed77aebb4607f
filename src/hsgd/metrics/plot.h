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

// A single-quoted gnuplot string.
std::string gnuplot_quote(const std::string& s);

// Runs gnuplot on `script`, which must set its output to `png + ".partial"`,
// then renames that file to `png`. Throws std::runtime_error if gnuplot is
// missing or fails, InputError if the PNG cannot be put in place.
void run_gnuplot(const std::string& script, const std::string& png);

}  // namespace hsgd
