// Row-sparse push and pull (server/sparse.h) against the dense path: the
// same parameters after the same pushes, for every policy; duplicates
// summed; ids checked; lazy optimizer state; checkpoint round trip.
#include "hsgd/server/sparse.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "hsgd/core/error.h"
#include "hsgd/core/rng.h"

namespace hsgd {
namespace {

constexpr int64_t kDense = 5, kRows = 12, kDim = 3;
constexpr size_t kAll = kDense + kRows * kDim;

PolicyOptions policy(const std::string& k, int K, Aggregation agg) {
  PolicyOptions p;
  p.kind = k;
  p.k = K;
  if (k == "ssp") p.s = 1;
  p.aggregation = agg;
  return p;
}

ServerOptions server_options(int workers, Aggregation agg, bool scaled) {
  ServerOptions so;
  so.workers = workers;
  so.lr = 0.05;
  so.aggregation = agg;
  so.samples_per_epoch = 100;
  so.staleness.scaled_lr = scaled;
  return so;
}

// One push: a dense gradient, and rows given as (id, row) pairs with
// repeats, as a batch that reads a row twice produces.
struct Push {
  int worker;
  std::vector<float> dense;
  std::vector<int64_t> ids;
  std::vector<float> rows;  // ids.size() x kDim
};

Push random_push(Rng& rng, int worker, bool all_rows) {
  Push p{worker, {}, {}, {}};
  for (int64_t i = 0; i < kDense; ++i) p.dense.push_back(static_cast<float>(rng.normal()));
  const int n = all_rows ? static_cast<int>(kRows) : 1 + static_cast<int>(rng.below(6));
  for (int k = 0; k < n; ++k) {
    p.ids.push_back(all_rows ? k : static_cast<int64_t>(rng.below(kRows)));
    for (int64_t c = 0; c < kDim; ++c) p.rows.push_back(static_cast<float>(rng.normal()));
  }
  if (!all_rows && n > 1) {  // a duplicate id
    p.ids.push_back(p.ids[0]);
    for (int64_t c = 0; c < kDim; ++c) p.rows.push_back(static_cast<float>(rng.normal()));
  }
  return p;
}

// The dense path: one Server over [dense | rows], the rows' gradient
// scattered (duplicates added in order) into a full-size gradient.
struct DenseRig {
  std::vector<float> params;
  std::unique_ptr<Server> server;
  DenseRig(const std::vector<float>& init, int workers, const PolicyOptions& po,
           const OptimizerOptions& oo, bool scaled)
      : params(init) {
    server = std::make_unique<Server>(params, server_options(workers, po.aggregation, scaled),
                                      make_policy(po, workers, oo.lr), make_optimizer(oo, kAll));
  }
  Decision push(const Push& p) {
    std::vector<float> g(kAll, 0.0f);
    std::copy(p.dense.begin(), p.dense.end(), g.begin());
    for (size_t k = 0; k < p.ids.size(); ++k) {
      for (int64_t c = 0; c < kDim; ++c) {
        g[static_cast<size_t>(kDense + p.ids[k] * kDim + c)] += p.rows[k * kDim + c];
      }
    }
    return server->on_push(p.worker, server->version(), g, 1, 0.5, 0.0);
  }
};

// The sparse path: a Server over the dense prefix, a RowTable over the rows.
struct SparseRig {
  std::vector<float> params;
  std::unique_ptr<Server> server;
  std::unique_ptr<RowTable> table;
  SparseRig(const std::vector<float>& init, int workers, const PolicyOptions& po,
            const OptimizerOptions& oo, bool scaled)
      : params(init) {
    const ServerOptions so = server_options(workers, po.aggregation, scaled);
    std::span<float> all(params);
    server = std::make_unique<Server>(all.first(kDense), so, make_policy(po, workers, oo.lr),
                                      make_optimizer(oo, kDense));
    table = std::make_unique<RowTable>(all.subspan(kDense), kDim, oo, po.aggregation, so.staleness);
    server->set_hook(table.get());
  }
  Decision push(const Push& p) {
    EXPECT_TRUE(table->stage(make_row_push(p.ids, p.rows, kDim, kRows)));
    return server->on_push(p.worker, server->version(), p.dense, 1, 0.5, 0.0);
  }
};

std::vector<float> initial() {
  Rng rng(7, 1);
  std::vector<float> v(kAll);
  for (float& x : v) x = static_cast<float>(rng.normal());
  return v;
}

// Drives both rigs with the same pushes: each round, every worker that is
// not waiting pulls and pushes; released workers go on.
void run_both(const PolicyOptions& po, const OptimizerOptions& oo, bool all_rows, bool scaled,
              std::vector<float>* dense_out, std::vector<float>* sparse_out) {
  const int workers = 3;
  const std::vector<float> init = initial();
  DenseRig d(init, workers, po, oo, scaled);
  SparseRig s(init, workers, po, oo, scaled);
  Rng rng(11, 2);
  for (int round = 0; round < 12; ++round) {
    for (int w = 0; w < workers; ++w) {
      if (d.server->is_waiting(w)) {
        ASSERT_TRUE(s.server->is_waiting(w));
        continue;
      }
      const Decision pd = d.server->on_pull(w), ps = s.server->on_pull(w);
      ASSERT_EQ(pd.caller_waits, ps.caller_waits);
      if (pd.caller_waits) continue;
      const Push p = random_push(rng, w, all_rows);
      const Decision a = d.push(p), b = s.push(p);
      ASSERT_EQ(a.applied, b.applied);
      ASSERT_EQ(a.version, b.version);
      ASSERT_EQ(a.released, b.released);
    }
  }
  *dense_out = d.params;
  *sparse_out = s.params;
}

TEST(Sparse, EqualsDenseForEveryPolicyWithSgdAndAdagrad) {
  for (const char* opt : {"sgd", "adagrad"}) {
    for (Aggregation agg : {Aggregation::kMean, Aggregation::kSum}) {
      for (const auto& [k, K] : std::vector<std::pair<std::string, int>>{{"sync", 0},
                                                                         {"async", 0},
                                                                         {"kasync", 2},
                                                                         {"kbatch", 2},
                                                                         {"hybrid", 0},
                                                                         {"ssp", 0}}) {
        for (bool scaled : {false, true}) {
          OptimizerOptions oo;
          oo.kind = opt;
          oo.lr = 0.05;
          std::vector<float> dense, sparse;
          run_both(policy(k, K, agg), oo, /*all_rows=*/false, scaled, &dense, &sparse);
          ASSERT_EQ(dense.size(), sparse.size());
          for (size_t i = 0; i < dense.size(); ++i) {
            ASSERT_EQ(dense[i], sparse[i]) << opt << " " << k << " agg " << static_cast<int>(agg)
                                           << " scaled " << scaled << " at " << i;
          }
        }
      }
    }
  }
}

TEST(Sparse, LazyMomentumAndAdamEqualDenseWhenEveryRowIsTouched) {
  for (const char* opt : {"momentum", "adam"}) {
    for (const char* k : {"sync", "async", "hybrid"}) {
      OptimizerOptions oo;
      oo.kind = opt;
      oo.lr = 0.05;
      std::vector<float> dense, sparse;
      run_both(policy(k, 0, Aggregation::kMean), oo, /*all_rows=*/true, false, &dense, &sparse);
      for (size_t i = 0; i < dense.size(); ++i) {
        ASSERT_NEAR(dense[i], sparse[i], 1e-6) << opt << " " << k << " at " << i;
      }
    }
  }
}

// Lazy Adam's bias corrections come from a table for step counts below
// 2^16 and from std::pow above: both the bits of the formula written out,
// for a row stepped past the table's end (another row, never stepped, keeps
// its count at 0) (#12).
TEST(Sparse, LazyAdamBiasCorrectionsAreTheFormulasBitsBeyondItsTable) {
  OptimizerOptions oo;
  oo.kind = "adam";
  oo.beta1 = 0.5;  // small enough that 1 - beta1^t still moves in float at small t
  oo.beta2 = 0.9999;
  RowOptimizer opt(oo, 2, 2);
  std::vector<float> table = {0.5f, -0.25f, 1.0f, 1.0f};
  float w[2] = {0.5f, -0.25f}, m[2] = {0, 0}, v[2] = {0, 0};
  const std::vector<int64_t> ids = {0};
  const float a = 1e-6f, eps = static_cast<float>(oo.eps);
  const float b1 = static_cast<float>(oo.beta1), b2 = static_cast<float>(oo.beta2);
  for (int64_t t = 1; t <= (int64_t{1} << 16) + 3; ++t) {
    const std::vector<float> g = {t % 3 == 0 ? -1.0f : 0.5f, 0.25f};
    opt.step(table, ids, g, 1e-6);
    const auto c1 = static_cast<float>(1.0 - std::pow(oo.beta1, static_cast<double>(t)));
    const auto c2 = static_cast<float>(1.0 - std::pow(oo.beta2, static_cast<double>(t)));
    for (int c = 0; c < 2; ++c) {
      volatile float gi = g[static_cast<size_t>(c)];  // one element at a time
      m[c] = b1 * m[c] + (1.0f - b1) * gi;
      v[c] = b2 * v[c] + (1.0f - b2) * gi * gi;
      w[c] -= a * (m[c] / c1) / (std::sqrt(v[c] / c2) + eps);
    }
    if (t <= 3 || t % 4096 == 0 || t >= (int64_t{1} << 16) - 1) {
      ASSERT_EQ(std::bit_cast<uint32_t>(table[0]), std::bit_cast<uint32_t>(w[0])) << "step " << t;
      ASSERT_EQ(std::bit_cast<uint32_t>(table[1]), std::bit_cast<uint32_t>(w[1])) << "step " << t;
    }
  }
  EXPECT_EQ(table[2], 1.0f);
  EXPECT_EQ(table[3], 1.0f);
}

TEST(Sparse, LazyMomentumLeavesUntouchedRowsAlone) {
  std::vector<float> table(4 * 2, 1.0f);
  OptimizerOptions oo;
  oo.kind = "momentum";
  oo.momentum = 0.9;
  RowTable t(table, 2, oo, Aggregation::kMean, {});
  ASSERT_TRUE(t.stage(make_row_push(std::vector<int64_t>{1}, std::vector<float>{1, 1}, 2, 4)));
  t.on_buffered(0, 0);
  t.on_apply(1, 0.1);
  EXPECT_FLOAT_EQ(table[2], 0.9f);
  // Row 3 next: row 1's velocity must not move it again (dense momentum would).
  ASSERT_TRUE(t.stage(make_row_push(std::vector<int64_t>{3}, std::vector<float>{1, 1}, 2, 4)));
  t.on_buffered(0, 0);
  t.on_apply(1, 0.1);
  EXPECT_FLOAT_EQ(table[2], 0.9f);
  EXPECT_FLOAT_EQ(table[6], 0.9f);
  EXPECT_FLOAT_EQ(table[0], 1.0f);
  EXPECT_EQ(t.row_updates(), 2);
}

TEST(Sparse, DuplicatesSummedIdsSortedRangeCheckedEmptyFine) {
  const std::vector<int64_t> ids = {5, 2, 5, 0};
  const std::vector<float> g = {1, 2, 10, 20, 100, 200, 7, 8};
  const RowPush p = make_row_push(ids, g, 2, 6);
  EXPECT_EQ(p.ids, (std::vector<int64_t>{0, 2, 5}));
  EXPECT_EQ(p.values, (std::vector<float>{7, 8, 10, 20, 101, 202}));
  EXPECT_EQ(p.bytes(), 3 * 8 + 6 * 4);
  try {
    make_row_push(std::vector<int64_t>{6}, std::vector<float>{0, 0}, 2, 6);
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "row push: id 6 outside [0, 6)");
  }
  EXPECT_THROW(make_row_push(std::vector<int64_t>{-1}, std::vector<float>{0, 0}, 2, 6), InputError);
  const RowPush empty = make_row_push({}, {}, 2, 6);
  EXPECT_TRUE(empty.ids.empty());
  // An empty push goes through a whole update.
  std::vector<float> table(12, 1.0f);
  RowTable t(table, 2, {}, Aggregation::kMean, {});
  EXPECT_TRUE(t.stage(empty));
  t.on_buffered(0, 0);
  t.on_apply(1, 0.1);
  EXPECT_EQ(table, std::vector<float>(12, 1.0f));
  std::vector<float> out(4);
  EXPECT_THROW(t.pull(std::vector<int64_t>{0, 6}, out), InputError);
  t.pull(std::vector<int64_t>{0, 5}, out);
  EXPECT_EQ(out, std::vector<float>(4, 1.0f));
}

TEST(Sparse, NonFiniteRowsAreRefusedAtStage) {
  std::vector<float> table(4, 0.0f);
  RowTable t(table, 2, {}, Aggregation::kMean, {});
  EXPECT_FALSE(t.stage(make_row_push(std::vector<int64_t>{1}, std::vector<float>{NAN, 0}, 2, 2)));
  t.on_buffered(0, 0);  // nothing staged: nothing buffered
  t.on_apply(1, 0.1);
  EXPECT_EQ(table, std::vector<float>(4, 0.0f));
}

TEST(Sparse, UnsupportedOptionsAreInputErrors) {
  OptimizerOptions oo;
  oo.kind = "nesterov";
  EXPECT_THROW(check_sparse_supported(oo, {}), InputError);
  MitigationOptions m;
  m.dc_asgd = true;
  EXPECT_THROW(check_sparse_supported({}, m), InputError);
  MitigationOptions corrected;
  corrected.momentum_correction = true;
  EXPECT_THROW(check_sparse_supported({}, corrected), InputError);
}

TEST(Sparse, CheckpointHoldsRowsStateAndBuffer) {
  const PolicyOptions po = policy("sync", 0, Aggregation::kMean);
  OptimizerOptions oo;
  oo.kind = "adam";
  oo.lr = 0.05;
  const std::vector<float> init = initial();
  SparseRig a(init, 3, po, oo, false);
  Rng rng(3, 3);
  a.push(random_push(rng, 0, false));
  a.push(random_push(rng, 1, false));
  a.push(random_push(rng, 2, false));  // applied
  a.push(random_push(rng, 0, false));  // buffered
  StateWriter w;
  a.server->save(w);
  SparseRig b(std::vector<float>(kAll, 0.0f), 3, po, oo, false);
  StateReader r(w.bytes(), "test");
  b.server->load(r);
  r.expect_end();
  EXPECT_EQ(a.params, b.params);
  Rng r1(5, 5), r2(5, 5);
  for (int w2 : {1, 2}) {
    a.push(random_push(r1, w2, false));
    b.push(random_push(r2, w2, false));
  }
  EXPECT_EQ(a.params, b.params);
  EXPECT_EQ(a.table->row_updates(), b.table->row_updates());
}

// Per-row staleness: a pushed row's version now minus its version at the
// pusher's pull; rows nobody else moved in between count 0. Saved and
// restored with the table.
TEST(Sparse, PerRowStalenessCountsTheUpdatesThatMovedTheRow) {
  std::vector<float> table(6 * 2, 1.0f);
  RowTable t(table, 2, {}, Aggregation::kSum, {});
  std::vector<float> out(3 * 2);
  const std::vector<int64_t> rows0 = {0, 2, 4}, rows1 = {2, 5};
  t.pull(0, rows0, out);
  t.pull(1, std::span<const int64_t>(rows1), std::span<float>(out).first(4));
  const auto push = [&](int w, const std::vector<int64_t>& ids) {
    ASSERT_TRUE(t.stage(make_row_push(ids, std::vector<float>(ids.size() * 2, 1.0f), 2, 6)));
    t.on_buffered(w, 0);
    t.on_apply(1, 0.1);
  };
  push(1, rows1);  // rows 2 and 5 pulled at version 0, nothing moved them: 0, 0
  EXPECT_EQ(t.stats().staleness_count, 2);
  EXPECT_EQ(t.stats().staleness_max, 0);
  t.pull(1, std::span<const int64_t>(rows1), std::span<float>(out).first(4));
  push(1, rows1);  // rows 2 and 5 again, pulled after the first update: 0, 0
  push(0, rows0);  // row 2 moved twice since worker 0's pull; rows 0 and 4 never
  const RowStats& st = t.stats();
  EXPECT_EQ(st.staleness_count, 7);
  EXPECT_EQ(st.staleness_max, 2);
  EXPECT_DOUBLE_EQ(st.staleness_sum, 2.0);
  EXPECT_EQ(st.pulls, 3);
  EXPECT_EQ(st.pulled_rows, 7);
  EXPECT_EQ(st.pushes, 3);
  EXPECT_EQ(st.pushed_rows, 7);
  EXPECT_EQ(st.row_updates, 7);
  // A row the pusher did not pull (no pull recorded) is not counted.
  push(3, {1});
  EXPECT_EQ(t.stats().staleness_count, 7);
  // Save and load: the versions and the pulls carry over.
  StateWriter w;
  t.save(w);
  std::vector<float> table2(12, 0.0f);
  RowTable t2(table2, 2, {}, Aggregation::kSum, {});
  StateReader r(w.bytes(), "test");
  t2.load(r);
  r.expect_end();
  EXPECT_EQ(table, table2);
  EXPECT_EQ(t2.stats().staleness_count, 7);
  EXPECT_EQ(t2.state_bytes(), 6 * 2 * 4 + 6 * 8);
  ASSERT_TRUE(t2.stage(make_row_push(rows1, std::vector<float>(4, 1.0f), 2, 6)));
  t2.on_buffered(1, 0);  // worker 1 pulled rows 2, 5 after update 1; row 2 moved twice since
  EXPECT_EQ(t2.stats().staleness_max, 2);
  EXPECT_EQ(t2.stats().staleness_count, 9);
}

}  // namespace
}  // namespace hsgd
