// A job on the synthetic set with the plain-C++ linear model, shared by the
// runtime tests (no torch, so they also run under ThreadSanitizer).
#pragma once
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "hsgd/config/config.h"
#include "hsgd/data/readers.h"
#include "hsgd/model/linear_model.h"
#include "hsgd/runtime/runtime.h"

namespace hsgd::testing {

struct LinearJob {
  Config config;
  Dataset train, test;

  // The config: synthetic data and the linear-test model, then `defaults`,
  // then `overrides`; `samples` synthetic samples split 80:20.
  LinearJob(std::vector<Override> defaults, const std::vector<Override>& overrides,
            int64_t samples = 2000) {
    defaults.insert(defaults.begin(), {{"data.spec", "synthetic"}, {"model.name", "linear-test"}});
    defaults.insert(defaults.end(), overrides.begin(), overrides.end());
    config = load_config("", defaults);
    SyntheticOptions so = config.data.synthetic;
    so.samples = samples;
    split_train_test(make_synthetic(so), 0.2, 1, &train, &test);
  }

  Job job() const {
    Job j;
    j.config = &config;
    j.train = &train;
    j.test = &test;
    const int64_t f = train.sample_size();
    const int k = train.num_classes;
    j.make_model = [f, k] { return make_linear_model(f, k); };
    j.initial_params = initial_params(j.make_model, config.train.seed);
    return j;
  }
};

// A fresh, empty directory under the test temp dir.
inline std::string fresh_dir(const std::string& name) {
  const std::filesystem::path d = std::filesystem::path(::testing::TempDir()) / name;
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d.string();
}

}  // namespace hsgd::testing
