#include "hsgd/metrics/plot.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string_view>

#include "hsgd/core/error.h"
#include "hsgd/metrics/recorder.h"

namespace hsgd {
namespace {

std::string quote(const std::string& s) { return gnuplot_quote(s); }

// For the shell: a single-quoted word.
std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += (c == '\'') ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::vector<std::string> split_commas(const std::string& line) {
  std::vector<std::string> f;
  std::stringstream ss(line);
  std::string cell;
  while (std::getline(ss, cell, ',')) f.push_back(cell);
  if (!line.empty() && line.back() == ',') f.emplace_back();
  return f;
}

// The kPlotColumns of `csv`, each found by its header name: one line per
// row, the values as written, separated by spaces.
std::string plot_data(const std::string& csv) {
  std::ifstream in(csv);
  std::string line;
  if (!in || !std::getline(in, line)) throw InputError(csv + ": cannot read");
  const std::vector<std::string> header = split_commas(line);
  std::vector<size_t> at;
  for (const char* name : kPlotColumns) {
    const auto it = std::find(header.begin(), header.end(), name);
    const bool optional = std::string_view(name) == "effective_k";
    if (it == header.end() && !optional) throw InputError(csv + ":1: no column '" + name + "'");
    at.push_back(it == header.end() ? SIZE_MAX : static_cast<size_t>(it - header.begin()));
  }
  std::string out = "#";
  for (const char* name : kPlotColumns) out += std::string(" ") + name;
  out += "\n";
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const std::vector<std::string> f = split_commas(line);
    for (size_t i = 0; i < at.size(); ++i) {
      // read_metrics_csv checked the field count.
      out += (i ? " " : "") + (at[i] < f.size() ? f[at[i]] : std::string("nan"));
    }
    out += "\n";
  }
  return out;
}

}  // namespace

std::string gnuplot_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += (c == '\'') ? std::string("''") : std::string(1, c);
  return out + "'";
}

void run_gnuplot(const std::string& script, const std::string& png) {
  const std::string log = png + ".gnuplot.log";
  std::FILE* g = popen(("gnuplot > " + shell_quote(log) + " 2>&1").c_str(), "w");
  if (!g) throw std::runtime_error("cannot run gnuplot (install gnuplot-nox)");
  std::fputs(script.c_str(), g);
  const int rc = pclose(g);
  std::string said;
  {
    std::ifstream in(log);
    std::string line;
    for (int i = 0; i < 5 && std::getline(in, line);) {
      if (line.empty()) continue;
      said += (i++ ? " | " : "") + line;
    }
  }
  std::error_code ec;
  std::filesystem::remove(log, ec);
  if (rc != 0) {
    throw std::runtime_error("gnuplot failed (exit " + std::to_string(rc) + ")" +
                             (said.empty() ? "" : ": " + said));
  }
  std::filesystem::rename(png + ".partial", png, ec);
  if (ec) throw InputError(png + ": cannot write (" + ec.message() + ")");
}

std::string plot_script(const std::vector<std::string>& run_dirs, const std::string& png) {
  if (run_dirs.empty()) throw InputError("hsgd plot: expected at least one run directory");
  struct Run {
    std::string csv, label;
  };
  std::vector<Run> runs;
  std::map<std::string, int> policy_count;
  double max_staleness = 0, max_idle = 0;
  bool mixture = true;  // every run a mixture model (dpgmm): no accuracy to draw
  for (const std::string& dir : run_dirs) {
    const std::string csv = dir + "/metrics.csv";
    std::vector<MetricsRow> rows = read_metrics_csv(csv);  // validates
    if (rows.empty()) throw InputError(csv + ": no rows to plot");
    for (const MetricsRow& r : rows) {
      if (std::isfinite(r.staleness_mean))
        max_staleness = std::max(max_staleness, r.staleness_mean);
      if (std::isfinite(r.idle_frac)) max_idle = std::max(max_idle, r.idle_frac);
      mixture = mixture && r.has_mixture;
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
      "set output {}\n",
      quote(tmp));
  for (size_t i = 0; i < runs.size(); ++i) {
    script += fmt::format("$run{} << EOD\n{}EOD\n", i, plot_data(runs[i].csv));
  }
  script += "set grid\nset multiplot layout 2,2\n";
  // yrange: "*:*" autoscales. Staleness and idle time start at 0 and have a
  // fixed top, so an all-zero column (no staleness under sync) still has a
  // range (gnuplot warns about an empty one otherwise).
  auto panel = [&](const char* title, const char* ylabel, const std::string& column,
                   const char* key, const std::string& yrange) {
    const auto* it = std::find(std::begin(kPlotColumns), std::end(kPlotColumns), column);
    HSGD_ASSERT(it != std::end(kPlotColumns), "plot: a panel of a column not in kPlotColumns");
    const auto n = static_cast<int>(it - std::begin(kPlotColumns)) + 1;
    script += fmt::format(
        "set title '{}'\nset xlabel 'time (s)'\nset ylabel '{}'\nset key {}\nset yrange [{}]\n",
        title, ylabel, key, yrange);
    script += "plot ";
    for (size_t i = 0; i < runs.size(); ++i) {
      script += fmt::format("{}$run{} using 1:{} with linespoints pointsize 0.5 title {}",
                            i ? ", " : "", i, n, quote(runs[i].label));
    }
    script += "\n";
  };
  if (mixture) {
    panel("effective components (E[pi_k] > 1 %)", "components", "effective_k", "top right", "*:*");
    panel("test loss", "negative held-out log-likelihood per point", "test_loss", "top right",
          "*:*");
  } else {
    panel("test accuracy", "accuracy", "test_acc", "bottom right", "*:*");
    panel("test loss", "cross-entropy", "test_loss", "top right", "*:*");
  }
  panel("mean staleness of applied pushes", "updates", "staleness_mean", "top right",
        fmt::format("0:{}", std::max(1.0, 1.05 * max_staleness)));
  panel("worker idle fraction (waiting for an update)", "fraction", "idle_frac", "top right",
        fmt::format("0:{}", std::max(0.1, std::min(1.0, 1.05 * max_idle))));
  script += "unset multiplot\n";
  return script;
}

void plot_runs(const std::vector<std::string>& run_dirs, const std::string& png) {
  run_gnuplot(plot_script(run_dirs, png), png);
}

}  // namespace hsgd
