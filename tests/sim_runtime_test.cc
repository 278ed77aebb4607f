// The simulator with the plain-C++ linear model: determinism, equivalences
// between policies, virtual-time accounting, stragglers, scale.
#include "hsgd/runtime/sim_runtime.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "hsgd/core/error.h"
#include "hsgd/model/linear_model.h"

namespace hsgd {
namespace {

namespace fs = std::filesystem;

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

struct Sim {
  Config config;
  Dataset train, test;

  explicit Sim(std::vector<Override> o, int64_t samples = 2000) {
    o.insert(o.begin(), {{"data.spec", "synthetic"},
                         {"model.name", "linear-test"},
                         {"train.runtime", "sim"},
                         {"train.workers", "4"},
                         {"train.batch", "16"},
                         {"train.budget", "2"},
                         {"train.eval_every", "0.25"},
                         {"optim.lr", "0.1"},
                         {"policy.step", "20"},
                         {"sim.compute_time", "0.01"},
                         {"sim.server_ns_per_param", "100"},
                         {"sim.latency", "0.0005"},
                         {"sim.bandwidth", "1e8"}});
    config = load_config("", o);
    SyntheticOptions so = config.data.synthetic;
    so.samples = samples;
    split_train_test(make_synthetic(so), 0.2, 1, &train, &test);
  }

  Job job() const {
    Job j;
    j.config = &config;
    j.train = &train;
    j.test = &test;
    const int64_t f = train.sample_size();
    const int k = train.num_classes;
    j.make_model = [f, k] { return make_linear_model(f, k); };
    j.initial_params = initial_params(j.make_model, config.train.seed);
    return j;
  }

  // Runs into a fresh directory; returns the result, the CSV text in *csv.
  RunResult run(const std::string& name, std::string* csv = nullptr) {
    const std::string dir = (fs::path(::testing::TempDir()) / ("sim_" + name)).string();
    fs::remove_all(dir);
    fs::create_directories(dir);
    RunResult r;
    {
      Recorder rec(dir);
      r = SimRuntime().run(job(), &rec, nullptr);
      rec.finish();
    }
    if (csv) *csv = slurp(dir + "/metrics.csv");
    return r;
  }
};

// The CSV without the policy column, to compare runs of equivalent policies.
std::string without_policy(const std::string& csv) {
  std::stringstream in(csv), out;
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> f;
    std::stringstream ls(line);
    std::string cell;
    while (std::getline(ls, cell, ',')) f.push_back(cell);
    f.erase(f.begin() + 13);
    for (size_t i = 0; i < f.size(); ++i) out << (i ? "," : "") << f[i];
    out << "\n";
  }
  return out.str();
}

TEST(SimRuntime, SameConfigAndSeedGiveTheSameCsvByteForByte) {
  for (const char* policy : {"async", "sync", "hybrid", "kbatch:3"}) {
    Sim s({{"policy.name", policy}, {"stragglers.fraction", "0.5"}, {"stragglers.sigma", "0.05"}});
    std::string a, b;
    RunResult ra = s.run("det_a", &a);
    RunResult rb = s.run("det_b", &b);
    EXPECT_EQ(a, b) << policy;
    EXPECT_EQ(ra.params, rb.params) << policy;
    EXPECT_GT(ra.last.updates, 10) << policy;
    // A different seed changes the run.
    Sim other({{"policy.name", policy},
               {"stragglers.fraction", "0.5"},
               {"stragglers.sigma", "0.05"},
               {"train.seed", "2"}});
    std::string c;
    other.run("det_c", &c);
    EXPECT_NE(a, c) << policy;
  }
}

TEST(SimRuntime, WithoutDelaysSyncEqualsKasyncN) {
  std::string sync, kasync;
  Sim(std::vector<Override>{{"policy.name", "sync"}}).run("sync", &sync);
  Sim(std::vector<Override>{{"policy.name", "kasync:4"}}).run("kasync4", &kasync);
  EXPECT_EQ(without_policy(sync), without_policy(kasync));
  EXPECT_NE(sync.find(",sync,"), std::string::npos);
}

TEST(SimRuntime, WithoutDelaysAsyncEqualsKasyncOne) {
  std::string async, kasync;
  RunResult a = Sim(std::vector<Override>{{"policy.name", "async"}}).run("async", &async);
  RunResult k = Sim(std::vector<Override>{{"policy.name", "kasync:1"}}).run("kasync1", &kasync);
  EXPECT_EQ(without_policy(async), without_policy(kasync));
  EXPECT_EQ(a.params, k.params);
}

TEST(SimRuntime, VirtualTimeFollowsTheCostModel) {
  // One worker, no network or server cost: one gradient every compute_time.
  Sim s({{"policy.name", "async"},
         {"train.workers", "1"},
         {"train.budget", "1"},
         {"sim.compute_time", "0.01"},
         {"sim.latency", "0"},
         {"sim.bandwidth", "1e30"},
         {"sim.server_ns_per_param", "0"}});
  RunResult r = s.run("cost");
  EXPECT_GE(r.last.updates, 99);
  EXPECT_LE(r.last.updates, 100);
  EXPECT_DOUBLE_EQ(r.train_s, 1.0);
  // Network: each step costs compute + 2 latencies + 2 transfers.
  Sim n({{"policy.name", "async"},
         {"train.workers", "1"},
         {"train.budget", "1"},
         {"sim.compute_time", "0.01"},
         {"sim.latency", "0.0025"},
         {"sim.bandwidth", "1e30"},
         {"sim.server_ns_per_param", "0"}});
  RunResult rn = n.run("net");
  // Pull request, pull reply, push: 3 latencies of 2.5 ms per 10 ms step.
  EXPECT_GE(rn.last.updates, 56);
  EXPECT_LE(rn.last.updates, 58);
}

TEST(SimRuntime, StragglersMakeSyncWaitAndAsyncStale) {
  const std::vector<Override> straggle = {{"stragglers.fraction", "0.5"},
                                          {"stragglers.sigma", "0.1"}};
  std::vector<Override> o = straggle;
  o.push_back({"policy.name", "sync"});
  RunResult sync = Sim(o).run("sync_straggle");
  o.back() = {"policy.name", "async"};
  RunResult async = Sim(o).run("async_straggle");
  EXPECT_GT(sync.last.idle_frac, 0.3);
  EXPECT_EQ(sync.last.staleness_max, 0);
  EXPECT_DOUBLE_EQ(async.last.idle_frac, 0.0);
  EXPECT_GT(async.last.staleness_max, 2);
  EXPECT_GT(async.last.updates, 2 * sync.last.updates);
}

TEST(SimRuntime, EpochBudgetAndCalibration) {
  Sim s({{"policy.name", "async"},
         {"train.budget", "0"},
         {"train.epochs", "1"},
         {"sim.compute_time", "0"},
         {"sim.server_ns_per_param", "-1"}});
  RunResult r = s.run("epochs");
  EXPECT_GE(r.last.samples, s.train.size());
  EXPECT_LT(r.last.samples, s.train.size() + 4 * 16);
  ASSERT_EQ(r.resolved.size(), 2u);
  EXPECT_EQ(r.resolved[0].first, "sim.compute_time");
  EXPECT_GT(std::stod(r.resolved[0].second), 0.0);
  EXPECT_EQ(r.resolved[1].first, "sim.server_ns_per_param");
  EXPECT_GE(std::stod(r.resolved[1].second), 0.0);
}

TEST(SimRuntime, HybridClimbsToSyncInVirtualTime) {
  Sim s({{"policy.name", "hybrid"}, {"policy.step", "10"}, {"train.budget", "3"}});
  std::string csv;
  RunResult r = s.run("hybrid", &csv);
  auto rows = read_metrics_csv(fs::path(::testing::TempDir()) / "sim_hybrid" / "metrics.csv");
  EXPECT_EQ(rows.front().k, 1);
  EXPECT_EQ(r.last.k, 4);
}

TEST(SimRuntime, TwoHundredFiftySixWorkersComplete) {
  Sim s({{"policy.name", "hybrid"}, {"train.workers", "256"}, {"train.budget", "1"}}, 10000);
  RunResult r = s.run("scale");
  EXPECT_EQ(r.last.live_workers, 256);
  EXPECT_GT(r.gradients, 256);
}

}  // namespace
}  // namespace hsgd
