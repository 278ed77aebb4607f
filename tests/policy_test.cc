#include "hsgd/policy/policy.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace hsgd
