#include "hsgd/policy/schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "hsgd/core/error.h"

namespace hsgd {

ScheduleOptions resolve_schedule(ScheduleOptions o, double lr, int workers) {
  if (o.step <= 0) o.step = 3.0 / lr;
  if (o.ramp <= 0) o.ramp = std::max(1.0, (workers - o.k0) * o.step);
  return o;
}

int threshold_at(const ScheduleOptions& o, double t, int workers) {
  const double n = workers;
  const double k0 = o.k0;
  double k = k0;
  if (t < 0) t = 0;
  if (o.kind == "step") {
    k = k0 + std::floor(t / o.step);
  } else {
    const double x = std::min(1.0, t / o.ramp);
    if (o.kind == "linear") {
      k = k0 + (n - k0) * x;
    } else if (o.kind == "exponential") {
      k = k0 * std::pow(n / k0, x);
    } else if (o.kind == "cosine") {
      k = k0 + (n - k0) * (1.0 - std::cos(std::numbers::pi * x)) / 2.0;
    } else {
      HSGD_ASSERT(false, "unknown schedule kind (config validation missed it)");
    }
    if (x >= 1.0) k = n;
    k = std::floor(k + 1e-9);
  }
  if (k > 1e9) k = 1e9;
  return static_cast<int>(k);
}

void AdaptiveThreshold::add(double loss) {
  if (!std::isfinite(loss)) return;
  ++t_;
  m_ = b_ * m_ + (1.0 - b_) * loss;
  if (t_ == warmup_) f0_ = smoothed();
}

double AdaptiveThreshold::smoothed() const {
  return t_ == 0 ? 0.0 : m_ / (1.0 - std::pow(b_, static_cast<double>(t_)));
}

int AdaptiveThreshold::k(int workers) const {
  if (t_ < warmup_ || !(f0_ > 0)) return static_cast<int>(std::lround(k0_));
  const double ft = smoothed();
  if (!(ft > 0)) return workers;
  const double k = k0_ * std::sqrt(f0_ / ft);
  return k > 1e9 ? 1000000000 : static_cast<int>(std::lround(k));
}

void AdaptiveThreshold::restore(std::span<const double> s) {
  HSGD_ASSERT(s.size() == 3, "adaptive schedule state has 3 numbers");
  t_ = static_cast<int64_t>(s[0]);
  m_ = s[1];
  f0_ = s[2];
}

ScheduleClock parse_schedule_clock(const std::string& s) {
  if (s == "updates") return ScheduleClock::kUpdates;
  if (s == "seconds") return ScheduleClock::kSeconds;
  if (s == "epochs") return ScheduleClock::kEpochs;
  throw InputError("policy.clock = '" + s + "': expected updates, seconds or epochs");
}

const char* to_string(ScheduleClock c) {
  switch (c) {
    case ScheduleClock::kUpdates:
      return "updates";
    case ScheduleClock::kSeconds:
      return "seconds";
    case ScheduleClock::kEpochs:
      return "epochs";
  }
  return "?";
}

}  // namespace hsgd
