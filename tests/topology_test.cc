// Gossip topologies (core/topology.h): every kind for every n including odd
// ones, doubly stochastic mixing, exact averaging of onepeer-exp, spectral
// gaps against closed forms.
#include "hsgd/core/topology.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "hsgd/core/error.h"

namespace hsgd {
namespace {

// W(t) as a dense matrix: rows and columns sum to 1, entries in [0, 1], and
// a nonzero off-diagonal entry only between neighbours.
void ExpectDoublyStochastic(const Topology& topo, int64_t t) {
  const int n = topo.size();
  const std::vector<double> w = topo.mixing_matrix(t);
  for (int i = 0; i < n; ++i) {
    double row = 0, col = 0;
    for (int j = 0; j < n; ++j) {
      const double x = w[static_cast<size_t>(i * n + j)];
      EXPECT_GE(x, -1e-15) << topo.kind() << " n " << n << " W[" << i << "][" << j << "]";
      row += x;
      col += w[static_cast<size_t>(j * n + i)];
    }
    EXPECT_NEAR(row, 1.0, 1e-12) << topo.kind() << " n " << n << " row " << i;
    EXPECT_NEAR(col, 1.0, 1e-12) << topo.kind() << " n " << n << " column " << i;
  }
}

TEST(Topology, EveryKindIsDoublyStochasticForEveryN) {
  for (const std::string& kind : topology_names()) {
    for (const std::string& weights : topology_weight_names()) {
      for (int n : {1, 2, 3, 4, 5, 7, 8, 9, 12, 15, 16, 31}) {
        const Topology topo(kind, weights, n, 7);
        for (int64_t t = 0; t < 6; ++t) ExpectDoublyStochastic(topo, t);
      }
    }
  }
}

TEST(Topology, UndirectedKindsAreSymmetricAndNeighboursAreMutual) {
  for (const std::string& kind : topology_names()) {
    if (kind == "onepeer-exp") continue;  // directed
    for (int n : {2, 3, 5, 6, 9, 16}) {
      const Topology topo(kind, "metropolis", n, 3);
      for (int64_t t = 0; t < 3; ++t) {
        const std::vector<double> w = topo.mixing_matrix(t);
        for (int i = 0; i < n; ++i) {
          for (int j = 0; j < n; ++j) {
            EXPECT_DOUBLE_EQ(w[static_cast<size_t>(i * n + j)], w[static_cast<size_t>(j * n + i)])
                << kind << " n " << n;
          }
          for (int j : topo.neighbours(i, t)) {
            const std::vector<int> back = topo.neighbours(j, t);
            EXPECT_NE(std::find(back.begin(), back.end(), i), back.end()) << kind;
            EXPECT_NE(j, i);
          }
        }
      }
    }
  }
}

TEST(Topology, DegreesOfTheStaticKinds) {
  EXPECT_EQ(Topology("ring", "uniform", 7, 0).neighbours(0, 0), (std::vector<int>{1, 6}));
  EXPECT_EQ(Topology("ring", "uniform", 2, 0).neighbours(0, 0), (std::vector<int>{1}));
  EXPECT_EQ(Topology("ring", "uniform", 1, 0).neighbours(0, 0), (std::vector<int>{}));
  // 12 = 3 x 4: up, down, left, right.
  EXPECT_EQ(Topology("torus", "uniform", 12, 0).neighbours(0, 0), (std::vector<int>{1, 3, 4, 8}));
  // exp on 16: +-1, +-2, +-4, +-8 (8 = -8).
  EXPECT_EQ(Topology("exp", "uniform", 16, 0).neighbours(0, 0),
            (std::vector<int>{1, 2, 4, 8, 12, 14, 15}));
  EXPECT_EQ(Topology("star", "uniform", 5, 0).neighbours(0, 0), (std::vector<int>{1, 2, 3, 4}));
  EXPECT_EQ(Topology("star", "uniform", 5, 0).neighbours(3, 0), (std::vector<int>{0}));
  EXPECT_EQ(Topology("complete", "uniform", 4, 0).max_degree(), 3);
  // Uniform weights on the star: 1 / (d_max + 1) off the diagonal.
  const MixRow leaf = Topology("star", "uniform", 5, 0).mixing_row(3, 0);
  ASSERT_EQ(leaf.size(), 2u);
  EXPECT_DOUBLE_EQ(leaf[0].second, 0.2);
  EXPECT_DOUBLE_EQ(leaf[1].second, 0.8);
}

TEST(Topology, RandomMatchingIsAMatchingSeededAndChangingWithTheRound) {
  const Topology a("random-matching", "uniform", 9, 11), b("random-matching", "uniform", 9, 11);
  int alone = 0;
  for (int i = 0; i < 9; ++i) {
    EXPECT_EQ(a.neighbours(i, 4), b.neighbours(i, 4));
    EXPECT_LE(a.neighbours(i, 4).size(), 1u);
    alone += a.neighbours(i, 4).empty();
  }
  EXPECT_EQ(alone, 1);  // odd n: one worker sits out
  bool differs = false;
  for (int i = 0; i < 9; ++i) differs |= a.neighbours(i, 4) != a.neighbours(i, 5);
  EXPECT_TRUE(differs);
}

// The product of log2 n rounds of onepeer-exp is 11^T / n exactly when n is
// a power of two: x after k rounds is the mean.
TEST(Topology, OnePeerExpAveragesExactlyInLog2NRounds) {
  for (int k = 1; k <= 6; ++k) {
    const int n = 1 << k;
    const Topology topo("onepeer-exp", "uniform", n, 0);
    EXPECT_EQ(topo.period(), k);
    std::vector<double> x(static_cast<size_t>(n));
    double mean = 0;
    for (int i = 0; i < n; ++i) {
      x[static_cast<size_t>(i)] = std::sin(1.0 + i * 0.7) * 10;
      mean += x[static_cast<size_t>(i)] / n;
    }
    for (int64_t t = 0; t < k; ++t) {
      std::vector<double> next(static_cast<size_t>(n), 0.0);
      for (int i = 0; i < n; ++i) {
        for (const auto& [j, w] : topo.mixing_row(i, t)) {
          next[static_cast<size_t>(i)] += w * x[static_cast<size_t>(j)];
        }
      }
      x = next;
      double spread = 0;
      for (double v : x) spread = std::max(spread, std::abs(v - mean));
      if (t + 1 < k) {
        EXPECT_GT(spread, 1e-6) << "n " << n << " averaged early, after " << t + 1;
      } else {
        EXPECT_LT(spread, 1e-12) << "n " << n;
      }
    }
  }
}

TEST(Topology, OnePeerExpSendsToOnePeerAndReceivesFromOne) {
  const Topology topo("onepeer-exp", "uniform", 6, 0);  // shifts 1, 2, 4
  EXPECT_EQ(topo.out_peers(5, 0), (std::vector<int>{0}));
  EXPECT_EQ(topo.in_peers(0, 0), (std::vector<int>{5}));
  EXPECT_EQ(topo.out_peers(5, 2), (std::vector<int>{3}));
  EXPECT_EQ(topo.in_peers(3, 2), (std::vector<int>{5}));
  EXPECT_EQ(topo.out_peers(1, 3), (std::vector<int>{2}));  // the period is 3
}

TEST(Topology, SpectralGapOfClosedForms) {
  // Complete graph, uniform: W = 11^T / n, gap 1.
  EXPECT_NEAR(spectral_gap(Topology("complete", "uniform", 8, 0)), 1.0, 1e-9);
  // Ring, uniform 1/3: eigenvalues (1 + 2 cos(2 pi k / n)) / 3; |lambda_2|
  // is the largest modulus over k = 1..n-1.
  for (int n : {3, 5, 8, 16, 17}) {
    double lam = 0;
    for (int k = 1; k < n; ++k) {
      lam = std::max(lam, std::abs((1 + 2 * std::cos(2 * std::numbers::pi * k / n)) / 3));
    }
    EXPECT_NEAR(spectral_gap(Topology("ring", "uniform", n, 0)), 1 - lam, 1e-9) << n;
  }
  // Star, uniform (1 / n off the diagonal): eigenvalues 1, 0 and 1 - 1/n.
  EXPECT_NEAR(spectral_gap(Topology("star", "uniform", 6, 0)), 1.0 / 6, 1e-9);
  EXPECT_NEAR(spectral_gap(Topology("ring", "uniform", 1, 0)), 1.0, 0);
  EXPECT_TRUE(std::isnan(spectral_gap(Topology("onepeer-exp", "uniform", 8, 0))));
  // Denser graphs mix faster.
  EXPECT_GT(spectral_gap(Topology("exp", "uniform", 16, 0)),
            spectral_gap(Topology("torus", "uniform", 16, 0)));
  EXPECT_GT(spectral_gap(Topology("torus", "uniform", 16, 0)),
            spectral_gap(Topology("ring", "uniform", 16, 0)));
}

TEST(Topology, UnknownNamesAreRefusedNamingTheKey) {
  try {
    Topology("hypercube", "uniform", 4, 0);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("gossip.topology = 'hypercube'"), std::string::npos);
  }
  try {
    Topology("ring", "max", 4, 0);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("gossip.weights = 'max'"), std::string::npos);
  }
}

}  // namespace
}  // namespace hsgd
