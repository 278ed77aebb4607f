// The built-in models and make_model().
#include <string>
#include <vector>

#include "hsgd/core/error.h"
#include "hsgd/model/dpgmm.h"
#include "hsgd/model/linear_model.h"
#include "hsgd/model/model.h"
#include "hsgd/model/torch_dlrm.h"
#include "hsgd/model/torch_model.h"
#include "hsgd/model/torch_script.h"

namespace hsgd {
namespace {

namespace nn = torch::nn;

int64_t product(const std::vector<int64_t>& shape) {
  int64_t p = 1;
  for (int64_t d : shape) p *= d;
  return p;
}

// Softmax regression: one Linear on the flattened input.
TorchNet softmax_net(int64_t in, int classes) {
  return torch_net(nn::Sequential(nn::Flatten(), nn::Linear(in, classes)));
}

// Linear + ReLU per hidden width, then a Linear to the classes.
TorchNet mlp_net(int64_t in, const std::vector<int64_t>& hidden, int classes) {
  nn::Sequential seq{nn::Flatten()};
  for (int64_t width : hidden) {
    seq->push_back(nn::Linear(in, width));
    seq->push_back(nn::ReLU());
    in = width;
  }
  seq->push_back(nn::Linear(in, classes));
  return torch_net(seq);
}

// LeNet-5: conv 6@5x5 -> relu -> maxpool 2 -> conv 16@5x5 -> relu -> maxpool 2
// -> fc 120 -> fc 84 -> fc classes. A 28x28 input is padded by 2 so the
// feature maps are the classic 28, 14, 10, 5.
TorchNet lenet5_net(int64_t side, int classes) {
  const int64_t pad = side == 28 ? 2 : 0;
  return torch_net(nn::Sequential(
      nn::Conv2d(nn::Conv2dOptions(1, 6, 5).padding(pad)), nn::ReLU(),
      nn::MaxPool2d(nn::MaxPool2dOptions(2)), nn::Conv2d(nn::Conv2dOptions(6, 16, 5)), nn::ReLU(),
      nn::MaxPool2d(nn::MaxPool2dOptions(2)), nn::Flatten(), nn::Linear(16 * 5 * 5, 120),
      nn::ReLU(), nn::Linear(120, 84), nn::ReLU(), nn::Linear(84, classes)));
}

// A small CIFAR CNN, sized for many workers sharing a few cores: conv 32@3x3
// -> relu -> pool -> conv 32@3x3 -> relu -> pool -> conv 64@3x3 -> relu ->
// pool -> fc 128 -> relu -> fc classes (161k parameters for 10 classes).
TorchNet cifar_cnn_net(int classes) {
  auto conv = [](int64_t in, int64_t out) {
    return nn::Conv2d(nn::Conv2dOptions(in, out, 3).padding(1));
  };
  auto pool = [] { return nn::MaxPool2d(nn::MaxPool2dOptions(2)); };
  return torch_net(nn::Sequential(
      conv(3, 32), nn::ReLU(), pool(), conv(32, 32), nn::ReLU(), pool(), conv(32, 64), nn::ReLU(),
      pool(), nn::Flatten(), nn::Linear(64 * 4 * 4, 128), nn::ReLU(), nn::Linear(128, classes)));
}

[[noreturn]] void bad_shape(const ModelSpec& spec, const std::string& expected) {
  throw InputError("--model " + spec.name + ": expects input shape " + expected +
                   ", the data has " + shape_string(spec.sample_shape));
}

}  // namespace

std::vector<std::string> model_names() {
  return {"softmax", "mlp",         "lenet5", "cifar-cnn",
          "dlrm",    "linear-test", "dpgmm",  "torchscript:FILE"};
}

std::unique_ptr<Model> make_model(const ModelSpec& spec, const Dataset* calibration) {
  const auto& shape = spec.sample_shape;
  const int classes = spec.num_classes;
  if (classes < 1) {
    throw InputError("--model " + spec.name + ": needs at least one class, the data has " +
                     std::to_string(classes));
  }
  bool positive = !shape.empty();
  for (int64_t d : shape) positive = positive && d > 0;
  if (!positive) bad_shape(spec, "with positive sizes");
  const int64_t in = product(shape);
  if (is_torchscript(spec.name)) return make_torchscript_model(spec, calibration);

  if (spec.name == "dlrm") return make_dlrm_model(spec);
  if (spec.name == "linear-test") return make_linear_model(in, classes);
  if (spec.name == "dpgmm") return make_dpgmm_model(in, spec.truncation, spec.alpha, calibration);
  if (spec.name == "softmax") {
    return make_torch_model([=] { return softmax_net(in, classes); }, shape, classes);
  }
  if (spec.name == "mlp") {
    for (int64_t width : spec.hidden) {
      if (width <= 0) {
        throw InputError("--model mlp: hidden layer widths must be positive, got " +
                         shape_string(spec.hidden));
      }
    }
    const auto hidden = spec.hidden;
    return make_torch_model([=] { return mlp_net(in, hidden, classes); }, shape, classes);
  }
  if (spec.name == "lenet5") {
    if (shape != std::vector<int64_t>{1, 28, 28} && shape != std::vector<int64_t>{1, 32, 32}) {
      bad_shape(spec, "{1,28,28} or {1,32,32}");
    }
    const int64_t side = shape[1];
    return make_torch_model([=] { return lenet5_net(side, classes); }, shape, classes);
  }
  if (spec.name == "cifar-cnn") {
    if (shape != std::vector<int64_t>{3, 32, 32}) bad_shape(spec, "{3,32,32}");
    return make_torch_model([=] { return cifar_cnn_net(classes); }, shape, classes);
  }
  std::string names;
  for (const auto& n : model_names()) names += (names.empty() ? "" : ", ") + n;
  throw InputError("--model " + spec.name + ": unknown model; choose one of " + names);
}

}  // namespace hsgd
