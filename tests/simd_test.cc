#include "hsgd/core/simd.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

namespace hsgd {
namespace {

float from_bits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}

TEST(Simd, AllFiniteAcceptsEveryFiniteKind) {
  const float lim = std::numeric_limits<float>::max();
  const std::vector<float> v = {0.0f,
                                -0.0f,
                                1.0f,
                                -1.0f,
                                lim,
                                -lim,
                                std::numeric_limits<float>::min(),
                                std::numeric_limits<float>::denorm_min(),
                                -std::numeric_limits<float>::denorm_min(),
                                from_bits(0x7F7FFFFFu),
                                from_bits(0xFF7FFFFFu)};
  EXPECT_TRUE(all_finite(v));
  EXPECT_TRUE(all_finite({}));
}

// Every non-finite kind, at every position of vectors that end inside and
// outside the 32-lane blocks (0..100 values): none is missed by the blocks or
// the scalar tail, whichever kernel (SSE2 or AVX2) this CPU runs.
TEST(Simd, AllFiniteFindsEveryNonFiniteValueAtEveryPosition) {
  const float bad[] = {std::numeric_limits<float>::infinity(),
                       -std::numeric_limits<float>::infinity(),
                       std::numeric_limits<float>::quiet_NaN(), from_bits(0xFFC00001u),
                       from_bits(0x7F800001u) /* signalling NaN */};
  for (size_t n = 1; n <= 100; ++n) {
    std::vector<float> v(n, 0.5f);
    EXPECT_TRUE(all_finite(v)) << n;
    for (size_t i = 0; i < n; ++i) {
      for (float b : bad) {
        v[i] = b;
        ASSERT_FALSE(all_finite(v)) << "n " << n << ", position " << i;
      }
      v[i] = -std::numeric_limits<float>::max();
      ASSERT_TRUE(all_finite(v)) << "n " << n << ", position " << i;
      v[i] = 0.5f;
    }
  }
}

TEST(Simd, AllFiniteOnALargeBuffer) {
  std::vector<float> v(1 << 20, 1e-9f);
  EXPECT_TRUE(all_finite(v));
  v.back() = std::numeric_limits<float>::quiet_NaN();
  EXPECT_FALSE(all_finite(v));
}

}  // namespace
}  // namespace hsgd
