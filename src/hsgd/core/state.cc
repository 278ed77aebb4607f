#include "hsgd/core/state.h"

#include <array>

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

}  // namespace

uint32_t crc32c(std::span<const char> bytes, uint32_t crc) {
  static const std::array<uint32_t, 256> table = make_table();
  crc = ~crc;
  for (char ch : bytes) crc = table[(crc ^ static_cast<uint8_t>(ch)) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

}  // namespace hsgd
