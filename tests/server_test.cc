// Drives the server state machine with scripted pushes: no threads, no clock.
#include "hsgd/server/server.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <deque>
#include <string>
#include <string_view>
#include <vector>

#include "hsgd/core/error.h"
#include "hsgd/policy/auto_policy.h"

namespace hsgd {
namespace {

struct Rig {
  std::vector<float> params;
  std::unique_ptr<Server> server;
  Rig(int workers, PolicyOptions po, double lr = 0.1, size_t n = 2,
      Aggregation agg = Aggregation::kMean, ServerOptions so = {},
      OptimizerOptions oo = {.kind = "sgd"}) {
    params.assign(n, 0.0f);
    so.workers = workers;
    so.lr = lr;
    so.aggregation = agg;
    so.samples_per_epoch = 100;
    po.aggregation = agg;
    oo.lr = lr;
    server =
        std::make_unique<Server>(params, so, make_policy(po, workers, lr), make_optimizer(oo, n));
  }
  Decision push(int w, std::vector<float> g, uint64_t v = UINT64_MAX) {
    if (v == UINT64_MAX) v = server->version();
    return server->on_push(w, v, g, 1, 0.5, 0.0);
  }
};

PolicyOptions kind(const char* k, int K = 0) {
  PolicyOptions p;
  p.kind = k;
  p.k = K;
  return p;
}

TEST(Server, AsyncAppliesEveryPushAndNobodyWaits) {
  Rig r(3, kind("async"));
  for (int i = 0; i < 6; ++i) {
    Decision d = r.push(i % 3, {1.0f, 2.0f}, 0);
    EXPECT_TRUE(d.applied);
    EXPECT_FALSE(d.caller_waits);
    EXPECT_TRUE(d.released.empty());
    EXPECT_EQ(d.version, static_cast<uint64_t>(i + 1));
  }
  // All computed from version 0: staleness 0,1,...,5.
  ServerStats s = r.server->take_stats();
  EXPECT_EQ(s.updates, 6);
  EXPECT_EQ(s.staleness_max, 5);
  EXPECT_DOUBLE_EQ(s.staleness_sum, 15.0);
  EXPECT_NEAR(r.params[0], -0.6f, 1e-6);
  const std::vector<int64_t>& h = r.server->staleness_histogram();
  ASSERT_EQ(h.size(), Server::kStalenessBuckets);
  for (int tau = 0; tau < 6; ++tau) EXPECT_EQ(h[static_cast<size_t>(tau)], 1) << tau;
  EXPECT_EQ(h[6], 0);
}

// train.noise_scale: the server pairs every finite push as pushed (a push
// the staleness filter drops included, a non-finite one not), before the
// mitigations; off, it pairs nothing.
TEST(Server, PairsFinitePushesForTheNoiseScaleWhenOn) {
  ServerOptions so;
  so.noise_scale = true;
  so.staleness.tau_max = 0;  // drops every stale push
  so.staleness.scaled_lr = true;
  Rig r(2, kind("async"), 0.1, 2, Aggregation::kMean, so);
  r.push(0, {1.0f, 0.0f}, 0);
  r.push(1, {0.0f, 1.0f}, 0);  // stale by 1: dropped, still paired
  r.push(0, {std::nanf(""), 0.0f});
  r.push(0, {1.0f, 1.0f});
  r.push(1, {1.0f, 1.0f});
  const NoiseSums s = r.server->take_noise();
  ASSERT_EQ(s.pairs, 2);
  // (1,0) with (0,1): |G|^2 = 2 x 0.5 - 1 = 0; the two (1,1): |G|^2 = 2.
  EXPECT_DOUBLE_EQ(s.norm, 2.0);
  EXPECT_DOUBLE_EQ(s.trace, 2.0 * 1 * (1.0 - 0.5));
  // The first pair from version 0 twice; the second from versions 1 and 2.
  EXPECT_DOUBLE_EQ(s.lag, 1.0);
  EXPECT_EQ(r.server->take_stats().dropped, 1);
  Rig off(2, kind("async"));
  off.push(0, {1.0f, 0.0f});
  off.push(1, {0.0f, 1.0f});
  EXPECT_EQ(off.server->take_noise().pairs, 0);
}

// The server tells its policy its optimizer's step gain (issue 32): auto's
// ninth rule keeps its spike guard wherever the steps are not plain sgd,
// the tenth only where the gain is unknown (adam, adagrad), and counts its
// budget at lr x the gain (momentum 0.9: 10 x lr).
TEST(Server, TellsThePolicyItsOptimizersStepGain) {
  struct Case {
    const char* kind;
    bool ninth_guard, tenth_guard;
    double tenth_rate;
  };
  for (const Case& c : {Case{"sgd", false, false, 0.01}, Case{"momentum", true, false, 0.1},
                        Case{"nesterov", true, false, 0.1}, Case{"adam", true, true, 0.01},
                        Case{"adagrad", true, true, 0.01}}) {
    SCOPED_TRACE(c.kind);
    PolicyOptions po = kind("auto");
    Rig ninth(8, po, 0.01, 2, Aggregation::kMean, {}, {.kind = c.kind, .momentum = 0.9});
    const auto* a = dynamic_cast<const AutoController*>(&ninth.server->policy());
    ASSERT_NE(a, nullptr);
    EXPECT_EQ(a->spike_guard(), c.ninth_guard);
    EXPECT_DOUBLE_EQ(a->rate(), 0.01);
    po.auto_rule = 10;
    Rig tenth(8, po, 0.01, 2, Aggregation::kMean, {}, {.kind = c.kind, .momentum = 0.9});
    a = dynamic_cast<const AutoController*>(&tenth.server->policy());
    ASSERT_NE(a, nullptr);
    EXPECT_EQ(a->spike_guard(), c.tenth_guard);
    EXPECT_NEAR(a->rate(), c.tenth_rate, 1e-12);
    // The budget's first K at that rate: lr x gain x 8 / 0.5.
    EXPECT_EQ(a->k(), c.tenth_rate > 0.05 ? 2 : 1);
  }
}

TEST(Server, SyncFiresOnePushFromEveryWorkerAndReleasesTheWaiters) {
  Rig r(3, kind("sync"));
  Decision a = r.push(0, {3.0f, 0.0f});
  EXPECT_FALSE(a.applied);
  EXPECT_TRUE(a.caller_waits);
  Decision b = r.push(2, {0.0f, 3.0f});
  EXPECT_FALSE(b.applied);
  EXPECT_TRUE(b.caller_waits);
  Decision c = r.push(1, {3.0f, 3.0f});
  EXPECT_TRUE(c.applied);
  EXPECT_FALSE(c.caller_waits);
  EXPECT_EQ(c.released, (std::vector<int>{0, 2}));
  EXPECT_EQ(c.version, 1u);
  // Mean of the pushes: (2, 2) * lr.
  EXPECT_NEAR(r.params[0], -0.2f, 1e-6);
  EXPECT_NEAR(r.params[1], -0.2f, 1e-6);
  EXPECT_EQ(r.server->take_stats().staleness_max, 0);
}

TEST(Server, SyncWithOneWorkerIsSequentialSgd) {
  Rig r(1, kind("sync"), 0.05, 3);
  std::vector<float> w(3, 0.0f);
  for (int step = 0; step < 20; ++step) {
    // Gradient of 0.5 * |w - t|^2 with a moving target.
    std::vector<float> g(3);
    for (int i = 0; i < 3; ++i) g[i] = r.params[i] - static_cast<float>(step % 4 + i);
    Decision d = r.push(0, g);
    ASSERT_TRUE(d.applied);
    ASSERT_FALSE(d.caller_waits);
    for (int i = 0; i < 3; ++i) w[i] -= 0.05f * (w[i] - static_cast<float>(step % 4 + i));
    for (int i = 0; i < 3; ++i) ASSERT_FLOAT_EQ(r.params[i], w[i]) << "step " << step;
  }
}

TEST(Server, SyncWithNWorkersIsOneStepOnTheMeanGradient) {
  const int n = 4;
  Rig r(n, kind("sync"), 0.1, 2);
  std::vector<std::vector<float>> gs = {{1, 2}, {3, 4}, {5, 6}, {7, 8}};
  for (int w = 0; w < n; ++w) r.push(w, gs[w]);
  EXPECT_EQ(r.server->version(), 1u);
  EXPECT_FLOAT_EQ(r.params[0], -0.1f * 4.0f);
  EXPECT_FLOAT_EQ(r.params[1], -0.1f * 5.0f);
}

TEST(Server, SumAggregationKeepsEachGradientsFullStep) {
  Rig r(2, kind("sync"), 0.1, 1, Aggregation::kSum);
  r.push(0, {1.0f});
  r.push(1, {3.0f});
  EXPECT_FLOAT_EQ(r.params[0], -0.4f);
}

TEST(Server, KasyncWithKEqualOneBehavesAsAsync) {
  Rig a(3, kind("async"));
  Rig k(3, kind("kasync", 1));
  const int order[] = {0, 2, 1, 1, 0, 2, 2};
  for (int w : order) {
    Decision da = a.push(w, {1.0f, -1.0f}, 0);
    Decision dk = k.push(w, {1.0f, -1.0f}, 0);
    EXPECT_EQ(da.applied, dk.applied);
    EXPECT_EQ(da.caller_waits, dk.caller_waits);
    EXPECT_EQ(da.released, dk.released);
    EXPECT_EQ(da.version, dk.version);
  }
  EXPECT_EQ(a.params, k.params);
}

TEST(Server, KasyncWithKEqualNBehavesAsSync) {
  Rig s(3, kind("sync"));
  Rig k(3, kind("kasync", 3));
  for (int round = 0; round < 3; ++round) {
    for (int w : {2, 0, 1}) {
      Decision ds = s.push(w, {static_cast<float>(w), 1.0f});
      Decision dk = k.push(w, {static_cast<float>(w), 1.0f});
      EXPECT_EQ(ds.applied, dk.applied);
      EXPECT_EQ(ds.caller_waits, dk.caller_waits);
      EXPECT_EQ(ds.released, dk.released);
      EXPECT_EQ(ds.version, dk.version);
    }
  }
  EXPECT_EQ(s.params, k.params);
}

TEST(Server, KasyncWaitsForTheUpdateContainingThePushOthersKeepGoing) {
  Rig r(4, kind("kasync", 2));
  Decision a = r.push(3, {1, 1});
  EXPECT_TRUE(a.caller_waits);
  EXPECT_FALSE(a.applied);
  Decision b = r.push(1, {1, 1});
  EXPECT_TRUE(b.applied);
  EXPECT_FALSE(b.caller_waits);
  EXPECT_EQ(b.released, std::vector<int>{3});
  // Workers 0 and 2 computed from version 0; applied at version 1: staleness 1.
  r.push(0, {1, 1}, 0);
  Decision c = r.push(2, {1, 1}, 0);
  EXPECT_TRUE(c.applied);
  EXPECT_EQ(c.released, std::vector<int>{0});
  ServerStats s = r.server->take_stats();
  EXPECT_EQ(s.staleness_max, 1);
  EXPECT_DOUBLE_EQ(s.staleness_sum, 2.0);
  EXPECT_EQ(s.updates, 2);
}

TEST(Server, KbatchCountsSeveralPushesOfOneWorkerAndNobodyWaits) {
  Rig r(4, kind("kbatch", 3));
  EXPECT_FALSE(r.push(0, {1, 0}).applied);
  EXPECT_FALSE(r.push(0, {1, 0}).caller_waits);
  Decision d = r.push(0, {1, 0});
  EXPECT_TRUE(d.applied);
  EXPECT_TRUE(d.released.empty());
  EXPECT_FLOAT_EQ(r.params[0], -0.1f);
}

TEST(Server, HybridStepScheduleRaisesKEveryStepUpdates) {
  PolicyOptions p = kind("hybrid");
  p.schedule.kind = "step";
  p.schedule.step = 2;  // K = 1 + floor(V / 2)
  Rig r(3, p);
  std::vector<int> ks;
  int w = 0;
  while (r.server->version() < 8) {
    ks.push_back(r.server->threshold(0));
    Decision d = r.push(w, {1, 1});
    // Release bookkeeping is the runtime's; here every worker pushes in turn.
    w = (w + 1) % 3;
    (void)d;
  }
  // K before each push: 1,1 (V=0,1) then 2,2 (V=2..3) then 3 (capped at n=3).
  EXPECT_EQ(ks.front(), 1);
  EXPECT_EQ(r.server->threshold(0), 3);
  EXPECT_EQ(r.server->take_stats().updates, 8);
}

TEST(Server, LeavingReleasesTheLeaverAndMayFireTheBuffer) {
  Rig r(3, kind("sync"));
  r.push(0, {1, 1});
  r.push(1, {1, 1});
  EXPECT_EQ(r.server->version(), 0u);
  Decision d = r.server->on_leave(2, 0.0);
  EXPECT_TRUE(d.applied);
  EXPECT_EQ(d.released, (std::vector<int>{0, 1}));
  EXPECT_EQ(r.server->live_workers(), 2);
  // Next round needs only the two live workers.
  r.push(0, {1, 1});
  EXPECT_TRUE(r.push(1, {1, 1}).applied);
  // A waiting worker that leaves is released.
  r.push(0, {1, 1});
  Decision l = r.server->on_leave(0, 0.0);
  EXPECT_EQ(l.released, std::vector<int>{0});
  // Rejoin counts again.
  r.server->on_join(0, 0.0);
  EXPECT_EQ(r.server->live_workers(), 2);
}

TEST(Server, StatsCountSamplesAndLoss) {
  Rig r(2, kind("async"));
  r.server->on_push(0, 0, std::vector<float>{0, 0}, 32, 2.0, 0.0);
  r.server->on_push(1, 0, std::vector<float>{0, 0}, 32, 1.0, 0.0);
  ServerStats s = r.server->take_stats();
  EXPECT_EQ(s.samples, 64);
  EXPECT_DOUBLE_EQ(s.loss_sum / s.loss_count, 1.5);
  EXPECT_DOUBLE_EQ(r.server->progress(0).epochs, 0.64);
  EXPECT_EQ(r.server->take_stats().pushes, 0);
}

PolicyOptions ssp(int s) {
  PolicyOptions p;
  p.kind = "ssp";
  p.s = s;
  return p;
}

TEST(Server, SspBlocksExactlyTheWorkersMoreThanSAheadOfTheSlowest) {
  Rig r(4, ssp(1));
  // Clocks 4, 3, 2, 2: every push is an update and no pusher waits.
  const int pushes[4] = {4, 3, 2, 2};
  for (int w = 0; w < 4; ++w) {
    for (int i = 0; i < pushes[w]; ++i) {
      Decision d = r.push(w, {1, 1});
      EXPECT_TRUE(d.applied);
      EXPECT_FALSE(d.caller_waits);
      EXPECT_TRUE(d.released.empty());
    }
    EXPECT_EQ(r.server->clock(w), pushes[w]);
  }
  // Only worker 0 is more than s = 1 ahead of the slowest (2).
  const uint64_t v = r.server->version();
  Decision p0 = r.server->on_pull(0);
  EXPECT_TRUE(p0.caller_waits);
  EXPECT_EQ(p0.version, v);
  for (int w = 1; w < 4; ++w) EXPECT_FALSE(r.server->on_pull(w).caller_waits) << w;
  // Worker 2 catches up, but 3 still holds the minimum at 2.
  EXPECT_TRUE(r.push(2, {1, 1}).released.empty());
  // Worker 3 raises the minimum to 3: worker 0 (clock 4) may pull now.
  Decision d = r.push(3, {1, 1});
  EXPECT_EQ(d.released, std::vector<int>{0});
  EXPECT_FALSE(r.server->on_pull(0).caller_waits);
  EXPECT_EQ(r.server->version(), v + 2);
}

TEST(Server, SspZeroRunsInLockstepLikeBsp) {
  Rig r(3, ssp(0));
  for (int round = 0; round < 3; ++round) {
    for (int w = 0; w < 3; ++w) {
      EXPECT_FALSE(r.server->on_pull(w).caller_waits) << round << " " << w;
    }
    for (int w = 0; w < 3; ++w) {
      Decision d = r.push(w, {1, 1});
      EXPECT_FALSE(d.caller_waits);
      if (w < 2) {
        EXPECT_TRUE(d.released.empty());
        // One push ahead of the slowest: the next pull waits.
        EXPECT_TRUE(r.server->on_pull(w).caller_waits);
      } else {
        // The last of the round releases the other two.
        EXPECT_EQ(d.released, (std::vector<int>{0, 1}));
      }
    }
    for (int w = 0; w < 3; ++w) EXPECT_EQ(r.server->clock(w), round + 1);
  }
}

TEST(Server, SspLeavingSlowWorkerReleasesTheWaitersAndJoinersDoNotBlock) {
  Rig r(3, ssp(0));
  r.push(0, {1, 1});
  r.push(1, {1, 1});
  EXPECT_TRUE(r.server->on_pull(0).caller_waits);
  EXPECT_TRUE(r.server->on_pull(1).caller_waits);
  // Worker 2 (clock 0) leaves: the minimum over live workers becomes 1.
  Decision d = r.server->on_leave(2, 0.0);
  EXPECT_EQ(d.released, (std::vector<int>{0, 1}));
  EXPECT_FALSE(r.server->on_pull(0).caller_waits);
  // A pull-waiter that leaves is released itself.
  r.push(0, {1, 1});
  EXPECT_TRUE(r.server->on_pull(0).caller_waits);
  Decision l = r.server->on_leave(0, 0.0);
  EXPECT_EQ(l.released, std::vector<int>{0});
  // Worker 2 rejoins at the slowest live clock (1), so nobody waits for it.
  r.server->on_join(2, 0.0);
  EXPECT_EQ(r.server->clock(2), 1);
  EXPECT_FALSE(r.server->on_pull(1).caller_waits);
  EXPECT_FALSE(r.server->on_pull(2).caller_waits);
}

TEST(Server, AdaptiveHybridSeesEveryPushedLoss) {
  PolicyOptions p;
  p.kind = "hybrid";
  p.schedule.kind = "adaptive";
  p.schedule.k0 = 1;
  p.schedule.loss_smoothing = 0.5;
  Rig r(4, p);
  EXPECT_EQ(r.server->threshold(0), 1);
  auto push = [&](int w, double loss) {
    return r.server->on_push(w, r.server->version(), std::vector<float>{0, 0}, 1, loss, 0.0);
  };
  // K0 = 1: each push is applied at once; the first 4 losses set F0 = 4.
  for (int w = 0; w < 4; ++w) EXPECT_TRUE(push(w, 4.0).applied);
  EXPECT_EQ(r.server->threshold(0), 1);
  // Ft = m5 / (1 - 0.5^5) = 2.0 / 0.96875: K = round(sqrt(4 / 2.065)) = 1.
  EXPECT_TRUE(push(0, 0.25).applied);
  EXPECT_EQ(r.server->threshold(0), 1);
  // Ft = 1.125 / (1 - 0.5^6) = 1.143: K = round(1.87) = 2, counted with this push.
  Decision d = push(1, 0.25);
  EXPECT_FALSE(d.applied);
  EXPECT_TRUE(d.caller_waits);
  EXPECT_EQ(r.server->threshold(0), 2);
}

}  // namespace
}  // namespace hsgd

namespace hsgd {
namespace {

TEST(Server, AWorkerThatPushesLeavesRejoinsAndPushesAgainCountsOnceTowardsSync) {
  Rig r(3, kind("sync"));
  EXPECT_TRUE(r.push(0, {1.0f, 1.0f}).caller_waits);
  r.server->on_leave(0, 0.0);  // released; its push stays buffered
  r.server->on_join(0, 0.0);
  EXPECT_TRUE(r.push(0, {1.0f, 1.0f}).caller_waits);
  // Two pushes of worker 0 are buffered, but only one distinct live worker
  // of three: no update yet.
  EXPECT_EQ(r.server->version(), 0u);
  EXPECT_TRUE(r.push(1, {1.0f, 1.0f}).caller_waits);
  EXPECT_EQ(r.server->version(), 0u);
  const Decision d = r.push(2, {1.0f, 1.0f});
  EXPECT_TRUE(d.applied);
  EXPECT_EQ(r.server->version(), 1u);
}

TEST(Server, KbatchStillCountsEveryPushOfOneWorker) {
  Rig r(3, kind("kbatch", 3));
  r.push(0, {1.0f, 1.0f});
  r.push(0, {1.0f, 1.0f});
  EXPECT_TRUE(r.push(0, {1.0f, 1.0f}).applied);
}

TEST(Server, NonFinitePushesAreDroppedCountedAndNeverApplied) {
  Rig r(2, kind("sync"));
  const float nan = std::nanf(""), inf = INFINITY;
  Decision d = r.push(0, {nan, 1.0f});
  EXPECT_FALSE(d.caller_waits);  // not buffered: its pusher goes on
  EXPECT_FALSE(d.applied);
  r.push(1, {inf, 0.0f});
  EXPECT_EQ(r.server->consecutive_nonfinite(), 2);
  EXPECT_EQ(r.server->version(), 0u);
  EXPECT_EQ(r.params[0], 0.0f);
  // A finite gradient with a NaN loss is dropped too.
  EXPECT_FALSE(
      r.server->on_push(0, 0, std::vector<float>{1.0f, 1.0f}, 1, std::nan(""), 0).caller_waits);
  EXPECT_EQ(r.server->consecutive_nonfinite(), 3);
  r.push(0, {1.0f, 1.0f});
  EXPECT_EQ(r.server->consecutive_nonfinite(), 0);
  d = r.push(1, {1.0f, 1.0f});
  EXPECT_TRUE(d.applied);
  EXPECT_TRUE(std::isfinite(r.params[0]));
  const ServerStats st = r.server->take_stats();
  EXPECT_EQ(st.nonfinite, 3);
  EXPECT_EQ(st.pushes, 5);
  EXPECT_EQ(st.loss_count, 2);  // dropped pushes' losses are not averaged
}

TEST(Server, ClipNormScalesAPushToTheNorm) {
  ServerOptions so;
  so.clip_norm = 1.0;
  Rig r(1, kind("async"), 1.0, 2, Aggregation::kMean, so);
  r.push(0, {3.0f, 4.0f});  // norm 5 -> (0.6, 0.8)
  EXPECT_NEAR(r.params[0], -0.6f, 1e-6);
  EXPECT_NEAR(r.params[1], -0.8f, 1e-6);
  r.push(0, {0.3f, 0.4f});  // norm 0.5: unchanged
  EXPECT_NEAR(r.params[0], -0.9f, 1e-6);
}

// Drives two servers with the same events, saving one mid-way into a third
// and checking the third continues exactly as the uninterrupted one.
void ExpectRoundTrip(PolicyOptions po, ServerOptions so, OptimizerOptions oo) {
  const int n = 3;
  Rig a(n, po, 0.05, 4, Aggregation::kMean, so, oo);
  Rig b(n, po, 0.05, 4, Aggregation::kMean, so, oo);
  std::vector<uint64_t> pulled(n, 0);
  std::vector<bool> waiting(n, false);
  auto step = [&](Rig& r, int i) {
    const int w = i % n;
    if (r.server->is_waiting(w)) return;
    const Decision pd = r.server->on_pull(w);
    if (pd.caller_waits) return;
    const float x = static_cast<float>(i % 7) * 0.1f + 0.05f;
    r.server->on_push(w, pd.version, std::vector<float>{x, -x, 2 * x, 0.5f}, 2, 1.0 / (1 + i),
                      0.1 * i);
  };
  for (int i = 0; i < 20; ++i) {
    step(a, i);
    step(b, i);
  }
  StateWriter w;
  b.server->save(w);
  const std::string bytes = w.take();
  Rig c(n, po, 0.05, 4, Aggregation::kMean, so, oo);
  StateReader rd(bytes, "test");
  c.server->load(rd);
  rd.expect_end();
  EXPECT_EQ(c.params, b.params);
  for (int i = 20; i < 45; ++i) {
    step(a, i);
    step(c, i);
  }
  EXPECT_EQ(a.params, c.params);
  EXPECT_EQ(a.server->version(), c.server->version());
  EXPECT_EQ(a.server->staleness_histogram(), c.server->staleness_histogram());
  EXPECT_EQ(a.server->take_stats().pushes, c.server->take_stats().pushes);
}

TEST(Server, SaveAndLoadContinueExactlyForEveryPolicyAndState) {
  ServerOptions plain;
  ServerOptions mitigated;
  mitigated.staleness.dc_asgd = true;
  mitigated.staleness.gap_aware = true;
  mitigated.staleness.scaled_lr = true;
  mitigated.staleness.momentum_correction = true;
  for (const char* opt : {"sgd", "momentum", "adam"}) {
    OptimizerOptions oo{.kind = opt};
    for (PolicyOptions po : {kind("sync"), kind("async"), kind("kasync", 2), kind("kbatch", 2)}) {
      SCOPED_TRACE(std::string(opt) + " " + po.kind);
      ExpectRoundTrip(po, plain, oo);
      ExpectRoundTrip(po, mitigated, oo);
    }
    PolicyOptions hy = kind("hybrid");
    hy.schedule.step = 3;
    ExpectRoundTrip(hy, plain, oo);
    hy.schedule.kind = "adaptive";
    ExpectRoundTrip(hy, mitigated, oo);
    PolicyOptions ssp = kind("ssp");
    ssp.s = 1;
    ExpectRoundTrip(ssp, plain, oo);
  }
}

// staleness.momentum_correction: every update steps with momentum
// mu' = max(0, 1 - (1 - mu) / (1 - m)), m = tau / (tau + 1) of the running
// mean staleness (weight 1 / max(8, 2 x live), starting at n / K - 1).
TEST(Server, MomentumCorrectionLowersMomentumByTheMeanStalenessImplicitMomentum) {
  const double lr = 0.1, mu = 0.9;
  ServerOptions so;
  so.staleness.momentum_correction = true;
  OptimizerOptions oo{.kind = "momentum"};
  oo.momentum = mu;
  Rig r(2, kind("async"), lr, 1, Aggregation::kMean, so, oo);
  Rig plain(2, kind("async"), lr, 1, Aggregation::kMean, {}, oo);
  // Reference: heavy ball with the corrected momentum, in float as the kernel.
  // The running mean starts at async's steady staleness for 2 workers, 1.
  float w = 0, v = 0;
  double mean = 1;
  int count = 1;
  const std::vector<int64_t> taus = {0, 1, 1, 2, 1, 3, 0, 1, 1, 2};
  for (size_t i = 0; i < taus.size(); ++i) {
    const float g = 0.5f + 0.1f * static_cast<float>(i);
    const uint64_t version = r.server->version() - static_cast<uint64_t>(taus[i]);
    r.server->on_push(static_cast<int>(i % 2), version, std::vector<float>{g}, 1, 0.5, 0.0);
    plain.server->on_push(static_cast<int>(i % 2), version, std::vector<float>{g}, 1, 0.5, 0.0);
    const double t = static_cast<double>(taus[i]);
    mean = count++ == 0 ? t : (1 - 1.0 / 8) * mean + t / 8;
    const double m = mean / (mean + 1);
    const auto mu_c = static_cast<float>(m == 0 ? mu : std::max(0.0, 1 - (1 - mu) / (1 - m)));
    v = mu_c * v + g;
    w -= static_cast<float>(lr) * v;
    ASSERT_NEAR(r.params[0], w, 1e-6) << "push " << i;
  }
  // ... which is not what the uncorrected momentum does.
  EXPECT_GT(std::abs(plain.params[0] - r.params[0]), 1e-3);
}

// The running mean staleness is in the server's state: a server loaded
// mid-way continues exactly (pushes with staleness, so the mean matters).
TEST(Server, MomentumCorrectionSurvivesSaveAndLoad) {
  ServerOptions so;
  so.staleness.momentum_correction = true;
  OptimizerOptions oo{.kind = "momentum"};
  oo.momentum = 0.9;
  auto push = [](Rig& r, size_t i) {
    const auto tau = static_cast<uint64_t>(std::min<size_t>(i % 4, r.server->version()));
    const float g = 0.3f + 0.05f * static_cast<float>(i % 5);
    r.server->on_push(static_cast<int>(i % 3), r.server->version() - tau, std::vector<float>{g, -g},
                      1, 0.5, 0.0);
  };
  Rig a(3, kind("async"), 0.1, 2, Aggregation::kMean, so, oo);
  for (size_t i = 0; i < 12; ++i) push(a, i);
  StateWriter w;
  a.server->save(w);
  const std::string bytes = w.take();
  Rig b(3, kind("async"), 0.1, 2, Aggregation::kMean, so, oo);
  StateReader rd(bytes, "test");
  b.server->load(rd);
  rd.expect_end();
  for (size_t i = 12; i < 30; ++i) {
    push(a, i);
    push(b, i);
  }
  EXPECT_EQ(a.params, b.params);
}

TEST(Server, LoadRefusesTruncatedAndForeignState) {
  Rig a(2, kind("sync"), 0.1, 4);
  a.push(0, {1, 1, 1, 1});
  StateWriter w;
  a.server->save(w);
  const std::string bytes = w.bytes();
  Rig b(2, kind("sync"), 0.1, 4);
  StateReader cut(std::string_view(bytes).substr(0, bytes.size() / 2), "blob");
  EXPECT_THROW(b.server->load(cut), InputError);
  Rig other(2, kind("sync"), 0.1, 5);  // another parameter count
  StateReader whole(bytes, "blob");
  EXPECT_THROW(other.server->load(whole), InputError);
  Rig adam(2, kind("sync"), 0.1, 4, Aggregation::kMean, {}, {.kind = "adam"});
  StateReader again(bytes, "blob");
  EXPECT_THROW(adam.server->load(again), InputError);
}

}  // namespace
}  // namespace hsgd

// Membership: every policy keeps its meaning with the live set (issue 10).
namespace hsgd {
namespace {

TEST(ServerMembership, SyncReformsItsBarrierOverTheLiveWorkersAndNeverWaitsForADeadOne) {
  Rig r(4, kind("sync"));
  r.server->on_leave(3, 0.0);
  EXPECT_EQ(r.server->threshold(0), 3);
  EXPECT_TRUE(r.push(0, {1, 1}).caller_waits);
  EXPECT_TRUE(r.push(1, {1, 1}).caller_waits);
  const Decision d = r.push(2, {1, 1});
  EXPECT_TRUE(d.applied);
  EXPECT_EQ(d.released, (std::vector<int>{0, 1}));
  // Worker 1 dies with the barrier half-formed: the other two complete it.
  r.push(0, {1, 1});
  r.push(1, {1, 1});
  const Decision l = r.server->on_leave(1, 0.0);
  EXPECT_FALSE(l.applied);  // 2 of the live {0, 2} have not all pushed
  EXPECT_EQ(l.released, std::vector<int>{1});
  const Decision d2 = r.push(2, {1, 1});
  EXPECT_TRUE(d2.applied);  // 0 and 2, plus dead 1's buffered push in the mean
  EXPECT_EQ(r.server->version(), 2u);
  // A joiner raises the barrier again from the next round.
  r.server->on_join(3, 0.0);
  EXPECT_EQ(r.server->threshold(0), 3);
  r.push(0, {1, 1});
  r.push(2, {1, 1});
  EXPECT_EQ(r.server->version(), 2u);
  EXPECT_TRUE(r.push(3, {1, 1}).applied);
}

TEST(ServerMembership, SyncBufferedPushOfALeaverIsAveragedIntoTheNextUpdate) {
  Rig r(3, kind("sync"), 1.0, 1);
  r.push(0, {3.0f});
  r.server->on_leave(0, 0.0);
  r.push(1, {0.0f});
  EXPECT_TRUE(r.push(2, {0.0f}).applied);
  // mean of {3, 0, 0}: the leaver's honestly computed gradient is kept.
  EXPECT_NEAR(r.params[0], -1.0f, 1e-6);
}

TEST(ServerMembership, KasyncClampsKToTheLiveCountAndRaisesItBackOnJoin) {
  Rig r(4, kind("kasync", 3));
  EXPECT_EQ(r.server->threshold(0), 3);
  r.server->on_leave(0, 0.0);
  r.server->on_leave(1, 0.0);
  EXPECT_EQ(r.server->threshold(0), 2);
  EXPECT_TRUE(r.push(2, {1, 1}).caller_waits);
  EXPECT_TRUE(r.push(3, {1, 1}).applied);
  r.server->on_leave(2, 0.0);
  EXPECT_EQ(r.server->threshold(0), 1);
  EXPECT_TRUE(r.push(3, {1, 1}).applied);  // the last live worker alone
  r.server->on_join(0, 0.0);
  r.server->on_join(1, 0.0);
  EXPECT_EQ(r.server->threshold(0), 3);
}

TEST(ServerMembership, KasyncLeaveThatLowersKBelowTheBufferFiresIt) {
  Rig r(3, kind("kasync", 3));
  r.push(0, {1, 1});
  r.push(1, {1, 1});
  EXPECT_EQ(r.server->version(), 0u);
  const Decision d = r.server->on_leave(2, 0.0);
  EXPECT_TRUE(d.applied);
  EXPECT_EQ(d.released, (std::vector<int>{0, 1}));
}

TEST(ServerMembership, HybridClampsItsScheduleToTheLiveCount) {
  PolicyOptions po = kind("hybrid");
  po.schedule.kind = "step";
  po.schedule.k0 = 4;  // K = 4 = n from the start
  po.schedule.step = 1000;
  Rig r(4, po);
  EXPECT_EQ(r.server->threshold(0), 4);
  r.server->on_leave(1, 0.0);
  EXPECT_EQ(r.server->threshold(0), 3);
  r.push(0, {1, 1});
  r.push(2, {1, 1});
  EXPECT_TRUE(r.push(3, {1, 1}).applied);
}

TEST(ServerMembership, AsyncAndKbatchNeverWaitAndIgnoreMembership) {
  for (const char* k : {"async", "kbatch"}) {
    Rig r(3, kind(k, 2));
    r.server->on_leave(0, 0.0);
    r.server->on_leave(1, 0.0);
    const int before = static_cast<int>(r.server->version());
    for (int i = 0; i < 4; ++i) EXPECT_FALSE(r.push(2, {1, 1}).caller_waits) << k;
    EXPECT_GT(static_cast<int>(r.server->version()), before) << k;
  }
}

TEST(ServerMembership, SspMinimumClockIsOverLiveWorkersAndARejoinerStartsAtTheMinimum) {
  PolicyOptions po = kind("ssp");
  po.s = 1;
  Rig r(3, po);
  // Worker 0 runs ahead of the stalled worker 2.
  r.server->on_pull(0);
  r.push(0, {1, 1});
  r.server->on_pull(1);
  r.push(1, {1, 1});
  r.server->on_pull(0);
  r.push(0, {1, 1});
  EXPECT_TRUE(r.server->on_pull(0).caller_waits);  // clock 2, min 0
  // Worker 2 dies: the minimum is now over {0, 1} = 1, so 0 may go on.
  const Decision l = r.server->on_leave(2, 0.0);
  EXPECT_EQ(l.released, std::vector<int>{0});
  EXPECT_FALSE(r.server->on_pull(0).caller_waits);
  // Worker 2 rejoins: its clock starts at the live minimum, nobody blocks.
  const Decision j = r.server->on_join(2, 0.0);
  EXPECT_TRUE(j.released.empty());
  EXPECT_EQ(r.server->clock(2), r.server->clock(1));
  EXPECT_FALSE(r.server->on_pull(2).caller_waits);
}

TEST(ServerMembership, LocalAveragesTheLiveWorkersDeltas) {
  Rig r(3, kind("local", 4), 1.0, 1);
  EXPECT_EQ(r.server->threshold(0), 3);
  r.server->on_leave(2, 0.0);
  EXPECT_EQ(r.server->threshold(0), 2);
  EXPECT_TRUE(r.push(0, {2.0f}).caller_waits);
  const Decision d = r.push(1, {4.0f});
  EXPECT_TRUE(d.applied);
  EXPECT_NEAR(r.params[0], -3.0f, 1e-6);  // the mean of the two live deltas
  // A rejoiner takes part in the next round.
  r.server->on_join(2, 0.0);
  r.push(0, {0.0f});
  r.push(1, {0.0f});
  EXPECT_EQ(r.server->version(), 1u);
  EXPECT_TRUE(r.push(2, {0.0f}).applied);
}

TEST(ServerMembership, EveryLiveWorkerLeavingThenOneJoiningFiresWhatWasBuffered) {
  Rig r(2, kind("sync"));
  r.push(0, {1, 1});
  r.server->on_leave(0, 0.0);
  const Decision d = r.server->on_leave(1, 0.0);
  EXPECT_FALSE(d.applied);  // nobody live: nothing fires
  EXPECT_EQ(r.server->live_workers(), 0);
  const Decision j = r.server->on_join(1, 0.0);
  EXPECT_FALSE(j.applied);  // the dead worker's push counts for no live worker
  EXPECT_TRUE(r.push(1, {1, 1}).applied);
  EXPECT_EQ(r.server->version(), 1u);
}

TEST(ServerMembership, LeaveAndJoinAreIdempotentAndSurviveSaveAndLoad) {
  Rig r(3, kind("sync"));
  r.server->on_leave(1, 0.0);
  EXPECT_TRUE(r.server->on_leave(1, 0.0).released.empty());
  r.server->on_join(5, 0.0);  // a new id grows the server
  EXPECT_EQ(r.server->known_workers(), 6);
  EXPECT_EQ(r.server->live_workers(), 3);
  r.server->on_join(5, 0.0);
  EXPECT_EQ(r.server->live_workers(), 3);
  StateWriter w;
  r.server->save(w);
  Rig r2(3, kind("sync"));
  const auto bytes = w.take();
  StateReader rd(bytes, "mem");
  r2.server->load(rd);
  EXPECT_EQ(r2.server->live_workers(), 3);
  EXPECT_FALSE(r2.server->is_live(1));
  EXPECT_TRUE(r2.server->is_live(5));
}

}  // namespace
}  // namespace hsgd

namespace hsgd {
namespace {

// The finiteness check (an OR over exponent bits when clipping is off)
// agrees with IEEE on every class of value, wherever it sits in a long push.
TEST(Server, FinitenessCheckOfLongPushes) {
  const size_t n = 1003;
  std::vector<float> params(n, 0.0f);
  ServerOptions so;
  so.workers = 1;
  PolicyOptions po;
  po.kind = "async";
  OptimizerOptions oo;
  Server server(params, so, make_policy(po, 1, 1e-30), make_optimizer(oo, n));
  int64_t dropped = 0;
  for (const float bad : {std::nanf(""), INFINITY, -INFINITY}) {
    for (const size_t at : {size_t{0}, size_t{17}, n - 1}) {
      std::vector<float> g(n, 1.0f);
      g[at] = bad;
      server.on_push(0, server.version(), g, 1, 0.0, 0.0);
      EXPECT_EQ(server.consecutive_nonfinite(), ++dropped) << bad << " at " << at;
    }
  }
  // The largest finite values, denormals and zeros of both signs are finite.
  std::vector<float> g(n, std::numeric_limits<float>::max());
  g[1] = -std::numeric_limits<float>::max();
  g[2] = std::numeric_limits<float>::denorm_min();
  g[3] = -0.0f;
  const Decision d = server.on_push(0, server.version(), g, 1, 0.0, 0.0);
  EXPECT_TRUE(d.applied);
  EXPECT_EQ(server.consecutive_nonfinite(), 0);
}

// Issue 30: deferred updates (the mpi server's step overlapped with its
// sends). The same script of events on a server that runs each step in the
// event and on one that leaves it pending and runs it in parts (or not at
// all, letting the next event finish it) gives the same decisions, the
// same version at once, and the same parameters bit for bit once the step
// is done; until then the parameters are the old ones. Sync (the buffer's
// mean, zeroed after the step), async (the push taken straight), momentum
// and Adam, and DC-ASGD (a pull copies the parameters: it finishes the
// step first).
TEST(Server, DeferredUpdatesInPartsEqualTheStepRunInTheEvent) {
  struct Case {
    const char* policy;
    const char* optimizer;
    bool dcasgd;
  };
  for (const Case& cs : {Case{"async", "momentum", false}, Case{"sync", "adam", false},
                         Case{"kasync", "momentum", false}, Case{"async", "sgd", true}}) {
    SCOPED_TRACE(std::string(cs.policy) + " " + cs.optimizer + (cs.dcasgd ? " dc-asgd" : ""));
    const size_t n = 37;
    ServerOptions so;
    so.staleness.dc_asgd = cs.dcasgd;
    const OptimizerOptions oo{.kind = cs.optimizer, .momentum = 0.9};
    Rig now(3, kind(cs.policy, 2), 0.05, n, Aggregation::kMean, so, oo);
    Rig later(3, kind(cs.policy, 2), 0.05, n, Aggregation::kMean, so, oo);
    later.server->set_deferred_updates(true);
    int deferred = 0;
    std::vector<uint64_t> pulled(3, 0);
    std::deque<std::vector<float>> grads;
    for (int e = 0; e < 30; ++e) {
      const int w = (e * 7) % 3;
      if (now.server->is_waiting(w)) continue;
      // A pending step reads the push it takes straight: it must outlive it.
      std::vector<float>& g = grads.emplace_back(n);
      for (size_t i = 0; i < n; ++i) g[i] = std::sin(0.3f * static_cast<float>(i + 5 * e));
      const std::vector<float> before = now.params;
      const uint64_t v = pulled[static_cast<size_t>(w)];
      const Decision a = now.server->on_push(w, v, g, 1, 0.5, 0.0);
      const Decision b = later.server->on_push(w, v, g, 1, 0.5, 0.0);
      ASSERT_EQ(a.applied, b.applied);
      ASSERT_EQ(a.version, b.version);
      ASSERT_EQ(a.caller_waits, b.caller_waits);
      ASSERT_EQ(a.released, b.released);
      if (b.applied && later.server->update_done() < n) {
        ++deferred;
        EXPECT_EQ(later.params, before) << "a deferred step wrote before update_to";
        if (e % 3 != 0) {  // in parts; every third left to the next event
          for (size_t end = 5; later.server->update_done() < n; end += 11) {
            later.server->update_to(end);
          }
        }
      }
      for (int p : a.released) {
        pulled[static_cast<size_t>(p)] = now.server->on_pull(p).version;
        later.server->on_pull(p);
      }
      if (!a.caller_waits) {
        pulled[static_cast<size_t>(w)] = now.server->on_pull(w).version;
        later.server->on_pull(w);
      }
      if (e % 3 == 0 && e + 1 < 30) continue;  // the next push finishes the step
      later.server->finish_update();
      for (size_t i = 0; i < n; ++i) {
        ASSERT_EQ(std::bit_cast<uint32_t>(now.params[i]), std::bit_cast<uint32_t>(later.params[i]))
            << "event " << e << ", parameter " << i;
      }
    }
    if (!cs.dcasgd) {
      EXPECT_GT(deferred, 5) << "the steps were deferred";
    }
  }
}

}  // namespace
}  // namespace hsgd
