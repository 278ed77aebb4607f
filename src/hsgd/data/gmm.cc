// synthetic-gmm: a mixture of diagonal Gaussians with known components, for
// density estimation (model dpgmm, issue 31).
#include <fmt/format.h>

#include <vector>

#include "hsgd/core/error.h"
#include "hsgd/core/rng.h"
#include "hsgd/data/readers.h"
#include "hsgd/data/streams.h"

namespace hsgd {

Dataset make_synthetic_gmm(const SyntheticOptions& o) {
  auto fail = [](const char* key, const std::string& expected, const std::string& got) {
    throw InputError(
        fmt::format("synthetic-gmm data: {}: expected {}, got {}", key, expected, got));
  };
  if (o.samples < 1) fail("samples", "at least 1", std::to_string(o.samples));
  if (o.features < 1) fail("features", "at least 1", std::to_string(o.features));
  if (o.classes < 2) fail("classes", "at least 2", std::to_string(o.classes));
  if (!(o.class_sep >= 0)) fail("class_sep", "a number >= 0", fmt::format("{}", o.class_sep));
  if (!(o.noise > 0)) fail("noise", "a number > 0", fmt::format("{}", o.noise));
  const size_t n = static_cast<size_t>(o.samples), f = static_cast<size_t>(o.features),
               k = static_cast<size_t>(o.classes);
  Dataset d;
  d.name = "synthetic-gmm";
  d.sample_shape = {o.features};
  d.num_classes = o.classes;
  Rng centre_rng(o.seed, data_internal::kGmmCentresStream);
  std::vector<double> centres(k * f), stds(k * f);
  for (double& c : centres) c = o.class_sep * centre_rng.normal();
  for (double& s : stds) s = o.noise * (0.5 + centre_rng.uniform());
  Rng weight_rng(o.seed, data_internal::kGmmWeightsStream);
  std::vector<double> cumulative(k);
  double total = 0;
  for (size_t c = 0; c < k; ++c) {
    total += 1 + weight_rng.uniform();
    cumulative[c] = total;
  }
  Rng rng(o.seed, data_internal::kGmmSamplesStream);
  d.labels.resize(n);
  d.features.resize(n * f);
  for (size_t i = 0; i < n; ++i) {
    const double u = rng.uniform() * total;
    size_t c = 0;
    while (c + 1 < k && u >= cumulative[c]) ++c;
    d.labels[i] = static_cast<int32_t>(c);
    float* x = d.features.data() + i * f;
    for (size_t j = 0; j < f; ++j) {
      x[j] = static_cast<float>(centres[c * f + j] + stds[c * f + j] * rng.normal());
    }
  }
  return d;
}

}  // namespace hsgd
