#include "hsgd/metrics/sweep.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "hsgd/core/error.h"
#include "hsgd/metrics/plot.h"

namespace hsgd {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

nlohmann::json num(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(); }

std::string pct(const Stat& s) {
  if (!std::isfinite(s.mean)) return "n/a";
  return fmt::format("{:.2f} ± {:.2f}", 100 * s.mean, 100 * s.std);
}

std::string pp(double v) { return std::isfinite(v) ? fmt::format("{:+.2f}", 100 * v) : "n/a"; }

std::string se(double v) { return std::isfinite(v) ? fmt::format("{:.2f}", 100 * v) : "n/a"; }

double interval_mean(const std::vector<MetricsRow>& rows, const std::vector<double>& grid) {
  const Curves c = resample(rows, grid);
  double sum = 0;
  size_t n = 0;
  for (double v : c.test_acc) {
    if (std::isfinite(v)) {
      sum += v;
      ++n;
    }
  }
  return n ? sum / static_cast<double>(n) : kNaN;
}

// The standard error of the mean of a[s] − b[s] over the seeds where both are
// finite (NaN with fewer than two).
double paired_se(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> d;
  for (size_t s = 0; s < a.size() && s < b.size(); ++s) {
    if (std::isfinite(a[s]) && std::isfinite(b[s])) d.push_back(a[s] - b[s]);
  }
  if (d.size() < 2) return kNaN;
  return mean_std(d).std / std::sqrt(static_cast<double>(d.size()));
}

}  // namespace

bool is_adaptive_policy(const std::string& policy) {
  return policy == "auto" || policy.rfind("auto+", 0) == 0;
}

SweepResult sweep_results(const SweepInput& in) {
  SweepResult r;
  r.axes = in.axes;
  r.policies = in.policies;
  r.seeds = in.seeds;
  r.candidate = in.candidate;
  if (in.policies.empty() || in.seeds.empty()) throw InputError("sweep: no policies or no seeds");
  if (in.runs.size() != in.cells.size()) throw InputError("sweep: runs and cells differ in count");
  if (!in.ends.empty() && in.ends.size() != in.cells.size())
    throw InputError("sweep: ends and cells differ in count");
  for (size_t c = 0; c < in.cells.size(); ++c) {
    SweepCell cell;
    cell.index = in.cells[c];
    if (cell.index.size() != in.axes.size()) throw InputError("sweep: a cell without every axis");
    if (in.runs[c].size() != in.policies.size())
      throw InputError("sweep: a cell without every policy");
    for (const auto& runs : in.runs[c]) {
      if (runs.size() != in.seeds.size()) throw InputError("sweep: a policy without every seed");
      for (const auto& run : runs) {
        if (run.empty()) throw InputError("sweep: a run without metrics rows");
      }
    }
    // Seed s's grid: the evaluation times of its longest run (the first in
    // list order on a tie), so a run stopped early for divergence does not
    // shorten the interval every other policy of that seed is measured on.
    std::vector<std::vector<double>> grids(in.seeds.size());
    for (size_t s = 0; s < in.seeds.size(); ++s) {
      size_t longest = 0;
      for (size_t p = 1; p < in.policies.size(); ++p) {
        if (in.runs[c][p][s].back().time_s > in.runs[c][longest][s].back().time_s) longest = p;
      }
      for (const MetricsRow& row : in.runs[c][longest][s]) grids[s].push_back(row.time_s);
      if (!in.ends.empty()) extend_to_budget(grids[s], in.ends[c]);
    }
    for (size_t p = 0; p < in.policies.size(); ++p) {
      const auto& runs = in.runs[c][p];
      SweepPolicy sp;
      sp.policy = in.policies[p];
      for (size_t s = 0; s < runs.size(); ++s) {
        sp.interval.push_back(interval_mean(runs[s], grids[s]));
        sp.final.push_back(runs[s].back().test_acc);
      }
      sp.interval_mean = mean_std(sp.interval);
      sp.final_acc = mean_std(sp.final);
      if (sp.policy == in.candidate) cell.candidate = static_cast<int>(p);
      if (sp.policy == "async") cell.async = static_cast<int>(p);
      cell.policies.push_back(std::move(sp));
    }
    auto im = [&](int p) {
      return p < 0 ? kNaN : cell.policies[static_cast<size_t>(p)].interval_mean.mean;
    };
    for (size_t p = 0; p < cell.policies.size(); ++p) {
      const int i = static_cast<int>(p);
      if (i == cell.candidate || is_adaptive_policy(cell.policies[p].policy)) continue;
      const double m = cell.policies[p].interval_mean.mean;
      if (!std::isfinite(m)) continue;
      if (cell.best_fixed < 0 || m > im(cell.best_fixed)) {
        cell.runner_up = cell.best_fixed;
        cell.best_fixed = i;
      } else if (cell.runner_up < 0 || m > im(cell.runner_up)) {
        cell.runner_up = i;
      }
    }
    auto seeds = [&](int p) {
      return p < 0 ? std::vector<double>{} : cell.policies[static_cast<size_t>(p)].interval;
    };
    auto fin = [&](int p) {
      return p < 0 ? kNaN : cell.policies[static_cast<size_t>(p)].final_acc.mean;
    };
    cell.cand_minus_best = im(cell.candidate) - im(cell.best_fixed);
    cell.cand_minus_async = im(cell.candidate) - im(cell.async);
    cell.best_minus_async = im(cell.best_fixed) - im(cell.async);
    cell.cand_minus_best_final = fin(cell.candidate) - fin(cell.best_fixed);
    cell.best_minus_runner_up = im(cell.best_fixed) - im(cell.runner_up);
    cell.cand_minus_best_se = paired_se(seeds(cell.candidate), seeds(cell.best_fixed));
    cell.best_minus_runner_up_se = paired_se(seeds(cell.best_fixed), seeds(cell.runner_up));
    r.cells.push_back(std::move(cell));
  }
  return r;
}

std::string cell_label(const SweepResult& r, const SweepCell& c) {
  std::string s;
  for (size_t a = 0; a < r.axes.size(); ++a) {
    s += (a ? ", " : "") + r.axes[a].key + "=" + r.axes[a].values[c.index[a]];
  }
  return s.empty() ? "(one cell)" : s;
}

std::string sweep_markdown(const SweepResult& r) {
  std::string seeds;
  for (size_t s = 0; s < r.seeds.size(); ++s) {
    if (s) seeds += ",";
    seeds += std::to_string(r.seeds[s]);
  }
  std::string md = fmt::format(
      "hsgd sweep: {} cells x {} policies x {} seeds ({}); test accuracy in %, mean ± std over "
      "seeds; interval = mean over the run's evaluations\n\n",
      r.cells.size(), r.policies.size(), r.seeds.size(), seeds);
  std::string head = "|";
  std::string rule = "|";
  for (const SweepAxis& a : r.axes) {
    head += " " + a.key + " |";
    rule += "---|";
  }
  const std::string cand = r.candidate.empty() ? "candidate" : r.candidate;
  md += head + " best fixed | best fixed interval | " + cand + " interval | " + cand +
        " − best (pp) | " + cand + " − async (pp) | best − async (pp) | " + cand +
        " − best final (pp) | " + cand +
        " − best, paired se (pp) | runner-up | best − runner-up (pp) | best − runner-up, paired "
        "se (pp) |\n";
  md += rule + "---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|\n";
  for (const SweepCell& c : r.cells) {
    std::string row = "|";
    for (size_t a = 0; a < r.axes.size(); ++a) row += " " + r.axes[a].values[c.index[a]] + " |";
    const SweepPolicy* best = c.best_fixed < 0 ? nullptr : &c.policies[size_t(c.best_fixed)];
    const SweepPolicy* cp = c.candidate < 0 ? nullptr : &c.policies[size_t(c.candidate)];
    const SweepPolicy* second = c.runner_up < 0 ? nullptr : &c.policies[size_t(c.runner_up)];
    row += fmt::format(" {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
                       best ? best->policy : "n/a", best ? pct(best->interval_mean) : "n/a",
                       cp ? pct(cp->interval_mean) : "n/a", pp(c.cand_minus_best),
                       pp(c.cand_minus_async), pp(c.best_minus_async), pp(c.cand_minus_best_final),
                       se(c.cand_minus_best_se), second ? second->policy : "n/a",
                       pp(c.best_minus_runner_up), se(c.best_minus_runner_up_se));
    md += row;
  }
  for (int measure = 0; measure < 2; ++measure) {
    md +=
        measure == 0 ? "\nInterval-mean test accuracy (%):\n\n" : "\nFinal test accuracy (%):\n\n";
    std::string h = head, ru = rule;
    for (const std::string& p : r.policies) {
      h += " " + p + " |";
      ru += "---:|";
    }
    md += h + "\n" + ru + "\n";
    for (const SweepCell& c : r.cells) {
      std::string row = "|";
      for (size_t a = 0; a < r.axes.size(); ++a) row += " " + r.axes[a].values[c.index[a]] + " |";
      for (const SweepPolicy& p : c.policies) {
        row += fmt::format(" {} |", pct(measure == 0 ? p.interval_mean : p.final_acc));
      }
      md += row + "\n";
    }
  }
  return md;
}

nlohmann::json sweep_json(const SweepResult& r) {
  nlohmann::json j;
  j["candidate"] = r.candidate;
  j["policies"] = r.policies;
  j["seeds"] = r.seeds;
  j["axes"] = nlohmann::json::array();
  for (const SweepAxis& a : r.axes) j["axes"].push_back({{"key", a.key}, {"values", a.values}});
  j["cells"] = nlohmann::json::array();
  for (const SweepCell& c : r.cells) {
    nlohmann::json cj;
    nlohmann::json at = nlohmann::json::object();
    for (size_t a = 0; a < r.axes.size(); ++a) at[r.axes[a].key] = r.axes[a].values[c.index[a]];
    cj["at"] = at;
    cj["best_fixed"] = c.best_fixed < 0 ? nlohmann::json()
                                        : nlohmann::json(c.policies[size_t(c.best_fixed)].policy);
    cj["candidate_minus_best"] = num(c.cand_minus_best);
    cj["candidate_minus_async"] = num(c.cand_minus_async);
    cj["best_minus_async"] = num(c.best_minus_async);
    cj["candidate_minus_best_final"] = num(c.cand_minus_best_final);
    cj["candidate_minus_best_se"] = num(c.cand_minus_best_se);
    cj["runner_up"] =
        c.runner_up < 0 ? nlohmann::json() : nlohmann::json(c.policies[size_t(c.runner_up)].policy);
    cj["best_minus_runner_up"] = num(c.best_minus_runner_up);
    cj["best_minus_runner_up_se"] = num(c.best_minus_runner_up_se);
    nlohmann::json ps = nlohmann::json::object();
    for (const SweepPolicy& p : c.policies) {
      auto vals = [](const std::vector<double>& v) {
        nlohmann::json a = nlohmann::json::array();
        for (double x : v) a.push_back(num(x));
        return a;
      };
      ps[p.policy] = {{"interval_mean",
                       {{"mean", num(p.interval_mean.mean)},
                        {"std", num(p.interval_mean.std)},
                        {"seeds", vals(p.interval)}}},
                      {"final",
                       {{"mean", num(p.final_acc.mean)},
                        {"std", num(p.final_acc.std)},
                        {"seeds", vals(p.final)}}}};
    }
    cj["policies"] = ps;
    j["cells"].push_back(cj);
  }
  return j;
}

std::vector<HeatMap> sweep_heatmaps(const SweepResult& r, size_t x, size_t y) {
  HSGD_ASSERT(x < r.axes.size() && y < r.axes.size() && x != y, "heat map axes");
  std::vector<HeatMap> maps;
  for (const SweepCell& c : r.cells) {
    std::string suffix, title;
    for (size_t a = 0; a < r.axes.size(); ++a) {
      if (a == x || a == y) continue;
      suffix += "-" + r.axes[a].key + "-" + r.axes[a].values[c.index[a]];
      title += (title.empty() ? "" : ", ") + r.axes[a].key + "=" + r.axes[a].values[c.index[a]];
    }
    HeatMap* m = nullptr;
    for (HeatMap& e : maps) {
      if (e.suffix == suffix) m = &e;
    }
    if (!m) {
      maps.push_back({suffix, title, "# xi yi candidate-minus-best-fixed(pp)\n"});
      m = &maps.back();
    }
    m->data += fmt::format("{} {} {}\n", c.index[x], c.index[y],
                           std::isfinite(c.cand_minus_best)
                               ? fmt::format("{:.4f}", 100 * c.cand_minus_best)
                               : std::string("NaN"));
  }
  for (HeatMap& m : maps) {
    for (char& ch : m.suffix) {
      if (ch == '/' || ch == ':' || ch == '=' || ch == ' ' || ch == '"' || ch == '\'') ch = '_';
    }
  }
  return maps;
}

void plot_sweep_heatmap(const SweepResult& r, size_t x, size_t y, const HeatMap& map,
                        const std::string& data_file, const std::string& png) {
  auto tics = [&](size_t axis) {
    std::string t;
    for (size_t i = 0; i < r.axes[axis].values.size(); ++i) {
      t += fmt::format("{}{} {}", i ? ", " : "", gnuplot_quote(r.axes[axis].values[i]), i);
    }
    return "(" + t + ")";
  };
  const std::string cand = r.candidate.empty() ? "candidate" : r.candidate;
  const std::string title = cand + " − best fixed, interval-mean test accuracy (pp)" +
                            (map.title.empty() ? "" : "; " + map.title);
  const double nx = static_cast<double>(r.axes[x].values.size());
  const double ny = static_cast<double>(r.axes[y].values.size());
  const std::string script = fmt::format(
      "set terminal pngcairo size 800,640 font 'sans,10'\n"
      "set output {}\n"
      "set title {}\n"
      "set xlabel {}\nset ylabel {}\n"
      "set xtics {}\nset ytics {}\n"
      "set xrange [-0.5:{}]\nset yrange [-0.5:{}]\n"
      "set palette defined (-5 'red', 0 'white', 5 'blue')\n"
      "set cbrange [-5:5]\nset cblabel 'pp'\n"
      "plot {} using 1:2:3 with image notitle, '' using 1:2:(sprintf('%+.2f', $3)) "
      "with labels notitle\n",
      gnuplot_quote(png + ".partial"), gnuplot_quote(title), gnuplot_quote(r.axes[x].key),
      gnuplot_quote(r.axes[y].key), tics(x), tics(y), nx - 0.5, ny - 0.5, gnuplot_quote(data_file));
  run_gnuplot(script, png);
}

}  // namespace hsgd
