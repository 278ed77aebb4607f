#include "hsgd/model/linear_model.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "hsgd/core/error.h"
#include "hsgd/core/rng.h"

namespace hsgd {
namespace {

class LinearModel final : public Model {
 public:
  LinearModel(int64_t sample_size, int num_classes)
      : features_(sample_size), classes_(num_classes), logits_(num_classes) {
    if (sample_size <= 0 || num_classes <= 0) {
      throw InputError("--model linear-test: needs at least one feature and one class, got " +
                       std::to_string(sample_size) + " features and " +
                       std::to_string(num_classes) + " classes");
    }
  }

  int64_t num_params() const override { return classes_ * (features_ + 1); }
  std::vector<std::vector<int64_t>> param_shapes() const override {
    return {{classes_, features_}, {classes_}};
  }

  void bind(std::span<float> params, std::span<float> grads) override {
    HSGD_ASSERT(static_cast<int64_t>(params.size()) == num_params(), "params size != num_params");
    HSGD_ASSERT(static_cast<int64_t>(grads.size()) == num_params(), "grads size != num_params");
    params_ = params;
    grads_ = grads;
  }

  void init_params(uint64_t seed) override {
    HSGD_ASSERT(!params_.empty(), "init_params before bind");
    Rng rng(seed, 0);
    const int64_t nw = classes_ * features_;
    for (int64_t i = 0; i < nw; ++i) params_[i] = static_cast<float>(0.01 * rng.normal());
    std::fill(params_.begin() + nw, params_.end(), 0.0f);
  }

  using Model::gradient;
  double gradient(const Batch& batch, std::span<float> losses) override {
    HSGD_ASSERT(!params_.empty(), "gradient before bind");
    const int64_t n = batch.size();
    check_sizes("batch", static_cast<int64_t>(batch.features.size()), n);
    HSGD_ASSERT(batch.weights.empty() || static_cast<int64_t>(batch.weights.size()) == n,
                "batch: one weight per sample");
    HSGD_ASSERT(losses.empty() || static_cast<int64_t>(losses.size()) == n,
                "gradient: one loss slot per sample");
    std::fill(grads_.begin(), grads_.end(), 0.0f);
    if (n == 0) return 0.0;
    float* gw = grads_.data();
    float* gb = grads_.data() + classes_ * features_;
    const double inv_n = 1.0 / static_cast<double>(n);
    double loss = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      const float* x = batch.features.data() + i * features_;
      const int y = check_label("batch", batch.labels[i]);
      const double li = softmax(x, y);  // logits_ now holds probabilities
      const double wi = batch.weights.empty() ? 1.0 : batch.weights[i];
      if (!losses.empty()) losses[i] = static_cast<float>(li);
      loss += wi * li;
      for (int c = 0; c < classes_; ++c) {
        // d(-w log p_y)/d(logit_c) = w (p_c - [c == y]), averaged over the batch.
        const float d = static_cast<float>(wi * (logits_[c] - (c == y ? 1.0 : 0.0)) * inv_n);
        gb[c] += d;
        float* row = gw + c * features_;
        for (int64_t f = 0; f < features_; ++f) row[f] += d * x[f];
      }
    }
    return loss * inv_n;
  }

  EvalResult evaluate(const Dataset& data) override {
    HSGD_ASSERT(!params_.empty(), "evaluate before bind");
    int64_t shape_size = 1;
    for (int64_t s : data.sample_shape) shape_size *= s;
    if (shape_size != features_) {
      throw InputError(data.name + ": samples have " + std::to_string(shape_size) +
                       " values, the model expects " + std::to_string(features_));
    }
    const int64_t n = data.size();
    check_sizes(data.name, static_cast<int64_t>(data.features.size()), n);
    EvalResult r;
    if (n == 0) return r;
    int64_t correct = 0;
    for (int64_t i = 0; i < n; ++i) {
      const int y = check_label(data.name, data.labels[i]);
      r.loss += softmax(data.features.data() + i * features_, y);
      const auto best = std::max_element(logits_.begin(), logits_.end()) - logits_.begin();
      if (best == y) ++correct;
    }
    r.loss /= static_cast<double>(n);
    r.accuracy = static_cast<double>(correct) / static_cast<double>(n);
    return r;
  }

 private:
  // Fills logits_ with softmax(W x + b) and returns -log p_y.
  double softmax(const float* x, int y) {
    const float* w = params_.data();
    const float* b = params_.data() + classes_ * features_;
    double top = -INFINITY;
    for (int c = 0; c < classes_; ++c) {
      const float* row = w + c * features_;
      double z = b[c];
      for (int64_t f = 0; f < features_; ++f) z += static_cast<double>(row[f]) * x[f];
      logits_[c] = z;
      top = std::max(top, z);
    }
    double sum = 0.0;
    for (int c = 0; c < classes_; ++c) sum += std::exp(logits_[c] - top);
    const double log_sum = top + std::log(sum);
    const double loss = log_sum - logits_[y];
    for (int c = 0; c < classes_; ++c) logits_[c] = std::exp(logits_[c] - log_sum);
    return loss;
  }

  void check_sizes(const std::string& what, int64_t num_values, int64_t n) const {
    if (num_values != n * features_) {
      throw InputError(what + ": " + std::to_string(num_values) + " feature values for " +
                       std::to_string(n) + " samples, the model expects " +
                       std::to_string(features_) + " per sample");
    }
  }

  int check_label(const std::string& what, int32_t label) const {
    if (label < 0 || label >= classes_) {
      throw InputError(what + ": label " + std::to_string(label) + " outside [0, " +
                       std::to_string(classes_) + ")");
    }
    return label;
  }

  int64_t features_;
  int classes_;
  std::span<float> params_;
  std::span<float> grads_;
  std::vector<double> logits_;  // scratch: logits, then probabilities
};

}  // namespace

std::unique_ptr<Model> make_linear_model(int64_t sample_size, int num_classes) {
  return std::make_unique<LinearModel>(sample_size, num_classes);
}

}  // namespace hsgd
