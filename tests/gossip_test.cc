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

}  // namespace
}  // namespace hsgd
