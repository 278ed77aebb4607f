// The gradient noise scale of the pushed gradients (McCandlish et al. 2018,
// "An empirical model of large-batch training", appendix A): the server
// pairs consecutive finite pushes of equal batch size b (push 1 with 2, 3
// with 4, ...) and estimates, from each pair's small-batch and two-batch
// squared norms,
//   |G|^2 ~ 2 |g_2b|^2 - |g_b|^2        and        tr(S) ~ 2b (|g_b|^2 - |g_2b|^2),
// |g_b|^2 the mean of the two pushes' squared norms and |g_2b|^2 that of
// their mean, S the covariance of one sample's gradient. Each is unbiased
// for gradients at one point; the noise scale B_simple = tr(S) / |G|^2
// (in samples) is the ratio of their sums over an interval. Pushes made
// from different parameter versions (asynchrony) differ by more than
// sampling noise, which reads as a larger tr(S): the lag, the versions
// between a pair's two pushes, says how far apart they were (0: the same
// parameters, the estimator's assumption). Sums over the parameters, so
// the shards of a sharded server add their partial sums.
#pragma once
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "hsgd/core/state.h"

namespace hsgd {

struct NoiseSums {
  double trace = 0;  // sum over pairs of the tr(S) estimates
  double norm = 0;   // sum over pairs of the |G|^2 estimates
  int64_t pairs = 0;
  double lag = 0;  // sum over pairs of the versions between the two pushes
  // Another shard's part of the same pairs: its trace and norm add (its
  // pairs and lag are these).
  void add_part(const NoiseSums& o) {
    trace += o.trace;
    norm += o.norm;
  }
  // B_simple = tr(S) / |G|^2, NaN without a pair or with a |G|^2 estimate
  // that is not positive (noise dominates the interval).
  double scale() const {
    return pairs > 0 && norm > 0 ? trace / norm : std::numeric_limits<double>::quiet_NaN();
  }
  double mean_trace() const {
    return pairs > 0 ? trace / static_cast<double>(pairs)
                     : std::numeric_limits<double>::quiet_NaN();
  }
  double mean_lag() const {
    return pairs > 0 ? lag / static_cast<double>(pairs) : std::numeric_limits<double>::quiet_NaN();
  }
  double mean_norm() const {
    return pairs > 0 ? norm / static_cast<double>(pairs) : std::numeric_limits<double>::quiet_NaN();
  }
};

// The pairing: observe() every finite push (its gradient as pushed, before
// the staleness mitigations, and the version it was computed from) in
// event order.
class NoisePairs {
 public:
  void observe(std::span<const float> g, int64_t batch, uint64_t version);
  // The sums since the last take(); the pairing goes on across take().
  NoiseSums take() {
    NoiseSums s = sums_;
    sums_ = {};
    return s;
  }
  // Checkpoint state: the sums, and the first push of an open pair. load()
  // takes a push of `params` floats (InputError naming the blob otherwise).
  void save(StateWriter& w) const;
  void load(StateReader& r, size_t params);

 private:
  NoiseSums sums_;
  std::vector<float> first_;  // empty: no open pair
  int64_t first_batch_ = 0;
  double first_sq_ = 0;
  uint64_t first_version_ = 0;
};

}  // namespace hsgd
