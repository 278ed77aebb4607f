#include "hsgd/metrics/fidelity.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include "hsgd/core/error.h"

namespace hsgd {

double time_to_accuracy(const std::vector<MetricsRow>& rows, double target) {
  for (size_t i = 0; i < rows.size(); ++i) {
    if (!(rows[i].test_acc >= target)) continue;
    if (i == 0) return rows[0].time_s;
    const MetricsRow& a = rows[i - 1];
    const MetricsRow& b = rows[i];
    if (!std::isfinite(a.test_acc) || b.test_acc == a.test_acc) return b.time_s;
    const double f = (target - a.test_acc) / (b.test_acc - a.test_acc);
    return a.time_s + std::clamp(f, 0.0, 1.0) * (b.time_s - a.time_s);
  }
  return std::nan("");
}

double interval_mean_test_acc(const std::vector<MetricsRow>& rows) {
  if (rows.size() < 2) return std::nan("");
  const double span = rows.back().time_s - rows.front().time_s;
  if (!(span > 0)) return std::nan("");
  double area = 0;
  for (size_t i = 1; i < rows.size(); ++i)
    area += 0.5 * (rows[i].test_acc + rows[i - 1].test_acc) * (rows[i].time_s - rows[i - 1].time_s);
  return area / span;
}

double late_mean_test_acc(const std::vector<MetricsRow>& rows, double share) {
  if (share >= 1) return interval_mean_test_acc(rows);
  if (rows.size() < 2 || !(share > 0)) return std::nan("");
  const double end = rows.back().time_s;
  const double from = end - share * (end - rows.front().time_s);
  if (!(end > from)) return std::nan("");
  double area = 0;
  for (size_t i = 1; i < rows.size(); ++i) {
    double t0 = rows[i - 1].time_s, a0 = rows[i - 1].test_acc;
    const double t1 = rows[i].time_s, a1 = rows[i].test_acc;
    if (t1 <= from) continue;
    if (t0 < from) {  // the row pair the window starts in, cut there
      a0 += (a1 - a0) * (from - t0) / (t1 - t0);
      t0 = from;
    }
    area += 0.5 * (a0 + a1) * (t1 - t0);
  }
  return area / (end - from);
}

double interval_mean_idle(const std::vector<MetricsRow>& rows) {
  if (rows.size() < 2) return std::nan("");
  const double span = rows.back().time_s - rows.front().time_s;
  if (!(span > 0)) return std::nan("");
  double area = 0;
  for (size_t i = 1; i < rows.size(); ++i)
    area += rows[i].idle_frac * (rows[i].time_s - rows[i - 1].time_s);
  return area / span;
}

RunFigures run_figures(const std::vector<MetricsRow>& rows, const nlohmann::json& summary,
                       double target) {
  RunFigures f;
  const auto num = [&](const char* key) {
    return summary.contains(key) && summary[key].is_number() ? summary[key].get<double>()
                                                             : std::nan("");
  };
  f.samples_per_s = num("samples_per_s");
  f.updates = num("updates");
  f.time_to_target = time_to_accuracy(rows, target);
  f.mean_test_acc = interval_mean_test_acc(rows);
  f.final_test_acc = rows.empty() ? std::nan("") : rows.back().test_acc;
  f.idle_frac = interval_mean_idle(rows);
  const double train_s = num("train_s"), workers = num("workers"), gradients = num("gradients");
  if (gradients > 0) {
    f.cycle_s = train_s * workers / gradients;
    f.wait_s = f.cycle_s * f.idle_frac;
  }
  return f;
}

std::vector<FigureComparison> compare_figures(const std::vector<RunFigures>& real,
                                              const std::vector<RunFigures>& sim) {
  if (real.empty() || real.size() != sim.size())
    throw InputError(
        fmt::format("fidelity: {} real and {} simulated rounds (expected the same, >= 1)",
                    real.size(), sim.size()));
  struct Def {
    const char* name;
    double RunFigures::*field;
    bool relative;
    double tolerance;
  };
  const Def defs[] = {{"samples/s", &RunFigures::samples_per_s, true, 0.05},
                      {"updates", &RunFigures::updates, true, 0.05},
                      {"time to target", &RunFigures::time_to_target, true, 0.10},
                      {"mean test acc", &RunFigures::mean_test_acc, false, 0.01},
                      {"final test acc", &RunFigures::final_test_acc, false, 0.01},
                      {"idle fraction", &RunFigures::idle_frac, false, 0.05},
                      {"server link util", &RunFigures::link_util, false, 0.05},
                      {"push cycle (ms)", &RunFigures::cycle_s, true, 0.05},
                      {"busy part (ms)", nullptr, true, 0.05},
                      {"waiting part (ms)", &RunFigures::wait_s, true, 0.05}};
  std::vector<FigureComparison> out;
  for (const Def& d : defs) {
    FigureComparison c;
    c.name = d.name;
    c.relative = d.relative;
    c.tolerance = d.tolerance;
    std::vector<double> r, s;
    // The busy part: the cycle less its waiting.
    const auto get = [&](const RunFigures& f) {
      return d.field ? f.*d.field : f.cycle_s - f.wait_s;
    };
    for (const RunFigures& f : real) r.push_back(get(f));
    for (const RunFigures& f : sim) s.push_back(get(f));
    c.real = mean_std(r);
    c.sim = mean_std(s);
    c.diff = c.relative ? c.sim.mean / c.real.mean - 1.0 : c.sim.mean - c.real.mean;
    out.push_back(c);
  }
  return out;
}

namespace {

std::string cell(const Stat& s, bool relative, double scale) {
  if (!std::isfinite(s.mean)) return "-";
  if (scale != 1) return fmt::format("{:.4g} ± {:.2g}", scale * s.mean, scale * s.std);
  if (relative) return fmt::format("{:.4g} ± {:.2g}", s.mean, s.std);
  return fmt::format("{:.2f} ± {:.2f}", 100 * s.mean, 100 * s.std);
}

std::string diff_text(const FigureComparison& c) {
  if (!std::isfinite(c.diff)) return "-";
  return c.relative ? fmt::format("{:+.1f} %", 100 * c.diff)
                    : fmt::format("{:+.2f} pp", 100 * c.diff);
}

}  // namespace

std::string fidelity_markdown(const std::vector<std::string>& labels,
                              const std::vector<std::vector<FigureComparison>>& cells) {
  std::string md =
      "| run | figure | real | sim | sim - real | within |\n|---|---|---|---|---|---|\n";
  for (size_t i = 0; i < labels.size() && i < cells.size(); ++i)
    for (const FigureComparison& c : cells[i]) {
      const double scale = c.name.find("(ms)") != std::string::npos ? 1000 : 1;
      const std::string tol = c.relative ? fmt::format("{:.0f} %", 100 * c.tolerance)
                                         : fmt::format("{:.0f} pp", 100 * c.tolerance);
      md += fmt::format("| {} | {}{} | {} | {} | {} | {} |\n", labels[i], c.name,
                        c.relative ? "" : " (%)", cell(c.real, c.relative, scale),
                        cell(c.sim, c.relative, scale), diff_text(c),
                        std::isfinite(c.diff) ? (c.within() ? "yes" : "no") + (" (" + tol + ")")
                                              : std::string("-"));
    }
  return md;
}

nlohmann::json fidelity_json(const std::vector<std::string>& labels,
                             const std::vector<std::vector<FigureComparison>>& cells) {
  const auto num = [](double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(); };
  nlohmann::json j = nlohmann::json::array();
  for (size_t i = 0; i < labels.size() && i < cells.size(); ++i) {
    nlohmann::json run = {{"run", labels[i]}, {"figures", nlohmann::json::array()}};
    for (const FigureComparison& c : cells[i])
      run["figures"].push_back(
          {{"figure", c.name},
           {"relative", c.relative},
           {"tolerance", c.tolerance},
           {"real_mean", num(c.real.mean)},
           {"real_std", num(c.real.std)},
           {"sim_mean", num(c.sim.mean)},
           {"sim_std", num(c.sim.std)},
           {"diff", num(c.diff)},
           {"within", std::isfinite(c.diff) ? nlohmann::json(c.within()) : nlohmann::json()}});
    j.push_back(run);
  }
  return j;
}

double parse_rate(const std::string& rate, const std::string& what) {
  size_t i = 0;
  while (i < rate.size() && (std::isdigit(static_cast<unsigned char>(rate[i])) || rate[i] == '.'))
    ++i;
  const std::string number = rate.substr(0, i), unit = rate.substr(i);
  double scale = 0;
  if (unit == "bit") scale = 1;
  if (unit == "kbit") scale = 1e3;
  if (unit == "mbit") scale = 1e6;
  if (unit == "gbit") scale = 1e9;
  char* end = nullptr;
  const double v = number.empty() ? 0 : std::strtod(number.c_str(), &end);
  if (scale == 0 || number.empty() || end != number.c_str() + number.size() || !(v > 0))
    throw InputError(fmt::format(
        "{}: expected a rate like 100mbit, 1gbit or 500kbit (bits per second), got '{}'", what,
        rate));
  return v * scale / 8.0;
}

}  // namespace hsgd
