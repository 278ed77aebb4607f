#include "hsgd/runtime/gossip_outer.h"

#include <algorithm>

#include "hsgd/core/error.h"
#include "hsgd/policy/gossip.h"

namespace hsgd {

std::unique_ptr<GossipOuter> GossipOuter::make(const Config& c, std::span<const float> init) {
  if (!is_gossip_policy(c.policy.kind) || c.gossip.global_every <= 0) return nullptr;
  const LocalOptions& l = c.policy.local;
  if (l.outer == "sgd" && l.outer_lr == 1.0) return nullptr;
  OptimizerOptions o;
  o.kind = l.outer;
  o.lr = l.outer_lr;
  o.momentum = l.outer_momentum;
  o.weight_decay = 0;
  return std::unique_ptr<GossipOuter>(new GossipOuter(o, init));
}

GossipOuter::GossipOuter(const OptimizerOptions& o, std::span<const float> init)
    : lr_(o.lr),
      opt_(make_optimizer(o, init.size())),
      anchor_(init.begin(), init.end()),
      delta_(init.size()) {}

void GossipOuter::apply(std::span<float> avg) {
  HSGD_ASSERT(avg.size() == anchor_.size(), "GossipOuter::apply: wrong size");
  for (size_t p = 0; p < avg.size(); ++p) delta_[p] = anchor_[p] - avg[p];
  opt_->step(anchor_, delta_, lr_);
  std::copy(anchor_.begin(), anchor_.end(), avg.begin());
}

void GossipOuter::save(StateWriter& w) const {
  w.put_vec(anchor_);
  opt_->save(w);
}

void GossipOuter::load(StateReader& r) {
  std::vector<float> a = r.get_vec<float>();
  if (a.size() != anchor_.size()) r.fail("corrupt (the SlowMo anchor has another size)");
  anchor_ = std::move(a);
  opt_->load(r);
}

}  // namespace hsgd
