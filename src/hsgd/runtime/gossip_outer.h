// SlowMo (Wang et al. 2020, "SlowMo: improving communication-efficient
// distributed SGD with slow momentum") on the gossip policies' global
// average (gossip.global_every = H, issue 28). Every H steps the workers'
// models are averaged exactly (Gossip-PGA); with an outer optimizer that
// average is not taken as it is: the outer optimizer steps from the model
// of the previous global average (the anchor) along the pseudo-gradient
// anchor - average, and every worker restarts from the result:
//   d = anchor - x_bar;   anchor <- outer_step(anchor, d);   x_i <- anchor.
// With local.outer = "momentum", local.outer_momentum = beta and
// local.outer_lr = alpha this is SlowMo's u <- beta u + d / lr,
// x <- x - alpha lr u (the base lr cancels). It is the outer optimizer of
// local:H (DiLoCo), the same keys and the same optim/ code; sgd with lr 1
// (the default) is the plain average, and then no GossipOuter is made.
//
// The state is alike on every worker (every mpi rank holds a copy and
// computes the same step on the same average) and is saved in a
// checkpoint's "gossip_outer" blob.
#pragma once
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "hsgd/config/config.h"
#include "hsgd/core/state.h"
#include "hsgd/optim/optimizer.h"

namespace hsgd {

inline constexpr const char* kGossipOuterBlob = "gossip_outer";

class GossipOuter {
 public:
  // Null unless c is a gossip policy with gossip.global_every > 0 and an
  // outer optimizer other than sgd with local.outer_lr = 1. `init`: the
  // workers' common initial model (the first anchor).
  static std::unique_ptr<GossipOuter> make(const Config& c, std::span<const float> init);

  // `avg`: the global average of the workers' models; on return, the model
  // every worker restarts from.
  void apply(std::span<float> avg);

  std::span<const float> anchor() const { return anchor_; }
  void save(StateWriter& w) const;
  // Throws InputError (via the reader) when the blob holds another size.
  void load(StateReader& r);

 private:
  GossipOuter(const OptimizerOptions& o, std::span<const float> init);
  double lr_;
  std::unique_ptr<Optimizer> opt_;
  std::vector<float> anchor_, delta_;
};

// What GossipModels::global_average takes: `o`'s apply, or nothing.
inline std::function<void(std::span<float>)> outer_hook(GossipOuter* o) {
  if (!o) return {};
  return [o](std::span<float> avg) { o->apply(avg); };
}

}  // namespace hsgd
