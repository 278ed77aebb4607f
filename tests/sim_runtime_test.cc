// The simulator with the plain-C++ linear model: determinism, equivalences
// between policies, virtual-time accounting, stragglers, scale.
#include "hsgd/runtime/sim_runtime.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <tuple>

#include "hsgd/checkpoint/checkpoint.h"
#include "hsgd/core/error.h"
#include "hsgd/core/shards.h"
#include "hsgd/model/linear_model.h"
#include "hsgd/runtime/local_steps.h"
#include "hsgd/runtime/row.h"
#include "hsgd/server/server.h"
#include "linear_job.h"
#include "test_helpers.h"

namespace hsgd {
namespace {

using testing_helpers::slurp;

namespace fs = std::filesystem;

struct Sim : testing::LinearJob {
  explicit Sim(const std::vector<Override>& o, int64_t samples = 2000)
      : LinearJob({{"train.runtime", "sim"},
                   {"train.workers", "4"},
                   {"train.batch", "16"},
                   {"train.budget", "2"},
                   {"train.eval_every", "0.25"},
                   {"optim.lr", "0.1"},
                   {"policy.step", "20"},
                   {"sim.compute_time", "0.01"},
                   {"sim.server_ns_per_param", "100"},
                   {"sim.latency", "0.0005"},
                   {"sim.bandwidth", "1e8"}},
                  o, samples) {}

  // Runs into a fresh directory; returns the result, the CSV text in *csv.
  RunResult run(const std::string& name, std::string* csv = nullptr) {
    const std::string dir = (fs::path(::testing::TempDir()) / ("sim_" + name)).string();
    fs::remove_all(dir);
    fs::create_directories(dir);
    RunResult r;
    {
      Recorder rec(dir, config.compress.on());
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
  size_t policy = 0;  // the policy column, found by its name
  for (bool header = true; std::getline(in, line); header = false) {
    std::vector<std::string> f;
    std::stringstream ls(line);
    std::string cell;
    while (std::getline(ls, cell, ',')) f.push_back(cell);
    if (header) policy = static_cast<size_t>(std::find(f.begin(), f.end(), "policy") - f.begin());
    f.erase(f.begin() + static_cast<std::ptrdiff_t>(policy));
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

// Non-IID shards, a global pool and importance sampling keep the simulator
// deterministic, under a waiting and a non-waiting policy, and still learn.
TEST(SimRuntime, SkewedShardsAndImportanceSamplingAreDeterministic) {
  for (const char* policy : {"async", "sync", "local:2"}) {
    const std::vector<Override> o = {{"policy.name", policy},      {"stragglers.fraction", "0.5"},
                                     {"stragglers.sigma", "0.05"}, {"data.partition", "dirichlet"},
                                     {"data.alpha", "0.1"},        {"data.global_fraction", "0.1"},
                                     {"sampling.kind", "loss"},    {"sampling.warmup", "1"}};
    Sim s(o);
    std::string a, b, iid;
    RunResult ra = s.run("skew_a", &a);
    RunResult rb = s.run("skew_b", &b);
    EXPECT_EQ(a, b) << policy;
    EXPECT_EQ(ra.params, rb.params) << policy;
    EXPECT_GT(ra.last.test_acc, 0.3) << policy;
    EXPECT_GT(ra.sampler_cost.batches, 0) << policy;
    EXPECT_GT(ra.sampler_cost.gradient_s, 0) << policy;
    // The partition and the sampling change the run.
    Sim(std::vector<Override>{
            {"policy.name", policy}, {"stragglers.fraction", "0.5"}, {"stragglers.sigma", "0.05"}})
        .run("skew_iid", &iid);
    EXPECT_NE(a, iid) << policy;
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

// local:1 with no local momentum, mean aggregation and the default outer
// optimizer (SGD, lr 1) is sync SGD, update by update: each worker pushes
// w - (w - lr g) = lr g, and the server steps by 1 x mean(lr g).
TEST(LocalSgd, LocalOneWithoutMomentumIsSyncSgdStepByStep) {
  Sim s(std::vector<Override>{{"policy.name", "sync"}});
  Config lc = s.config;
  lc.policy.kind = "local";
  lc.policy.k = 1;
  lc.policy.local.momentum = 0;
  const Job j = s.job();
  Job lj = j;
  lj.config = &lc;
  const int n = 4;
  const size_t np = j.initial_params.size();
  std::vector<float> pa = j.initial_params, pb = j.initial_params;
  Server sync(pa, server_options(j), make_policy(s.config.policy, n, 0.1),
              make_optimizer(server_optimizer(s.config), np));
  Server local(pb, server_options(lj), make_policy(lc.policy, n, 0.1),
               make_optimizer(server_optimizer(lc), np));
  EXPECT_EQ(local.policy().local_steps(), 1);
  EXPECT_TRUE(local.policy().pusher_waits());
  std::unique_ptr<Model> model = j.make_model();
  std::vector<float> w(np), g(np);
  model->bind(w, g);
  std::vector<ShardSampler> sa, sb;
  std::vector<LocalWorker> lw;
  for (int i = 0; i < n; ++i) {
    sa.emplace_back(s.train, i, n, 1);
    sb.emplace_back(s.train, i, n, 1);
    lw.push_back(make_local_worker(lc, np));
  }
  Batch batch;
  for (int round = 0; round < 25; ++round) {
    for (int i = 0; i < n; ++i) {
      const uint64_t v = sync.on_pull(i).version;
      std::copy(pa.begin(), pa.end(), w.begin());
      sa[static_cast<size_t>(i)].next(16, &batch);
      const double loss = model->gradient(batch);
      sync.on_push(i, v, g, batch.size(), loss, 0.0);
    }
    for (int i = 0; i < n; ++i) {
      const uint64_t v = local.on_pull(i).version;
      std::copy(pb.begin(), pb.end(), w.begin());
      int64_t m = 0;
      const double loss = lw[static_cast<size_t>(i)].run(*model, w, g, sb[static_cast<size_t>(i)],
                                                         16, 1, &batch, &m);
      EXPECT_EQ(m, 16);
      local.on_push(i, v, g, m, loss, 0.0);
    }
    ASSERT_EQ(sync.version(), static_cast<uint64_t>(round + 1));
    ASSERT_EQ(local.version(), sync.version());
    for (size_t k = 0; k < np; ++k) {
      ASSERT_NEAR(pa[k], pb[k], 1e-5 * std::max(1.0f, std::abs(pa[k]))) << round << " " << k;
    }
  }
}

// DiLoCo's outer Nesterov with lr 1 and momentum 0 is plain averaging:
// params = pulled - mean(delta), hand-computed on two workers.
TEST(LocalSgd, DilocoWithOuterLrOneAndNoMomentumIsPlainAveraging) {
  Sim s({{"policy.name", "local:3"},
         {"local.outer", "nesterov"},
         {"local.outer_lr", "1"},
         {"local.outer_momentum", "0"}});
  const OptimizerOptions o = server_optimizer(s.config);
  EXPECT_EQ(o.kind, "nesterov");
  std::vector<float> p = {1.0f, -2.0f, 0.5f};
  ServerOptions so;
  so.workers = 2;
  so.lr = 1.0;
  Server server(p, so, make_policy(s.config.policy, 2, 0.1), make_optimizer(o, p.size()));
  for (int round = 0; round < 2; ++round) {
    const std::vector<float> d0 = {0.5f, 1.0f, -0.25f}, d1 = {0.25f, -1.0f, 0.75f};
    const std::vector<float> before = p;
    EXPECT_FALSE(server.on_push(0, server.version(), d0, 48, 0.0, 0.0).applied);
    EXPECT_TRUE(server.on_push(1, server.version(), d1, 48, 0.0, 0.0).applied);
    for (size_t k = 0; k < p.size(); ++k) EXPECT_EQ(p[k], before[k] - (d0[k] + d1[k]) / 2);
  }
}

TEST(SimRuntime, LocalOneWithoutMomentumMatchesSync) {
  RunResult a = Sim(std::vector<Override>{{"policy.name", "sync"}}).run("l1_sync");
  RunResult b =
      Sim(std::vector<Override>{{"policy.name", "local:1"}, {"local.momentum", "0"}}).run("l1");
  EXPECT_EQ(a.last.updates, b.last.updates);
  EXPECT_EQ(a.last.samples, b.last.samples);
  ASSERT_EQ(a.params.size(), b.params.size());
  for (size_t k = 0; k < a.params.size(); ++k) {
    EXPECT_NEAR(a.params[k], b.params[k], 1e-4 * std::max(1.0f, std::abs(a.params[k])));
  }
  EXPECT_NEAR(a.last.test_acc, b.last.test_acc, 0.01);
}

TEST(SimRuntime, DilocoWithOuterLrOneAndNoMomentumEqualsAveragingRun) {
  std::string avg, diloco, real;
  RunResult a = Sim(std::vector<Override>{{"policy.name", "local:4"}}).run("l4_avg", &avg);
  RunResult d = Sim(std::vector<Override>{{"policy.name", "local:4"},
                                          {"local.outer", "nesterov"},
                                          {"local.outer_momentum", "0"}})
                    .run("l4_diloco0", &diloco);
  EXPECT_EQ(avg, diloco);
  EXPECT_EQ(a.params, d.params);
  RunResult r =
      Sim(std::vector<Override>{
              {"policy.name", "local:4"}, {"local.outer", "nesterov"}, {"local.outer_lr", "0.7"}})
          .run("l4_diloco", &real);
  EXPECT_NE(a.params, r.params);
}

TEST(SimRuntime, LocalSgdLearnsAndChargesHComputeTimes) {
  for (const char* async : {"false", "true"}) {
    Sim s({{"policy.name", "local:4"}, {"local.async", async}});
    std::string csv;
    RunResult r = s.run(std::string("local4_") + async, &csv);
    auto rows = read_metrics_csv(fs::path(::testing::TempDir()) /
                                 (std::string("sim_local4_") + async) / "metrics.csv");
    EXPECT_GT(r.last.test_acc, rows.front().test_acc + 0.2) << async;
    EXPECT_EQ(r.last.samples, r.gradients * 4 * 16) << async;
    // A push costs 4 x 10 ms of compute plus messages: at most 2 s / 40 ms
    // rounds per worker.
    EXPECT_LE(r.gradients, 4 * 50) << async;
    EXPECT_GT(r.gradients, 4 * 40) << async;
    EXPECT_NE(csv.find(std::string(",local:4") + (async[0] == 't' ? "(async)" : "") + ","),
              std::string::npos);
  }
}

TEST(SimRuntime, SspWithStragglersIsDeterministicBoundedAndWaits) {
  const std::vector<Override> o = {
      {"policy.name", "ssp:1"}, {"stragglers.fraction", "0.5"}, {"stragglers.sigma", "0.1"}};
  std::string a, b;
  RunResult r = Sim(o).run("ssp_a", &a);
  Sim(o).run("ssp_b", &b);
  EXPECT_EQ(a, b);
  EXPECT_GT(r.last.updates, 0);
  EXPECT_GT(r.last.idle_frac, 0.0);
  // A window between a pull and its push sees at most 2s + 1 pushes from
  // each of the 3 others (their clocks stay within s of the slowest).
  int64_t max_tau = 0;
  for (size_t t = 0; t < r.staleness_histogram.size(); ++t) {
    if (r.staleness_histogram[t] > 0) max_tau = static_cast<int64_t>(t);
  }
  EXPECT_GT(max_tau, 0);
  EXPECT_LE(max_tau, 3 * (2 * 1 + 1));
  // Async under the same stragglers runs further ahead.
  std::vector<Override> async = o;
  async[0] = {"policy.name", "async"};
  RunResult ra = Sim(async).run("ssp_async");
  int64_t async_tau = 0;
  for (size_t t = 0; t < ra.staleness_histogram.size(); ++t) {
    if (ra.staleness_histogram[t] > 0) async_tau = static_cast<int64_t>(t);
  }
  EXPECT_GT(async_tau, max_tau);
}

}  // namespace
}  // namespace hsgd

namespace hsgd {
namespace {

// Runs to t2 in one go, and to t1 with checkpoints then resumed to t2 in a
// new runtime; both must write the same metrics and parameters, bit for bit.
void ExpectExactResume(const std::vector<Override>& o, const std::string& name, double t1 = 1.0,
                       double t2 = 2.0, double every = 0.4,
                       const std::string& key = "train.budget") {
  SCOPED_TRACE(name);
  std::vector<Override> whole = o;
  if (key != "train.budget") whole.push_back({"train.budget", "0"});
  whole.push_back({key, std::to_string(t2)});
  std::string csv_whole;
  const RunResult a = Sim(whole).run(name + "_whole", &csv_whole);

  const std::string dir = testing::fresh_dir("sim_resume_" + name);
  std::vector<Override> first = o;
  if (key != "train.budget") first.push_back({"train.budget", "0"});
  first.push_back({key, std::to_string(t1)});
  first.push_back({"train.checkpoint_every", std::to_string(every)});
  Sim s1(first);
  Job j1 = s1.job();
  j1.identity = {config_hash(s1.config), "linear-test",
                 static_cast<int64_t>(j1.initial_params.size())};
  {
    CheckpointStore store(dir, 2);
    j1.checkpoints = &store;
    Recorder rec(dir, s1.config.compress.on());
    const RunResult r1 = SimRuntime().run(j1, &rec, nullptr);
    EXPECT_TRUE(r1.stopped.empty());
    EXPECT_GE(store.written(), 1);  // the final one at least
    rec.finish();
  }
  std::vector<Override> second = o;
  if (key != "train.budget") second.push_back({"train.budget", "0"});
  second.push_back({key, std::to_string(t2)});
  second.push_back({"train.checkpoint_every", std::to_string(every)});
  Sim s2(second);
  Job j2 = s2.job();
  j2.identity = {config_hash(s2.config), "linear-test",
                 static_cast<int64_t>(j2.initial_params.size())};
  const Checkpoint ck = CheckpointStore::load_latest(dir, j2.identity);
  if (key == "train.budget") {
    EXPECT_DOUBLE_EQ(ck.info.train_s, t1);
  }
  RunResult b;
  {
    CheckpointStore store(dir, 2);
    j2.checkpoints = &store;
    j2.resume = &ck;
    Recorder rec(dir, ck.info.rows, s2.config.compress.on());
    b = SimRuntime().run(j2, &rec, nullptr);
    rec.finish();
  }
  EXPECT_EQ(slurp(dir + "/metrics.csv"), csv_whole);
  EXPECT_EQ(b.params, a.params);
  EXPECT_EQ(b.staleness_histogram, a.staleness_histogram);
  EXPECT_EQ(b.worker_pushes, a.worker_pushes);
  EXPECT_EQ(b.gradients, a.gradients);
  EXPECT_EQ(b.compress.bytes_pushed, a.compress.bytes_pushed);
  EXPECT_EQ(b.compress.bytes_pulled, a.compress.bytes_pulled);
}

// [compress]: residuals, held copies, powersgd warm starts and the byte
// counters are in the checkpoint; resume stays byte-exact.
TEST(SimRuntime, ResumeIsByteExactWithCompressionOn) {
  const std::vector<Override> base = {{"policy.name", "async"},
                                      {"stragglers.fraction", "0.5"},
                                      {"stragglers.sigma", "0.05"},
                                      {"compress.sim_ns_per_param", "2"}};
  for (const auto& [name, push, pull] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
           {"topk_qsgd", "topk:0.1", "qsgd:16"},
           {"powersgd", "powersgd:1", "none"},
           {"sign_qsgd4", "sign", "qsgd:4"}}) {  // qsgd:4: scaled pulls
    std::vector<Override> o = base;
    if (name == "powersgd") {  // composes with a waiting policy and the mitigations
      o[0] = {"policy.name", "hybrid"};
      o.push_back({"staleness.dc_asgd", "true"});
      o.push_back({"compress.warmup", "5"});
    }
    o.push_back({"compress.push", push});
    o.push_back({"compress.pull", pull});
    ExpectExactResume(o, "compress_" + name);
  }
}

TEST(SimRuntime, ResumeFromACheckpointIsByteExactForEveryPolicy) {
  const std::vector<Override> stragglers = {{"stragglers.fraction", "0.5"},
                                            {"stragglers.sigma", "0.05"}};
  struct Case {
    std::string name;
    std::vector<Override> o;
  };
  const std::vector<Case> cases = {
      {"sync", {{"policy.name", "sync"}}},
      {"async", {{"policy.name", "async"}, {"optim.kind", "momentum"}}},
      {"kasync", {{"policy.name", "kasync:2"}, {"optim.kind", "adam"}, {"optim.lr", "0.01"}}},
      {"kbatch", {{"policy.name", "kbatch:3"}}},
      {"hybrid_step", {{"policy.name", "hybrid"}}},
      {"hybrid_linear", {{"policy.name", "hybrid"}, {"policy.schedule", "linear"}}},
      {"hybrid_exponential", {{"policy.name", "hybrid"}, {"policy.schedule", "exponential"}}},
      {"hybrid_cosine", {{"policy.name", "hybrid"}, {"policy.schedule", "cosine"}}},
      {"hybrid_adaptive", {{"policy.name", "hybrid"}, {"policy.schedule", "adaptive"}}},
      {"hybrid_seconds",
       {{"policy.name", "hybrid"}, {"policy.clock", "seconds"}, {"policy.step", "0.3"}}},
      {"ssp", {{"policy.name", "ssp:1"}}},
      {"local",
       {{"policy.name", "local:3"}, {"local.outer", "nesterov"}, {"local.outer_lr", "0.7"}}},
      {"mitigated",
       {{"policy.name", "async"},
        {"staleness.dc_asgd", "true"},
        {"staleness.gap_aware", "true"},
        {"staleness.scaled_lr", "true"},
        {"staleness.tau_max", "4"}}},
      // The running mean staleness behind the corrected momentum is in the
      // server's state.
      {"momentum_corrected",
       {{"policy.name", "async"},
        {"optim.kind", "momentum"},
        {"optim.momentum", "0.9"},
        {"staleness.momentum_correction", "true"}}},
      // The noise scale's sums and open pair are in the server's state.
      {"noise_scale", {{"policy.name", "kasync:2"}, {"train.noise_scale", "true"}}},
      // Skewed shards, a global pool and importance sampling: the sampler's
      // scores and draw stream are in the checkpoint.
      {"skewed_importance",
       {{"policy.name", "async"},
        {"data.partition", "dirichlet"},
        {"data.alpha", "0.1"},
        {"data.global_fraction", "0.1"},
        {"sampling.kind", "loss"},
        {"sampling.warmup", "0"}}},
  };
  for (const Case& c : cases) {
    std::vector<Override> o = c.o;
    o.insert(o.end(), stragglers.begin(), stragglers.end());
    ExpectExactResume(o, c.name);
  }
}

TEST(SimRuntime, ResumeAtAnEvaluationTimeAndWithAnEpochBudget) {
  // t1 on the evaluation grid (its closing row is also a scheduled row).
  ExpectExactResume({{"policy.name", "hybrid"}}, "on_grid", 1.25, 2.0, 0.25);
  // A checkpoint cadence that is not a multiple of eval_every.
  ExpectExactResume({{"policy.name", "sync"}}, "off_grid", 0.9, 1.7, 0.3);
  // Epochs: the first run ends mid-stream after an event, the second goes on.
  ExpectExactResume({{"policy.name", "kasync:2"}}, "epochs", 1, 2, 0.3, "train.epochs");
}

TEST(SimRuntime, ReportsWorkerPushesAndStopsOnNonFiniteTraining) {
  const RunResult r = Sim(std::vector<Override>{{"policy.name", "async"}}).run("pushes");
  ASSERT_EQ(r.worker_pushes.size(), 4u);
  int64_t total = 0;
  for (int64_t p : r.worker_pushes) {
    EXPECT_GT(p, 0);
    total += p;
  }
  EXPECT_EQ(total, r.gradients);
  // An lr that overflows the parameters: the run stops with a reason.
  const RunResult d =
      Sim(std::vector<Override>{
              {"policy.name", "async"}, {"optim.lr", "1e38"}, {"optim.kind", "momentum"}})
          .run("diverge");
  EXPECT_NE(d.stopped.find("training diverged"), std::string::npos) << d.stopped;
  EXPECT_LT(d.train_s, 2.0);
}

}  // namespace
}  // namespace hsgd

namespace hsgd {
namespace {

TEST(SimRuntime, CompressionIsDeterministicAndChargesTheCompressedBytes) {
  // A slow network (10 kB/s): messages of 4 bytes per parameter dominate.
  const std::vector<Override> slow = {
      {"policy.name", "async"}, {"sim.bandwidth", "1e4"}, {"compress.sim_ns_per_param", "1"}};
  std::string plain_csv;
  const RunResult plain = Sim(slow).run("cmp_none", &plain_csv);
  EXPECT_FALSE(plain.compress_on);
  EXPECT_EQ(plain_csv.find("bytes_pushed"), std::string::npos);
  std::vector<Override> topk = slow;
  topk.push_back({"compress.push", "topk:0.05"});
  topk.push_back({"compress.pull", "fp16"});
  std::string a, b;
  const RunResult ra = Sim(topk).run("cmp_topk_a", &a);
  Sim(topk).run("cmp_topk_b", &b);
  EXPECT_EQ(a, b);  // same config and seed, same bytes
  EXPECT_NE(a.find(",bytes_pushed,bytes_pulled,compress_s"), std::string::npos);
  ASSERT_TRUE(ra.compress_on);
  const int64_t plain_msg = 4 * static_cast<int64_t>(ra.params.size());
  EXPECT_LT(ra.compress.bytes_pushed, ra.gradients * plain_msg / 5);
  EXPECT_GT(ra.compress.bytes_pushed, 0);
  EXPECT_GT(ra.compress.compress_s, 0.0);
  // Fewer bytes on a slow link: more updates in the same virtual time.
  EXPECT_GT(ra.last.updates, 2 * plain.last.updates);
  EXPECT_EQ(ra.last.bytes_pushed, ra.compress.bytes_pushed);
  // It still learns.
  EXPECT_GT(ra.last.test_acc, 0.5);
}

}  // namespace
}  // namespace hsgd

namespace hsgd {
namespace {

// ---- The simulated cluster (issue 27): network, server shards, cores.

// Async, no compute to speak of and a free server: the workers' messages
// queue on the server's link. Eight identical workers stay in step under
// fair sharing: their eight pushes (4 bytes a parameter + the 56-byte
// request) share the server's ingress and end together, then their eight
// pulls (4 bytes a parameter + the 16-byte reply) share its egress, then
// they compute. Eight updates per such round.
TEST(SimNetwork, ASaturatedServerLinkDeliversItsCapacity) {
  const std::vector<Override> base = {
      {"policy.name", "async"},       {"train.workers", "8"},           {"train.budget", "2"},
      {"sim.compute_time", "0.0001"}, {"sim.server_ns_per_param", "0"}, {"sim.latency", "0"},
      {"sim.bandwidth", "1e7"},       {"sim.server_bandwidth", "1e6"}};
  Sim s(base);
  const RunResult r = s.run("net_saturated");
  const double params = static_cast<double>(r.params.size());
  const double round = 8 * (4 * params + 56) / 1e6 + 8 * (4 * params + 16) / 1e6 + 0.0001;
  const double expected = 8 * std::floor(2.0 / round);
  EXPECT_NEAR(static_cast<double>(r.gradients), expected, 8.0);
  ASSERT_TRUE(r.network.on);
  // Each direction busy half the time: ingress during the pushes, egress
  // during the pulls.
  EXPECT_NEAR(r.network.busiest_util, (8 * (4 * params + 56) / 1e6) / round, 0.01);
  EXPECT_EQ(r.network.busiest, "server 0 ingress");
  // The same messages priced alone: each worker as if it had the server's
  // link to itself, eight times the updates (less its compute).
  std::vector<Override> alone = base;
  alone.push_back({"sim.network", "independent"});
  alone.push_back({"train.servers", "2"});  // (so the cluster still reports)
  const RunResult a = Sim(alone).run("net_alone");
  EXPECT_GT(static_cast<double>(a.gradients), 4.0 * expected);
  EXPECT_FALSE(
      Sim(std::vector<Override>{{"sim.network", "independent"}}).run("net_legacy").network.on);
}

// Two shards: each carries half of every push on its own link, so the
// saturated rate doubles, and each shard's link carries its mpi slice.
TEST(SimNetwork, TwoServerShardsSplitLikeMpiAndDoubleTheSaturatedRate) {
  const std::vector<Override> base = {
      {"policy.name", "async"},       {"train.workers", "8"},           {"train.budget", "2"},
      {"sim.compute_time", "0.0001"}, {"sim.server_ns_per_param", "0"}, {"sim.latency", "0"},
      {"sim.bandwidth", "1e8"},       {"sim.server_bandwidth", "1e6"}};
  const RunResult one = Sim(base).run("net_one_shard");
  std::vector<Override> o = base;
  o.push_back({"train.servers", "2"});
  const RunResult two = Sim(o).run("net_two_shards");
  const double ratio = static_cast<double>(two.gradients) / static_cast<double>(one.gradients);
  EXPECT_NEAR(ratio, 2.0, 0.1);
  ASSERT_EQ(two.network.nodes.size(), 10u);
  EXPECT_EQ(two.network.nodes[0], "server 0");
  EXPECT_EQ(two.network.nodes[1], "server 1");
  EXPECT_EQ(two.network.nodes[2], "worker 0");
  // Shard s receives 4 x its slice per push (shard 0 also the request).
  const std::vector<ParamShard> slices = split_shards(two.params.size(), 2);
  const double pushes = static_cast<double>(two.gradients);
  const double in1 = two.network.received[1];
  EXPECT_NEAR(in1 / (4.0 * static_cast<double>(slices[1].size)), pushes, 8.0);
  const double in0 = two.network.received[0];
  EXPECT_NEAR(in0 / (4.0 * static_cast<double>(slices[0].size) + 56), pushes, 8.0);
}

// sim.cores: the workers' compute shares that many cores, first come first
// served (a free network and server: compute alone sets the pace).
TEST(SimNetwork, CoresSerialiseTheWorkersCompute) {
  const std::vector<Override> base = {
      {"policy.name", "async"},     {"train.workers", "4"},           {"train.budget", "1"},
      {"sim.compute_time", "0.01"}, {"sim.server_ns_per_param", "0"}, {"sim.latency", "0"},
      {"sim.bandwidth", "1e30"}};
  const RunResult free = Sim(base).run("cores_free");
  std::vector<Override> o = base;
  o.push_back({"sim.cores", "2"});
  const RunResult two = Sim(o).run("cores_two");
  EXPECT_NEAR(static_cast<double>(free.gradients), 400, 4);
  EXPECT_NEAR(static_cast<double>(two.gradients), 200, 4);
}

// A straggler's slow-down and delay are spent asleep after its gradient, as
// on threads and mpi (DelayModel::extra_seconds): only the gradient holds
// a core. One core, 10 ms a gradient; worker 0 straggles with a slow-down
// of 11 (100 ms asleep after each of its gradients) and no delay to speak
// of. Worker 1 computes while worker 0 sleeps, so the core is never idle:
// about 100 gradients in 1 s, worker 0's 9 of them. (Holding the core
// through the sleep, the two would alternate: 2 gradients per 120 ms.)
TEST(SimNetwork, AStragglersDelayHoldsNoCore) {
  const std::vector<Override> o = {{"policy.name", "async"},
                                   {"train.workers", "2"},
                                   {"train.budget", "1"},
                                   {"sim.compute_time", "0.01"},
                                   {"sim.server_ns_per_param", "0"},
                                   {"sim.latency", "0"},
                                   {"sim.bandwidth", "1e30"},
                                   {"sim.cores", "1"},
                                   {"stragglers.fraction", "0.5"},
                                   {"stragglers.slowdown", "11"},
                                   {"stragglers.sigma", "1e-9"}};
  const RunResult r = Sim(o).run("cores_straggler");
  EXPECT_NEAR(static_cast<double>(r.gradients), 100, 2);
  ASSERT_EQ(r.worker_pushes.size(), 2u);
  EXPECT_NEAR(static_cast<double>(r.worker_pushes[0]), 9, 1);
  ExpectExactResume(o, "cores_straggler_resume");
}

// Determinism and exact resume with the whole cluster on: a congested
// network (every message shares links), two shards and fewer cores than
// workers, for every policy.
TEST(SimNetwork, DeterministicAndResumesExactlyForEveryPolicyWhenCongested) {
  const std::vector<Override> cluster = {
      {"sim.bandwidth", "2e5"}, {"sim.server_bandwidth", "4e5"}, {"train.servers", "2"},
      {"sim.cores", "3"},       {"stragglers.fraction", "0.5"},  {"stragglers.sigma", "0.05"}};
  for (const char* policy :
       {"sync", "async", "kasync:2", "kbatch:3", "hybrid", "ssp:1", "local:3", "auto"}) {
    std::vector<Override> o = cluster;
    o.push_back({"policy.name", policy});
    if (std::string(policy) == "hybrid") o.push_back({"policy.step", "5"});
    std::string a, b;
    const RunResult ra = Sim(o).run("cong_a", &a);
    const RunResult rb = Sim(o).run("cong_b", &b);
    EXPECT_EQ(a, b) << policy;
    EXPECT_EQ(ra.params, rb.params) << policy;
    EXPECT_GT(ra.gradients, 8) << policy;
    EXPECT_NE(a.find(",net_util"), std::string::npos);
    ExpectExactResume(o, std::string("cong_") + policy);
  }
  // With compression and faults too.
  std::vector<Override> z = cluster;
  z.push_back({"policy.name", "async"});
  z.push_back({"compress.push", "topk:0.1"});
  z.push_back({"compress.pull", "qsgd:16"});
  z.push_back({"compress.sim_ns_per_param", "2"});
  ExpectExactResume(z, "cong_compress");
}

// The model before issue 27 (sim.network = "independent", one server,
// unlimited cores) keeps its own path; it still resumes exactly.
TEST(SimNetwork, IndependentResumesExactly) {
  for (const char* policy : {"sync", "hybrid", "async"}) {
    ExpectExactResume({{"policy.name", policy},
                       {"sim.network", "independent"},
                       {"stragglers.fraction", "0.5"},
                       {"stragglers.sigma", "0.05"}},
                      std::string("indep_") + policy);
  }
}

}  // namespace
}  // namespace hsgd
