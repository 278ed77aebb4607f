// Tests for hsgd/data/partition: coverage, determinism, the skew each kind
// gives, re-splitting over a different number of live workers, and the
// one-line errors for settings that cannot be met.
#include "hsgd/data/partition.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <initializer_list>
#include <string>
#include <tuple>
#include <vector>

#include "hsgd/core/error.h"
#include "test_helpers.h"

namespace hsgd {
namespace {

using testing_helpers::expect_input_error;

// n samples, sample i has feature i and label i % classes.
Dataset labelled(int64_t n, int classes) {
  Dataset d;
  d.name = "labelled";
  d.sample_shape = {1};
  d.num_classes = classes;
  for (int64_t i = 0; i < n; ++i) {
    d.features.push_back(static_cast<float>(i));
    d.labels.push_back(static_cast<int32_t>(i % classes));
  }
  return d;
}

PartitionOptions opts(const std::string& kind, double alpha = 0.5, int classes = 2,
                      double global = 0) {
  PartitionOptions o;
  o.kind = kind;
  o.alpha = alpha;
  o.classes_per_worker = classes;
  o.global_fraction = global;
  return o;
}

// Fraction of a worker's shard in its most frequent class, averaged.
double mean_top_class_share(const PartitionStats& s) {
  double sum = 0;
  for (size_t w = 0; w < s.histograms.size(); ++w) {
    const auto& h = s.histograms[w];
    sum += static_cast<double>(*std::max_element(h.begin(), h.end())) /
           static_cast<double>(s.shard_sizes[w]);
  }
  return sum / static_cast<double>(s.histograms.size());
}

class PartitionCoverage : public ::testing::TestWithParam<std::tuple<std::string, double, int>> {};

TEST_P(PartitionCoverage, EverySampleInExactlyOneShardOrThePool) {
  const auto [kind, global, workers] = GetParam();
  const Dataset d = labelled(2000, 10);
  const Partition p = make_partition(d, opts(kind, 0.3, 3, global), 5, workers);
  ASSERT_EQ(static_cast<int>(p.shards.size()), workers);
  EXPECT_EQ(static_cast<double>(p.global_pool.size()), std::round(global * 2000));
  std::vector<int> count(2000, 0);
  for (const auto& s : p.shards) {
    EXPECT_FALSE(s.empty());
    for (int64_t i : s) ++count[static_cast<size_t>(i)];
  }
  for (int64_t i : p.global_pool) ++count[static_cast<size_t>(i)];
  for (int64_t i = 0; i < 2000; ++i) ASSERT_EQ(count[static_cast<size_t>(i)], 1) << "sample " << i;
}

INSTANTIATE_TEST_SUITE_P(
    Kinds, PartitionCoverage,
    ::testing::Combine(::testing::Values("iid", "dirichlet", "shards", "quantity"),
                       ::testing::Values(0.0, 0.05, 0.2), ::testing::Values(4, 16)),
    [](const auto& info) {
      return std::get<0>(info.param) + "_g" +
             std::to_string(static_cast<int>(100 * std::get<1>(info.param))) + "_w" +
             std::to_string(std::get<2>(info.param));
    });

TEST(Partition, OneWorkerHoldsEverything) {
  const Dataset d = labelled(100, 10);
  for (const char* kind : {"iid", "dirichlet", "quantity"}) {
    const Partition p = make_partition(d, opts(kind), 1, 1);
    ASSERT_EQ(p.shards.size(), 1u);
    EXPECT_EQ(p.shards[0].size(), 100u) << kind;
  }
  const Partition p = make_partition(d, opts("shards", 0.5, 10), 1, 1);
  EXPECT_EQ(p.shards[0].size(), 100u);
}

TEST(Partition, SameSeedSamePartitionOtherSeedOther) {
  const Dataset d = labelled(3000, 10);
  for (const char* kind : {"iid", "dirichlet", "shards", "quantity"}) {
    const Partition a = make_partition(d, opts(kind, 0.2, 2, 0.1), 7, 8);
    const Partition b = make_partition(d, opts(kind, 0.2, 2, 0.1), 7, 8);
    const Partition c = make_partition(d, opts(kind, 0.2, 2, 0.1), 8, 8);
    EXPECT_EQ(a.shards, b.shards) << kind;
    EXPECT_EQ(a.global_pool, b.global_pool) << kind;
    EXPECT_NE(a.shards, c.shards) << kind;
  }
}

TEST(Partition, IidIsTheHistoricalContiguousSplit) {
  // iid with no pool: equal sizes, labels close to the global mix.
  const Dataset d = labelled(1600, 10);
  const Partition p = make_partition(d, opts("iid"), 3, 16);
  for (const auto& s : p.shards) EXPECT_EQ(s.size(), 100u);
  EXPECT_LT(partition_stats(d, p).skew_tv, 0.15);
}

TEST(Partition, DirichletLargeAlphaNearIidSmallAlphaNearOneClass) {
  const Dataset d = labelled(8000, 10);
  const PartitionStats iid = partition_stats(d, make_partition(d, opts("dirichlet", 100), 1, 16));
  const PartitionStats skew = partition_stats(d, make_partition(d, opts("dirichlet", 0.05), 1, 16));
  EXPECT_LT(iid.skew_tv, 0.1);
  EXPECT_LT(mean_top_class_share(iid), 0.2);
  EXPECT_GT(skew.skew_tv, 0.7);
  EXPECT_GT(mean_top_class_share(skew), 0.7);
  for (int64_t size : skew.shard_sizes) EXPECT_GE(size, 10);
}

TEST(Partition, ShardsGiveExactlyCClassesPerWorker) {
  const Dataset d = labelled(4000, 10);
  for (int c : {1, 2, 3, 10}) {
    for (int workers : {10, 16}) {
      const PartitionStats s =
          partition_stats(d, make_partition(d, opts("shards", 0.5, c), 2, workers));
      for (const auto& h : s.histograms) {
        EXPECT_EQ(std::count_if(h.begin(), h.end(), [](int64_t x) { return x > 0; }), c)
            << c << " classes per worker, " << workers << " workers";
      }
      if (c == 1) {
        EXPECT_NEAR(s.skew_tv, 0.9, 1e-9);
      }
      if (c == 10) {
        EXPECT_NEAR(s.skew_tv, 0.0, 0.01);
      }
    }
  }
}

TEST(Partition, QuantitySkewsSizesNotLabels) {
  const Dataset d = labelled(8000, 10);
  const PartitionStats s = partition_stats(d, make_partition(d, opts("quantity", 0.3), 4, 16));
  const auto [lo, hi] = std::minmax_element(s.shard_sizes.begin(), s.shard_sizes.end());
  EXPECT_GT(*hi, 4 * *lo);  // very unequal sizes
  for (int64_t size : s.shard_sizes) EXPECT_GE(size, 10);
  // Labels stay IID: the big shards are near the global mix.
  for (size_t w = 0; w < s.histograms.size(); ++w) {
    if (s.shard_sizes[w] < 500) continue;
    for (int64_t c : s.histograms[w]) {
      EXPECT_NEAR(static_cast<double>(c) / static_cast<double>(s.shard_sizes[w]), 0.1, 0.05);
    }
  }
}

TEST(Partition, GlobalPoolLowersTheEffectiveSkew) {
  const Dataset d = labelled(8000, 10);
  const PartitionStats s =
      partition_stats(d, make_partition(d, opts("shards", 0.5, 1, 0.2), 3, 10));
  EXPECT_EQ(s.global_pool_size, 1600);
  EXPECT_GT(s.skew_tv, 0.85);
  EXPECT_LT(s.effective_skew_tv, 0.75);
}

TEST(Partition, ResplitOverFewerLiveWorkersKeepsTheCharacter) {
  // The partition is a function of the live-worker count: after a worker
  // leaves, the re-split of all the data over the others is as skewed.
  const Dataset d = labelled(8000, 10);
  for (int live : {16, 15, 12}) {
    const Partition p = make_partition(d, opts("dirichlet", 0.1, 2, 0.05), 9, live);
    const PartitionStats s = partition_stats(d, p);
    EXPECT_EQ(static_cast<int>(s.shard_sizes.size()), live);
    EXPECT_GT(s.skew_tv, 0.5) << live << " live workers";
    const Partition q = make_partition(d, opts("shards", 0.5, 2), 9, live);
    for (const auto& h : partition_stats(d, q).histograms) {
      EXPECT_EQ(std::count_if(h.begin(), h.end(), [](int64_t x) { return x > 0; }), 2);
    }
    // The pool does not depend on the worker count.
    EXPECT_EQ(p.global_pool, make_partition(d, opts("dirichlet", 0.1, 2, 0.05), 9, 16).global_pool);
  }
}

TEST(Partition, ImpossibleSettingsNameTheKeys) {
  const Dataset d = labelled(200, 10);
  expect_input_error([&] { make_partition(d, opts("shards", 0.5, 2), 1, 4); },
                     {"data.classes_per_worker = 2", "4 workers", "cover only 8 of the 10"});
  expect_input_error([&] { make_partition(d, opts("shards", 0.5, 11), 1, 4); },
                     {"data.classes_per_worker = 11", "only 10 classes"});
  expect_input_error([&] { make_partition(labelled(20, 10), opts("shards", 0.5, 3), 1, 10); },
                     {"data.partition = 'shards'", "class"});
  PartitionOptions o = opts("dirichlet", 0.5);
  o.min_partition_size = 20;
  expect_input_error([&] { make_partition(d, o, 1, 16); },
                     {"data.min_partition_size = 20", "16 workers"});
  o.min_partition_size = 12;
  o.alpha = 0.001;
  expect_input_error([&] { make_partition(d, o, 1, 16); },
                     {"data.alpha = 0.001", "data.min_partition_size = 12", "no draw in 1000"});
  o.kind = "quantity";
  expect_input_error([&] { make_partition(d, o, 1, 16); },
                     {"data.partition = 'quantity'", "data.alpha", "no draw in 1000"});
  expect_input_error(
      [&] { make_partition(d, opts("iid", 0.5, 2, 0.5), 1, 101); },
      {"100 samples outside the global pool", "data.global_fraction = 0.5", "101 workers"});
}

TEST(Partition, ValidateNamesTheKey) {
  expect_input_error([] { validate(opts("label")); }, {"data.partition = 'label'", "dirichlet"});
  expect_input_error([] { validate(opts("dirichlet", 0)); }, {"data.alpha = 0"});
  expect_input_error([] { validate(opts("iid", 1, 0)); }, {"data.classes_per_worker = 0"});
  expect_input_error([] { validate(opts("iid", 1, 2, 1.0)); }, {"data.global_fraction = 1"});
  PartitionOptions o;
  o.min_partition_size = 0;
  expect_input_error([&] { validate(o); }, {"data.min_partition_size = 0"});
}

}  // namespace
}  // namespace hsgd
