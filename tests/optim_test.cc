#include <gtest/gtest.h>

#include "hsgd/core/error.h"
#include "hsgd/optim/optimizer.h"

namespace hsgd {
namespace {

TEST(Optimizer, SgdWithWeightDecay) {
  std::vector<float> w = {1.0f, -2.0f};
  std::vector<float> g = {0.5f, 0.5f};
  make_optimizer({.kind = "sgd", .lr = 0.1, .weight_decay = 0.1}, 2)->step(w, g, 0.1);
  EXPECT_FLOAT_EQ(w[0], 1.0f - 0.1f * (0.5f + 0.1f));
  EXPECT_FLOAT_EQ(w[1], -2.0f - 0.1f * (0.5f - 0.2f));
}

TEST(Optimizer, MomentumAndNesterovMatchHandComputedSteps) {
  for (bool nesterov : {false, true}) {
    auto opt = make_optimizer({.kind = nesterov ? "nesterov" : "momentum", .momentum = 0.9}, 1);
    std::vector<float> w = {0.0f};
    float v = 0, ref = 0;
    for (int t = 0; t < 5; ++t) {
      std::vector<float> g = {1.0f + t};
      opt->step(w, g, 0.1);
      v = 0.9f * v + (1.0f + t);
      ref -= 0.1f * (nesterov ? (1.0f + t) + 0.9f * v : v);
      EXPECT_FLOAT_EQ(w[0], ref);
    }
    std::vector<float> state = opt->save_state();
    ASSERT_EQ(state.size(), 1u);
    EXPECT_FLOAT_EQ(state[0], v);
  }
}

TEST(LrSchedule, StepCosineWarmup) {
  LrSchedule s{.kind = "step", .step_size = 10, .gamma = 0.5};
  EXPECT_DOUBLE_EQ(lr_at(s, 1.0, 9), 1.0);
  EXPECT_DOUBLE_EQ(lr_at(s, 1.0, 10), 0.5);
  EXPECT_DOUBLE_EQ(lr_at(s, 1.0, 25), 0.25);
  LrSchedule c{.kind = "cosine", .horizon = 100, .min_lr = 0.0};
  EXPECT_DOUBLE_EQ(lr_at(c, 1.0, 0), 1.0);
  EXPECT_NEAR(lr_at(c, 1.0, 50), 0.5, 1e-12);
  EXPECT_NEAR(lr_at(c, 1.0, 100), 0.0, 1e-12);
  EXPECT_NEAR(lr_at(c, 1.0, 200), 0.0, 1e-12);
  LrSchedule w{.kind = "constant", .warmup = 4};
  EXPECT_DOUBLE_EQ(lr_at(w, 1.0, 0), 0.25);
  EXPECT_DOUBLE_EQ(lr_at(w, 1.0, 3), 1.0);
  EXPECT_DOUBLE_EQ(lr_at(w, 1.0, 4), 1.0);
}

TEST(Optimizer, ValidationNamesTheKey) {
  auto message = [](OptimizerOptions o, LrSchedule s) {
    try {
      validate(o, s);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(message({.lr = 0}, {}).find("optim.lr"), std::string::npos);
  EXPECT_NE(message({.lr = -1}, {}).find("optim.lr"), std::string::npos);
  EXPECT_NE(message({.kind = "adamw"}, {}).find("optim.kind"), std::string::npos);
  EXPECT_NE(message({.momentum = 1.0}, {}).find("optim.momentum"), std::string::npos);
  EXPECT_NE(message({}, {.kind = "cosine"}).find("optim.lr_horizon"), std::string::npos);
  EXPECT_EQ(message({}, {}), "");
}

}  // namespace
}  // namespace hsgd
