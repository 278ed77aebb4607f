// The dlrm model: its row-sparse gradient equals its dense one, a finite
// difference check, binary metrics; and end to end through the CLI:
// synthetic-ctr and criteo:FILE on threads (dense and model.sparse) and sim,
// bad input exits 2 with one line.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "cli_helpers.h"
#include "hsgd/core/error.h"
#include "hsgd/data/ctr.h"
#include "hsgd/model/model.h"

namespace hsgd {
namespace {

struct Rig {
  Dataset d;
  ModelSpec spec;
  std::unique_ptr<Model> m;
  std::vector<float> p, g;
  Rig() {
    CtrOptions o;
    o.samples = 300;
    o.dense = 4;
    o.fields = 3;
    o.rows = 20;
    d = make_synthetic_ctr(o);
    spec.name = "dlrm";
    spec.sample_shape = d.sample_shape;
    spec.num_classes = 2;
    spec.table_rows = d.categorical_rows;
    spec.embedding_dim = 4;
    spec.hidden = {8};
    spec.top_hidden = {8};
    m = make_model(spec);
    p.resize(static_cast<size_t>(m->num_params()));
    g.resize(p.size());
    m->bind(p, g);
    m->init_params(3);
  }
};

TEST(Dlrm, LayoutAndSparseGradientEqualsDense) {
  Rig r;
  const RowLayout l = r.m->row_layout();
  EXPECT_EQ(l.rows, 60);
  EXPECT_EQ(l.dim, 4);
  EXPECT_EQ(l.table_offset, (std::vector<int64_t>{0, 20, 40}));
  EXPECT_EQ(l.dense + l.rows * l.dim, r.m->num_params());
  ShardSampler s(r.d, 0, 1, 1);
  Batch b;
  s.next(64, &b);
  const double loss = r.m->gradient(b);
  const std::vector<float> dense = r.g;
  std::vector<int64_t> rows;
  r.m->batch_rows(b, &rows);
  ASSERT_TRUE(std::is_sorted(rows.begin(), rows.end()));
  ASSERT_TRUE(std::adjacent_find(rows.begin(), rows.end()) == rows.end());
  std::vector<float> rg(rows.size() * 4);
  std::fill(r.g.begin(), r.g.end(), 7.0f);
  const double loss2 = r.m->sparse_gradient(b, rows, rg, {});
  EXPECT_DOUBLE_EQ(loss, loss2);
  for (int64_t i = 0; i < l.dense; ++i)
    ASSERT_EQ(r.g[static_cast<size_t>(i)], dense[static_cast<size_t>(i)]);
  std::vector<float> scattered(static_cast<size_t>(l.rows * 4), 0.0f);
  for (size_t k = 0; k < rows.size(); ++k) {
    for (int c = 0; c < 4; ++c) scattered[static_cast<size_t>(rows[k] * 4 + c)] = rg[k * 4 + c];
  }
  for (size_t i = 0; i < scattered.size(); ++i) {
    ASSERT_EQ(scattered[i], dense[static_cast<size_t>(l.dense) + i]) << i;
  }
}

// Every row from its own seeded stream (what lets an mpi server rank
// initialise only its rows): init_row gives init_params' rows, init_dense
// writes the dense part alone, within a table's +-1/sqrt(rows) bound.
TEST(Dlrm, RowsInitialisePerRowAndTheDensePartAlone) {
  Rig r;
  const RowLayout l = r.m->row_layout();
  const auto d = static_cast<size_t>(l.dim);
  std::vector<float> row(d);
  for (int64_t k = 0; k < l.rows; ++k) {
    r.m->init_row(3, k, row);
    for (size_t c = 0; c < d; ++c) {
      ASSERT_EQ(row[c], r.p[static_cast<size_t>(l.dense) + static_cast<size_t>(k) * d + c]) << k;
      ASSERT_LE(std::abs(row[c]), 1.0 / std::sqrt(20.0));
    }
  }
  std::vector<float> other(d);
  r.m->init_row(4, 5, other);
  r.m->init_row(3, 5, row);
  EXPECT_NE(other, row);  // another seed, other rows
  r.m->init_row(3, 6, other);
  EXPECT_NE(other, row);  // another row, other values
  std::unique_ptr<Model> m2 = make_model(r.spec);
  std::vector<float> p2(r.p.size(), 0.0f), g2(r.p.size());
  m2->bind(p2, g2);
  m2->init_dense(3);
  for (size_t i = 0; i < p2.size(); ++i) {
    ASSERT_EQ(p2[i], i < static_cast<size_t>(l.dense) ? r.p[i] : 0.0f) << i;
  }
}

TEST(Dlrm, GradientMatchesFiniteDifferences) {
  Rig r;
  ShardSampler s(r.d, 0, 1, 1);
  Batch b;
  s.next(32, &b);
  r.m->gradient(b);
  const std::vector<float> g = r.g;
  const RowLayout l = r.m->row_layout();
  const size_t row_coord =
      static_cast<size_t>(l.dense + (l.table_offset[1] + b.categorical[1]) * 4);
  for (size_t i : {size_t{0}, size_t{5}, row_coord, row_coord + 3}) {
    const float keep = r.p[i];
    const float h = 1e-2f;
    r.p[i] = keep + h;
    const double up = r.m->gradient(b);
    r.p[i] = keep - h;
    const double down = r.m->gradient(b);
    r.p[i] = keep;
    EXPECT_NEAR((up - down) / (2 * h), g[i], 2e-3) << "coordinate " << i;
  }
}

TEST(Dlrm, EvaluateGivesAucAndLogLossAndChecksInput) {
  Rig r;
  const EvalResult e = r.m->evaluate(r.d);
  EXPECT_DOUBLE_EQ(e.loss, e.log_loss);
  EXPECT_GE(e.auc, 0.0);
  EXPECT_LE(e.auc, 1.0);
  EXPECT_GE(e.accuracy, 0.0);
  ModelSpec bad = r.spec;
  bad.table_rows.clear();
  EXPECT_THROW(make_model(bad), InputError);
  Batch b;
  ShardSampler s(r.d, 0, 1, 1);
  s.next(4, &b);
  b.categorical[0] = 20;  // table 0 has rows 0..19
  EXPECT_THROW(r.m->gradient(b), InputError);
}

std::string criteo_line(int label, const std::string& i, const std::string& c) {
  std::string s = std::to_string(label);
  for (int k = 0; k < 13; ++k) s += "\t" + i;
  for (int j = 0; j < 26; ++j) s += "\t" + c;
  return s + "\n";
}

const std::string kBase =
    "--model dlrm --workers 2 --batch 32 --set train.eval_every=0.5 "
    "--set data.ctr_samples=2000 --set model.table_rows=50 ";
const std::string kFast = kBase + "--budget 1 --set optim.lr=0.1 ";

TEST(DlrmCli, TrainsOnSyntheticCtrThreadsDenseSparseAndSim) {
  for (const std::string extra : {"--policy async", "--policy async --set model.sparse=true",
                                  "--policy sync --set model.sparse=true --set optim.kind=adagrad",
                                  "--policy hybrid --runtime sim --set sim.compute_time=0.005 "
                                  "--set sim.server_ns_per_param=1",
                                  "--policy hybrid --runtime sim --set sim.compute_time=0.005 "
                                  "--set sim.server_ns_per_param=1 --set model.sparse=true"}) {
    const std::string out = tmp("ctr_run");
    const Outcome o = run("train --data synthetic-ctr " + kFast + extra + " --out " + out);
    ASSERT_EQ(o.code, 0) << extra << "\n" << o.err;
    EXPECT_NE(o.err.find("planted model's AUC"), std::string::npos);
    const nlohmann::json j = summary(out);
    EXPECT_GT(j["final_test_auc"].get<double>(), 0.55) << extra;
    EXPECT_GT(j["planted_auc"].get<double>(), j["final_test_auc"].get<double>() - 0.05);
    std::ifstream csv(out + "/metrics.csv");
    std::string header;
    std::getline(csv, header);
    EXPECT_NE(header.find("test_acc,test_auc,test_logloss"), std::string::npos);
  }
}

// Row-sparse on sim: deterministic (two runs, the same bytes), and a run
// resumed from its checkpoint ends where the straight run ends.
TEST(DlrmCli, SparseSimIsDeterministicAndResumesExactly) {
  const std::string args = "train --data synthetic-ctr " + kBase + "--budget 1 " +
                           "--policy kasync:2 --runtime sim --set sim.compute_time=0.005 "
                           "--set sim.server_ns_per_param=1 --set model.sparse=true "
                           "--set optim.kind=adam --set optim.lr=0.01 ";
  const std::string a = tmp("sim_a"), b = tmp("sim_b"), c = tmp("sim_c");
  ASSERT_EQ(run(args + "--out " + a).code, 0);
  ASSERT_EQ(run(args + "--out " + b).code, 0);
  auto read = [](const std::string& f) {
    std::ifstream in(f);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  };
  EXPECT_EQ(read(a + "/metrics.csv"), read(b + "/metrics.csv"));
  // Half the budget with a checkpoint, then resume to the full budget.
  const std::string half = "train --data synthetic-ctr " + kBase +
                           "--policy kasync:2 --runtime sim --set sim.compute_time=0.005 "
                           "--set sim.server_ns_per_param=1 --set model.sparse=true "
                           "--set optim.kind=adam --set optim.lr=0.01 --budget 0.5 "
                           "--set train.checkpoint_every=0.5 --out " +
                           c;
  const Outcome h = run(half);
  ASSERT_EQ(h.code, 0) << h.err;
  const Outcome r = run("train --resume " + c + " --budget 1");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(read(a + "/metrics.csv"), read(c + "/metrics.csv"));
}

TEST(DlrmCli, CriteoFileTrainsAndABadLineExits2) {
  std::string text;
  for (int i = 0; i < 200; ++i) {
    text += criteo_line(i % 3 == 0, i % 5 == 0 ? "" : std::to_string(i % 17),
                        i % 7 == 0 ? "" : (i % 2 ? "a1b2c3d4" : "0fe1"));
  }
  const std::string good = write("ok.tsv", text);
  const Outcome o = run("train --data criteo:" + good + " " + kFast + " --out " + tmp("criteo"));
  ASSERT_EQ(o.code, 0) << o.err;
  const std::string bad = write("bad.tsv", text + "1\t2\t3\n");
  const Outcome b = run("train --data criteo:" + bad + " " + kFast + " --out " + tmp("criteo_bad"));
  EXPECT_EQ(b.code, 2);
  EXPECT_EQ(b.err, "hsgd: error: " + bad +
                       ":line 201: expected 40 tab-separated fields (label, 13 integers, 26 "
                       "categorical), got 3\n");
  const Outcome s =
      run("train --data synthetic-ctr " + kFast +
          "--set sampling.kind=loss --set model.sparse=true --out " + tmp("loss_sparse"));
  EXPECT_EQ(s.code, 2);
  EXPECT_NE(s.err.find("model.sparse = true"), std::string::npos) << s.err;
}

// summary.json "sparse": bytes per message and per-row staleness. On sim
// (deterministic), async with 2 workers: some rows move between a pull and
// its push, and never more often than the push's staleness (a row moves
// only in updates). sync (threads): every pull of an update's pushes sees
// the same versions, so no row is stale.
TEST(DlrmCli, SparseSummaryHasBytesAndPerRowStaleness) {
  const std::string a = tmp("stale_sim");
  const Outcome o = run("train --data synthetic-ctr " + kFast +
                        "--policy async --runtime sim --set sim.compute_time=0.005 "
                        "--set sim.server_ns_per_param=1 --set stragglers.fraction=0.5 "
                        "--set stragglers.delay=exponential --set stragglers.scale=0.01 "
                        "--set model.sparse=true --out " +
                        a);
  ASSERT_EQ(o.code, 0) << o.err;
  const nlohmann::json j = summary(a);
  const nlohmann::json& sp = j["sparse"];
  EXPECT_EQ(sp["pushes"].get<int64_t>(), j["gradients"].get<int64_t>());
  EXPECT_EQ(sp["server_rows"], nlohmann::json::array({8 * 50}));
  EXPECT_GT(sp["rows_per_push"].get<double>(), 1.0);
  EXPECT_GT(sp["dense_over_sparse_push"].get<double>(), 1.0);
  EXPECT_GT(sp["row_staleness_mean"].get<double>(), 0.0);
  int64_t tau_max = 0;
  const auto& h = j["staleness_histogram"];
  for (size_t t = 0; t < h.size(); ++t) {
    if (h[t].get<int64_t>() > 0) tau_max = static_cast<int64_t>(t);
  }
  EXPECT_GE(sp["row_staleness_max"].get<int64_t>(), 1);
  EXPECT_LE(sp["row_staleness_max"].get<int64_t>(), tau_max);
  const std::string b = tmp("stale_sync");
  const Outcome p = run("train --data synthetic-ctr " + kFast +
                        "--policy sync --set model.sparse=true --out " + b);
  ASSERT_EQ(p.code, 0) << p.err;
  EXPECT_EQ(summary(b)["sparse"]["row_staleness_max"].get<int64_t>(), 0);
  EXPECT_GT(summary(b)["sparse"]["row_updates"].get<int64_t>(), 0);
}

}  // namespace
}  // namespace hsgd
