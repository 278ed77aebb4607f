// The auto policy's controller (policy/auto_policy.h) on synthetic signal
// sequences: no server, no model. Workers push in the order of their own
// periods (arrival times); the loss is a function of time plus noise.
#include "hsgd/policy/auto_policy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <utility>

#include "hsgd/core/error.h"
#include "hsgd/optim/optimizer.h"
#include "hsgd/policy/policy.h"
#include "hsgd/server/server.h"

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

// A small K-async training run: workers with fixed periods push into a
// buffer; when K (the controller's threshold) pushes are buffered, one
// update is applied and the waiting pushers are released. The loss is a
// state moved by each update towards floor(K) by a fraction eta, plus noise
// on every pushed loss; with `unstable_below` > K an update instead moves the
// loss up by `blowup` (too stale to be stable).
struct Trainer {
  AutoController* c;
  std::vector<double> period;
  std::function<double(int)> floor;  // the loss an update at K heads for
  double eta = 0.05, noise = 0.1, loss = 2.0;
  int unstable_below = 0;
  double blowup = 0.02;
  std::mt19937_64 rng{11};
  double t = 0;
  int64_t version = 0, pushes = 0;
  std::vector<double> next;
  std::vector<int64_t> pulled;
  std::vector<bool> waiting;
  std::vector<int> buffer;
  double k_time = 0;  // integral of K over time, for the time-average K
  int max_k = 0;
  Trainer(AutoController* ctl, std::vector<double> periods, std::function<double(int)> f)
      : c(ctl), period(std::move(periods)), floor(std::move(f)) {
    next = period;
    pulled.assign(period.size(), 0);
    waiting.assign(period.size(), false);
  }
  void run(double seconds) {
    std::normal_distribution<double> z(0, 1);
    const double end = t + seconds;
    const int n = static_cast<int>(period.size());
    while (true) {
      size_t w = period.size();
      for (size_t j = 0; j < period.size(); ++j) {
        if (!waiting[j] && (w == period.size() || next[j] < next[w])) w = j;
      }
      if (next[w] > end) break;
      const int k = c->threshold(kP, n);
      max_k = std::max(max_k, k);
      k_time += k * (next[w] - t);
      t = next[w];
      PushSignal s;
      s.worker = static_cast<int>(w);
      s.staleness = version - pulled[w];
      s.loss = loss + noise * z(rng);
      s.seconds = t;
      s.live_workers = n;
      buffer.push_back(static_cast<int>(w));
      std::vector<int> released;
      if (static_cast<int>(buffer.size()) >= k) {
        if (k < unstable_below) {
          loss += blowup;
        } else {
          loss = floor(k) + (loss - floor(k)) * (1 - eta);
        }
        ++version;
        for (int r : buffer) {
          if (waiting[static_cast<size_t>(r)] || r == static_cast<int>(w)) {
            released.push_back(r);
            waiting[static_cast<size_t>(r)] = false;
            pulled[static_cast<size_t>(r)] = version;
            next[static_cast<size_t>(r)] = t + period[static_cast<size_t>(r)];
          }
        }
        buffer.clear();
        s.pusher_waits = false;
      } else {
        waiting[w] = true;
        s.pusher_waits = true;
      }
      s.released = &released;
      c->observe_push(s);
      ++pushes;
    }
  }
  double mean_k() const { return k_time / t; }
};

// Steps move as far whatever K (mean aggregation) and averaging buys little:
// more updates per second win, async is best (the lr 0.01 cells).
double flat_floor(int) { return 0.5; }
// Averaging K pushes lowers the noise floor a lot (the lr 0.3 cells).
double falling_floor(int k) { return 0.3 + 1.2 / k; }

TEST(AutoPolicy, StaysNearAsyncWhenMoreUpdatesPerSecondWin) {
  AutoController c(16, {});
  EXPECT_EQ(c.threshold(kP, 16), 1);
  EXPECT_TRUE(c.pusher_waits());
  Trainer tr(&c, std::vector<double>(16, 0.1), flat_floor);
  tr.eta = 0.01;  // a slow descent: every update counts
  tr.run(60);
  EXPECT_GT(c.probes(), 3);     // it did try larger K ...
  EXPECT_LT(tr.mean_k(), 1.5);  // ... and spent the run near K = 1
  EXPECT_LE(c.k(), 2);
  EXPECT_EQ(c.rises(), 0);
}

TEST(AutoPolicy, ProbesUpWhenAveragingLowersTheLossFaster) {
  AutoController c(16, {});
  Trainer tr(&c, std::vector<double>(16, 0.1), falling_floor);
  tr.eta = 0.2;
  tr.run(60);
  EXPECT_GE(c.kept(), 3);
  EXPECT_GE(c.k(), 8);
  // Without the up-probes K never leaves 1 (no rise: the loss never rises).
  AutoParts no_up;
  no_up.up = false;
  AutoController d(16, no_up);
  Trainer tr2(&d, std::vector<double>(16, 0.1), falling_floor);
  tr2.eta = 0.2;
  tr2.run(60);
  EXPECT_EQ(d.k(), 1);
  EXPECT_LT(d.probes(), 1);
}

TEST(AutoPolicy, StragglersCapTheUpProbesAtTheWorkersThatArriveInTime) {
  // Workers 0-4 take 0.1 s, workers 5-7 take 1 s.
  const std::vector<double> periods = {0.1, 0.1, 0.1, 0.1, 0.1, 1, 1, 1};
  AutoController c(8, {});
  Trainer tr(&c, periods, falling_floor);
  tr.eta = 0.2;
  tr.run(120);
  EXPECT_EQ(c.cap(), 5);
  EXPECT_GE(c.k(), 2);
  EXPECT_EQ(c.rises(), 0);
  EXPECT_LE(tr.max_k, 5);  // not even a probe waited for a slow worker
  // Without the cap part, the probes may go to every worker.
  AutoParts no_cap;
  no_cap.cap = false;
  AutoController d(8, no_cap);
  Trainer tr2(&d, periods, falling_floor);
  tr2.eta = 0.2;
  tr2.run(120);
  EXPECT_GT(tr2.max_k, 5);
}

TEST(AutoPolicy, ALossAboveTheStartDoublesKAndAWorkingRiseIsKept) {
  // Unstable at K < 2 (the momentum case: async diverges), stable above.
  AutoController c(2, {});
  Trainer tr(&c, {0.1, 0.1}, falling_floor);
  tr.unstable_below = 2;
  tr.loss = 2.3;
  tr.noise = 0.05;
  tr.run(3);
  EXPECT_EQ(c.k(), 2);  // the loss climbed above its start: K doubled
  EXPECT_GE(c.rises(), 1);
  tr.run(100);
  // Down-probes to K = 1 make the loss climb again; K stays at 2.
  EXPECT_GT(c.probes(), 0);
  EXPECT_EQ(c.k(), 2);
  EXPECT_GT(tr.mean_k(), 1.8);
  EXPECT_LT(tr.loss, 1.0);
  // Without the rise part it stays async and diverges.
  AutoParts no_rise;
  no_rise.rise = false;
  AutoController d(2, no_rise);
  Trainer tr2(&d, {0.1, 0.1}, falling_floor);
  tr2.unstable_below = 2;
  tr2.loss = 2.3;
  tr2.noise = 0.05;
  tr2.run(3);
  EXPECT_EQ(d.k(), 1);
  EXPECT_GT(tr2.loss, 2.3);
}

TEST(AutoPolicy, AnUnneededRiseIsUndoneByDownProbes) {
  // A one-off jump in the loss (not K's doing) raises K; K does not matter
  // for the descent afterwards, so the down-probes, which keep a smaller K
  // when it measures no worse, bring it back towards async. The jump (+25 %)
  // is one the window tests see and the spike guard does not (a jump of
  // 50 % or more is a blow-up to it, whose ban is deliberate: see
  // ASpikeMultipliesKAtOnceAndBansSmallerK).
  auto after_jump = [](AutoParts parts, std::vector<int>* ks) {
    AutoController c(16, parts);
    Trainer tr(&c, std::vector<double>(16, 0.1), flat_floor);
    tr.eta = 0.002;
    tr.run(5);
    tr.loss += 0.5;
    tr.run(0.5);
    ks->push_back(c.k());  // right after the jump
    for (int i = 0; i < 60; ++i) {
      tr.run(1);
      ks->push_back(c.k());
    }
    return c.rises();
  };
  std::vector<int> ks;
  EXPECT_GE(after_jump({}, &ks), 1);
  EXPECT_GE(ks.front(), 2);
  EXPECT_EQ(*std::min_element(ks.begin(), ks.end()), 1);
  const double mean_k = std::accumulate(ks.end() - 40, ks.end(), 0.0) / 40;
  EXPECT_LT(mean_k, 1.6);
  // Without the down-probes the rise stays.
  AutoParts no_down;
  no_down.down = false;
  std::vector<int> ks2;
  EXPECT_GE(after_jump(no_down, &ks2), 1);
  EXPECT_GE(*std::min_element(ks2.begin(), ks2.end()), 2);
}

// LeNet-5 at lr 0.1 with 25 async workers: the loss falls, then a few
// pushes jump to 2 to 15 times the starting loss and the network dies within
// ~30 pushes. The spike guard multiplies K by 4 at the second such push and
// no down-probe goes below the new K while the ban lasts.
TEST(AutoPolicy, ASpikeMultipliesKAtOnceAndBansSmallerK) {
  auto blow_up = [](AutoParts parts, int* k_after, int* min_k_later) {
    AutoController c(25, parts);
    Feed f(&c, std::vector<double>(25, 0.1));
    f.run(
        80, [](double t) { return 2.3 - 0.5 * t; }, 0.01);  // a clean, fast descent
    EXPECT_EQ(c.rises(), 0);
    EXPECT_EQ(c.k(), 1);
    f.run(
        2, [](double) { return 4.5; }, 0.01);  // two pushes at ~2x the start
    *k_after = c.k();
    int m = c.k();
    for (int i = 0; i < 40; ++i) {  // then a steady loss: probes may run
      f.run(
          50, [](double) { return 1.5; }, 0.02);
      m = std::min(m, c.k());
    }
    *min_k_later = m;
    return c.rises();
  };
  int k_after = 0, min_later = 0;
  EXPECT_EQ(blow_up({}, &k_after, &min_later), 1);
  EXPECT_EQ(k_after, 4);    // at the second push, not at a window's end
  EXPECT_GE(min_later, 4);  // K < 4 is banned: no down-probe went there
  // Without the spike guard the same two pushes change nothing: diluted in
  // their window of 25, they lift its mean by ~8 %, under the window
  // blow-up test's 10 %.
  AutoParts no_spike;
  no_spike.spike = false;
  EXPECT_EQ(blow_up(no_spike, &k_after, &min_later), 0);
  EXPECT_EQ(k_after, 1);
}

// A blow-up below the arrival-time cap takes K to the cap, not past it (the
// fifth rule's change: LeNet-5 at lr 0.1 spiked at K 6 and the guard took it
// to 24, waiting for stragglers for half the run); one at the cap goes on
// multiplying, so a sustained blow-up still reaches every worker.
TEST(AutoPolicy, ASpikeBelowTheCapStopsAtTheCapAndASecondGoesPastIt) {
  // 8 of 25 workers take 0.1 s, 17 take 1 s: 8 arrive in time. At lr 0.1
  // the staleness budget starts K at 3, so x 4 would be 12, past the cap.
  std::vector<double> periods(25, 1.0);
  for (int w = 0; w < 8; ++w) periods[static_cast<size_t>(w)] = 0.1;
  auto blow_up = [&](AutoParts parts, int* before, int* first, int* second) {
    AutoController c(25, parts, 0.1);
    Feed f(&c, periods);
    f.run(
        200, [](double t) { return 2.3 - 0.05 * t; }, 0.01);  // a clean, slow descent
    EXPECT_EQ(c.rises(), 0);
    EXPECT_EQ(c.cap(), 8);
    *before = c.k();
    f.run(
        2, [](double) { return 4.5; }, 0.01);  // two pushes at ~2x the start
    *first = c.k();
    f.run(
        100, [](double) { return 4.5; }, 0.01);  // the blow-up goes on
    *second = c.k();
  };
  int before = 0, first = 0, second = 0;
  blow_up({}, &before, &first, &second);
  ASSERT_EQ(before, 3);
  EXPECT_EQ(first, 8);   // to the cap, not to 12
  EXPECT_GT(second, 8);  // at the cap, the next spike multiplies past it
  AutoParts no_cap;
  no_cap.spikecap = false;
  blow_up(no_cap, &before, &first, &second);
  ASSERT_EQ(before, 3);
  EXPECT_EQ(first, 12);  // the fourth rule: x 4 whatever the cap
}

TEST(AutoPolicy, TheSpikeGuardStaysQuietOnACleanNoisyDescent) {
  // Per-push noise of 10 % of the loss and bumps of +30 % for a few pushes
  // (what LeNet-5 at lr 0.01 shows under async): no spike.
  AutoParts only_spike;
  only_spike.rise = only_spike.up = only_spike.down = false;
  AutoController c(25, only_spike);
  Feed f(&c, std::vector<double>(25, 0.1));
  int i = 0;
  f.run(
      3000,
      [&i](double t) {
        const double base = 0.5 + 1.8 * std::exp(-t / 4);
        return ++i % 200 < 6 ? 1.3 * base : base;
      },
      0.1);
  EXPECT_EQ(c.rises(), 0);
  EXPECT_EQ(c.k(), 1);
}

// Leaving a plateau, the loss falls faster and faster whatever K is: the
// line through two blocks lies above the curve there, and the old rule kept
// the first up-probe on the curve's account (LeNet-5 at lr 0.01). The curve
// part keeps probes off an accelerating descent.
TEST(AutoPolicy, NoProbeIsKeptOnADescentThatSpeedsUpWhateverK) {
  auto bend = [](AutoParts parts) {
    AutoController c(16, parts);
    Feed f(&c, std::vector<double>(16, 0.1));
    // 2.3 on a plateau, then falling quadratically in time (K plays no part).
    f.run(
        1200, [](double t) { return 2.3 - 0.3 * t * t; }, 0.005);
    return c.kept();
  };
  EXPECT_EQ(bend({}), 0);
  AutoParts no_curve;
  no_curve.curve = false;
  EXPECT_GE(bend(no_curve), 1);
}

TEST(AutoPolicy, AOneWindowBlowUpAboveTheStartDoublesKAtOnce) {
  // A few huge losses in one window (what a diverging step does): the
  // window's own standard error is huge, so only the blow-up test sees it.
  int i = 0;
  auto spike = [&i](double) { return ++i % 176 >= 165 && i % 176 < 168 ? 12.0 : 2.3; };
  // (The spike guard, which would fire at the second of those pushes, is off
  // here: this is the window test.)
  AutoParts windows_only;
  windows_only.spike = false;
  AutoController c(16, windows_only);
  Feed f(&c, std::vector<double>(16, 0.1));
  f.run(160, spike, 0.001);  // up to t = 1.0
  EXPECT_EQ(c.rises(), 0);
  f.run(16, spike, 0.001);
  EXPECT_EQ(c.rises(), 1);
  EXPECT_GE(c.k(), 2);
  AutoParts no_rise;
  no_rise.rise = false;
  no_rise.spike = false;
  AutoController d(16, no_rise);
  Feed g(&d, std::vector<double>(16, 0.1));
  i = 0;
  g.run(176, spike, 0.001);
  EXPECT_EQ(d.rises(), 0);
}

TEST(AutoPolicy, ARisingLossDoublesKUpToTheWorkers) {
  AutoController c(10, {});
  Feed f(&c, std::vector<double>(10, 0.1));
  f.run(
      100, [](double) { return 1.0; }, 0.01);
  EXPECT_EQ(c.rises(), 0);
  EXPECT_LE(c.k(), 2);  // at most a probe
  f.run(
      600, [](double t) { return 1.0 + std::exp(t); }, 0.01);
  EXPECT_EQ(c.k(), 10);
  EXPECT_GE(c.rises(), 4);
  AutoParts no_rise;
  no_rise.rise = false;
  no_rise.spike = false;  // an exponential climb is a blow-up to the spike guard too
  AutoController d(10, no_rise);
  Feed g(&d, std::vector<double>(10, 0.1));
  g.run(
      100, [](double) { return 1.0; }, 0.01);
  g.run(
      600, [](double t) { return 1.0 + std::exp(t); }, 0.01);
  EXPECT_EQ(d.rises(), 0);
  EXPECT_LT(d.k(), c.k());
}

// policy.auto_rule: the sixth rule (and the seventh, the eighth and the ninth, today's,
// here without a budget: lr 0) has
// neither probes nor window rises, and keeps the spike guard; the fifth
// (policy.auto_rule = 5) has both. The same two signal sequences on each.
TEST(AutoPolicy, TheSixthRuleHasNoProbesOrRisesAndKeepsTheSpikeGuard) {
  const auto rule = [](int r, const std::string& ablate = "") {
    PolicyOptions o;
    o.kind = "auto";
    o.auto_rule = r;
    o.auto_ablate = ablate;
    std::unique_ptr<Policy> p = make_policy(o, 16, /*lr=*/0);  // lr 0: no budget
    return std::unique_ptr<AutoController>(dynamic_cast<AutoController*>(p.release()));
  };
  // Averaging lowers the loss faster: the fifth rule's probes take K up.
  for (int r : {5, 6, 7, 8, 9, 10, 11}) {
    SCOPED_TRACE(r);
    std::unique_ptr<AutoController> c = rule(r);
    ASSERT_TRUE(c);
    Trainer tr(c.get(), std::vector<double>(16, 0.1), falling_floor);
    tr.eta = 0.2;
    tr.run(60);
    if (r == 5) {
      EXPECT_GE(c->kept(), 3);
      EXPECT_GE(c->k(), 8);
    } else {
      EXPECT_EQ(c->probes(), 0);
      EXPECT_EQ(c->k(), 1);
    }
  }
  // A loss that climbs for a while (not a blow-up: under the spike line):
  // the fifth rule's window rises double K, the sixth's K stays.
  for (int r : {5, 6, 7, 8, 9, 10, 11}) {
    SCOPED_TRACE(r);
    std::unique_ptr<AutoController> c = rule(r);
    Feed f(c.get(), std::vector<double>(16, 0.1));
    f.run(
        200, [](double) { return 1.0; }, 0.01);
    f.run(
        400, [](double t) { return 1.0 + 0.2 * std::min(1.0, (t - 1.25) / 2.5); }, 0.01);
    EXPECT_EQ(c->rises() > 0, r == 5);
    EXPECT_EQ(c->k() > 1, r == 5);
  }
  // Two pushes far above the start: the spike guard acts under both rules
  // (x 4: every worker arrives in time, so the cap is 16); switched off by
  // policy.auto_ablate, which starts from the rule's own parts, K stays.
  for (const auto& [r, ablate] : std::vector<std::pair<int, std::string>>{
           {5, ""}, {6, ""}, {7, ""}, {8, ""}, {9, ""}, {9, "spike"}}) {
    SCOPED_TRACE(std::to_string(r) + " " + ablate);
    std::unique_ptr<AutoController> c = rule(r, ablate);
    Feed f(c.get(), std::vector<double>(16, 0.1));
    f.run(
        80, [](double t) { return 2.3 - 0.5 * t; }, 0.01);
    f.run(
        2, [](double) { return 4.5; }, 0.01);
    EXPECT_EQ(c->k(), ablate.empty() ? 4 : 1);
  }
  EXPECT_THROW(rule(20), InputError);
  EXPECT_THROW(rule(4), InputError);
}

// The staleness budget: lr x (staleness + 1) <= kBudget. The sixth rule
// (and the fifth: AutoParts{}), before anything is measured, assumes n
// workers in step (staleness + 1 = (n / K + 1) / 2); the seventh, today's,
// n equally fast ones (staleness + 1 = n / K) throughout.
TEST(AutoPolicy, TheStalenessBudgetSetsTheFirstK) {
  const AutoParts seventh = auto_rule_parts(7);
  EXPECT_EQ(AutoController(25, seventh, 0.01).k(), 1);  // 0.01 x 25 / 0.5 = 0.5
  EXPECT_EQ(AutoController(25, seventh, 0.1).k(), 5);
  EXPECT_EQ(AutoController(25, seventh, 0.3).k(), 15);
  EXPECT_EQ(AutoController(25, seventh, 0.5).k(), 25);
  EXPECT_EQ(AutoController(25, seventh, 0).k(), 1);
  EXPECT_EQ(AutoController(25, {}, 0.01).k(), 1);  // 0.01 x 13 = 0.13: async is within it
  EXPECT_EQ(AutoController(25, {}, 0.1).k(), 3);   // 25 / (2 x 0.5 / 0.1 - 1) = 2.8
  EXPECT_EQ(AutoController(25, {}, 0.3).k(), 11);  // 25 / 2.33 = 10.7
  EXPECT_EQ(AutoController(25, {}, 0.5).k(), 25);  // even sync is at the budget
  EXPECT_EQ(AutoController(25, {}, 0).k(), 1);     // lr unknown: no budget
  AutoParts no_budget;
  no_budget.budget = false;
  EXPECT_EQ(AutoController(25, no_budget, 0.3).k(), 1);
  // Sum aggregation: K does not shorten the steps, so make_policy passes no lr.
  PolicyOptions o;
  o.kind = "auto";
  EXPECT_EQ(make_policy(o, 25, 0.3)->threshold(kP, 25), 15);
  o.auto_rule = 6;
  EXPECT_EQ(make_policy(o, 25, 0.3)->threshold(kP, 25), 11);
  o.aggregation = Aggregation::kSum;
  EXPECT_EQ(make_policy(o, 25, 0.3)->threshold(kP, 25), 1);
}

// Where more updates per second win (the flat floor), the probes take K
// down to 1; with the budget, K stays where lr x (staleness + 1) is within
// it, and a down-probe that would leave it is not tried.
TEST(AutoPolicy, TheBudgetHoldsKAgainstDownProbes) {
  auto run = [](AutoParts parts, int* min_k) {
    AutoController c(16, parts, 0.1);
    Trainer tr(&c, std::vector<double>(16, 0.1), flat_floor);
    tr.eta = 0.01;
    int m = c.k();
    for (int i = 0; i < 60; ++i) {
      tr.run(1);
      m = std::min(m, c.k());
    }
    *min_k = m;
    return tr.mean_k();
  };
  int min_k = 0;
  EXPECT_GE(run({}, &min_k), 2.0);
  EXPECT_EQ(min_k, 2);  // 16 / (2 x 0.5 / 0.1 - 1) = 1.8; measured 0.1 x (3.5 + 1) = 0.45
  AutoParts no_budget;
  no_budget.budget = false;
  EXPECT_LT(run(no_budget, &min_k), 1.5);
  EXPECT_EQ(min_k, 1);
}

// Stragglers make the measured staleness larger than the first guess: the
// budget raises K to the floor the measured staleness asks for.
TEST(AutoPolicy, TheBudgetRaisesKToTheMeasuredStaleness) {
  std::vector<double> periods(8, 0.1);
  periods.insert(periods.end(), 8, 1.0);  // 8 fast workers, 8 ten times slower
  AutoController c(16, {}, 0.05);
  EXPECT_EQ(c.k(), 1);  // 16 / 19: async is within the budget if the workers are alike
  Trainer tr(&c, periods, flat_floor);
  tr.eta = 0.01;
  tr.run(2);
  EXPECT_GT(c.staleness() + 1, 0.5 / 0.05);  // but the slow pushes are far staler
  tr.run(60);
  EXPECT_GE(c.k(), 2);
  EXPECT_LE(c.k(), c.cap());
  EXPECT_LE(0.05 * (c.staleness() + 1), 0.5 * 1.1);
  EXPECT_EQ(c.rises(), 0);
}

// policy.auto_ablate = measured (an ablation): the budget counts the
// pushes in flight per update (n / K), not the measured staleness, so the
// same stragglers leave K at the first K.
TEST(AutoPolicy, WithoutMeasuredStalenessTheBudgetKeepsTheConcurrencyK) {
  std::vector<double> periods(8, 0.1);
  periods.insert(periods.end(), 8, 1.0);
  AutoParts parts = auto_rule_parts(6);
  parts.measured = false;
  AutoController c(16, parts, 0.05);
  EXPECT_EQ(c.k(), 1);
  Trainer tr(&c, periods, flat_floor);
  tr.eta = 0.01;
  tr.run(62);
  EXPECT_GT(0.05 * (c.staleness() + 1), 0.5);  // the measured budget would act
  EXPECT_EQ(c.k(), 1);
  // At lr 0.1 the same count asks for K = ceil(16 / 9) = 2 from the start,
  // and keeps it.
  AutoController d(16, parts, 0.1);
  EXPECT_EQ(d.k(), 2);
  Trainer td(&d, periods, flat_floor);
  td.eta = 0.01;
  td.run(62);
  EXPECT_EQ(d.k(), 2);
}

// policy.auto_rule = 7: the budget at the concurrency, staleness + 1 =
// n / K, so K >= lr x n / 0.5 from the start (16 workers: 2 at lr 0.05, 4
// at lr 0.1), and the stragglers' stale pushes, which lift the measured
// staleness past the budget, do not raise it; under the sixth rule they do.
TEST(AutoPolicy, TheSeventhRuleBudgetsTheConcurrencyNotTheMeasuredStaleness) {
  std::vector<double> periods(12, 0.1);
  periods.insert(periods.end(), 4, 1.0);
  for (const double lr : {0.05, 0.1}) {
    SCOPED_TRACE(lr);
    const int floor = lr == 0.05 ? 2 : 4;
    AutoController seventh(16, auto_rule_parts(7), lr);
    AutoController sixth(16, auto_rule_parts(6), lr);
    EXPECT_EQ(seventh.k(), floor);
    Trainer t7(&seventh, periods, flat_floor);
    Trainer t6(&sixth, periods, flat_floor);
    t7.eta = t6.eta = 0.01;
    t7.run(62);
    t6.run(62);
    EXPECT_GT(lr * (seventh.staleness() + 1), 0.5);  // the measured budget would act
    EXPECT_EQ(seventh.k(), floor);
    EXPECT_GT(sixth.k(), floor);
  }
}

// policy.auto_rule = 8: a spike's K is held retry_blocks (16) blocks, then,
// once the loss is back below the loss at the start, K returns to the
// budget's K; a second spike there holds it twice as long. Under the seventh
// rule the spike's K stays for good; with the loss still above the start the
// eighth does not retry either.
TEST(AutoPolicy, TheEighthRuleRetriesASpikesKAfterAHoldThatDoubles) {
  // 25 equal workers, lr 0.1: the budget's K is ceil(0.1 x 25 / 0.5) = 5, a
  // spike takes it to 20; a block is 4 windows of 25 pushes.
  auto run = [](int rule, double after, std::vector<int>* ks) {
    AutoController c(25, auto_rule_parts(rule), 0.1);
    Feed f(&c, std::vector<double>(25, 0.1));
    f.run(
        200, [](double t) { return 2.3 - 0.05 * t; }, 0.01);  // a clean, slow descent
    ks->push_back(c.k());
    f.run(
        2, [](double) { return 4.5; }, 0.01);  // a spike
    ks->push_back(c.k());
    f.run(
        1500, [&](double) { return after; }, 0.01);  // 15 blocks of the hold
    ks->push_back(c.k());
    f.run(
        200, [&](double) { return after; }, 0.01);  // the 16th ends it
    ks->push_back(c.k());
    f.run(
        2, [](double) { return 4.5; }, 0.01);  // a spike at the retried K
    ks->push_back(c.k());
    f.run(
        3100, [&](double) { return after; }, 0.01);  // 31 blocks of a hold of 32
    ks->push_back(c.k());
    f.run(
        200, [&](double) { return after; }, 0.01);
    ks->push_back(c.k());
    return c.rises();
  };
  std::vector<int> eighth, seventh, damaged;
  EXPECT_EQ(run(8, 1.5, &eighth), 2);
  EXPECT_EQ(eighth, (std::vector<int>{5, 20, 20, 5, 20, 20, 5}));
  run(7, 1.5, &seventh);
  EXPECT_EQ(seventh, (std::vector<int>{5, 20, 20, 20, 25, 25, 25}));  // a spike at 20: all
  // Above the start (3.0 against ~2.3) the loss has not recovered: no retry.
  run(8, 3.0, &damaged);
  EXPECT_EQ(damaged, (std::vector<int>{5, 20, 20, 20, 25, 25, 25}));
}

// An auto policy of 25 workers (0.1 s each) through a clean, slow descent,
// then two pushes at ~2x the start and a blow-up that goes on: its K before
// the spike and after (the spike guard's test for the ninth rule on).
std::pair<int, int> spike_response(std::unique_ptr<Policy> p) {
  auto* c = dynamic_cast<AutoController*>(p.get());
  EXPECT_TRUE(c != nullptr);
  if (c == nullptr) return {0, 0};
  Feed f(c, std::vector<double>(25, 0.1));
  f.run(
      200, [](double t) { return 2.3 - 0.05 * t; }, 0.01);  // a clean, slow descent
  const int before = c->k();
  f.run(
      2, [](double) { return 4.5; }, 0.01);  // two pushes at ~2x the start
  f.run(
      200, [](double) { return 4.5; }, 0.01);  // and a blow-up that goes on
  EXPECT_EQ(c->rises() > 0, c->k() > before);
  return {before, c->k()};
}

// policy.auto_rule = 9: where the staleness budget is on, no spike guard:
// the same two pushes far above the start that take the seventh rule's K
// from the budget's 5 to 20 leave the ninth's at 5. Where the budget is off
// (sum aggregation: make_policy passes no rate), or where the steps are not
// plain sgd, the guard acts as before.
TEST(AutoPolicy, TheNinthRuleHasNoSpikeGuardWhereTheBudgetIsOn) {
  PolicyOptions o;
  o.kind = "auto";
  o.auto_rule = 9;
  EXPECT_EQ(spike_response(make_policy(o, 25, 0.1)), (std::pair<int, int>{5, 5}));
  o.auto_rule = 7;
  const auto seventh = spike_response(make_policy(o, 25, 0.1));
  EXPECT_EQ(seventh.first, 5);
  EXPECT_GE(seventh.second, 20);
  o.auto_rule = 9;
  // Steps that are not plain sgd (a momentum optimizer: the server gives its
  // step gain through on_step_gain): the ninth's budget does not model them,
  // the guard is on.
  std::unique_ptr<Policy> momentum = make_policy(o, 25, 0.1);
  momentum->on_step_gain(10);
  const auto heavy = spike_response(std::move(momentum));
  EXPECT_EQ(heavy.first, 5);
  EXPECT_GE(heavy.second, 20);
  o.aggregation = Aggregation::kSum;  // no budget: the guard is on
  const auto sum = spike_response(make_policy(o, 25, 0.1));
  EXPECT_EQ(sum.first, 1);
  EXPECT_GE(sum.second, 4);
}

// The tenth rule (tried, issue 32) counts a step as the server moves the
// parameters: lr x the step gain the server gives (1 / (1 - mu) = 10 with
// momentum 0.9), so its budget asks for ten times the ninth's K there, and
// drops the spike guard wherever the gain is known. With plain sgd (gain 1)
// it is the ninth; with an unknown gain (0: adam) the guard stays and the
// budget counts lr.
TEST(AutoPolicy, TheTenthRuleCountsTheStepMomentumAmplifies) {
  auto make = [](int rule, double gain, double lr) {
    PolicyOptions o;
    o.kind = "auto";
    o.auto_rule = rule;
    std::unique_ptr<Policy> p = make_policy(o, 25, lr);
    p->on_step_gain(gain);
    return p;
  };
  // The first K: lr x gain x n / 0.5.
  EXPECT_EQ(dynamic_cast<AutoController&>(*make(10, 10, 0.01)).k(), 5);
  EXPECT_EQ(dynamic_cast<AutoController&>(*make(9, 10, 0.01)).k(), 1);
  EXPECT_EQ(dynamic_cast<AutoController&>(*make(10, 10, 0.1)).k(), 25);  // at most n
  EXPECT_EQ(dynamic_cast<AutoController&>(*make(10, 1, 0.1)).k(), 5);
  EXPECT_EQ(dynamic_cast<AutoController&>(*make(10, 0, 0.1)).k(), 5);
  // The guard: gone with a known gain, kept with an unknown one.
  EXPECT_EQ(spike_response(make(10, 10, 0.01)), (std::pair<int, int>{5, 5}));
  EXPECT_EQ(spike_response(make(10, 1, 0.1)), spike_response(make(9, 1, 0.1)));
  const auto adam = spike_response(make(10, 0, 0.01));
  EXPECT_EQ(adam.first, 1);
  EXPECT_GE(adam.second, 4);
  const auto ninth_momentum = spike_response(make(9, 10, 0.01));
  EXPECT_EQ(ninth_momentum.first, 1);
  EXPECT_GE(ninth_momentum.second, 4);
}

// The budget may ask for more than the workers that arrive in time; it
// never makes K wait for the slow ones: the first K (set before any
// arrival is known) comes down to the cap after one block.
TEST(AutoPolicy, TheBudgetDoesNotWaitForStragglers) {
  const std::vector<double> periods = {0.1, 0.1, 0.1, 0.1, 0.1, 1, 1, 1};
  AutoController c(8, {}, 0.5);
  EXPECT_EQ(c.k(), 8);
  Trainer tr(&c, periods, flat_floor);
  tr.run(30);
  EXPECT_EQ(c.cap(), 5);
  EXPECT_EQ(c.k(), 5);
  EXPECT_EQ(c.rises(), 0);
}

// The tenth rule brings a first K above the cap down to the cap once every
// worker's arrival time is known (after two rounds: a duration runs from
// a release to the next push), not at the first block's end (four rounds).
// 12 workers at 0.1 s and 4 at 3 s, lr 0.5: the budget's first K is 16, a
// round 3 s (the second ends at 6 s).
TEST(AutoPolicy, TheTenthRuleBringsTheFirstKToTheCapOnceEveryArrivalIsKnown) {
  std::vector<double> periods(12, 0.1);
  periods.insert(periods.end(), 4, 3.0);
  AutoController ninth(16, auto_rule_parts(9), 0.5), tenth(16, auto_rule_parts(10), 0.5);
  EXPECT_EQ(ninth.k(), 16);
  EXPECT_EQ(tenth.k(), 16);
  Trainer a(&ninth, periods, flat_floor), b(&tenth, periods, flat_floor);
  a.run(6.5);
  b.run(6.5);
  EXPECT_EQ(tenth.cap(), 12);
  EXPECT_EQ(tenth.k(), 12);
  EXPECT_EQ(ninth.k(), 16);  // its first block is not over
  a.run(10);
  EXPECT_EQ(ninth.k(), 12);
  b.run(10);
  EXPECT_EQ(tenth.k(), 12);
}

// The early cap acts in the first block only: later, a K above the cap
// (here: the cap falls when 4 of 16 workers slow down, 0.1 s -> 3 s) comes
// down at a block's end, as under the ninth rule, not at the next window.
TEST(AutoPolicy, TheEarlyCapActsInTheFirstBlockOnly) {
  for (int rule : {10, 12, 13, 14}) {
    AutoController c(16, auto_rule_parts(rule), 0.5);
    Trainer tr(&c, std::vector<double>(16, 0.1), flat_floor);
    tr.run(1.35);  // 13 windows (one round each): three blocks and one window
    EXPECT_EQ(c.decisions(), 13) << rule;
    EXPECT_EQ(c.k(), 16) << rule;
    for (size_t w = 12; w < 16; ++w) tr.period[w] = 3.0;
    tr.run(3.5);  // a fast round, then a slow one: the cap is 12
    EXPECT_EQ(c.decisions(), 15) << rule;
    EXPECT_EQ(c.cap(), 12) << rule;
    EXPECT_EQ(c.k(), 16) << rule;  // the block is not over
    tr.run(10);
    EXPECT_EQ(c.k(), 12) << rule;
  }
}

// A controller of rule `rule` on 25 equally fast workers (0.1 s), told the
// server's step gain, after 400 pushes of staleness `tau` on a falling loss.
std::unique_ptr<AutoController> fed_controller(int rule, double lr, double gain, int64_t tau = 24) {
  auto c = std::make_unique<AutoController>(25, auto_rule_parts(rule), lr);
  c->on_step_gain(gain);
  Feed f(c.get(), std::vector<double>(25, 0.1));
  f.run(
      400, [](double t) { return 2.0 * std::exp(-t); }, 0.001, tau);
  return c;
}

// The eleventh rule (tried) is the tenth without the momentum correction:
// the server's momentum stays as configured whatever the staleness, and
// everything else is the tenth's.
TEST(AutoPolicy, TheEleventhRuleLeavesTheServersMomentumAsConfigured) {
  const auto tenth = fed_controller(10, 0.001, 10), eleventh = fed_controller(11, 0.001, 10);
  EXPECT_NEAR(tenth->implicit_momentum(), 24.0 / 25.0, 1e-9);
  EXPECT_EQ(eleventh->implicit_momentum(), 0.0);
  EXPECT_EQ(eleventh->k(), tenth->k());
  EXPECT_EQ(eleventh->spike_guard(), tenth->spike_guard());
  EXPECT_DOUBLE_EQ(eleventh->rate(), tenth->rate());
}

// The twelfth rule (tried) lowers the server's momentum only as far as the
// budget needs: 25 equally fast workers at K = 1, pushes with staleness 24
// (the correction's m = 24 / 25). With momentum 0.9 (gain 10) at lr 0.001
// the step lr x 10 x 25 = 0.25 is within the budget (0.5): no lowering. At
// lr 0.004 it is 1.0, twice the budget: m = 1 - 0.5 / 1.0, so mu' = 1 -
// 0.1 / 0.5 = 0.8 and lr / (1 - mu') x 25 = 0.5. At lr 0.02 with pushes of
// staleness 3 the correction's m (0.75) is below the budget's (0.9) and is
// the one used. The ninth's K, guard and rate.
TEST(AutoPolicy, TheTwelfthRuleLowersTheMomentumOnlyAsFarAsTheBudgetNeeds) {
  auto run = [](int rule, double lr, int64_t tau, double gain = 10) {
    return fed_controller(rule, lr, gain, tau);
  };
  const auto small = run(12, 0.001, 24), large = run(12, 0.004, 24), fresh = run(12, 0.02, 3);
  EXPECT_EQ(small->k(), 1);
  EXPECT_EQ(small->implicit_momentum(), 0.0);
  EXPECT_EQ(large->k(), 1);
  EXPECT_NEAR(large->implicit_momentum(), 0.5, 1e-9);
  EXPECT_EQ(fresh->k(), 1);
  EXPECT_NEAR(fresh->staleness(), 3, 1e-9);
  EXPECT_NEAR(fresh->implicit_momentum(), 0.75, 1e-9);
  const auto ninth = run(9, 0.004, 24);
  EXPECT_NEAR(ninth->implicit_momentum(), 24.0 / 25.0, 1e-9);
  EXPECT_EQ(large->k(), ninth->k());
  EXPECT_EQ(large->spike_guard(), ninth->spike_guard());
  EXPECT_DOUBLE_EQ(large->rate(), ninth->rate());
  // An unknown gain (adam): the full correction, as the ninth.
  EXPECT_NEAR(run(12, 0.004, 24, 0)->implicit_momentum(), 24.0 / 25.0, 1e-9);
}

// The thirteenth rule (tried): with momentum 0.9 (gain 10) on 25 workers,
// lr x 10 x 25 within twice the budget (lr <= 0.004: K <= 2 keeps the
// amplified step within it) raises K to the budget at lr x the gain and
// keeps mu (no implicit momentum subtracted, no spike guard: the
// eleventh); above it (lr 0.006) the ninth: K at lr alone, the staleness
// correction, the guard. Plain sgd: the ninth.
TEST(AutoPolicy, TheThirteenthRuleRaisesKWhereADoublingMeetsTheMomentumsStep) {
  auto run = [](int rule, double lr, double gain) { return fed_controller(rule, lr, gain); };
  for (double lr : {0.001, 0.004}) {
    const auto c = run(13, lr, 10), eleventh = run(11, lr, 10);
    EXPECT_TRUE(c->raises_k()) << lr;
    EXPECT_EQ(c->k(), lr == 0.001 ? 1 : 2) << lr;
    EXPECT_EQ(c->k(), eleventh->k()) << lr;
    EXPECT_EQ(c->implicit_momentum(), 0.0) << lr;
    EXPECT_FALSE(c->spike_guard()) << lr;
  }
  const auto c = run(13, 0.006, 10), ninth = run(9, 0.006, 10);
  EXPECT_FALSE(c->raises_k());
  EXPECT_EQ(c->k(), 1);
  EXPECT_EQ(c->k(), ninth->k());
  EXPECT_NEAR(c->implicit_momentum(), 24.0 / 25.0, 1e-9);
  EXPECT_TRUE(c->spike_guard());
  EXPECT_DOUBLE_EQ(c->rate(), ninth->rate());
  const auto sgd = run(13, 0.1, 1), sgd9 = run(9, 0.1, 1);
  EXPECT_FALSE(sgd->raises_k());
  EXPECT_EQ(sgd->k(), sgd9->k());
  EXPECT_EQ(sgd->spike_guard(), sgd9->spike_guard());
  // The switch is the constant switch_k: at 4, lr 0.006 (K = 3) raises K;
  // at 1, lr 0.004 does not.
  {
    AutoController wide(25, auto_rule_parts(13), 0.006, parse_auto_constants("switch_k=4"));
    wide.on_step_gain(10);
    EXPECT_TRUE(wide.raises_k());
    EXPECT_EQ(wide.k(), 3);
    AutoController narrow(25, auto_rule_parts(13), 0.004, parse_auto_constants("switch_k=1"));
    narrow.on_step_gain(10);
    EXPECT_FALSE(narrow.raises_k());
    EXPECT_EQ(narrow.k(), 1);
  }
  // Two workers: K <= 2 always, whatever the rate; the momentum stays (the
  // momentum case is lr 0.05).
  for (double lr : {0.05, 0.5}) {
    AutoController two(2, auto_rule_parts(13), lr);
    two.on_step_gain(10);
    EXPECT_TRUE(two.raises_k()) << lr;
    EXPECT_EQ(two.k(), 2) << lr;
  }
}

// The fourteenth rule (the rule before the sixteenth) applies the momentum
// correction only where
// lr / (1 - mu) x n / K is above the budget (0.5): 25 workers at K = 1,
// momentum 0.9 (gain 10): at lr 0.002 the step is exactly 0.5, no
// correction; at lr 0.004 it is 1.0, the full correction (24 / 25 at
// staleness 24, where the twelfth subtracts 0.5). The ninth's K, guard
// and rate; an unknown gain: the full correction.
TEST(AutoPolicy, TheFourteenthRuleCorrectsTheMomentumOnlyAboveTheBudget) {
  PolicyOptions o;
  o.kind = "auto";
  o.auto_rule = 14;
  // Through make_policy with the fourteenth rule, and with the ninth's.
  auto implicit = [](const PolicyOptions& po) {
    std::unique_ptr<Policy> p = make_policy(po, 25, 0.002);
    auto* c = dynamic_cast<AutoController*>(p.get());
    EXPECT_TRUE(c != nullptr);
    if (c == nullptr) return -1.0;
    c->on_step_gain(10);
    Feed f(c, std::vector<double>(25, 0.1));
    f.run(
        400, [](double t) { return 2.0 * std::exp(-t); }, 0.001, 24);
    return c->implicit_momentum();
  };
  EXPECT_EQ(implicit(o), 0.0);
  o.auto_rule = 9;
  EXPECT_NEAR(implicit(o), 24.0 / 25.0, 1e-9);
  auto run = [](int rule, double lr, double gain = 10) { return fed_controller(rule, lr, gain); };
  const auto at = run(14, 0.002), above = run(14, 0.004), ninth = run(9, 0.004);
  EXPECT_EQ(at->k(), 1);
  EXPECT_EQ(at->implicit_momentum(), 0.0);
  EXPECT_EQ(above->k(), 1);
  EXPECT_NEAR(above->implicit_momentum(), 24.0 / 25.0, 1e-9);
  EXPECT_NEAR(run(12, 0.004)->implicit_momentum(), 0.5, 1e-9);
  EXPECT_EQ(above->k(), ninth->k());
  EXPECT_TRUE(above->spike_guard());
  EXPECT_EQ(above->spike_guard(), ninth->spike_guard());
  EXPECT_DOUBLE_EQ(above->rate(), ninth->rate());
  EXPECT_NEAR(run(14, 0.002, 0)->implicit_momentum(), 24.0 / 25.0, 1e-9);
}

// The fifteenth rule (tried) is the fourteenth with the spike guard armed
// only after the first block (4 windows of 25 pushes here): two pushes far
// above the start in the first block leave its K where it was, where the
// fourteenth's guard raises K; the same pushes after the first block raise
// both alike. Everything else is the fourteenth's.
TEST(AutoPolicy, TheFifteenthRuleArmsTheSpikeGuardAfterTheFirstBlock) {
  // `before` pushes of a clean, slow descent, two pushes at ~2x the start,
  // then the descent again: K before the two pushes and after.
  auto response = [](int rule, int before) {
    AutoController c(25, auto_rule_parts(rule), 0.1);
    c.on_step_gain(10);  // momentum 0.9: the guard is on under both rules
    Feed f(&c, std::vector<double>(25, 0.1));
    const auto descent = [](double t) { return 2.3 - 0.05 * t; };
    f.run(before, descent, 0.01);
    const int k0 = c.k();
    f.run(
        2, [](double) { return 4.5; }, 0.01);
    f.run(20, descent, 0.01);
    return std::pair<int, int>{k0, c.k()};
  };
  // In the first block (the start is known after the first window's 25).
  const auto early14 = response(14, 40), early15 = response(15, 40);
  EXPECT_EQ(early14.first, early15.first);
  EXPECT_GT(early14.second, early14.first);
  EXPECT_EQ(early15.second, early15.first);
  // After it (more than 4 x 25 pushes).
  const auto late14 = response(14, 120), late15 = response(15, 120);
  EXPECT_GT(late14.second, late14.first);
  EXPECT_EQ(late15, late14);
  // The rest is the fourteenth's.
  const auto a = fed_controller(15, 0.004, 10), b = fed_controller(14, 0.004, 10);
  EXPECT_EQ(a->k(), b->k());
  EXPECT_DOUBLE_EQ(a->implicit_momentum(), b->implicit_momentum());
  EXPECT_EQ(fed_controller(15, 0.002, 10)->implicit_momentum(), 0.0);
  EXPECT_DOUBLE_EQ(a->rate(), b->rate());
}

// The sixteenth rule (the rule before the eighteenth, which is the same
// wherever the steps are not plain sgd): where the fourteenth keeps mu, the spike
// guard's first firing turns the momentum correction on and leaves K; the
// next firing raises K as the fourteenth's first did. The correction stays
// on, and is in the saved state.
TEST(AutoPolicy, TheSixteenthRulesFirstSpikeCorrectsTheMomentum) {
  PolicyOptions o;
  o.kind = "auto";
  EXPECT_EQ(o.auto_rule, 18);  // today's: the sixteenth with momentum
  o.auto_rule = 16;
  {
    // Through make_policy: a spike within the budget corrects.
    std::unique_ptr<Policy> p = make_policy(o, 25, 0.001);
    auto* c = dynamic_cast<AutoController*>(p.get());
    ASSERT_TRUE(c != nullptr);
    c->on_step_gain(10);
    Feed f(c, std::vector<double>(25, 0.1));
    f.run(
        400, [](double t) { return 2.0 * std::exp(-t); }, 0.001, 24);
    EXPECT_EQ(c->implicit_momentum(), 0.0);
    f.run(
        2, [](double) { return 4.5; }, 0.001, 24);
    EXPECT_EQ(c->k(), 1);
    EXPECT_NEAR(c->implicit_momentum(), 24.0 / 25.0, 1e-9);
  }
  // lr 0.001 x gain 10 x 25 workers = 0.25: within the budget at K = 1.
  auto spiked = [](int rule, int spikes, double gain = 10) {
    auto c = fed_controller(rule, 0.001, gain);
    Feed f(c.get(), std::vector<double>(25, 0.1));
    const auto descent = [](double t) { return 2.0 * std::exp(-t) + 0.01 * t; };
    for (int i = 0; i < spikes; ++i) {
      f.run(
          2, [](double) { return 4.5; }, 0.001, 24);
      f.run(40, descent, 0.001, 24);  // more than a round: the guard is armed again
    }
    return c;
  };
  const auto before = fed_controller(16, 0.001, 10);
  ASSERT_EQ(before->k(), 1);
  EXPECT_EQ(before->implicit_momentum(), 0.0);
  EXPECT_FALSE(before->spike_corrected());
  const auto one16 = spiked(16, 1), one14 = spiked(14, 1);
  EXPECT_EQ(one16->k(), 1);
  EXPECT_TRUE(one16->spike_corrected());
  EXPECT_NEAR(one16->implicit_momentum(), 24.0 / 25.0, 1e-9);
  EXPECT_EQ(one14->k(), 4);  // the fourteenth: K x 4 at once
  EXPECT_EQ(one14->implicit_momentum(), 0.0);
  const auto two16 = spiked(16, 2);
  EXPECT_EQ(two16->k(), 4);
  EXPECT_NEAR(two16->implicit_momentum(), 24.0 / 25.0, 1e-9);
  // Saved and restored: the correction stays on.
  const std::vector<double> st = one16->save_state();
  AutoController r(25, auto_rule_parts(16), 0.001);
  r.on_step_gain(10);
  r.restore_state(st);
  EXPECT_TRUE(r.spike_corrected());
  EXPECT_EQ(r.save_state(), st);
  // Plain sgd (no guard) and momentum above the budget (corrected from the
  // start) are the fourteenth's.
  const auto sgd16 = spiked(16, 1, 1), sgd14 = spiked(14, 1, 1);
  EXPECT_EQ(sgd16->save_state(), sgd14->save_state());
  const auto hi16 = fed_controller(16, 0.004, 10), hi14 = fed_controller(14, 0.004, 10);
  EXPECT_EQ(hi16->k(), hi14->k());
  EXPECT_DOUBLE_EQ(hi16->implicit_momentum(), hi14->implicit_momentum());
}

// The seventeenth rule (tried): where mu is kept, two pushes far above the
// start (a bump) change nothing; a window whose mean is above the spike line
// (a round of them) turns the correction on and leaves K. Then the
// per-push guard is back: a later spike raises K. Above the budget, and on
// plain sgd, it is the sixteenth.
TEST(AutoPolicy, TheSeventeenthRuleCorrectsOnAWindowAboveTheLine) {
  auto fed = [](int rule, int high, double gain = 10) {
    auto c = fed_controller(rule, 0.001, gain);
    Feed f(c.get(), std::vector<double>(25, 0.1));
    const auto descent = [](double t) { return 2.0 * std::exp(-t) + 0.01 * t; };
    f.run(
        high, [](double) { return 4.5; }, 0.001, 24);
    f.run(40, descent, 0.001, 24);
    return c;
  };
  // A bump of 3 pushes: the sixteenth corrects, the seventeenth does not.
  const auto bump16 = fed(16, 3), bump17 = fed(17, 3);
  EXPECT_TRUE(bump16->spike_corrected());
  EXPECT_FALSE(bump17->spike_corrected());
  EXPECT_EQ(bump17->k(), 1);
  EXPECT_EQ(bump17->implicit_momentum(), 0.0);
  // Two rounds of them: a whole window above the line.
  const auto round17 = fed(17, 50);
  EXPECT_TRUE(round17->spike_corrected());
  EXPECT_EQ(round17->k(), 1);
  EXPECT_NEAR(round17->implicit_momentum(), 24.0 / 25.0, 1e-9);
  // Then a per-push spike raises K.
  {
    auto c = fed_controller(17, 0.001, 10);
    Feed f(c.get(), std::vector<double>(25, 0.1));
    f.run(
        50, [](double) { return 4.5; }, 0.001, 24);
    f.run(
        40, [](double t) { return 2.0 * std::exp(-t); }, 0.001, 24);
    ASSERT_TRUE(c->spike_corrected());
    ASSERT_EQ(c->k(), 1);
    f.run(
        2, [](double) { return 4.5; }, 0.001, 24);
    EXPECT_EQ(c->k(), 4);
  }
  // Plain sgd (no guard), and momentum above the budget: the sixteenth's.
  EXPECT_EQ(fed(17, 3, 1)->save_state(), fed(16, 3, 1)->save_state());
  const auto hi16 = fed_controller(16, 0.004, 10), hi17 = fed_controller(17, 0.004, 10);
  EXPECT_EQ(hi17->save_state(), hi16->save_state());
}

// policy.auto_rule = 18 (tried): on plain sgd the guard is armed while the
// arrival-time cap holds K below the budget's floor. 5 workers at 0.1 s
// and 3 at 1 s, lr 0.5: the budget's floor is 8, the cap 5; below K = 8 an
// update moves the loss up (too stale to be stable). The sixteenth stays at
// the cap while the loss climbs; the eighteenth's guard fires and takes K
// past the cap to every worker. Where the budget's K is in force (25 equal
// workers, no cap below it) the two rules are the same.
TEST(AutoPolicy, TheEighteenthRuleGuardsWhereTheCapHoldsKBelowTheBudget) {
  const std::vector<double> periods = {0.1, 0.1, 0.1, 0.1, 0.1, 1, 1, 1};
  auto run = [&](int rule) {
    auto c = std::make_unique<AutoController>(8, auto_rule_parts(rule), 0.5);
    Trainer tr(c.get(), periods, flat_floor);
    tr.unstable_below = 8;
    tr.run(60);
    return std::make_pair(std::move(c), tr.loss);
  };
  const auto [sixteenth, loss16] = run(16);
  const auto [eighteenth, loss18] = run(18);
  EXPECT_EQ(sixteenth->cap(), 5);
  EXPECT_EQ(sixteenth->k(), 5);
  EXPECT_EQ(sixteenth->rises(), 0);
  EXPECT_GT(loss16, 3.0);
  EXPECT_EQ(eighteenth->cap(), 5);
  EXPECT_EQ(eighteenth->k(), 8);
  EXPECT_GE(eighteenth->rises(), 1);
  EXPECT_LT(loss18, loss16);
  PolicyOptions o;
  o.kind = "auto";
  o.auto_rule = 18;
  EXPECT_EQ(spike_response(make_policy(o, 25, 0.1)), (std::pair<int, int>{5, 5}));
  // The cap at or above the floor (every worker at 0.1 s): no guard, the
  // sixteenth's run.
  auto same = [](int rule) {
    AutoController c(8, auto_rule_parts(rule), 0.5);
    Trainer tr(&c, std::vector<double>(8, 0.1), flat_floor);
    tr.run(20);
    return c.save_state();
  };
  EXPECT_EQ(same(18), same(16));
}

TEST(AutoPolicy, TheNineteenthRuleBudgetsTheStepsGradientNoise) {
  PolicyOptions o;
  o.kind = "auto";
  o.auto_rule = 19;
  auto first_k = [&](int workers, double lr, int batch) {
    return make_policy(o, workers, lr, batch)->threshold(kP, workers);
  };
  // LeNet-5 on 5 workers with batch 8 at lr 0.082 (lr x n = 0.41, within
  // the budget: the eighteenth is async): the rate counts sqrt(32 / 8) = 2,
  // 0.82 / 0.5 -> K = 2.
  EXPECT_EQ(first_k(5, 0.082, 8), 2);
  EXPECT_EQ(first_k(25, 0.1, 32), 5);   // batch 32: the eighteenth's K
  EXPECT_EQ(first_k(25, 0.1, 128), 3);  // 2.5 x 0.5 / 0.5 = 2.5
  EXPECT_EQ(first_k(25, 0.3, 8), 25);   // 7.5 x 2 / 0.5 = 30, at most n
  EXPECT_EQ(first_k(25, 0.1, 0), 5);    // the batch not given: the eighteenth's
  EXPECT_EQ(first_k(25, 0.01, 8), 1);   // 0.25 x 2 = 0.5: within the budget
  // Every other rule ignores the batch.
  o.auto_rule = 18;
  EXPECT_EQ(first_k(5, 0.082, 8), 1);
  EXPECT_EQ(first_k(25, 0.1, 128), 5);
  // batch_ref is the batch at which the rule is the eighteenth.
  o.auto_rule = 19;
  o.auto_constants = "batch_ref=8";
  EXPECT_EQ(first_k(5, 0.082, 8), 1);
  EXPECT_EQ(first_k(25, 0.1, 32), 3);  // 2.5 x 0.5 / 0.5
  // With server momentum the correction's gate counts the batch too: lr 0.01,
  // mu 0.9 (a step gain of 10), 4 workers, K = 1: lr / (1 - mu) x n = 0.4
  // at batch 32 (within the budget: mu kept), 0.8 at batch 8 (corrected).
  o.auto_constants = "";
  for (const auto& [batch, corrected] : {std::pair{32, false}, std::pair{8, true}}) {
    AutoController c(4, auto_rule_parts(19), 0.01);
    c.set_batch(batch);
    c.on_step_gain(10);
    Feed f(&c, std::vector<double>(4, 0.1));
    f.run(
        200, [](double t) { return 2.0 * std::exp(-t); }, 0.001, 3);
    EXPECT_EQ(c.implicit_momentum() > 0, corrected) << "batch " << batch;
  }
}

TEST(AutoPolicy, ImplicitMomentumFollowsTheStaleness) {
  AutoController c(25, {});
  Feed f(&c, std::vector<double>(25, 0.1));
  f.run(
      2000, [](double t) { return 2.0 * std::exp(-t); }, 0.001, 24);
  EXPECT_NEAR(c.staleness(), 24, 1e-9);
  EXPECT_NEAR(c.implicit_momentum(), 24.0 / 25.0, 1e-9);
  AutoParts off;
  off.momentum = false;
  AutoController d(25, off);
  Feed g(&d, std::vector<double>(25, 0.1));
  g.run(
      100, [](double) { return 1.0; }, 0.01, 24);
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
  EXPECT_NEAR(step_twice(0.5), 2.8, 1e-6);   // mu' = 1 - 0.1 / 0.5
  EXPECT_NEAR(step_twice(0.96), 2.0, 1e-6);  // mu' = max(0, 1 - 0.1 / 0.04)
}

TEST(AutoPolicy, SaveRestoreContinuesIdentically) {
  AutoController a(8, {}), b(8, {});
  Feed fa(&a, {0.1, 0.1, 0.1, 0.1, 0.2, 0.3, 1, 1});
  fa.run(
      3000, [](double t) { return 1.0 + 0.1 * std::sin(t); }, 0.2, 3);
  const std::vector<double> st = a.save_state();
  EXPECT_EQ(st.size(), AutoController(3, {}).save_state().size());  // one size for any count
  b.restore_state(st);
  EXPECT_EQ(b.save_state(), st);
  Feed fb = fa;
  fa.c = &a;
  fb.c = &b;
  fa.run(
      3000, [](double t) { return 1.0 + 0.3 * std::sin(t); }, 0.2, 2);
  fb.run(
      3000, [](double t) { return 1.0 + 0.3 * std::sin(t); }, 0.2, 2);
  EXPECT_EQ(a.save_state(), b.save_state());
  EXPECT_EQ(a.k(), b.k());
  // With the staleness budget on (its flag is in the state), and from the
  // third rule's state, which had one scalar fewer.
  AutoController x(8, {}, 0.5), y(8, {}, 0.5);
  Feed fx(&x, {0.1, 0.1, 0.1, 0.1, 0.2, 0.3, 1, 1});
  fx.run(
      20, [](double) { return 1.0; }, 0.1, 3);
  EXPECT_EQ(x.k(), 8);  // the first K; at the first block's end (32 pushes) the cap is applied
  std::vector<double> sx = x.save_state();
  EXPECT_EQ(sx[37], 1.0);  // K was set by the budget
  y.restore_state(sx);
  Feed fy = fx;
  fy.c = &y;
  fx.run(
      3000, [](double t) { return 1.0 + 0.3 * std::sin(t); }, 0.2, 2);
  fy.run(
      3000, [](double t) { return 1.0 + 0.3 * std::sin(t); }, 0.2, 2);
  EXPECT_EQ(x.save_state(), y.save_state());
  // The fifteenth rule's state and earlier (572 numbers): no sixteenth's
  // flag, read as off; the budget's flag as saved.
  ASSERT_EQ(sx.size(), 573u);
  sx.erase(sx.begin() + 38);
  AutoController w(8, {}, 0.5);
  w.restore_state(sx);
  EXPECT_EQ(w.save_state().size(), sx.size() + 1);
  EXPECT_EQ(w.save_state()[37], 1.0);
  EXPECT_EQ(w.save_state()[38], 0.0);
  // The third rule's (571): neither flag.
  sx.erase(sx.begin() + 37);
  AutoController z(8, {}, 0.5);
  z.restore_state(sx);
  EXPECT_EQ(z.save_state().size(), sx.size() + 2);
  EXPECT_EQ(z.save_state()[37], 0.0);
  EXPECT_EQ(z.k(), 8);
}

// Issue 25, defect 10: the budget reads the rate the server steps with, not
// the optim.lr the runtimes hand make_policy: optim.scale_lr's linear
// scaling, and the lr schedule update by update.
TEST(AutoPolicy, TheBudgetUsesTheRateTheServerStepsWith) {
  const int n = 25;
  std::vector<float> params(4, 0.0f);
  const std::vector<float> grad(4, 0.01f);
  OptimizerOptions oo;
  oo.lr = 0.01;  // 0.01 x 25 = 0.25: within the budget, K = 1 at this rate
  oo.scale_lr = true;
  PolicyOptions po;
  po.kind = "auto";
  auto auto_of = [](const Server& s) -> const AutoController& {
    return dynamic_cast<const AutoController&>(s.policy());
  };
  {
    ServerOptions so;
    so.workers = n;
    so.lr = scaled_lr(oo, n, 32);  // 0.01 x 25 x 32 / 32 = 0.25
    ASSERT_DOUBLE_EQ(so.lr, 0.25);
    Server s(params, so, make_policy(po, n, oo.lr), make_optimizer(oo, params.size()));
    EXPECT_DOUBLE_EQ(auto_of(s).lr(), 0.25);
    EXPECT_EQ(s.threshold(0), 13);  // 0.25 x 25 / 0.5 = 12.5
  }
  {
    // A linear warm-up over 10 updates to 0.3: K starts at the first
    // update's rate (0.03: 0.03 x 25 / 0.5 = 1.5, K = 2), and the rate
    // follows the updates.
    ServerOptions so;
    so.workers = n;
    so.lr = 0.3;
    so.lr_schedule.warmup = 10;
    Server s(params, so, make_policy(po, n, oo.lr), make_optimizer(oo, params.size()));
    EXPECT_DOUBLE_EQ(auto_of(s).lr(), 0.03);
    EXPECT_EQ(s.threshold(0), 2);
    for (int i = 0; s.version() < 12; ++i) {
      const int w = i % n;
      s.on_push(w, s.version(), grad, 32, 1.0, 0.01 * i);
      ASSERT_DOUBLE_EQ(auto_of(s).lr(),
                       lr_at(so.lr_schedule, so.lr, static_cast<int64_t>(s.version())));
    }
    EXPECT_DOUBLE_EQ(auto_of(s).lr(), 0.3);
  }
  {
    // Sum aggregation: the budget stays off whatever rate the server has.
    ServerOptions so;
    so.workers = n;
    so.lr = 0.3;
    so.aggregation = Aggregation::kSum;
    po.aggregation = Aggregation::kSum;
    Server s(params, so, make_policy(po, n, oo.lr), make_optimizer(oo, params.size()));
    EXPECT_EQ(s.threshold(0), 1);
    EXPECT_EQ(auto_of(s).budget_floor(), 1);
  }
}

// A stand-in that saves a given policy state, to write a server checkpoint
// holding an older format's auto state.
class SavedState final : public Policy {
 public:
  explicit SavedState(std::vector<double> s) : s_(std::move(s)) {}
  std::string name() const override { return "auto"; }
  int threshold(const Progress&, int) const override { return 1; }
  bool pusher_waits() const override { return true; }
  std::vector<double> save_state() const override { return s_; }

 private:
  std::vector<double> s_;
};

// Issue 25, defect 6: the third rule's 571-number auto state reads through
// Server::load (the way a checkpoint is read), with the budget's flag off;
// a state of any other size is still refused with a clear error.
TEST(AutoPolicy, AServerCheckpointOfTheThirdRuleReads) {
  AutoController x(8, {}, 0.5);
  Feed fx(&x, {0.1, 0.1, 0.1, 0.1, 0.2, 0.3, 1, 1});
  fx.run(
      200, [](double t) { return 1.0 + 0.1 * std::sin(t); }, 0.1, 3);
  std::vector<double> old = x.save_state();
  ASSERT_EQ(old.size(), 573u);
  old.erase(old.begin() + 37, old.begin() + 39);  // the third rule had neither flag
  std::vector<float> params = {1, 2, 3};
  OptimizerOptions oo;
  ServerOptions so;
  so.workers = 8;
  so.lr = 0.5;
  PolicyOptions po;
  po.kind = "auto";
  auto saved_by = [&](std::vector<double> state) {
    std::vector<float> p = params;
    Server a(p, so, std::make_unique<SavedState>(std::move(state)), make_optimizer(oo, 3));
    StateWriter w;
    a.save(w);
    return w.take();
  };
  const std::string bytes = saved_by(old);
  std::vector<float> p = {0, 0, 0};
  Server b(p, so, make_policy(po, 8, 0.5), make_optimizer(oo, 3));
  StateReader r(bytes, "server.bin");
  ASSERT_NO_THROW(b.load(r));
  r.expect_end();
  std::vector<double> expect = old;
  expect.insert(expect.begin() + 37, {0.0, 0.0});
  EXPECT_EQ(b.policy().save_state(), expect);
  EXPECT_EQ(p, params);
  std::vector<double> other = old;
  other.pop_back();  // 570: no format of auto
  const std::string bad = saved_by(other);
  Server c(p, so, make_policy(po, 8, 0.5), make_optimizer(oo, 3));
  StateReader rb(bad, "server.bin");
  try {
    c.load(rb);
    FAIL() << "a 570-number auto state was read";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("policy state"), std::string::npos) << e.what();
  }
}

TEST(AutoPolicy, AblationPartsAreParsedAndUnknownOnesNamed) {
  const AutoParts p = parse_auto_ablate("rise,momentum");
  EXPECT_FALSE(p.rise);
  EXPECT_FALSE(p.momentum);
  EXPECT_TRUE(p.up && p.down && p.cap);
  const AutoParts q = parse_auto_ablate("up,down,cap");
  EXPECT_FALSE(q.up || q.down || q.cap);
  EXPECT_TRUE(q.rise && q.momentum && q.spike && q.curve);
  const AutoParts r = parse_auto_ablate("spike,curve");
  EXPECT_FALSE(r.spike || r.curve);
  EXPECT_TRUE(r.rise && r.up && r.down && r.cap && r.momentum && r.budget);
  EXPECT_FALSE(parse_auto_ablate("budget").budget);
  const AutoParts sc = parse_auto_ablate("spikecap");
  EXPECT_FALSE(sc.spikecap);
  EXPECT_TRUE(sc.spike && sc.budget && sc.cap);
  const AutoParts me = parse_auto_ablate("measured");
  EXPECT_FALSE(me.measured);
  EXPECT_TRUE(me.budget && me.spike && me.cap);
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

// policy.auto_constants (sensitivity studies): each constant by name, and
// the rule uses the values given.
std::string fmt(double v) {
  std::ostringstream o;
  o << v;
  return o.str();
}

// scripts/auto-sensitivity.py keeps its own list of the constants (name,
// the rule's value, whether it is a count) and of today's rule: it halves
// and doubles each, so a list that drifts from AutoConstants would study
// values the rule does not use.
TEST(AutoPolicy, TheSensitivityScriptListsTheRulesConstantsAndDefault) {
  std::ifstream f(std::string(HSGD_SOURCE_DIR) + "/scripts/auto-sensitivity.py");
  ASSERT_TRUE(f) << "scripts/auto-sensitivity.py";
  const std::string text((std::istreambuf_iterator<char>(f)), {});
  const size_t begin = text.find("\nCONSTANTS = [");
  ASSERT_NE(begin, std::string::npos);
  const size_t end = text.find("\n]", begin);
  const std::string list = text.substr(begin, end - begin);
  // Entries ("name", value, True|False), read by hand (GCC 12 warns inside
  // <regex> under the sanitizer presets).
  std::vector<std::pair<std::string, double>> script;
  std::vector<bool> counts;
  for (size_t at = list.find("(\""); at != std::string::npos; at = list.find("(\"", at + 1)) {
    const size_t close = list.find(')', at);
    ASSERT_NE(close, std::string::npos);
    std::string entry = list.substr(at + 1, close - at - 1);  // "name", value, True
    std::replace(entry.begin(), entry.end(), ',', ' ');
    std::istringstream in(entry);
    std::string name, value, kind;
    ASSERT_TRUE(in >> name >> value >> kind) << entry;
    script.emplace_back(name.substr(1, name.size() - 2), std::stod(value));
    counts.push_back(kind == "True");
  }
  const auto defaults = auto_constant_values(parse_auto_constants(""));
  EXPECT_EQ(script, defaults) << "update CONSTANTS in scripts/auto-sensitivity.py";
  for (size_t i = 0; i < script.size() && i < defaults.size(); ++i) {
    // A count refuses a fraction ("expects a whole number"), a real takes one.
    bool takes_half = true;
    try {
      parse_auto_constants(defaults[i].first + "=1.5");
    } catch (const InputError&) {
      takes_half = false;
    }
    EXPECT_EQ(counts[i], !takes_half) << defaults[i].first;
  }
  const size_t rule = text.find("\nDEFAULT_RULE = ");
  ASSERT_NE(rule, std::string::npos);
  EXPECT_EQ(std::stoi(text.substr(rule + 16)), PolicyOptions{}.auto_rule);
}

TEST(AutoPolicy, ConstantsAreParsedCheckedAndNamed) {
  const AutoConstants d = parse_auto_constants("");
  const auto defaults = auto_constant_values(d);
  ASSERT_EQ(defaults.size(), 18u);
  EXPECT_EQ(defaults.front(), (std::pair<std::string, double>("min_window", 8)));
  EXPECT_EQ(defaults.back(), (std::pair<std::string, double>("batch_ref", 32)));
  const AutoConstants c = parse_auto_constants("rise_sigmas=1.25,spike_factor=8,budget=0.25");
  EXPECT_EQ(c.rise_sigmas, 1.25);
  EXPECT_EQ(c.spike_factor, 8);
  EXPECT_EQ(c.budget, 0.25);
  EXPECT_EQ(c.gap_max, d.gap_max);              // the rest keep the rule's values
  for (const auto& [name, value] : defaults) {  // every name reads back, alone
    const auto doubled = auto_constant_values(parse_auto_constants(name + "=" + fmt(2 * value)));
    for (size_t i = 0; i < defaults.size(); ++i) {
      EXPECT_DOUBLE_EQ(doubled[i].second,
                       defaults[i].first == name ? 2 * value : defaults[i].second)
          << name << " -> " << defaults[i].first;
    }
  }
  auto refused = [](const std::string& s, const std::string& part) {
    try {
      parse_auto_constants(s);
      ADD_FAILURE() << s;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("policy.auto_constants"), std::string::npos) << s;
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  refused("colour=2", "unknown constant 'colour'");
  refused("rise_sigmas", "expected name=value");
  refused("rise_sigmas=two", "expects a number");
  refused("rise_sigmas=0", "> 0");
  refused("budget=-1", "> 0");
  refused("gap_min=1.5", "whole number");
  refused("min_window=0", "whole number");
  refused("gap_min=32", "above gap_max");
  refused("spike_factor=1", ">= 2");
  PolicyOptions o;
  o.kind = "auto";
  o.auto_constants = "rise_sigmas=nan";
  EXPECT_THROW(make_policy(o, 4, 0.1), InputError);
}

TEST(AutoPolicy, TheRuleUsesTheConstantsGiven) {
  // The first K from the budget: 25 / (2 x budget / lr - 1).
  AutoConstants half;
  half.budget = 0.25;
  EXPECT_EQ(AutoController(25, {}, 0.1).k(), 3);        // 25 / 9 = 2.8
  EXPECT_EQ(AutoController(25, {}, 0.1, half).k(), 7);  // 25 / 4 = 6.25
  // The spike guard multiplies K by spike_factor.
  auto spiked_k = [](AutoConstants k) {
    AutoController c(25, {}, 0, k);
    Feed f(&c, std::vector<double>(25, 0.1));
    f.run(
        80, [](double t) { return 2.3 - 0.5 * t; }, 0.01);
    f.run(
        2, [](double) { return 4.5; }, 0.01);
    return c.k();
  };
  AutoConstants eight;
  eight.spike_factor = 8;
  EXPECT_EQ(spiked_k({}), 4);
  EXPECT_EQ(spiked_k(eight), 8);
  // Through make_policy, as a config gives them.
  PolicyOptions o;
  o.kind = "auto";
  o.auto_constants = "budget=0.25";
  EXPECT_EQ(make_policy(o, 25, 0.1)->threshold(kP, 25), 10);  // 0.1 x 25 / 0.25
}

}  // namespace
}  // namespace hsgd
