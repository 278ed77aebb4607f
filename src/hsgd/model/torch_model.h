// The LibTorch adapter behind the zoo: a Model around any torch::nn::Module
// whose parameters are views into the caller's flat buffers. Includes torch:
// only model/torch_*.cc, model/zoo.cc and torch tests include this header.
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "hsgd/model/model.h"

namespace hsgd {

// A network: its module (whose parameters() order defines the flat layout)
// and how to run it on a batch {n, sample_shape...} -> logits {n, classes}.
struct TorchNet {
  std::shared_ptr<torch::nn::Module> module;
  std::function<torch::Tensor(const torch::Tensor&)> forward;
};

// Wraps a module holder (torch::nn::Sequential, torch::nn::Linear, a user
// TORCH_MODULE, ...) whose forward takes and returns one tensor.
template <class Holder>
TorchNet torch_net(Holder holder) {
  auto impl = holder.ptr();
  return {impl, [impl](const torch::Tensor& x) { return impl->forward(x); }};
}

// Builds a fresh, default-initialized network. Called once at construction
// and once per init_params(), right after torch::manual_seed(seed), so the
// default initializers (which draw from torch's global generator) give the
// same values for the same seed.
using TorchNetFactory = std::function<TorchNet()>;

// The adapter. Flat layout: the module's parameters() in order, each
// row-major. bind() replaces every parameter's data with a torch::from_blob
// view into `params` and its .grad with a view into `grads`, so backward()
// accumulates straight into the caller's gradient buffer (which gradient()
// zeroes first): no copies in or out.
//
// Thread-safety: as Model, one thread per instance. Construction and
// init_params() use torch's process-global generator; they serialize with
// each other through a process-wide lock, but not with other code that seeds
// or draws from torch's global generator while they run.
// Makes each tensor of `params` (in flat order) a view of its slice of
// `flat` and its gradient a view of the same slice of `grads`: set_data keeps
// the tensor the module holds (the autograd leaf) and swaps its storage.
void bind_views(std::vector<torch::Tensor>& params, std::span<float> flat, std::span<float> grads);

// The loss to back-propagate for a batch: the mean cross-entropy, or, with
// batch.weights, the mean of weight x per-example loss (importance
// sampling); fills `losses` (one per sample) when it is not empty.
// `weights` is scratch reused between calls.
torch::Tensor batch_loss(const torch::Tensor& logits, const torch::Tensor& labels,
                         const Batch& batch, std::span<float> losses, torch::Tensor* weights);

// Test loss and accuracy of `forward` (a classifier's logits) over `data`,
// in chunks of `chunk` samples shaped `input_shape` (its first dimension is
// set per chunk), without autograd. The caller has checked the data.
EvalResult evaluate_chunked(const Dataset& data, std::vector<int64_t> input_shape,
                            int64_t sample_size, int64_t chunk,
                            const std::function<torch::Tensor(const torch::Tensor&)>& forward);

class TorchModel final : public Model {
 public:
  // Throws InputError if a forward pass on a sample of `sample_shape` fails
  // or does not give `num_classes` logits.
  TorchModel(TorchNetFactory factory, std::vector<int64_t> sample_shape, int num_classes);

  int64_t num_params() const override { return num_params_; }
  std::vector<std::vector<int64_t>> param_shapes() const override {
    std::vector<std::vector<int64_t>> out;
    for (const auto& p : params_) out.push_back(p.sizes().vec());
    return out;
  }
  void bind(std::span<float> params, std::span<float> grads) override;
  void init_params(uint64_t seed) override;
  // Throws InputError on a batch whose feature count is not a multiple of
  // the sample size or with a label outside [0, num_classes).
  double gradient(const Batch& batch, std::span<float> losses) override;
  using Model::gradient;
  // Evaluates in chunks of kEvalChunk samples, without autograd. The data's
  // samples are read as the model's sample shape: only their sizes must agree.
  EvalResult evaluate(const Dataset& data) override;

  // The wrapped module (for tests and for callers that want torch access).
  torch::nn::Module& module() { return *net_.module; }

  static constexpr int64_t kEvalChunk = 1000;

 private:
  void check_labels(const std::string& what, const int32_t* labels, int64_t n) const;

  TorchNetFactory factory_;
  TorchNet net_;
  std::vector<torch::Tensor> params_;  // net_.module->parameters(), in flat order
  std::vector<int64_t> input_shape_;   // {n, sample_shape...}; n set per call
  int64_t sample_size_ = 0;
  int num_classes_ = 0;
  int64_t num_params_ = 0;
  std::span<float> flat_params_;
  std::span<float> flat_grads_;
  torch::Tensor labels_;   // int64 labels of the last batch, reused
  torch::Tensor weights_;  // float weights of the last weighted batch, reused
};

// Convenience: a TorchModel in a unique_ptr<Model>.
std::unique_ptr<Model> make_torch_model(TorchNetFactory factory, std::vector<int64_t> sample_shape,
                                        int num_classes);

// The lock that serializes seeding + drawing from torch's process-global
// generator among hsgd's own users (model construction, init_params, the
// reference trainer). Torch forces this global; hsgd adds no other.
std::mutex& torch_global_rng_mutex();

// "{1,28,28}", for messages.
std::string shape_string(const std::vector<int64_t>& shape);

}  // namespace hsgd
