// Threshold schedules for the hybrid policy: K as a function of progress t.
// K is always clamped to [1, live workers] by the caller.
#pragma once
#include <string>

namespace hsgd {

// What t counts. Updates (the default) is the server's version; seconds are
// wall or virtual seconds since the start of training, given by the runtime;
// epochs are samples / training-set size.
enum class ScheduleClock { kUpdates, kSeconds, kEpochs };

struct ScheduleOptions {
  std::string kind = "step";  // step | linear | exponential | cosine
  ScheduleClock clock = ScheduleClock::kUpdates;
  double k0 = 1;  // K at t = 0
  // step: K grows by one every `step` units of t. 0 means "3 / lr" (the
  // paper's default), resolved by resolve_schedule().
  double step = 0;
  // linear, exponential, cosine: t at which K reaches the worker count.
  // 0 means (n - k0) * step, so every schedule becomes synchronous when the
  // step schedule does.
  double ramp = 0;
};

// Fills in defaults that depend on the learning rate and the worker count.
ScheduleOptions resolve_schedule(ScheduleOptions o, double lr, int workers);

// The unclamped threshold at progress t for `workers` workers.
//  step:        K0 + floor(t / step)
//  linear:      K0 + (n - K0) * t / ramp
//  exponential: K0 * (n / K0)^(t / ramp)
//  cosine:      K0 + (n - K0) * (1 - cos(pi * t / ramp)) / 2
// linear/exponential/cosine are floored to an integer and hold n after ramp.
int threshold_at(const ScheduleOptions& o, double t, int workers);

ScheduleClock parse_schedule_clock(const std::string& s);  // updates|seconds|epochs
const char* to_string(ScheduleClock c);

}  // namespace hsgd
