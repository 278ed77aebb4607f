// hsgd fidelity: the same job on a real runtime (mpi over emulated hosts,
// scripts/mpi-netns.sh; or threads) and on the simulator with the same
// network and costs, compared figure by figure (metrics/fidelity.h).
#include "hsgd/metrics/fidelity.h"

#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "hsgd/cli/commands.h"
#include "hsgd/cli/spawn.h"
#include "hsgd/core/error.h"
#include "hsgd/policy/gossip.h"

namespace hsgd::cli {
namespace {

namespace fs = std::filesystem;

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(path + ": cannot read");
  return nlohmann::json::parse(in);
}

// The bytes a link carried (mpi-netns.sh -S), max(tx, rx): hosta's (the
// server's), or with `busiest` the most any host's carried (gossip: every
// host is a worker).
double link_bytes(const std::string& stats_path, bool busiest) {
  std::ifstream in(stats_path);
  std::string host;
  double tx = 0, rx = 0, most = std::nan("");
  while (in >> host >> tx >> rx) {
    if (!busiest && host == "hosta") return std::max(tx, rx);
    if (busiest && !(most >= std::max(tx, rx))) most = std::max(tx, rx);
  }
  return most;
}

// Runs one child to completion; exit 0 or 3 (stopped early: its metrics are
// the result) is a run, anything else a failure naming the log.
void run_child(const std::vector<std::string>& args, const std::string& dir) {
  fs::create_directories(dir);
  const std::string log = dir + "/run.log";
  const int code = wait_exit(spawn_logged(args, log));
  if (code != 0 && code != 3)
    throw std::runtime_error(fmt::format("the run in {} failed (exit {}); see {}", dir, code, log));
}

}  // namespace

int fidelity(const FidelityArgs& a) {
  if (a.rounds < 1) throw InputError(fmt::format("--rounds = {}: expected >= 1", a.rounds));
  if (a.real != "mpi" && a.real != "threads")
    throw InputError("--real '" + a.real + "': expected mpi or threads");
  if (a.real == "mpi" && (a.hosts < 2 || a.hosts > 26))
    throw InputError(fmt::format("--hosts = {}: expected 2 to 26", a.hosts));
  if (a.real == "threads" && !a.rate.empty())
    throw InputError("--rate: the threads runtime has no network (use --real mpi)");
  if (!(a.target > 0 && a.target <= 1))
    throw InputError(fmt::format("--target = {}: expected a test accuracy in (0, 1]", a.target));
  if (!(a.wire_efficiency > 0 && a.wire_efficiency <= 1))
    throw InputError(fmt::format("--wire-efficiency = {}: expected (0, 1]", a.wire_efficiency));
  const double rate = a.rate.empty() ? 0 : parse_rate(a.rate, "--rate");
  const std::string srate_text = a.server_rate.empty() ? a.rate : a.server_rate;
  if (!a.server_rate.empty() && a.rate.empty())
    throw InputError("--server-rate needs --rate (an unlimited worker link)");
  const double srate = srate_text.empty() ? 0 : parse_rate(srate_text, "--server-rate");
  const std::string self = self_exe();
  std::string script = a.netns_script;
  if (a.real == "mpi") {
    if (script.empty())
      script = (fs::path(self).parent_path() / "../../scripts/mpi-netns.sh").lexically_normal();
    if (!fs::exists(script))
      throw InputError("--netns-script " + script + ": not found (scripts/mpi-netns.sh)");
  }
  const int workers = a.real == "mpi" ? a.hosts - 1 : a.workers;
  if (workers < 1) throw InputError(fmt::format("--workers = {}: expected >= 1", workers));
  const int cores =
      a.cores > 0 ? a.cores : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));

  // The job, validated as the simulator will run it (and the real runtime
  // the same config), before anything is written.
  std::vector<Override> base = a.overrides;
  base.push_back({"train.workers", std::to_string(workers)});
  const Config c0 = load_config(a.config_path, base);
  std::vector<std::string> policies = a.policies;
  if (policies.empty()) policies.push_back(c0.policy_name);
  std::map<std::string, bool> serverless;  // the gossip policies run with --servers 0
  for (const std::string& p : policies) {
    std::vector<Override> o = base;
    o.push_back({"policy.name", "\"" + p + "\""});
    o.push_back({"train.runtime", "\"sim\""});
    serverless[p] = is_gossip_policy(load_config(a.config_path, o).policy.kind);
  }
  fs::create_directories(a.out);

  // The simulator's costs, measured once on this machine alone (one core,
  // nothing else running): the sharing of the cores between the ranks is
  // sim.cores' part, not the calibration's.
  TrainArgs cal;
  cal.config_path = a.config_path;
  cal.overrides = base;
  cal.overrides.push_back({"train.runtime", "\"sim\""});
  std::vector<Override> costs = resolve_costs(cal);
  {
    std::string text;
    for (const Override& o : costs) text += o.first + " = " + o.second + "\n";
    write_file_atomic(a.out + "/costs.txt", text);
    std::fprintf(stderr, "hsgd fidelity: calibrated costs: %s", text.c_str());
  }
  std::vector<std::string> sets;
  for (const Override& o : a.overrides) sets.push_back(o.first + "=" + o.second);
  const auto common = [&](const std::string& policy, uint64_t seed, const std::string& out) {
    std::vector<std::string> v = {self, "train", "--quiet"};
    if (!a.config_path.empty()) v.insert(v.end(), {"--config", a.config_path});
    for (const std::string& s : sets) v.insert(v.end(), {"--set", s});
    v.insert(v.end(), {"--policy", policy, "--seed", std::to_string(seed), "--out", out});
    return v;
  };

  std::vector<std::string> labels;
  std::vector<std::vector<FigureComparison>> cells;
  for (const std::string& policy : policies) {
    std::vector<RunFigures> real, sim;
    for (int r = 0; r < a.rounds; ++r) {
      const uint64_t seed = c0.train.seed + static_cast<uint64_t>(r);
      const std::string dir = fmt::format("{}/{}/round-{}", a.out, policy_dir(policy), r);
      std::fprintf(stderr, "hsgd fidelity: %s round %d: %s ...\n", policy.c_str(), r,
                   a.real.c_str());
      std::vector<std::string> real_args;
      const std::string stats = dir + "/links.txt";
      const bool gossip = serverless.at(policy);
      if (a.real == "mpi") {
        // A server policy: the server alone on hosta, a worker on every
        // other host. A gossip policy: the same workers on one host each
        // (hosta and all but the last of the others), no server.
        real_args = {"/bin/bash", script, "-n", std::to_string(a.hosts), "-S", stats};
        if (!a.rate.empty()) real_args.insert(real_args.end(), {"-r", a.rate, "-R", srate_text});
        real_args.insert(real_args.end(),
                         {"--", "-np", std::to_string(gossip ? workers : a.hosts)});
        for (const std::string& s : common(policy, seed, dir + "/real")) real_args.push_back(s);
        real_args.insert(real_args.end(), {"--runtime", "mpi", "--servers", gossip ? "0" : "1"});
      } else {
        real_args = common(policy, seed, dir + "/real");
        real_args.insert(real_args.end(),
                         {"--runtime", "threads", "--workers", std::to_string(workers)});
      }
      run_child(real_args, dir);
      std::fprintf(stderr, "hsgd fidelity: %s round %d: sim ...\n", policy.c_str(), r);
      std::vector<std::string> sim_args = common(policy, seed, dir + "/sim");
      sim_args.insert(sim_args.end(), {"--runtime", "sim", "--workers", std::to_string(workers)});
      sim_args.insert(sim_args.end(), {"--set", "sim.cores=" + std::to_string(cores)});
      for (const Override& o : costs)
        sim_args.insert(sim_args.end(), {"--set", o.first + "=" + o.second});
      if (a.real == "threads") {
        // Threads share memory: no message crosses a network (copies are
        // part of the calibrated compute and server costs).
        sim_args.insert(sim_args.end(), {"--set", "sim.latency=0", "--set", "sim.bandwidth=1e15"});
      } else if (rate > 0) {
        sim_args.insert(
            sim_args.end(),
            {"--set", fmt::format("sim.bandwidth={}", rate * a.wire_efficiency), "--set",
             fmt::format("sim.server_bandwidth={}", srate * a.wire_efficiency)});
      }
      run_child(sim_args, dir);

      const nlohmann::json rs = read_json(dir + "/real/summary.json");
      const nlohmann::json ss = read_json(dir + "/sim/summary.json");
      RunFigures rf = run_figures(read_metrics_csv(dir + "/real/metrics.csv"), rs, a.target);
      RunFigures sf = run_figures(read_metrics_csv(dir + "/sim/metrics.csv"), ss, a.target);
      // The busiest link: the server's, or (gossip) the busiest worker's.
      const double link_rate = gossip ? rate : srate;
      if (a.real == "mpi" && link_rate > 0 && rs.contains("train_s"))
        rf.link_util = link_bytes(stats, gossip) / (link_rate * rs["train_s"].get<double>());
      if (ss.contains("network") && ss["network"].contains("busiest_util"))
        sf.link_util = ss["network"]["busiest_util"].get<double>();
      real.push_back(rf);
      sim.push_back(sf);
    }
    labels.push_back(policy);
    cells.push_back(compare_figures(real, sim));
  }
  const std::string md = fidelity_markdown(labels, cells);
  const std::string head = fmt::format(
      "{} ({} workers) against the simulator (sim.cores = {}, costs in costs.txt), {} round(s), "
      "target accuracy {}\n\n",
      a.real == "mpi" ? fmt::format("mpi over {} emulated hosts, links {}{}", a.hosts,
                                    a.rate.empty() ? "unlimited" : a.rate,
                                    srate_text != a.rate ? ", server " + srate_text : "")
                      : std::string("threads"),
      workers, cores, a.rounds, a.target);
  write_file_atomic(a.out + "/fidelity.md", head + md);
  nlohmann::json j = {{"real", a.real},
                      {"hosts", a.hosts},
                      {"rate", a.rate},
                      {"server_rate", srate_text},
                      {"workers", workers},
                      {"cores", cores},
                      {"rounds", a.rounds},
                      {"target", a.target},
                      {"wire_efficiency", a.wire_efficiency},
                      {"runs", fidelity_json(labels, cells)}};
  write_file_atomic(a.out + "/fidelity.json", j.dump(2) + "\n");
  std::printf("%s%s", head.c_str(), md.c_str());
  return 0;
}

}  // namespace hsgd::cli
