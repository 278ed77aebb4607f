#include "hsgd/server/noise.h"

namespace hsgd {

void NoisePairs::observe(std::span<const float> g, int64_t batch, uint64_t version) {
  if (first_.empty() || first_batch_ != batch || first_.size() != g.size()) {
    // Opens a pair (a push of another batch size restarts it).
    first_.assign(g.begin(), g.end());
    first_batch_ = batch;
    first_sq_ = 0;
    for (float v : g) first_sq_ += static_cast<double>(v) * v;
    first_version_ = version;
    return;
  }
  double sq = 0, pair_sq = 0;  // |g_2|^2 and |g_1 + g_2|^2, in one pass
  for (size_t i = 0; i < g.size(); ++i) {
    const double v = g[i];
    const double s = static_cast<double>(first_[i]) + v;
    sq += v * v;
    pair_sq += s * s;
  }
  const double small = 0.5 * (first_sq_ + sq);  // |g_b|^2
  const double big = 0.25 * pair_sq;            // |g_2b|^2
  sums_.trace += 2.0 * static_cast<double>(batch) * (small - big);
  sums_.norm += 2.0 * big - small;
  sums_.pairs += 1;
  sums_.lag += static_cast<double>(version > first_version_ ? version - first_version_
                                                            : first_version_ - version);
  first_.clear();
}

void NoisePairs::save(StateWriter& w) const {
  w.put<double>(sums_.trace);
  w.put<double>(sums_.norm);
  w.put<int64_t>(sums_.pairs);
  w.put<double>(sums_.lag);
  w.put_vec(first_);
  w.put<int64_t>(first_batch_);
  w.put<double>(first_sq_);
  w.put<uint64_t>(first_version_);
}

void NoisePairs::load(StateReader& r, size_t params) {
  sums_.trace = r.get<double>();
  sums_.norm = r.get<double>();
  sums_.pairs = r.get<int64_t>();
  sums_.lag = r.get<double>();
  first_ = r.get_vec<float>();
  first_batch_ = r.get<int64_t>();
  first_sq_ = r.get<double>();
  first_version_ = r.get<uint64_t>();
  if (sums_.pairs < 0 || !(sums_.lag >= 0) || !std::isfinite(sums_.trace) ||
      !std::isfinite(sums_.norm) || !std::isfinite(first_sq_) ||
      (!first_.empty() && first_.size() != params)) {
    r.fail("corrupt (noise-scale state)");
  }
}

}  // namespace hsgd
