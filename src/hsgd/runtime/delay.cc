#include "hsgd/runtime/delay.h"

#include <cmath>

namespace hsgd {

DelayModel::DelayModel(const StragglerConfig& c, int workers, uint64_t seed)
    : c_(c), stragglers_(static_cast<int>(std::lround(c.fraction * workers))) {
  rngs_.reserve(static_cast<size_t>(workers));
  for (int w = 0; w < workers; ++w) rngs_.emplace_back(seed, 2000 + static_cast<uint64_t>(w));
}

double DelayModel::draw(int w) {
  if (!is_straggler(w)) return 0.0;
  Rng& r = rngs_[static_cast<size_t>(w)];
  if (c_.delay == "halfnormal") return c_.sigma > 0 ? std::abs(r.normal()) * c_.sigma : 0.0;
  if (c_.delay == "exponential") return -std::log(1.0 - r.uniform()) * c_.scale;
  if (c_.delay == "lognormal") return c_.scale * std::exp(c_.sigma * r.normal());
  return 0.0;  // none
}

void DelayModel::save(StateWriter& w) const {
  std::vector<uint64_t> st;
  for (const Rng& r : rngs_) st.push_back(r.state());
  w.put_vec(st);
}

void DelayModel::load(StateReader& r) {
  const std::vector<uint64_t> st = r.get_vec<uint64_t>();
  for (size_t i = 0; i < st.size() && i < rngs_.size(); ++i) rngs_[i].set_state(st[i]);
}

void DelayModel::save_worker(int w, StateWriter& out) const {
  out.put(rngs_[static_cast<size_t>(w)].state());
}

void DelayModel::load_worker(int w, StateReader& r) {
  rngs_[static_cast<size_t>(w)].set_state(r.get<uint64_t>());
}

}  // namespace hsgd
