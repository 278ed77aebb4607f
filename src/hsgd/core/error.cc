#include "hsgd/core/error.h"

#include <cstdio>
#include <cstdlib>

namespace hsgd {

void assert_fail(const char* expr, const char* file, int line, const char* msg) {
  std::fprintf(stderr, "hsgd: internal error: %s:%d: assertion '%s' failed: %s\n", file, line, expr,
               msg);
  std::abort();
}

}  // namespace hsgd
