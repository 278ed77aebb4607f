#include "hsgd/model/torch_script.h"

#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <optional>
#include <sstream>
#include <utility>

#include "hsgd/core/error.h"
#include "hsgd/model/torch_model.h"

namespace hsgd {
namespace {

// A torch message on one line: the "RuntimeError: ..." line of a TorchScript
// traceback when there is one, else the first line; at most 300 characters.
std::string one_line(const std::string& what) {
  std::string line;
  std::istringstream in(what);
  std::string first;
  for (std::string l; std::getline(in, l);) {
    if (first.empty() && !l.empty()) first = l;
    const size_t at = l.find("Error: ");
    if (at != std::string::npos && line.empty()) line = l.substr(at + 7);
  }
  if (line.empty()) line = first;
  if (line.size() > 300) line = line.substr(0, 297) + "...";
  return line;
}

std::string torch_message(const std::exception& e) {
  if (const auto* c = dynamic_cast<const c10::Error*>(&e))
    return one_line(c->what_without_backtrace());
  return one_line(e.what());
}

}  // namespace

TorchScriptModel::TorchScriptModel(std::string source, const std::string& archive,
                                   std::vector<int64_t> sample_shape, int num_classes,
                                   const Dataset* calibration)
    : source_(std::move(source)), num_classes_(num_classes), calibration_(calibration) {
  try {
    std::istringstream in(archive);
    module_ = torch::jit::load(in);
  } catch (const std::exception& e) {
    throw InputError(
        fmt::format("{}: not a TorchScript module (save one with torch.jit.script(m).save(FILE) or "
                    "torch.jit.trace(m, x).save(FILE)): {}",
                    source_, torch_message(e)));
  }
  for (const auto& p : module_.named_parameters(/*recurse=*/true)) {
    if (p.value.scalar_type() != torch::kFloat32) {
      throw InputError(fmt::format(
          "{}: parameter '{}' is {}; hsgd trains float32 parameters (call .float() before "
          "saving)",
          source_, p.name, c10::toString(p.value.scalar_type())));
    }
    params_.push_back(p.value);
    initial_params_.push_back(p.value.detach().clone());
    num_params_ += p.value.numel();
  }
  if (params_.empty()) throw InputError(source_ + ": the module has no parameters to train");
  for (const auto& b : module_.buffers(/*recurse=*/true)) {
    buffers_.push_back(b);
    initial_buffers_.push_back(b.detach().clone());
  }
  sample_size_ = 1;
  for (int64_t d : sample_shape) sample_size_ *= d;
  input_shape_ = {2};
  input_shape_.insert(input_shape_.end(), sample_shape.begin(), sample_shape.end());

  // One forward pass on two zero samples shaped like the data, in eval mode:
  // a shape mismatch is a clear error now, not in the middle of training.
  torch::NoGradGuard no_grad;
  set_training(false);
  torch::Tensor out;
  try {
    out = forward(torch::zeros(input_shape_));
  } catch (const InputError&) {
    throw;
  } catch (const std::exception& e) {
    throw InputError(fmt::format(
        "{}: forward fails on a batch of shape {} (the data's samples are {}): {}", source_,
        shape_string(input_shape_), shape_string(sample_shape), torch_message(e)));
  }
  if (out.dim() != 2 || out.size(0) != 2 || out.size(1) != num_classes) {
    throw InputError(fmt::format(
        "{}: forward returns shape {} for a batch of shape {}; expected {{2,{}}} (N x classes: "
        "the data has {} classes)",
        source_, shape_string(out.sizes().vec()), shape_string(input_shape_), num_classes,
        num_classes));
  }
}

torch::Tensor TorchScriptModel::forward(const torch::Tensor& x) {
  const c10::IValue out = module_.forward({x});
  if (!out.isTensor()) {
    throw InputError(fmt::format("{}: forward returns a {}, expected a tensor of logits", source_,
                                 out.tagKind()));
  }
  return out.toTensor();
}

void TorchScriptModel::set_training(bool on) {
  if (training_ == on && on == module_.is_training()) return;
  module_.train(on);
  training_ = on;
}

void TorchScriptModel::bind(std::span<float> params, std::span<float> grads) {
  HSGD_ASSERT(static_cast<int64_t>(params.size()) == num_params_, "params size != num_params");
  HSGD_ASSERT(static_cast<int64_t>(grads.size()) == num_params_, "grads size != num_params");
  flat_params_ = params;
  flat_grads_ = grads;
  bind_views(params_, params, grads);
}

void TorchScriptModel::init_params(uint64_t seed) {
  HSGD_ASSERT(!flat_params_.empty(), "init_params before bind");
  {
    std::lock_guard<std::mutex> lock(torch_global_rng_mutex());
    torch::manual_seed(seed);  // the module's random draws (dropout) follow the seed
  }
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) params_[i].copy_(initial_params_[i]);
  for (size_t i = 0; i < buffers_.size(); ++i) buffers_[i].copy_(initial_buffers_[i]);
}

double TorchScriptModel::gradient(const Batch& batch, std::span<float> losses) {
  HSGD_ASSERT(!flat_params_.empty(), "gradient before bind");
  const int64_t n = batch.size();
  if (static_cast<int64_t>(batch.features.size()) != n * sample_size_) {
    throw InputError(
        fmt::format("batch: {} feature values for {} samples, the model expects {} "
                    "per sample",
                    batch.features.size(), n, sample_size_));
  }
  for (int64_t i = 0; i < n; ++i) {
    if (batch.labels[i] < 0 || batch.labels[i] >= num_classes_) {
      throw InputError(
          fmt::format("batch: label {} outside [0, {})", batch.labels[i], num_classes_));
    }
  }
  std::fill(flat_grads_.begin(), flat_grads_.end(), 0.0f);
  if (n == 0) return 0.0;
  if (!labels_.defined() || labels_.size(0) != n) labels_ = torch::empty({n}, torch::kInt64);
  int64_t* labels = labels_.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i) labels[i] = batch.labels[i];
  set_training(true);
  input_shape_[0] = n;
  const torch::Tensor x =
      torch::from_blob(const_cast<float*>(batch.features.data()), input_shape_, torch::kFloat32);
  torch::Tensor loss = batch_loss(forward(x), labels_, batch, losses, &weights_);
  loss.backward();  // accumulates into the zeroed views of flat_grads_
  return loss.item<double>();
}

std::string TorchScriptModel::rng_state() const {
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  torch::Tensor state;
  {
    std::lock_guard<std::mutex> lock(gen.mutex());
    state = gen.get_state();
  }
  HSGD_ASSERT(state.scalar_type() == torch::kUInt8 && state.is_contiguous(),
              "the CPU generator's state is a byte tensor");
  return std::string(reinterpret_cast<const char*>(state.data_ptr<uint8_t>()),
                     static_cast<size_t>(state.numel()));
}

void TorchScriptModel::set_rng_state(std::string_view state, const std::string& what) {
  const std::string now = rng_state();
  if (state.size() != now.size()) {
    throw InputError(
        fmt::format("{}: {} bytes of torch generator state, this build's CPU generator has {}",
                    what, state.size(), now.size()));
  }
  torch::Tensor t = torch::empty({static_cast<int64_t>(state.size())}, torch::kUInt8);
  std::memcpy(t.data_ptr<uint8_t>(), state.data(), state.size());
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  try {
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(t);
  } catch (const c10::Error& e) {
    throw InputError(what + ": not a torch CPU generator state (" + e.what_without_backtrace() +
                     ")");
  }
}

void TorchScriptModel::recompute_buffers() {
  if (calibration_ == nullptr || calibration_->size() == 0) return;
  std::vector<size_t> floating;
  for (size_t i = 0; i < buffers_.size(); ++i) {
    if (buffers_[i].is_floating_point()) floating.push_back(i);
  }
  if (floating.empty()) return;
  const Dataset& cal = *calibration_;
  HSGD_ASSERT(cal.sample_size() == sample_size_, "calibration set of another sample size");
  const int64_t samples = std::min(kCalibrationSamples, cal.size());
  if (calibration_features_.empty()) {
    std::vector<int64_t> idx(static_cast<size_t>(samples));
    for (int64_t i = 0; i < samples; ++i) idx[i] = i * cal.size() / samples;
    Batch b;
    gather(cal, idx, &b);
    calibration_features_ = std::move(b.features);
  }
  auto chunk = [&](int64_t begin) {
    std::vector<int64_t> shape = input_shape_;
    shape[0] = std::min(kCalibrationChunk, samples - begin);
    return torch::from_blob(calibration_features_.data() + begin * sample_size_, shape,
                            torch::kFloat32);
  };

  torch::NoGradGuard no_grad;
  set_training(true);
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  torch::Tensor rng_state;
  {
    std::lock_guard<std::mutex> lock(gen.mutex());
    rng_state = gen.get_state();
  }
  auto set_rng = [&] {
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(rng_state);
  };
  std::vector<torch::Tensor> original;
  for (const auto& b : buffers_) original.push_back(b.clone());
  auto restore = [&] {
    for (size_t i = 0; i < buffers_.size(); ++i) buffers_[i].copy_(original[i]);
  };
  auto forward_from = [&](double value, const torch::Tensor& x) {
    restore();
    for (size_t i : floating) buffers_[i].fill_(value);
    set_rng();
    forward(x);
  };

  // The update b' = (1 - m) b + m s, element by element: from b = 0 and 1.
  const torch::Tensor first = chunk(0);
  forward_from(0.0, first);
  std::vector<torch::Tensor> from_zero;
  for (size_t i : floating) from_zero.push_back(buffers_[i].clone());
  forward_from(1.0, first);
  std::vector<torch::Tensor> momentum, averaged;
  bool any = false;
  for (size_t k = 0; k < floating.size(); ++k) {
    torch::Tensor m = 1.0 - (buffers_[floating[k]] - from_zero[k]);
    m = torch::where(m.isfinite() & (m > 1e-6), m, torch::zeros_like(m));
    any = any || m.gt(0).any().item<bool>();
    momentum.push_back(m);
    averaged.push_back(torch::zeros_like(m));
  }
  if (any) {
    int64_t chunks = 0;
    for (int64_t begin = 0; begin < samples; begin += kCalibrationChunk, ++chunks) {
      forward_from(0.0, chunk(begin));
      for (size_t k = 0; k < floating.size(); ++k) {
        const torch::Tensor& m = momentum[k];
        averaged[k] += torch::where(m > 0, buffers_[floating[k]] / torch::where(m > 0, m, 1.0),
                                    torch::zeros_like(m));
      }
    }
    restore();
    for (size_t k = 0; k < floating.size(); ++k) {
      torch::Tensor& b = buffers_[floating[k]];
      b.copy_(torch::where(momentum[k] > 0, averaged[k] / static_cast<double>(chunks), b));
    }
  } else {
    restore();
  }
  set_rng();
}

EvalResult TorchScriptModel::evaluate(const Dataset& data) {
  HSGD_ASSERT(!flat_params_.empty(), "evaluate before bind");
  if (data.sample_size() != sample_size_) {
    throw InputError(fmt::format("{}: samples have shape {}, the model expects {}", data.name,
                                 shape_string(data.sample_shape),
                                 shape_string({input_shape_.begin() + 1, input_shape_.end()})));
  }
  const int64_t n = data.size();
  for (int64_t i = 0; i < n; ++i) {
    if (data.labels[i] < 0 || data.labels[i] >= num_classes_) {
      throw InputError(
          fmt::format("{}: label {} outside [0, {})", data.name, data.labels[i], num_classes_));
    }
  }
  EvalResult r;
  if (n == 0) return r;
  recompute_buffers();
  set_training(false);
  return evaluate_chunked(data, input_shape_, sample_size_, kEvalChunk,
                          [this](const torch::Tensor& x) { return forward(x); });
}

std::unique_ptr<Model> make_torchscript_model(const ModelSpec& spec, const Dataset* calibration) {
  ModelSpec s = spec;
  read_model_archive(&s);
  return std::make_unique<TorchScriptModel>(s.name.substr(s.name.find(':') + 1), s.archive,
                                            s.sample_shape, s.num_classes, calibration);
}

namespace {

// The zoo network of `m` (a torch::nn::Sequential of Conv2d, Linear, ReLU,
// MaxPool2d and Flatten) as a TorchScript module with a copy of its
// parameters; an empty optional for any other layer.
std::optional<torch::jit::Module> zoo_module(TorchModel& m) {
  torch::jit::Module out("hsgd.Zoo");
  out.register_attribute("training", c10::BoolType::get(), false);  // as Python modules have
  std::string code = "def forward(self, x):\n";
  int i = 0;
  for (const auto& child : m.module().named_children()) {
    torch::nn::Module& layer = *child.value();
    const std::string n = "layer" + std::to_string(i++);
    auto add = [&](const std::string& name, const torch::Tensor& t) {
      out.register_parameter(n + "_" + name, t.detach().clone(), /*is_buffer=*/false);
    };
    if (auto* c = layer.as<torch::nn::Conv2dImpl>()) {
      const auto* pad = c10::get_if<torch::ExpandingArray<2>>(&c->options.padding());
      if (pad == nullptr || !c->bias.defined()) return std::nullopt;
      add("weight", c->weight);
      add("bias", c->bias);
      const auto& stride = c->options.stride();
      code += fmt::format(
          "    x = torch.conv2d(x, self.{0}_weight, self.{0}_bias, [{1}, {2}], [{3}, {4}])\n", n,
          (*stride)[0], (*stride)[1], (**pad)[0], (**pad)[1]);
    } else if (auto* l = layer.as<torch::nn::LinearImpl>()) {
      if (!l->bias.defined()) return std::nullopt;
      add("weight", l->weight);
      add("bias", l->bias);
      code += fmt::format("    x = torch.linear(x, self.{0}_weight, self.{0}_bias)\n", n);
    } else if (layer.as<torch::nn::ReLUImpl>() != nullptr) {
      code += "    x = torch.relu(x)\n";
    } else if (auto* p = layer.as<torch::nn::MaxPool2dImpl>()) {
      const auto& k = p->options.kernel_size();
      const auto& st = p->options.stride();
      code += fmt::format("    x = torch.max_pool2d(x, [{}, {}], [{}, {}])\n", (*k)[0], (*k)[1],
                          (*st)[0], (*st)[1]);
    } else if (layer.as<torch::nn::FlattenImpl>() != nullptr) {
      code += "    x = torch.flatten(x, 1)\n";
    } else {
      return std::nullopt;
    }
  }
  out.define(code + "    return x\n");
  return out;
}

// The trained network `net` behind a module whose forward standardizes its
// input first: model.pt.
std::string standalone_archive(const torch::jit::Module& net, const ModelSpec& spec) {
  torch::jit::Module wrapper("hsgd.Trained");
  wrapper.register_attribute("training", c10::BoolType::get(), false);  // as Python modules have
  wrapper.register_module("net", net);
  wrapper.register_attribute("input_mean", c10::FloatType::get(), spec.input_mean);
  wrapper.register_attribute("input_std", c10::FloatType::get(), spec.input_std);
  wrapper.define(R"(
def forward(self, x):
    return self.net.forward((x - self.input_mean) / self.input_std)
)");
  wrapper.eval();
  std::ostringstream out;
  wrapper.save(out);
  return out.str();
}

}  // namespace

std::string export_torchscript(const ModelSpec& spec, std::span<const float> params,
                               const Dataset* calibration, bool standalone) {
  std::vector<float> p(params.begin(), params.end()), g(p.size());
  if (!is_torchscript(spec.name)) {
    if (!standalone) return {};
    std::unique_ptr<Model> made = make_model(spec);
    auto* zoo = dynamic_cast<TorchModel*>(made.get());
    if (zoo == nullptr) return {};  // linear-test: plain C++
    zoo->bind(p, g);
    std::optional<torch::jit::Module> net = zoo_module(*zoo);
    if (!net) return {};
    net->eval();
    return standalone_archive(*net, spec);
  }
  ModelSpec s = spec;
  read_model_archive(&s);
  TorchScriptModel m(s.name.substr(s.name.find(':') + 1), s.archive, s.sample_shape, s.num_classes,
                     calibration);
  m.bind(p, g);
  m.recompute_buffers();
  torch::jit::Module module = m.module();
  module.eval();
  if (standalone) return standalone_archive(module, spec);
  std::ostringstream out;
  module.save(out);
  return out.str();
}

}  // namespace hsgd
