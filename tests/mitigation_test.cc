// Staleness mitigations: the pure functions against hand-computed values, and
// the server applying them to scripted pushes (no threads, no clock).
#include "hsgd/policy/mitigation.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "hsgd/core/error.h"
#include "hsgd/server/server.h"

namespace hsgd {
namespace {

TEST(Mitigation, FilterDropsOnlyTauAboveTauMax) {
  MitigationOptions o;
  for (int64_t tau : {0, 1, 5, 1000}) EXPECT_FALSE(drop_push(o, tau));  // -1: off
  o.tau_max = 2;
  EXPECT_FALSE(drop_push(o, 0));
  EXPECT_FALSE(drop_push(o, 2));
  EXPECT_TRUE(drop_push(o, 3));
  o.tau_max = 0;
  EXPECT_FALSE(drop_push(o, 0));
  EXPECT_TRUE(drop_push(o, 1));
}

TEST(Mitigation, ScaledLrDividesByMaxOneTau) {
  EXPECT_DOUBLE_EQ(staleness_scale(0), 1.0);
  EXPECT_DOUBLE_EQ(staleness_scale(1), 1.0);
  EXPECT_DOUBLE_EQ(staleness_scale(4), 0.25);
  std::vector<float> g = {2.0f, -4.0f};
  scale_by_staleness(g, 0);
  EXPECT_EQ(g, (std::vector<float>{2.0f, -4.0f}));
  scale_by_staleness(g, 4);
  EXPECT_EQ(g, (std::vector<float>{0.5f, -1.0f}));
}

TEST(Mitigation, DcAsgdMatchesHandComputedValues) {
  std::vector<float> g = {1.0f, -2.0f, 0.5f, 3.0f};
  const std::vector<float> now = {1.0f, 2.0f, 3.0f, -1.0f};
  const std::vector<float> pulled = {0.5f, 2.5f, 3.0f, 0.0f};
  dc_compensate(g, now, pulled, 0.04);
  EXPECT_FLOAT_EQ(g[0], 1.0f + 0.04f * 1.0f * 1.0f * 0.5f);  // 1.02
  EXPECT_FLOAT_EQ(g[1], -2.0f + 0.04f * 4.0f * -0.5f);       // -2.08
  EXPECT_FLOAT_EQ(g[2], 0.5f);                               // no gap
  EXPECT_FLOAT_EQ(g[3], 3.0f + 0.04f * 9.0f * -1.0f);        // 2.64
  MitigationOptions o;
  EXPECT_FALSE(o.dc_on());
  o.dc_asgd = true;
  EXPECT_DOUBLE_EQ(o.lambda(), 0.04);  // the default when only switched on
  o.dc_asgd = false;
  o.dc_lambda = 0.1;
  EXPECT_TRUE(o.dc_on());
  EXPECT_DOUBLE_EQ(o.lambda(), 0.1);
}

TEST(Mitigation, GapAwareMatchesHandComputedValues) {
  std::vector<float> g = {1.0f, 1.0f, -3.0f, 1.0f, 2.0f};
  const std::vector<float> now = {0.0f, 1.25f, 2.0f, 5.0f, -0.25f};
  const std::vector<float> pulled = {0.0f, 0.5f, 0.0f, 0.0f, 0.0f};
  const std::vector<float> ema = {0.1f, 0.25f, 0.5f, 0.0f, 0.5f};
  // correction 0.5: C = {0.2, 0.5, 1, 0, 1}; gap / C = {0, 1.5, 2, -, 0.25}.
  gap_aware_divide(g, now, pulled, ema, 0.5);
  EXPECT_FLOAT_EQ(g[0], 1.0f);         // no gap
  EXPECT_FLOAT_EQ(g[1], 1.0f / 1.5f);  // G = 1.5
  EXPECT_FLOAT_EQ(g[2], -1.5f);        // G = 2
  EXPECT_FLOAT_EQ(g[3], 1.0f);         // C = 0: never moved, left as is
  EXPECT_FLOAT_EQ(g[4], 2.0f);         // gap below one average step: G = 1
  std::vector<float> avg = {0.0f, 1.0f};
  track_step(avg, std::vector<float>{0.0f, 0.0f}, std::vector<float>{1.0f, -2.0f}, 0.5);
  EXPECT_FLOAT_EQ(avg[0], 0.5f);
  EXPECT_FLOAT_EQ(avg[1], 1.5f);
}

TEST(Mitigation, ValidationNamesTheKey) {
  auto message = [](MitigationOptions o) {
    try {
      validate(o);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(message({}), "");
  EXPECT_EQ(message({.tau_max = 0}), "");
  EXPECT_NE(message({.tau_max = -2}).find("staleness.tau_max = -2"), std::string::npos);
  EXPECT_NE(message({.dc_lambda = -0.5}).find("staleness.dc_lambda = -0.5"), std::string::npos);
  EXPECT_NE(message({.dc_lambda = NAN}).find("staleness.dc_lambda"), std::string::npos);
}

// A server on n-vector parameters, plain SGD.
struct Rig {
  std::vector<float> params;
  std::unique_ptr<Server> server;
  Rig(int workers, const char* policy, int k, MitigationOptions m, double lr = 0.1, size_t n = 2) {
    params.assign(n, 0.0f);
    ServerOptions so;
    so.workers = workers;
    so.lr = lr;
    so.samples_per_epoch = 100;
    so.staleness = m;
    PolicyOptions po;
    po.kind = policy;
    po.k = k;
    server = std::make_unique<Server>(params, so, make_policy(po, workers, lr),
                                      make_optimizer(OptimizerOptions{.kind = "sgd", .lr = lr}, n));
  }
  Decision push(int w, uint64_t v, std::vector<float> g) {
    return server->on_push(w, v, g, 1, 0.5, 0.0);
  }
};

TEST(ServerMitigation, FilterDropsExactlyThePushesWithTauAboveTauMax) {
  Rig r(4, "async", 0, {.tau_max = 2});
  // Each push's version and, written out by hand, its staleness (the server
  // advances by one per applied push) and whether the filter drops it.
  struct Step {
    uint64_t pushed;
    int64_t tau;
    bool dropped;
  };
  const Step script[] = {{0, 0, false}, {0, 1, false}, {0, 2, false}, {0, 3, true},
                         {0, 3, true},  {3, 0, false}, {2, 2, false}, {2, 3, true},
                         {4, 1, false}, {0, 6, true},  {6, 0, false}};
  int i = 0;
  for (const Step& s : script) {
    const uint64_t v = r.server->version();
    ASSERT_EQ(static_cast<int64_t>(v - s.pushed), s.tau) << "push " << i;
    const Decision d = r.push(i % 4, s.pushed, {1.0f, 0.0f});
    EXPECT_EQ(d.applied, !s.dropped) << "push " << i;
    EXPECT_FALSE(d.caller_waits);
    EXPECT_EQ(r.server->version(), v + (s.dropped ? 0 : 1));
    ++i;
  }
  const ServerStats st = r.server->take_stats();
  EXPECT_EQ(st.dropped, 4);
  EXPECT_EQ(st.updates, 7);
  EXPECT_EQ(st.pushes, 11);
  EXPECT_EQ(st.staleness_count, 7);  // dropped pushes are not applied
  EXPECT_EQ(st.staleness_max, 2);
  EXPECT_DOUBLE_EQ(st.staleness_sum, 0 + 1 + 2 + 0 + 2 + 1 + 0);
  EXPECT_EQ(r.server->samples(), 11);  // their samples were still consumed
  EXPECT_NEAR(r.params[0], -0.7f, 1e-6);
}

TEST(ServerMitigation, DroppedPushDoesNotCountTowardKAndItsPusherGoesOn) {
  Rig r(3, "kasync", 2, {.tau_max = 0});
  Decision a = r.push(0, 0, {1.0f, 0.0f});
  EXPECT_TRUE(a.caller_waits);
  Decision b = r.push(1, 0, {1.0f, 0.0f});
  EXPECT_TRUE(b.applied);
  EXPECT_EQ(b.released, (std::vector<int>{0}));
  // Worker 2 computed on version 0; the server is at 1: tau 1 > 0, dropped.
  Decision c = r.push(2, 0, {100.0f, 0.0f});
  EXPECT_FALSE(c.applied);
  EXPECT_FALSE(c.caller_waits);
  EXPECT_TRUE(c.released.empty());
  EXPECT_EQ(c.version, 1u);
  // Worker 0 pushes on version 1: buffered alone (the dropped push is not in K).
  Decision d = r.push(0, 1, {1.0f, 0.0f});
  EXPECT_FALSE(d.applied);
  EXPECT_TRUE(d.caller_waits);
  // Worker 2 pulled again and pushes on version 1: the update fires.
  Decision e = r.push(2, 1, {1.0f, 0.0f});
  EXPECT_TRUE(e.applied);
  EXPECT_EQ(e.released, (std::vector<int>{0}));
  EXPECT_NEAR(r.params[0], -0.2f, 1e-6);  // the dropped 100 never reached the parameters
  EXPECT_EQ(r.server->take_stats().dropped, 1);
}

TEST(ServerMitigation, SyncNeverDropsAndMitigationsAreIdentities) {
  MitigationOptions all{.scaled_lr = true, .tau_max = 0, .dc_asgd = true, .gap_aware = true};
  Rig plain(3, "sync", 0, {});
  Rig mitigated(3, "sync", 0, all);
  for (int step = 0; step < 5; ++step) {
    for (int w = 0; w < 3; ++w) {
      for (Rig* r : {&plain, &mitigated}) {
        r->server->on_pull(w);
        const std::vector<float> g = {1.0f + static_cast<float>(w),
                                      -0.5f * static_cast<float>(step)};
        r->push(w, r->server->version(), g);
      }
    }
  }
  EXPECT_EQ(plain.params, mitigated.params);
  EXPECT_EQ(mitigated.server->take_stats().dropped, 0);
}

TEST(ServerMitigation, ScaledLrDividesEachPushByItsStaleness) {
  Rig r(4, "async", 0, {.scaled_lr = true});
  r.push(0, 0, {1.0f, 1.0f});  // tau 0: full step -0.1
  r.push(1, 0, {1.0f, 1.0f});  // tau 1: full step -0.1
  r.push(2, 0, {1.0f, 1.0f});  // tau 2: half step -0.05
  r.push(3, 0, {1.0f, 1.0f});  // tau 3: third -0.0333
  EXPECT_NEAR(r.params[0], -(0.1f + 0.1f + 0.05f + 0.1f / 3.0f), 1e-6);
}

TEST(ServerMitigation, DcAsgdUsesTheWorkersPulledCopy) {
  Rig r(2, "async", 0, {.dc_lambda = 0.5});
  r.server->on_pull(0);
  r.server->on_pull(1);        // both hold (0, 0) at version 0
  r.push(0, 0, {1.0f, 2.0f});  // tau 0: w = (-0.1, -0.2)
  EXPECT_NEAR(r.params[0], -0.1f, 1e-7);
  // Worker 1's push is one update stale: g + 0.5 g^2 (w_now - w_pulled).
  r.push(1, 0, {1.0f, 1.0f});
  const float g0 = 1.0f + 0.5f * 1.0f * (-0.1f), g1 = 1.0f + 0.5f * 1.0f * (-0.2f);
  EXPECT_NEAR(r.params[0], -0.1f - 0.1f * g0, 1e-6);
  EXPECT_NEAR(r.params[1], -0.2f - 0.1f * g1, 1e-6);
  // A push without a pull at its version is left uncompensated.
  Rig u(2, "async", 0, {.dc_lambda = 0.5});
  u.push(0, 0, {1.0f, 2.0f});
  u.push(1, 0, {1.0f, 1.0f});
  EXPECT_NEAR(u.params[0], -0.2f, 1e-6);
}

TEST(ServerMitigation, GapAwareDividesByTheGapInAverageSteps) {
  Rig r(2, "async", 0, {.gap_aware = true}, /*lr=*/1.0);
  r.server->on_pull(1);  // worker 1 holds (0, 0) at version 0
  r.server->on_pull(0);
  r.push(0, 0, {1.0f, 0.5f});  // w = (-1, -0.5)
  r.server->on_pull(0);
  r.push(0, 1, {1.0f, 1.5f});  // w = (-2, -2)
  // Average step, bias-corrected EMA with decay 0.99 over |dw| = (1, 0.5), (1, 1.5).
  const double d = 0.99, corr = 1 - d * d;
  const double c0 = ((1 - d) * d * 1.0 + (1 - d) * 1.0) / corr;  // 1
  const double c1 = ((1 - d) * d * 0.5 + (1 - d) * 1.5) / corr;
  const double gap0 = 2.0 / c0, gap1 = 2.0 / c1;  // both > 1
  r.push(1, 0, {2.0f, 2.0f});                     // tau 2
  EXPECT_NEAR(r.params[0], -2.0 - 2.0 / gap0, 1e-5);
  EXPECT_NEAR(r.params[1], -2.0 - 2.0 / gap1, 1e-5);
}

TEST(ServerMitigation, JoiningWorkerGetsAPulledCopySlot) {
  Rig r(1, "async", 0, {.dc_asgd = true});
  r.server->on_join(3, 0.0);
  r.server->on_pull(3);
  r.push(0, 0, {1.0f, 1.0f});
  r.push(3, 0, {1.0f, 1.0f});  // compensated against worker 3's copy: (0, 0)
  const float g = 1.0f + 0.04f * (-0.1f);
  EXPECT_NEAR(r.params[0], -0.1f - 0.1f * g, 1e-6);
}

}  // namespace
}  // namespace hsgd

namespace hsgd {
namespace {

// momentum_correction's running mean: n / K - 1 before any push (n workers in
// turn, an update every K pushes), then an average over about two rounds.
TEST(Mitigation, SteadyStalenessAndTheRunningMean) {
  EXPECT_DOUBLE_EQ(steady_staleness(2, 1), 1.0);
  EXPECT_DOUBLE_EQ(steady_staleness(25, 1), 24.0);
  EXPECT_DOUBLE_EQ(steady_staleness(24, 4), 5.0);
  EXPECT_DOUBLE_EQ(steady_staleness(4, 4), 0.0);  // sync
  EXPECT_DOUBLE_EQ(steady_staleness(4, 0), 0.0);
  StalenessMean m;
  m.add(3, 2);  // the first push sets it
  EXPECT_DOUBLE_EQ(m.mean, 3.0);
  m.add(11, 2);  // weight 1 / max(8, 4)
  EXPECT_DOUBLE_EQ(m.mean, 3.0 + (11.0 - 3.0) / 8);
  StalenessMean w;
  w.start(24);
  w.add(0, 25);  // weight 1 / 50
  EXPECT_DOUBLE_EQ(w.mean, 24.0 * 49 / 50);
  EXPECT_DOUBLE_EQ(implicit_momentum_of_staleness(1), 0.5);
}

}  // namespace
}  // namespace hsgd
