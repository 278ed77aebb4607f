#include "hsgd/metrics/compare.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <stdexcept>

#include "hsgd/core/error.h"
#include "hsgd/metrics/plot.h"

namespace hsgd {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::string quote(const std::string& s) { return gnuplot_quote(s); }

// Mean of the finite entries; NaN if none.
double finite_mean(const std::vector<double>& v) {
  double sum = 0;
  size_t n = 0;
  for (double x : v) {
    if (std::isfinite(x)) {
      sum += x;
      ++n;
    }
  }
  return n ? sum / static_cast<double>(n) : kNaN;
}

Diff diff_metric(const std::vector<double>& base, const std::vector<double>& run) {
  std::vector<double> d(base.size());
  for (size_t i = 0; i < base.size(); ++i) d[i] = run[i] - base[i];  // NaN propagates
  return {finite_mean(d), d.empty() ? kNaN : d.back()};
}

std::string cell(const Stat& s, double scale, int precision, bool sign) {
  if (!std::isfinite(s.mean)) return "n/a";
  const double m = s.mean * scale, sd = s.std * scale;
  return sign ? fmt::format("{:+.{}f} ± {:.{}f}", m, precision, sd, precision)
              : fmt::format("{:.{}f} ± {:.{}f}", m, precision, sd, precision);
}

nlohmann::json num(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(); }

nlohmann::json stat_json(const Stat& s, const std::vector<double>& values) {
  nlohmann::json vals = nlohmann::json::array();
  for (double v : values) vals.push_back(num(v));
  return {{"mean", num(s.mean)}, {"std", num(s.std)}, {"rounds", vals}};
}

}  // namespace

double interpolate(const std::vector<double>& times, const std::vector<double>& values, double t) {
  HSGD_ASSERT(times.size() == values.size(), "interpolate: times and values differ in length");
  // The last finite point with time <= t, and the first finite point after t.
  size_t lo = times.size(), hi = times.size();
  size_t first = times.size(), last = times.size();
  for (size_t i = 0; i < times.size(); ++i) {
    if (!std::isfinite(values[i])) continue;
    if (first == times.size()) first = i;
    last = i;
    if (times[i] <= t) {
      lo = i;
    } else if (hi == times.size()) {
      hi = i;
    }
  }
  if (first == times.size()) return kNaN;
  if (lo == times.size()) return values[first];  // before the first finite point
  if (hi == times.size()) return values[last];   // at or after the last one
  const double t0 = times[lo], t1 = times[hi];
  if (t == t0 || t1 <= t0) return values[lo];
  const double w = (t - t0) / (t1 - t0);
  return values[lo] + w * (values[hi] - values[lo]);
}

void extend_to_budget(std::vector<double>& grid, const RunEnd& end) {
  if (end.budget <= 0 || end.eval_every <= 0 || grid.empty()) return;
  constexpr double kEps = 1e-9;
  if (grid.back() >= end.budget - kEps) return;
  const double first = grid.front();
  grid.assign(1, first);
  for (double k = std::floor(first / end.eval_every + kEps) + 1;; ++k) {
    const double t = k * end.eval_every;
    if (t >= end.budget - kEps) break;
    grid.push_back(t);
  }
  grid.push_back(end.budget);
}

Curves resample(const std::vector<MetricsRow>& rows, const std::vector<double>& grid) {
  std::vector<double> t, acc, loss, train;
  for (const MetricsRow& r : rows) {
    t.push_back(r.time_s);
    acc.push_back(r.test_acc);
    loss.push_back(r.test_loss);
    train.push_back(r.train_loss);
  }
  Curves c;
  c.time = grid;
  for (double x : grid) {
    c.test_acc.push_back(interpolate(t, acc, x));
    c.test_loss.push_back(interpolate(t, loss, x));
    c.train_loss.push_back(interpolate(t, train, x));
  }
  return c;
}

Stat mean_std(const std::vector<double>& values) {
  std::vector<double> v;
  for (double x : values) {
    if (std::isfinite(x)) v.push_back(x);
  }
  if (v.empty()) return {kNaN, kNaN};
  double mean = 0;
  for (double x : v) mean += x;
  mean /= static_cast<double>(v.size());
  if (v.size() == 1) return {mean, 0};
  double ss = 0;
  for (double x : v) ss += (x - mean) * (x - mean);
  return {mean, std::sqrt(ss / static_cast<double>(v.size() - 1))};
}

RoundDiff diff_round(const std::vector<MetricsRow>& baseline, const std::vector<MetricsRow>& run) {
  if (baseline.empty()) throw InputError("compare: the baseline run has no metrics rows");
  if (run.empty()) throw InputError("compare: a run has no metrics rows");
  std::vector<double> grid, acc, loss, train;
  for (const MetricsRow& r : baseline) {
    grid.push_back(r.time_s);
    acc.push_back(r.test_acc);
    loss.push_back(r.test_loss);
    train.push_back(r.train_loss);  // NaN on the first row: left out of the average
  }
  const Curves c = resample(run, grid);
  RoundDiff d;
  d.test_acc = diff_metric(acc, c.test_acc);
  d.test_loss = diff_metric(loss, c.test_loss);
  d.train_loss = diff_metric(train, c.train_loss);
  d.final_test_acc = run.back().test_acc;
  return d;
}

namespace {

bool baseline_stopped(const CompareInput& in, size_t r) {
  return !in.stopped.empty() && in.stopped[in.baseline][r];
}

// The baseline's run r, extended when it stopped early: a copy of its last
// row at every evaluation time of the round's longest run after its end, and
// when that run stopped early too, at every time extend_to_budget adds.
std::vector<MetricsRow> baseline_rows(const CompareInput& in, size_t r) {
  const std::vector<MetricsRow>& base = in.runs[in.baseline][r];
  if (!baseline_stopped(in, r)) return base;
  const std::vector<MetricsRow>* longest = &base;
  for (const auto& runs : in.runs) {
    if (runs[r].back().time_s > longest->back().time_s) longest = &runs[r];
  }
  std::vector<double> grid;
  for (const MetricsRow& row : *longest) grid.push_back(row.time_s);
  extend_to_budget(grid, in.end);
  std::vector<MetricsRow> out = base;
  for (double t : grid) {
    if (t <= base.back().time_s) continue;
    out.push_back(base.back());
    out.back().time_s = t;
  }
  return out;
}

}  // namespace

CompareResult compare_runs(const CompareInput& in) {
  const size_t np = in.policies.size();
  if (np == 0) throw InputError("compare: no policies");
  if (in.runs.size() != np) throw InputError("compare: runs and policies differ in number");
  if (in.baseline >= np) throw InputError("compare: the baseline is not among the policies");
  const size_t rounds = in.runs[in.baseline].size();
  if (rounds == 0) throw InputError("compare: no rounds");
  if (!in.stopped.empty() && in.stopped.size() != np)
    throw InputError("compare: stopped flags and policies differ in number");
  for (size_t p = 0; p < np; ++p) {
    if (in.runs[p].size() != rounds) {
      throw InputError(fmt::format("compare: policy {} has {} rounds, expected {}", in.policies[p],
                                   in.runs[p].size(), rounds));
    }
    for (size_t r = 0; r < rounds; ++r) {
      if (in.runs[p][r].empty()) {
        throw InputError(
            fmt::format("compare: policy {} round {} has no metrics rows", in.policies[p], r));
      }
    }
    if (!in.stopped.empty() && in.stopped[p].size() != rounds) {
      throw InputError(fmt::format("compare: policy {} has {} stopped flags, expected {}",
                                   in.policies[p], in.stopped[p].size(), rounds));
    }
  }
  CompareResult out;
  out.config = in.config;
  out.runtime = in.runtime;
  out.baseline = in.policies[in.baseline];
  out.rounds = rounds;
  std::vector<std::vector<MetricsRow>> base(rounds);
  for (size_t r = 0; r < rounds; ++r) {
    base[r] = baseline_rows(in, r);
    if (baseline_stopped(in, r)) out.baseline_stopped.push_back(r);
  }
  for (const MetricsRow& row : base[0]) out.plot_grid.push_back(row.time_s);
  const size_t ng = out.plot_grid.size();

  for (size_t p = 0; p < np; ++p) {
    PolicyResult pr;
    pr.policy = in.policies[p];
    std::vector<double> fin, aa, ae, tla, tle, tra, tre;
    std::vector<Curves> curves;
    for (size_t r = 0; r < rounds; ++r) {
      const RoundDiff d = diff_round(base[r], in.runs[p][r]);
      pr.rounds.push_back(d);
      fin.push_back(d.final_test_acc);
      aa.push_back(d.test_acc.avg);
      ae.push_back(d.test_acc.end);
      tla.push_back(d.test_loss.avg);
      tle.push_back(d.test_loss.end);
      tra.push_back(d.train_loss.avg);
      tre.push_back(d.train_loss.end);
      curves.push_back(resample(in.runs[p][r], out.plot_grid));
    }
    pr.final_test_acc = mean_std(fin);
    pr.acc_avg = mean_std(aa);
    pr.acc_end = mean_std(ae);
    pr.test_loss_avg = mean_std(tla);
    pr.test_loss_end = mean_std(tle);
    pr.train_loss_avg = mean_std(tra);
    pr.train_loss_end = mean_std(tre);
    auto band = [&](std::vector<double> Curves::*m, std::vector<double>* mean,
                    std::vector<double>* lo, std::vector<double>* hi) {
      for (size_t g = 0; g < ng; ++g) {
        std::vector<double> v;
        for (const Curves& c : curves) v.push_back((c.*m)[g]);
        mean->push_back(finite_mean(v));
        double mn = kNaN, mx = kNaN;
        for (double x : v) {
          if (!std::isfinite(x)) continue;
          mn = std::isfinite(mn) ? std::min(mn, x) : x;
          mx = std::isfinite(mx) ? std::max(mx, x) : x;
        }
        lo->push_back(mn);
        hi->push_back(mx);
      }
    };
    band(&Curves::test_acc, &pr.acc_mean, &pr.acc_min, &pr.acc_max);
    band(&Curves::test_loss, &pr.loss_mean, &pr.loss_min, &pr.loss_max);
    out.policies.push_back(std::move(pr));
  }
  return out;
}

std::string markdown_table(const CompareResult& r) {
  std::string s =
      fmt::format("Compare: config {}, {} round{}, baseline {}, runtime {}\n\n",
                  r.config.empty() ? "(defaults)" : "`" + r.config + "`", r.rounds,
                  r.rounds == 1 ? "" : "s", r.baseline, r.runtime.empty() ? "threads" : r.runtime);
  s += "| policy | final test acc (%) | Δ test acc avg (pp) | Δ test acc end (pp) "
       "| Δ test loss avg | Δ test loss end | Δ train loss avg | Δ train loss end |\n"
       "|---|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const PolicyResult& p : r.policies) {
    s += fmt::format("| {}{} | {} | {} | {} | {} | {} | {} | {} |\n", p.policy,
                     p.policy == r.baseline ? " (baseline)" : "",
                     cell(p.final_test_acc, 100, 2, false), cell(p.acc_avg, 100, 2, true),
                     cell(p.acc_end, 100, 2, true), cell(p.test_loss_avg, 1, 4, true),
                     cell(p.test_loss_end, 1, 4, true), cell(p.train_loss_avg, 1, 4, true),
                     cell(p.train_loss_end, 1, 4, true));
  }
  s += fmt::format(
      "\nΔ = policy − {} on {}'s evaluation times (linear interpolation); avg = mean over the "
      "interval, end = at its last point; mean ± sample std over rounds.\n",
      r.baseline, r.baseline);
  if (!r.baseline_stopped.empty()) {
    s += fmt::format(
        "{} stopped early (diverged) in round{} {}: held at its last row to the end of the "
        "round's longest run.\n",
        r.baseline, r.baseline_stopped.size() == 1 ? "" : "s", fmt::join(r.baseline_stopped, ", "));
  }
  return s;
}

nlohmann::json to_json(const CompareResult& r) {
  nlohmann::json policies = nlohmann::json::array();
  for (const PolicyResult& p : r.policies) {
    std::vector<double> fin, aa, ae, tla, tle, tra, tre;
    for (const RoundDiff& d : p.rounds) {
      fin.push_back(d.final_test_acc);
      aa.push_back(d.test_acc.avg);
      ae.push_back(d.test_acc.end);
      tla.push_back(d.test_loss.avg);
      tle.push_back(d.test_loss.end);
      tra.push_back(d.train_loss.avg);
      tre.push_back(d.train_loss.end);
    }
    policies.push_back(
        {{"policy", p.policy},
         {"final_test_acc", stat_json(p.final_test_acc, fin)},
         {"diff_test_acc", {{"avg", stat_json(p.acc_avg, aa)}, {"end", stat_json(p.acc_end, ae)}}},
         {"diff_test_loss",
          {{"avg", stat_json(p.test_loss_avg, tla)}, {"end", stat_json(p.test_loss_end, tle)}}},
         {"diff_train_loss",
          {{"avg", stat_json(p.train_loss_avg, tra)}, {"end", stat_json(p.train_loss_end, tre)}}}});
  }
  nlohmann::json out = {{"config", r.config},
                        {"runtime", r.runtime},
                        {"baseline", r.baseline},
                        {"rounds", r.rounds},
                        {"units", "test_acc as a fraction; differences are policy - baseline"},
                        {"policies", policies}};
  if (!r.baseline_stopped.empty()) out["baseline_stopped_rounds"] = r.baseline_stopped;
  return out;
}

std::string curve_data(const CompareResult& r, size_t policy) {
  HSGD_ASSERT(policy < r.policies.size(), "curve_data: policy index out of range");
  const PolicyResult& p = r.policies[policy];
  std::string s = fmt::format(
      "# {}: mean, min and max over {} rounds on {}'s round-0 evaluation times\n"
      "# time_s acc_mean acc_min acc_max loss_mean loss_min loss_max\n",
      p.policy, r.rounds, r.baseline);
  for (size_t g = 0; g < r.plot_grid.size(); ++g) {
    s += fmt::format("{:.6g} {:.6g} {:.6g} {:.6g} {:.6g} {:.6g} {:.6g}\n", r.plot_grid[g],
                     p.acc_mean[g], p.acc_min[g], p.acc_max[g], p.loss_mean[g], p.loss_min[g],
                     p.loss_max[g]);
  }
  return s;
}

void plot_compare(const CompareResult& r, const std::vector<std::string>& data_files,
                  const std::string& png) {
  HSGD_ASSERT(data_files.size() == r.policies.size(), "plot_compare: one data file per policy");
  const std::string tmp = png + ".partial";
  std::string script = fmt::format(
      "set terminal pngcairo size 1200,500 font 'sans,10'\n"
      "set output {}\n"
      "set grid\n"
      "set multiplot layout 1,2 title {}\n",
      quote(tmp),
      quote(fmt::format("mean over {} round{} (band: min..max)", r.rounds,
                        r.rounds == 1 ? "" : "s")));
  auto panel = [&](const char* title, const char* ylabel, int mean, const char* key) {
    script += fmt::format("set title '{}'\nset xlabel 'time (s)'\nset ylabel '{}'\nset key {}\n",
                          title, ylabel, key);
    script += "plot ";
    for (size_t i = 0; i < data_files.size(); ++i) {
      script += fmt::format(
          "{}{} using 1:{}:{} with filledcurves fs transparent solid 0.2 noborder lc {} notitle, "
          "{} using 1:{} with lines lw 2 lc {} title {}",
          i ? ", " : "", quote(data_files[i]), mean + 1, mean + 2, i + 1, quote(data_files[i]),
          mean, i + 1, quote(r.policies[i].policy));
    }
    script += "\n";
  };
  // A mixture model (dpgmm) has no accuracy: its curves are all NaN, and
  // the test loss is the negative held-out log-likelihood per point.
  bool accuracy = false;
  for (const PolicyResult& p : r.policies) {
    for (double a : p.acc_mean) accuracy = accuracy || std::isfinite(a);
  }
  if (accuracy) {
    panel("test accuracy", "accuracy", 2, "bottom right");
    panel("test loss", "cross-entropy", 5, "top right");
  } else {
    script.replace(script.find("layout 1,2"), 10, "layout 1,1");
    panel("test loss", "negative held-out log-likelihood per point", 5, "top right");
  }
  script += "unset multiplot\n";

  run_gnuplot(script, png);
}

}  // namespace hsgd
