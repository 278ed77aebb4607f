// One libFuzzer target: compiled once per reader with HSGD_FUZZ_CHECK set to
// one of the checks of contract.h (see tests/fuzz/CMakeLists.txt). A broken
// contract aborts with the reason; an exception other than InputError
// escapes and aborts too; libFuzzer then saves the input.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "contract.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string broken =
      hsgd::fuzz::HSGD_FUZZ_CHECK(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!broken.empty()) {
    std::fprintf(stderr, "contract broken: %s\n", broken.c_str());
    std::abort();
  }
  return 0;
}
