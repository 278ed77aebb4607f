// auto with a pilot (issue 32; policy.auto_pilot, docs/auto.md#auto-with-a-pilot).
//
// Before training, every K candidate runs on the simulator for a share f of
// the budget with the run's own config and seed; the run then trains, on its
// own runtime, with the candidate whose interval-mean test accuracy over
// the pilot was best (ties: the earlier candidate). The choice is written to
// the config (policy.auto_choice), so config.toml reproduces the run, and a
// resume, without a pilot. With policy.auto_pilot_window < 1 the candidates
// are ranked by their interval mean over the last share of their pilot.
//
// With policy.auto_pilot_keep = m > 0, a second round (successive halving):
// the best m candidates of the first round continue their own runs, each
// resumed from its checkpoint at f (a sim resume is exact), to 2f of the
// budget (at most the whole), and the choice is made among them the same
// way on [0, 2f].
//
// On the sim runtime a candidate's pilot is the first f of the budget of
// that candidate's own run (the same events, the rows up to f x budget), so
// choosing among the pilots is choosing among the runs' beginnings. On
// threads and mpi the simulator stands in for the cluster: its compute time
// is calibrated on this machine once for every candidate, and on threads
// its workers share the machine's cores (sim.cores) as the threads do.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "hsgd/config/config.h"
#include "hsgd/runtime/runtime.h"

namespace hsgd {

// The pilot's candidates for `run` (policy.auto_candidates). "k": sync,
// async, then kasync:K for K = 2, 4, 8 below train.workers and K = 16 from 20
// workers up, the K policies of the random families (scripts/
// random-families.py). "k+hybrid": those, then hybrid (with the run's own
// schedule keys: policy.schedule, k0, step, ramp, clock) and, with server
// momentum (optim.kind momentum or nesterov, not row-sparse), async with the
// momentum correction (kAsyncCorrected): every fixed policy of the random
// families but ssp:3. "k+rule": the K policies, then auto's own rule
// (kAutoRule: policy.auto_rule, as auto runs without a pilot). At most 8
// runs.
std::vector<std::string> pilot_candidates(const Config& run);

// Whether a run of `c` runs a pilot first: policy auto, policy.auto_pilot > 0
// and no policy.auto_choice yet.
bool wants_pilot(const Config& c);

struct PilotCandidate {
  std::string policy;
  double interval_mean = 0;  // test accuracy over the pilot; NaN when it stopped
  // What ranks it: the interval mean over the last policy.auto_pilot_window
  // of its pilot (interval_mean at 1); NaN when it stopped.
  double ranked = 0;
  double final_acc = 0;  // at its end
  std::string stopped;   // why it ended early ("" = ran its share)
  int round = 1;         // 2: its continuation to the second round's share
};

struct PilotResult {
  double fraction = 0;
  double window = 1;                       // policy.auto_pilot_window
  double margin = 0;                       // policy.auto_pilot_margin
  int keep = 0;                            // policy.auto_pilot_keep (0: one round)
  double second_fraction = 0;              // the second round's share (0: none ran)
  double budget = 0, epochs = 0;           // each candidate's (train.budget, train.epochs)
  double compute_time = 0;                 // the simulator's sim.compute_time
  std::vector<PilotCandidate> candidates;  // the first round, every candidate
  std::vector<PilotCandidate> second;      // the second round's, in candidate order
  std::string chosen;                      // "" when a stop request ended the pilot
  // A stop request (Config::stop) made during the pilot: its line. No
  // candidate after it ran, and nothing is chosen.
  std::string stopped;
  double wall_s = 0;
};

// The constant K a candidate runs on `workers` workers: sync, the workers;
// async, 1; kasync:K, K; none for the others (hybrid, the corrected async,
// the rule).
std::optional<int> constant_k(const std::string& candidate, int workers);

// The candidate a pilot chooses: the best `ranked` figure (ties: the
// earlier candidate); sync when none is finite (every candidate stopped).
// With a margin (policy.auto_pilot_margin) > 0 and the best figure a
// constant-K candidate's: the largest K among the constant-K candidates
// within the margin of it (one exactly the margin below counts, whatever
// the rounding: 1e-9 of tolerance). A candidate without a constant K is kept when
// its figure is the best.
std::string pilot_choice(const std::vector<PilotCandidate>& candidates, double margin = 0,
                         int workers = 1);

// The candidates the second round continues: the best `keep` of the first
// round by their ranked figure (ties: the earlier; none that stopped), in
// candidate order.
std::vector<std::string> pilot_survivors(const std::vector<PilotCandidate>& first, int keep);

// Runs the pilot of `job` (wants_pilot(*job.config) must hold) on the
// simulator, candidate after candidate (then the second round's, if any).
// `on_candidate` (may be empty) is called after each. Throws InputError for
// a config the simulator refuses, or a temporary directory for the second
// round's checkpoints that cannot be written.
PilotResult run_pilot(const Job& job,
                      const std::function<void(const PilotCandidate&)>& on_candidate = {});

}  // namespace hsgd
