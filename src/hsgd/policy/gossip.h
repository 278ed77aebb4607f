// Serverless gossip policies (issue 28): dpsgd, adpsgd, sgp, pdsgdm:P. No
// server: every worker keeps its own model x_i (and momentum buffer m_i,
// and under push-sum a scalar weight w_i) and averages with neighbours of a
// gossip topology (core/topology.h). This file holds the options and the
// per-worker state with its arithmetic; the runtimes
// (runtime/gossip_sim.h, runtime/gossip_threads.h, mpi/gossip.h,
// mpi/gossip_adpsgd.h) decide when each part runs and move the bytes.
//
// The policies, as hsgd runs them (docs/gossip.md):
//   dpsgd       synchronous gossip every step. gossip.order = "cta"
//               (combine-then-adapt, Lian et al. 2017's D-PSGD: the model is
//               sent at the start of a step while the gradient is computed,
//               x_i <- sum_j w_ij x_j - lr * m_i) or "atc" (adapt-then-combine:
//               x_i <- x_i - lr * m_i, then x_i <- sum_j w_ij x_j).
//   pdsgdm:P    local momentum SGD, gossip (adapt-then-combine) every P-th
//               step (Gao & Huang 2020, PD-SGDM). Momentum buffers stay local
//               and are not mixed: only the models are communicated, as in
//               the paper's algorithm.
//   sgp         push-sum (Assran et al. 2019): x_i <- x_i - lr * m_i, then
//               worker i keeps 1/(d+1) of (x_i, w_i) and sends as much to
//               each of its d out-peers; the gradient is taken at the
//               de-biased z_i = x_i / w_i. Directed, time-varying graphs
//               (onepeer-exp) are fine.
//   adpsgd      asynchronous, wait-free pairwise averaging (Lian et al.
//               2018): even-numbered workers are active, odd ones passive;
//               an active worker, its gradient computed, averages its model
//               with one random passive neighbour (x_i, x_j <- (x_i + x_j) / 2
//               at once) and then applies its gradient; a passive worker
//               applies its gradients as they come to whatever its model is.
// gossip.global_every = H > 0 (Gossip-PGA, Chen et al. 2021): after every
// H-th step every worker's model is replaced by the global average.
// Local updates: optim.kind sgd, momentum or nesterov with optim.momentum and
// optim.weight_decay, on each worker's own buffer; optim.lr with the lr
// schedule counted in the worker's own steps.
//
// Thread-safety: none; a runtime serialises the calls on one worker.
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "hsgd/core/rng.h"
#include "hsgd/core/state.h"
#include "hsgd/core/topology.h"

namespace hsgd {

struct GossipOptions {
  std::string topology = "ring";    // core/topology.h: topology_names()
  std::string weights = "uniform";  // uniform | metropolis
  std::string order = "cta";        // dpsgd: cta | atc
  int global_every = 0;             // Gossip-PGA: global average every H steps; 0 = never
  bool eval_workers = false;        // also evaluate every worker's own model (n evaluations)
  double consensus_lr = 1;          // CHOCO (compress.push on): gamma in (0, 1]
};

// Whether policy kind `kind` is one of the serverless gossip policies.
bool is_gossip_policy(const std::string& kind);

// The local optimizer every gossip worker runs on its own model.
struct LocalUpdate {
  std::string kind = "sgd";  // sgd | momentum | nesterov
  float momentum = 0;
  float weight_decay = 0;
};

class GossipModels {
 public:
  // n workers starting at `init`, push-sum weights 1, momenta 0.
  GossipModels(int n, std::span<const float> init, LocalUpdate update);

  int size() const { return n_; }
  size_t num_params() const { return np_; }
  std::span<float> x(int i) { return {x_.data() + off(i), np_}; }
  std::span<const float> x(int i) const { return {x_.data() + off(i), np_}; }
  double& weight(int i) { return w_[static_cast<size_t>(i)]; }
  double weight(int i) const { return w_[static_cast<size_t>(i)]; }

  // Worker i's de-biased parameters x_i / w_i (x_i when w_i = 1).
  void debiased(int i, std::span<float> out) const;
  // Worker i's local step with gradient g: m <- mu m + g (+ wd x), then
  // x <- x - lr m (nesterov: x <- x - lr (g + mu m)).
  void local_step(int i, std::span<const float> g, float lr);

  // Synchronous gossip round t of a doubly stochastic topology, for every
  // worker at once: x <- W(t) x.
  void mix(const Topology& topo, int64_t t);
  // Synchronous push-sum round t: every worker splits (x_i, w_i) over
  // itself and its out-peers.
  void push_sum(const Topology& topo, int64_t t);
  // x_i, x_j <- (x_i + x_j) / 2.
  void pair_average(int i, int j);
  // Every live x_i <- the average model (Gossip-PGA's global average): w_i
  // <- W / m and x_i <- x_bar w_i, W the total weight and m the live
  // workers (w_i = 1 when no worker ever left). A worker that left stays
  // out. `outer`, if given, first turns the average into the model every
  // worker restarts from (SlowMo: runtime/gossip_outer.h).
  void global_average(const std::function<void(std::span<float>)>& outer = {});

  // Membership (docs/gossip.md#membership). A worker that left holds
  // x = 0, m = 0, w = 0, and weight(i) == 0 marks it.
  bool live(int i) const { return weight(i) > 0; }
  // Worker i leaves: with heir >= 0 its (x_i, w_i) is added to the heir's
  // (push-sum: the total mass stays), then i holds nothing.
  void remove(int i, int heir);
  // Worker i joins from live worker `donor`, momentum zero. push_sum: the
  // donor's (x, w) is halved and i takes the other half (both keep the
  // same de-biased model, the total mass stays); otherwise i copies the
  // donor's x and w.
  void join_from(int i, int donor, bool push_sum);
  // x_i += share, w_i += weight (a push-sum share credited to i).
  void credit(int i, std::span<const float> share, double weight);

  // The average model x_bar = sum_i x_i / sum_i w_i (what is evaluated).
  void average(std::span<float> out) const;
  // Consensus distance Xi = sqrt(mean_i ||z_i - x_bar||^2) (z_i de-biased)
  // and ||x_bar||.
  struct Consensus {
    double xi = 0, norm = 0;
  };
  Consensus consensus() const;

  void save(StateWriter& w) const;
  // Throws InputError naming the blob when it holds another shape.
  void load(StateReader& r);
  // Worker i's x_i, m_i and w_i alone, in the layout save() gives a set of
  // one worker (the gossip checkpoints of threads and mpi hold one blob per
  // worker: runtime/gossip_checkpoint.h). load_worker throws InputError
  // for a negative weight, or weight 0 (a worker that left) with a model
  // or momentum that is not zero; whether the worker may be out is the
  // caller's to check.
  void save_worker(int i, StateWriter& w) const;
  void load_worker(int i, StateReader& r);

 private:
  size_t off(int i) const { return static_cast<size_t>(i) * np_; }
  int n_;
  size_t np_;
  LocalUpdate update_;
  std::vector<float> x_, m_;
  std::vector<double> w_;
  std::vector<float> scratch_;
};

// The gossip graph over the live workers (membership): the configured
// topology and weights rebuilt over the m live workers, relabelled 0..m-1
// in id order, so it is connected and doubly stochastic (push-sum: column
// stochastic) for any m. Every id in and out is a worker id (0..n-1); the
// workers that left have no peers. With every worker live it is the
// configured topology over n, id for id.
class GossipGraph {
 public:
  GossipGraph(std::string kind, std::string weights, int n, uint64_t seed);

  int size() const { return n_; }
  int live_count() const { return static_cast<int>(ids_.size()); }
  bool live(int i) const { return live_[static_cast<size_t>(i)] != 0; }
  const std::vector<char>& live_mask() const { return live_; }
  // Rebuilds the graph over the workers with live[i] != 0.
  void set_live(std::vector<char> live);
  // The graph over the live workers, in their relabelled ids.
  const Topology& local() const { return local_; }

  std::vector<int> neighbours(int i, int64_t t) const;
  std::vector<int> out_peers(int i, int64_t t) const;
  std::vector<int> in_peers(int i, int64_t t) const;
  MixRow mixing_row(int i, int64_t t) const;

  // The first live worker after i in id order, cyclically (i's successor
  // on the live ring, a neighbour on ring, exp, complete and onepeer-exp);
  // -1 when no other worker is live. It takes a leaver's push-sum mass and
  // gives a joiner its model.
  int successor(int i) const;

 private:
  std::vector<int> global(std::vector<int> local) const;
  std::string kind_, weights_;
  int n_;
  uint64_t seed_;
  std::vector<char> live_;
  std::vector<int> ids_;       // live workers, ascending
  std::vector<int> local_id_;  // worker -> its relabelled id, or -1
  Topology local_;
};

// adpsgd's pairing over the live graph: as adpsgd_peer below, with the
// live neighbours and active/passive by worker id parity.
int adpsgd_peer(const GossipGraph& g, int w, int64_t t, Rng& rng);

// adpsgd's pairing, the same on every runtime: an active (even-numbered)
// worker w picks one of its neighbours at round t uniformly with `rng`,
// among the passive (odd-numbered) ones, or among all when it has no
// passive one; -1 for a passive worker or one without neighbours.
int adpsgd_peer(const Topology& topo, int w, int64_t t, Rng& rng);

// Worker i's combination at gossip round t, the same on every runtime that
// moves the parts as messages (threads, mpi): `own` is its model (or, under
// push-sum, its kept share) before the round, `parts[k]` what in-peer
// from[k] sent (`from` = topo.in_peers(i, t), ascending). dpsgd and pdsgdm
// (push_sum false): x <- sum_j w_ij x_j over topo.mixing_row(i, t); sgp
// (push_sum true): x <- the sum of own and the parts in ascending worker
// order (the push-sum weights are the caller's to add). `x` may not alias
// `own` or a part.
void gossip_combine(const Topology& topo, int i, int64_t t, bool push_sum, std::span<float> x,
                    std::span<const float> own, const std::vector<int>& from,
                    const std::vector<std::span<const float>>& parts);
// The same over the live graph (membership), and with worker i's mixing
// row given (unused under push-sum).
void gossip_combine(const GossipGraph& g, int i, int64_t t, bool push_sum, std::span<float> x,
                    std::span<const float> own, const std::vector<int>& from,
                    const std::vector<std::span<const float>>& parts);
void gossip_combine(const MixRow& row, int i, bool push_sum, std::span<float> x,
                    std::span<const float> own, const std::vector<int>& from,
                    const std::vector<std::span<const float>>& parts);

// out = sum_k weights[k] * sources[k], summed in the order given (so the
// same inputs give the same bits).
void weighted_sum(std::span<float> out, const std::vector<double>& weights,
                  const std::vector<std::span<const float>>& sources);

}  // namespace hsgd
