#include "hsgd/core/topology.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "hsgd/core/error.h"
#include "hsgd/core/rng.h"

namespace hsgd {
namespace {

int ceil_log2(int n) {
  int k = 0;
  while ((1LL << k) < n) ++k;
  return k;
}

void add_edge(std::vector<std::vector<int>>& adj, int a, int b) {
  if (a == b) return;
  adj[static_cast<size_t>(a)].push_back(b);
  adj[static_cast<size_t>(b)].push_back(a);
}

std::string listed(const std::vector<std::string>& names) {
  std::string s;
  for (size_t i = 0; i < names.size(); ++i) {
    s += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  }
  return s;
}

}  // namespace

const std::vector<std::string>& topology_names() {
  static const std::vector<std::string> names = {
      "ring", "torus", "exp", "onepeer-exp", "random-matching", "complete", "star"};
  return names;
}

const std::vector<std::string>& topology_weight_names() {
  static const std::vector<std::string> names = {"uniform", "metropolis"};
  return names;
}

Topology::Topology(std::string kind, std::string weights, int n, uint64_t seed)
    : kind_(std::move(kind)), weights_(std::move(weights)), n_(n), seed_(seed) {
  const auto& kinds = topology_names();
  if (std::find(kinds.begin(), kinds.end(), kind_) == kinds.end()) {
    throw InputError("gossip.topology = '" + kind_ + "': expected " + listed(kinds));
  }
  const auto& ws = topology_weight_names();
  if (std::find(ws.begin(), ws.end(), weights_) == ws.end()) {
    throw InputError("gossip.weights = '" + weights_ + "': expected " + listed(ws));
  }
  if (n_ < 1) throw InputError("train.workers = " + std::to_string(n_) + ": expected >= 1");
  if (time_varying()) return;
  adj_.assign(static_cast<size_t>(n_), {});
  if (kind_ == "ring") {
    for (int i = 0; i < n_; ++i) add_edge(adj_, i, (i + 1) % n_);
  } else if (kind_ == "torus") {
    rows_ = 1;
    for (int r = 1; r * r <= n_; ++r) {
      if (n_ % r == 0) rows_ = r;
    }
    cols_ = n_ / rows_;
    for (int r = 0; r < rows_; ++r) {
      for (int c = 0; c < cols_; ++c) {
        const int i = r * cols_ + c;
        add_edge(adj_, i, r * cols_ + (c + 1) % cols_);
        add_edge(adj_, i, ((r + 1) % rows_) * cols_ + c);
      }
    }
  } else if (kind_ == "exp") {
    for (int i = 0; i < n_; ++i) {
      for (int64_t s = 1; s < n_; s *= 2) add_edge(adj_, i, static_cast<int>((i + s) % n_));
    }
  } else if (kind_ == "complete") {
    for (int i = 0; i < n_; ++i) {
      for (int j = i + 1; j < n_; ++j) add_edge(adj_, i, j);
    }
  } else if (kind_ == "star") {
    for (int j = 1; j < n_; ++j) add_edge(adj_, 0, j);
  }
  for (auto& a : adj_) {
    std::sort(a.begin(), a.end());
    a.erase(std::unique(a.begin(), a.end()), a.end());
    dmax_ = std::max(dmax_, static_cast<int>(a.size()));
  }
}

bool Topology::time_varying() const { return kind_ == "onepeer-exp" || kind_ == "random-matching"; }

int Topology::period() const {
  if (kind_ == "onepeer-exp") return std::max(1, ceil_log2(n_));
  if (kind_ == "random-matching") return 0;
  return 1;
}

int Topology::onepeer_shift(int64_t t) const {
  const int k = ceil_log2(n_);
  if (k == 0) return 0;
  return static_cast<int>((1LL << static_cast<int>(t % k)) % n_);
}

std::vector<int> Topology::matching(int64_t t) const {
  std::vector<int> order(static_cast<size_t>(n_));
  for (int i = 0; i < n_; ++i) order[static_cast<size_t>(i)] = i;
  Rng rng(seed_, 0x6d61746368ULL + static_cast<uint64_t>(t));  // "match" + round
  shuffle(order, rng);
  std::vector<int> partner(static_cast<size_t>(n_));
  for (int i = 0; i < n_; ++i) partner[static_cast<size_t>(i)] = i;
  for (size_t p = 0; p + 1 < order.size(); p += 2) {
    partner[static_cast<size_t>(order[p])] = order[p + 1];
    partner[static_cast<size_t>(order[p + 1])] = order[p];
  }
  return partner;
}

std::vector<int> Topology::static_neighbours(int i) const { return adj_[static_cast<size_t>(i)]; }

std::vector<int> Topology::neighbours(int i, int64_t t) const {
  if (kind_ == "onepeer-exp") {
    std::vector<int> v = in_peers(i, t);
    for (int j : out_peers(i, t)) v.push_back(j);
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
    return v;
  }
  if (kind_ == "random-matching") {
    const int p = matching(t)[static_cast<size_t>(i)];
    return p == i ? std::vector<int>{} : std::vector<int>{p};
  }
  return static_neighbours(i);
}

std::vector<int> Topology::out_peers(int i, int64_t t) const {
  if (kind_ == "onepeer-exp") {
    const int s = onepeer_shift(t);
    if (s == 0) return {};
    return {(i + s) % n_};
  }
  return neighbours(i, t);
}

std::vector<int> Topology::in_peers(int i, int64_t t) const {
  if (kind_ == "onepeer-exp") {
    const int s = onepeer_shift(t);
    if (s == 0) return {};
    return {((i - s) % n_ + n_) % n_};
  }
  return neighbours(i, t);
}

MixRow Topology::mixing_row(int i, int64_t t) const {
  MixRow row;
  if (kind_ == "onepeer-exp") {
    const std::vector<int> in = in_peers(i, t);
    if (in.empty()) return {{i, 1.0}};
    const int j = in[0];
    if (j < i) return {{j, 0.5}, {i, 0.5}};
    return {{i, 0.5}, {j, 0.5}};
  }
  if (kind_ == "random-matching") {
    const std::vector<int> nb = neighbours(i, t);
    if (nb.empty()) return {{i, 1.0}};
    const int j = nb[0];
    if (j < i) return {{j, 0.5}, {i, 0.5}};
    return {{i, 0.5}, {j, 0.5}};
  }
  const std::vector<int>& nb = adj_[static_cast<size_t>(i)];
  const int di = static_cast<int>(nb.size());
  double off = 0;
  bool self_done = false;
  for (int j : nb) {
    if (!self_done && j > i) {
      row.push_back({i, 0});
      self_done = true;
    }
    const int dj = static_cast<int>(adj_[static_cast<size_t>(j)].size());
    const double w =
        weights_ == "metropolis" ? 1.0 / (1.0 + std::max(di, dj)) : 1.0 / (dmax_ + 1.0);
    row.push_back({j, w});
    off += w;
  }
  if (!self_done) row.push_back({i, 0});
  for (auto& [j, w] : row) {
    if (j == i) w = 1.0 - off;
  }
  return row;
}

std::vector<double> Topology::mixing_matrix(int64_t t) const {
  std::vector<double> w(static_cast<size_t>(n_) * static_cast<size_t>(n_), 0.0);
  for (int i = 0; i < n_; ++i) {
    for (const auto& [j, x] : mixing_row(i, t)) {
      w[static_cast<size_t>(i) * static_cast<size_t>(n_) + static_cast<size_t>(j)] += x;
    }
  }
  return w;
}

int Topology::max_degree() const {
  if (kind_ == "onepeer-exp") return n_ > 2 ? 2 : n_ - 1;
  if (kind_ == "random-matching") return n_ > 1 ? 1 : 0;
  return dmax_;
}

double spectral_gap(const std::vector<double>& w, int n) {
  if (n <= 1) return 1.0;
  const auto N = static_cast<size_t>(n);
  // A = W - 11^T / n: its eigenvalues are W's with the eigenvalue 1 of the
  // all-ones vector replaced by 0, so max |eig(A)| = |lambda_2(W)|.
  std::vector<double> a(w);
  for (double& x : a) x -= 1.0 / n;
  auto at = [&](size_t i, size_t j) -> double& { return a[i * N + j]; };
  // Cyclic Jacobi rotations until the off-diagonal part vanishes.
  for (int sweep = 0; sweep < 100; ++sweep) {
    double off = 0;
    for (size_t i = 0; i < N; ++i) {
      for (size_t j = i + 1; j < N; ++j) off += at(i, j) * at(i, j);
    }
    if (off < 1e-22) break;
    for (size_t p = 0; p < N; ++p) {
      for (size_t q = p + 1; q < N; ++q) {
        const double apq = at(p, q);
        if (std::abs(apq) < 1e-300) continue;
        const double theta = (at(q, q) - at(p, p)) / (2 * apq);
        const double tt =
            (theta >= 0 ? 1.0 : -1.0) / (std::abs(theta) + std::sqrt(theta * theta + 1));
        const double c = 1 / std::sqrt(tt * tt + 1), s = tt * c;
        for (size_t k = 0; k < N; ++k) {  // columns p, q
          const double akp = at(k, p), akq = at(k, q);
          at(k, p) = c * akp - s * akq;
          at(k, q) = s * akp + c * akq;
        }
        for (size_t k = 0; k < N; ++k) {  // rows p, q
          const double apk = at(p, k), aqk = at(q, k);
          at(p, k) = c * apk - s * aqk;
          at(q, k) = s * apk + c * aqk;
        }
      }
    }
  }
  double lam2 = 0;
  for (size_t i = 0; i < N; ++i) lam2 = std::max(lam2, std::abs(at(i, i)));
  return std::max(0.0, 1.0 - lam2);
}

double spectral_gap(const Topology& t) {
  if (t.time_varying()) return std::numeric_limits<double>::quiet_NaN();
  return spectral_gap(t.mixing_matrix(0), t.size());
}

}  // namespace hsgd
