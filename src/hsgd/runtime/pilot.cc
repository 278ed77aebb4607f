#include "hsgd/runtime/pilot.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <thread>

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
  const PilotCandidate* chosen = top;
  for (const PilotCandidate& c : candidates) {
    const std::optional<int> k = constant_k(c.policy, workers);
    if (k && std::isfinite(c.ranked) && c.ranked >= top->ranked - margin &&
        *k > *constant_k(chosen->policy, workers)) {
      chosen = &c;
    }
  }
  return chosen->policy;
}

bool wants_pilot(const Config& c) {
  return c.policy.kind == "auto" && c.policy.auto_pilot > 0 && c.policy.auto_choice.empty();
}

namespace {

// What the pilot charges for a threads run's message: a copy of the
// parameters (bytes per second; a memcpy on these machines runs at 5 to 10
// GB/s).
constexpr double kMemoryBytesPerS = 5e9;

// The config of one candidate's pilot: the run's, on the simulator, for the
// pilot's share of the budget, with the candidate's policy and nothing
// written (no checkpoints).
Config candidate_config(const Config& run, const std::string& policy) {
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
  c.train.budget = run.train.budget * run.policy.auto_pilot;
  c.train.epochs = run.train.epochs * run.policy.auto_pilot;
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
  const std::vector<std::string> names = pilot_candidates(run);
  std::vector<Config> configs;
  for (const std::string& n : names) configs.push_back(candidate_config(run, n));
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
  for (size_t i = 0; i < names.size(); ++i) {
    if (run.stop && run.stop->requested()) {
      out.stopped = run.stop->reason();
      break;
    }
    std::optional<Config> with_costs;
    Job j = first;
    j.config = &configs[i];
    j = with_resolved_costs(j, costs, &with_costs);
    out.compute_time = j.config->sim.compute_time;
    Recorder rows{Recorder::InMemory{}};
    const RunResult r = sim.run(j, &rows, nullptr);
    if (StopRequest::is_request(r.stopped)) {
      out.stopped = r.stopped;
      break;
    }
    PilotCandidate cand;
    cand.policy = names[i];
    cand.stopped = r.stopped;
    cand.final_acc = r.last.test_acc;
    cand.interval_mean = r.stopped.empty() ? interval_mean_test_acc(rows.rows()) : std::nan("");
    cand.ranked = r.stopped.empty() ? late_mean_test_acc(rows.rows(), run.policy.auto_pilot_window)
                                    : std::nan("");
    out.candidates.push_back(cand);
    if (on_candidate) on_candidate(cand);
  }
  if (out.stopped.empty()) {
    out.chosen = pilot_choice(out.candidates, out.margin, run.train.workers);
  }
  out.wall_s = since(t0);
  return out;
}

}  // namespace hsgd
