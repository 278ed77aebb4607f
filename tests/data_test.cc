// Tests for hsgd/data: readers (with fixtures written here), error messages,
// split, shard sampling, synthetic data, specs, and the real Fashion-MNIST.
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <set>
#include <string>
#include <vector>

#include "alloc_probe.h"
#include "hsgd/core/error.h"
#include "hsgd/data/dataset.h"
#include "hsgd/data/project.h"
#include "hsgd/data/readers.h"
#include "hsgd/data/spec.h"
#include "test_helpers.h"

namespace hsgd {
namespace {

using testing_helpers::expect_input_error;

namespace fs = std::filesystem;
using Bytes = std::string;

// ---- fixture generators

void put_be32(Bytes* b, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) b->push_back(static_cast<char>((v >> shift) & 0xff));
}

Bytes idx_images(uint32_t n, uint32_t rows, uint32_t cols, const std::vector<uint8_t>& pixels) {
  Bytes b;
  put_be32(&b, 0x00000803);
  put_be32(&b, n);
  put_be32(&b, rows);
  put_be32(&b, cols);
  b.append(pixels.begin(), pixels.end());
  return b;
}

Bytes idx_labels(const std::vector<uint8_t>& labels, uint32_t n) {
  Bytes b;
  put_be32(&b, 0x00000801);
  put_be32(&b, n);
  b.append(labels.begin(), labels.end());
  return b;
}
Bytes idx_labels(const std::vector<uint8_t>& labels) {
  return idx_labels(labels, static_cast<uint32_t>(labels.size()));
}

// One CIFAR-10 record whose pixel i is (seed + i) % 256.
Bytes cifar_record(uint8_t label, int seed) {
  Bytes b(1, static_cast<char>(label));
  for (int i = 0; i < 3072; ++i) b.push_back(static_cast<char>((seed + i) % 256));
  return b;
}

class DataTest : public testing_helpers::TempDirTest {
 protected:
  std::string write_gz(const std::string& name, const Bytes& bytes) const {
    gzFile f = gzopen(path(name).c_str(), "wb");
    EXPECT_NE(f, nullptr);
    EXPECT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())),
              static_cast<int>(bytes.size()));
    gzclose(f);
    return path(name);
  }
};

// A data set whose sample i has features {i, -i} and label i % 3.
Dataset indexed(int64_t n) {
  Dataset d;
  d.name = "indexed";
  d.sample_shape = {2};
  d.num_classes = 3;
  for (int64_t i = 0; i < n; ++i) {
    d.features.push_back(static_cast<float>(i));
    d.features.push_back(static_cast<float>(-i));
    d.labels.push_back(static_cast<int32_t>(i % 3));
  }
  return d;
}

const std::vector<uint8_t> kPixels = {0, 1, 2, 3, 4, 5, 128, 129, 130, 131, 254, 255};

// ---- IDX

void expect_small_idx(const Dataset& d) {
  ASSERT_EQ(d.size(), 2);
  EXPECT_EQ(d.sample_shape, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(d.num_classes, 10);
  EXPECT_EQ(d.labels, (std::vector<int32_t>{7, 0}));
  ASSERT_EQ(d.features.size(), kPixels.size());
  for (size_t i = 0; i < kPixels.size(); ++i) EXPECT_EQ(d.features[i], kPixels[i] / 255.0f);
  EXPECT_EQ(d.features.back(), 1.0f);
}

TEST_F(DataTest, IdxRaw) {
  Dataset d =
      read_idx(write("img", idx_images(2, 2, 3, kPixels)), write("lab", idx_labels({7, 0})));
  expect_small_idx(d);
  EXPECT_EQ(d.name, path("img"));
}

TEST_F(DataTest, IdxGzipDetectedByMagicNotName) {
  // Named without .gz but compressed, and named .gz but raw: content decides.
  expect_small_idx(
      read_idx(write_gz("img", idx_images(2, 2, 3, kPixels)), write("lab.gz", idx_labels({7, 0}))));
}

TEST_F(DataTest, IdxDirWithAndWithoutGz) {
  write_gz("train-images-idx3-ubyte.gz", idx_images(2, 2, 3, kPixels));
  write("train-labels-idx1-ubyte", idx_labels({7, 0}));
  EXPECT_TRUE(has_idx_split(dir_.string(), true));
  EXPECT_FALSE(has_idx_split(dir_.string(), false));
  expect_small_idx(read_idx_dir(dir_.string(), true));
  expect_input_error(
      [&] { read_idx_dir(dir_.string(), false); },
      {path("t10k-images-idx3-ubyte[.gz]"), "cannot open (No such file or directory)"});
}

TEST_F(DataTest, IdxConcatenatedGzipMembers) {
  Bytes all = idx_images(2, 2, 3, kPixels);
  std::string p = write_gz("a", all.substr(0, 7));
  std::string q = write_gz("b", all.substr(7));
  std::ifstream a(p, std::ios::binary), b(q, std::ios::binary);
  Bytes joined((std::istreambuf_iterator<char>(a)), {});
  joined.append((std::istreambuf_iterator<char>(b)), {});
  expect_small_idx(read_idx(write("img", joined), write("lab", idx_labels({7, 0}))));
}

TEST_F(DataTest, IdxTruncatedHeader) {
  Bytes b = idx_images(2, 2, 3, kPixels).substr(0, 10);
  std::string img = write("img", b);
  std::string lab = write("lab", idx_labels({7, 0}));
  expect_input_error([&] { read_idx(img, lab); },
                     {img + ": offset 10: expected a 16-byte IDX image header, got 10 bytes"});
  std::string short_lab = write("lab2", idx_labels({7, 0}).substr(0, 6));
  std::string good = write("img2", idx_images(2, 2, 3, kPixels));
  expect_input_error([&] { read_idx(good, short_lab); }, {short_lab + ": offset 6:", "8-byte"});
}

TEST_F(DataTest, IdxTruncatedData) {
  Bytes b = idx_images(2, 2, 3, kPixels);
  std::string img = write("img", b.substr(0, b.size() - 2));
  std::string lab = write("lab", idx_labels({7, 0}));
  expect_input_error(
      [&] { read_idx(img, lab); },
      {img + ": offset 26: expected 12 bytes of pixels (2 images of 2x3)", "got 10"});
  // The same through gzip: offsets count uncompressed bytes.
  std::string gz = write_gz("img.gz", b.substr(0, b.size() - 2));
  expect_input_error([&] { read_idx(gz, lab); }, {gz + ": offset 26: expected 12 bytes"});
}

TEST_F(DataTest, IdxTrailingBytes) {
  std::string img = write("img", idx_images(2, 2, 3, kPixels) + "xx");
  std::string lab = write("lab", idx_labels({7, 0}));
  expect_input_error([&] { read_idx(img, lab); },
                     {img + ": offset 28: expected end of file", "got 2 more bytes"});
}

TEST_F(DataTest, IdxWrongMagic) {
  std::string lab = write("lab", idx_labels({7, 0}));
  // Labels given as images: the message says what the file is.
  expect_input_error(
      [&] { read_idx(lab, lab); },
      {lab +
       ": offset 0: expected IDX image magic 0x00000803, got 0x00000801 (an IDX label file)"});
  std::string img = write("img", idx_images(2, 2, 3, kPixels));
  expect_input_error([&] { read_idx(img, img); },
                     {img + ": offset 0: expected IDX label magic 0x00000801, got 0x00000803"});
  std::string junk = write("junk", "hello world, not idx at all");
  expect_input_error([&] { read_idx(junk, lab); }, {junk + ": offset 0: expected IDX image magic"});
}

TEST_F(DataTest, IdxCorruptGzip) {
  // A valid 10-byte gzip header, then garbage deflate data.
  Bytes b = {'\x1f', '\x8b', '\x08', '\0', '\0', '\0', '\0', '\0', '\0', '\x03'};
  b += "\xff\xff\xff\xff this is not deflate data at all";
  std::string img = write("img.gz", b);
  std::string lab = write("lab", idx_labels({7, 0}));
  expect_input_error([&] { read_idx(img, lab); },
                     {img + ": offset ", "expected gzip data, got a corrupt stream (zlib: "});
}

TEST_F(DataTest, IdxTruncatedGzip) {
  std::string full = write_gz("full.gz", idx_images(2, 2, 3, kPixels));
  std::ifstream in(full, std::ios::binary);
  Bytes b((std::istreambuf_iterator<char>(in)), {});
  std::string img = write("img.gz", b.substr(0, b.size() - 12));
  std::string lab = write("lab", idx_labels({7, 0}));
  expect_input_error(
      [&] { read_idx(img, lab); },
      {img + ": offset " + std::to_string(b.size() - 12) + ": expected more gzip data",
       "truncated"});
}

TEST_F(DataTest, IdxLabelOutOfRange) {
  std::string img = write("img", idx_images(2, 2, 3, kPixels));
  std::string lab = write("lab", idx_labels({7, 10}));
  expect_input_error([&] { read_idx(img, lab); },
                     {lab + ": offset 9: expected a label in 0..9, got 10"});
}

TEST_F(DataTest, IdxCountMismatch) {
  std::string img = write("img", idx_images(2, 2, 3, kPixels));
  std::string lab = write("lab", idx_labels({7, 0, 1}));
  expect_input_error([&] { read_idx(img, lab); },
                     {lab + ": offset 4: expected 2 labels (one per image of " + img + "), got 3"});
  std::string lie = write("lie", idx_labels({7, 0}, 3));  // header says 3, holds 2
  expect_input_error([&] { read_idx(img, lie); }, {lie + ": offset 4: expected 2 labels"});
}

TEST_F(DataTest, IdxEmptyAndHugeDims) {
  std::string lab = write("lab", idx_labels({7, 0}));
  std::string zero = write("zero", idx_images(0, 2, 3, {}));
  expect_input_error([&] { read_idx(zero, lab); },
                     {zero + ": offset 4: expected at least one image, got 0"});
  std::string huge = write("huge", idx_images(0xffffffff, 0xffffffff, 0xffffffff, kPixels));
  expect_input_error([&] { read_idx(huge, lab); }, {huge + ": offset 28: expected", "got 12"});
}

TEST_F(DataTest, MissingFile) {
  std::string p = path("nope");
  expect_input_error([&] { read_idx(p, p); }, {p + ": cannot open (No such file or directory)"});
  expect_input_error([&] { read_csv(p); }, {p + ": cannot open (No such file or directory)"});
  expect_input_error([&] { read_csv(dir_.string()); },
                     {dir_.string() + ": expected a file, got a directory"});
  // A read that fails after the open (as root, chmod 000 would not stop it).
  expect_input_error([&] { read_libsvm("/proc/self/mem"); },
                     {"/proc/self/mem: cannot read (Input/output error)"});
}

// ---- CIFAR-10

TEST_F(DataTest, Cifar10) {
  for (int i = 1; i <= 5; ++i) {
    write("data_batch_" + std::to_string(i) + ".bin",
          cifar_record(static_cast<uint8_t>(i), i) +
              cifar_record(static_cast<uint8_t>(9 - i), 100 + i));
  }
  EXPECT_FALSE(has_cifar10_split(dir_.string(), false));
  write("test_batch.bin", cifar_record(0, 7));
  EXPECT_TRUE(has_cifar10_split(dir_.string(), true));
  Dataset train = read_cifar10_dir(dir_.string(), true);
  ASSERT_EQ(train.size(), 10);
  EXPECT_EQ(train.sample_shape, (std::vector<int64_t>{3, 32, 32}));
  EXPECT_EQ(train.num_classes, 10);
  EXPECT_EQ(train.labels, (std::vector<int32_t>{1, 8, 2, 7, 3, 6, 4, 5, 5, 4}));
  EXPECT_EQ(train.sample(3)[0], 102 / 255.0f);  // record 2 of file 2, seed 102
  EXPECT_EQ(train.sample(3)[3071], ((102 + 3071) % 256) / 255.0f);
  Dataset test = read_cifar10_dir(dir_.string(), false);
  ASSERT_EQ(test.size(), 1);
  EXPECT_EQ(test.sample(0)[1024], ((7 + 1024) % 256) / 255.0f);  // first green pixel
}

TEST_F(DataTest, Cifar10WrongSize) {
  std::string p = write("test_batch.bin", cifar_record(1, 0) + "abc");
  expect_input_error(
      [&] { read_cifar10_dir(dir_.string(), false); },
      {p + ": offset 3076: expected a whole number of 3073-byte records", "got 3076 bytes"});
  write("test_batch.bin", "");
  expect_input_error([&] { read_cifar10_dir(dir_.string(), false); }, {p + ": offset 0:"});
}

TEST_F(DataTest, Cifar10LabelOutOfRange) {
  std::string p = write("test_batch.bin", cifar_record(1, 0) + cifar_record(10, 0));
  expect_input_error([&] { read_cifar10_dir(dir_.string(), false); },
                     {p + ": offset 3073: expected a label in 0..9 (record 1), got 10"});
}

TEST_F(DataTest, Cifar10MissingBatch) {
  write("data_batch_1.bin", cifar_record(1, 0));
  expect_input_error([&] { read_cifar10_dir(dir_.string(), true); },
                     {path("data_batch_2.bin") + ": cannot open"});
}

// ---- CSV

TEST_F(DataTest, Csv) {
  std::string p = write("d.csv", "0,1.5,-2\n2, 3e-1 ,+4\r\n1,0,0.25\n\n\n");
  Dataset d = read_csv(p);
  ASSERT_EQ(d.size(), 3);
  EXPECT_EQ(d.name, p);
  EXPECT_EQ(d.sample_shape, (std::vector<int64_t>{2}));
  EXPECT_EQ(d.num_classes, 3);
  EXPECT_EQ(d.labels, (std::vector<int32_t>{0, 2, 1}));
  EXPECT_EQ(d.features, (std::vector<float>{1.5f, -2.0f, 0.3f, 4.0f, 0.0f, 0.25f}));
  // No final newline, gzip-compressed, integral label written as a float.
  Dataset g = read_csv(write_gz("g.csv", "4.0,1"));
  EXPECT_EQ(g.labels, (std::vector<int32_t>{4}));
  EXPECT_EQ(g.num_classes, 5);
}

TEST_F(DataTest, CsvRaggedRow) {
  std::string p = write("d.csv", "0,1,2,3\n1,1,2,3\n0,1,2\n");
  expect_input_error([&] { read_csv(p); }, {p + ":line 3: expected 4 fields, got 3"});
  std::string q = write("e.csv", "0,1,2\n1,1,2,3,4\n");
  expect_input_error([&] { read_csv(q); }, {q + ":line 2: expected 3 fields, got 5"});
}

TEST_F(DataTest, CsvNonNumber) {
  std::string p = write("d.csv", "0,1,2\n1,1,abc\n");
  expect_input_error([&] { read_csv(p); }, {p + ":line 2 field 3: expected a number, got 'abc'"});
  std::string q = write("e.csv", "0,1,\n");
  expect_input_error([&] { read_csv(q); }, {q + ":line 1 field 3: expected a number, got ''"});
  std::string r = write("f.csv", "0,1,nan\n");
  expect_input_error([&] { read_csv(r); }, {r + ":line 1 field 3: expected a number, got 'nan'"});
  std::string h = write("h.csv", "label,x,y\n0,1,2\n");
  expect_input_error([&] { read_csv(h); }, {h + ":line 1 field 1:", "header"});
}

TEST_F(DataTest, CsvBadLabel) {
  std::string p = write("d.csv", "0,1\n-1,2\n");
  expect_input_error([&] { read_csv(p); },
                     {p + ":line 2 field 1: expected a non-negative integer label, got '-1'"});
  std::string q = write("e.csv", "1.5,2\n");
  expect_input_error([&] { read_csv(q); }, {q + ":line 1 field 1:", "got '1.5'"});
}

TEST_F(DataTest, CsvEmptyAndBlankLines) {
  std::string p = write("d.csv", "");
  expect_input_error([&] { read_csv(p); }, {p + ":line 1: expected a data row, got an empty file"});
  std::string q = write("e.csv", "0,1\n\n1,2\n");
  expect_input_error([&] { read_csv(q); }, {q + ":line 2: expected a data row, got a blank line"});
  std::string r = write("f.csv", "0\n");
  expect_input_error([&] { read_csv(r); },
                     {r + ":line 1: expected a label and at least one feature"});
}

// ---- LIBSVM

TEST_F(DataTest, Libsvm) {
  std::string p = write("d.svm", "1 1:0.5 3:-2\n0 2:7  # comment\n+2\n3\t1:1\t4:1e2\n\n");
  Dataset d = read_libsvm(p);
  ASSERT_EQ(d.size(), 4);
  EXPECT_EQ(d.sample_shape, (std::vector<int64_t>{4}));
  EXPECT_EQ(d.num_classes, 4);
  EXPECT_EQ(d.labels, (std::vector<int32_t>{1, 0, 2, 3}));
  EXPECT_EQ(d.features, (std::vector<float>{0.5f, 0, -2, 0, 0, 7, 0, 0, 0, 0, 0, 0, 1, 0, 0, 100}));
}

TEST_F(DataTest, LibsvmBadIndices) {
  std::string p = write("a.svm", "1 1:1\n0 0:1.5\n");
  expect_input_error([&] { read_libsvm(p); }, {p + ":line 2: expected an index >= 1, got '0:1.5'"});
  std::string q = write("b.svm", "1 -3:1\n");
  expect_input_error([&] { read_libsvm(q); }, {q + ":line 1: expected an index >= 1, got '-3:1'"});
  std::string r = write("c.svm", "1 2:1 5:1 3:1\n");
  expect_input_error(
      [&] { read_libsvm(r); },
      {r + ":line 1: expected an index above 5 (indices must be strictly increasing), got '3:1'"});
  std::string s = write("d.svm", "1 2:1 2:1\n");
  expect_input_error([&] { read_libsvm(s); },
                     {s + ":line 1: expected an index above 2", "got '2:1'"});
}

TEST_F(DataTest, LibsvmBadTokens) {
  std::string p = write("a.svm", "1 1:1\n2 3\n");
  expect_input_error([&] { read_libsvm(p); }, {p + ":line 2: expected index:value, got '3'"});
  std::string q = write("b.svm", "1 1:x\n");
  expect_input_error([&] { read_libsvm(q); },
                     {q + ":line 1: expected a number after ':', got '1:x'"});
  std::string r = write("c.svm", "-1 1:1\n");
  expect_input_error([&] { read_libsvm(r); },
                     {r + ":line 1: expected a non-negative integer label, got '-1'"});
  std::string s = write("d.svm", "");
  expect_input_error([&] { read_libsvm(s); },
                     {s + ":line 1: expected a data row, got an empty file"});
}

// ---- header lies: memory follows the bytes really there, not the claims

// A gzip stream of `bytes` whose ISIZE trailer (the uncompressed size a
// reader might preallocate) claims 4 GB.
Bytes gzip_claiming_4gb(const Bytes& bytes) {
  Bytes out(compressBound(bytes.size()) + 64, '\0');
  z_stream s{};
  deflateInit2(&s, 9, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);
  s.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
  s.avail_in = static_cast<uInt>(bytes.size());
  s.next_out = reinterpret_cast<Bytef*>(out.data());
  s.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&s, Z_FINISH), Z_STREAM_END);
  out.resize(s.total_out);
  deflateEnd(&s);
  for (int i = 1; i <= 4; ++i) out[out.size() - i] = '\xff';  // ISIZE = 2^32 - 1
  return out;
}

constexpr size_t kSmall = 1 << 20;  // "did not allocate for the claim"

TEST_F(DataTest, HeaderLiesIdxBillionImagesIn100Bytes) {
  // 16-byte header claiming 10^9 images of 28x28 (784 GB), 84 bytes of data.
  const std::string img = write("img", idx_images(1000000000, 28, 28, std::vector<uint8_t>(84, 1)));
  ASSERT_EQ(fs::file_size(img), 100u);
  const std::string lab = write("lab", idx_labels({1}));
  EXPECT_LT(test::largest_allocation([&] {
              expect_input_error([&] { read_idx(img, lab); },
                                 {img + ": offset 100: expected 784000000000 bytes", "got 84"});
            }),
            kSmall);
  // Labels claiming 10^9 against 1 image: refused before any label is read.
  const std::string one = write("one", idx_images(1, 2, 2, {0, 1, 2, 3}));
  const std::string lie = write("lie", idx_labels({1}, 1000000000));
  EXPECT_LT(test::largest_allocation([&] {
              expect_input_error([&] { read_idx(one, lie); },
                                 {lie + ": offset 4: expected 1 labels"});
            }),
            kSmall);
}

TEST_F(DataTest, HeaderLiesIdxGzip) {
  // The same 100-byte lie, gzip-compressed: checked against what the stream
  // really inflates to.
  const std::string img =
      write_gz("img.gz", idx_images(1000000000, 28, 28, std::vector<uint8_t>(84, 1)));
  const std::string lab = write("lab", idx_labels({1}));
  EXPECT_LT(test::largest_allocation([&] {
              expect_input_error([&] { read_idx(img, lab); },
                                 {img + ": offset 100: expected 784000000000 bytes"});
            }),
            kSmall);
  // A gzip trailer claiming 4 GB is not preallocated (zlib then refuses the
  // stream: its length check fails). 4 KB of incompressible pixels: trusting
  // ISIZE up to deflate's 1032:1 would take 4 MB.
  std::vector<uint8_t> noise(64 * 64);
  uint32_t x = 12345;
  for (uint8_t& v : noise) v = static_cast<uint8_t>((x = x * 1664525u + 1013904223u) >> 24);
  const std::string isize = write("isize.gz", gzip_claiming_4gb(idx_images(1, 64, 64, noise)));
  EXPECT_LT(test::largest_allocation([&] {
              expect_input_error([&] { read_idx(isize, lab); },
                                 {isize + ": offset ", "incorrect length check"});
            }),
            kSmall);
}

TEST_F(DataTest, HeaderLiesCifar10GzipSize) {
  // CIFAR-10 has no header: its only claim can be a gzip ISIZE.
  write("test_batch.bin", gzip_claiming_4gb(cifar_record(4, 1)));
  EXPECT_LT(test::largest_allocation([&] {
              expect_input_error([&] { read_cifar10_dir(dir_.string(), false); },
                                 {"test_batch.bin: offset", "incorrect length check"});
            }),
            kSmall);
}

TEST_F(DataTest, HeaderLiesCsvGzipSizeAndWideFirstRow) {
  const std::string gz = write("a.csv.gz", gzip_claiming_4gb("0,1,2\n1,3,4\n"));
  EXPECT_LT(test::largest_allocation(
                [&] { expect_input_error([&] { read_csv(gz); }, {"incorrect length check"}); }),
            kSmall);
  // A 20 001-field first row then a ragged one: the row-size guess used to
  // reserve memory never exceeds the file.
  std::string wide = "0";
  for (int i = 0; i < 20000; ++i) wide += ",1";
  const std::string p = write("wide.csv", wide + "\n1,2\n");
  EXPECT_LT(test::largest_allocation(
                [&] { expect_input_error([&] { read_csv(p); }, {"wide.csv:line 2"}); }),
            kSmall);
}

TEST_F(DataTest, HeaderLiesLibsvmHugeIndex) {
  // One 14-byte line naming feature 4 000 000: 16 MB dense for 14 bytes.
  const std::string p = write("a.svm", "0 4000000:1\n");
  EXPECT_LT(test::largest_allocation([&] {
              expect_input_error(
                  [&] { read_libsvm(p); },
                  {p + ": expected at most 1048576 dense values", "1 rows x 4000000"});
            }),
            kSmall);
  const std::string q = write("b.svm", "0 1073741824:1\n");
  EXPECT_LT(test::largest_allocation([&] { expect_input_error([&] { read_libsvm(q); }, {q}); }),
            kSmall);
  // Sparse but within 256 values per byte: read.
  const std::string r = write("c.svm", "0 1:1\n1 1000:2\n");
  Dataset d = read_libsvm(r);
  EXPECT_EQ(d.sample_shape, (std::vector<int64_t>{1000}));
  EXPECT_EQ(d.features[1000 + 999], 2.0f);
}

// ---- specs and compatibility

TEST_F(DataTest, SpecUnknownKind) {
  SyntheticOptions o;
  expect_input_error(
      [&] { load_data("xyz", o); },
      {"--data 'xyz': expected one of fashion-mnist, synthetic, idx:DIR, cifar10:DIR, "
       "csv:FILE, libsvm:FILE"});
  expect_input_error([&] { load_test_data("foo:bar", o); },
                     {"--test-data 'foo:bar': expected one of"});
  expect_input_error([&] { load_data("csv:", o); }, {"--data 'csv:': expected a file"});
  expect_input_error([&] { load_data("csv:" + path("none.csv"), o); },
                     {path("none.csv") + ": cannot open (No such file or directory)"});
}

TEST_F(DataTest, SpecFiles) {
  SyntheticOptions o;
  std::string csv = write("d.csv", "0,1\n1,2\n");
  LoadedData c = load_data("csv:" + csv, o);
  EXPECT_EQ(c.train.size(), 2);
  EXPECT_EQ(c.train.name, csv);
  EXPECT_FALSE(c.test.has_value());
  EXPECT_EQ(load_test_data("csv:" + csv, o).size(), 2);
  std::string svm = write("d.svm", "0 1:1\n");
  EXPECT_EQ(load_data("libsvm:" + svm, o).train.size(), 1);

  write("train-images-idx3-ubyte", idx_images(2, 2, 3, kPixels));
  write("train-labels-idx1-ubyte", idx_labels({7, 0}));
  LoadedData only_train = load_data("idx:" + dir_.string(), o);
  EXPECT_FALSE(only_train.test.has_value());
  EXPECT_EQ(load_test_data("idx:" + dir_.string(), o).size(), 2);  // no test split: all of it
  write("t10k-images-idx3-ubyte", idx_images(1, 2, 3, {1, 2, 3, 4, 5, 6}));
  write("t10k-labels-idx1-ubyte", idx_labels({3}));
  LoadedData both = load_data("idx:" + dir_.string(), o);
  ASSERT_TRUE(both.test.has_value());
  EXPECT_EQ(both.test->size(), 1);
  EXPECT_EQ(load_test_data("idx:" + dir_.string(), o).labels, (std::vector<int32_t>{3}));

  o.samples = 50;
  LoadedData s = load_data("synthetic", o);
  EXPECT_EQ(s.train.size(), 50);
  EXPECT_EQ(s.train.name, "synthetic");
}

TEST(CheckCompatible, ShapesAndLabels) {
  Dataset train = indexed(6);
  train.name = "a.csv";
  Dataset test = indexed(2);
  test.name = "b.csv";
  test.num_classes = 2;
  check_compatible(train, &test);
  EXPECT_EQ(test.num_classes, 3);

  Dataset wide = test;
  wide.sample_shape = {1, 2};
  expect_input_error(
      [&] { check_compatible(train, wide); },
      {"b.csv: expected samples of shape {2} like the training data a.csv, got {1, 2}"});
  Dataset many = indexed(5);
  many.name = "b.csv";
  many.labels[4] = 3;
  expect_input_error([&] { check_compatible(train, many); },
                     {"b.csv: sample 4: expected a label in 0..2 (the classes of the training data "
                      "a.csv), got 3"});
}

// ---- split, gather, sampler

TEST(Split, DeterministicDisjointCovering) {
  Dataset train, test, train2, test2;
  split_train_test(indexed(100), 0.2, 5, &train, &test);
  split_train_test(indexed(100), 0.2, 5, &train2, &test2);
  EXPECT_EQ(train.size(), 80);
  EXPECT_EQ(test.size(), 20);
  EXPECT_EQ(train.features, train2.features);
  EXPECT_EQ(test.labels, test2.labels);
  EXPECT_EQ(train.sample_shape, (std::vector<int64_t>{2}));
  EXPECT_EQ(test.num_classes, 3);
  std::set<int> seen;
  for (const Dataset* d : {&train, &test}) {
    for (int64_t i = 0; i < d->size(); ++i) {
      const int id = static_cast<int>(d->sample(i)[0]);
      EXPECT_EQ(d->sample(i)[1], -static_cast<float>(id));
      EXPECT_EQ(d->labels[static_cast<size_t>(i)], id % 3);
      EXPECT_TRUE(seen.insert(id).second) << "sample " << id << " twice";
    }
  }
  EXPECT_EQ(seen.size(), 100u);
  Dataset other_train, other_test;
  split_train_test(indexed(100), 0.2, 6, &other_train, &other_test);
  EXPECT_NE(other_test.features, test.features);
}

TEST(Split, BadFractions) {
  Dataset a, b;
  for (double f : {0.0, 1.0, -0.5, 1.5, std::nan("")}) {
    expect_input_error([&] { split_train_test(indexed(10), f, 1, &a, &b); },
                       {"indexed: test fraction: expected a number in (0, 1)"});
  }
  expect_input_error([&] { split_train_test(indexed(3), 0.1, 1, &a, &b); },
                     {"indexed: test fraction 0.1 of 3 samples", "got 3 train and 0 test"});
}

TEST(Gather, CopiesSamples) {
  Dataset d = indexed(5);
  Batch b;
  const std::vector<int64_t> idx = {4, 0, 4};
  gather(d, idx, &b);
  EXPECT_EQ(b.size(), 3);
  EXPECT_EQ(b.features, (std::vector<float>{4, -4, 0, 0, 4, -4}));
  EXPECT_EQ(b.labels, (std::vector<int32_t>{1, 0, 1}));
}

std::vector<int> ids(const Batch& b) {
  std::vector<int> out;
  for (size_t i = 0; i < b.labels.size(); ++i) out.push_back(static_cast<int>(b.features[2 * i]));
  return out;
}

class ShardSamplerTest : public ::testing::TestWithParam<std::tuple<int64_t, int>> {};

TEST_P(ShardSamplerTest, ShardsDisjointCoveringBalanced) {
  const auto [n, workers] = GetParam();
  Dataset d = indexed(n);
  std::set<int> seen;
  for (int w = 0; w < workers; ++w) {
    if (n < workers) {
      EXPECT_THROW(ShardSampler(d, w, workers, 42), InputError);
      return;
    }
    ShardSampler s(d, w, workers, 42);
    EXPECT_EQ(s.shard_size(), (w + 1) * n / workers - w * n / workers);
    Batch b;
    s.next(s.shard_size(), &b);
    for (int id : ids(b))
      EXPECT_TRUE(seen.insert(id).second) << "sample " << id << " in two shards";
    EXPECT_EQ(s.epoch(), 0);
  }
  EXPECT_EQ(static_cast<int64_t>(seen.size()), n);
}

INSTANTIATE_TEST_SUITE_P(Sizes, ShardSamplerTest,
                         ::testing::Combine(::testing::Values<int64_t>(1, 7, 10, 101),
                                            ::testing::Values(1, 3, 7)),
                         [](const auto& info) {
                           return "n" + std::to_string(std::get<0>(info.param)) + "_w" +
                                  std::to_string(std::get<1>(info.param));
                         });

TEST(ShardSampler, TooFewSamples) {
  Dataset d = indexed(2);
  expect_input_error([&] { ShardSampler s(d, 0, 3, 1); },
                     {"indexed: 2 samples cannot be split over 3 workers"});
}

TEST(ShardSampler, DeterministicAndSeeded) {
  Dataset d = indexed(100);
  ShardSampler a(d, 1, 4, 9), b(d, 1, 4, 9), c(d, 1, 4, 10);
  Batch ba, bb, bc;
  a.next(60, &ba);
  b.next(60, &bb);
  c.next(60, &bc);
  EXPECT_EQ(ba.features, bb.features);
  EXPECT_EQ(ba.labels, bb.labels);
  EXPECT_NE(ba.features, bc.features);
}

TEST(ShardSampler, WrapsAcrossEpochsEachEpochAPermutation) {
  Dataset d = indexed(40);
  ShardSampler s(d, 2, 4, 3);  // shard of 10
  ASSERT_EQ(s.shard_size(), 10);
  Batch b;
  s.next(7, &b);
  std::vector<int> stream = ids(b);
  s.next(7, &b);  // crosses into epoch 1
  EXPECT_EQ(s.epoch(), 1);
  for (int id : ids(b)) stream.push_back(id);
  s.next(16, &b);  // the rest of epoch 1 and all of epoch 2
  for (int id : ids(b)) stream.push_back(id);
  EXPECT_EQ(s.epoch(), 2);
  ASSERT_EQ(stream.size(), 30u);
  std::vector<std::vector<int>> epochs;
  for (int e = 0; e < 3; ++e) {
    std::vector<int> ep(stream.begin() + 10 * e, stream.begin() + 10 * (e + 1));
    epochs.push_back(ep);
    std::sort(ep.begin(), ep.end());
    std::vector<int> first = epochs[0];
    std::sort(first.begin(), first.end());
    EXPECT_EQ(ep, first) << "epoch " << e << " is not a permutation of the shard";
  }
  EXPECT_NE(epochs[0], epochs[1]);  // reshuffled
  EXPECT_NE(epochs[1], epochs[2]);
  // A batch larger than the shard wraps several times.
  ShardSampler big(d, 0, 4, 3);
  big.next(25, &b);
  EXPECT_EQ(b.size(), 25);
  EXPECT_EQ(big.epoch(), 2);
}

TEST(ShardSampler, SaveAndRestore) {
  Dataset d = indexed(50);
  ShardSampler a(d, 0, 2, 7);
  Batch b;
  a.next(37, &b);  // into epoch 1
  const SamplerState saved = a.state();
  Batch expect;
  a.next(40, &expect);
  ShardSampler fresh(d, 0, 2, 7);
  fresh.restore(saved);
  Batch got;
  fresh.next(40, &got);
  EXPECT_EQ(got.features, expect.features);
  EXPECT_EQ(fresh.epoch(), a.epoch());
  SamplerState bad = saved;
  bad.position = 26;
  expect_input_error([&] { fresh.restore(bad); },
                     {"sampler state: expected epoch >= 0 and position in 0..25"});
}

// ---- synthetic

// Accuracy on `test` of the nearest centroid classifier fitted on `train`
// (a linear classifier: Bayes-optimal for this mixture up to the estimates).
double nearest_centroid_accuracy(const Dataset& train, const Dataset& test) {
  const size_t f = static_cast<size_t>(train.sample_size());
  std::vector<double> centre(static_cast<size_t>(train.num_classes) * f, 0.0);
  std::vector<double> count(static_cast<size_t>(train.num_classes), 0.0);
  for (int64_t i = 0; i < train.size(); ++i) {
    const auto y = static_cast<size_t>(train.labels[static_cast<size_t>(i)]);
    for (size_t j = 0; j < f; ++j) centre[y * f + j] += train.sample(i)[j];
    count[y] += 1;
  }
  for (size_t c = 0; c < count.size(); ++c) {
    for (size_t j = 0; j < f; ++j) centre[c * f + j] /= count[c];
  }
  int64_t correct = 0;
  for (int64_t i = 0; i < test.size(); ++i) {
    double best = 1e300;
    size_t arg = 0;
    for (size_t c = 0; c < count.size(); ++c) {
      double dist = 0;
      for (size_t j = 0; j < f; ++j) dist += std::pow(test.sample(i)[j] - centre[c * f + j], 2);
      if (dist < best) best = dist, arg = c;
    }
    correct += arg == static_cast<size_t>(test.labels[static_cast<size_t>(i)]);
  }
  return static_cast<double>(correct) / static_cast<double>(test.size());
}

TEST(Synthetic, DeterministicBalancedShaped) {
  SyntheticOptions o;
  Dataset a = make_synthetic(o);
  Dataset b = make_synthetic(o);
  EXPECT_EQ(a.size(), 10000);
  EXPECT_EQ(a.sample_shape, (std::vector<int64_t>{20}));
  EXPECT_EQ(a.num_classes, 10);
  EXPECT_EQ(a.features, b.features);
  EXPECT_EQ(a.labels, b.labels);
  std::vector<int> per_class(10);
  for (int32_t y : a.labels) ++per_class[static_cast<size_t>(y)];
  for (int c : per_class) EXPECT_EQ(c, 1000);
  o.seed = 2;
  EXPECT_NE(make_synthetic(o).features, a.features);
  o.samples = 0;
  expect_input_error([&] { make_synthetic(o); },
                     {"synthetic data: samples: expected at least 1, got 0"});
}

TEST(Synthetic, DefaultIsLearnableNotTrivial) {
  for (uint64_t seed : {1, 2, 3, 4, 5}) {
    SyntheticOptions o;
    o.seed = seed;
    Dataset train, test;
    split_train_test(make_synthetic(o), 0.2, seed, &train, &test);
    const double acc = nearest_centroid_accuracy(train, test);
    std::printf("synthetic seed %llu: nearest-centroid test accuracy %.3f\n",
                static_cast<unsigned long long>(seed), acc);
    EXPECT_GT(acc, 0.72);
    EXPECT_LT(acc, 0.88);
  }
}

// ---- the real Fashion-MNIST

TEST(FashionMnist, LoadsBothSplits) {
  if (!fs::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  }
  const auto start = std::chrono::steady_clock::now();
  LoadedData d = load_data("fashion-mnist", SyntheticOptions{});
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("fashion-mnist loaded in %.3f s\n", secs);
  ASSERT_TRUE(d.test.has_value());
  for (const Dataset* s : {&d.train, &*d.test}) {
    EXPECT_EQ(s->sample_shape, (std::vector<int64_t>{1, 28, 28}));
    EXPECT_EQ(s->num_classes, 10);
    EXPECT_EQ(s->features.size(), static_cast<size_t>(s->size()) * 784);
    for (int32_t y : s->labels) ASSERT_TRUE(y >= 0 && y < 10);
    const auto [lo, hi] = std::minmax_element(s->features.begin(), s->features.end());
    EXPECT_EQ(*lo, 0.0f);
    EXPECT_EQ(*hi, 1.0f);
  }
  EXPECT_EQ(d.train.size(), 60000);
  EXPECT_EQ(d.test->size(), 10000);
  check_compatible(d.train, *d.test);
  EXPECT_EQ(load_test_data("fashion-mnist", SyntheticOptions{}).size(), 10000);
}

// synthetic-gmm (issue 31): seeded, labels are the components, every
// component present; data.project: a seeded projection, the same for both sets.
TEST(SyntheticGmm, SeededLabelledAndEveryComponentPresent) {
  SyntheticOptions o;
  o.samples = 5000;
  o.features = 4;
  o.classes = 6;
  o.class_sep = 3;
  const Dataset a = make_synthetic_gmm(o), b = make_synthetic_gmm(o);
  EXPECT_EQ(a.features, b.features);
  EXPECT_EQ(a.labels, b.labels);
  EXPECT_EQ(a.sample_shape, std::vector<int64_t>{4});
  EXPECT_EQ(a.num_classes, 6);
  std::set<int32_t> seen(a.labels.begin(), a.labels.end());
  EXPECT_EQ(seen.size(), 6u);
  o.seed = 2;
  EXPECT_NE(make_synthetic_gmm(o).features, a.features);
  EXPECT_EQ(load_data("synthetic-gmm", SyntheticOptions{}).train.name, "synthetic-gmm");
  o.noise = 0;
  expect_input_error([&] { make_synthetic_gmm(o); }, {"synthetic-gmm", "noise"});
}

TEST(Project, SeededGaussianProjection) {
  SyntheticOptions o;
  o.samples = 100;
  o.features = 30;
  Dataset a = make_synthetic(o), b = make_synthetic(o);
  const std::vector<float> before = a.features;
  project_features(&a, 5, 7);
  project_features(&b, 5, 7);
  EXPECT_EQ(a.sample_shape, std::vector<int64_t>{5});
  EXPECT_EQ(a.features.size(), 500u);
  EXPECT_EQ(a.features, b.features);
  // Linear: the projection of the sum of two samples is the sum of theirs.
  Dataset sum;
  sum.sample_shape = {30};
  sum.num_classes = 2;
  sum.labels = {0};
  for (int j = 0; j < 30; ++j) sum.features.push_back(before[j] + before[30 + j]);
  project_features(&sum, 5, 7);
  for (int o2 = 0; o2 < 5; ++o2) {
    EXPECT_NEAR(sum.features[o2], a.features[o2] + a.features[5 + o2], 1e-4);
  }
  Dataset c = make_synthetic(o);
  project_features(&c, 5, 8);
  EXPECT_NE(c.features, a.features);
  expect_input_error([&] { project_features(&b, 0, 7); }, {"data.project"});
}

}  // namespace
}  // namespace hsgd
