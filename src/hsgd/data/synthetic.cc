// Gaussian-mixture classification data (the paper's synthetic set).
#include <fmt/format.h>

#include "hsgd/core/error.h"
#include "hsgd/core/rng.h"
#include "hsgd/data/readers.h"
#include "hsgd/data/streams.h"

namespace hsgd {
namespace {

void check_options(const SyntheticOptions& o) {
  auto fail = [](const char* key, const std::string& expected, const std::string& got) {
    throw InputError(fmt::format("synthetic data: {}: expected {}, got {}", key, expected, got));
  };
  if (o.samples < 1) fail("samples", "at least 1", std::to_string(o.samples));
  if (o.features < 1) fail("features", "at least 1", std::to_string(o.features));
  if (o.classes < 2) fail("classes", "at least 2", std::to_string(o.classes));
  if (!(o.class_sep >= 0)) fail("class_sep", "a number >= 0", fmt::format("{}", o.class_sep));
  if (!(o.noise >= 0)) fail("noise", "a number >= 0", fmt::format("{}", o.noise));
}

}  // namespace

Dataset make_synthetic(const SyntheticOptions& o) {
  check_options(o);
  const size_t n = static_cast<size_t>(o.samples);
  const size_t f = static_cast<size_t>(o.features);
  Dataset d;
  d.name = "synthetic";
  d.sample_shape = {o.features};
  d.num_classes = o.classes;

  Rng centre_rng(o.seed, data_internal::kSyntheticCentresStream);
  std::vector<double> centres(static_cast<size_t>(o.classes) * f);
  for (double& c : centres) c = o.class_sep * centre_rng.normal();

  d.labels.resize(n);
  for (size_t i = 0; i < n; ++i) d.labels[i] = static_cast<int32_t>(i % o.classes);
  Rng label_rng(o.seed, data_internal::kSyntheticLabelsStream);
  shuffle(d.labels, label_rng);

  Rng noise_rng(o.seed, data_internal::kSyntheticNoiseStream);
  d.features.resize(n * f);
  for (size_t i = 0; i < n; ++i) {
    const double* centre = centres.data() + static_cast<size_t>(d.labels[i]) * f;
    float* x = d.features.data() + i * f;
    for (size_t j = 0; j < f; ++j)
      x[j] = static_cast<float>(centre[j] + o.noise * noise_rng.normal());
  }
  return d;
}

}  // namespace hsgd
