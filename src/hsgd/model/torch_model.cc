#include "hsgd/model/torch_model.h"

#include <algorithm>
#include <string>
#include <utility>

#include "hsgd/core/error.h"

namespace hsgd {

std::mutex& torch_global_rng_mutex() {
  static std::mutex m;
  return m;
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "{";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ",";
    s += std::to_string(shape[i]);
  }
  return s + "}";
}

TorchModel::TorchModel(TorchNetFactory factory, std::vector<int64_t> sample_shape, int num_classes)
    : factory_(std::move(factory)), num_classes_(num_classes) {
  {
    std::lock_guard<std::mutex> lock(torch_global_rng_mutex());
    net_ = factory_();
  }
  HSGD_ASSERT(net_.module && net_.forward, "TorchNetFactory returned an empty net");
  params_ = net_.module->parameters();
  for (const auto& p : params_) {
    HSGD_ASSERT(p.scalar_type() == torch::kFloat32, "model parameters must be float32");
    num_params_ += p.numel();
  }
  sample_size_ = 1;
  for (int64_t d : sample_shape) sample_size_ *= d;
  input_shape_.push_back(1);
  input_shape_.insert(input_shape_.end(), sample_shape.begin(), sample_shape.end());

  // One forward pass on a zero sample: a shape mismatch is a clear error now
  // rather than a torch exception in the middle of training.
  torch::NoGradGuard no_grad;
  torch::Tensor out;
  try {
    out = net_.forward(torch::zeros(input_shape_));
  } catch (const c10::Error& e) {
    throw InputError("model: cannot run on input shape " + shape_string(sample_shape) + ": " +
                     e.what_without_backtrace());
  }
  if (out.dim() != 2 || out.size(0) != 1 || out.size(1) != num_classes) {
    throw InputError("model: on input shape " + shape_string(sample_shape) + " it outputs " +
                     shape_string(out.sizes().vec()) + " per sample, expected {1," +
                     std::to_string(num_classes) + "}");
  }
}

void TorchModel::bind(std::span<float> params, std::span<float> grads) {
  HSGD_ASSERT(static_cast<int64_t>(params.size()) == num_params_, "params size != num_params");
  HSGD_ASSERT(static_cast<int64_t>(grads.size()) == num_params_, "grads size != num_params");
  flat_params_ = params;
  flat_grads_ = grads;
  bind_views(params_, params, grads);
}

void bind_views(std::vector<torch::Tensor>& params, std::span<float> flat, std::span<float> grads) {
  torch::NoGradGuard no_grad;
  int64_t offset = 0;
  for (auto& p : params) {
    const auto shape = p.sizes().vec();
    p.set_data(torch::from_blob(flat.data() + offset, shape, torch::kFloat32));
    p.mutable_grad() = torch::from_blob(grads.data() + offset, shape, torch::kFloat32);
    offset += p.numel();
  }
}

void TorchModel::init_params(uint64_t seed) {
  HSGD_ASSERT(!flat_params_.empty() || num_params_ == 0, "init_params before bind");
  TorchNet fresh;
  {
    std::lock_guard<std::mutex> lock(torch_global_rng_mutex());
    torch::manual_seed(seed);
    fresh = factory_();
  }
  torch::NoGradGuard no_grad;
  const auto fresh_params = fresh.module->parameters();
  HSGD_ASSERT(fresh_params.size() == params_.size(), "factory built a different network");
  for (size_t i = 0; i < params_.size(); ++i) {
    HSGD_ASSERT(fresh_params[i].sizes() == params_[i].sizes(), "factory built a different network");
    params_[i].copy_(fresh_params[i]);  // params_[i] is a view into flat_params_
  }
}

void TorchModel::check_labels(const std::string& what, const int32_t* labels, int64_t n) const {
  for (int64_t i = 0; i < n; ++i) {
    if (labels[i] < 0 || labels[i] >= num_classes_) {
      throw InputError(what + ": label " + std::to_string(labels[i]) + " outside [0, " +
                       std::to_string(num_classes_) + ")");
    }
  }
}

torch::Tensor batch_loss(const torch::Tensor& logits, const torch::Tensor& labels,
                         const Batch& batch, std::span<float> losses, torch::Tensor* weights) {
  namespace F = torch::nn::functional;
  const int64_t n = batch.size();
  if (batch.weights.empty() && losses.empty()) return F::cross_entropy(logits, labels);
  torch::Tensor each =
      F::cross_entropy(logits, labels, F::CrossEntropyFuncOptions().reduction(torch::kNone));
  if (!losses.empty()) {
    const torch::Tensor l = each.detach().contiguous();
    std::copy_n(l.data_ptr<float>(), n, losses.begin());
  }
  if (batch.weights.empty()) return each.mean();
  if (!weights->defined() || weights->size(0) != n) *weights = torch::empty({n}, torch::kFloat32);
  std::copy_n(batch.weights.data(), n, weights->data_ptr<float>());
  return (each * *weights).mean();
}

double TorchModel::gradient(const Batch& batch, std::span<float> losses) {
  HSGD_ASSERT(!flat_params_.empty() || num_params_ == 0, "gradient before bind");
  const int64_t n = batch.size();
  if (static_cast<int64_t>(batch.features.size()) != n * sample_size_) {
    throw InputError("batch: " + std::to_string(batch.features.size()) + " feature values for " +
                     std::to_string(n) + " samples, the model expects " +
                     std::to_string(sample_size_) + " per sample");
  }
  check_labels("batch", batch.labels.data(), n);
  HSGD_ASSERT(batch.weights.empty() || batch.size() == static_cast<int64_t>(batch.weights.size()),
              "batch: one weight per sample");
  HSGD_ASSERT(losses.empty() || static_cast<int64_t>(losses.size()) == n,
              "gradient: one loss slot per sample");
  std::fill(flat_grads_.begin(), flat_grads_.end(), 0.0f);
  if (n == 0) return 0.0;

  if (!labels_.defined() || labels_.size(0) != n) labels_ = torch::empty({n}, torch::kInt64);
  int64_t* labels = labels_.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i) labels[i] = batch.labels[i];

  input_shape_[0] = n;
  // The model never writes its input; from_blob needs a non-const pointer.
  const torch::Tensor x =
      torch::from_blob(const_cast<float*>(batch.features.data()), input_shape_, torch::kFloat32);
  const torch::Tensor logits = net_.forward(x);
  torch::Tensor loss = batch_loss(logits, labels_, batch, losses, &weights_);
  loss.backward();
  return loss.item<double>();
}

EvalResult TorchModel::evaluate(const Dataset& data) {
  HSGD_ASSERT(!flat_params_.empty() || num_params_ == 0, "evaluate before bind");
  int64_t shape_size = 1;
  for (int64_t d : data.sample_shape) shape_size *= d;
  if (shape_size != sample_size_) {
    throw InputError(data.name + ": samples have shape " + shape_string(data.sample_shape) +
                     ", the model expects " +
                     shape_string({input_shape_.begin() + 1, input_shape_.end()}));
  }
  const int64_t n = data.size();
  if (static_cast<int64_t>(data.features.size()) != n * sample_size_) {
    throw InputError(data.name + ": " + std::to_string(data.features.size()) +
                     " feature values for " + std::to_string(n) + " samples");
  }
  check_labels(data.name, data.labels.data(), n);
  return evaluate_chunked(data, input_shape_, sample_size_, kEvalChunk,
                          [this](const torch::Tensor& x) { return net_.forward(x); });
}

EvalResult evaluate_chunked(const Dataset& data, std::vector<int64_t> shape, int64_t sample_size,
                            int64_t chunk,
                            const std::function<torch::Tensor(const torch::Tensor&)>& forward) {
  const int64_t n = data.size();
  EvalResult r;
  if (n == 0) return r;
  torch::NoGradGuard no_grad;
  double loss_sum = 0.0;
  int64_t correct = 0;
  for (int64_t begin = 0; begin < n; begin += chunk) {
    const int64_t m = std::min(chunk, n - begin);
    shape[0] = m;
    const torch::Tensor x = torch::from_blob(
        const_cast<float*>(data.features.data()) + begin * sample_size, shape, torch::kFloat32);
    const torch::Tensor y =
        torch::from_blob(const_cast<int32_t*>(data.labels.data()) + begin, {m}, torch::kInt32)
            .to(torch::kInt64);
    const torch::Tensor logits = forward(x);
    loss_sum +=
        torch::nn::functional::cross_entropy(
            logits, y, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
            .item<double>();
    correct += logits.argmax(1).eq(y).sum().item<int64_t>();
  }
  r.loss = loss_sum / static_cast<double>(n);
  r.accuracy = static_cast<double>(correct) / static_cast<double>(n);
  return r;
}

std::unique_ptr<Model> make_torch_model(TorchNetFactory factory, std::vector<int64_t> sample_shape,
                                        int num_classes) {
  return std::make_unique<TorchModel>(std::move(factory), std::move(sample_shape), num_classes);
}

}  // namespace hsgd
