// Which workers straggle and by how much: the per-gradient delay and the
// compute slow-down of StragglerConfig. Every worker draws from its own
// random stream (seed, 2000 + worker), so worker w's k-th delay is the same
// whatever the policy, the runtime or the other workers do.
#pragma once
#include <vector>

#include "hsgd/config/config.h"
#include "hsgd/core/rng.h"
#include "hsgd/core/state.h"

namespace hsgd {

// Thread-safety: draw(w) touches only worker w's stream; different workers
// may draw concurrently.
class DelayModel {
 public:
  DelayModel(const StragglerConfig& c, int workers, uint64_t seed);
  bool is_straggler(int w) const { return w < stragglers_; }
  // Compute-time factor of worker w (>= 1).
  double slowdown(int w) const { return is_straggler(w) ? c_.slowdown : 1.0; }
  // The extra delay of worker w's next gradient, in seconds (0 for others).
  double draw(int w);
  // For the runtimes on real time: the seconds worker w waits after a
  // gradient that took `compute_s`: its slow-down's share of the compute
  // time plus its delay draw (0 for workers that do not straggle).
  double extra_seconds(int w, double compute_s) {
    return is_straggler(w) ? (slowdown(w) - 1.0) * compute_s + draw(w) : 0.0;
  }

  // The random streams' positions. load() accepts a state saved for another
  // worker count: streams of workers both know are restored, others start
  // fresh (a resume with a different --workers).
  void save(StateWriter& w) const;
  void load(StateReader& r);
  // Worker w's stream alone (a gossip checkpoint's per-worker part).
  void save_worker(int w, StateWriter& out) const;
  void load_worker(int w, StateReader& r);

 private:
  StragglerConfig c_;
  int stragglers_;
  std::vector<Rng> rngs_;
};

}  // namespace hsgd
