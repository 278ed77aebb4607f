#include "hsgd/core/state.h"

#include <array>
#include <cstring>

namespace hsgd {
namespace {

std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0x82F63B78u ^ (c >> 1) : c >> 1;
    t[i] = c;
  }
  return t;
}

uint32_t crc32c_table(const char* p, size_t n, uint32_t crc) {
  static const std::array<uint32_t, 256> table = make_table();
  for (size_t i = 0; i < n; ++i)
    crc = table[(crc ^ static_cast<uint8_t>(p[i])) & 0xFF] ^ (crc >> 8);
  return crc;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
// The SSE4.2 crc32 instruction computes CRC-32C 8 bytes at a time.
__attribute__((target("sse4.2"))) uint32_t crc32c_sse42(const char* p, size_t n, uint32_t crc) {
  uint64_t c = crc;
  for (; n >= 8; p += 8, n -= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    c = __builtin_ia32_crc32di(c, v);
  }
  auto c32 = static_cast<uint32_t>(c);
  for (; n > 0; ++p, --n) c32 = __builtin_ia32_crc32qi(c32, static_cast<unsigned char>(*p));
  return c32;
}
#endif

}  // namespace

uint32_t crc32c(std::span<const char> bytes, uint32_t crc) {
  crc = ~crc;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  static const bool hw = __builtin_cpu_supports("sse4.2");
  if (hw) return ~crc32c_sse42(bytes.data(), bytes.size(), crc);
#endif
  return ~crc32c_table(bytes.data(), bytes.size(), crc);
}

}  // namespace hsgd
