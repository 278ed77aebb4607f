#include "hsgd/core/simd.h"

#include <cstdint>
#include <cstring>

namespace hsgd {
namespace {

// A value is not finite when its exponent bits are all ones, i.e. when its
// bits without the sign, as a signed integer, exceed the largest finite
// float's (0x7F7FFFFF). Signed compares and ORs over 32 independent lanes:
// SSE2 has them (no unsigned 32-bit max or compare before SSE4.1), and no
// lane waits on another, so the loop runs at the speed of the loads.
constexpr int kLanes = 32;

HSGD_INLINE bool all_finite_body(const float* __restrict v, size_t n) {
  int32_t acc[kLanes] = {};
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) {
      int32_t b;
      std::memcpy(&b, v + i + j, sizeof b);
      acc[j] |= -static_cast<int32_t>((b & 0x7FFFFFFF) > 0x7F7FFFFF);
    }
  }
  int32_t bad = 0;
  for (int j = 0; j < kLanes; ++j) bad |= acc[j];
  for (; i < n; ++i) {
    int32_t b;
    std::memcpy(&b, v + i, sizeof b);
    bad |= static_cast<int32_t>((b & 0x7FFFFFFF) > 0x7F7FFFFF);
  }
  return bad == 0;
}

bool all_finite_baseline(const float* v, size_t n) { return all_finite_body(v, n); }
#if HSGD_AVX2_KERNELS
HSGD_AVX2 bool all_finite_avx2(const float* v, size_t n) { return all_finite_body(v, n); }
#endif

}  // namespace

bool cpu_has_avx2() {
#if HSGD_AVX2_KERNELS
  static const bool yes = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") != 0;
  }();
  return yes;
#else
  return false;
#endif
}

bool all_finite(std::span<const float> v) {
#if HSGD_AVX2_KERNELS
  if (cpu_has_avx2()) return all_finite_avx2(v.data(), v.size());
#endif
  return all_finite_baseline(v.data(), v.size());
}

}  // namespace hsgd
