#include "hsgd/server/noise.h"

namespace hsgd {

void NoisePairs::observe(std::span<const float> g, int64_t batch) {
  double sq = 0;
  for (float v : g) sq += static_cast<double>(v) * v;
  if (first_.empty() || first_batch_ != batch || first_.size() != g.size()) {
    first_.assign(g.begin(), g.end());  // opens a pair (a batch of another size restarts it)
    first_batch_ = batch;
    first_sq_ = sq;
    return;
  }
  double pair_sq = 0;  // |g_1 + g_2|^2
  for (size_t i = 0; i < g.size(); ++i) {
    const double s = static_cast<double>(first_[i]) + g[i];
    pair_sq += s * s;
  }
  const double small = 0.5 * (first_sq_ + sq);  // |g_b|^2
  const double big = 0.25 * pair_sq;            // |g_2b|^2
  sums_.trace += 2.0 * static_cast<double>(batch) * (small - big);
  sums_.norm += 2.0 * big - small;
  sums_.pairs += 1;
  first_.clear();
}

void NoisePairs::save(StateWriter& w) const {
  w.put<double>(sums_.trace);
  w.put<double>(sums_.norm);
  w.put<int64_t>(sums_.pairs);
  w.put_vec(first_);
  w.put<int64_t>(first_batch_);
  w.put<double>(first_sq_);
}

void NoisePairs::load(StateReader& r, size_t params) {
  sums_.trace = r.get<double>();
  sums_.norm = r.get<double>();
  sums_.pairs = r.get<int64_t>();
  first_ = r.get_vec<float>();
  first_batch_ = r.get<int64_t>();
  first_sq_ = r.get<double>();
  if (sums_.pairs < 0 || (!first_.empty() && first_.size() != params)) {
    r.fail("corrupt (noise-scale state)");
  }
}

}  // namespace hsgd
