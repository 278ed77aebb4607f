// core/state.h: the byte streams of checkpoints, and CRC-32C.
#include "hsgd/core/state.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace hsgd {
namespace {

TEST(State, RoundTripsValuesArraysAndStrings) {
  StateWriter w;
  w.tag(7);
  w.put<int64_t>(-5);
  w.put(2.5);
  w.put_vec(std::vector<float>{1.0f, 2.0f, 3.0f});
  w.put_vec(std::vector<float>{});
  w.put_bools({true, false, true});
  w.put_str("hybrid");
  const std::string bytes = w.take();
  StateReader r(bytes, "blob");
  r.expect_tag(7, "test");
  EXPECT_EQ(r.get<int64_t>(), -5);
  EXPECT_EQ(r.get<double>(), 2.5);
  EXPECT_EQ(r.get_vec<float>(), (std::vector<float>{1.0f, 2.0f, 3.0f}));
  EXPECT_TRUE(r.get_vec<float>().empty());
  EXPECT_EQ(r.get_bools(), (std::vector<bool>{true, false, true}));
  EXPECT_EQ(r.get_str(), "hybrid");
  r.expect_end();
}

TEST(State, EveryTruncationThrowsAnInputErrorNamingTheBlob) {
  StateWriter w;
  w.put<int32_t>(1);
  w.put_vec(std::vector<double>{1, 2, 3});
  const std::string bytes = w.take();
  for (size_t cut = 0; cut < bytes.size(); ++cut) {
    StateReader r(std::string_view(bytes).substr(0, cut), "ckpt/x.bin");
    try {
      r.get<int32_t>();
      r.get_vec<double>();
      FAIL() << "no error at " << cut;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("ckpt/x.bin: truncated"), std::string::npos);
    }
  }
}

TEST(State, AHugeLengthFailsBeforeAllocating) {
  StateWriter w;
  w.put<uint64_t>(uint64_t{1} << 60);  // claims 2^60 floats
  const std::string bytes = w.take();
  StateReader r(bytes, "blob");
  EXPECT_THROW(r.get_vec<float>(), InputError);
}

TEST(State, WrongTagAndTrailingBytesAreCorrupt) {
  StateWriter w;
  w.tag(1);
  w.put<int32_t>(0);
  const std::string bytes = w.take();
  StateReader a(bytes, "blob");
  EXPECT_THROW(a.expect_tag(2, "server"), InputError);
  StateReader b(bytes, "blob");
  b.expect_tag(1, "server");
  EXPECT_THROW(b.expect_end(), InputError);
}

TEST(State, Crc32cMatchesTheStandardCheckValue) {
  const std::string s = "123456789";
  EXPECT_EQ(crc32c(s), 0xE3069283u);  // RFC 3720 check value
  EXPECT_EQ(crc32c(std::string_view(s).substr(4), crc32c(std::string_view(s).substr(0, 4))),
            0xE3069283u);
  EXPECT_EQ(crc32c(std::string()), 0u);
  // Long and unaligned inputs (the 8-byte path and its tail) against a
  // bytewise chain.
  std::string big(1001, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 131 + 7);
  uint32_t chained = 0;
  for (char ch : big) chained = crc32c(std::string_view(&ch, 1), chained);
  EXPECT_EQ(crc32c(big), chained);
  EXPECT_EQ(
      crc32c(std::string_view(big).substr(3)),
      crc32c(std::string_view(big).substr(500), crc32c(std::string_view(big).substr(3, 497))));
  // Past three lanes of 8 KiB (the interleaved path, its lanes combined)
  // and a tail, unaligned, against the same bytewise chain.
  std::string huge(3 * 3 * 8192 + 1234, '\0');
  for (size_t i = 0; i < huge.size(); ++i) huge[i] = static_cast<char>(i * 2654435761u >> 13);
  uint32_t step = 0xABCDu;
  for (char ch : huge.substr(5)) step = crc32c(std::string_view(&ch, 1), step);
  EXPECT_EQ(crc32c(std::string_view(huge).substr(5), 0xABCDu), step);
}

}  // namespace
}  // namespace hsgd
