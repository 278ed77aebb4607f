// Dataset basics: sizes, the train/test split, gathering batches.
#include "hsgd/data/dataset.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "hsgd/core/error.h"
#include "hsgd/data/streams.h"

namespace hsgd {

int64_t Dataset::sample_size() const {
  int64_t n = 1;
  for (int64_t dim : sample_shape) n *= dim;
  return n;
}

namespace {

Dataset subset(const Dataset& all, std::span<const int64_t> indices) {
  Dataset d;
  d.name = all.name;
  d.sample_shape = all.sample_shape;
  d.num_classes = all.num_classes;
  d.categorical_rows = all.categorical_rows;
  d.planted_auc = all.planted_auc;
  Batch b;
  gather(all, indices, &b);
  d.features = std::move(b.features);
  d.labels = std::move(b.labels);
  d.categorical = std::move(b.categorical);
  return d;
}

}  // namespace

void split_train_test(Dataset all, double test_fraction, uint64_t seed, Dataset* train,
                      Dataset* test) {
  if (!(test_fraction > 0 && test_fraction < 1)) {
    throw InputError(fmt::format("{}: test fraction: expected a number in (0, 1), got {}", all.name,
                                 test_fraction));
  }
  const int64_t n = all.size();
  const auto n_test = static_cast<int64_t>(std::llround(test_fraction * static_cast<double>(n)));
  if (n_test < 1 || n_test >= n) {
    throw InputError(fmt::format(
        "{}: test fraction {} of {} samples: expected both train and test to be non-empty, got "
        "{} train and {} test samples",
        all.name, test_fraction, n, n - n_test, n_test));
  }
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  Rng rng(seed, data_internal::kSplitStream);
  shuffle(order, rng);
  const std::span<const int64_t> all_order(order);
  *test = subset(all, all_order.subspan(static_cast<size_t>(n - n_test)));
  *train = subset(all, all_order.first(static_cast<size_t>(n - n_test)));
}

void feature_moments(const Dataset& d, double* mean, double* std) {
  double sum = 0, sq = 0;
  for (float v : d.values()) {
    sum += v;
    sq += static_cast<double>(v) * v;
  }
  const double n = std::max<double>(1.0, static_cast<double>(d.values().size()));
  *mean = sum / n;
  const double var = std::max(0.0, sq / n - *mean * *mean);
  *std = var > 1e-24 ? std::sqrt(var) : 1.0;
}

void standardize(Dataset* d, double mean, double std) {
  HSGD_ASSERT(std > 0, "standardize: std must be > 0");
  const float m = static_cast<float>(mean);
  const float inv = static_cast<float>(1.0 / std);
  if (!d->borrowed.empty()) {
    HSGD_ASSERT(!d->lazy_standardize, "standardize: a borrowed data set standardized twice");
    d->lazy_standardize = true;
    d->lazy_mean = m;
    d->lazy_inv_std = inv;
    return;
  }
  for (float& v : d->features) v = (v - m) * inv;
}

void gather(const Dataset& d, std::span<const int64_t> indices, Batch* out) {
  const size_t ss = static_cast<size_t>(d.sample_size());
  out->features.resize(indices.size() * ss);
  out->labels.resize(indices.size());
  out->weights.clear();
  const size_t nc = static_cast<size_t>(d.num_categorical());
  out->categorical.resize(indices.size() * nc);
  for (size_t k = 0; k < indices.size(); ++k) {
    const int64_t i = indices[k];
    HSGD_ASSERT(i >= 0 && i < d.size(), "gather: sample index out of range");
    const float* from = d.values().data() + static_cast<size_t>(i) * ss;
    float* to = out->features.data() + k * ss;
    if (d.lazy_standardize) {
      const float m = d.lazy_mean, inv = d.lazy_inv_std;
      for (size_t j = 0; j < ss; ++j) to[j] = (from[j] - m) * inv;
    } else {
      std::memcpy(to, from, ss * sizeof(float));
    }
    out->labels[k] = d.labels[static_cast<size_t>(i)];
    if (nc > 0) {
      std::memcpy(out->categorical.data() + k * nc,
                  d.categorical.data() + static_cast<size_t>(i) * nc, nc * sizeof(int32_t));
    }
  }
}

}  // namespace hsgd
