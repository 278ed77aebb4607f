// hsgd sweep: a grid of config cells x policies x seeds on the simulator, run
// as child `hsgd train` processes (`jobs` at a time), resumable, then the
// tables, JSON and heat maps of metrics/sweep.h. Grid format: README, "Sweep
// a grid".
#include "hsgd/metrics/sweep.h"

#include <fmt/format.h>
#include <sys/wait.h>
#include <toml++/toml.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "hsgd/cli/commands.h"
#include "hsgd/cli/spawn.h"
#include "hsgd/config/effective.h"
#include "hsgd/core/error.h"
#include "hsgd/metrics/recorder.h"

namespace hsgd::cli {
namespace {

namespace fs = std::filesystem;

struct Grid {
  std::string path;
  std::string config;  // base config file ("" = defaults)
  std::vector<uint64_t> seeds = {1};
  std::vector<std::string> policies;
  std::string candidate;
  int jobs = 2;
  std::vector<Override> set;
  std::vector<SweepAxis> axes;
  std::string plot_x, plot_y;
};

// A scalar TOML value as override text; throws for anything else.
std::string value_text(const Grid& g, const std::string& key, const toml::node& v) {
  if (auto s = v.as_string()) return toml_string(s->get());
  if (auto i = v.as_integer()) return std::to_string(i->get());
  if (auto f = v.as_floating_point()) {
    const double d = f->get();
    if (!std::isfinite(d)) throw InputError(g.path + ": " + key + ": expected a finite number");
    std::string t = fmt::format("{}", d);
    if (t.find_first_of(".eE") == std::string::npos) t += ".0";
    return t;
  }
  if (auto b = v.as_boolean()) return b->get() ? "true" : "false";
  throw InputError(g.path + ": " + key + ": expected a string, number or boolean");
}

// How an axis value is shown: strings without their quotes.
std::string shown(const std::string& text) {
  if (text.size() >= 2 && text.front() == '"') {
    std::string s;
    for (size_t i = 1; i + 1 < text.size(); ++i) {
      if (text[i] == '\\' && i + 2 < text.size()) ++i;
      s += text[i];
    }
    return s;
  }
  return text;
}

// Dotted keys of a table's leaves: [set] optim.lr = 1 and "optim.lr" = 1 both
// give "optim.lr".
void flatten(const toml::table& t, const std::string& prefix,
             std::vector<std::pair<std::string, const toml::node*>>* out) {
  for (const auto& [k, v] : t) {
    const std::string key =
        prefix.empty() ? std::string(k.str()) : prefix + "." + std::string(k.str());
    if (const toml::table* sub = v.as_table()) {
      flatten(*sub, key, out);
    } else {
      out->push_back({key, &v});
    }
  }
}

void check_key(const Grid& g, const std::string& where, const std::string& key) {
  if (key.find('.') == std::string::npos) {
    throw InputError(g.path + ": " + where + " '" + key + "': expected a config key section.key");
  }
  for (const char* k : {"policy.name", "train.seed", "train.out", "train.runtime"}) {
    if (key == k) {
      throw InputError(g.path + ": " + where + " '" + key +
                       "': the sweep sets it (use policies, seeds; runs are on sim in --out)");
    }
  }
}

Grid parse_grid(const std::string& path) {
  Grid g;
  g.path = path;
  std::error_code ec;
  if (fs::is_directory(path, ec))
    throw InputError(path + ": expected a sweep grid (TOML), got a directory");
  std::ifstream f(path, std::ios::binary);
  if (!f) throw InputError(path + ": cannot open the sweep grid");
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string text = ss.str();
  if (text.empty()) throw InputError(path + ": expected a sweep grid (TOML), got an empty file");
  toml::table t;
  try {
    t = toml::parse(text, path);
  } catch (const toml::parse_error& e) {
    std::string d(e.description());
    for (char& c : d) {
      if (c == '\n' || c == '\r') c = ' ';
    }
    throw InputError(path + ":" + std::to_string(e.source().begin.line) + ":" +
                     std::to_string(e.source().begin.column) +
                     ": expected a sweep grid (TOML): " + d);
  }
  const fs::path dir = fs::path(path).parent_path();
  for (const auto& [k, v] : t) {
    const std::string key(k.str());
    if (key == "config") {
      auto s = v.as_string();
      if (!s) throw InputError(path + ": config: expected a file name (string)");
      const fs::path c = s->get();
      g.config = c.is_absolute() ? c.string() : (dir / c).string();
    } else if (key == "seeds") {
      auto a = v.as_array();
      if (!a || a->empty())
        throw InputError(path + ": seeds: expected a non-empty array of integers");
      g.seeds.clear();
      std::set<int64_t> seen;
      for (const auto& e : *a) {
        auto i = e.as_integer();
        if (!i || i->get() < 0) throw InputError(path + ": seeds: expected integers >= 0");
        if (!seen.insert(i->get()).second)
          throw InputError(path + ": seeds: " + std::to_string(i->get()) + " is listed twice");
        g.seeds.push_back(static_cast<uint64_t>(i->get()));
      }
    } else if (key == "policies") {
      auto a = v.as_array();
      if (!a || a->empty())
        throw InputError(path + ": policies: expected a non-empty array of policy names");
      for (const auto& e : *a) {
        auto s = e.as_string();
        if (!s || s->get().empty())
          throw InputError(path + ": policies: expected non-empty strings");
        g.policies.push_back(s->get());
      }
    } else if (key == "candidate") {
      auto s = v.as_string();
      if (!s) throw InputError(path + ": candidate: expected a policy name (string)");
      g.candidate = s->get();
    } else if (key == "jobs") {
      auto i = v.as_integer();
      if (!i || i->get() < 1 || i->get() > 64)
        throw InputError(path + ": jobs: expected an integer in [1, 64]");
      g.jobs = static_cast<int>(i->get());
    } else if (key == "set" || key == "axes") {
      const toml::table* st = v.as_table();
      if (!st) throw InputError(path + ": " + key + ": expected a [" + key + "] table");
      std::vector<std::pair<std::string, const toml::node*>> leaves;
      flatten(*st, "", &leaves);
      for (const auto& [lk, node] : leaves) {
        check_key(g, key == "set" ? "[set]" : "[axes]", lk);
        if (key == "set") {
          g.set.push_back({lk, value_text(g, "[set] " + lk, *node)});
          continue;
        }
        auto a = node->as_array();
        if (!a || a->empty())
          throw InputError(path + ": [axes] " + lk + ": expected a non-empty array of values");
        SweepAxis axis{lk, {}};
        std::set<std::string> seen;
        for (const auto& e : *a) {
          axis.values.push_back(value_text(g, "[axes] " + lk, e));
          if (!seen.insert(axis.values.back()).second)
            throw InputError(path + ": [axes] " + lk + ": " + axis.values.back() +
                             " is listed twice");
        }
        g.axes.push_back(std::move(axis));
      }
    } else if (key == "plot") {
      const toml::table* st = v.as_table();
      if (!st) throw InputError(path + ": plot: expected a [plot] table with x and y");
      for (const auto& [pk, pv] : *st) {
        const std::string name(pk.str());
        auto s = pv.as_string();
        if ((name != "x" && name != "y") || !s)
          throw InputError(path + ": [plot] " + name +
                           ": expected x = \"axis key\" and y = \"axis key\"");
        (name == "x" ? g.plot_x : g.plot_y) = s->get();
      }
    } else {
      throw InputError(
          path + ": unknown key '" + key +
          "' (expected config, seeds, policies, candidate, jobs, [set], [axes], [plot])");
    }
  }
  if (g.policies.empty())
    throw InputError(path + ": policies: expected a non-empty array of policy names");
  std::set<std::string> seen;
  for (const std::string& p : g.policies) {
    if (!seen.insert(p).second) throw InputError(path + ": policies: '" + p + "' is listed twice");
  }
  if (g.candidate.empty() && seen.count("auto")) g.candidate = "auto";
  if (!g.candidate.empty() && !seen.count(g.candidate))
    throw InputError(path + ": candidate = '" + g.candidate + "': expected one of policies");
  for (const std::string& k : {g.plot_x, g.plot_y}) {
    if (k.empty()) continue;
    bool found = false;
    for (const SweepAxis& a : g.axes) found = found || a.key == k;
    if (!found) throw InputError(path + ": [plot] '" + k + "': expected one of the [axes] keys");
  }
  if (g.plot_x.empty() != g.plot_y.empty() || (!g.plot_x.empty() && g.plot_x == g.plot_y))
    throw InputError(path + ": [plot]: expected two different axes x and y");
  return g;
}

std::string sanitize(std::string s) {
  for (char& c : s) {
    if (c == ':' || c == '=' || c == '/' || c == ' ' || c == '"' || c == '\'' || c == ',') c = '-';
  }
  return s;
}

// A policies entry: "NAME+section.key=value+..." (as in hsgd compare).
std::vector<Override> entry_overrides(const Grid& g, const std::string& entry) {
  std::vector<Override> o;
  size_t plus = entry.find('+');
  o.push_back({"policy.name", toml_string(entry.substr(0, plus))});
  while (plus != std::string::npos) {
    const size_t next = entry.find('+', plus + 1);
    const std::string kv =
        entry.substr(plus + 1, next == std::string::npos ? next : next - plus - 1);
    const size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0)
      throw InputError(g.path + ": policies: '" + entry + "': expected NAME+section.key=value");
    o.push_back({kv.substr(0, eq), kv.substr(eq + 1)});
    plus = next;
  }
  return o;
}

struct Run {
  size_t cell, policy, seed;
  std::string dir;
  std::vector<Override> overrides;  // complete, costs included
  std::string hash;                 // config_digest: every key of the run's config
};

std::string marker(const std::string& dir) { return dir + "/sweep-done"; }

std::string run_dir(const std::string& cell_dir, const std::string& policy, uint64_t seed) {
  return (fs::path(cell_dir) / sanitize(policy) / ("seed-" + std::to_string(seed))).string();
}

bool finished(const Run& r) {
  std::ifstream f(marker(r.dir));
  std::string h;
  return f && (f >> h) && h == r.hash;
}

std::string fmt_duration(double s) {
  const long t = std::lround(std::max(0.0, s));
  return t >= 3600 ? fmt::format("{}h{:02}m", t / 3600, (t % 3600) / 60)
                   : fmt::format("{}m{:02}s", t / 60, t % 60);
}

// Starts `hsgd train` for r, its output in r.dir/train.log.
pid_t spawn(const std::string& self, const Grid& g, const Run& r) {
  std::error_code ec;
  fs::remove_all(r.dir, ec);
  fs::create_directories(r.dir, ec);
  if (ec) throw InputError(r.dir + ": cannot create (" + ec.message() + ")");
  std::vector<std::string> args = {self, "train", "--quiet"};
  if (!g.config.empty()) {
    args.push_back("--config");
    args.push_back(g.config);
  }
  for (const Override& o : r.overrides) {
    args.push_back("--set");
    args.push_back(o.first + "=" + o.second);
  }
  const pid_t pid = spawn_logged(args, r.dir + "/train.log");
  return pid;
}

// Refuses (one line naming the axis) an axis two of whose values give the
// same effective config (config/effective.h) for every policy in every
// combination of the other axes: those runs would be repeats of each other
// (a grid over stragglers.sigma without stragglers.fraction, say).
void refuse_idle_axes(const Grid& g, const std::vector<std::vector<size_t>>& cells,
                      const std::vector<std::vector<Config>>& configs) {
  std::vector<std::vector<std::string>> digest(cells.size());
  for (size_t c = 0; c < cells.size(); ++c) {
    for (const Config& cfg : configs[c]) digest[c].push_back(config_digest(effective_config(cfg)));
  }
  std::map<std::vector<size_t>, size_t> cell_of;
  for (size_t c = 0; c < cells.size(); ++c) cell_of[cells[c]] = c;
  for (size_t ax = 0; ax < g.axes.size(); ++ax) {
    const SweepAxis& axis = g.axes[ax];
    for (size_t i = 0; i < axis.values.size(); ++i) {
      for (size_t j = i + 1; j < axis.values.size(); ++j) {
        bool same = true;
        size_t witness = 0;
        for (size_t c = 0; c < cells.size() && same; ++c) {
          if (cells[c][ax] != i) continue;
          std::vector<size_t> other = cells[c];
          other[ax] = j;
          const size_t d = cell_of.at(other);
          same = digest[c] == digest[d];
          witness = d;
        }
        if (!same) continue;
        std::string why;
        for (const Config& cfg : configs[witness]) {
          for (const std::string& m : moot_settings(cfg)) {
            if (why.empty() && m.rfind(axis.key + " = ", 0) == 0) why = " (" + m + ")";
          }
        }
        throw InputError(g.path + ": [axes] " + axis.key + ": the values " + axis.values[i] +
                         " and " + axis.values[j] + " give the same runs" + why +
                         "; expected values that change the effective config");
      }
    }
  }
}

}  // namespace

bool is_sweep_grid(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) return false;
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  std::stringstream ss;
  ss << f.rdbuf();
  try {
    const toml::table t = toml::parse(ss.str(), path);
    return t.contains("axes") || t.contains("policies");
  } catch (const toml::parse_error&) {
    return false;
  }
}

int sweep(const SweepArgs& a) {
  // 1. The grid and every run's config, validated before anything runs.
  if (a.jobs < 0 || a.jobs > 64)
    throw InputError("--jobs = " + std::to_string(a.jobs) + ": expected 1 to 64");
  const Grid g = parse_grid(a.grid_path);
  const int jobs = a.jobs > 0 ? a.jobs : g.jobs;
  if (a.out.empty()) throw InputError("--out: expected a directory");
  std::vector<std::vector<size_t>> cells(1);
  for (const SweepAxis& axis : g.axes) {
    std::vector<std::vector<size_t>> next;
    for (const auto& c : cells) {
      for (size_t i = 0; i < axis.values.size(); ++i) {
        next.push_back(c);
        next.back().push_back(i);
      }
    }
    cells = std::move(next);
  }
  std::vector<std::string> cell_dirs;
  std::vector<std::vector<Override>> cell_overrides;
  for (const auto& c : cells) {
    std::vector<Override> o = g.set;
    o.push_back({"train.runtime", "\"sim\""});
    std::string name;
    for (size_t ax = 0; ax < g.axes.size(); ++ax) {
      o.push_back({g.axes[ax].key, g.axes[ax].values[c[ax]]});
      name += (ax ? "_" : "") + g.axes[ax].key + "-" + shown(g.axes[ax].values[c[ax]]);
    }
    cell_dirs.push_back(
        (fs::path(a.out) / "cells" / sanitize(name.empty() ? "all" : name)).string());
    cell_overrides.push_back(std::move(o));
  }
  std::set<std::string> pdirs;
  for (const std::string& p : g.policies) {
    if (!pdirs.insert(sanitize(p)).second)
      throw InputError(g.path + ": policies: '" + p + "' has the same directory name as another");
  }
  auto run_overrides = [&](size_t c, size_t p, size_t s, const std::vector<Override>& costs) {
    std::vector<Override> o = cell_overrides[c];
    for (Override& e : entry_overrides(g, g.policies[p])) o.push_back(std::move(e));
    for (const Override& e : costs) o.push_back(e);
    o.push_back({"train.seed", std::to_string(g.seeds[s])});
    return o;
  };
  // configs[c][p]: cell c, policy p, the first seed (without costs and out).
  std::vector<std::vector<Config>> configs(cells.size());
  for (size_t c = 0; c < cells.size(); ++c) {
    for (size_t p = 0; p < g.policies.size(); ++p) {
      try {
        configs[c].push_back(load_config(g.config, run_overrides(c, p, 0, {})));
      } catch (const InputError& e) {
        throw InputError(g.path + ": policy '" + g.policies[p] + "' in cell " +
                         fs::path(cell_dirs[c]).filename().string() + ": " + e.what());
      }
    }
  }
  refuse_idle_axes(g, cells, configs);
  std::vector<Config> all;
  for (const auto& row : configs) all.insert(all.end(), row.begin(), row.end());
  warn_moot_in_every(all);
  if (a.check) {
    std::printf("%s: %zu cells x %zu policies x %zu seeds = %zu runs, every config valid\n",
                g.path.c_str(), cells.size(), g.policies.size(), g.seeds.size(),
                cells.size() * g.policies.size() * g.seeds.size());
    return 0;
  }

  std::vector<Run> runs;
  if (a.rescore) {
    // --rescore: the tables again from the runs already in `out`, running
    // nothing, whatever config identity their markers carry (the method
    // changed, not the runs).
    for (size_t c = 0; c < cells.size(); ++c) {
      for (size_t p = 0; p < g.policies.size(); ++p) {
        for (size_t s = 0; s < g.seeds.size(); ++s) {
          Run r{c, p, s, run_dir(cell_dirs[c], g.policies[p], g.seeds[s]), {}, {}};
          if (!fs::exists(marker(r.dir)) || !fs::exists(r.dir + "/metrics.csv"))
            throw InputError(r.dir + ": no finished run to rescore (run the sweep first)");
          runs.push_back(std::move(r));
        }
      }
    }
  }

  // 2. The simulator's costs: calibrated once per cell if the grid leaves
  // them open, kept in the cell's costs.txt so a resumed sweep reuses them.
  for (size_t c = 0; c < cells.size() && !a.rescore; ++c) {
    const Config& base = configs[c][0];
    std::vector<Override> costs;
    if (base.sim.compute_time == 0 || base.sim.server_ns_per_param < 0 ||
        (base.compress.on() && base.compress.sim_ns_per_param < 0)) {
      // costs.txt: "inputs <calibration digest>", then "key value" lines;
      // measured again when what the costs depend on has changed.
      const std::string file = cell_dirs[c] + "/costs.txt";
      const std::string inputs = "inputs " + calibration_digest(base);
      std::ifstream f(file);
      std::string line;
      if (std::getline(f, line) && line == inputs) {
        std::string k, v;
        while (f >> k >> v) costs.push_back({k, v});
      }
      if (costs.empty()) {
        TrainArgs ta;
        ta.config_path = g.config;
        ta.overrides = run_overrides(c, 0, 0, {});
        ta.overrides.push_back(
            {"train.out", toml_string((fs::path(cell_dirs[c]) / "calibrate").string())});
        costs = resolve_costs(ta);
        std::string text = inputs + "\n";
        for (const Override& o : costs) text += o.first + " " + o.second + "\n";
        fs::create_directories(cell_dirs[c]);
        write_file_atomic(file, text);
      }
    }
    for (size_t p = 0; p < g.policies.size(); ++p) {
      for (size_t s = 0; s < g.seeds.size(); ++s) {
        Run r{c, p, s, run_dir(cell_dirs[c], g.policies[p], g.seeds[s]), {}, {}};
        r.overrides = run_overrides(c, p, s, costs);
        r.overrides.push_back({"train.out", toml_string(r.dir)});
        r.hash = config_digest(load_config(g.config, r.overrides));
        runs.push_back(std::move(r));
      }
    }
  }

  // 3. The runs not yet done, `jobs` at a time.
  std::vector<size_t> todo;
  for (size_t i = 0; i < runs.size() && !a.rescore; ++i) {
    if (!finished(runs[i])) todo.push_back(i);
  }
  std::fprintf(stderr,
               "hsgd sweep: %zu cells x %zu policies x %zu seeds = %zu runs, %zu done, %zu to run "
               "(%d at a time)\n",
               cells.size(), g.policies.size(), g.seeds.size(), runs.size(),
               runs.size() - todo.size(), todo.size(), jobs);
  const std::string self = self_exe();
  const auto start = std::chrono::steady_clock::now();
  std::map<pid_t, size_t> running;
  size_t next = 0, done = 0;
  std::string failure;
  while (next < todo.size() || !running.empty()) {
    while (failure.empty() && next < todo.size() && static_cast<int>(running.size()) < jobs) {
      const size_t i = todo[next++];
      running[spawn(self, g, runs[i])] = i;
    }
    if (running.empty()) break;
    int status = 0;
    const pid_t pid = waitpid(-1, &status, 0);
    if (pid < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error(std::string("waitpid: ") + std::strerror(errno));
    }
    auto it = running.find(pid);
    if (it == running.end()) continue;
    const Run& r = runs[it->second];
    running.erase(it);
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    // 3 = stopped early (diverged): its metrics are the result.
    if (code != 0 && code != 3) {
      if (failure.empty()) {
        failure = fmt::format("the run in {} failed (exit {}); see its train.log", r.dir, code);
      }
      continue;
    }
    write_file_atomic(marker(r.dir), r.hash + "\n");
    ++done;
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double eta =
        elapsed / static_cast<double>(done) * static_cast<double>(todo.size() - done);
    double acc = NAN;
    try {
      const auto rows = read_metrics_csv(r.dir + "/metrics.csv");
      if (!rows.empty()) acc = rows.back().test_acc;
    } catch (const std::exception&) {
    }
    std::fprintf(stderr,
                 "hsgd sweep: [%zu/%zu] %s | %s | seed %llu: final test_acc %.2f%%%s; %s elapsed, "
                 "~%s left\n",
                 done, todo.size(), fs::path(cell_dirs[r.cell]).filename().c_str(),
                 g.policies[r.policy].c_str(), static_cast<unsigned long long>(g.seeds[r.seed]),
                 100 * acc, code == 3 ? " (stopped early)" : "", fmt_duration(elapsed).c_str(),
                 fmt_duration(eta).c_str());
  }
  if (!failure.empty()) throw std::runtime_error(failure);

  // 4. Tables, JSON, heat maps.
  SweepInput in;
  in.axes = g.axes;
  for (SweepAxis& axis : in.axes) {
    for (std::string& v : axis.values) v = shown(v);
  }
  in.policies = g.policies;
  in.seeds = g.seeds;
  in.candidate = g.candidate;
  in.cells = cells;
  in.runs.assign(cells.size(),
                 std::vector<std::vector<std::vector<MetricsRow>>>(
                     g.policies.size(), std::vector<std::vector<MetricsRow>>(g.seeds.size())));
  for (const Run& r : runs) {
    in.runs[r.cell][r.policy][r.seed] = read_metrics_csv(r.dir + "/metrics.csv");
  }
  // Each cell's grid goes on to its budget (the longest of its policies'),
  // unless an epoch limit may end a whole run before it.
  for (size_t c = 0; c < cells.size(); ++c) {
    in.ends.push_back({common_budget(configs[c]), configs[c][0].train.eval_every});
  }
  const SweepResult res = sweep_results(in);
  const std::string md = sweep_markdown(res);
  std::fputs(md.c_str(), stdout);
  std::fflush(stdout);
  write_file_atomic((fs::path(a.out) / "sweep.md").string(), md);
  write_file_atomic((fs::path(a.out) / "sweep.json").string(), sweep_json(res).dump(2) + "\n");
  std::string plotted;
  if (!g.candidate.empty() && g.axes.size() >= 2) {
    size_t x = 0, y = 1;
    for (size_t i = 0; i < g.axes.size(); ++i) {
      if (!g.plot_x.empty() && g.axes[i].key == g.plot_x) x = i;
      if (!g.plot_y.empty() && g.axes[i].key == g.plot_y) y = i;
    }
    for (const HeatMap& m : sweep_heatmaps(res, x, y)) {
      const std::string base = (fs::path(a.out) / ("heatmap" + m.suffix)).string();
      write_file_atomic(base + ".dat", m.data);
      try {
        plot_sweep_heatmap(res, x, y, m, base + ".dat", base + ".png");
        plotted += ", " + fs::path(base).filename().string() + ".png";
      } catch (const std::exception& e) {
        std::fprintf(stderr, "hsgd: warning: no heat map: %s\n", e.what());
      }
    }
  }
  std::fprintf(stderr, "hsgd sweep: wrote %s/{sweep.md, sweep.json%s}\n", a.out.c_str(),
               plotted.c_str());
  return 0;
}

}  // namespace hsgd::cli
