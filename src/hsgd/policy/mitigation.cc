#include "hsgd/policy/mitigation.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "hsgd/core/error.h"

namespace hsgd {

void validate(const MitigationOptions& o) {
  if (o.tau_max < -1) {
    throw InputError("staleness.tau_max = " + std::to_string(o.tau_max) +
                     ": expected an integer >= 0, or -1 for no filter");
  }
  if (!(o.dc_lambda >= 0) || !std::isfinite(o.dc_lambda)) {
    std::ostringstream os;
    os << o.dc_lambda;
    throw InputError("staleness.dc_lambda = " + os.str() + ": expected >= 0 (0 = off, or " +
                     "the default 0.04 with staleness.dc_asgd = true)");
  }
  HSGD_ASSERT(o.gap_decay > 0 && o.gap_decay < 1, "gap_decay must be in (0, 1)");
}

bool drop_push(const MitigationOptions& o, int64_t tau) {
  return o.tau_max >= 0 && tau > o.tau_max;
}

double implicit_momentum_of_staleness(double tau) { return tau / (tau + 1.0); }

double steady_staleness(int workers, int k) {
  if (k < 1 || k >= workers) return 0;
  return static_cast<double>(workers) / k - 1;
}

void StalenessMean::add(double tau, int live) {
  const double w = 1.0 / std::max(8, 2 * live);
  mean = count == 0 ? tau : (1 - w) * mean + w * tau;
  ++count;
}

double staleness_scale(int64_t tau) { return 1.0 / static_cast<double>(std::max<int64_t>(1, tau)); }

void scale_by_staleness(std::span<float> g, int64_t tau) {
  if (tau <= 1) return;
  const auto s = static_cast<float>(staleness_scale(tau));
  for (float& x : g) x *= s;
}

void rebase_push(std::span<float> g, std::span<const float> w_now,
                 std::span<const float> w_pulled) {
  HSGD_ASSERT(g.size() == w_now.size() && g.size() == w_pulled.size(), "rebase: sizes differ");
  for (size_t i = 0; i < g.size(); ++i) g[i] += w_now[i] - w_pulled[i];
}

void dc_compensate(std::span<float> g, std::span<const float> w_now,
                   std::span<const float> w_pulled, double lambda) {
  HSGD_ASSERT(g.size() == w_now.size() && g.size() == w_pulled.size(), "dc_compensate sizes");
  const auto l = static_cast<float>(lambda);
  for (size_t i = 0; i < g.size(); ++i) g[i] += l * g[i] * g[i] * (w_now[i] - w_pulled[i]);
}

void gap_aware_divide(std::span<float> g, std::span<const float> w_now,
                      std::span<const float> w_pulled, std::span<const float> ema,
                      double correction) {
  HSGD_ASSERT(g.size() == w_now.size() && g.size() == w_pulled.size() && g.size() == ema.size(),
              "gap_aware_divide sizes");
  HSGD_ASSERT(correction > 0, "gap_aware_divide: correction must be > 0");
  const auto inv = static_cast<float>(1.0 / correction);
  for (size_t i = 0; i < g.size(); ++i) {
    const float c = ema[i] * inv;
    if (!(c > 0)) continue;
    const float gap = std::abs(w_now[i] - w_pulled[i]) / c;
    if (gap > 1.0f) g[i] /= gap;
  }
}

void track_step(std::span<float> ema, std::span<const float> before, std::span<const float> after,
                double decay) {
  HSGD_ASSERT(ema.size() == before.size() && ema.size() == after.size(), "track_step sizes");
  const auto d = static_cast<float>(decay);
  for (size_t i = 0; i < ema.size(); ++i) {
    ema[i] = d * ema[i] + (1.0f - d) * std::abs(after[i] - before[i]);
  }
}

}  // namespace hsgd
