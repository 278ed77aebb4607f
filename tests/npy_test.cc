// Tests for the NumPy readers (hsgd/data/npy.cc): .npy and .npz (stored and
// deflated zip members), dtypes, shapes, key selection, and one clear error
// for each kind of bad input. Fixtures are written here (tests/npz_writer.h)
// plus the ones numpy wrote under tests/data/torchscript/.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "alloc_probe.h"
#include "hsgd/core/error.h"
#include "hsgd/data/dataset.h"
#include "hsgd/data/readers.h"
#include "hsgd/data/spec.h"
#include "npz_writer.h"
#include "test_helpers.h"

namespace hsgd {
namespace {

namespace fs = std::filesystem;
using testing::npy_bytes;
using testing::raw;
using testing::zip_bytes;
using testing::ZipMember;
using testing_helpers::expect_input_error;

const std::string kFixtures = std::string(HSGD_SOURCE_DIR) + "/tests/data/torchscript/";

class NpyTest : public testing_helpers::TempDirTest {};

const std::vector<float> kX = {0.5f, -1.0f, 2.0f, 3.0f, 4.0f, 5.25f};  // 3 x 2
const std::vector<int64_t> kY = {0, 2, 1};

std::string good_x() { return npy_bytes("<f4", {3, 2}, raw(kX)); }
std::string good_y() { return npy_bytes("<i8", {3}, raw(kY)); }

void expect_small(const Dataset& d) {
  ASSERT_EQ(d.size(), 3);
  EXPECT_EQ(d.sample_shape, (std::vector<int64_t>{2}));
  EXPECT_EQ(d.num_classes, 3);
  EXPECT_EQ(d.features, kX);
  EXPECT_EQ(d.labels, (std::vector<int32_t>{0, 2, 1}));
}

TEST_F(NpyTest, Float32AndInt64) {
  expect_small(read_npy(write("x.npy", good_x()), write("y.npy", good_y())));
}

TEST_F(NpyTest, Float64FeaturesAndOtherLabelDtypes) {
  const std::vector<double> x(kX.begin(), kX.end());
  const std::string xp = write("x.npy", npy_bytes("<f8", {3, 2}, raw(x)));
  expect_small(read_npy(xp, write("y1.npy", npy_bytes("|u1", {3}, std::string("\0\2\1", 3)))));
  expect_small(
      read_npy(xp, write("y2.npy", npy_bytes("<i2", {3, 1}, raw(std::vector<int16_t>{0, 2, 1})))));
  expect_small(
      read_npy(xp, write("y3.npy", npy_bytes("<u4", {3}, raw(std::vector<uint32_t>{0, 2, 1})))));
  expect_small(
      read_npy(xp, write("y4.npy", npy_bytes("<f4", {3}, raw(std::vector<float>{0, 2, 1})))));
}

TEST_F(NpyTest, Uint8ImagesScaledAndShapeKept) {
  std::string pixels;
  for (int i = 0; i < 2 * 2 * 2 * 3; ++i) pixels += static_cast<char>(i * 10);
  const Dataset d =
      read_npy(write("x.npy", npy_bytes("|u1", {2, 2, 2, 3}, pixels)),
               write("y.npy", npy_bytes("<i4", {2}, raw(std::vector<int32_t>{1, 0}))));
  EXPECT_EQ(d.sample_shape, (std::vector<int64_t>{2, 2, 3}));
  ASSERT_EQ(d.features.size(), 24u);
  EXPECT_FLOAT_EQ(d.features[23], 230.0f / 255.0f);
  // N x H x W: one channel.
  const Dataset g =
      read_npy(write("g.npy", npy_bytes("|u1", {2, 3, 4}, pixels)),
               write("y.npy", npy_bytes("<i4", {2}, raw(std::vector<int32_t>{1, 0}))));
  EXPECT_EQ(g.sample_shape, (std::vector<int64_t>{1, 3, 4}));
}

TEST_F(NpyTest, NpzDefaultKeysStoredAndDeflated) {
  for (bool deflate : {false, true}) {
    const std::string p =
        write("d.npz", zip_bytes({{"y.npy", good_y(), deflate}, {"x.npy", good_x(), deflate}}));
    std::optional<Dataset> test;
    expect_small(read_npz(p, "", "", &test));
    EXPECT_FALSE(test.has_value());
  }
}

TEST_F(NpyTest, NpzFirstTwoArraysAndKeysAndTestSplit) {
  const std::string first = write("f.npz", zip_bytes({{"a.npy", good_x()}, {"b.npy", good_y()}}));
  expect_small(read_npz(first, "", "", nullptr));
  const std::string keyed = write(
      "k.npz", zip_bytes({{"junk.npy", good_y()}, {"feat.npy", good_x()}, {"lab.npy", good_y()}}));
  expect_small(read_npz(keyed, "feat", "lab", nullptr));
  expect_input_error([&] { read_npz(keyed, "feat", "nope", nullptr); },
                     {keyed, "no array 'nope'", "junk, feat, lab"});
  const std::string split = write(
      "s.npz", zip_bytes({{"x.npy", good_x()},
                          {"y.npy", good_y()},
                          {"x_test.npy", npy_bytes("<f4", {1, 2}, raw(std::vector<float>{1, 2}))},
                          {"y_test.npy", npy_bytes("<i8", {1}, raw(std::vector<int64_t>{2}))}}));
  const LoadedData loaded = load_data("npz:" + split, {});
  expect_small(loaded.train);
  ASSERT_TRUE(loaded.test.has_value());
  EXPECT_EQ(loaded.test->size(), 1);
  EXPECT_EQ(load_test_data("npz:" + split, {}).size(), 1);
  expect_small(load_data("npz:" + keyed + ":feat,lab", {}).train);
  expect_small(
      load_data("npy:" + write("x.npy", good_x()) + "," + write("y.npy", good_y()), {}).train);
  expect_input_error([] { load_data("npy:onlyone.npy", {}); }, {"npy:X.npy,Y.npy"});
}

TEST_F(NpyTest, FilesWrittenByNumpy) {
  const Dataset blobs =
      read_npy(kFixtures + "blobs_x.npy", kFixtures + "blobs_y.npy");  // float64, int64
  EXPECT_EQ(blobs.size(), 300);
  EXPECT_EQ(blobs.sample_shape, (std::vector<int64_t>{8}));
  EXPECT_EQ(blobs.num_classes, 3);
  std::optional<Dataset> test;
  const Dataset images = read_npz(kFixtures + "images.npz", "", "", &test);  // deflated
  EXPECT_EQ(images.size(), 300);
  EXPECT_EQ(images.sample_shape, (std::vector<int64_t>{1, 8, 8}));
  ASSERT_TRUE(test.has_value());
  EXPECT_EQ(test->size(), 60);
}

TEST_F(NpyTest, BadMagic) {
  const std::string p = write("x.npy", "PK\3\4 not numpy at all");
  expect_input_error([&] { read_npy(p, p); }, {p + ": offset 0:", "bad magic"});
  const std::string z = write("z.npz", good_x());
  expect_input_error([&] { read_npz(z, "", "", nullptr); },
                     {z + ": offset 0:", "zip", "bad magic"});
}

TEST_F(NpyTest, UnsupportedDtypes) {
  const std::string y = write("y.npy", good_y());
  const std::string c = write("c.npy", npy_bytes("<c8", {3, 2}, std::string(48, '\0')));
  expect_input_error([&] { read_npy(c, y); }, {c, "unsupported dtype '<c8'"});
  const std::string i = write("i.npy", npy_bytes("<i4", {3, 2}, std::string(24, '\0')));
  expect_input_error([&] { read_npy(i, y); }, {i, "unsupported feature dtype i4"});
  const std::string be = write("b.npy", npy_bytes(">f4", {3, 2}, std::string(24, '\0')));
  expect_input_error([&] { read_npy(be, y); }, {be, "big-endian"});
  const std::string s = write("s.npy", npy_bytes("<U3", {3}, std::string(36, '\0')));
  expect_input_error([&] { read_npy(write("x.npy", good_x()), s); }, {s, "unsupported dtype"});
}

TEST_F(NpyTest, FortranOrderRefused) {
  const std::string f = write("f.npy", npy_bytes("<f4", {3, 2}, raw(kX), /*fortran=*/true));
  expect_input_error([&] { read_npy(f, write("y.npy", good_y())); },
                     {f, "Fortran-order", "C order"});
}

TEST_F(NpyTest, ShapeMismatchBetweenXAndY) {
  const std::string x = write("x.npy", good_x());
  const std::string y = write("y.npy", npy_bytes("<i8", {2}, raw(std::vector<int64_t>{0, 1})));
  expect_input_error([&] { read_npy(x, y); }, {y, "2 labels for the 3 samples of " + x});
  const std::string y2 = write("y2.npy", npy_bytes("<i8", {3, 2}, std::string(48, '\0')));
  expect_input_error([&] { read_npy(x, y2); }, {y2, "labels have shape (3, 2)"});
  const std::string x1 = write("x1.npy", npy_bytes("<f4", {6}, raw(kX)));
  expect_input_error([&] { read_npy(x1, y); }, {x1, "features have shape (6,)"});
}

TEST_F(NpyTest, BadLabels) {
  const std::string x = write("x.npy", good_x());
  const std::string neg =
      write("n.npy", npy_bytes("<i8", {3}, raw(std::vector<int64_t>{0, -1, 1})));
  expect_input_error([&] { read_npy(x, neg); }, {neg, "label -1 at index 1"});
  const std::string frac =
      write("f.npy", npy_bytes("<f8", {3}, raw(std::vector<double>{0, 1.5, 1})));
  expect_input_error([&] { read_npy(x, frac); }, {frac, "label 1.5 at index 1", "integer"});
  const std::string big =
      write("b.npy", npy_bytes("<u8", {3}, raw(std::vector<uint64_t>{0, 1, uint64_t{1} << 63})));
  expect_input_error([&] { read_npy(x, big); }, {big, "label 9223372036854775808 at index 2"});
}

TEST_F(NpyTest, NonFiniteFeatures) {
  std::vector<float> x = kX;
  x[3] = std::nanf("");
  const std::string p = write("x.npy", npy_bytes("<f4", {3, 2}, raw(x)));
  expect_input_error([&] { read_npy(p, write("y.npy", good_y())); },
                     {p, "feature 1 of sample 1 is nan"});
}

TEST_F(NpyTest, TruncatedAndHugeClaims) {
  const std::string y = write("y.npy", good_y());
  const std::string full = good_x();
  const std::string t = write("t.npy", full.substr(0, full.size() - 3));
  expect_input_error([&] { read_npy(t, y); }, {t, "truncated", "21 data bytes"});
  const std::string h = write("h.npy", full.substr(0, 20));
  expect_input_error([&] { read_npy(h, y); }, {h, "truncated"});
  // A header claiming 2^48 x 2^48 elements over a few bytes: refused before
  // any allocation.
  const std::string huge =
      write("huge.npy", npy_bytes("<f4", {int64_t{1} << 48, int64_t{1} << 48}, "abcd"));
  expect_input_error([&] { read_npy(huge, y); }, {huge, "truncated"});
  const std::string extra = write("e.npy", full + "zz");
  expect_input_error([&] { read_npy(extra, y); }, {extra, "2 more bytes"});
}

TEST_F(NpyTest, CorruptZips) {
  const std::string good = zip_bytes({{"x.npy", good_x(), true}, {"y.npy", good_y(), true}});
  // Cut anywhere: one clear error, never a crash or a huge allocation.
  for (size_t cut : {size_t{10}, good.size() / 2, good.size() - 5}) {
    const std::string p = write("cut.npz", good.substr(0, cut));
    expect_input_error([&] { read_npz(p, "", "", nullptr); }, {p});
  }
  // A flipped byte inside the compressed data: CRC or deflate error.
  std::string flipped = good;
  flipped[60] = static_cast<char>(flipped[60] ^ 0x55);
  const std::string f = write("flip.npz", flipped);
  expect_input_error([&] { read_npz(f, "", "", nullptr); }, {f});
  // A central directory claiming a 4 GB member: refused by size, not allocated.
  std::string lying = zip_bytes({{"x.npy", good_x(), true}, {"y.npy", good_y(), true}});
  const size_t cd = lying.find(std::string("PK\1\2", 4));
  ASSERT_NE(cd, std::string::npos);
  for (int i = 0; i < 4; ++i) lying[cd + 24 + i] = '\xfe';
  const std::string l = write("lie.npz", lying);
  expect_input_error([&] { read_npz(l, "", "", nullptr); }, {l + " (x.npy)", "cannot inflate"});
  const std::string one = write("one.npz", zip_bytes({{"x.npy", good_x()}}));
  expect_input_error([&] { read_npz(one, "", "", nullptr); }, {one, "expected two arrays"});
}

// Issue 25, defect 13: a deflated member is inflated in bounded chunks, so
// a header that claims up to 1032x the compressed size (within what deflate
// can do, so not refused by size) allocates what the stream really
// produces, not the claim; the disagreement is one clear error.
TEST_F(NpyTest, ALyingInflatedSizeAllocatesWhatTheStreamHolds) {
  std::vector<float> big(16384);  // 64 KiB of x, deflated to a few KiB
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>((i * 7919) % 1000) / 7.0f;
  const std::string x = npy_bytes("<f4", {8192, 2}, raw(big));
  std::vector<int64_t> labels(8192);
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int64_t>(i % 3);
  const std::string y = npy_bytes("<i8", {8192}, raw(labels));
  std::string lying = zip_bytes({{"x.npy", x, true}, {"y.npy", y, true}});
  const size_t cd = lying.find(std::string("PK\1\2", 4));
  ASSERT_NE(cd, std::string::npos);
  auto field = [&](size_t at) {
    uint64_t v = 0;
    for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(lying[at + i]);
    return v;
  };
  const uint64_t packed = field(cd + 20);
  ASSERT_LT(packed, x.size() / 2);
  const uint64_t claim = packed * 1000;  // megabytes: deflate could, this stream does not
  for (int i = 0; i < 4; ++i) lying[cd + 24 + i] = static_cast<char>((claim >> (8 * i)) & 0xff);
  const std::string l = write("lie1000.npz", lying);
  const size_t largest = test::largest_allocation([&] {
    expect_input_error([&] { read_npz(l, "", "", nullptr); },
                       {l + " (x.npy)", "inflates to " + std::to_string(x.size()) + " bytes",
                        std::to_string(claim) + " declared"});
  });
  // The file (read whole), the inflated member and a chunk: about 4 x 64 KiB.
  EXPECT_LT(largest, size_t{1} << 20) << "declared " << claim;
  // The honest archive still reads, with the same bound.
  const std::string h = write("honest.npz", zip_bytes({{"x.npy", x, true}, {"y.npy", y, true}}));
  Dataset d;
  EXPECT_LT(test::largest_allocation([&] { d = read_npz(h, "", "", nullptr); }), size_t{1} << 20);
  EXPECT_EQ(d.features, big);
}

// In-memory arrays (the Python module): float32 features are borrowed, not
// copied, and a borrowed set gathers the same bits, standardized, as the
// owned copy standardized in place; the caller's values stay as they were.
TEST(DatasetFromArrays, BorrowedFloat32GathersTheSameBitsAsTheOwnedCopy) {
  std::vector<float> x(6 * 3);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.37f * static_cast<float>(i) - 1.1f;
  const std::vector<int64_t> y = {0, 1, 2, 1, 0, 2};
  const std::vector<float> before = x;
  const ArrayView xv{
      "x", 'f', 4, {6, 3}, std::string_view(reinterpret_cast<const char*>(x.data()), x.size() * 4)};
  const ArrayView yv{
      "y", 'i', 8, {6}, std::string_view(reinterpret_cast<const char*>(y.data()), y.size() * 8)};
  Dataset b = dataset_from_arrays(xv, yv, /*borrow=*/true);
  Dataset o = dataset_from_arrays(xv, yv, /*borrow=*/false);
  EXPECT_EQ(b.borrowed.data(), x.data());  // no copy
  EXPECT_TRUE(b.features.empty());
  EXPECT_TRUE(o.borrowed.empty());
  EXPECT_EQ(b.num_classes, 3);
  double mb, sb, mo, so;
  feature_moments(b, &mb, &sb);
  feature_moments(o, &mo, &so);
  EXPECT_EQ(mb, mo);
  EXPECT_EQ(sb, so);
  standardize(&b, mb, sb);
  standardize(&o, mo, so);
  const std::vector<int64_t> idx = {5, 0, 3};
  Batch gb, go;
  gather(b, idx, &gb);
  gather(o, idx, &go);
  EXPECT_EQ(gb.features, go.features);  // bit for bit
  EXPECT_EQ(gb.labels, go.labels);
  EXPECT_EQ(x, before);  // never written
  // A NaN is refused with the reader's line, borrowed or not.
  x[4] = std::nanf("");
  expect_input_error([&] { dataset_from_arrays(xv, yv, true); },
                     {"x: feature 1 of sample 1 is nan, expected a finite number"});
}

}  // namespace
}  // namespace hsgd
