// What the gossip runtimes (gossip_sim.h, gossip_threads.h) share: the
// workers' local update from the config, a metrics row of the average
// model, and summary.json's "gossip" object. Each rule exists here once.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "hsgd/config/config.h"
#include "hsgd/core/topology.h"
#include "hsgd/data/dataset.h"
#include "hsgd/metrics/recorder.h"
#include "hsgd/model/model.h"
#include "hsgd/policy/gossip.h"
#include "hsgd/runtime/runtime.h"

namespace hsgd {

// optim.kind, optim.momentum and optim.weight_decay, run by every worker on
// its own model.
LocalUpdate gossip_local_update(const Config& c);

// Counts since the start (steps, samples) or since the previous row (the
// losses, nonfinite); a row resets the latter.
struct GossipCounts {
  int64_t steps = 0;    // local steps, every worker's
  int64_t samples = 0;  // samples behind the applied steps
  double loss_sum = 0;
  int64_t loss_count = 0;
  int64_t nonfinite = 0;
};

// gossip.eval_workers: the test accuracy of the workers' own models, the
// lowest, the mean and the highest (the row's worker_acc_* columns).
struct WorkerAccuracy {
  double min = 0, mean = 0, max = 0;
};
WorkerAccuracy worker_accuracy(std::span<const double> acc);

// The row at training time t: `model` (bound to `params`) evaluates the
// average model on `test`; the consensus columns (over the live workers);
// k = 1; `live_workers` live (-1: every worker). With gossip.eval_workers,
// first every live worker's de-biased model in turn (`params` holds the
// average model afterwards). Resets the per-row counts. `idle_frac` is the
// runtime's.
MetricsRow gossip_row(const Config& c, const GossipModels& models, Model& model,
                      std::span<float> params, const Dataset& test, int64_t train_size, double t,
                      GossipCounts& counts, double idle_frac, int live_workers = -1);
// The same row from figures the runtime computed itself (mpi: by reductions
// over the ranks): `model` is bound to parameters that already hold the
// average model, `cs` is its consensus distance, `workers` the workers' own
// accuracies (required with gossip.eval_workers, else ignored).
MetricsRow gossip_row(const Config& c, const GossipModels::Consensus& cs, Model& model,
                      const Dataset& test, int64_t train_size, double t, GossipCounts& counts,
                      double idle_frac, const WorkerAccuracy* workers = nullptr,
                      int live_workers = -1);

// A status line at training time t: the counts, k = 1, the last
// evaluation's accuracy, no training loss.
Status gossip_status(const GossipCounts& counts, double t, double test_acc, int64_t train_size);

// summary.json "gossip": `sent`/`received` bytes per worker, `steps` each
// worker's local steps.
GossipResult gossip_result(const Config& c, const Topology& topo, const GossipCounts& counts,
                           int64_t rounds, int64_t global_averages, const std::vector<double>& sent,
                           const std::vector<double>& received, const std::vector<int64_t>& steps);

}  // namespace hsgd
