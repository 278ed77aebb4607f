// Server-side optimizers and learning-rate schedules. An Optimizer applies one
// aggregated gradient to one shard's flat parameter buffer. Hyperparameters
// (OptimizerOptions, LrSchedule) are separate from per-run state (the
// velocity buffer held by the Optimizer object).
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace hsgd {

struct OptimizerOptions {
  std::string kind = "sgd";  // sgd | momentum | nesterov
  double lr = 0.01;
  double momentum = 0.9;      // momentum, nesterov
  double weight_decay = 0.0;  // L2, added to the gradient: g + wd * w
};

struct LrSchedule {
  std::string kind = "constant";  // constant | step | cosine
  int64_t step_size = 1000;       // step: multiply by gamma every step_size updates
  double gamma = 0.1;             // step
  int64_t horizon = 0;            // cosine: updates over which lr decays to min_lr
  double min_lr = 0.0;            // cosine
  int64_t warmup = 0;             // linear warm-up from 0 over this many updates
};

// The learning rate for update number `update` (0-based).
double lr_at(const LrSchedule& s, double base_lr, int64_t update);

// Throws InputError naming the optim.* key for bad values (lr <= 0,
// momentum outside [0, 1), negative weight decay, unknown kinds, ...).
void validate(const OptimizerOptions& o, const LrSchedule& s);

// Thread-safety: none; the server calls it under its shard's lock.
class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // params -= lr * direction(grad). `grad` may be modified (scratch).
  virtual void step(std::span<float> params, std::span<float> grad, double lr) = 0;
  // Per-run state (velocity) for checkpoints.
  virtual std::vector<float> save_state() const { return {}; }
  virtual void restore_state(std::span<const float>) {}
};

std::unique_ptr<Optimizer> make_optimizer(const OptimizerOptions& o, size_t num_params);

}  // namespace hsgd
