// A job on the synthetic set with the plain-C++ linear model, shared by the
// runtime tests (no torch, so they also run under ThreadSanitizer).
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "hsgd/config/config.h"
#include "hsgd/data/readers.h"
#include "hsgd/model/linear_model.h"
#include "hsgd/runtime/runtime.h"

namespace hsgd::testing {

// The linear model, except that its evaluation reports the first parameter
// as the accuracy: a probe that tells which parameters (and at what scale)
// an evaluation saw, where a linear classifier's accuracy is blind to scale.
class Param0Accuracy final : public Model {
 public:
  explicit Param0Accuracy(std::unique_ptr<Model> inner) : inner_(std::move(inner)) {}
  int64_t num_params() const override { return inner_->num_params(); }
  std::vector<std::vector<int64_t>> param_shapes() const override { return inner_->param_shapes(); }
  void bind(std::span<float> params, std::span<float> grads) override {
    params_ = params;
    inner_->bind(params, grads);
  }
  void init_params(uint64_t seed) override { inner_->init_params(seed); }
  double gradient(const Batch& batch, std::span<float> losses) override {
    return inner_->gradient(batch, losses);
  }
  EvalResult evaluate(const Dataset& data) override {
    EvalResult e = inner_->evaluate(data);
    e.accuracy = params_[0];
    return e;
  }

 private:
  std::unique_ptr<Model> inner_;
  std::span<float> params_;
};

struct LinearJob {
  Config config;
  Dataset train, test;
  bool accuracy_is_param0 = false;  // evaluate with Param0Accuracy

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
    if (accuracy_is_param0) {
      j.make_model = [f, k]() -> std::unique_ptr<Model> {
        return std::make_unique<Param0Accuracy>(make_linear_model(f, k));
      };
    } else {
      j.make_model = [f, k] { return make_linear_model(f, k); };
    }
    j.initial_params = initial_params(j.make_model, config.train.seed);
    return j;
  }

  // One epoch of plain sequential SGD by hand, from the job's initial
  // parameters in worker 0-of-1's shard order: what sync with one worker
  // must compute.
  // `on_gradient`, if set, sees each batch's gradient before its step.
  std::vector<float> sequential_sgd_epoch(
      float lr, int64_t batch,
      const std::function<void(std::span<const float>)>& on_gradient = {}) const {
    Job j = job();
    auto model = j.make_model();
    std::vector<float> w = j.initial_params, g(w.size());
    model->bind(w, g);
    ShardSampler sampler(train, 0, 1, config.train.seed);
    Batch b;
    for (int64_t seen = 0; seen < train.size(); seen += batch) {
      sampler.next(batch, &b);
      model->gradient(b);
      if (on_gradient) on_gradient(g);
      for (size_t i = 0; i < w.size(); ++i) w[i] -= lr * g[i];
    }
    return w;
  }
};

// The Euclidean distance between two parameter vectors of one size.
inline double distance(std::span<const float> a, std::span<const float> b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    s += d * d;
  }
  return std::sqrt(s);
}

// A fresh, empty directory under the test temp dir.
inline std::string fresh_dir(const std::string& name) {
  const std::filesystem::path d = std::filesystem::path(::testing::TempDir()) / name;
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d.string();
}

// The value of column `name` in every row of a metrics CSV's text, found
// by its header name (a missing column fails the calling test).
inline std::vector<double> csv_column(const std::string& csv, const std::string& name) {
  std::stringstream in(csv);
  std::string line;
  std::getline(in, line);
  std::vector<std::string> head;
  {
    std::stringstream ls(line);
    std::string cell;
    while (std::getline(ls, cell, ',')) head.push_back(cell);
  }
  const size_t at = static_cast<size_t>(std::find(head.begin(), head.end(), name) - head.begin());
  EXPECT_LT(at, head.size()) << "no column " << name;
  std::vector<double> out;
  while (std::getline(in, line)) {
    std::stringstream ls(line);
    std::string cell;
    for (size_t i = 0; std::getline(ls, cell, ','); ++i) {
      if (i == at) out.push_back(std::stod(cell));
    }
  }
  return out;
}

}  // namespace hsgd::testing
