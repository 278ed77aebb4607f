#include "hsgd/core/rng.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <vector>

namespace hsgd {
namespace {

TEST(Rng, StreamsAreDeterministicAndIndependent) {
  Rng a(7, 1), b(7, 1), c(7, 2), d(8, 1);
  for (int i = 0; i < 100; ++i) {
    const uint64_t x = a.next_u64();
    EXPECT_EQ(x, b.next_u64());
    EXPECT_NE(x, c.next_u64());
    EXPECT_NE(x, d.next_u64());
  }
}

TEST(Rng, StateRoundTrips) {
  Rng a(3, 4);
  a.next_u64();
  Rng b;
  b.set_state(a.state());
  for (int i = 0; i < 10; ++i) EXPECT_EQ(a.next_u64(), b.next_u64());
}

TEST(Rng, DistributionsHaveTheRightMoments) {
  Rng r(1, 1);
  const int n = 200000;
  double su = 0, sn = 0, sn2 = 0;
  for (int i = 0; i < n; ++i) {
    const double u = r.uniform();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    su += u;
    const double z = r.normal();
    sn += z;
    sn2 += z * z;
  }
  EXPECT_NEAR(su / n, 0.5, 0.01);
  EXPECT_NEAR(sn / n, 0.0, 0.01);
  EXPECT_NEAR(sn2 / n, 1.0, 0.02);
  for (int i = 0; i < 1000; ++i) EXPECT_LT(r.below(7), 7u);
  EXPECT_EQ(r.below(0), 0u);
}

TEST(Rng, ShuffleIsAPermutation) {
  std::vector<int> v(50);
  std::iota(v.begin(), v.end(), 0);
  Rng r(5, 5);
  shuffle(v, r);
  std::vector<int> sorted = v;
  std::sort(sorted.begin(), sorted.end());
  for (int i = 0; i < 50; ++i) EXPECT_EQ(sorted[i], i);
  std::vector<int> w(50);
  std::iota(w.begin(), w.end(), 0);
  EXPECT_NE(v, w);
}

}  // namespace
}  // namespace hsgd
