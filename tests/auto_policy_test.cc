// The auto policy's controller (policy/auto_policy.h) on synthetic signal
// sequences: no server, no model. Workers push in the order of their own
// periods (arrival times); the loss is a function of time plus noise.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>

#include "hsgd/core/error.h"
#include "hsgd/optim/optimizer.h"
#include "hsgd/policy/auto_policy.h"

namespace hsgd {
namespace {

// Workers with fixed durations, pushing without waiting (each push is also
// when the worker gets new parameters).
struct Feed {
  AutoController* c;
  std::vector<double> period, next;
  std::mt19937_64 rng{7};
  double t = 0;
  Feed(AutoController* ctl, std::vector<double> periods) : c(ctl), period(std::move(periods)) {
    next = period;
  }
  // `n` pushes; loss(t) + N(0, noise); staleness tau.
  void run(int n, const std::function<double(double)>& loss, double noise, int64_t tau = 0) {
    std::normal_distribution<double> z(0, 1);
    for (int i = 0; i < n; ++i) {
      size_t w = 0;
      for (size_t j = 1; j < next.size(); ++j) {
        if (next[j] < next[w]) w = j;
      }
      t = next[w];
      next[w] += period[w];
      PushSignal s;
      s.worker = static_cast<int>(w);
      s.staleness = tau;
      s.loss = loss(t) + noise * z(rng);
      s.seconds = t;
      s.live_workers = static_cast<int>(period.size());
      s.pusher_waits = false;
      c->observe_push(s);
    }
  }
};

const Progress kP{};

TEST(AutoPolicy, StartsAsyncAndStaysAsyncWhileTheLossFallsFast) {
  AutoController c(16, {});
  EXPECT_EQ(c.threshold(kP, 16), 1);
  EXPECT_TRUE(c.pusher_waits());
  Feed f(&c, std::vector<double>(16, 0.1));
  // Cheap, clean gradients: the loss falls steadily and far beyond its noise.
  f.run(4000, [](double t) { return 2.0 * std::exp(-t / 20); }, 0.01);
  EXPECT_EQ(c.k(), 1);
  EXPECT_GT(c.decisions(), 100);
}

TEST(AutoPolicy, AfterARiseAFallingLossBringsKBackToOne) {
  AutoController c(16, {});
  Feed f(&c, std::vector<double>(16, 0.1));
  f.run(200, [](double) { return 1.0; }, 0.01);
  // A jump in the loss (instability): K doubles, more than once.
  f.run(200, [&](double t) { return 1.0 + 5.0 * (t - 1.25); }, 0.01);
  const int raised = c.k();
  EXPECT_GE(raised, 4);
  // Then a steady fall: back down towards async, one step per block.
  f.run(20000, [&](double t) { return 10.0 * std::exp(-(t - 2.5) / 50); }, 0.001);
  EXPECT_EQ(c.k(), 1);
}

TEST(AutoPolicy, ANoisyPlateauWithFastEqualWorkersRaisesKToTheWorkerCount) {
  AutoController c(8, {});
  Feed f(&c, std::vector<double>(8, 0.1));
  f.run(20000, [](double) { return 0.7; }, 0.3);
  EXPECT_EQ(c.k(), 8);
  EXPECT_EQ(c.threshold(kP, 8), 8);
  EXPECT_EQ(c.threshold(kP, 5), 5);  // clamped to the live workers
}

TEST(AutoPolicy, StragglersCapTheGrowthAtTheWorkersThatArriveInTime) {
  AutoController c(8, {});
  // Workers 0-4 take 0.1 s, workers 5-7 take 1 s.
  Feed f(&c, {0.1, 0.1, 0.1, 0.1, 0.1, 1, 1, 1});
  f.run(20000, [](double) { return 0.7; }, 0.3);
  EXPECT_EQ(c.cap(), 5);
  EXPECT_EQ(c.k(), 5);
  // Without the cap part, waiting grows to every worker.
  AutoParts no_cap;
  no_cap.cap = false;
  AutoController d(8, no_cap);
  Feed g(&d, {0.1, 0.1, 0.1, 0.1, 0.1, 1, 1, 1});
  g.run(20000, [](double) { return 0.7; }, 0.3);
  EXPECT_EQ(d.k(), 8);
}

TEST(AutoPolicy, ARisingLossDoublesKUpToTheWorkers) {
  AutoController c(10, {});
  Feed f(&c, std::vector<double>(10, 0.1));
  f.run(100, [](double) { return 1.0; }, 0.01);
  EXPECT_EQ(c.k(), 1);
  f.run(600, [](double t) { return 1.0 + std::exp(t); }, 0.01);
  EXPECT_EQ(c.k(), 10);
  // With the rise part off, the same sequence raises K only by the flat
  // rule's single steps, one per two blocks of four windows of ten pushes.
  AutoParts no_rise;
  no_rise.rise = false;
  AutoController d(10, no_rise);
  Feed g(&d, std::vector<double>(10, 0.1));
  g.run(100, [](double) { return 1.0; }, 0.01);
  g.run(600, [](double t) { return 1.0 + std::exp(t); }, 0.01);
  EXPECT_LE(d.k(), 1 + 600 / (10 * 4 * 2));
  EXPECT_LT(d.k(), c.k());
}

TEST(AutoPolicy, ImplicitMomentumFollowsTheStaleness) {
  AutoController c(25, {});
  Feed f(&c, std::vector<double>(25, 0.1));
  f.run(2000, [](double t) { return 2.0 * std::exp(-t); }, 0.001, 24);
  EXPECT_NEAR(c.staleness(), 24, 1e-9);
  EXPECT_NEAR(c.implicit_momentum(), 24.0 / 25.0, 1e-9);
  AutoParts off;
  off.momentum = false;
  AutoController d(25, off);
  Feed g(&d, std::vector<double>(25, 0.1));
  g.run(100, [](double) { return 1.0; }, 0.01, 24);
  EXPECT_EQ(d.implicit_momentum(), 0.0);
}

// The server's momentum with implicit momentum m: 1 - (1 - mu)/(1 - m).
TEST(AutoPolicy, MomentumOptimizerSubtractsTheImplicitMomentum) {
  OptimizerOptions o;
  o.kind = "momentum";
  o.momentum = 0.9;
  auto step_twice = [&](double m) {
    auto opt = make_optimizer(o, 1);
    opt->set_implicit_momentum(m);
    std::vector<float> w = {0}, g = {1};
    opt->step(w, g, 1.0);
    opt->step(w, g, 1.0);
    return -w[0];  // 1 + (1 + mu')
  };
  EXPECT_NEAR(step_twice(0), 2.9, 1e-6);
  EXPECT_NEAR(step_twice(0.5), 2.8, 1e-6);    // mu' = 1 - 0.1 / 0.5
  EXPECT_NEAR(step_twice(0.96), 2.0, 1e-6);   // mu' = max(0, 1 - 0.1 / 0.04)
}

TEST(AutoPolicy, SaveRestoreContinuesIdentically) {
  AutoController a(8, {}), b(8, {});
  Feed fa(&a, {0.1, 0.1, 0.1, 0.1, 0.2, 0.3, 1, 1});
  fa.run(3000, [](double t) { return 1.0 + 0.1 * std::sin(t); }, 0.2, 3);
  const std::vector<double> st = a.save_state();
  EXPECT_EQ(st.size(), AutoController(3, {}).save_state().size());  // one size for any count
  b.restore_state(st);
  EXPECT_EQ(b.save_state(), st);
  Feed fb = fa;
  fa.c = &a;
  fb.c = &b;
  fa.run(3000, [](double t) { return 1.0 + 0.3 * std::sin(t); }, 0.2, 2);
  fb.run(3000, [](double t) { return 1.0 + 0.3 * std::sin(t); }, 0.2, 2);
  EXPECT_EQ(a.save_state(), b.save_state());
  EXPECT_EQ(a.k(), b.k());
}

TEST(AutoPolicy, AblationPartsAreParsedAndUnknownOnesNamed) {
  const AutoParts p = parse_auto_ablate("rise,momentum");
  EXPECT_FALSE(p.rise);
  EXPECT_FALSE(p.momentum);
  EXPECT_TRUE(p.fall && p.flat && p.cap);
  try {
    parse_auto_ablate("rise,colour");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("policy.auto_ablate"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("colour"), std::string::npos);
  }
  PolicyOptions o;
  o.kind = "auto";
  EXPECT_EQ(make_policy(o, 4, 0.1)->name(), "auto");
}

}  // namespace
}  // namespace hsgd
