// The gradient noise scale (server/noise.h): the estimator on gradients of
// a known mean and covariance, the pairing rules, and its checkpoint state.
#include "hsgd/server/noise.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "hsgd/core/error.h"

namespace hsgd {
namespace {

// Gradients of batch b: G + (the mean of b per-sample noises), G_i = 0.1
// over d = 100 coordinates (|G|^2 = 1), per-sample noise N(0, 1) per
// coordinate (tr(S) = 100): B_simple = 100 samples.
std::vector<float> draw(std::mt19937_64& rng, int64_t b, size_t d = 100) {
  std::normal_distribution<double> n(0.0, 1.0 / std::sqrt(static_cast<double>(b)));
  std::vector<float> g(d);
  for (float& v : g) v = static_cast<float>(0.1 + n(rng));
  return g;
}

TEST(NoiseScale, EstimatesTheKnownNormTraceAndScale) {
  for (const int64_t b : {1, 4, 32}) {
    SCOPED_TRACE(b);
    std::mt19937_64 rng(7);
    NoisePairs p;
    for (int i = 0; i < 100000; ++i) p.observe(draw(rng, b), b, 0);
    const NoiseSums s = p.take();
    EXPECT_EQ(s.pairs, 50000);
    EXPECT_NEAR(s.mean_norm(), 1.0, 0.05 * std::max<double>(1.0, 100.0 / b / 4));
    EXPECT_NEAR(s.mean_trace(), 100.0, 2.0);
    EXPECT_NEAR(s.scale(), 100.0, 8.0);
  }
}

TEST(NoiseScale, PairsConsecutivePushesOfOneBatchSize) {
  NoisePairs p;
  const std::vector<float> a = {1, 0}, b = {0, 1};
  p.observe(a, 2, 5);
  EXPECT_EQ(p.take().pairs, 0);  // an open pair is not counted...
  p.observe(b, 2, 8);            // ...and survives take()
  NoiseSums s = p.take();
  ASSERT_EQ(s.pairs, 1);
  // |g_b|^2 = 1, |g_2b|^2 = |(0.5, 0.5)|^2 = 0.5: |G|^2 = 2 x 0.5 - 1 = 0,
  // tr(S) = 2 x 2 x (1 - 0.5) = 2, and no scale without a positive |G|^2.
  EXPECT_DOUBLE_EQ(s.mean_norm(), 0.0);
  EXPECT_DOUBLE_EQ(s.mean_trace(), 2.0);
  EXPECT_TRUE(std::isnan(s.scale()));
  EXPECT_DOUBLE_EQ(s.mean_lag(), 3.0);  // versions 5 and 8
  // A push of another batch size restarts the pair: (a, 2), (a, 3), (a, 3)
  // make one pair, of the two equal ones (identical: no noise, |G|^2 = 1).
  p.observe(a, 2, 9);
  p.observe(a, 3, 9);
  p.observe(a, 3, 9);
  s = p.take();
  ASSERT_EQ(s.pairs, 1);
  EXPECT_DOUBLE_EQ(s.mean_norm(), 1.0);
  EXPECT_DOUBLE_EQ(s.mean_trace(), 0.0);
  EXPECT_DOUBLE_EQ(s.scale(), 0.0);
  EXPECT_DOUBLE_EQ(s.mean_lag(), 0.0);  // one version: the estimator's assumption
  // Sums of shards add up: two halves of a vector give the whole's sums.
  NoisePairs whole, left, right;
  const std::vector<float> x = {1, 2, 3, 4}, y = {4, 1, 0, 2};
  uint64_t v = 3;
  for (const auto* g : {&x, &y}) {
    whole.observe(*g, 8, v);
    left.observe(std::span<const float>(*g).first(2), 8, v);
    right.observe(std::span<const float>(*g).last(2), 8, v);
    v += 2;
  }
  NoiseSums halves = left.take();
  halves.add_part(right.take());
  const NoiseSums w = whole.take();
  EXPECT_DOUBLE_EQ(halves.trace, w.trace);
  EXPECT_DOUBLE_EQ(halves.norm, w.norm);
  EXPECT_EQ(halves.pairs, w.pairs);  // the pairs and their lag are the same on every shard
  EXPECT_DOUBLE_EQ(halves.lag, 2.0);
  EXPECT_DOUBLE_EQ(w.lag, 2.0);
}

TEST(NoiseScale, ACheckpointKeepsTheSumsAndTheOpenPair) {
  std::mt19937_64 rng(3);
  std::vector<std::vector<float>> g;
  for (int i = 0; i < 7; ++i) g.push_back(draw(rng, 8));
  NoisePairs straight, first;
  for (size_t i = 0; i < g.size(); ++i) straight.observe(g[i], 8, 10 + i * i);
  for (size_t i = 0; i < 5; ++i) first.observe(g[i], 8, 10 + i * i);  // a pair open
  StateWriter w;
  first.save(w);
  const std::string bytes = w.take();
  StateReader r(bytes, "noise");
  NoisePairs second;
  second.load(r, 100);
  for (size_t i = 5; i < 7; ++i) second.observe(g[i], 8, 10 + i * i);
  const NoiseSums a = straight.take(), b = second.take();
  EXPECT_EQ(b.pairs, 3);
  EXPECT_EQ(a.pairs, b.pairs);
  EXPECT_DOUBLE_EQ(a.trace, b.trace);
  EXPECT_DOUBLE_EQ(a.norm, b.norm);
  EXPECT_DOUBLE_EQ(a.lag, b.lag);  // 1 + 5 + 9 (the open pair's first version kept)
  EXPECT_DOUBLE_EQ(b.lag, 15.0);
  // Non-finite sums (a corrupt checkpoint) are refused, not carried into the
  // columns.
  StateWriter bad;
  bad.put<double>(std::nan(""));
  bad.put<double>(1.0);
  bad.put<int64_t>(1);
  bad.put<double>(0.0);
  bad.put_vec(std::vector<float>{});
  bad.put<int64_t>(0);
  bad.put<double>(0.0);
  bad.put<uint64_t>(0);
  const std::string bad_bytes = bad.take();
  StateReader br(bad_bytes, "noise");
  NoisePairs refused;
  EXPECT_THROW(refused.load(br, 100), InputError);
  // A saved open pair of another parameter count is refused, naming the blob.
  StateReader again(bytes, "noise");
  NoisePairs other;
  try {
    other.load(again, 50);
    FAIL() << "a pair of 100 floats loaded into 50";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("noise"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace hsgd
