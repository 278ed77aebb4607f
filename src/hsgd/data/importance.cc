// ImportanceTable: scores, the mixed distribution, draws and weights.
#include "hsgd/data/importance.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "hsgd/core/error.h"

namespace hsgd {

void validate(const SamplingOptions& o) {
  if (o.kind != "uniform" && o.kind != "loss") {
    throw InputError("sampling.kind = '" + o.kind + "': expected uniform or loss");
  }
  if (!(o.uniform_mix > 0 && o.uniform_mix <= 1)) {
    throw InputError(fmt::format(
        "sampling.uniform_mix = {}: expected in (0, 1] (a positive share of uniform keeps every "
        "probability above 0)",
        o.uniform_mix));
  }
  if (o.warmup < 0) throw InputError(fmt::format("sampling.warmup = {}: expected >= 0", o.warmup));
}

void ImportanceTable::draw(int64_t count, double mix, Rng& rng, std::vector<int64_t>* positions,
                           std::vector<float>* weights) {
  HSGD_ASSERT(mix > 0 && mix <= 1 && !scores_.empty(), "ImportanceTable::draw: bad arguments");
  const size_t n = scores_.size();
  double seen_sum = 0;
  size_t seen = 0;
  for (float s : scores_) {
    if (s >= 0) {
      seen_sum += s;
      ++seen;
    }
  }
  const double unseen_score = seen > 0 ? seen_sum / static_cast<double>(seen) : 1.0;
  const double total = seen_sum + unseen_score * static_cast<double>(n - seen);
  // With all scores 0 the loss part is uniform too.
  const bool flat = !(total > 0);
  const double a = flat ? 0.0 : (1 - mix) / total;
  const double b = flat ? 1.0 / static_cast<double>(n) : mix / static_cast<double>(n);
  cdf_.resize(n);
  double acc = 0;
  for (size_t i = 0; i < n; ++i) {
    const double s = scores_[i] >= 0 ? scores_[i] : unseen_score;
    acc += a * s + b;
    cdf_[i] = acc;
  }
  positions->clear();
  weights->clear();
  for (int64_t k = 0; k < count; ++k) {
    const double u = rng.uniform() * acc;
    size_t i = static_cast<size_t>(std::upper_bound(cdf_.begin(), cdf_.end(), u) - cdf_.begin());
    if (i >= n) i = n - 1;
    const double p = (a * (scores_[i] >= 0 ? scores_[i] : unseen_score) + b) / acc;
    positions->push_back(static_cast<int64_t>(i));
    weights->push_back(static_cast<float>(1.0 / (static_cast<double>(n) * p)));
  }
}

void ImportanceTable::restore(const std::vector<float>& s) {
  if (s.size() != scores_.size()) {
    throw InputError(fmt::format("sampler state: {} importance scores for a shard of {} samples",
                                 s.size(), scores_.size()));
  }
  scores_ = s;
}

}  // namespace hsgd
