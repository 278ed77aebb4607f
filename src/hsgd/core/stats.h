// Small statistics helpers for figures reported to users.
#pragma once
#include <algorithm>
#include <vector>

namespace hsgd {

// The median of v (the mean of the middle two for an even count); v is
// non-empty.
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace hsgd
