#include "hsgd/metrics/plot.h"

#include <fmt/format.h>

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
  for (const std::string& dir : run_dirs) {
    const std::string csv = dir + "/metrics.csv";
    std::vector<MetricsRow> rows = read_metrics_csv(csv);  // validates
    if (rows.empty()) throw InputError(csv + ": no rows to plot");
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
  auto panel = [&](const char* title, const char* ylabel, int column, const char* key) {
    script += fmt::format("set title '{}'\nset xlabel 'time (s)'\nset ylabel '{}'\nset key {}\n",
                          title, ylabel, key);
    script += "plot ";
    for (size_t i = 0; i < runs.size(); ++i) {
      script += fmt::format("{}{} using 1:{} with linespoints pointsize 0.5 title {}",
                            i ? ", " : "", quote(runs[i].csv), column, quote(runs[i].label));
    }
    script += "\n";
  };
  panel("test accuracy", "accuracy", 8, "bottom right");
  panel("test loss", "cross-entropy", 7, "top right");
  panel("mean staleness of applied pushes", "updates", 9, "top right");
  panel("worker idle fraction (waiting for an update)", "fraction", 12, "top right");
  script += "unset multiplot\n";
  run_gnuplot(script, png);
}

}  // namespace hsgd
