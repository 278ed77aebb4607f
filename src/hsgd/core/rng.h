// Deterministic random streams. Every consumer derives its own stream from
// (seed, stream id), so adding a worker never perturbs another's draws.
// State is one 64-bit word plus a counter: trivially saved and restored.
#pragma once
#include <cmath>
#include <cstdint>

namespace hsgd {

class Rng {
 public:
  Rng() = default;
  Rng(uint64_t seed, uint64_t stream) : state_(mix(seed ^ mix(stream + 0x9e3779b97f4a7c15ULL))) {}

  uint64_t next_u64() {  // splitmix64
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    return mix(z);
  }
  // Uniform in [0, 1).
  double uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }
  // Uniform integer in [0, n).
  uint64_t below(uint64_t n) { return n == 0 ? 0 : next_u64() % n; }
  // Standard normal (Box-Muller, no cached second value so state is one word).
  double normal() {
    double u1 = uniform();
    double u2 = uniform();
    if (u1 < 1e-300) u1 = 1e-300;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

  uint64_t state() const { return state_; }
  void set_state(uint64_t s) { state_ = s; }

 private:
  static uint64_t mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  uint64_t state_ = 0x853c49e6748fea9bULL;
};

// Fisher-Yates shuffle driven by an Rng (std::shuffle is not portable across
// standard libraries, this is).
template <class Vec>
void shuffle(Vec& v, Rng& rng) {
  for (size_t i = v.size(); i > 1; --i) {
    size_t j = static_cast<size_t>(rng.below(i));
    std::swap(v[i - 1], v[j]);
  }
}

}  // namespace hsgd
