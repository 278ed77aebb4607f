#include "hsgd/model/dpgmm.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numbers>
#include <string>
#include <utility>
#include <vector>

#include "hsgd/core/error.h"
#include "hsgd/core/rng.h"

namespace hsgd {
namespace dpgmm {
namespace {

constexpr double kLog2Pi = 1.8378770664093453;  // log(2 pi)

// log Gamma(x) without std::lgamma, which writes the global `signgam` and so
// races when workers evaluate the model on several threads (TSan saw it).
double log_gamma(double x) {
  int sign = 0;
  return ::lgamma_r(x, &sign);
}

double lbeta(double a, double b) { return log_gamma(a) + log_gamma(b) - log_gamma(a + b); }

// The expectations a component's E-step needs, from its parameters.
struct Component {
  double elogv = 0, elog1mv = 0;  // E[log V], E[log (1 - V)]
  double c = 0;                   // E[log pi] + the x-free part of E[log N(x)]
  std::vector<double> m, w;       // mean, E[tau] / 2
};

struct Prior {
  double alpha, kappa0, a0;
  const double* m0;
  const double* b0;
};

Prior prior_of(const Layout& l, std::span<const double> lam) {
  return {lam[0], lam[1], lam[2], lam.data() + 3, lam.data() + 3 + l.dims};
}

// The per-component expectations, E[log pi_k] included (stick-breaking).
std::vector<Component> expectations(const Layout& l, std::span<const double> lam) {
  const int64_t D = l.dims;
  std::vector<Component> comps(static_cast<size_t>(l.truncation));
  double sum_log1mv = 0;
  for (int64_t k = 0; k < l.truncation; ++k) {
    const double* p = lam.data() + l.component(k);
    const double g1 = p[0], g2 = p[1], kappa = p[2], a = p[3];
    const double* s = p + 4;
    const double* q = p + 4 + D;
    Component& c = comps[static_cast<size_t>(k)];
    const double psum = digamma(g1 + g2);
    c.elogv = digamma(g1) - psum;
    c.elog1mv = digamma(g2) - psum;
    c.c = c.elogv + sum_log1mv;
    sum_log1mv += c.elog1mv;
    const double psia = digamma(a);
    c.m.resize(static_cast<size_t>(D));
    c.w.resize(static_cast<size_t>(D));
    for (int64_t d = 0; d < D; ++d) {
      const double m = s[d] / kappa;
      const double b = 0.5 * (q[d] - s[d] * m);
      c.m[static_cast<size_t>(d)] = m;
      c.w[static_cast<size_t>(d)] = 0.5 * a / b;
      c.c += 0.5 * (psia - std::log(b) - kLog2Pi);
    }
    c.c -= 0.5 * static_cast<double>(D) / kappa;
  }
  return comps;
}

}  // namespace

// log sum exp of v (v is overwritten by exp(v - top)).
double log_sum_exp(std::vector<double>& v) {
  const double top = *std::max_element(v.begin(), v.end());
  double sum = 0;
  for (double& x : v) {
    x = std::exp(x - top);
    sum += x;
  }
  return top + std::log(sum);
}

int64_t truncation_of(int64_t num_params, int64_t dims) {
  Layout l{dims, 0};
  const int64_t rest = num_params - l.prior_size();
  if (dims < 1 || rest <= 0 || rest % l.component_size() != 0) return 0;
  return rest / l.component_size();
}

double digamma(double x) {
  double r = 0;
  while (x < 10) {
    r -= 1 / x;
    x += 1;
  }
  const double f = 1 / (x * x);
  return r + std::log(x) - 0.5 / x -
         f * (1.0 / 12 - f * (1.0 / 120 - f * (1.0 / 252 - f * (1.0 / 240 - f * (1.0 / 132)))));
}

std::vector<double> local_update(const Layout& l, std::span<const double> lam, const float* x,
                                 int64_t n, double scale, double* neg_elbo_local,
                                 std::span<float> per_sample) {
  HSGD_ASSERT(static_cast<int64_t>(lam.size()) == l.size(), "dpgmm: lambda size");
  const int64_t D = l.dims, K = l.truncation;
  const std::vector<Component> comps = expectations(l, lam);
  // Sufficient statistics: N_k, S_kd = sum r x, Q_kd = sum r x^2.
  std::vector<double> nk(static_cast<size_t>(K), 0.0), sk(static_cast<size_t>(K * D), 0.0),
      qk(static_cast<size_t>(K * D), 0.0), logp(static_cast<size_t>(K));
  double elbo = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float* xi = x + i * D;
    for (int64_t k = 0; k < K; ++k) {
      const Component& c = comps[static_cast<size_t>(k)];
      double quad = 0;
      for (int64_t d = 0; d < D; ++d) {
        const double z = xi[d] - c.m[static_cast<size_t>(d)];
        quad += c.w[static_cast<size_t>(d)] * z * z;
      }
      logp[static_cast<size_t>(k)] = c.c - quad;
    }
    const double lse = log_sum_exp(logp);  // logp now holds exp(logp - top)
    elbo += lse;
    if (!per_sample.empty()) per_sample[static_cast<size_t>(i)] = static_cast<float>(-lse);
    double total = 0;
    for (double v : logp) total += v;
    for (int64_t k = 0; k < K; ++k) {
      const double r = logp[static_cast<size_t>(k)] / total;
      if (r == 0) continue;
      nk[static_cast<size_t>(k)] += r;
      double* s = sk.data() + k * D;
      double* q = qk.data() + k * D;
      for (int64_t d = 0; d < D; ++d) {
        const double v = xi[d];
        s[d] += r * v;
        q[d] += r * v * v;
      }
    }
  }
  if (neg_elbo_local != nullptr) *neg_elbo_local = -elbo;
  std::vector<double> hat(lam.begin(), lam.end());
  const Prior pr = prior_of(l, lam);
  double tail = 0;  // sum_{j > k} N_j
  for (int64_t k = K - 1; k >= 0; --k) {
    const double N = scale * nk[static_cast<size_t>(k)];
    double* p = hat.data() + l.component(k);
    p[0] = 1 + N;
    p[1] = pr.alpha + tail;
    p[2] = pr.kappa0 + N;
    p[3] = pr.a0 + 0.5 * N;
    for (int64_t d = 0; d < D; ++d) {
      const double m0 = pr.m0[d];
      p[4 + d] = pr.kappa0 * m0 + scale * sk[static_cast<size_t>(k * D + d)];
      p[4 + D + d] =
          2 * pr.b0[d] + pr.kappa0 * m0 * m0 + scale * qk[static_cast<size_t>(k * D + d)];
    }
    tail += N;
  }
  return hat;
}

double global_kl(const Layout& l, std::span<const double> lam) {
  const Prior pr = prior_of(l, lam);
  const int64_t D = l.dims;
  double kl = 0;
  for (int64_t k = 0; k < l.truncation; ++k) {
    const double* p = lam.data() + l.component(k);
    const double g1 = p[0], g2 = p[1], kappa = p[2], a = p[3];
    // KL(Beta(g1, g2) || Beta(1, alpha)).
    const double psum = digamma(g1 + g2);
    kl += lbeta(1, pr.alpha) - lbeta(g1, g2) + (g1 - 1) * (digamma(g1) - psum) +
          (g2 - pr.alpha) * (digamma(g2) - psum);
    const double psia = digamma(a), lga = log_gamma(a), lga0 = log_gamma(pr.a0);
    for (int64_t d = 0; d < D; ++d) {
      const double m = p[4 + d] / kappa;
      const double b = 0.5 * (p[4 + D + d] - p[4 + d] * m);
      const double b0 = pr.b0[d];
      // KL(Gamma(a, b) || Gamma(a0, b0)), shape-rate.
      kl +=
          (a - pr.a0) * psia - lga + lga0 + pr.a0 * (std::log(b) - std::log(b0)) + a * (b0 - b) / b;
      // E_tau KL(N(m, 1/(kappa tau)) || N(m0, 1/(kappa0 tau))).
      const double r = pr.kappa0 / kappa, dm = m - pr.m0[d];
      kl += 0.5 * (r - 1 - std::log(r) + pr.kappa0 * (a / b) * dm * dm);
    }
  }
  return kl;
}

std::vector<double> expected_weights(const Layout& l, std::span<const double> lam) {
  std::vector<double> w(static_cast<size_t>(l.truncation));
  double rest = 1, total = 0;
  for (int64_t k = 0; k < l.truncation; ++k) {
    const double* p = lam.data() + l.component(k);
    const double ev = p[0] / (p[0] + p[1]);
    w[static_cast<size_t>(k)] = rest * ev;
    total += rest * ev;
    rest *= 1 - ev;
  }
  for (double& v : w) v /= total;
  return w;
}

namespace {
template <class T>
bool positive_impl(const Layout& l, std::span<const T> lam) {
  if (static_cast<int64_t>(lam.size()) != l.size()) return false;
  const int64_t D = l.dims;
  auto pos = [](double v) { return std::isfinite(v) && v > 0; };
  if (!pos(lam[0]) || !pos(lam[1]) || !pos(lam[2])) return false;
  for (int64_t d = 0; d < D; ++d) {
    if (!pos(lam[static_cast<size_t>(3 + D + d)])) return false;
  }
  for (int64_t k = 0; k < l.truncation; ++k) {
    const T* p = lam.data() + l.component(k);
    for (int j = 0; j < 4; ++j) {
      if (!pos(p[j])) return false;
    }
    for (int64_t d = 0; d < D; ++d) {
      const double s = p[4 + d], q = p[4 + D + d];
      if (!pos(0.5 * (q - s * s / static_cast<double>(p[2])))) return false;
    }
  }
  return true;
}
}  // namespace

bool positive(const Layout& l, std::span<const float> lam) { return positive_impl(l, lam); }
bool positive(const Layout& l, std::span<const double> lam) { return positive_impl(l, lam); }

double adjusted_rand_index(std::span<const int32_t> a, std::span<const int32_t> b) {
  HSGD_ASSERT(a.size() == b.size(), "adjusted_rand_index: sizes differ");
  const double n = static_cast<double>(a.size());
  if (n < 2) return std::nan("");
  std::map<std::pair<int32_t, int32_t>, int64_t> cells;
  std::map<int32_t, int64_t> rows, cols;
  for (size_t i = 0; i < a.size(); ++i) {
    ++cells[{a[i], b[i]}];
    ++rows[a[i]];
    ++cols[b[i]];
  }
  auto pairs = [](double v) { return v * (v - 1) / 2; };
  double sij = 0, sa = 0, sb = 0;
  for (const auto& [key, v] : cells) sij += pairs(static_cast<double>(v));
  for (const auto& [key, v] : rows) sa += pairs(static_cast<double>(v));
  for (const auto& [key, v] : cols) sb += pairs(static_cast<double>(v));
  const double expected = sa * sb / pairs(n);
  const double top = 0.5 * (sa + sb) - expected;
  if (top == 0) return 1.0;  // both partitions trivial in the same way
  return (sij - expected) / top;
}

}  // namespace dpgmm

namespace {

using dpgmm::Layout;

class DpgmmModel final : public Model {
 public:
  DpgmmModel(int64_t dims, int64_t truncation, double alpha, const Dataset* train)
      : layout_{dims, truncation}, alpha_(alpha), train_(train) {
    if (dims < 1 || truncation < 1 || !(alpha > 0) || !std::isfinite(alpha)) {
      throw InputError(
          "--model dpgmm: needs at least one feature, model.truncation >= 1 and "
          "model.alpha > 0, got " +
          std::to_string(dims) + " features, truncation " + std::to_string(truncation) +
          ", alpha " + std::to_string(alpha));
    }
    lam_.resize(static_cast<size_t>(layout_.size()));
  }

  int64_t num_params() const override { return layout_.size(); }

  void bind(std::span<float> params, std::span<float> grads) override {
    HSGD_ASSERT(static_cast<int64_t>(params.size()) == num_params(), "params size != num_params");
    HSGD_ASSERT(static_cast<int64_t>(grads.size()) == num_params(), "grads size != num_params");
    params_ = params;
    grads_ = grads;
  }

  void init_params(uint64_t seed) override {
    HSGD_ASSERT(!params_.empty(), "init_params before bind");
    const int64_t D = layout_.dims, K = layout_.truncation;
    std::vector<double> lam(static_cast<size_t>(layout_.size()), 0.0);
    lam[0] = alpha_;
    lam[1] = 1.0;                           // kappa0
    lam[2] = 0.5 * static_cast<double>(D);  // a0
    double* m0 = lam.data() + 3;
    double* b0 = lam.data() + 3 + D;
    std::fill(b0, b0 + D, 0.5);
    // The sample the initialisation is drawn from (seeded), as doubles.
    std::vector<double> x;
    int64_t n = 0;
    if (train_ != nullptr && train_->size() > 0) {
      check_width(*train_);
      const int64_t N = train_->size();
      // The empirical prior over the whole training set (sklearn's).
      std::vector<double> sum(static_cast<size_t>(D), 0.0), sq(static_cast<size_t>(D), 0.0);
      Batch b;
      std::vector<int64_t> idx;
      for (int64_t start = 0; start < N; start += 4096) {
        const int64_t end = std::min(N, start + 4096);
        idx.resize(static_cast<size_t>(end - start));
        for (int64_t i = start; i < end; ++i) idx[static_cast<size_t>(i - start)] = i;
        gather(*train_, idx, &b);
        for (int64_t i = 0; i < end - start; ++i) {
          for (int64_t d = 0; d < D; ++d) {
            const double v = b.features[static_cast<size_t>(i * D + d)];
            sum[static_cast<size_t>(d)] += v;
            sq[static_cast<size_t>(d)] += v * v;
          }
        }
      }
      const double Nd = static_cast<double>(N);
      for (int64_t d = 0; d < D; ++d) {
        const double mean = sum[static_cast<size_t>(d)] / Nd;
        double var = (sq[static_cast<size_t>(d)] - Nd * mean * mean) / std::max(1.0, Nd - 1);
        if (!(var > 1e-12)) var = 1e-12;
        m0[d] = mean;
        b0[d] = 0.5 * var;
      }
      // A seeded sample for k-means++.
      n = std::min<int64_t>(N, 20000);
      Rng rng(seed, 31);
      idx.resize(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) {
        idx[static_cast<size_t>(i)] = n == N ? i : static_cast<int64_t>(rng.below(N));
      }
      gather(*train_, idx, &b);
      x.assign(b.features.begin(), b.features.end());
    }
    // Centres: k-means++ on the sample, or N(m0, 1) draws without data.
    std::vector<double> centres(static_cast<size_t>(K * D));
    Rng rng(seed, 32);
    if (n > 0) {
      std::vector<double> dist(static_cast<size_t>(n), INFINITY);
      int64_t pick = static_cast<int64_t>(rng.below(static_cast<uint64_t>(n)));
      for (int64_t k = 0; k < K; ++k) {
        std::copy(x.begin() + pick * D, x.begin() + (pick + 1) * D, centres.begin() + k * D);
        double total = 0;
        for (int64_t i = 0; i < n; ++i) {
          double d2 = 0;
          for (int64_t d = 0; d < D; ++d) {
            const double z =
                x[static_cast<size_t>(i * D + d)] - centres[static_cast<size_t>(k * D + d)];
            d2 += z * z;
          }
          dist[static_cast<size_t>(i)] = std::min(dist[static_cast<size_t>(i)], d2);
          total += dist[static_cast<size_t>(i)];
        }
        if (!(total > 0)) {
          pick = static_cast<int64_t>(rng.below(static_cast<uint64_t>(n)));
          continue;
        }
        double u = rng.uniform() * total;
        pick = n - 1;
        for (int64_t i = 0; i < n; ++i) {
          u -= dist[static_cast<size_t>(i)];
          if (u < 0) {
            pick = i;
            break;
          }
        }
      }
    } else {
      for (int64_t i = 0; i < K * D; ++i)
        centres[static_cast<size_t>(i)] = m0[i % D] + rng.normal();
    }
    // One hard M-step: each sample point to its nearest centre, the
    // statistics scaled to the training set's size (sklearn's init_params =
    // 'kmeans' does the same after its k-means).
    const int64_t N = train_ != nullptr && train_->size() > 0 ? train_->size() : 1;
    std::vector<double> nk(static_cast<size_t>(K), 0.0), sk(static_cast<size_t>(K * D), 0.0),
        qk(static_cast<size_t>(K * D), 0.0);
    double scale = 0;
    if (n > 0) {
      scale = static_cast<double>(N) / static_cast<double>(n);
      for (int64_t i = 0; i < n; ++i) {
        int64_t best = 0;
        double best_d = INFINITY;
        for (int64_t k = 0; k < K; ++k) {
          double d2 = 0;
          for (int64_t d = 0; d < D; ++d) {
            const double z =
                x[static_cast<size_t>(i * D + d)] - centres[static_cast<size_t>(k * D + d)];
            d2 += z * z;
          }
          if (d2 < best_d) {
            best_d = d2;
            best = k;
          }
        }
        nk[static_cast<size_t>(best)] += 1;
        for (int64_t d = 0; d < D; ++d) {
          const double v = x[static_cast<size_t>(i * D + d)];
          sk[static_cast<size_t>(best * D + d)] += v;
          qk[static_cast<size_t>(best * D + d)] += v * v;
        }
      }
    } else {
      // No data: each centre as if it held N / K points of variance 1.
      scale = 1;
      for (int64_t k = 0; k < K; ++k) {
        const double c = static_cast<double>(N) / static_cast<double>(K);
        nk[static_cast<size_t>(k)] = c;
        for (int64_t d = 0; d < D; ++d) {
          const double mu = centres[static_cast<size_t>(k * D + d)];
          sk[static_cast<size_t>(k * D + d)] = c * mu;
          qk[static_cast<size_t>(k * D + d)] = c * (mu * mu + 1);
        }
      }
    }
    double tail = 0;
    for (int64_t k = K - 1; k >= 0; --k) {
      const double Nk = scale * nk[static_cast<size_t>(k)];
      double* p = lam.data() + layout_.component(k);
      p[0] = 1 + Nk;
      p[1] = alpha_ + tail;
      p[2] = lam[1] + Nk;
      p[3] = lam[2] + 0.5 * Nk;
      for (int64_t d = 0; d < D; ++d) {
        p[4 + d] = lam[1] * m0[d] + scale * sk[static_cast<size_t>(k * D + d)];
        p[4 + D + d] =
            2 * b0[d] + lam[1] * m0[d] * m0[d] + scale * qk[static_cast<size_t>(k * D + d)];
      }
      tail += Nk;
    }
    for (size_t i = 0; i < lam.size(); ++i) params_[i] = static_cast<float>(lam[i]);
  }

  using Model::gradient;
  double gradient(const Batch& batch, std::span<float> losses) override {
    HSGD_ASSERT(!params_.empty(), "gradient before bind");
    const int64_t n = batch.size();
    check_sizes("batch", static_cast<int64_t>(batch.features.size()), n);
    HSGD_ASSERT(losses.empty() || static_cast<int64_t>(losses.size()) == n,
                "gradient: one loss slot per sample");
    std::fill(grads_.begin(), grads_.end(), 0.0f);
    if (n == 0) return 0.0;
    read_params();
    const double N = static_cast<double>(train_size());
    double neg_local = 0;
    const std::vector<double> hat = dpgmm::local_update(
        layout_, lam_, batch.features.data(), n, N / static_cast<double>(n), &neg_local, losses);
    for (int64_t i = layout_.prior_size(); i < layout_.size(); ++i) {
      grads_[static_cast<size_t>(i)] =
          static_cast<float>(lam_[static_cast<size_t>(i)] - hat[static_cast<size_t>(i)]);
    }
    return neg_local / static_cast<double>(n) + dpgmm::global_kl(layout_, lam_) / N;
  }

  EvalResult evaluate(const Dataset& data) override {
    HSGD_ASSERT(!params_.empty(), "evaluate before bind");
    check_width(data);
    const int64_t n = data.size(), D = layout_.dims, K = layout_.truncation;
    check_sizes(data.name, static_cast<int64_t>(data.values().size()), n);
    EvalResult r;
    r.accuracy = std::nan("");
    read_params();
    const std::vector<double> w = dpgmm::expected_weights(layout_, lam_);
    r.effective_k = 0;
    for (double v : w) r.effective_k += v > 0.01 ? 1 : 0;
    if (n == 0) return r;
    // Posterior predictive per component and dimension: Student-t with
    // nu = 2a, scale^2 = b (kappa + 1) / (a kappa).
    std::vector<double> cst(static_cast<size_t>(K)), mean(static_cast<size_t>(K * D)),
        inv(static_cast<size_t>(K * D)), half_nu1(static_cast<size_t>(K));
    for (int64_t k = 0; k < K; ++k) {
      const double* p = lam_.data() + layout_.component(k);
      const double kappa = p[2], a = p[3], nu = 2 * a;
      half_nu1[static_cast<size_t>(k)] = 0.5 * (nu + 1);
      double c =
          std::log(w[static_cast<size_t>(k)]) +
          static_cast<double>(D) * (dpgmm::log_gamma(0.5 * (nu + 1)) - dpgmm::log_gamma(0.5 * nu));
      for (int64_t d = 0; d < D; ++d) {
        const double m = p[4 + d] / kappa;
        const double b = 0.5 * (p[4 + D + d] - p[4 + d] * m);
        const double s2 = b * (kappa + 1) / (a * kappa);
        mean[static_cast<size_t>(k * D + d)] = m;
        inv[static_cast<size_t>(k * D + d)] = 1 / (nu * s2);
        c -= 0.5 * std::log(nu * std::numbers::pi * s2);
      }
      cst[static_cast<size_t>(k)] = c;
    }
    std::vector<double> logp(static_cast<size_t>(K));
    std::vector<int32_t> assigned(static_cast<size_t>(n));
    double ll = 0;
    const bool lazy = data.lazy_standardize;
    for (int64_t i = 0; i < n; ++i) {
      const float* xi = data.values().data() + i * D;
      for (int64_t k = 0; k < K; ++k) {
        double v = cst[static_cast<size_t>(k)];
        if (w[static_cast<size_t>(k)] > 0) {
          double acc = 0;
          for (int64_t d = 0; d < D; ++d) {
            double xv = xi[d];
            if (lazy) xv = (xi[d] - data.lazy_mean) * data.lazy_inv_std;
            const double z = xv - mean[static_cast<size_t>(k * D + d)];
            acc += std::log1p(z * z * inv[static_cast<size_t>(k * D + d)]);
          }
          v -= half_nu1[static_cast<size_t>(k)] * acc;
        }
        logp[static_cast<size_t>(k)] = v;
      }
      assigned[static_cast<size_t>(i)] =
          static_cast<int32_t>(std::max_element(logp.begin(), logp.end()) - logp.begin());
      ll += dpgmm::log_sum_exp(logp);
    }
    r.loss = -ll / static_cast<double>(n);
    if (data.num_classes >= 2) r.ari = dpgmm::adjusted_rand_index(assigned, data.labels);
    return r;
  }

 private:
  int64_t train_size() const {
    return train_ != nullptr && train_->size() > 0 ? train_->size() : 1;
  }
  void read_params() {
    for (size_t i = 0; i < lam_.size(); ++i) lam_[i] = params_[i];
  }
  void check_width(const Dataset& data) const {
    int64_t shape_size = 1;
    for (int64_t s : data.sample_shape) shape_size *= s;
    if (shape_size != layout_.dims) {
      throw InputError(data.name + ": samples have " + std::to_string(shape_size) +
                       " values, the model expects " + std::to_string(layout_.dims));
    }
  }
  void check_sizes(const std::string& what, int64_t num_values, int64_t n) const {
    if (num_values != n * layout_.dims) {
      throw InputError(what + ": " + std::to_string(num_values) + " feature values for " +
                       std::to_string(n) + " samples, the model expects " +
                       std::to_string(layout_.dims) + " per sample");
    }
  }

  Layout layout_;
  double alpha_;
  const Dataset* train_;
  std::span<float> params_;
  std::span<float> grads_;
  std::vector<double> lam_;  // the bound parameters as doubles
};

}  // namespace

std::unique_ptr<Model> make_dpgmm_model(int64_t dims, int64_t truncation, double alpha,
                                        const Dataset* train) {
  return std::make_unique<DpgmmModel>(dims, truncation, alpha, train);
}

}  // namespace hsgd
