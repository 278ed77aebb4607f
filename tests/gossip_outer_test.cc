// SlowMo on the gossip policies' global average (runtime/gossip_outer.h):
// when it is on, its step against the paper's formulas written out, and its
// state's save and load. (Its use by the runtimes: gossip_sim_test,
// gossip_threads_test, mpi_gossip_test.)
#include "hsgd/runtime/gossip_outer.h"

#include <gtest/gtest.h>

#include <vector>

#include "hsgd/config/config.h"
#include "hsgd/core/error.h"

namespace hsgd {
namespace {

Config config(const std::vector<Override>& o) {
  std::vector<Override> all = {
      {"data.spec", "synthetic"}, {"model.name", "linear-test"}, {"train.budget", "1"}};
  all.insert(all.end(), o.begin(), o.end());
  return load_config("", all);
}

TEST(GossipOuter, OnlyAGossipPolicyWithAGlobalAverageAndAnOuterStepHasOne) {
  const std::vector<float> init = {1, 2, 3};
  const std::vector<Override> slowmo = {{"gossip.global_every", "4"}, {"local.outer", "momentum"}};
  auto with = [&](std::vector<Override> o) {
    o.insert(o.begin(), slowmo.begin(), slowmo.end());
    return GossipOuter::make(config(o), init) != nullptr;
  };
  EXPECT_TRUE(with({{"policy.name", "dpsgd"}}));
  EXPECT_TRUE(with({{"policy.name", "sgp"}}));
  EXPECT_TRUE(with({{"policy.name", "pdsgdm:2"}}));
  EXPECT_TRUE(with({{"policy.name", "dpsgd"}, {"local.outer", "sgd"}, {"local.outer_lr", "0.5"}}));
  // The plain average: sgd with lr 1 (the defaults).
  EXPECT_FALSE(with({{"policy.name", "dpsgd"}, {"local.outer", "sgd"}}));
  EXPECT_FALSE(with({{"policy.name", "dpsgd"}, {"gossip.global_every", "0"}}));
  EXPECT_FALSE(with({{"policy.name", "async"}}));
}

// u <- beta u + (anchor - avg); anchor <- anchor - alpha u; x_i <- anchor
// (SlowMo, Wang et al. 2020, Algorithm 1 with the base lr folded into u).
TEST(GossipOuter, MomentumIsSlowMoWrittenOut) {
  const double alpha = 0.75, beta = 0.5;
  const Config c = config({{"policy.name", "dpsgd"},
                           {"gossip.global_every", "4"},
                           {"local.outer", "momentum"},
                           {"local.outer_lr", "0.75"},
                           {"local.outer_momentum", "0.5"}});
  const std::vector<float> init = {1.0f, -2.0f, 0.5f};
  std::unique_ptr<GossipOuter> o = GossipOuter::make(c, init);
  ASSERT_TRUE(o);
  std::vector<double> anchor(init.begin(), init.end()), u(3, 0.0);
  const std::vector<std::vector<float>> averages = {
      {0.5f, -1.0f, 0.25f}, {0.25f, -0.5f, 1.0f}, {0.0f, 0.0f, 2.0f}};
  for (const std::vector<float>& a : averages) {
    std::vector<float> avg = a;
    o->apply(avg);
    for (size_t p = 0; p < 3; ++p) {
      u[p] = beta * u[p] + (anchor[p] - a[p]);
      anchor[p] -= alpha * u[p];
      EXPECT_NEAR(avg[p], anchor[p], 1e-6) << "parameter " << p;
      EXPECT_EQ(avg[p], o->anchor()[p]);
    }
  }
}

TEST(GossipOuter, SgdWithLrHalfStopsHalfWayToTheAverage) {
  const Config c = config({{"policy.name", "sgp"},
                           {"gossip.global_every", "2"},
                           {"local.outer", "sgd"},
                           {"local.outer_lr", "0.5"}});
  std::unique_ptr<GossipOuter> o = GossipOuter::make(c, std::vector<float>{2.0f, 4.0f});
  ASSERT_TRUE(o);
  std::vector<float> avg = {0.0f, 8.0f};
  o->apply(avg);
  EXPECT_EQ(avg, (std::vector<float>{1.0f, 6.0f}));
}

// A loaded state goes on as the saved one would have, bit for bit (the
// momentum buffer and the anchor both restored).
TEST(GossipOuter, ALoadedStateContinuesAsTheSavedOne) {
  const Config c = config({{"policy.name", "dpsgd"},
                           {"gossip.global_every", "4"},
                           {"local.outer", "nesterov"},
                           {"local.outer_momentum", "0.7"}});
  const std::vector<float> init = {1.0f, 2.0f, 3.0f, 4.0f};
  std::unique_ptr<GossipOuter> a = GossipOuter::make(c, init);
  std::vector<float> avg = {0.5f, 1.5f, 2.5f, 3.0f};
  a->apply(avg);
  StateWriter w;
  a->save(w);
  const std::string bytes = w.take();
  std::unique_ptr<GossipOuter> b = GossipOuter::make(c, init);
  StateReader r(bytes, "test");
  b->load(r);
  r.expect_end();
  std::vector<float> next_a = {0.25f, 1.0f, 2.0f, 2.5f}, next_b = next_a;
  a->apply(next_a);
  b->apply(next_b);
  EXPECT_EQ(next_a, next_b);
  // Another model size is refused, naming the blob.
  std::unique_ptr<GossipOuter> small = GossipOuter::make(c, std::vector<float>{1.0f});
  StateReader r2(bytes, "gossip_outer");
  EXPECT_THROW(small->load(r2), InputError);
}

}  // namespace
}  // namespace hsgd
