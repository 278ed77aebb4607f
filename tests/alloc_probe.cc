// Replaces the global operator new/delete of a test binary to feed
// alloc_probe.h. Every non-aligned form is replaced (with malloc/free) so
// that AddressSanitizer sees matching pairs.
#include "alloc_probe.h"

#include <cstdlib>
#include <new>

namespace hsgd::test {

std::atomic<bool> g_probe_on{false};
std::atomic<size_t> g_probe_largest{0};

namespace {

void* probe_alloc(size_t n) {
  if (g_probe_on.load(std::memory_order_relaxed)) {
    size_t seen = g_probe_largest.load(std::memory_order_relaxed);
    while (n > seen && !g_probe_largest.compare_exchange_weak(seen, n)) {
    }
  }
  return std::malloc(n == 0 ? 1 : n);
}

}  // namespace
}  // namespace hsgd::test

void* operator new(size_t n) {
  if (void* p = hsgd::test::probe_alloc(n)) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t n) {
  if (void* p = hsgd::test::probe_alloc(n)) return p;
  throw std::bad_alloc();
}
void* operator new(size_t n, const std::nothrow_t&) noexcept { return hsgd::test::probe_alloc(n); }
void* operator new[](size_t n, const std::nothrow_t&) noexcept {
  return hsgd::test::probe_alloc(n);
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
