#include "hsgd/policy/policy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "hsgd/core/error.h"

namespace hsgd {
namespace {

TEST(Schedule, StepIsThePapersFormula) {
  ScheduleOptions o = resolve_schedule(ScheduleOptions{}, 0.01, 25);
  EXPECT_DOUBLE_EQ(o.step, 300.0);
  for (int t : {0, 1, 299, 300, 301, 599, 600, 7199, 7200, 10000}) {
    EXPECT_EQ(std::min(25, threshold_at(o, t, 25)), std::min(25, 1 + t / 300)) << t;
  }
}

TEST(Schedule, RampsEndSynchronousWhenStepDoes) {
  for (const char* kind : {"linear", "exponential", "cosine"}) {
    ScheduleOptions o;
    o.kind = kind;
    o = resolve_schedule(o, 0.01, 25);
    EXPECT_DOUBLE_EQ(o.ramp, 24 * 300.0);
    EXPECT_EQ(threshold_at(o, 0, 25), 1) << kind;
    EXPECT_EQ(threshold_at(o, 24 * 300, 25), 25) << kind;
    EXPECT_EQ(threshold_at(o, 1e9, 25), 25) << kind;
    int prev = 1;
    for (int t = 0; t <= 7200; t += 100) {
      int k = threshold_at(o, t, 25);
      EXPECT_GE(k, prev) << kind << " t=" << t;
      prev = k;
    }
  }
  ScheduleOptions lin{.kind = "linear", .k0 = 1, .step = 1, .ramp = 100};
  EXPECT_EQ(threshold_at(lin, 50, 11), 6);
  ScheduleOptions cos{.kind = "cosine", .k0 = 1, .step = 1, .ramp = 100};
  EXPECT_EQ(threshold_at(cos, 50, 11), 6);
  ScheduleOptions ex{.kind = "exponential", .k0 = 1, .step = 1, .ramp = 100};
  EXPECT_EQ(threshold_at(ex, 50, 16), 4);
}

TEST(Policy, ThresholdsAreClampedToLiveWorkers) {
  PolicyOptions p;
  p.kind = "kasync";
  p.k = 4;
  auto k = make_policy(p, 4, 0.1);
  EXPECT_EQ(k->threshold({}, 4), 4);
  EXPECT_EQ(k->threshold({}, 2), 2);
  p.kind = "sync";
  EXPECT_EQ(make_policy(p, 4, 0.1)->threshold({}, 3), 3);
  p.kind = "hybrid";
  p.schedule.step = 1;
  auto h = make_policy(p, 4, 0.1);
  EXPECT_EQ(h->threshold(Progress{.updates = 100}, 4), 4);
  EXPECT_EQ(h->threshold(Progress{.updates = 100}, 3), 3);
  EXPECT_EQ(h->threshold(Progress{.updates = 1}, 3), 2);
}

TEST(Policy, HybridCanCountSecondsOrEpochs) {
  PolicyOptions p;
  p.kind = "hybrid";
  p.schedule.step = 10;
  p.schedule.clock = ScheduleClock::kSeconds;
  auto h = make_policy(p, 8, 0.1);
  EXPECT_EQ(h->threshold(Progress{.updates = 1000, .seconds = 25}, 8), 3);
  p.schedule.clock = ScheduleClock::kEpochs;
  p.schedule.step = 0.5;
  EXPECT_EQ(make_policy(p, 8, 0.1)->threshold(Progress{.epochs = 1.2}, 8), 3);
}

TEST(Policy, NamesAndWaiting) {
  PolicyOptions p;
  p.kind = "kbatch";
  p.k = 2;
  EXPECT_EQ(make_policy(p, 3, 0.1)->name(), "kbatch:2");
  EXPECT_FALSE(make_policy(p, 3, 0.1)->pusher_waits());
  p.kind = "kasync";
  EXPECT_EQ(make_policy(p, 3, 0.1)->name(), "kasync:2");
  EXPECT_TRUE(make_policy(p, 3, 0.1)->pusher_waits());
  p.kind = "hybrid";
  EXPECT_EQ(make_policy(p, 3, 0.1)->name(), "hybrid(step)");
}

TEST(Policy, BadOptionsNameTheKey) {
  PolicyOptions p;
  p.kind = "kasync";
  p.k = 5;
  try {
    make_policy(p, 4, 0.1);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("policy.k"), std::string::npos);
  }
  p.k = 0;
  EXPECT_THROW(make_policy(p, 4, 0.1), InputError);
  p.kind = "bogus";
  EXPECT_THROW(make_policy(p, 4, 0.1), InputError);
  p.kind = "hybrid";
  p.schedule.kind = "zigzag";
  EXPECT_THROW(make_policy(p, 4, 0.1), InputError);
  p.schedule.kind = "step";
  p.schedule.k0 = 9;
  EXPECT_THROW(make_policy(p, 4, 0.1), InputError);
  PolicyOptions sync;
  sync.kind = "sync";
  EXPECT_THROW(make_policy(sync, 0, 0.1), InputError);
  EXPECT_THROW(parse_aggregation("median"), InputError);
}

TEST(Policy, AdaptiveKRisesAsTheSmoothedLossFallsByTheFormula) {
  PolicyOptions p;
  p.kind = "hybrid";
  p.schedule.kind = "adaptive";
  p.schedule.k0 = 2;
  p.schedule.loss_smoothing = 0.9;
  const int n = 8;
  auto pol = make_policy(p, n, 0.1);
  EXPECT_EQ(pol->name(), "hybrid(adaptive)");
  // The formula by hand: bias-corrected EMA, F0 after the first n pushes.
  double m = 0, f0 = 0;
  int prev = 2;
  for (int t = 1; t <= 200; ++t) {
    const double loss = t <= n ? 3.0 : 3.0 / (1.0 + 0.05 * (t - n));
    pol->on_push_loss(loss);
    m = 0.9 * m + (1.0 - 0.9) * loss;
    const double ft = m / (1.0 - std::pow(0.9, t));
    if (t == n) f0 = ft;
    const int want =
        t < n ? 2 : std::clamp(static_cast<int>(std::lround(2 * std::sqrt(f0 / ft))), 1, n);
    // The clock (updates, seconds, epochs) plays no part.
    EXPECT_EQ(pol->threshold(Progress{.updates = 7, .seconds = 9, .epochs = 3}, n), want) << t;
    EXPECT_GE(want, prev) << t;
    prev = want;
  }
  EXPECT_NEAR(f0, 3.0, 1e-12);
  EXPECT_GE(prev, 5);
  EXPECT_EQ(pol->threshold({}, 3), 3);  // clamped to the live workers
  // Non-finite losses are ignored; the state survives a checkpoint.
  pol->on_push_loss(std::nan(""));
  auto again = make_policy(p, n, 0.1);
  EXPECT_EQ(again->threshold({}, n), 2);
  again->restore_state(pol->save_state());
  EXPECT_EQ(again->threshold({}, n), prev);
  EXPECT_EQ(again->save_state(), pol->save_state());
}

TEST(Policy, SspNeverBuffersAndBoundsStaleness) {
  PolicyOptions p;
  p.kind = "ssp";
  p.s = 3;
  auto pol = make_policy(p, 4, 0.1);
  EXPECT_EQ(pol->name(), "ssp:3");
  EXPECT_EQ(pol->threshold({}, 4), 1);
  EXPECT_FALSE(pol->pusher_waits());
  EXPECT_EQ(pol->staleness_bound(), 3);
  p.kind = "async";
  EXPECT_EQ(make_policy(p, 4, 0.1)->staleness_bound(), -1);
  p.kind = "ssp";
  p.s = -1;
  try {
    make_policy(p, 4, 0.1);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("policy.s = -1"), std::string::npos) << e.what();
  }
  p.s = 0;
  p.schedule.loss_smoothing = 1.0;
  EXPECT_THROW(make_policy(p, 4, 0.1), InputError);
}

}  // namespace
}  // namespace hsgd
