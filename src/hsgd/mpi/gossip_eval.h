// What every gossip policy on mpi shares at a row and at the end
// (mpi/gossip.h, mpi/gossip_adpsgd.h): the collective evaluation of the
// average model and the gather of every rank's counters to rank 0.
//
// A row (GossipEvaluator::evaluate, collective): an all-reduce of the
// models, the push-sum weights, the idle seconds and the caller's extra
// figures gives every rank the average model x_bar = sum_i x_i / sum_i w_i;
// a reduce of ||x_i / w_i - x_bar||^2 gives rank 0 the consensus distance.
// Rank 0 evaluates x_bar, writes the row (runtime/gossip_row.h) and checks
// it for divergence; its verdict is broadcast. With gossip.eval_workers
// every rank also evaluates its own model and rank 0 reduces the lowest,
// mean and highest accuracy.
//
// Every wait goes through the caller's Wait: the lockstep policies wait
// with mpi.timeout (wait_all); adpsgd answers its peers meanwhile.
#pragma once
#include <mpi.h>

#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "hsgd/core/topology.h"
#include "hsgd/policy/gossip.h"
#include "hsgd/runtime/gossip_checkpoint.h"
#include "hsgd/runtime/run_control.h"
#include "hsgd/runtime/runtime.h"

namespace hsgd::mpi {

// Completes every request of `reqs` or throws MpiError naming what() after
// its deadline.
using GossipWait =
    std::function<void(std::span<MPI_Request> reqs, const std::function<std::string()>& what)>;

// This rank's place in `comm`.
int comm_rank(MPI_Comm comm);

// One rank's evaluation state: rank 0 (and with gossip.eval_workers every
// rank) holds a model to evaluate and the test set. Not thread-safe: the
// rank's MPI thread calls it.
class GossipEvaluator {
 public:
  // Rank 0 needs a recorder and an observer.
  GossipEvaluator(const Job& job, MPI_Comm comm, int rank, Recorder* recorder, Observer* observer);

  // Collective, at training time t: this rank's model (x, w) and idle
  // seconds. `extras` are summed over the ranks in place along with the
  // models, and `fold` (every rank, may be empty) sees the sums before rank
  // 0 builds the row from `run` (its counts, the last row's time and idle).
  // Returns whether the run diverged (the same on every rank); rank 0's
  // `stops` then holds the line. `live`: the ranks still in the run (-1:
  // every rank). A rank that left (models.live(0) false: weight 0, model 0)
  // enters with a zero contribution: the consensus distance, the idle
  // fraction, the workers' accuracies and the row's live_workers count only
  // the live ranks.
  bool evaluate(double t, const GossipModels& models, double idle, std::span<double> extras,
                const std::function<void(std::span<const double>)>& fold, GossipRunState& run,
                RunStops& stops, const GossipWait& wait, int live = -1);

  // Rank 0: the average model of the last evaluation.
  const std::vector<float>& average() const { return params_; }

  // Collective: every rank's bytes, steps and rounds to rank 0, which fills
  // result->worker_pushes and result->gossip (summary.json's gossip).
  void gather_result(double sent, double received, int64_t steps, int64_t rounds,
                     const Topology& topo, const GossipRunState& run, RunResult* result,
                     const GossipWait& wait);

  // After gather_result: the stop line on every rank; on rank 0 the last
  // row, the average, the training times and the gradients; the other
  // ranks' results are not primary.
  void finish_result(const RunStops& stops, const GossipRunState& run, double train_s,
                     double start_s, double wall_s, RunResult* result) const;

 private:
  const Job& job_;
  const Config& c_;
  MPI_Comm comm_;
  int rank_ = 0, n_ = 1;
  Recorder* recorder_;
  Observer* observer_;
  Dataset test_;
  std::unique_ptr<Model> model_;
  std::vector<float> params_, grads_;
};

// ---- checkpoints (runtime/gossip_checkpoint.h's layout, as on threads)

// Collective, every rank between its steps: rank 0 gathers every rank's
// part, `parts()` (its gossip_worker-W bytes, then with `choco` its
// gossip_choco-W bytes), in rank order into a new checkpoint of
// job.checkpoints (rank 0 writes them as they come). Returns it on rank 0
// (nullopt when rank 0 has no store, and on the other ranks); the caller
// adds the run's blobs and commits it.
std::optional<PendingCheckpoint> gather_gossip_parts(
    const Job& job, MPI_Comm comm, int rank, int n, double timeout, bool choco,
    const std::function<std::vector<std::string>()>& parts);
// The same with the blob names given: parts()[k] of rank W is blob
// names[k](W).
std::optional<PendingCheckpoint> gather_gossip_parts(
    const Job& job, MPI_Comm comm, int rank, int n, double timeout,
    const std::vector<std::string (*)(int)>& names,
    const std::function<std::vector<std::string>()>& parts);

// "gossip_membership-W": rank W's part of the live set (mpi/gossip.cc),
// written only once a rank has left.
std::string gossip_membership_blob(int w);

// What a rank resumes from: the cut's training time and its blobs (those
// of the run alike on every rank).
struct ResumedGossipPart {
  double start_s = 0;
  std::string worker, run, outer, run_state, choco;  // outer, choco: empty when off
  std::string membership;  // gossip_membership-W, empty when the checkpoint has none
};

// Collective. Rank 0 (job.resume) checks its checkpoint
// (check_gossip_resume) and sends every rank its part with the run's.
// nullopt for a fresh run (no rank has a checkpoint). Throws InputError on
// every rank when rank 0 refuses the checkpoint, before anything is
// written.
std::optional<ResumedGossipPart> receive_gossip_resume(const Job& job, MPI_Comm comm, int rank,
                                                       int n, double timeout, bool outer,
                                                       bool choco);

}  // namespace hsgd::mpi
