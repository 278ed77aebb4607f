// Threshold schedules for the hybrid policy: K as a function of progress t.
// K is always clamped to [1, live workers] by the caller.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace hsgd {

// What t counts. Updates (the default) is the server's version; seconds are
// wall or virtual seconds since the start of training, given by the runtime;
// epochs are samples / training-set size.
enum class ScheduleClock { kUpdates, kSeconds, kEpochs };

struct ScheduleOptions {
  std::string kind = "step";  // step | linear | exponential | cosine | adaptive
  ScheduleClock clock = ScheduleClock::kUpdates;
  double k0 = 1;  // K at t = 0
  // step: K grows by one every `step` units of t. 0 means "3 / lr" (the
  // paper's default), resolved by resolve_schedule().
  double step = 0;
  // linear, exponential, cosine: t at which K reaches the worker count.
  // 0 means (n - k0) * step, so every schedule becomes synchronous when the
  // step schedule does.
  double ramp = 0;
  // adaptive: the per-push factor of the loss average (Ft), in (0, 1).
  double loss_smoothing = 0.99;
};

// Fills in defaults that depend on the learning rate and the worker count.
ScheduleOptions resolve_schedule(ScheduleOptions o, double lr, int workers);

// The unclamped threshold at progress t for `workers` workers.
//  step:        K0 + floor(t / step)
//  linear:      K0 + (n - K0) * t / ramp
//  exponential: K0 * (n / K0)^(t / ramp)
//  cosine:      K0 + (n - K0) * (1 - cos(pi * t / ramp)) / 2
// linear/exponential/cosine are floored to an integer and hold n after ramp.
// adaptive depends on the pushed losses, not on t: see AdaptiveThreshold.
int threshold_at(const ScheduleOptions& o, double t, int workers);

// The adaptive schedule (AdaSync-like), which ignores the clock. After push
// t with training loss L_t: m_t = b m_{t-1} + (1 - b) L_t (m_0 = 0,
// b = loss_smoothing) and Ft = m_t / (1 - b^t), a bias-corrected moving
// average. F0 is Ft after the first `warmup` pushes (the worker count: one
// round); until then K = K0. After, K = round(K0 * sqrt(F0 / Ft)), and n if
// Ft <= 0 < F0. Non-finite losses are ignored. The caller clamps K.
class AdaptiveThreshold {
 public:
  AdaptiveThreshold(double k0, double smoothing, int warmup)
      : k0_(k0), b_(smoothing), warmup_(warmup) {}
  void add(double loss);
  int k(int workers) const;
  // {pushes, m, F0}.
  std::vector<double> save() const { return {static_cast<double>(t_), m_, f0_}; }
  void restore(std::span<const double> s);
  double smoothed() const;  // Ft (0 before the first push)

 private:
  double k0_, b_;
  int warmup_;
  int64_t t_ = 0;
  double m_ = 0, f0_ = 0;
};

ScheduleClock parse_schedule_clock(const std::string& s);  // updates|seconds|epochs
const char* to_string(ScheduleClock c);

}  // namespace hsgd
