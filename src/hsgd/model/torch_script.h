// TorchScript models (--model torchscript:FILE): a module saved from Python
// with torch.jit.script(m).save(FILE) or torch.jit.trace(m, x).save(FILE),
// trained like the zoo. Includes torch: only model/torch_*.cc and torch tests
// include this header.
#pragma once
#include <torch/script.h>
#include <torch/torch.h>

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "hsgd/model/model.h"

namespace hsgd {

// The adapter. Flat layout: the module's parameters() (recursively, in
// registration order), each row-major. bind() swaps every parameter's data
// for a torch::from_blob view into the flat parameters and its .grad for a
// view into the flat gradients, as TorchModel does: no copy per step.
//
// Modes: gradient() runs the module in train() mode, evaluate() in eval()
// mode (dropout and BatchNorm behave as in PyTorch). A traced module keeps
// the mode it was traced in: tracing records the operations that ran.
//
// Buffers (BatchNorm running statistics and any other non-parameter state)
// are not trained state: they are not in the flat vector, are never pushed
// or pulled, and workers' copies drift without effect. They are a function
// of the parameters and the training data, recomputed by whoever evaluates
// ("precise BatchNorm"): before each evaluate(), with a calibration set,
// the model runs forward in train() mode, without autograd, over up to
// kCalibrationSamples training samples evenly spaced over the set, in
// chunks of kCalibrationChunk, and sets each running-average buffer to the
// mean over chunks of the statistic the chunk's forward feeds it. Which
// buffers are running averages, and their momentum, is measured, not
// assumed from names: one forward of the first chunk from buffers set to 0
// and one from buffers set to 1 (same dropout draws) give, element by
// element, the update b' = (1 - m) b + m s; elements with m = 0 (buffers a
// forward does not change) and integer buffers (num_batches_tracked) keep
// their values. The draws of the default CPU generator are saved and
// restored around it, so calibration does not shift the workers' dropout.
// Without a calibration set, evaluate() uses the buffers the module holds.
//
// Thread-safety: as Model, one thread per instance.
class TorchScriptModel final : public Model {
 public:
  // `source` names the archive in messages (the FILE of torchscript:FILE).
  // Throws InputError as make_model documents.
  TorchScriptModel(std::string source, const std::string& archive,
                   std::vector<int64_t> sample_shape, int num_classes, const Dataset* calibration);

  int64_t num_params() const override { return num_params_; }
  std::vector<std::vector<int64_t>> param_shapes() const override {
    std::vector<std::vector<int64_t>> out;
    for (const auto& p : params_) out.push_back(p.sizes().vec());
    return out;
  }
  void bind(std::span<float> params, std::span<float> grads) override;
  // Copies the archive's own initial parameters and buffers (the module
  // carries its initialization) and seeds torch's global generator, from
  // which the module's random operations (dropout) draw, with `seed`.
  void init_params(uint64_t seed) override;
  double gradient(const Batch& batch, std::span<float> losses) override;
  // Recomputes the buffers (with a calibration set), then evaluates in
  // eval() mode in chunks of 1000 samples, without autograd.
  EvalResult evaluate(const Dataset& data) override;

  // torch's default CPU generator (dropout draws from it): its state bytes.
  std::string rng_state() const override;
  void set_rng_state(std::string_view state, const std::string& what) override;

  // Recomputes the buffers from the calibration set (a no-op without one,
  // or when no buffer is a running average).
  void recompute_buffers();
  // The module, bound to the flat parameters (for export and tests).
  torch::jit::Module& module() { return module_; }

  static constexpr int64_t kCalibrationSamples = 2048;
  static constexpr int64_t kCalibrationChunk = 256;
  static constexpr int64_t kEvalChunk = 1000;

 private:
  torch::Tensor forward(const torch::Tensor& x);
  void set_training(bool on);

  std::string source_;
  torch::jit::Module module_;
  std::vector<torch::Tensor> params_;           // in flat order
  std::vector<torch::Tensor> initial_params_;   // clones, for init_params
  std::vector<torch::Tensor> buffers_;          // every buffer
  std::vector<torch::Tensor> initial_buffers_;  // clones, for init_params
  std::vector<int64_t> input_shape_;            // {n, sample_shape...}
  int64_t sample_size_ = 0;
  int num_classes_ = 0;
  int64_t num_params_ = 0;
  bool training_ = false;
  const Dataset* calibration_ = nullptr;
  std::vector<float> calibration_features_;  // gathered at the first use
  std::span<float> flat_params_;
  std::span<float> flat_grads_;
  torch::Tensor labels_;
  torch::Tensor weights_;  // per-example weights of the last weighted batch (importance sampling)
};

std::unique_ptr<Model> make_torchscript_model(const ModelSpec& spec, const Dataset* calibration);

}  // namespace hsgd
