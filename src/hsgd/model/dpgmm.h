// "dpgmm": a truncated stick-breaking Dirichlet-process mixture of diagonal
// Gaussians (a Normal-Gamma prior per dimension), fitted by natural-gradient
// stochastic variational inference through the parameter server (issue 31;
// Hoffman et al. 2013). Plain C++, no torch.
//
// The flat parameter buffer holds the global variational parameters, an
// affine image of their natural parameters, so that the server's SGD step
// lambda <- lambda - rho (lambda - lambda_hat_B) is the SVI step:
//   prior block   [alpha, kappa0, a0, m0[D], b0[D]]          3 + 2D floats
//   component k   [g1, g2, kappa, a, s[D], q[D]]             4 + 2D floats
// with q(V_k) = Beta(g1, g2), and per dimension d a Normal-Gamma
// q(mu, tau) = N(mu | m, 1/(kappa tau)) Gamma(tau | a, b) whose mean and
// rate are m = s / kappa and b = (q - s^2 / kappa) / 2 (so s = kappa m,
// q = 2b + kappa m^2, linear in the sufficient statistics). The prior block
// is written once by init_params and its gradient is always 0.
//
// A worker's gradient() is g = lambda - lambda_hat_B: lambda_hat_B is the
// CAVI update of the global parameters from the minibatch's responsibilities,
// its sufficient statistics scaled by N / |B| (N = the training set's size).
// Its loss is the minibatch's negative ELBO per point: -mean_i log sum_k
// exp(E[log pi_k] + E[log N(x_i | mu_k, tau_k)]) + KL(q || prior) / N.
// evaluate(): loss = the negative held-out posterior predictive
// log-likelihood per point (a mixture of Student-t's weighted by E[pi_k],
// normalized); accuracy NaN; effective_k = #{k : E[pi_k] > 1 %}; ari = the
// adjusted Rand index of the most probable component against the labels
// (NaN when the data has fewer than two classes).
//
// Every Beta and Gamma parameter (g1, g2, kappa, a, b) stays positive under
// lambda <- (1 - rho) lambda + rho lambda_hat with rho in [0, 1] and a mean
// of such pushes: config validation refuses what would break it (momentum,
// Adam, sum aggregation, compression, rho > 1).
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "hsgd/data/dataset.h"
#include "hsgd/model/model.h"

namespace hsgd {

// The model over `dims` features with `truncation` components and DP
// concentration `alpha`. `train` (borrowed, may be null) is the training set:
// its size is N, and init_params draws the k-means++ initialisation and the
// empirical prior (m0 = per-dimension mean, b0 = per-dimension variance / 2,
// kappa0 = 1, a0 = dims / 2: scikit-learn's BayesianGaussianMixture
// defaults) from it; without it N = 1 and the prior is m0 = 0, b0 = 1/2.
// Throws InputError for dims < 1, truncation < 1 or alpha <= 0.
std::unique_ptr<Model> make_dpgmm_model(int64_t dims, int64_t truncation, double alpha,
                                        const Dataset* train);

namespace dpgmm {

// Where things are in the flat buffer.
struct Layout {
  int64_t dims = 0;
  int64_t truncation = 0;
  int64_t prior_size() const { return 3 + 2 * dims; }
  int64_t component_size() const { return 4 + 2 * dims; }
  int64_t size() const { return prior_size() + truncation * component_size(); }
  int64_t component(int64_t k) const { return prior_size() + k * component_size(); }
};

// The truncation a buffer of `num_params` floats holds for `dims` features,
// or 0 if none.
int64_t truncation_of(int64_t num_params, int64_t dims);

// psi(x) for x > 0 (recurrence to x >= 10, then the asymptotic series;
// absolute error below 1e-13).
double digamma(double x);

// The CAVI update lambda_hat of the global parameters from the
// responsibilities of the n samples x (n x dims, row-major) under `lambda`,
// the sufficient statistics scaled by `scale` (N / n for SVI, 1 for a
// full-batch CAVI iteration). The prior block is copied. Double throughout.
// If `neg_elbo_local` is not null it receives -sum_i log sum_k exp(...); if
// `per_sample` is not empty (n entries) it receives each sample's term.
std::vector<double> local_update(const Layout& l, std::span<const double> lambda, const float* x,
                                 int64_t n, double scale, double* neg_elbo_local = nullptr,
                                 std::span<float> per_sample = {});

// KL(q(V, mu, tau) || prior) of the global parameters.
double global_kl(const Layout& l, std::span<const double> lambda);

// E[pi_k] (normalized to sum to 1).
std::vector<double> expected_weights(const Layout& l, std::span<const double> lambda);

// Whether every Beta and Gamma parameter (g1, g2, kappa, a, b of every
// component and dimension; kappa0, a0, b0, alpha) is finite and > 0.
bool positive(const Layout& l, std::span<const float> lambda);
bool positive(const Layout& l, std::span<const double> lambda);

// log sum exp(v); overwrites v with exp(v - max v).
double log_sum_exp(std::vector<double>& v);

// The adjusted Rand index of two labelings of the same samples.
double adjusted_rand_index(std::span<const int32_t> a, std::span<const int32_t> b);

}  // namespace dpgmm
}  // namespace hsgd
