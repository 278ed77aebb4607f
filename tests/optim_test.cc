#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <span>

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

TEST(Optimizer, AdamMatchesHandComputedBiasCorrectedSteps) {
  // Two coordinates, weight decay 0.1, three steps, against double-precision
  // arithmetic written out here.
  const double b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.1, lr = 0.01;
  auto opt =
      make_optimizer({.kind = "adam", .weight_decay = wd, .beta1 = b1, .beta2 = b2, .eps = eps}, 2);
  std::vector<float> w = {1.0f, -0.5f};
  double rw[2] = {1.0, -0.5}, m[2] = {0, 0}, v[2] = {0, 0};
  const float grads[3][2] = {{0.5f, -1.0f}, {0.25f, 2.0f}, {-0.75f, 0.0f}};
  for (int t = 1; t <= 3; ++t) {
    std::vector<float> g = {grads[t - 1][0], grads[t - 1][1]};
    opt->step(w, g, lr);
    for (int i = 0; i < 2; ++i) {
      const double gi = grads[t - 1][i] + wd * rw[i];
      m[i] = b1 * m[i] + (1 - b1) * gi;
      v[i] = b2 * v[i] + (1 - b2) * gi * gi;
      const double mh = m[i] / (1 - std::pow(b1, t)), vh = v[i] / (1 - std::pow(b2, t));
      rw[i] -= lr * mh / (std::sqrt(vh) + eps);
      EXPECT_NEAR(w[i], rw[i], 1e-6) << "step " << t << " coordinate " << i;
    }
  }
  // The first step of Adam moves every coordinate by lr * sign(g) (|g| >> eps).
  auto fresh = make_optimizer({.kind = "adam"}, 1);
  std::vector<float> w1 = {0.0f}, g1 = {-3.0f};
  fresh->step(w1, g1, 0.01);
  EXPECT_NEAR(w1[0], 0.01f, 1e-7);
}

TEST(Optimizer, AdamStateRestoresExactly) {
  auto a = make_optimizer({.kind = "adam"}, 3);
  std::vector<float> wa = {0.1f, 0.2f, 0.3f};
  for (int t = 0; t < 4; ++t) {
    std::vector<float> g = {1.0f * t, -0.5f, 0.25f * t};
    a->step(wa, g, 0.01);
  }
  const std::vector<float> state = a->save_state();
  ASSERT_EQ(state.size(), 2u + 2 * 3);
  EXPECT_EQ(state[0], 0.0f);  // t = 4: high half 0, low half 4
  EXPECT_EQ(state[1], 4.0f);
  auto b = make_optimizer({.kind = "adam"}, 3);
  b->restore_state(state);
  std::vector<float> wb = wa;
  std::vector<float> g = {0.3f, 0.3f, -0.3f}, h = g;
  a->step(wa, g, 0.01);
  b->step(wb, h, 0.01);
  EXPECT_EQ(wa, wb);
  EXPECT_EQ(a->save_state(), b->save_state());
}

// Inputs for the kernel tests: 1003 parameters (not a multiple of 4, 8 or
// 16: the scalar tail runs too) and three steps' gradients mixing tiny and
// ordinary magnitudes.
struct KernelInputs {
  size_t n = 1003;
  std::vector<float> w0;
  std::vector<float> grads[3];
  KernelInputs() : w0(n) {
    for (size_t i = 0; i < n; ++i) {
      w0[i] = std::sin(0.37f * static_cast<float>(i));
      for (int t = 0; t < 3; ++t) {
        grads[t].push_back(std::cos(0.11f * static_cast<float>(i * (t + 2))) *
                           (i % 7 == 0 ? 1e-4f : 1.5f));
      }
    }
  }
};

// SGD (with and without weight decay), momentum and Nesterov against their
// formulas computed one element at a time: the kernels (SSE2 or AVX2,
// whichever this CPU runs) give the same bits.
TEST(Optimizer, VectorizedSgdAndMomentumAreBitwiseTheScalarFormulas) {
  const KernelInputs in;
  const size_t n = in.n;
  const std::vector<float>& w0 = in.w0;
  const auto& grads = in.grads;
  const double lr = 0.03, mu = 0.9;
  for (const double wd : {0.0, 0.01}) {
    auto sgd = make_optimizer({.kind = "sgd", .weight_decay = wd}, n);
    auto mom = make_optimizer({.kind = "momentum", .momentum = mu, .weight_decay = wd}, n);
    auto nes = make_optimizer({.kind = "nesterov", .momentum = mu, .weight_decay = wd}, n);
    std::vector<float> ws = w0, wm = w0, wn = w0, rs = w0, rm = w0, rn = w0, vm(n, 0), vn(n, 0);
    const float a = static_cast<float>(lr), fwd = static_cast<float>(wd),
                fmu = static_cast<float>(mu);
    for (int t = 0; t < 3; ++t) {
      sgd->step(ws, grads[t], lr);
      mom->step(wm, grads[t], lr);
      nes->step(wn, grads[t], lr);
      for (size_t i = 0; i < n; ++i) {
        volatile float gs = wd != 0 ? grads[t][i] + fwd * rs[i] : grads[t][i];
        rs[i] -= a * gs;
        volatile float gm = grads[t][i] + fwd * rm[i];
        vm[i] = fmu * vm[i] + gm;
        rm[i] -= a * vm[i];
        volatile float gn = grads[t][i] + fwd * rn[i];
        vn[i] = fmu * vn[i] + gn;
        rn[i] -= a * (gn + fmu * vn[i]);
      }
      for (size_t i = 0; i < n; ++i) {
        ASSERT_EQ(std::bit_cast<uint32_t>(ws[i]), std::bit_cast<uint32_t>(rs[i]))
            << "sgd wd " << wd << ", step " << t << ", element " << i;
        ASSERT_EQ(std::bit_cast<uint32_t>(wm[i]), std::bit_cast<uint32_t>(rm[i]))
            << "momentum wd " << wd << ", step " << t << ", element " << i;
        ASSERT_EQ(std::bit_cast<uint32_t>(wn[i]), std::bit_cast<uint32_t>(rn[i]))
            << "nesterov wd " << wd << ", step " << t << ", element " << i;
      }
    }
  }
}

// The vectorized Adam and Adagrad loops (SSE2 or AVX2, chosen at load time;
// the remainder scalar) give the same bits as the per-element formula in
// float, written out here one element at a time: the kernels only change
// how many lanes run at once, never the operations or their order (#12).
TEST(Optimizer, VectorizedAdamAndAdagradAreBitwiseTheScalarFormula) {
  const KernelInputs in;
  const size_t n = in.n;
  const std::vector<float>& w0 = in.w0;
  const auto& grads = in.grads;
  const double b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.01, lr = 0.003;
  auto adam =
      make_optimizer({.kind = "adam", .weight_decay = wd, .beta1 = b1, .beta2 = b2, .eps = eps}, n);
  auto adagrad = make_optimizer({.kind = "adagrad", .weight_decay = wd, .eps = eps}, n);
  std::vector<float> wa = w0, wg = w0, ra = w0, rg = w0, m(n, 0), v(n, 0), acc(n, 0);
  const float fwd = static_cast<float>(wd), fb1 = static_cast<float>(b1),
              fb2 = static_cast<float>(b2);
  const float feps = static_cast<float>(eps), a = static_cast<float>(lr);
  for (int t = 1; t <= 3; ++t) {
    adam->step(wa, grads[t - 1], lr);
    adagrad->step(wg, grads[t - 1], lr);
    const float c1 = static_cast<float>(1.0 - std::pow(b1, t));
    const float c2 = static_cast<float>(1.0 - std::pow(b2, t));
    for (size_t i = 0; i < n; ++i) {
      volatile float gi = grads[t - 1][i] + fwd * ra[i];  // volatile: one element at a time
      m[i] = fb1 * m[i] + (1.0f - fb1) * gi;
      v[i] = fb2 * v[i] + (1.0f - fb2) * gi * gi;
      ra[i] -= a * (m[i] / c1) / (std::sqrt(v[i] / c2) + feps);
      volatile float hi = grads[t - 1][i] + fwd * rg[i];
      acc[i] += hi * hi;
      rg[i] -= a * hi / (std::sqrt(acc[i]) + feps);
    }
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(std::bit_cast<uint32_t>(wa[i]), std::bit_cast<uint32_t>(ra[i]))
          << "adam, step " << t << ", element " << i << ": " << wa[i] << " vs " << ra[i];
      ASSERT_EQ(std::bit_cast<uint32_t>(wg[i]), std::bit_cast<uint32_t>(rg[i]))
          << "adagrad, step " << t << ", element " << i << ": " << wg[i] << " vs " << rg[i];
    }
  }
}

// Issue 30: the mpi server runs a step in parts (chunks of mpi.chunk
// floats) to send each part as it becomes final. Parts of odd sizes (not
// multiples of any vector width), taken front to back, give the bits of the
// whole step, for every optimizer, over steps whose state carries on.
TEST(Optimizer, AStepInPartsIsBitwiseTheWholeStep) {
  const KernelInputs in;
  const size_t n = in.n;
  const std::vector<OptimizerOptions> kinds = {
      {.kind = "sgd", .weight_decay = 0.01},
      {.kind = "momentum", .momentum = 0.9, .weight_decay = 0.01},
      {.kind = "nesterov", .momentum = 0.9},
      {.kind = "adam", .weight_decay = 0.01},
      {.kind = "adagrad", .weight_decay = 0.01}};
  for (const OptimizerOptions& o : kinds) {
    SCOPED_TRACE(o.kind);
    auto whole = make_optimizer(o, n);
    auto parts = make_optimizer(o, n);
    std::vector<float> ww = in.w0, wp = in.w0;
    for (int t = 0; t < 3; ++t) {
      const double lr = 0.01 * (t + 1);
      whole->step(ww, in.grads[t], lr);
      parts->begin_step(lr);
      for (size_t b = 0, len = 1; b < n; b += len, len = len * 3 + 2) {
        const size_t m = std::min(len, n - b);
        parts->step_part(std::span<float>(wp).subspan(b, m),
                         std::span<const float>(in.grads[t]).subspan(b, m), b);
      }
      for (size_t i = 0; i < n; ++i) {
        ASSERT_EQ(std::bit_cast<uint32_t>(ww[i]), std::bit_cast<uint32_t>(wp[i]))
            << "step " << t << ", element " << i << ": " << ww[i] << " vs " << wp[i];
      }
    }
    EXPECT_EQ(whole->save_state(), parts->save_state());
  }
}

TEST(Optimizer, LinearScalingRule) {
  OptimizerOptions o{.lr = 0.1};
  EXPECT_DOUBLE_EQ(scaled_lr(o, 8, 64), 0.1);  // off by default
  o.scale_lr = true;
  EXPECT_DOUBLE_EQ(scaled_lr(o, 8, 64), 0.1 * 8 * 64 / 32);
  o.base_batch = 256;
  EXPECT_DOUBLE_EQ(scaled_lr(o, 4, 64), 0.1);
  EXPECT_DOUBLE_EQ(scaled_lr(o, 1, 32), 0.1 / 8);
  // Warm-up then ramps from the scaled value.
  LrSchedule w{.kind = "constant", .warmup = 2};
  o.base_batch = 32;
  EXPECT_DOUBLE_EQ(lr_at(w, scaled_lr(o, 2, 32), 0), 0.1);
  EXPECT_DOUBLE_EQ(lr_at(w, scaled_lr(o, 2, 32), 1), 0.2);
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
  EXPECT_NE(message({.beta1 = 1.0}, {}).find("optim.beta1 = 1: expected in [0, 1)"),
            std::string::npos);
  EXPECT_NE(message({.beta2 = -0.1}, {}).find("optim.beta2"), std::string::npos);
  EXPECT_NE(message({.eps = 0}, {}).find("optim.eps = 0: expected > 0"), std::string::npos);
  EXPECT_NE(message({.base_batch = 0}, {}).find("optim.base_batch = 0: expected >= 1"),
            std::string::npos);
  EXPECT_EQ(message({.kind = "adam"}, {}), "");
  EXPECT_EQ(message({}, {}), "");
}

}  // namespace
}  // namespace hsgd

namespace hsgd {
namespace {

TEST(Optimizer, AdagradMatchesHandComputedSteps) {
  OptimizerOptions o;
  o.kind = "adagrad";
  o.eps = 1e-8;
  auto opt = make_optimizer(o, 1);
  std::vector<float> w = {1.0f};
  opt->step(w, std::vector<float>{2.0f}, 0.1);  // a = 4: w -= 0.1 * 2 / 2
  EXPECT_NEAR(w[0], 0.9f, 1e-6);
  opt->step(w, std::vector<float>{0.0f}, 0.1);  // a zero gradient leaves w alone
  EXPECT_NEAR(w[0], 0.9f, 1e-6);
  opt->step(w, std::vector<float>{3.0f}, 0.1);  // a = 13: w -= 0.1 * 3 / sqrt(13)
  EXPECT_NEAR(w[0], 0.9f - 0.3f / std::sqrt(13.0f), 1e-6);
  const std::vector<float> s = opt->save_state();
  ASSERT_EQ(s.size(), 1u);
  EXPECT_FLOAT_EQ(s[0], 13.0f);
}

// robbins-monro: lr x (t + tau)^-kappa, with the warm-up on top.
TEST(LrSchedule, RobbinsMonro) {
  LrSchedule s;
  s.kind = "robbins-monro";
  s.tau = 4;
  s.kappa = 0.5;
  EXPECT_DOUBLE_EQ(lr_at(s, 1.0, 0), 0.5);
  EXPECT_DOUBLE_EQ(lr_at(s, 2.0, 12), 0.5);
  EXPECT_DOUBLE_EQ(lr_at(s, 1.0, 96), 0.1);
  s.warmup = 2;
  EXPECT_DOUBLE_EQ(lr_at(s, 1.0, 0), 0.25);
  OptimizerOptions o;
  s.warmup = 0;
  s.tau = 0;
  EXPECT_THROW(validate(o, s), InputError);
  s.tau = 1;
  s.kappa = 1.5;
  EXPECT_THROW(validate(o, s), InputError);
  s.kappa = 1;
  EXPECT_NO_THROW(validate(o, s));
}

}  // namespace
}  // namespace hsgd
