#include "hsgd/runtime/pilot.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <memory>
#include <optional>
#include <thread>

#include "hsgd/checkpoint/checkpoint.h"
#include "hsgd/core/error.h"
#include "hsgd/core/stop.h"
#include "hsgd/metrics/fidelity.h"
#include "hsgd/runtime/clock.h"
#include "hsgd/runtime/sim_runtime.h"

namespace hsgd {

std::vector<std::string> pilot_candidates(const Config& run) {
  const int workers = run.train.workers;
  std::vector<std::string> out = {"sync", "async"};
  for (int k : {2, 4, 8, 16}) {
    if (k < workers && (k < 16 || workers >= 20)) out.push_back("kasync:" + std::to_string(k));
  }
  if (pilot_runs_hybrid(run.policy)) {
    out.push_back("hybrid");
    // The correction lowers the server's momentum: only with one, and not
    // on row-sparse models (server/sparse.cc refuses it there).
    const bool momentum = run.optim.kind == "momentum" || run.optim.kind == "nesterov";
    if (momentum && !run.model.sparse) out.push_back(kAsyncCorrected);
  }
  if (pilot_runs_rule(run.policy)) out.push_back(kAutoRule);
  return out;
}

std::optional<int> constant_k(const std::string& candidate, int workers) {
  if (candidate == "sync") return workers;
  if (candidate == "async") return 1;
  if (candidate.starts_with("kasync:")) return std::stoi(candidate.substr(7));
  return std::nullopt;
}

std::string pilot_choice(const std::vector<PilotCandidate>& candidates, double margin,
                         int workers) {
  const PilotCandidate* top = nullptr;    // the best figure (ties: the earlier)
  const PilotCandidate* top_k = nullptr;  // the best among the constant-K candidates
  for (const PilotCandidate& c : candidates) {
    if (!std::isfinite(c.ranked)) continue;
    if (!top || c.ranked > top->ranked) top = &c;
    if (constant_k(c.policy, workers) && (!top_k || c.ranked > top_k->ranked)) top_k = &c;
  }
  if (!top) return "sync";  // no finite figure: the safest
  if (margin <= 0 || top != top_k) return top->policy;
  // Figures within the margin are not told apart: the largest K among them.
  // "Within" includes a figure exactly the margin below the best: test
  // accuracies sit on a grid of 1 / eval_samples, so such ties happen, and
  // the last bits of rounding in the figures must not decide them (as
  // scripts/pilot-study.py, which recomputes them from metrics.csv, agrees).
  constexpr double kTie = 1e-9;
  const PilotCandidate* chosen = top;
  for (const PilotCandidate& c : candidates) {
    const std::optional<int> k = constant_k(c.policy, workers);
    if (k && std::isfinite(c.ranked) && c.ranked >= top->ranked - margin - kTie &&
        *k > *constant_k(chosen->policy, workers)) {
      chosen = &c;
    }
  }
  return chosen->policy;
}

std::vector<std::string> pilot_survivors(const std::vector<PilotCandidate>& first, int keep) {
  std::vector<size_t> order;
  for (size_t i = 0; i < first.size(); ++i) {
    if (std::isfinite(first[i].ranked)) order.push_back(i);
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return first[a].ranked > first[b].ranked; });
  if (order.size() > static_cast<size_t>(std::max(keep, 0))) order.resize(keep);
  std::sort(order.begin(), order.end());
  std::vector<std::string> out;
  for (size_t i : order) out.push_back(first[i].policy);
  return out;
}

bool wants_pilot(const Config& c) {
  return c.policy.kind == "auto" && c.policy.auto_pilot > 0 && c.policy.auto_choice.empty();
}

namespace {

// What the pilot charges for a threads run's message: a copy of the
// parameters (bytes per second; a memcpy on these machines runs at 5 to 10
// GB/s).
constexpr double kMemoryBytesPerS = 5e9;

// The config of one candidate's pilot: the run's, on the simulator, for
// `share` of the budget, with the candidate's policy and no periodic
// checkpoints (a second round's first-round checkpoint comes from the store
// run_pilot passes, into its scratch directory, never the run's own).
Config candidate_config(const Config& run, const std::string& policy, double share) {
  Config c = run;
  if (policy != kAutoRule) {  // the rule is the run's own auto, as without a pilot
    c.policy_name = policy;
    const bool corrected = policy == kAsyncCorrected;
    const PolicyName p = parse_policy_name(corrected ? "async" : policy, "policy.name");
    c.policy.kind = p.kind;
    c.policy.k = p.number.value_or(0);
    if (corrected) c.staleness.momentum_correction = true;
  }
  c.policy.auto_pilot = 0;
  c.policy.auto_choice.clear();
  c.train.budget = run.train.budget * share;
  c.train.epochs = run.train.epochs * share;
  c.train.checkpoint_every = 0;
  if (run.train.runtime != "sim") {
    // The simulator stands in for the cluster: costs measured on this
    // machine (the sim.* costs are not the run's off sim).
    c.train.runtime = "sim";
    c.sim.compute_time = 0;
    c.sim.server_ns_per_param = -1;
    c.compress.sim_ns_per_param = -1;
    if (run.train.runtime == "threads") {
      // Threads share memory and the machine's cores: a message is a copy at
      // memory speed, and the workers' compute shares the cores.
      c.sim.network = "independent";
      c.sim.latency = 0;
      c.sim.bandwidth = kMemoryBytesPerS;
      c.sim.server_bandwidth = 0;
      const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
      c.sim.cores = std::min(cores, run.train.workers);
    }
  }
  validate(c);
  return c;
}

// A temporary directory for the second round's checkpoints (under TMPDIR),
// removed with everything in it when this goes.
class ScratchDir {
 public:
  ScratchDir() {
    static std::atomic<int> serial{0};
    std::error_code ec;
    const std::filesystem::path base = std::filesystem::temp_directory_path(ec);
    path_ = (ec ? std::filesystem::path("/tmp") : base) /
            ("hsgd-pilot-" + std::to_string(::getpid()) + "-" + std::to_string(serial++));
    std::filesystem::remove_all(path_, ec);
    if (!std::filesystem::create_directories(path_, ec) || ec) {
      throw InputError("auto pilot: cannot make a temporary directory " + path_.string() +
                       " for its second round (set TMPDIR): " + ec.message());
    }
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  std::string sub(size_t i) const { return (path_ / std::to_string(i)).string(); }

 private:
  std::filesystem::path path_;
};

// A candidate's figures from its rows and how it ended.
PilotCandidate figures(const std::string& policy, const RunResult& r,
                       const std::vector<MetricsRow>& rows, double window, int round) {
  PilotCandidate cand;
  cand.policy = policy;
  cand.round = round;
  cand.stopped = r.stopped;
  cand.final_acc = r.last.test_acc;
  cand.interval_mean = r.stopped.empty() ? interval_mean_test_acc(rows) : std::nan("");
  cand.ranked = r.stopped.empty() ? late_mean_test_acc(rows, window) : std::nan("");
  return cand;
}

}  // namespace

PilotResult run_pilot(const Job& job,
                      const std::function<void(const PilotCandidate&)>& on_candidate) {
  const Config& run = *job.config;
  HSGD_ASSERT(wants_pilot(run), "run_pilot: the config asks for no pilot");
  const auto t0 = SteadyClock::now();
  PilotResult out;
  out.fraction = run.policy.auto_pilot;
  out.window = run.policy.auto_pilot_window;
  out.margin = run.policy.auto_pilot_margin;
  out.keep = run.policy.auto_pilot_keep;
  const std::vector<std::string> names = pilot_candidates(run);
  std::vector<Config> configs;
  for (const std::string& n : names) configs.push_back(candidate_config(run, n, out.fraction));
  out.budget = configs.front().train.budget;
  out.epochs = configs.front().train.epochs;
  // Costs left to calibration are measured once, for every candidate alike.
  Job first = job;
  first.config = &configs.front();
  first.checkpoints = nullptr;
  first.resume = nullptr;
  first.open_outputs = nullptr;
  SimRuntime sim;
  const std::vector<std::pair<std::string, std::string>> costs = sim.resolve(first);
  // A second round continues each of its candidates from a checkpoint at
  // the first round's end: the first round writes one for every candidate.
  const bool two_rounds = out.keep > 0 && out.fraction < 1;
  std::optional<ScratchDir> scratch;
  if (two_rounds) scratch.emplace();
  std::vector<std::optional<Config>> resolved(names.size());
  std::vector<std::unique_ptr<Recorder>> recorders(names.size());
  auto stop_requested = [&] {
    if (run.stop && run.stop->requested()) {
      out.stopped = run.stop->reason();
      return true;
    }
    return false;
  };
  for (size_t i = 0; i < names.size(); ++i) {
    if (stop_requested()) break;
    Job j = first;
    j.config = &configs[i];
    j = with_resolved_costs(j, costs, &resolved[i]);
    out.compute_time = j.config->sim.compute_time;
    recorders[i] = std::make_unique<Recorder>(Recorder::InMemory{});
    std::optional<CheckpointStore> store;
    if (two_rounds) {
      store.emplace(scratch->sub(i), 1);
      j.checkpoints = &*store;
      j.identity = CheckpointIdentity{config_hash(*j.config), "pilot", job_params(j)};
    }
    const RunResult r = sim.run(j, recorders[i].get(), nullptr);
    if (StopRequest::is_request(r.stopped)) {
      out.stopped = r.stopped;
      break;
    }
    out.candidates.push_back(figures(names[i], r, recorders[i]->rows(), out.window, 1));
    if (on_candidate) on_candidate(out.candidates.back());
  }
  std::vector<PilotCandidate> ranked = out.candidates;
  if (two_rounds && out.stopped.empty()) {
    // The second round: the best `keep` continue to twice the share.
    out.second_fraction = std::min(1.0, 2 * out.fraction);
    for (const std::string& name : pilot_survivors(out.candidates, out.keep)) {
      if (stop_requested()) break;
      const size_t i =
          static_cast<size_t>(std::find(names.begin(), names.end(), name) - names.begin());
      Config longer = resolved[i] ? *resolved[i] : configs[i];
      longer.train.budget = run.train.budget * out.second_fraction;
      longer.train.epochs = run.train.epochs * out.second_fraction;
      Job j = first;
      j.config = &longer;
      j.identity = CheckpointIdentity{config_hash(longer), "pilot", job_params(j)};
      const Checkpoint ck = CheckpointStore::load_latest(scratch->sub(i), j.identity);
      j.resume = &ck;
      const RunResult r = sim.run(j, recorders[i].get(), nullptr);
      if (StopRequest::is_request(r.stopped)) {
        out.stopped = r.stopped;
        break;
      }
      out.second.push_back(figures(name, r, recorders[i]->rows(), out.window, 2));
      if (on_candidate) on_candidate(out.second.back());
    }
    ranked = out.second;
  }
  if (out.stopped.empty()) {
    out.chosen = pilot_choice(ranked, out.margin, run.train.workers);
  }
  out.wall_s = since(t0);
  return out;
}

}  // namespace hsgd
