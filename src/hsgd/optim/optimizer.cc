#include "hsgd/optim/optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <initializer_list>
#include <numbers>

#include "hsgd/core/error.h"
#include "hsgd/core/simd.h"

namespace hsgd {
namespace {

// Reads a state saved as put_vec of the concatenation of `parts` straight
// into them; another length is the state of another optimizer.
void load_exactly(StateReader& r, std::initializer_list<std::span<float>> parts) {
  size_t total = 0;
  for (const std::span<float>& p : parts) total += p.size();
  if (r.get<uint64_t>() != total) r.fail("optimizer state of another optimizer");
  for (const std::span<float>& p : parts) r.get_raw(p);
}

// The kernels (core/simd.h): compiled for baseline x86-64 (SSE2) and, on
// x86-64 with GCC or Clang, for AVX2, taken when the CPU has it. Adam and
// Adagrad are bound by divisions and square roots with SSE2's four lanes,
// SGD and momentum on parameters in cache by the core too (#12). Same
// operations in the same order, each rounded as IEEE says (no FMA
// contraction: AVX2 does not enable it, and -ffp-contract=off keeps a
// -march=native build from it), so every version gives the same bits
// (Optimizer.VectorizedSgdAndMomentumAreBitwiseTheScalarFormulas,
// Optimizer.VectorizedAdamAndAdagradAreBitwiseTheScalarFormula). The file is
// compiled with -fno-math-errno (CMakeLists.txt), without which std::sqrt
// is a library call no loop around it can vectorize (#12).
struct AdamArgs {
  float* __restrict w;
  const float* __restrict g;
  float* __restrict m;
  float* __restrict v;
  size_t n;
  float wd, b1, b2, c1, c2, a, eps;
};

HSGD_INLINE void adam_body(const AdamArgs& p) {
  float* __restrict w = p.w;
  const float* __restrict g = p.g;
  float* __restrict m = p.m;
  float* __restrict v = p.v;
  const float wd = p.wd, b1 = p.b1, b2 = p.b2, c1 = p.c1, c2 = p.c2, a = p.a, eps = p.eps;
  for (size_t i = 0; i < p.n; ++i) {
    const float gi = g[i] + wd * w[i];
    m[i] = b1 * m[i] + (1.0f - b1) * gi;
    v[i] = b2 * v[i] + (1.0f - b2) * gi * gi;
    w[i] -= a * (m[i] / c1) / (std::sqrt(v[i] / c2) + eps);
  }
}

HSGD_INLINE void adagrad_body(float* __restrict w, const float* __restrict g, float* __restrict acc,
                              size_t n, float wd, float lr, float eps) {
  for (size_t i = 0; i < n; ++i) {
    const float gi = g[i] + wd * w[i];
    acc[i] += gi * gi;
    w[i] -= lr * gi / (std::sqrt(acc[i]) + eps);
  }
}

// w -= a (g + wd w); wd = 0 is its own loop (one multiply less).
HSGD_INLINE void sgd_body(float* __restrict w, const float* __restrict g, size_t n, float a,
                          float wd) {
  if (wd != 0.0f) {
    for (size_t i = 0; i < n; ++i) w[i] -= a * (g[i] + wd * w[i]);
  } else {
    for (size_t i = 0; i < n; ++i) w[i] -= a * g[i];
  }
}

// Heavy ball: v = mu v + (g + wd w); w -= a v. Nesterov: w -= a (gi + mu v).
HSGD_INLINE void momentum_body(float* __restrict w, const float* __restrict g, float* __restrict v,
                               size_t n, float a, float mu, float wd, bool nesterov) {
  if (nesterov) {
    for (size_t i = 0; i < n; ++i) {
      const float gi = g[i] + wd * w[i];
      v[i] = mu * v[i] + gi;
      w[i] -= a * (gi + mu * v[i]);
    }
  } else {
    for (size_t i = 0; i < n; ++i) {
      const float gi = g[i] + wd * w[i];
      v[i] = mu * v[i] + gi;
      w[i] -= a * v[i];
    }
  }
}

void adam_baseline(const AdamArgs& p) { adam_body(p); }
void adagrad_baseline(float* w, const float* g, float* acc, size_t n, float wd, float lr,
                      float eps) {
  adagrad_body(w, g, acc, n, wd, lr, eps);
}

void sgd_baseline(float* w, const float* g, size_t n, float a, float wd) {
  sgd_body(w, g, n, a, wd);
}
void momentum_baseline(float* w, const float* g, float* v, size_t n, float a, float mu, float wd,
                       bool nesterov) {
  momentum_body(w, g, v, n, a, mu, wd, nesterov);
}

#if HSGD_AVX2_KERNELS
HSGD_AVX2 void adam_avx2(const AdamArgs& p) { adam_body(p); }
HSGD_AVX2 void adagrad_avx2(float* w, const float* g, float* acc, size_t n, float wd, float lr,
                            float eps) {
  adagrad_body(w, g, acc, n, wd, lr, eps);
}
HSGD_AVX2 void sgd_avx2(float* w, const float* g, size_t n, float a, float wd) {
  sgd_body(w, g, n, a, wd);
}
HSGD_AVX2 void momentum_avx2(float* w, const float* g, float* v, size_t n, float a, float mu,
                             float wd, bool nesterov) {
  momentum_body(w, g, v, n, a, mu, wd, nesterov);
}
#endif

void adam_kernel(const AdamArgs& p) {
#if HSGD_AVX2_KERNELS
  if (cpu_has_avx2()) return adam_avx2(p);
#endif
  adam_baseline(p);
}

void adagrad_kernel(float* w, const float* g, float* acc, size_t n, float wd, float lr, float eps) {
#if HSGD_AVX2_KERNELS
  if (cpu_has_avx2()) return adagrad_avx2(w, g, acc, n, wd, lr, eps);
#endif
  adagrad_baseline(w, g, acc, n, wd, lr, eps);
}

void sgd_kernel(float* w, const float* g, size_t n, float a, float wd) {
#if HSGD_AVX2_KERNELS
  if (cpu_has_avx2()) return sgd_avx2(w, g, n, a, wd);
#endif
  sgd_baseline(w, g, n, a, wd);
}

void momentum_kernel(float* w, const float* g, float* v, size_t n, float a, float mu, float wd,
                     bool nesterov) {
#if HSGD_AVX2_KERNELS
  if (cpu_has_avx2()) return momentum_avx2(w, g, v, n, a, mu, wd, nesterov);
#endif
  momentum_baseline(w, g, v, n, a, mu, wd, nesterov);
}

class Sgd final : public Optimizer {
 public:
  explicit Sgd(double wd) : wd_(static_cast<float>(wd)) {}
  void begin_step(double lr) override { a_ = static_cast<float>(lr); }
  void step_part(std::span<float> w, std::span<const float> g, size_t) override {
    HSGD_ASSERT(g.size() == w.size(), "sgd: size mismatch");
    sgd_kernel(w.data(), g.data(), w.size(), a_, wd_);
  }
  double step_gain() const override { return 1; }

 private:
  float wd_;
  float a_ = 0;
};

// Heavy-ball momentum (PyTorch convention): v = mu v + g; w -= lr v.
// Nesterov: w -= lr (g + mu v).
class Momentum final : public Optimizer {
 public:
  Momentum(double mu, double wd, bool nesterov, size_t n)
      : mu_(static_cast<float>(mu)),
        configured_(mu),
        wd_(static_cast<float>(wd)),
        nesterov_(nesterov),
        v_(n, 0.0f) {}
  void begin_step(double lr) override {
    a_ = static_cast<float>(lr);
    step_mu_ = mu_;
  }
  void step_part(std::span<float> w, std::span<const float> g, size_t offset) override {
    HSGD_ASSERT(g.size() == w.size() && offset + w.size() <= v_.size(), "momentum: size mismatch");
    momentum_kernel(w.data(), g.data(), v_.data() + offset, w.size(), a_, step_mu_, wd_, nesterov_);
  }
  void set_implicit_momentum(double m) override {
    m = std::clamp(m, 0.0, 0.999);
    mu_ = m == 0 ? static_cast<float>(configured_)
                 : static_cast<float>(std::max(0.0, 1.0 - (1.0 - configured_) / (1.0 - m)));
  }
  double step_gain() const override { return 1.0 / (1.0 - configured_); }
  std::vector<float> save_state() const override { return v_; }
  void restore_state(std::span<const float> s) override {
    HSGD_ASSERT(s.size() == v_.size(), "optimizer state size mismatch");
    v_.assign(s.begin(), s.end());
  }
  void save(StateWriter& w) const override { w.put_vec(v_); }
  void load(StateReader& r) override { load_exactly(r, {std::span<float>(v_)}); }

 private:
  float mu_;
  double configured_;
  float wd_;
  bool nesterov_;
  std::vector<float> v_;
  float a_ = 0, step_mu_ = 0;  // the step begun
};

// Adam with bias correction. State: t (as two exact float halves), m, v.
class Adam final : public Optimizer {
 public:
  Adam(const OptimizerOptions& o, size_t n)
      : b1_(o.beta1),
        b2_(o.beta2),
        eps_(o.eps),
        wd_(static_cast<float>(o.weight_decay)),
        m_(n, 0.0f),
        v_(n, 0.0f) {}
  void begin_step(double lr) override {
    ++t_;
    const double t = static_cast<double>(t_);
    c1_ = static_cast<float>(1.0 - std::pow(b1_, t));
    c2_ = static_cast<float>(1.0 - std::pow(b2_, t));
    a_ = static_cast<float>(lr);
  }
  void step_part(std::span<float> w, std::span<const float> g, size_t offset) override {
    const float b1 = static_cast<float>(b1_), b2 = static_cast<float>(b2_);
    const float eps = static_cast<float>(eps_);
    HSGD_ASSERT(offset + w.size() <= m_.size() && g.size() == w.size(), "adam: size mismatch");
    adam_kernel({w.data(), g.data(), m_.data() + offset, v_.data() + offset, w.size(), wd_, b1, b2,
                 c1_, c2_, a_, eps});
  }
  // [t / 2^24, t mod 2^24, m..., v...]: both halves are exact in a float.
  std::vector<float> save_state() const override {
    std::vector<float> s;
    s.reserve(2 + 2 * m_.size());
    s.push_back(static_cast<float>(t_ >> 24));
    s.push_back(static_cast<float>(t_ & 0xFFFFFF));
    s.insert(s.end(), m_.begin(), m_.end());
    s.insert(s.end(), v_.begin(), v_.end());
    return s;
  }
  void restore_state(std::span<const float> s) override {
    HSGD_ASSERT(s.size() == 2 + 2 * m_.size(), "optimizer state size mismatch");
    t_ = (static_cast<uint64_t>(s[0]) << 24) + static_cast<uint64_t>(s[1]);
    const size_t n = m_.size();
    std::copy(s.begin() + 2, s.begin() + 2 + static_cast<ptrdiff_t>(n), m_.begin());
    std::copy(s.begin() + 2 + static_cast<ptrdiff_t>(n), s.end(), v_.begin());
  }
  void save(StateWriter& w) const override {
    w.put<uint64_t>(2 + 2 * m_.size());
    w.put(static_cast<float>(t_ >> 24));
    w.put(static_cast<float>(t_ & 0xFFFFFF));
    w.put_raw(std::span<const float>(m_));
    w.put_raw(std::span<const float>(v_));
  }
  void load(StateReader& r) override {
    float t[2];
    load_exactly(r, {std::span<float>(t), std::span<float>(m_), std::span<float>(v_)});
    if (!(t[0] >= 0 && t[0] < 16777216.0f && t[1] >= 0 && t[1] < 16777216.0f)) {
      r.fail("corrupt (Adam's step count)");
    }
    t_ = (static_cast<uint64_t>(t[0]) << 24) + static_cast<uint64_t>(t[1]);
  }

 private:
  double b1_, b2_, eps_;
  float wd_;
  uint64_t t_ = 0;
  std::vector<float> m_, v_;
  float c1_ = 0, c2_ = 0, a_ = 0;  // the step begun
};

// Adagrad (Duchi et al. 2011): a += g^2; w -= lr * g / (sqrt(a) + eps), with
// g + wd * w as its gradient. State: a.
class Adagrad final : public Optimizer {
 public:
  Adagrad(const OptimizerOptions& o, size_t n)
      : eps_(static_cast<float>(o.eps)), wd_(static_cast<float>(o.weight_decay)), a_(n, 0.0f) {}
  void begin_step(double lr) override { lr_ = static_cast<float>(lr); }
  void step_part(std::span<float> w, std::span<const float> g, size_t offset) override {
    HSGD_ASSERT(offset + w.size() <= a_.size() && g.size() == w.size(), "adagrad: size mismatch");
    adagrad_kernel(w.data(), g.data(), a_.data() + offset, w.size(), wd_, lr_, eps_);
  }
  std::vector<float> save_state() const override { return a_; }
  void restore_state(std::span<const float> s) override {
    HSGD_ASSERT(s.size() == a_.size(), "optimizer state size mismatch");
    a_.assign(s.begin(), s.end());
  }
  void save(StateWriter& w) const override { w.put_vec(a_); }
  void load(StateReader& r) override { load_exactly(r, {std::span<float>(a_)}); }

 private:
  float eps_, wd_;
  std::vector<float> a_;
  float lr_ = 0;  // the step begun
};

}  // namespace

void Optimizer::load(StateReader& r) {
  const std::vector<float> s = r.get_vec<float>();
  if (s.size() != save_state().size()) r.fail("optimizer state of another optimizer");
  restore_state(s);
}

double scaled_lr(const OptimizerOptions& o, int workers, int64_t batch) {
  if (!o.scale_lr) return o.lr;
  return o.lr * static_cast<double>(workers) * static_cast<double>(batch) /
         static_cast<double>(o.base_batch);
}

double lr_at(const LrSchedule& s, double base, int64_t u) {
  double lr = base;
  if (s.kind == "step") {
    lr = base * std::pow(s.gamma, static_cast<double>(u / s.step_size));
  } else if (s.kind == "cosine") {
    const double x = std::min(1.0, static_cast<double>(u) / static_cast<double>(s.horizon));
    lr = s.min_lr + (base - s.min_lr) * (1.0 + std::cos(std::numbers::pi * x)) / 2.0;
  } else if (s.kind == "robbins-monro") {
    lr = base * std::pow(static_cast<double>(u) + s.tau, -s.kappa);
  }
  if (s.warmup > 0 && u < s.warmup)
    lr *= static_cast<double>(u + 1) / static_cast<double>(s.warmup);
  return lr;
}

void validate(const OptimizerOptions& o, const LrSchedule& s) {
  auto num = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", v);
    return std::string(buf);
  };
  if (o.kind != "sgd" && o.kind != "momentum" && o.kind != "nesterov" && o.kind != "adam" &&
      o.kind != "adagrad") {
    throw InputError("optim.kind = '" + o.kind +
                     "': expected sgd, momentum, nesterov, adam or adagrad");
  }
  if (!(o.lr > 0) || !std::isfinite(o.lr))
    throw InputError("optim.lr = " + num(o.lr) + ": expected > 0");
  if (!(o.momentum >= 0 && o.momentum < 1)) {
    throw InputError("optim.momentum = " + num(o.momentum) + ": expected in [0, 1)");
  }
  if (!(o.beta1 >= 0 && o.beta1 < 1)) {
    throw InputError("optim.beta1 = " + num(o.beta1) + ": expected in [0, 1)");
  }
  if (!(o.beta2 >= 0 && o.beta2 < 1)) {
    throw InputError("optim.beta2 = " + num(o.beta2) + ": expected in [0, 1)");
  }
  if (!(o.eps > 0) || !std::isfinite(o.eps)) {
    throw InputError("optim.eps = " + num(o.eps) + ": expected > 0");
  }
  if (o.base_batch < 1) {
    throw InputError("optim.base_batch = " + std::to_string(o.base_batch) + ": expected >= 1");
  }
  if (!(o.weight_decay >= 0)) {
    throw InputError("optim.weight_decay = " + num(o.weight_decay) + ": expected >= 0");
  }
  if (s.kind != "constant" && s.kind != "step" && s.kind != "cosine" && s.kind != "robbins-monro") {
    throw InputError("optim.lr_schedule = '" + s.kind +
                     "': expected constant, step, cosine or robbins-monro");
  }
  if (s.kind == "robbins-monro" && !(s.tau > 0 && std::isfinite(s.tau))) {
    throw InputError("optim.tau = " + num(s.tau) + ": expected > 0");
  }
  if (s.kind == "robbins-monro" && !(s.kappa > 0 && s.kappa <= 1)) {
    throw InputError("optim.kappa = " + num(s.kappa) + ": expected in (0, 1]");
  }
  if (s.kind == "step" && s.step_size < 1) {
    throw InputError("optim.lr_step_size = " + std::to_string(s.step_size) + ": expected >= 1");
  }
  if (s.kind == "step" && !(s.gamma > 0 && s.gamma <= 1)) {
    throw InputError("optim.lr_gamma = " + num(s.gamma) + ": expected in (0, 1]");
  }
  if (s.kind == "cosine" && s.horizon < 1) {
    throw InputError("optim.lr_horizon = " + std::to_string(s.horizon) +
                     ": the cosine schedule needs the number of updates to decay over (>= 1)");
  }
  if (!(s.min_lr >= 0)) throw InputError("optim.lr_min = " + num(s.min_lr) + ": expected >= 0");
  if (s.warmup < 0)
    throw InputError("optim.warmup = " + std::to_string(s.warmup) + ": expected >= 0");
}

std::unique_ptr<Optimizer> make_optimizer(const OptimizerOptions& o, size_t n) {
  if (o.kind == "sgd") return std::make_unique<Sgd>(o.weight_decay);
  if (o.kind == "adam") return std::make_unique<Adam>(o, n);
  if (o.kind == "adagrad") return std::make_unique<Adagrad>(o, n);
  return std::make_unique<Momentum>(o.momentum, o.weight_decay, o.kind == "nesterov", n);
}

}  // namespace hsgd
