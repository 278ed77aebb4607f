#include "hsgd/data/project.h"

#include <cmath>
#include <string>
#include <vector>

#include "hsgd/core/error.h"
#include "hsgd/core/rng.h"
#include "hsgd/data/streams.h"

namespace hsgd {

void project_features(Dataset* d, int64_t dims, uint64_t seed) {
  if (dims < 1) throw InputError("data.project = " + std::to_string(dims) + ": expected >= 1");
  if (d->num_categorical() > 0) {
    throw InputError("data.project = " + std::to_string(dims) + ": " + d->name +
                     " has categorical features, which a projection cannot mix");
  }
  HSGD_ASSERT(!d->lazy_standardize, "project_features after standardize");
  const int64_t in = d->sample_size(), n = d->size();
  std::vector<float> r(static_cast<size_t>(in * dims));
  Rng rng(seed, data_internal::kProjectionStream);
  const double scale = 1 / std::sqrt(static_cast<double>(dims));
  for (float& v : r) v = static_cast<float>(scale * rng.normal());
  std::vector<float> out(static_cast<size_t>(n * dims), 0.0f);
  std::vector<double> acc(static_cast<size_t>(dims));
  const std::span<const float> values = d->values();
  for (int64_t i = 0; i < n; ++i) {
    std::fill(acc.begin(), acc.end(), 0.0);
    const float* x = values.data() + i * in;
    for (int64_t j = 0; j < in; ++j) {
      const double v = x[j];
      if (v == 0) continue;
      const float* row = r.data() + j * dims;
      for (int64_t o = 0; o < dims; ++o) acc[static_cast<size_t>(o)] += v * row[o];
    }
    for (int64_t o = 0; o < dims; ++o)
      out[static_cast<size_t>(i * dims + o)] = static_cast<float>(acc[static_cast<size_t>(o)]);
  }
  d->features = std::move(out);
  d->borrowed = {};
  d->sample_shape = {dims};
}

}  // namespace hsgd
