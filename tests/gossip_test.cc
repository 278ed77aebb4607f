// The gossip policies' per-worker state (policy/gossip.h): mixing conserves
// the sum of the models, push-sum conserves the total weight, onepeer-exp
// reaches consensus in log2 n rounds, and the state round-trips.
#include "hsgd/policy/gossip.h"

#include <gtest/gtest.h>

#include <cmath>

#include "hsgd/core/error.h"
#include "hsgd/core/rng.h"

namespace hsgd {
namespace {

// n workers whose models differ: worker i's x is random around i.
GossipModels Spread(int n, size_t np, const std::string& update = "sgd") {
  GossipModels m(n, std::vector<float>(np, 0.0f), LocalUpdate{update, 0.9f, 0.0f});
  Rng rng(5, 1);
  for (int i = 0; i < n; ++i) {
    for (float& v : m.x(i)) v = static_cast<float>(i + rng.normal());
  }
  return m;
}

std::vector<double> SumOfModels(const GossipModels& m) {
  std::vector<double> s(m.num_params(), 0.0);
  for (int i = 0; i < m.size(); ++i) {
    for (size_t p = 0; p < m.num_params(); ++p) s[p] += m.x(i)[p];
  }
  return s;
}

void ExpectSameSum(const std::vector<double>& a, const std::vector<double>& b,
                   const std::string& what) {
  double norm = 0, diff = 0;
  for (size_t p = 0; p < a.size(); ++p) {
    norm += a[p] * a[p];
    diff += (a[p] - b[p]) * (a[p] - b[p]);
  }
  EXPECT_LE(std::sqrt(diff), 1e-6 * std::sqrt(norm)) << what;
}

// Doubly stochastic mixing with lr 0 (no local step): the sum of the models
// is conserved, to 1e-6 relative, over many rounds, for every topology and
// odd n; and the consensus distance falls.
TEST(GossipModels, MixingConservesTheSumOfModels) {
  for (const std::string& kind : topology_names()) {
    for (int n : {2, 5, 8, 9}) {
      GossipModels m = Spread(n, 50);
      const Topology topo(kind, "metropolis", n, 3);
      const std::vector<double> before = SumOfModels(m);
      const double xi0 = m.consensus().xi;
      for (int64_t t = 0; t < 40; ++t) m.mix(topo, t);
      ExpectSameSum(before, SumOfModels(m), kind + " n " + std::to_string(n));
      EXPECT_LT(m.consensus().xi, 0.5 * xi0) << kind << " n " << n;
    }
  }
}

TEST(GossipModels, PushSumConservesTotalWeightAndMass) {
  for (const std::string& kind : topology_names()) {
    for (int n : {3, 7, 8}) {
      GossipModels m = Spread(n, 20);
      const Topology topo(kind, "uniform", n, 3);
      const std::vector<double> before = SumOfModels(m);
      for (int64_t t = 0; t < 60; ++t) {
        m.push_sum(topo, t);
        double w = 0;
        for (int i = 0; i < n; ++i) w += m.weight(i);
        ASSERT_NEAR(w, n, 1e-9 * n) << kind << " round " << t;
      }
      ExpectSameSum(before, SumOfModels(m), kind);
      // The de-biased models agree: push-sum reaches the average.
      EXPECT_LT(m.consensus().xi, 1e-3) << kind << " n " << n;
    }
  }
}

// Gossip-only rounds of onepeer-exp with n = 2^k: Xi = 0 (1e-6 relative to
// ||x_bar||) after exactly log2 n rounds, not before; dpsgd's mixing and
// sgp's push-sum alike.
TEST(GossipModels, OnePeerExpReachesConsensusAfterExactlyLog2NRounds) {
  for (int k = 1; k <= 5; ++k) {
    const int n = 1 << k;
    const Topology topo("onepeer-exp", "uniform", n, 0);
    for (const bool push_sum : {false, true}) {
      GossipModels m = Spread(n, 30);
      for (float& v : m.x(0)) v += 100;  // ||x_bar|| well away from 0
      for (int64_t t = 0; t < k; ++t) {
        push_sum ? m.push_sum(topo, t) : m.mix(topo, t);
        const GossipModels::Consensus c = m.consensus();
        if (t + 1 < k) {
          EXPECT_GT(c.xi, 1e-3 * c.norm) << "n " << n << " round " << t;
        } else {
          EXPECT_LE(c.xi, 1e-6 * c.norm) << "n " << n << (push_sum ? " push-sum" : " mixing");
        }
      }
    }
  }
}

TEST(GossipModels, PairAverageAndGlobalAverage) {
  GossipModels m = Spread(4, 10);
  const std::vector<double> before = SumOfModels(m);
  m.pair_average(0, 3);
  for (size_t p = 0; p < 10; ++p) EXPECT_EQ(m.x(0)[p], m.x(3)[p]);
  ExpectSameSum(before, SumOfModels(m), "pair");
  m.global_average();
  EXPECT_EQ(m.consensus().xi, 0.0);
  ExpectSameSum(before, SumOfModels(m), "global");
}

TEST(GossipModels, LocalStepIsHeavyBallMomentum) {
  GossipModels m(1, std::vector<float>{1.0f, 2.0f}, LocalUpdate{"momentum", 0.5f, 0.0f});
  const std::vector<float> g = {1.0f, -1.0f};
  m.local_step(0, g, 0.1f);  // m = g; x -= 0.1 g
  m.local_step(0, g, 0.1f);  // m = 1.5 g; x -= 0.15 g
  EXPECT_FLOAT_EQ(m.x(0)[0], 1.0f - 0.25f);
  EXPECT_FLOAT_EQ(m.x(0)[1], 2.0f + 0.25f);
}

TEST(GossipModels, SaveLoadRoundTrip) {
  GossipModels a = Spread(3, 8, "nesterov");
  a.local_step(1, std::vector<float>(8, 1.0f), 0.1f);
  a.push_sum(Topology("onepeer-exp", "uniform", 3, 0), 0);
  StateWriter w;
  a.save(w);
  GossipModels b(3, std::vector<float>(8, 0.0f), LocalUpdate{"nesterov", 0.9f, 0.0f});
  StateReader r(w.bytes(), "gossip");
  b.load(r);
  StateWriter w2;
  b.save(w2);
  EXPECT_EQ(w.bytes(), w2.bytes());
  GossipModels other(4, std::vector<float>(8, 0.0f), LocalUpdate{});
  StateReader r2(w.bytes(), "gossip");
  EXPECT_THROW(other.load(r2), InputError);
}

// One worker's part (the threads and mpi checkpoints) round-trips for a
// worker that left (weight 0, holding nothing) as for a live one; weight 0
// with a model left in it, or a negative weight, is refused as corrupt.
TEST(GossipModels, SaveWorkerRoundTripsALeaverAndRefusesACorruptOne) {
  GossipModels a = Spread(3, 8, "momentum");
  a.local_step(0, std::vector<float>(8, 1.0f), 0.1f);
  a.remove(1, 2);
  for (int i : {0, 1}) {
    StateWriter w;
    a.save_worker(i, w);
    GossipModels b(3, std::vector<float>(8, 5.0f), LocalUpdate{"momentum", 0.9f, 0.0f});
    StateReader r(w.bytes(), "gossip_worker");
    b.load_worker(i, r);
    StateWriter w2;
    b.save_worker(i, w2);
    EXPECT_EQ(w.bytes(), w2.bytes()) << i;
    EXPECT_EQ(b.live(i), i == 0);
  }
  auto refused = [](GossipModels& m, int i) {
    StateWriter w;
    m.save_worker(i, w);
    GossipModels b(3, std::vector<float>(8, 0.0f), LocalUpdate{"momentum", 0.9f, 0.0f});
    StateReader r(w.bytes(), "gossip_worker");
    EXPECT_THROW(b.load_worker(i, r), InputError);
  };
  GossipModels held = a;
  held.x(1)[3] = 1.0f;  // weight 0, a model
  refused(held, 1);
  GossipModels negative = a;
  negative.weight(0) = -1.0;
  refused(negative, 0);
}

TEST(GossipModels, AdpsgdPairsActiveWithPassiveNeighbours) {
  Rng rng(1, 2);
  const Topology ring("ring", "uniform", 7, 0);
  for (int k = 0; k < 20; ++k) {
    const int p = adpsgd_peer(ring, 2, k, rng);
    EXPECT_TRUE(p == 1 || p == 3) << p;
  }
  EXPECT_EQ(adpsgd_peer(ring, 6, 0, rng), 5);   // 0 is active too
  EXPECT_EQ(adpsgd_peer(ring, 3, 0, rng), -1);  // passive
  // A star's even leaves have only the (active) hub: they pair with it.
  EXPECT_EQ(adpsgd_peer(Topology("star", "uniform", 5, 0), 4, 0, rng), 0);
  EXPECT_EQ(adpsgd_peer(Topology("ring", "uniform", 1, 0), 0, 0, rng), -1);
}

// ---- membership (docs/gossip.md#membership)

// One synchronous round of mixing over the live graph (every live x_i <-
// sum_j w_ij x_j), as the runtimes combine a round.
void MixLive(GossipModels& m, const GossipGraph& g, int64_t t) {
  std::vector<std::vector<float>> next(static_cast<size_t>(m.size()));
  for (int i = 0; i < m.size(); ++i) {
    if (!g.live(i)) continue;
    std::vector<double> ws;
    std::vector<std::span<const float>> srcs;
    for (const auto& [j, w] : g.mixing_row(i, t)) {
      ws.push_back(w);
      srcs.push_back(m.x(j));
    }
    next[static_cast<size_t>(i)].resize(m.num_params());
    weighted_sum(next[static_cast<size_t>(i)], ws, srcs);
  }
  for (int i = 0; i < m.size(); ++i) {
    if (g.live(i)) std::copy(next[size_t(i)].begin(), next[size_t(i)].end(), m.x(i).begin());
  }
}

// One synchronous push-sum round over the live graph; `in_flight` receives
// the shares sent and not yet added (added by Deliver).
struct Share {
  int to;
  std::vector<float> x;
  double w;
};
std::vector<Share> SendShares(GossipModels& m, const GossipGraph& g, int64_t t) {
  std::vector<Share> out;
  for (int i = 0; i < m.size(); ++i) {
    if (!g.live(i)) continue;
    const std::vector<int> peers = g.out_peers(i, t);
    const double share = 1.0 / (static_cast<double>(peers.size()) + 1.0);
    for (float& v : m.x(i)) v = static_cast<float>(v * share);
    m.weight(i) *= share;
    for (int j : peers) out.push_back({j, {m.x(i).begin(), m.x(i).end()}, m.weight(i)});
  }
  return out;
}

double TotalWeight(const GossipModels& m, const std::vector<Share>& flight = {}) {
  double s = 0;
  for (int i = 0; i < m.size(); ++i) s += m.weight(i);
  for (const Share& f : flight) s += f.w;
  return s;
}
std::vector<double> TotalMass(const GossipModels& m, const std::vector<Share>& flight = {}) {
  std::vector<double> s = SumOfModels(m);
  for (const Share& f : flight) {
    for (size_t p = 0; p < s.size(); ++p) s[p] += f.x[p];
  }
  return s;
}

std::vector<char> LiveMask(int n, const std::vector<int>& dead) {
  std::vector<char> live(static_cast<size_t>(n), 1);
  for (int d : dead) live[static_cast<size_t>(d)] = 0;
  return live;
}

// With every worker live the graph is the configured topology, id for id
// (so runs without faults are unchanged); over a live subset, relabelled,
// every topology stays doubly stochastic, the workers that left have no
// peers, and the live workers' ids are worker ids.
TEST(GossipGraph, LiveGraphIsTheTopologyOverTheLiveWorkers) {
  for (const std::string& kind : topology_names()) {
    for (const std::string& weights : topology_weight_names()) {
      const int n = 9;
      GossipGraph g(kind, weights, n, 3);
      const Topology full(kind, weights, n, 3);
      for (int64_t t = 0; t < 4; ++t) {
        for (int i = 0; i < n; ++i) {
          EXPECT_EQ(g.mixing_row(i, t), full.mixing_row(i, t)) << kind;
          EXPECT_EQ(g.out_peers(i, t), full.out_peers(i, t)) << kind;
        }
      }
      for (const std::vector<int>& dead : std::vector<std::vector<int>>{{4}, {0, 3}, {1, 2, 8}}) {
        g.set_live(LiveMask(n, dead));
        EXPECT_EQ(g.live_count(), n - static_cast<int>(dead.size()));
        for (int64_t t = 0; t < 4; ++t) {
          std::vector<double> col(static_cast<size_t>(n), 0.0);
          for (int i = 0; i < n; ++i) {
            const MixRow row = g.mixing_row(i, t);
            if (!g.live(i)) {
              EXPECT_TRUE(row.empty());
              EXPECT_TRUE(g.out_peers(i, t).empty());
              continue;
            }
            double sum = 0;
            for (const auto& [j, w] : row) {
              EXPECT_TRUE(g.live(j)) << kind << ": " << i << " mixes with " << j;
              sum += w;
              col[static_cast<size_t>(j)] += w;
            }
            EXPECT_NEAR(sum, 1.0, 1e-12) << kind;
            for (int j : g.out_peers(i, t)) EXPECT_TRUE(g.live(j));
          }
          for (int i = 0; i < n; ++i) {
            if (g.live(i)) {
              EXPECT_NEAR(col[static_cast<size_t>(i)], 1.0, 1e-12) << kind;
            }
          }
        }
      }
    }
  }
}

// dpsgd with lr 0 across kills and a rejoin: between two membership
// changes mixing over the rebuilt graph conserves the sum of the live
// models (1e-6 relative), and the consensus over the live workers goes to
// 0 on the rebuilt graph.
TEST(GossipGraph, MixingOverTheLiveGraphConservesTheLiveSumAndReachesConsensus) {
  for (const std::string& kind : topology_names()) {
    SCOPED_TRACE(kind);
    const int n = 8;
    GossipModels m = Spread(n, 20);
    GossipGraph g(kind, "metropolis", n, 3);
    int64_t t = 0;
    for (int k = 0; k < 10; ++k) MixLive(m, g, t++);
    // Kill 2 and 5 (7 and 5 live: odd included), then 6 rejoins.
    for (const std::vector<int>& dead : std::vector<std::vector<int>>{{2}, {2, 5}, {2, 5, 6}}) {
      g.set_live(LiveMask(n, dead));
      for (int d : dead) {
        if (m.live(d)) m.remove(d, -1);
      }
      const std::vector<double> before = SumOfModels(m);
      for (int k = 0; k < 300; ++k) MixLive(m, g, t++);
      ExpectSameSum(before, SumOfModels(m), "after killing " + std::to_string(dead.back()));
      EXPECT_LT(m.consensus().xi, 1e-4 * m.consensus().norm);
    }
    // Worker 6 rejoins from its live successor (7): the same model, at once.
    g.set_live(LiveMask(n, {2, 5}));
    const int donor = g.successor(6);
    EXPECT_EQ(donor, 7);
    m.join_from(6, donor, false);
    EXPECT_TRUE(std::equal(m.x(6).begin(), m.x(6).end(), m.x(7).begin()));
    EXPECT_EQ(m.weight(6), 1.0);
    const std::vector<double> before = SumOfModels(m);
    for (int k = 0; k < 50; ++k) MixLive(m, g, t++);
    ExpectSameSum(before, SumOfModels(m), "after the rejoin");
  }
}

// sgp: a leaver's (x, w) and the shares in flight to it go to its live
// successor, a joiner takes half of its successor's (x, w): the total
// weight and the total mass (models plus shares in flight) stay what they
// were (1e-9 relative), and the joiner's de-biased model is its donor's.
TEST(GossipGraph, PushSumKeepsTotalWeightAndMassAcrossKillsAndRejoins) {
  const int n = 7;
  GossipModels m = Spread(n, 30);
  GossipGraph g("exp", "uniform", n, 3);
  const double w0 = TotalWeight(m);
  const std::vector<double> x0 = TotalMass(m);
  auto expect_kept = [&](const std::vector<Share>& flight, const std::string& what) {
    EXPECT_NEAR(TotalWeight(m, flight), w0, 1e-9 * w0) << what;
    const std::vector<double> x = TotalMass(m, flight);
    for (size_t p = 0; p < x.size(); ++p) EXPECT_NEAR(x[p], x0[p], 1e-9 * std::abs(x0[p]) + 1e-5);
  };
  int64_t t = 0;
  // A round in flight when worker 3 is killed: its own mass and the shares
  // addressed to it go to its successor 4; shares to live workers arrive.
  std::vector<Share> flight = SendShares(m, g, t++);
  expect_kept(flight, "in flight");
  const int heir = g.successor(3);
  EXPECT_EQ(heir, 4);
  g.set_live(LiveMask(n, {3}));
  m.remove(3, heir);
  for (const Share& s : flight) m.credit(g.live(s.to) ? s.to : heir, s.x, s.w);
  flight.clear();
  EXPECT_EQ(m.weight(3), 0.0);
  expect_kept(flight, "after the kill");
  for (int k = 0; k < 20; ++k) {
    flight = SendShares(m, g, t++);
    for (const Share& s : flight) m.credit(s.to, s.x, s.w);
  }
  flight.clear();
  expect_kept(flight, "after rounds on 6 workers");
  // Worker 3 rejoins from its successor 4: the same de-biased model.
  std::vector<char> live = LiveMask(n, {});
  g.set_live(live);
  m.join_from(3, g.successor(3), true);
  std::vector<float> z3(30), z4(30);
  m.debiased(3, z3);
  m.debiased(4, z4);
  EXPECT_EQ(z3, z4);
  EXPECT_EQ(m.weight(3), m.weight(4));
  expect_kept(flight, "after the rejoin");
}

// adpsgd over the live graph pairs live workers only.
TEST(GossipGraph, AdpsgdPairsOnlyLiveWorkers) {
  GossipGraph g("complete", "uniform", 6, 1);
  g.set_live(LiveMask(6, {1, 3}));
  Rng rng(1, 2);
  for (int k = 0; k < 50; ++k) {
    const int p = adpsgd_peer(g, 0, k, rng);
    EXPECT_EQ(p, 5);  // the one live passive (odd) neighbour
  }
  EXPECT_EQ(adpsgd_peer(g, 1, 0, rng), -1);  // left
  EXPECT_EQ(adpsgd_peer(g, 5, 0, rng), -1);  // passive
  g.set_live(LiveMask(6, {1, 3, 5}));        // no passive worker left: any neighbour
  for (int k = 0; k < 20; ++k) {
    const int p = adpsgd_peer(g, 0, k, rng);
    EXPECT_TRUE(p == 2 || p == 4) << p;
  }
}

}  // namespace
}  // namespace hsgd
