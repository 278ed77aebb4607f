#include "hsgd/metrics/plot.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <stdexcept>

#include "hsgd/core/error.h"
#include "hsgd/metrics/recorder.h"

namespace hsgd {
namespace {

std::string quote(const std::string& s) { return gnuplot_quote(s); }

}  // namespace

std::string gnuplot_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += (c == '\'') ? std::string("''") : std::string(1, c);
  return out + "'";
}

void run_gnuplot(const std::string& script, const std::string& png) {
  std::FILE* g = popen("gnuplot 2>&1", "w");
  if (!g) throw std::runtime_error("cannot run gnuplot (install gnuplot-nox)");
  std::fputs(script.c_str(), g);
  const int rc = pclose(g);
  if (rc != 0) throw std::runtime_error("gnuplot failed (exit " + std::to_string(rc) + ")");
  std::error_code ec;
  std::filesystem::rename(png + ".partial", png, ec);
  if (ec) throw InputError(png + ": cannot write (" + ec.message() + ")");
}

void plot_runs(const std::vector<std::string>& run_dirs, const std::string& png) {
  if (run_dirs.empty()) throw InputError("hsgd plot: expected at least one run directory");
  struct Run {
    std::string csv, label;
  };
  std::vector<Run> runs;
  std::map<std::string, int> policy_count;
  double max_staleness = 0, max_idle = 0;
  for (const std::string& dir : run_dirs) {
    const std::string csv = dir + "/metrics.csv";
    std::vector<MetricsRow> rows = read_metrics_csv(csv);  // validates
    if (rows.empty()) throw InputError(csv + ": no rows to plot");
    for (const MetricsRow& r : rows) {
      max_staleness = std::max(max_staleness, r.staleness_mean);
      max_idle = std::max(max_idle, r.idle_frac);
    }
    runs.push_back({csv, rows.front().policy});
    policy_count[rows.front().policy]++;
  }
  for (Run& r : runs) {
    if (policy_count[r.label] > 1) {
      r.label += " (" + std::filesystem::path(r.csv).parent_path().filename().string() + ")";
    }
  }
  const std::string tmp = png + ".partial";
  std::string script = fmt::format(
      "set terminal pngcairo size 1200,900 font 'sans,10'\n"
      "set output {}\n"
      "set datafile separator ','\n"
      "set key autotitle columnhead\n"
      "set grid\n"
      "set multiplot layout 2,2\n",
      quote(tmp));
  // yrange: "*:*" autoscales. Staleness and idle time start at 0 and have a
  // fixed top, so an all-zero column (no staleness under sync) still has a
  // range (gnuplot warns about an empty one otherwise).
  auto panel = [&](const char* title, const char* ylabel, int column, const char* key,
                   const char* yrange) {
    script += fmt::format(
        "set title '{}'\nset xlabel 'time (s)'\nset ylabel '{}'\nset key {}\nset yrange [{}]\n",
        title, ylabel, key, yrange);
    script += "plot ";
    for (size_t i = 0; i < runs.size(); ++i) {
      script += fmt::format("{}{} using 1:{} with linespoints pointsize 0.5 title {}",
                            i ? ", " : "", quote(runs[i].csv), column, quote(runs[i].label));
    }
    script += "\n";
  };
  panel("test accuracy", "accuracy", 8, "bottom right", "*:*");
  panel("test loss", "cross-entropy", 7, "top right", "*:*");
  const std::string staleness_range = fmt::format("0:{}", std::max(1.0, 1.05 * max_staleness));
  const std::string idle_range = fmt::format("0:{}", std::max(0.1, std::min(1.0, 1.05 * max_idle)));
  panel("mean staleness of applied pushes", "updates", 9, "top right", staleness_range.c_str());
  panel("worker idle fraction (waiting for an update)", "fraction", 12, "top right",
        idle_range.c_str());
  script += "unset multiplot\n";
  run_gnuplot(script, png);
}

}  // namespace hsgd
