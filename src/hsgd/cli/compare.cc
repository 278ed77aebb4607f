// hsgd compare: policies x rounds through train(), then the table and plot of
// metrics/compare.h.
#include "hsgd/metrics/compare.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <set>

#include "hsgd/cli/commands.h"
#include "hsgd/core/error.h"
#include "hsgd/metrics/recorder.h"

namespace hsgd::cli {
// "kasync:12" -> "kasync-12"; "async+staleness.scaled_lr=true" ->
// "async+staleness.scaled_lr-true".
std::string policy_dir(std::string p) {
  for (char& c : p) {
    if (c == ':' || c == '=' || c == '/') c = '-';
  }
  return p;
}

namespace {

namespace fs = std::filesystem;

// A --policies entry: a policy name, optionally followed by settings of its
// own, "NAME+section.key=value+...", e.g. "hybrid+policy.schedule=adaptive".
std::vector<Override> entry_overrides(const std::string& entry) {
  std::vector<Override> o;
  size_t plus = entry.find('+');
  o.push_back({"policy.name", toml_string(entry.substr(0, plus))});
  while (plus != std::string::npos) {
    const size_t next = entry.find('+', plus + 1);
    const std::string kv =
        entry.substr(plus + 1, next == std::string::npos ? next : next - plus - 1);
    const size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) {
      throw InputError("--policies '" + entry + "': expected NAME+section.key=value, got '" + kv +
                       "'");
    }
    o.push_back({kv.substr(0, eq), kv.substr(eq + 1)});
    plus = next;
  }
  return o;
}

std::string run_dir(const CompareArgs& a, const std::string& policy, int round) {
  return (fs::path(a.out) / policy_dir(policy) / ("round-" + std::to_string(round))).string();
}

// The user's overrides, then this run's policy, seed and output directory.
std::vector<Override> run_overrides(const CompareArgs& a, const std::string& policy, uint64_t seed,
                                    int round) {
  std::vector<Override> o = a.overrides;
  for (Override& e : entry_overrides(policy)) o.push_back(std::move(e));
  o.push_back({"train.seed", std::to_string(seed)});
  o.push_back({"train.out", toml_string(run_dir(a, policy, round))});
  return o;
}

void check_args(const CompareArgs& a) {
  if (a.rounds < 1) throw InputError(fmt::format("--rounds = {}: expected >= 1", a.rounds));
  if (a.policies.empty()) throw InputError("--policies: expected at least one policy");
  std::set<std::string> seen, dirs;
  for (const std::string& p : a.policies) {
    if (p.empty()) throw InputError("--policies: empty policy name (expected e.g. sync,async)");
    if (!seen.insert(p).second) {
      throw InputError("--policies: '" + p + "' is listed twice");
    }
    if (!dirs.insert(policy_dir(p)).second) {
      throw InputError("--policies: '" + p + "' has the same directory name as another policy");
    }
  }
  if (!seen.count(a.baseline)) {
    throw InputError("--baseline = '" + a.baseline + "': expected one of --policies");
  }
  if (a.out.empty()) throw InputError("--out: expected a directory");
  for (const Override& o : a.overrides) {
    if (o.first == "policy.name") {
      throw InputError("--set policy.name: compare sets the policy of each run; use --policies");
    }
    if (o.first == "train.out") {
      throw InputError("--set train.out: compare sets each run's directory; use --out");
    }
  }
}

}  // namespace

int compare(const CompareArgs& a, const TrainInputs& inputs, const TrainHooks& hooks) {
  // 1. Validate everything, every policy's config included, before any run.
  check_args(a);
  const Config base = load_config(a.config_path, a.overrides);
  if (base.train.runtime == "mpi") {
    throw InputError(
        "train.runtime = 'mpi': hsgd compare runs its rounds in one process (threads or sim); "
        "for mpi, run hsgd train under mpirun once per policy and round, then hsgd plot");
  }
  std::vector<Config> configs;
  for (const std::string& p : a.policies) {
    configs.push_back(load_config(a.config_path, run_overrides(a, p, base.train.seed, 0)));
  }
  warn_moot_in_every(configs);
  std::error_code ec;
  for (const char* f : {"compare.md", "compare.json", "compare.png"}) {
    fs::remove(fs::path(a.out) / f, ec);
  }

  // The simulator's costs are measured once, for every run of the
  // comparison (an entry that sets them itself keeps its own).
  std::vector<Override> costs;
  if (base.train.runtime == "sim") {
    TrainArgs first;
    first.config_path = a.config_path;
    first.overrides = run_overrides(a, a.policies.front(), base.train.seed, 0);
    costs = resolve_costs(first, inputs);
  }

  // 2. Run, round by round, so an interrupted compare leaves whole rounds.
  CompareInput in;
  in.policies = a.policies;
  in.config = a.config_path;
  in.runtime = base.train.runtime;
  in.runs.resize(a.policies.size());
  in.stopped.resize(a.policies.size());
  for (size_t p = 0; p < a.policies.size(); ++p) {
    if (a.policies[p] == a.baseline) in.baseline = p;
  }
  in.end = {common_budget(configs), configs[in.baseline].train.eval_every};
  const int total = a.rounds * static_cast<int>(a.policies.size());
  int done = 0;
  for (int r = 0; r < a.rounds; ++r) {
    const uint64_t seed = base.train.seed + static_cast<uint64_t>(r);
    for (size_t p = 0; p < a.policies.size(); ++p) {
      const std::string& policy = a.policies[p];
      TrainArgs ta;
      ta.config_path = a.config_path;
      ta.overrides = costs;
      for (Override& o : run_overrides(a, policy, seed, r)) ta.overrides.push_back(std::move(o));
      ta.quiet = true;
      const auto start = std::chrono::steady_clock::now();
      const TrainOutcome o = run_train(ta, inputs, hooks);
      if (o.stop_kind == "requested") return 3;  // hooks.stop: no table
      const bool stopped = o.code == 3;          // diverged: its metrics are the result
      const double wall =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      const std::string dir = run_dir(a, policy, r);
      std::vector<MetricsRow> rows = read_metrics_csv(dir + "/metrics.csv");
      if (rows.empty()) throw InputError(dir + "/metrics.csv: no rows");
      std::fprintf(stderr,
                   "hsgd compare: [%d/%d] %s round %d (seed %llu): test_acc %.2f%% after %.2f s "
                   "of training%s (%.1f s wall)\n",
                   ++done, total, policy.c_str(), r, static_cast<unsigned long long>(seed),
                   100.0 * rows.back().test_acc, rows.back().time_s,
                   stopped ? ", stopped early" : "", wall);
      in.runs[p].push_back(std::move(rows));
      in.stopped[p].push_back(stopped);
    }
  }

  // 3. Table, numbers, plot.
  const CompareResult result = compare_runs(in);
  const std::string table = markdown_table(result);
  std::fputs(table.c_str(), stdout);
  std::fflush(stdout);
  write_file_atomic((fs::path(a.out) / "compare.md").string(), table);
  write_file_atomic((fs::path(a.out) / "compare.json").string(), to_json(result).dump(2) + "\n");
  std::vector<std::string> data_files;
  for (size_t p = 0; p < result.policies.size(); ++p) {
    data_files.push_back(
        (fs::path(a.out) / (policy_dir(result.policies[p].policy) + ".curve.dat")).string());
    write_file_atomic(data_files.back(), curve_data(result, p));
  }
  std::string plot_note;
  try {
    plot_compare(result, data_files, (fs::path(a.out) / "compare.png").string());
    plot_note = ", compare.png";
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hsgd: warning: no plot: %s\n", e.what());
  }
  std::fprintf(stderr, "hsgd compare: wrote %s/{compare.md, compare.json%s}\n", a.out.c_str(),
               plot_note.c_str());
  return 0;
}

}  // namespace hsgd::cli
