#include <numeric>
#include <string>
#include <vector>

#include "hsgd/core/error.h"
#include "hsgd/core/rng.h"
#include "hsgd/model/reference.h"
#include "hsgd/model/torch_model.h"

namespace hsgd {

EvalResult train_reference_softmax(const Dataset& train, const Dataset& test, int batch, double lr,
                                   int epochs, uint64_t seed) {
  int64_t features = 1;
  for (int64_t d : train.sample_shape) features *= d;
  int64_t test_features = 1;
  for (int64_t d : test.sample_shape) test_features *= d;
  if (train.size() == 0 || test.size() == 0) {
    throw InputError("reference: empty data set (" + train.name + ": " +
                     std::to_string(train.size()) + " samples, " + test.name + ": " +
                     std::to_string(test.size()) + ")");
  }
  if (features != test_features) {
    throw InputError("reference: " + train.name + " has samples of " + std::to_string(features) +
                     " values, " + test.name + " of " + std::to_string(test_features));
  }
  if (batch < 1 || epochs < 0) {
    throw InputError("reference: needs batch >= 1 and epochs >= 0, got batch " +
                     std::to_string(batch) + ", epochs " + std::to_string(epochs));
  }
  const int classes = std::max(train.num_classes, test.num_classes);

  torch::nn::Linear linear(nullptr);
  {
    std::lock_guard<std::mutex> lock(torch_global_rng_mutex());
    torch::manual_seed(seed);
    linear = torch::nn::Linear(features, classes);
  }
  torch::optim::SGD sgd(linear->parameters(), torch::optim::SGDOptions(lr));

  std::vector<int64_t> order(train.size());
  std::iota(order.begin(), order.end(), int64_t{0});
  Rng rng(seed, 1);
  Batch b;
  for (int epoch = 0; epoch < epochs; ++epoch) {
    shuffle(order, rng);
    for (size_t begin = 0; begin < order.size(); begin += static_cast<size_t>(batch)) {
      const size_t end = std::min(order.size(), begin + static_cast<size_t>(batch));
      b.features.clear();
      b.labels.clear();
      for (size_t i = begin; i < end; ++i) {
        const float* x = train.features.data() + order[i] * features;
        b.features.insert(b.features.end(), x, x + features);
        b.labels.push_back(train.labels[order[i]]);
      }
      const int64_t n = b.size();
      const torch::Tensor x = torch::from_blob(b.features.data(), {n, features}, torch::kFloat32);
      const torch::Tensor y =
          torch::from_blob(b.labels.data(), {n}, torch::kInt32).to(torch::kInt64);
      sgd.zero_grad();
      torch::nn::functional::cross_entropy(linear->forward(x), y).backward();
      sgd.step();
    }
  }

  torch::NoGradGuard no_grad;
  const int64_t n = test.size();
  const torch::Tensor x =
      torch::from_blob(const_cast<float*>(test.features.data()), {n, features}, torch::kFloat32);
  const torch::Tensor y =
      torch::from_blob(const_cast<int32_t*>(test.labels.data()), {n}, torch::kInt32)
          .to(torch::kInt64);
  const torch::Tensor logits = linear->forward(x);
  EvalResult r;
  r.loss = torch::nn::functional::cross_entropy(logits, y).item<double>();
  r.accuracy = logits.argmax(1).eq(y).to(torch::kFloat64).mean().item<double>();
  return r;
}

}  // namespace hsgd
