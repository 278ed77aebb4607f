// Measures the largest single heap allocation made while a function runs,
// through the global operator new/delete that alloc_probe.cc replaces in the
// test binaries linked with it (tests/CMakeLists.txt). Used by
// the "header lies" tests: a reader must fail before allocating what a header
// claims. Every non-aligned form is replaced (with malloc/free) so that
// AddressSanitizer sees matching pairs.
#pragma once
#include <atomic>
#include <cstddef>

namespace hsgd::test {

extern std::atomic<bool> g_probe_on;
extern std::atomic<size_t> g_probe_largest;

// The largest single allocation (bytes) made by any thread while fn() ran.
template <class Fn>
size_t largest_allocation(Fn&& fn) {
  g_probe_largest = 0;
  g_probe_on = true;
  fn();
  g_probe_on = false;
  return g_probe_largest;
}

}  // namespace hsgd::test
