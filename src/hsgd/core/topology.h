// Gossip topologies and their mixing weights (issue 28): which workers a
// worker averages with at gossip round t, and with what weights.
//
// Kinds (gossip.topology), for any n >= 1 including odd n:
//   ring          i <-> i +- 1 (mod n)
//   torus         a rows x cols grid with wrap-around, rows the largest
//                 divisor of n not above sqrt(n) (a prime n is a 1 x n ring)
//   exp           static exponential: i <-> i +- 2^k (mod n), 2^k < n
//   onepeer-exp   dynamic one-peer exponential (Ying et al. 2021): at round
//                 t, i receives from i - 2^k and sends to i + 2^k (mod n),
//                 k = t mod ceil(log2 n); W(t) = (I + P_k) / 2. For n = 2^k
//                 the product of log2 n consecutive rounds is exactly
//                 11^T / n (exact averaging).
//   random-matching  at round t a seeded uniform random perfect matching
//                 (one worker left alone when n is odd); pairs average
//   complete      everyone with everyone
//   star          worker 0 with every other worker
// Weights (gossip.weights) of the undirected kinds (all but onepeer-exp,
// whose weights are its 1/2 and 1/2):
//   uniform       w_ij = 1 / (d_max + 1) for each neighbour j, w_ii the rest
//                 (= 1 / (d + 1) on the regular graphs)
//   metropolis    w_ij = 1 / (1 + max(d_i, d_j)) (Metropolis-Hastings)
// Both give a symmetric doubly stochastic W; onepeer-exp's W(t) is doubly
// stochastic and not symmetric.
//
// Push-sum (sgp) reads the same graphs as directed: out_peers(i, t), and a
// worker keeps 1 / (out + 1) of its mass and sends each peer as much (a
// column-stochastic matrix).
//
// A plain function of (kind, weights, n, seed, t): no state, no clock;
// torch-free.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace hsgd {

// The names gossip.topology and gossip.weights take, in the docs' order.
const std::vector<std::string>& topology_names();
const std::vector<std::string>& topology_weight_names();

// One row of a mixing matrix: (column j, w_ij), the diagonal included,
// columns ascending.
using MixRow = std::vector<std::pair<int, double>>;

class Topology {
 public:
  // Throws InputError naming gossip.topology or gossip.weights on an unknown
  // name; n >= 1.
  Topology(std::string kind, std::string weights, int n, uint64_t seed);

  const std::string& kind() const { return kind_; }
  int size() const { return n_; }
  // True for onepeer-exp and random-matching (W depends on the round).
  bool time_varying() const;
  // Rounds after which the graph repeats (1 for static ones; ceil(log2 n)
  // for onepeer-exp; 0 for random-matching, which never repeats).
  int period() const;

  // Worker i's undirected neighbours at round t (i excluded, ascending).
  // onepeer-exp: its in-peer and out-peer.
  std::vector<int> neighbours(int i, int64_t t) const;
  // Where worker i's model goes at round t (ascending; i excluded): the
  // neighbours, and onepeer-exp's out-peer only.
  std::vector<int> out_peers(int i, int64_t t) const;
  // Whose models worker i combines at round t (the transpose of out_peers).
  std::vector<int> in_peers(int i, int64_t t) const;

  // Row i of W(t): x_i <- sum_j w_ij x_j.
  MixRow mixing_row(int i, int64_t t) const;
  // W(t) dense, row-major n x n (tests, the spectral gap).
  std::vector<double> mixing_matrix(int64_t t) const;

  // The largest number of neighbours over workers and one period.
  int max_degree() const;

 private:
  std::vector<int> static_neighbours(int i) const;
  std::vector<int> matching(int64_t t) const;  // partner of each worker, or itself
  int onepeer_shift(int64_t t) const;

  std::string kind_, weights_;
  int n_;
  uint64_t seed_;
  int rows_ = 1, cols_ = 1;            // torus
  std::vector<std::vector<int>> adj_;  // static kinds
  int dmax_ = 0;                       // static kinds
};

// 1 - |lambda_2(W)| of a symmetric n x n matrix (row-major), by Jacobi
// eigenvalue rotations: the second-largest eigenvalue modulus once the
// eigenvalue 1 is set aside. n = 1: 1.
double spectral_gap(const std::vector<double>& w, int n);
// The same for a static topology; NaN for a time-varying one.
double spectral_gap(const Topology& t);

}  // namespace hsgd
