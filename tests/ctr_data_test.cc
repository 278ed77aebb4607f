// Click-through data: synthetic-ctr, the Criteo TSV reader, the AUC, and the
// categorical ids carried through gather and the train/test split.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "hsgd/core/error.h"
#include "hsgd/data/ctr.h"
#include "hsgd/data/spec.h"

namespace hsgd {
namespace {

std::string write_tmp(const std::string& name, const std::string& text) {
  const auto p = std::filesystem::path(::testing::TempDir()) /
                 ("hsgd_ctr_" + std::to_string(::getpid()) + "_" + name);
  std::ofstream(p) << text;
  return p.string();
}

// One Criteo line: label, 13 integers, 26 categorical (empty = missing).
std::string criteo_line(int label, const std::string& ints_fill, const std::string& cat_fill) {
  std::string s = std::to_string(label);
  for (int k = 0; k < 13; ++k) s += "\t" + ints_fill;
  for (int j = 0; j < 26; ++j) s += "\t" + cat_fill;
  return s + "\n";
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(CtrData, AucOfKnownOrders) {
  const float s[] = {0.1f, 0.4f, 0.35f, 0.8f};
  const int32_t y[] = {0, 0, 1, 1};
  EXPECT_DOUBLE_EQ(binary_auc(s, y, 4), 0.75);
  const float t[] = {1, 1, 1, 1};
  EXPECT_DOUBLE_EQ(binary_auc(t, y, 4), 0.5);  // all tied
  const int32_t one_class[] = {1, 1, 1, 1};
  EXPECT_TRUE(std::isnan(binary_auc(s, one_class, 4)));
}

TEST(CtrData, SyntheticIsSeededZipfAndPlanted) {
  CtrOptions o;
  o.samples = 4000;
  o.rows = 100;
  o.fields = 3;
  o.dense = 5;
  o.zipf = 1.2;
  const Dataset a = make_synthetic_ctr(o), b = make_synthetic_ctr(o);
  EXPECT_EQ(a.features, b.features);
  EXPECT_EQ(a.categorical, b.categorical);
  EXPECT_EQ(a.labels, b.labels);
  ASSERT_EQ(a.size(), 4000);
  EXPECT_EQ(a.sample_shape, std::vector<int64_t>{5});
  EXPECT_EQ(a.categorical_rows, (std::vector<int64_t>{100, 100, 100}));
  ASSERT_EQ(a.categorical.size(), 4000u * 3);
  std::vector<int64_t> count(100, 0);
  for (int32_t id : a.categorical) {
    ASSERT_GE(id, 0);
    ASSERT_LT(id, 100);
    ++count[static_cast<size_t>(id)];
  }
  // Zipf: id 0 is the hottest, far more frequent than id 50.
  EXPECT_GT(count[0], 10 * std::max<int64_t>(count[50], 1));
  int64_t positives = 0;
  for (int32_t l : a.labels) positives += l;
  EXPECT_NEAR(static_cast<double>(positives) / 4000, 0.25, 0.05);
  EXPECT_GT(a.planted_auc, 0.7);
  EXPECT_LT(a.planted_auc, 1.0);
  o.seed = 2;
  EXPECT_NE(make_synthetic_ctr(o).categorical, a.categorical);
  o.zipf = -1;
  EXPECT_NE(message_of([&] { make_synthetic_ctr(o); }).find("data.zipf"), std::string::npos);
}

TEST(CtrData, SplitAndGatherCarryTheIds) {
  CtrOptions o;
  o.samples = 50;
  o.fields = 2;
  o.rows = 7;
  Dataset all = make_synthetic_ctr(o);
  const Dataset copy = all;
  Dataset train, test;
  split_train_test(std::move(all), 0.2, 1, &train, &test);
  EXPECT_EQ(train.categorical.size(), 40u * 2);
  EXPECT_EQ(test.categorical.size(), 10u * 2);
  EXPECT_EQ(train.categorical_rows, copy.categorical_rows);
  Batch b;
  const int64_t idx[] = {3, 0};
  gather(copy, idx, &b);
  EXPECT_EQ(b.categorical, (std::vector<int32_t>{copy.categorical[6], copy.categorical[7],
                                                 copy.categorical[0], copy.categorical[1]}));
}

TEST(CtrData, CriteoReadsMissingValuesAndHashesIds) {
  std::string text = criteo_line(1, "3", "68fd1e64");
  text += criteo_line(0, "", "");            // everything missing
  text += criteo_line(0, "-2", "68FD1E64");  // negative integer; hex case-insensitive
  text += "\n";                              // a trailing blank line
  const std::string path = write_tmp("ok.tsv", text);
  const Dataset d = read_criteo(path, 1000);
  ASSERT_EQ(d.size(), 3);
  EXPECT_EQ(d.labels, (std::vector<int32_t>{1, 0, 0}));
  EXPECT_EQ(d.sample_shape, std::vector<int64_t>{13});
  EXPECT_EQ(d.categorical_rows, std::vector<int64_t>(26, 1000));
  EXPECT_FLOAT_EQ(d.features[0], std::log1p(3.0f));
  EXPECT_FLOAT_EQ(d.features[13], 0.0f);
  EXPECT_FLOAT_EQ(d.features[26], 0.0f);  // log(1 + max(-2, 0))
  for (int j = 0; j < 26; ++j) {
    const int32_t id = d.categorical[static_cast<size_t>(j)];
    EXPECT_GE(id, 1);
    EXPECT_LT(id, 1000);
    EXPECT_EQ(d.categorical[static_cast<size_t>(26 + j)], 0);  // missing -> row 0
    EXPECT_EQ(d.categorical[static_cast<size_t>(52 + j)], id);
  }
  // The same value in different fields lands in (generally) different rows.
  EXPECT_NE(d.categorical[0], d.categorical[1]);
  // Through the data spec.
  SyntheticOptions so;
  so.ctr.rows = 1000;
  EXPECT_EQ(load_data("criteo:" + path, so).train.categorical, d.categorical);
}

TEST(CtrData, CriteoErrorsNameFileAndLine) {
  std::string short_line = "1";
  for (int k = 0; k < 30; ++k) short_line += "\t1";
  const std::string bad_count =
      write_tmp("count.tsv", criteo_line(1, "1", "a") + short_line + "\n");
  EXPECT_EQ(message_of([&] { read_criteo(bad_count, 100); }),
            bad_count +
                ":line 2: expected 40 tab-separated fields (label, 13 integers, 26 categorical), "
                "got 31");
  const std::string bad_label = write_tmp("label.tsv", criteo_line(2, "1", "a"));
  EXPECT_EQ(message_of([&] { read_criteo(bad_label, 100); }),
            bad_label + ":line 1 field 1: expected a label 0 or 1, got '2'");
  const std::string bad_hex = write_tmp("hex.tsv", criteo_line(1, "1", "xyz"));
  EXPECT_NE(message_of([&] { read_criteo(bad_hex, 100); }).find(":line 1 field 15: expected a hex"),
            std::string::npos);
  const std::string bad_int = write_tmp("int.tsv", criteo_line(1, "1.5", "a"));
  EXPECT_NE(
      message_of([&] { read_criteo(bad_int, 100); }).find(":line 1 field 2: expected an integer"),
      std::string::npos);
  EXPECT_NE(message_of([&] { read_criteo(bad_int, 1); }).find("model.table_rows"),
            std::string::npos);
}

}  // namespace
}  // namespace hsgd
