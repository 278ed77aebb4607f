// The TorchScript LeNet-5 against the same network built with LibTorch's C++
// modules, in a plain LibTorch program with no hsgd code (issue 30, part 3):
// the training step alone (forward, cross-entropy, backward into zeroed
// gradients), batch 64 of 1x28x28, one intra-op thread and one OpenBLAS
// thread as hsgd's workers run. Rounds alternate the two models; the figure
// is the median of the per-round ratios of samples/s, TorchScript over C++.
// What this ratio is, LibTorch's interpreter costs without hsgd; hsgd's own
// ratio (scripts/bench-torchscript.sh) beside it says what is hsgd's.
//   build/release/tests/torchscript_plain tests/data/torchscript/lenet5_scripted.pt [SECONDS]
//   [ROUNDS]
#include <torch/script.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

extern "C" void openblas_set_num_threads(int num_threads);

namespace {

namespace nn = torch::nn;

// hsgd's --model lenet5 (src/hsgd/model/zoo.cc), written out again here.
nn::Sequential lenet5() {
  return nn::Sequential(
      nn::Conv2d(nn::Conv2dOptions(1, 6, 5).padding(2)), nn::ReLU(),
      nn::MaxPool2d(nn::MaxPool2dOptions(2)), nn::Conv2d(nn::Conv2dOptions(6, 16, 5)), nn::ReLU(),
      nn::MaxPool2d(nn::MaxPool2dOptions(2)), nn::Flatten(), nn::Linear(16 * 5 * 5, 120),
      nn::ReLU(), nn::Linear(120, 84), nn::ReLU(), nn::Linear(84, 10));
}

// Training samples per second of `step` over `seconds`.
double rate(const std::function<void()>& step, int batch, double seconds) {
  using Clock = std::chrono::steady_clock;
  for (int i = 0; i < 5; ++i) step();  // warm-up
  const auto t0 = Clock::now();
  int64_t steps = 0;
  double el = 0;
  do {
    step();
    ++steps;
    el = std::chrono::duration<double>(Clock::now() - t0).count();
  } while (el < seconds);
  return static_cast<double>(steps * batch) / el;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s LENET5_SCRIPTED.pt [SECONDS] [ROUNDS]\n", argv[0]);
    return 2;
  }
  const double seconds = argc > 2 ? std::atof(argv[2]) : 3.0;
  const int rounds = argc > 3 ? std::atoi(argv[3]) : 5;
  torch::set_num_threads(1);
  openblas_set_num_threads(1);
  const int batch = 64;
  torch::manual_seed(1);
  const torch::Tensor x = torch::rand({batch, 1, 28, 28});
  const torch::Tensor y = torch::randint(0, 10, {batch}, torch::kInt64);

  nn::Sequential cpp = lenet5();
  cpp->train();
  torch::jit::Module script = torch::jit::load(argv[1]);
  script.train(true);
  std::vector<torch::Tensor> script_params;
  for (const torch::Tensor& p : script.parameters()) script_params.push_back(p);

  const auto cpp_step = [&] {
    for (torch::Tensor& p : cpp->parameters()) {
      if (p.grad().defined()) p.grad().zero_();
    }
    torch::Tensor loss = torch::nn::functional::cross_entropy(cpp->forward(x), y);
    loss.backward();
    (void)loss.item<double>();
  };
  const auto script_step = [&] {
    for (torch::Tensor& p : script_params) {
      if (p.grad().defined()) p.grad().zero_();
    }
    torch::Tensor logits = script.forward({x}).toTensor();
    torch::Tensor loss = torch::nn::functional::cross_entropy(logits, y);
    loss.backward();
    (void)loss.item<double>();
  };

  std::vector<double> ratios, c_rates, s_rates;
  for (int r = 0; r < rounds; ++r) {
    // Alternate which goes first.
    double c = 0, s = 0;
    if (r % 2 == 0) {
      c = rate(cpp_step, batch, seconds);
      s = rate(script_step, batch, seconds);
    } else {
      s = rate(script_step, batch, seconds);
      c = rate(cpp_step, batch, seconds);
    }
    c_rates.push_back(c);
    s_rates.push_back(s);
    ratios.push_back(s / c);
    std::printf("round %d  C++ modules %8.0f samples/s  TorchScript %8.0f samples/s  ratio %.3f\n",
                r + 1, c, s, s / c);
    std::fflush(stdout);
  }
  std::printf(
      "median of %d alternated rounds: C++ modules %.0f samples/s, TorchScript %.0f samples/s, "
      "ratio %.3f (plain LibTorch, no hsgd code)\n",
      rounds, median(c_rates), median(s_rates), median(ratios));
  return 0;
}
