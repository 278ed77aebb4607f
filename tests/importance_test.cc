// Tests for hsgd/data/importance and importance sampling in ShardSampler:
// constant scores are uniform, draws follow the mixed distribution, weights
// are 1 / (N p), the weighted gradient of the linear-test model is unbiased,
// and a sampler with scores saves and restores exactly.
#include "hsgd/data/importance.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "hsgd/core/error.h"
#include "hsgd/data/dataset.h"
#include "hsgd/model/linear_model.h"

namespace hsgd {
namespace {

TEST(ImportanceTable, ConstantScoresAreUniformWithUnitWeights) {
  for (float score : {0.0f, 0.7f, 3.0f}) {
    ImportanceTable t(10);
    for (size_t i = 0; i < 10; ++i) t.set_score(i, score);
    Rng rng(1, 2);
    std::vector<int64_t> pos;
    std::vector<float> w;
    t.draw(100000, 0.1, rng, &pos, &w);
    std::vector<int> count(10, 0);
    for (int64_t p : pos) ++count[static_cast<size_t>(p)];
    // Binomial(1e5, 0.1): sd ~ 95; 5 sd.
    for (int c : count) EXPECT_NEAR(c, 10000, 475) << "score " << score;
    for (float x : w) ASSERT_FLOAT_EQ(x, 1.0f);
  }
}

TEST(ImportanceTable, UnseenScoresAreUniformToo) {
  ImportanceTable t(4);
  Rng rng(3, 4);
  std::vector<int64_t> pos;
  std::vector<float> w;
  t.draw(10, 0.5, rng, &pos, &w);
  for (float x : w) EXPECT_FLOAT_EQ(x, 1.0f);
}

TEST(ImportanceTable, ProportionalToScoreMixedWithUniform) {
  ImportanceTable t(3);
  t.set_score(0, 1.0f);
  t.set_score(1, 3.0f);
  // Example 2 unseen: scored at the mean of the seen ones, 2.
  // p = 0.8 s / 6 + 0.2 / 3 = {0.2, 0.4667, 0.3333}.
  const double p[3] = {0.8 / 6 + 0.2 / 3, 2.4 / 6 + 0.2 / 3, 1.6 / 6 + 0.2 / 3};
  Rng rng(5, 6);
  std::vector<int64_t> pos;
  std::vector<float> w;
  const int n = 200000;
  t.draw(n, 0.2, rng, &pos, &w);
  std::vector<int> count(3, 0);
  for (size_t k = 0; k < pos.size(); ++k) {
    const size_t i = static_cast<size_t>(pos[k]);
    ++count[i];
    ASSERT_NEAR(w[k], 1.0 / (3 * p[i]), 1e-5);
  }
  for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(count[i] / static_cast<double>(n), p[i], 0.005);
}

TEST(ImportanceTable, ValidateNamesTheKey) {
  SamplingOptions o;
  o.kind = "gradnorm";
  EXPECT_THROW(validate(o), InputError);
  o.kind = "loss";
  o.uniform_mix = 0;
  try {
    validate(o);
    ADD_FAILURE();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("sampling.uniform_mix = 0"), std::string::npos);
  }
  o.uniform_mix = 0.5;
  o.warmup = -1;
  EXPECT_THROW(validate(o), InputError);
}

// n samples of f features, 3 classes, deterministic pseudo-random values.
Dataset blob(int64_t n, int64_t f) {
  Dataset d;
  d.name = "blob";
  d.sample_shape = {f};
  d.num_classes = 3;
  Rng rng(11, 12);
  for (int64_t i = 0; i < n; ++i) {
    const int y = static_cast<int>(i % 3);
    for (int64_t j = 0; j < f; ++j)
      d.features.push_back(static_cast<float>(rng.normal() + y * (j == y)));
    d.labels.push_back(y);
  }
  return d;
}

std::vector<int64_t> all(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), int64_t{0});
  return v;
}

SamplingOptions loss_sampling(int64_t warmup, double mix = 0.2) {
  SamplingOptions o;
  o.kind = "loss";
  o.warmup = warmup;
  o.uniform_mix = mix;
  return o;
}

TEST(ImportanceSampler, WarmupIsUniformThenWeighted) {
  const Dataset d = blob(30, 2);
  ShardSampler s(d, 0, all(30), 1, loss_sampling(1));
  EXPECT_TRUE(s.wants_losses());
  Batch b;
  s.next(30, &b);  // the warm-up epoch: a permutation, no weights
  EXPECT_TRUE(b.weights.empty());
  std::vector<float> losses(30);
  for (size_t i = 0; i < 30; ++i) losses[i] = static_cast<float>(b.features[2 * i] > 0 ? 5 : 0.1);
  s.observe(losses);
  s.next(10, &b);
  ASSERT_EQ(b.weights.size(), 10u);
  EXPECT_EQ(s.epoch(), 1);
  // The high-loss samples are drawn more often and weigh less.
  int high = 0;
  for (size_t i = 0; i < 10; ++i) {
    if (b.features[2 * i] > 0) {
      ++high;
      EXPECT_LT(b.weights[i], 1.0f);
    } else {
      EXPECT_GT(b.weights[i], 1.0f);
    }
  }
  EXPECT_GT(high, 0);
  ShardSampler uniform(d, 0, all(30), 1);
  EXPECT_FALSE(uniform.wants_losses());
  uniform.next(45, &b);
  EXPECT_TRUE(b.weights.empty());
}

TEST(ImportanceSampler, SaveAndRestoreWithScores) {
  const Dataset d = blob(40, 2);
  ShardSampler a(d, 3, all(40), 9, loss_sampling(0));
  Batch b;
  std::vector<float> losses(16);
  for (int round = 0; round < 5; ++round) {
    a.next(16, &b);
    for (size_t i = 0; i < 16; ++i) losses[i] = std::abs(b.features[2 * i]) + 0.01f * round;
    a.observe(losses);
  }
  const SamplerState saved = a.state();
  EXPECT_EQ(saved.scores.size(), 40u);
  Batch expect, got;
  a.next(50, &expect);
  ShardSampler fresh(d, 3, all(40), 9, loss_sampling(0));
  fresh.restore(saved);
  fresh.next(50, &got);
  EXPECT_EQ(got.features, expect.features);
  EXPECT_EQ(got.weights, expect.weights);
  EXPECT_EQ(fresh.epoch(), a.epoch());
  SamplerState bad = saved;
  bad.scores.pop_back();
  EXPECT_THROW(fresh.restore(bad), InputError);
}

// E[weighted minibatch gradient] = full-batch gradient, on the linear-test
// model, averaging many importance-sampled batches with skewed scores. The
// same average without the weights is biased: the check can fail.
TEST(ImportanceSampler, WeightedGradientIsUnbiased) {
  const int64_t n = 60, f = 4;
  const Dataset d = blob(n, f);
  auto model = make_linear_model(f, 3);
  std::vector<float> params(static_cast<size_t>(model->num_params()));
  std::vector<float> grads(params.size());
  model->bind(params, grads);
  Rng init(2, 3);
  for (float& p : params) p = static_cast<float>(0.5 * init.normal());

  Batch full;
  gather(d, all(n), &full);
  model->gradient(full);
  const std::vector<float> g_full = grads;

  // Each sample's true loss as its score: one uniform warm-up epoch, observed.
  ShardSampler scorer(d, 0, all(n), 4, loss_sampling(1, 0.1));
  Batch epoch;
  scorer.next(n, &epoch);
  std::vector<float> epoch_losses(static_cast<size_t>(n));
  model->gradient(epoch, epoch_losses);
  scorer.observe(epoch_losses);

  const int draws = 20000;
  const int64_t batch = 8;
  std::vector<double> weighted(grads.size(), 0.0), unweighted(grads.size(), 0.0);
  Batch b;
  double min_w = 1e9, max_w = 0;
  for (int r = 0; r < draws; ++r) {
    scorer.next(batch, &b);
    ASSERT_EQ(b.weights.size(), static_cast<size_t>(batch));
    for (float w : b.weights)
      min_w = std::min<double>(min_w, w), max_w = std::max<double>(max_w, w);
    model->gradient(b);
    for (size_t i = 0; i < grads.size(); ++i) weighted[i] += grads[i];
    b.weights.clear();
    model->gradient(b);
    for (size_t i = 0; i < grads.size(); ++i) unweighted[i] += grads[i];
  }
  EXPECT_LT(min_w, 0.8);  // the scores really skew the draws
  EXPECT_GT(max_w, 1.5);
  double norm = 0, err_w = 0, err_u = 0;
  for (size_t i = 0; i < grads.size(); ++i) {
    norm += g_full[i] * g_full[i];
    err_w += std::pow(weighted[i] / draws - g_full[i], 2);
    err_u += std::pow(unweighted[i] / draws - g_full[i], 2);
  }
  norm = std::sqrt(norm);
  err_w = std::sqrt(err_w);
  err_u = std::sqrt(err_u);
  EXPECT_LT(err_w, 0.03 * norm) << "weighted error " << err_w << " vs |g| " << norm;
  EXPECT_GT(err_u, 3 * err_w) << "unweighted error " << err_u;
}

}  // namespace
}  // namespace hsgd
