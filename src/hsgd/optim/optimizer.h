// Server-side optimizers and learning-rate schedules. An Optimizer applies one
// aggregated gradient to one shard's flat parameter buffer. Hyperparameters
// (OptimizerOptions, LrSchedule) are separate from per-run state (the
// velocity / moment buffers held by the Optimizer object).
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "hsgd/core/state.h"

namespace hsgd {

struct OptimizerOptions {
  std::string kind = "sgd";  // sgd | momentum | nesterov | adam | adagrad
  double lr = 0.01;
  double momentum = 0.9;      // momentum, nesterov
  double weight_decay = 0.0;  // L2, added to the gradient: g + wd * w (every kind)
  double beta1 = 0.9;         // adam: first-moment decay, [0, 1)
  double beta2 = 0.999;       // adam: second-moment decay, [0, 1)
  double eps = 1e-8;          // adam, adagrad: denominator epsilon, > 0
  // Large-batch linear scaling rule (Goyal et al. 2017): when true the base
  // lr is lr * workers * batch / base_batch (see scaled_lr).
  bool scale_lr = false;
  int64_t base_batch = 32;  // >= 1
  // Clip each push to this L2 norm at the server, before the staleness
  // mitigations; 0 = off (>= 0).
  double clip_norm = 0;
};

struct LrSchedule {
  std::string kind = "constant";  // constant | step | cosine | robbins-monro
  int64_t step_size = 1000;       // step: multiply by gamma every step_size updates
  double gamma = 0.1;             // step
  int64_t horizon = 0;            // cosine: updates over which lr decays to min_lr
  double min_lr = 0.0;            // cosine
  int64_t warmup = 0;             // linear warm-up from 0 over this many updates
  // robbins-monro: lr x (update + tau)^-kappa (Robbins and Monro 1951; the
  // SVI step size rho_t of Hoffman et al. 2013 with lr = 1). tau > 0;
  // kappa in (0.5, 1] satisfies sum rho = inf, sum rho^2 < inf.
  double tau = 1.0;
  double kappa = 0.7;
};

// The learning rate for update number `update` (0-based).
double lr_at(const LrSchedule& s, double base_lr, int64_t update);

// The server's base learning rate for a job of `workers` workers with batch
// `batch` each: o.lr, or o.lr * workers * batch / o.base_batch when
// o.scale_lr. The schedule (warm-up included) then applies to this value.
double scaled_lr(const OptimizerOptions& o, int workers, int64_t batch);

// Throws InputError naming the optim.* key for bad values (lr <= 0,
// momentum, beta1 or beta2 outside [0, 1), eps <= 0, base_batch < 1,
// negative weight decay, unknown kinds, ...).
void validate(const OptimizerOptions& o, const LrSchedule& s);

// Thread-safety: none; the server calls it under its shard's lock.
class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // params -= lr * direction(grad): one step over every parameter.
  void step(std::span<float> params, std::span<const float> grad, double lr) {
    begin_step(lr);
    step_part(params, grad, 0);
  }
  // The same step in parts, for a runtime that sends the parameters as
  // they become final (mpi/shard_server.h): begin_step once (it advances
  // the per-step state, Adam's count, and fixes lr and the momentum), then
  // step_part on disjoint parts whose union is every parameter; `params`
  // and `grad` are the part starting at parameter `offset`. Every kernel is
  // elementwise and rounds each element alike, so the parts give the bits
  // of one whole step (Optimizer.AStepInPartsIsBitwiseTheWholeStep).
  virtual void begin_step(double lr) = 0;
  virtual void step_part(std::span<float> params, std::span<const float> grad, size_t offset) = 0;
  // The momentum asynchrony adds by itself, m in [0, 1) (Policy::
  // implicit_momentum; Mitliagkas et al. 2016). Momentum and Nesterov then
  // use mu' = max(0, 1 - (1 - mu) / (1 - m)), so that momenta composed as
  // 1 - (1 - mu')(1 - m) give back the configured mu; 0 (the default) leaves
  // mu as configured. The others ignore it.
  virtual void set_implicit_momentum(double /*m*/) {}
  // How far one step moves the parameters once it is steady, in units of lr
  // x the gradient: 1 for sgd (weight decay only adds to the gradient),
  // 1 / (1 - mu) for momentum and nesterov (the configured mu: a constant
  // gradient's velocity), 0 where the step is not such a multiple (adam,
  // adagrad). auto's staleness budget counts a step with it
  // (Policy::on_step_gain).
  virtual double step_gain() const { return 0; }
  // Per-run state (velocity; Adam: step count, m, v) for checkpoints.
  // restore_state takes what save_state of the same kind and size returned.
  virtual std::vector<float> save_state() const { return {}; }
  virtual void restore_state(std::span<const float>) {}
  // The same state streamed in place, with no copy of it: save writes the
  // bytes of put_vec(save_state()); load reads them straight into the
  // optimizer's buffers and throws InputError (via r) for a state of
  // another kind or size.
  virtual void save(StateWriter& w) const { w.put_vec(save_state()); }
  virtual void load(StateReader& r);
};

// Adam (Kingma & Ba 2015), bias-corrected, with g + wd * w as its gradient:
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;  t += 1
//   w -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
// Adagrad: a += g^2; w -= lr * g / (sqrt(a) + eps), g + wd * w as its gradient.
std::unique_ptr<Optimizer> make_optimizer(const OptimizerOptions& o, size_t num_params);

}  // namespace hsgd
