#include "hsgd/model/linear_model.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "alloc_probe.h"
#include "hsgd/core/error.h"
#include "hsgd/core/rng.h"
#include "hsgd/model/model.h"

namespace hsgd {
namespace {

// Two Gaussian blobs per class around distinct centres: linearly separable.
Batch toy_batch(int64_t n, int64_t features, int classes, uint64_t seed) {
  Rng rng(seed, 1);
  Batch b;
  for (int64_t i = 0; i < n; ++i) {
    const int y = static_cast<int>(i % classes);
    b.labels.push_back(y);
    for (int64_t f = 0; f < features; ++f) {
      const double centre = (f % classes == y) ? 2.0 : -1.0;
      b.features.push_back(static_cast<float>(centre + 0.3 * rng.normal()));
    }
  }
  return b;
}

Dataset as_dataset(const Batch& b, int64_t features, int classes) {
  Dataset d;
  d.name = "toy";
  d.sample_shape = {features};
  d.num_classes = classes;
  d.features = b.features;
  d.labels = b.labels;
  return d;
}

TEST(LinearModel, NumParamsAndLayout) {
  auto m = make_linear_model(7, 3);
  EXPECT_EQ(m->num_params(), 3 * 7 + 3);
  EXPECT_THROW(make_linear_model(0, 3), InputError);
}

TEST(LinearModel, InitIsDeterministicAndBiasZero) {
  auto m = make_linear_model(5, 4);
  std::vector<float> p1(m->num_params()), p2(m->num_params()), g(m->num_params());
  m->bind(p1, g);
  m->init_params(42);
  m->bind(p2, g);
  m->init_params(42);
  EXPECT_EQ(p1, p2);
  for (int c = 0; c < 4; ++c) EXPECT_EQ(p1[20 + c], 0.0f);
  m->init_params(43);
  EXPECT_NE(p1, p2);
}

TEST(LinearModel, GradientMatchesFiniteDifferences) {
  const int64_t F = 6;
  const int C = 3;
  auto m = make_linear_model(F, C);
  std::vector<float> p(m->num_params()), g(m->num_params()), scratch(m->num_params());
  m->bind(p, g);
  m->init_params(7);
  // Larger weights so that probabilities are far from uniform.
  for (auto& v : p) v *= 30.0f;
  p[F * C + 1] = 0.4f;
  Batch b = toy_batch(10, F, C, 3);
  m->gradient(b);
  const std::vector<float> analytic = g;
  const float eps = 1e-2f;
  for (int64_t i = 0; i < m->num_params(); ++i) {
    const float saved = p[i];
    p[i] = saved + eps;
    const double up = m->gradient(b);
    p[i] = saved - eps;
    const double down = m->gradient(b);
    p[i] = saved;
    const double numeric = (up - down) / (2.0 * eps);
    EXPECT_NEAR(analytic[i], numeric, 1e-3 + 1e-2 * std::abs(numeric)) << "param " << i;
  }
}

TEST(LinearModel, GradientOverwrites) {
  auto m = make_linear_model(4, 2);
  std::vector<float> p(m->num_params()), g(m->num_params(), 123.0f);
  m->bind(p, g);
  m->init_params(1);
  Batch b = toy_batch(8, 4, 2, 5);
  const double l1 = m->gradient(b);
  const std::vector<float> g1 = g;
  const double l2 = m->gradient(b);
  EXPECT_EQ(l1, l2);
  EXPECT_EQ(g1, g);
}

TEST(LinearModel, SgdReducesLossAndLearnsSeparableSet) {
  const int64_t F = 8;
  const int C = 4;
  auto m = make_linear_model(F, C);
  std::vector<float> p(m->num_params()), g(m->num_params());
  m->bind(p, g);
  m->init_params(11);
  Batch b = toy_batch(64, F, C, 9);
  const Dataset d = as_dataset(b, F, C);
  const EvalResult before = m->evaluate(d);
  EXPECT_NEAR(before.loss, std::log(4.0), 0.2);
  double last = 1e9;
  for (int step = 0; step < 50; ++step) {
    const double loss = m->gradient(b);
    if (step > 0) {
      EXPECT_LT(loss, last);
    }
    last = loss;
    for (size_t i = 0; i < p.size(); ++i) p[i] -= 0.1f * g[i];
  }
  const EvalResult after = m->evaluate(d);
  EXPECT_LT(after.loss, 0.5 * before.loss);
  EXPECT_EQ(after.accuracy, 1.0);
}

TEST(LinearModel, BadInputIsInputError) {
  auto m = make_linear_model(4, 2);
  std::vector<float> p(m->num_params()), g(m->num_params());
  m->bind(p, g);
  Batch b = toy_batch(3, 4, 2, 1);
  b.features.pop_back();
  EXPECT_THROW(m->gradient(b), InputError);
  b = toy_batch(3, 4, 2, 1);
  b.labels[1] = 2;
  EXPECT_THROW(m->gradient(b), InputError);
  Dataset d = as_dataset(toy_batch(3, 4, 2, 1), 4, 2);
  d.sample_shape = {5};
  EXPECT_THROW(m->evaluate(d), InputError);
}

// ---- model files

class ModelFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("hsgd_model_file_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    path_ = (dir_ / "m.hsgd").string();
    spec_.name = "mlp";
    spec_.sample_shape = {1, 28, 28};
    spec_.num_classes = 10;
    spec_.hidden = {64, 32};
    Rng rng(3, 0);
    // As many as the real model (784*64+64 + 64*32+32 + 32*10+10): the
    // header's layers are checked against the parameter count.
    for (int i = 0; i < 52650; ++i) params_.push_back(static_cast<float>(rng.normal()));
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string read_all() const {
    std::ifstream in(path_, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }
  void write_all(const std::string& s) const {
    std::ofstream out(path_, std::ios::binary | std::ios::trunc);
    out << s;
  }
  // Expects load_model to throw an InputError whose single line names the
  // file and contains `fragment`.
  void expect_load_error(const std::string& fragment) const {
    ModelSpec s;
    std::vector<float> p;
    try {
      load_model(path_, &s, &p);
      FAIL() << "no error, expected " << fragment;
    } catch (const InputError& e) {
      const std::string what = e.what();
      EXPECT_EQ(what.rfind(path_ + ": ", 0), 0u) << what;
      EXPECT_NE(what.find(fragment), std::string::npos) << what;
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    }
  }

  std::filesystem::path dir_;
  std::string path_;
  ModelSpec spec_;
  std::vector<float> params_;
};

TEST_F(ModelFileTest, RoundTrip) {
  save_model(path_, spec_, params_);
  EXPECT_FALSE(std::filesystem::exists(path_ + ".partial"));
  ModelSpec s;
  std::vector<float> p;
  load_model(path_, &s, &p);
  EXPECT_EQ(s.name, spec_.name);
  EXPECT_EQ(s.sample_shape, spec_.sample_shape);
  EXPECT_EQ(s.num_classes, spec_.num_classes);
  EXPECT_EQ(s.hidden, spec_.hidden);
  EXPECT_EQ(p, params_);
}

TEST_F(ModelFileTest, NoParametersIsInputError) {
  // No model has zero parameters: the header's layers cannot fit.
  save_model(path_, spec_, {});
  expect_load_error(
      "bad header: a mlp model with input {1,28,28}, hidden {64,32} and 10 classes "
      "cannot have only 0 parameters");
}

TEST_F(ModelFileTest, LayoutIsAsDocumented) {
  save_model(path_, spec_, params_);
  const std::string bytes = read_all();
  EXPECT_EQ(bytes.substr(0, 11), "HSGDMODEL1\n");
  uint32_t header_len = 0;
  for (int i = 0; i < 4; ++i) header_len |= uint32_t(uint8_t(bytes[11 + i])) << (8 * i);
  EXPECT_EQ(bytes.size(), 11 + 4 + header_len + params_.size() * 4 + 4);
  EXPECT_EQ(bytes[15], '{');
}

TEST_F(ModelFileTest, TruncatedFileIsInputError) {
  save_model(path_, spec_, params_);
  const std::string full = read_all();
  for (size_t keep :
       {size_t{0}, size_t{5}, size_t{13}, size_t{30}, full.size() - 100, full.size() - 1}) {
    write_all(full.substr(0, keep));
    SCOPED_TRACE(keep);
    expect_load_error("offset " + std::to_string(keep) + ": expected ");
  }
  write_all(full.substr(0, full.size() - 10));
  expect_load_error("expected 10 more bytes");
}

TEST_F(ModelFileTest, CorruptFileIsInputError) {
  save_model(path_, spec_, params_);
  std::string bytes = read_all();
  bytes[bytes.size() - 100] ^= 0x01;
  write_all(bytes);
  expect_load_error("checksum mismatch: file is corrupt");
}

TEST_F(ModelFileTest, BadMagicHeaderAndTrailingBytes) {
  save_model(path_, spec_, params_);
  const std::string good = read_all();
  std::string bytes = good;
  bytes[0] = 'X';
  write_all(bytes);
  expect_load_error("offset 0: not an hsgd model file");
  bytes = good;
  bytes[15] = '[';
  write_all(bytes);
  expect_load_error("offset 15: bad header");
  write_all(good + "junk");
  expect_load_error("unexpected bytes");
  std::filesystem::remove(path_);
  expect_load_error("cannot open");
}

// Header lies: a few hundred bytes claiming a huge model fail before any
// allocation of that size, and no spec that could make make_model build a
// model larger than the file gets through.
TEST_F(ModelFileTest, HeaderLiesFailBeforeAllocating) {
  auto file = [](const std::string& header, size_t floats) {
    std::string b = "HSGDMODEL1\n";
    for (int i = 0; i < 4; ++i) b.push_back(static_cast<char>((header.size() >> (8 * i)) & 0xff));
    return b + header + std::string(floats * 4 + 4, '\0');
  };
  constexpr size_t kSmall = 1 << 20;
  // header_len claims 4 GB.
  write_all(std::string("HSGDMODEL1\n\xff\xff\xff\xff{}", 17));
  EXPECT_LT(test::largest_allocation([&] { expect_load_error("more bytes"); }), kSmall);
  // num_params claims 2^39 floats (2 TB).
  write_all(file(R"({"name":"softmax","sample_shape":[4],"num_classes":3,"hidden":[],)"
                 R"("num_params":549755813888})",
                 15));
  EXPECT_LT(test::largest_allocation([&] { expect_load_error("more bytes"); }), kSmall);
  // An mlp claiming two hidden layers of 2^30 in a 23-parameter file.
  write_all(file(R"({"name":"mlp","sample_shape":[2,2],"num_classes":2,)"
                 R"("hidden":[1073741824,1073741824],"num_params":23})",
                 23));
  EXPECT_LT(test::largest_allocation([&] { expect_load_error("cannot have only 23 parameters"); }),
            kSmall);
  // Numbers that are not integers in range.
  write_all(file(R"({"name":"softmax","sample_shape":[4],"num_classes":1e300,"hidden":[],)"
                 R"("num_params":15})",
                 15));
  expect_load_error("bad header: num_classes = 1e+300: expected an integer in [1, 2147483647]");
  // 0 classes (found by the model fuzz target: nlohmann stores 0 as unsigned).
  write_all(file(R"({"name":"softmax","sample_shape":[4],"num_classes":0,"hidden":[],)"
                 R"("num_params":15})",
                 15));
  expect_load_error("bad header: num_classes = 0: expected an integer in [1, 2147483647]");
  write_all(file(R"({"name":"softmax","sample_shape":[-4],"num_classes":3,"hidden":[],)"
                 R"("num_params":15})",
                 15));
  expect_load_error("sample_shape {-4}: expected dimensions >= 1");
}

TEST_F(ModelFileTest, DirectoryIsInputError) {
  path_ = dir_.string();
  expect_load_error("expected a model file, got a directory");
}

TEST_F(ModelFileTest, SaveIntoMissingDirectoryIsInputError) {
  EXPECT_THROW(save_model((dir_ / "no" / "such" / "m").string(), spec_, params_), InputError);
}

}  // namespace
}  // namespace hsgd
