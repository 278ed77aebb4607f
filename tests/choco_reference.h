// Synchronous CHOCO by hand (runtime/gossip_choco.h), shared by the runtime
// tests: every worker takes its local step (adapt-then-combine) and encodes
// its round, then every worker combines; a global average after every H-th
// step (gossip.global_every) resets the public copies. What a runtime whose
// workers advance in step must compute, bit for bit.
#pragma once
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "hsgd/config/config.h"
#include "hsgd/core/topology.h"
#include "hsgd/optim/optimizer.h"
#include "hsgd/policy/gossip.h"
#include "hsgd/runtime/gossip_choco.h"
#include "hsgd/runtime/gossip_row.h"
#include "hsgd/runtime/local_steps.h"
#include "hsgd/runtime/runtime.h"

namespace hsgd::testing {

// The n workers of a reference run done by hand: each one's sampler (the
// runtime's, make_sampler) and a model bound to its parameters and
// gradient.
struct ReferenceWorkers {
  std::vector<ShardSampler> samplers;
  std::vector<std::unique_ptr<Model>> nets;
  std::vector<std::vector<float>> params, grads;
  ReferenceWorkers(const Job& j, int n)
      : params(static_cast<size_t>(n), std::vector<float>(j.initial_params.size())), grads(params) {
    for (int i = 0; i < n; ++i) {
      samplers.push_back(make_sampler(j, i));
      nets.push_back(j.make_model());
      nets.back()->bind(params[static_cast<size_t>(i)], grads[static_cast<size_t>(i)]);
    }
  }
};

// The average model after `steps` steps of every worker (dpsgd with
// gossip.order = "atc": a round every step).
inline std::vector<float> reference_choco(const Config& c, const Job& j, int steps) {
  const int n = c.train.workers;
  const size_t np = j.initial_params.size();
  GossipModels models(n, j.initial_params, gossip_local_update(c));
  std::unique_ptr<ChocoGossip> choco =
      ChocoGossip::make(c, j.make_model()->param_shapes(), j.initial_params, n);
  const Topology topo(c.gossip.topology, c.gossip.weights, n, c.train.seed);
  ReferenceWorkers rw(j, n);
  auto& [samplers, nets, params, grads] = rw;
  Batch b;
  std::string bytes;
  std::vector<std::vector<float>> q(n, std::vector<float>(np));
  for (int s = 0; s < steps; ++s) {
    const float lr = static_cast<float>(lr_at(c.lr_schedule, c.optim.lr, s));
    for (int i = 0; i < n; ++i) {
      models.debiased(i, params[i]);
      sampled_gradient(*nets[i], samplers[i], c.train.batch, &b);
      models.local_step(i, grads[i], lr);
      choco->encode(i, s, models.x(i), &bytes, q[i]);
    }
    for (int i = 0; i < n; ++i) {
      const MixRow row = topo.mixing_row(i, s);
      std::vector<std::span<const float>> qs;
      for (const auto& [k, w] : row) qs.push_back(q[k]);
      choco->combine(i, row, qs, models.x(i));
    }
    const int h = c.gossip.global_every;
    if (h > 0 && (s + 1) % h == 0) {  // Gossip-PGA: the public copies become the average
      models.global_average();
      for (int i = 0; i < n; ++i) choco->reset(i, models.x(i));
    }
  }
  std::vector<float> avg(np);
  models.average(avg);
  return avg;
}

}  // namespace hsgd::testing
