// Small vector kernels shared by the server, the optimizers and the
// runtimes, and the one CPU check that picks their AVX2 versions.
//
// The build targets baseline x86-64 (SSE2). Loops that are bound by the
// core rather than memory (a finiteness pass over a gradient in cache, the
// optimizers' steps) also get an AVX2 version, taken when the CPU has it:
// the same operations in the same order, so every version gives the same
// result bit for bit (no FMA contraction: AVX2 does not enable it). A plain
// branch on a value computed once, not an ifunc, whose resolver would run
// before ThreadSanitizer is initialised.
#pragma once
#include <span>

#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
#define HSGD_AVX2_KERNELS 1
#define HSGD_AVX2 __attribute__((target("avx2")))
#define HSGD_INLINE inline __attribute__((always_inline))
#else
#define HSGD_AVX2_KERNELS 0
#define HSGD_AVX2
#define HSGD_INLINE inline
#endif

namespace hsgd {

// Whether the AVX2 kernels may run on this CPU (checked once; thread-safe).
bool cpu_has_avx2();

// Whether every value is finite (no NaN, no infinity). Reads every value
// (no early exit: the common answer is yes); ~memory speed.
bool all_finite(std::span<const float> v);

}  // namespace hsgd
