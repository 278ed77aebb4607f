#include "hsgd/runtime/gossip_row.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "hsgd/core/error.h"
#include "hsgd/runtime/row.h"

namespace hsgd {

LocalUpdate gossip_local_update(const Config& c) {
  LocalUpdate u;
  u.kind = c.optim.kind;
  u.momentum = static_cast<float>(c.optim.momentum);
  u.weight_decay = static_cast<float>(c.optim.weight_decay);
  return u;
}

WorkerAccuracy worker_accuracy(std::span<const double> acc) {
  HSGD_ASSERT(!acc.empty(), "worker_accuracy of no worker");
  WorkerAccuracy w{acc[0], 0.0, acc[0]};
  for (double a : acc) {
    w.min = std::min(w.min, a);
    w.max = std::max(w.max, a);
    w.mean += a;
  }
  w.mean /= static_cast<double>(acc.size());
  return w;
}

MetricsRow gossip_row(const Config& c, const GossipModels& models, Model& model,
                      std::span<float> params, const Dataset& test, int64_t train_size, double t,
                      GossipCounts& counts, double idle_frac, int live_workers) {
  WorkerAccuracy workers;
  if (c.gossip.eval_workers) {
    std::vector<double> acc;
    for (int i = 0; i < models.size(); ++i) {
      if (!models.live(i)) continue;  // left (membership)
      models.debiased(i, params);
      acc.push_back(model.evaluate(test).accuracy);
    }
    if (!acc.empty()) workers = worker_accuracy(acc);
  }
  models.average(params);
  return gossip_row(c, models.consensus(), model, test, train_size, t, counts, idle_frac, &workers,
                    live_workers);
}

MetricsRow gossip_row(const Config& c, const GossipModels::Consensus& cs, Model& model,
                      const Dataset& test, int64_t train_size, double t, GossipCounts& counts,
                      double idle_frac, const WorkerAccuracy* workers, int live_workers) {
  const EvalResult e = model.evaluate(test);
  MetricsRow r;
  r.time_s = t;
  r.updates = counts.steps;
  r.samples = counts.samples;
  r.epoch = static_cast<double>(counts.samples) / static_cast<double>(train_size);
  r.k = 1;
  r.train_loss =
      counts.loss_count ? counts.loss_sum / static_cast<double>(counts.loss_count) : std::nan("");
  counts.loss_sum = 0;
  counts.loss_count = 0;
  put_evaluation(e, &r);
  r.nonfinite = counts.nonfinite;
  counts.nonfinite = 0;
  r.idle_frac = idle_frac;
  r.live_workers = live_workers < 0 ? c.train.workers : live_workers;
  r.policy = c.policy_name;
  r.seed = c.train.seed;
  r.has_consensus = true;
  r.consensus = cs.xi;
  r.consensus_rel = cs.norm > 0 ? cs.xi / cs.norm : 0.0;
  if (c.gossip.eval_workers) {
    HSGD_ASSERT(workers != nullptr, "gossip.eval_workers needs the workers' accuracies");
    r.has_worker_eval = true;
    r.worker_acc_min = workers->min;
    r.worker_acc_mean = workers->mean;
    r.worker_acc_max = workers->max;
  }
  return r;
}

GossipResult gossip_result(const Config& c, const Topology& topo, const GossipCounts& counts,
                           int64_t rounds, int64_t global_averages, const std::vector<double>& sent,
                           const std::vector<double>& received, const std::vector<int64_t>& steps) {
  GossipResult out;
  out.on = true;
  out.topology = c.gossip.topology;
  out.weights = c.gossip.weights;
  out.spectral_gap = spectral_gap(topo);
  out.max_degree = topo.max_degree();
  out.steps = counts.steps;
  out.rounds = rounds;
  out.global_averages = global_averages;
  const size_t n = steps.size();
  double sum = 0, best = -1;
  for (size_t i = 0; i < n; ++i) {
    const double bytes = sent[i] + received[i];
    const double per = bytes / static_cast<double>(std::max<int64_t>(1, steps[i]));
    sum += per;
    if (bytes > best) {
      best = bytes;
      out.busiest = fmt::format("worker {}", i);
      out.busiest_bytes_per_step = per;
    }
  }
  out.bytes_per_node_step = n ? sum / static_cast<double>(n) : 0.0;
  return out;
}

Status gossip_status(const GossipCounts& counts, double t, double test_acc, int64_t train_size) {
  Status st;
  st.time_s = t;
  st.updates = counts.steps;
  st.samples = counts.samples;
  st.k = 1;
  st.test_acc = test_acc;
  st.train_loss = std::nan("");
  st.epochs = static_cast<double>(counts.samples) / static_cast<double>(train_size);
  return st;
}

}  // namespace hsgd
