// The simulator's parallel gradient engine: the pool gives the same pushes
// as one thread (SimCompute on its own, then whole simulated runs of every
// policy, with mitigations, local:H, importance sampling and resumes from
// checkpoints), snapshots are shared per version, errors reach the caller.
// Plain-C++ linear model: also runs under ThreadSanitizer.
#include "hsgd/runtime/sim_compute.h"

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>
#include <stdexcept>

#include "hsgd/checkpoint/checkpoint.h"
#include "hsgd/model/linear_model.h"
#include "hsgd/runtime/local_steps.h"
#include "hsgd/runtime/sim_runtime.h"
#include "linear_job.h"
#include "test_helpers.h"

namespace hsgd {
namespace {

using testing_helpers::slurp;

namespace fs = std::filesystem;

// A kernel over per-worker samplers of the synthetic set: the simulator's
// compute() without the simulator. Counts calls and can fail on demand.
struct SamplerKernel : PushKernel {
  SamplerKernel(const Dataset& d, int workers) {
    for (int w = 0; w < workers; ++w) samplers.emplace_back(d, w, workers, 7);
  }
  double compute(int w, Model& model, std::span<float> params, std::span<float> grads,
                 Batch* scratch, int64_t* samples) override {
    calls.fetch_add(1);
    if (w == fail_worker) throw std::runtime_error("kernel failed");
    {
      std::lock_guard<std::mutex> lock(mu);
      param_ptrs.push_back(params.data());
    }
    return compute_push(model, params, grads, samplers[static_cast<size_t>(w)], 8, nullptr, 0,
                        scratch, samples);
  }
  bool writes_params() const override { return writes; }
  std::vector<ShardSampler> samplers;
  std::atomic<int> calls{0};
  int fail_worker = -1;
  bool writes = true;  // false: the engine may read snapshots in place
  std::mutex mu;
  std::vector<const float*> param_ptrs;  // where each call read its parameters
};

struct Fixture {
  Fixture() {
    SyntheticOptions so;
    so.samples = 400;
    split_train_test(make_synthetic(so), 0.2, 1, &train, &test);
    const int64_t f = train.sample_size();
    const int k = train.num_classes;
    make = [f, k] { return make_linear_model(f, k); };
    params = initial_params(make, 1);
  }
  Dataset train, test;
  ModelFactory make;
  std::vector<float> params;
};

// Pushes of `workers` workers over `rounds` rounds of requests (worker w's
// parameters at a version that changes every `same` workers), taken in an
// order that is not the request order.
// in_place: the kernel does not write its parameters and the model is read
// in place whatever its size.
std::vector<std::vector<float>> pushes(int threads, int window, int workers, int rounds, int same,
                                       size_t* peak_snapshots = nullptr, bool in_place = false) {
  Fixture fx;
  SamplerKernel kernel(fx.train, workers);
  kernel.writes = !in_place;
  SimCompute compute(threads, workers, fx.params.size(), fx.make, &kernel, window,
                     in_place ? 0 : SimCompute::kInPlaceFrom);
  std::vector<std::vector<float>> out;
  std::vector<float> p = fx.params;
  for (int r = 0; r < rounds; ++r) {
    for (int w = 0; w < workers; ++w) {
      const uint64_t version = static_cast<uint64_t>(r * workers + w / same);
      if (w % same == 0) {
        for (float& x : p) x += 1e-3f * static_cast<float>(version % 7 + 1);  // a new version
      }
      compute.request(w, p, version, /*due=*/static_cast<double>((w * 5) % workers));
    }
    for (int i = 0; i < workers; ++i) {
      const int w = workers - 1 - i;  // the last due first
      const PushResult res = compute.take(w);
      out.emplace_back(res.grads.begin(), res.grads.end());
      out.back().push_back(static_cast<float>(res.loss));
      out.back().push_back(static_cast<float>(res.samples));
      compute.finish(w);
    }
  }
  if (peak_snapshots) *peak_snapshots = compute.peak_snapshots();
  compute.stop();
  EXPECT_EQ(compute.live_snapshots(), 0u);
  return out;
}

TEST(SimCompute, PoolGivesTheSamePushesAsOneThread) {
  const auto one = pushes(1, 0, 6, 3, 1);
  for (int threads : {2, 3}) {
    for (int window : {1, 2, 16}) {
      EXPECT_EQ(pushes(threads, window, 6, 3, 1), one) << threads << " threads, window " << window;
    }
  }
}

// Large models read the snapshot in place and write the push into the
// buffer the loop takes: the same pushes as copies, for any thread count.
TEST(SimCompute, InPlacePushesAreThePushesOfCopies) {
  const auto one = pushes(1, 0, 6, 3, 1);
  for (int threads : {1, 2, 3}) {
    for (int window : {1, 16}) {
      EXPECT_EQ(pushes(threads, window, 6, 3, 2, nullptr, true), pushes(1, 0, 6, 3, 2))
          << threads << " threads, window " << window;
    }
  }
  EXPECT_EQ(pushes(2, 0, 6, 3, 1, nullptr, true), one);
}

// In place, a model reads the snapshot of the version its worker pulled
// (workers of one version: one buffer; two versions: two); copying, a model
// reads its own buffer whatever the version.
TEST(SimCompute, InPlaceReadsTheSnapshotCopiesReadTheModelsBuffer) {
  Fixture fx;
  std::vector<float> other = fx.params;
  other[0] += 1;
  auto where = [&](int threads, bool writes, size_t from, std::vector<uint64_t> versions) {
    const int n = static_cast<int>(versions.size());
    SamplerKernel kernel(fx.train, n);
    kernel.writes = writes;
    SimCompute compute(threads, n, fx.params.size(), fx.make, &kernel, 0, from);
    for (int w = 0; w < n; ++w) {
      compute.request(w, versions[static_cast<size_t>(w)] == 1 ? fx.params : other,
                      versions[static_cast<size_t>(w)], w);
    }
    compute.settle_all();  // every request pending at once: their snapshots all alive
    for (int w = 0; w < n; ++w) EXPECT_EQ(compute.take(w).samples, 8);
    return std::set<const float*>(kernel.param_ptrs.begin(), kernel.param_ptrs.end()).size();
  };
  EXPECT_EQ(where(2, false, 0, {1, 1, 1, 1}), 1u);  // one version, one snapshot, 3 models
  EXPECT_EQ(where(1, false, 0, {1, 2}), 2u);        // two versions, two snapshots
  EXPECT_EQ(where(1, false, SimCompute::kInPlaceFrom, {1, 2}), 1u);  // small: a copy
  EXPECT_EQ(where(1, true, 0, {1, 2}), 1u);  // a kernel that writes them (local:H): a copy
}

TEST(SimCompute, SnapshotsAreSharedByWorkersThatPulledTheSameVersion) {
  size_t peak_shared = 0, peak_distinct = 0;
  // Window 1: most requests wait, holding their snapshot.
  pushes(2, 1, 8, 2, 8, &peak_shared);  // all 8 workers pull one version per round
  pushes(2, 1, 8, 2, 1, &peak_distinct);
  EXPECT_LE(peak_shared, 3u);  // this round's, at most the last round's, the cached one
  EXPECT_GT(peak_distinct, peak_shared);
  // In place, a snapshot lives until its pushes are computed, not started.
  pushes(2, 1, 8, 2, 8, &peak_shared, true);
  pushes(2, 1, 8, 2, 1, &peak_distinct, true);
  EXPECT_LE(peak_shared, 3u);
  EXPECT_GT(peak_distinct, peak_shared);
}

TEST(SimCompute, FinishComputesAPushNotStartedAndSettleAllComputesEverything) {
  Fixture fx;
  SamplerKernel kernel(fx.train, 4);
  SimCompute compute(2, 4, fx.params.size(), fx.make, &kernel, 1);
  for (int w = 0; w < 4; ++w) compute.request(w, fx.params, 0, w);
  compute.finish(3);  // dropped, but computed: its sampler advanced
  EXPECT_FALSE(compute.outstanding(3));
  compute.settle_all();
  EXPECT_EQ(kernel.calls.load(), 4);
  for (int w = 0; w < 3; ++w) EXPECT_TRUE(compute.outstanding(w));
  EXPECT_EQ(kernel.samplers[3].state().position, kernel.samplers[0].state().position);
  // stop() drops nothing computed: the pushes can still be taken.
  compute.stop();
  EXPECT_EQ(compute.take(1).samples, 8);
}

TEST(SimCompute, AnErrorOfThePoolIsRethrownByTake) {
  Fixture fx;
  SamplerKernel kernel(fx.train, 3);
  kernel.fail_worker = 1;
  for (int threads : {1, 2}) {
    SimCompute compute(threads, 3, fx.params.size(), fx.make, &kernel);
    for (int w = 0; w < 3; ++w) compute.request(w, fx.params, 0, 0);
    EXPECT_NO_THROW(compute.take(0));
    EXPECT_THROW(compute.take(1), std::runtime_error);
    compute.finish(1);
    EXPECT_NO_THROW(compute.take(2));
  }
}

TEST(SimCompute, AModelThatCannotBeBuiltFailsTheConstructor) {
  Fixture fx;
  SamplerKernel kernel(fx.train, 2);
  std::atomic<int> built{0};
  ModelFactory bad = [&]() -> std::unique_ptr<Model> {
    if (built++ > 0) throw std::runtime_error("no model");
    return fx.make();
  };
  EXPECT_THROW(SimCompute(2, 2, fx.params.size(), bad, &kernel), std::runtime_error);
}

// ---- whole simulated runs

struct Sim : testing::LinearJob {
  explicit Sim(const std::vector<Override>& o)
      : LinearJob({{"train.runtime", "sim"},
                   {"train.workers", "6"},
                   {"train.batch", "16"},
                   {"train.budget", "1.5"},
                   {"train.eval_every", "0.25"},
                   {"optim.lr", "0.1"},
                   {"policy.step", "20"},
                   {"sim.compute_time", "0.01"},
                   {"sim.server_ns_per_param", "100"},
                   {"sim.latency", "0.0005"},
                   {"sim.bandwidth", "1e8"},
                   {"stragglers.fraction", "0.5"},
                   {"stragglers.sigma", "0.05"}},
                  o, 2000) {}

  RunResult run(const std::string& name, std::string* csv) {
    const std::string dir = testing::fresh_dir("simc_" + name);
    RunResult r;
    {
      Recorder rec(dir);
      r = SimRuntime().run(job(), &rec, nullptr);
      rec.finish();
    }
    *csv = slurp(dir + "/metrics.csv");
    return r;
  }
};

std::vector<Override> with(std::vector<Override> o, const std::string& k, const std::string& v) {
  o.push_back({k, v});
  return o;
}

const std::vector<std::pair<std::string, std::vector<Override>>>& cases() {
  static const std::vector<std::pair<std::string, std::vector<Override>>> c = {
      {"sync", {{"policy.name", "sync"}}},
      {"async", {{"policy.name", "async"}, {"optim.kind", "momentum"}}},
      {"kasync", {{"policy.name", "kasync:2"}, {"optim.kind", "adam"}, {"optim.lr", "0.01"}}},
      {"kbatch", {{"policy.name", "kbatch:3"}}},
      {"hybrid", {{"policy.name", "hybrid"}}},
      {"hybrid_adaptive", {{"policy.name", "hybrid"}, {"policy.schedule", "adaptive"}}},
      {"ssp", {{"policy.name", "ssp:1"}}},
      {"local", {{"policy.name", "local:3"}, {"local.momentum", "0.9"}}},
      {"local_async", {{"policy.name", "local:2"}, {"local.async", "true"}}},
      {"mitigated",
       {{"policy.name", "async"},
        {"staleness.dc_asgd", "true"},
        {"staleness.gap_aware", "true"},
        {"staleness.scaled_lr", "true"},
        {"staleness.tau_max", "4"}}},
      {"skewed_importance",
       {{"policy.name", "async"},
        {"data.partition", "dirichlet"},
        {"data.alpha", "0.1"},
        {"data.global_fraction", "0.1"},
        {"sampling.kind", "loss"},
        {"sampling.warmup", "0"}}},
      // Workers killed, failing and rejoining (issue 10): a leaver's gradient
      // in the making is finished and dropped the same way for any count.
      {"churn",
       {{"policy.name", "kasync:2"},
        {"faults.kill_rate", "20"},
        {"faults.rejoin_after", "0.2"},
        {"faults.exception_rate", "0.02"}}},
      // Compression (issue 14): a compressed push is computed at its pull;
      // a compressed pull's parameters are the worker's own snapshot.
      // (A fixed compression cost: calibrating it would time this machine.)
      {"compress_push",
       {{"policy.name", "async"},
        {"compress.push", "topk:0.2"},
        {"compress.sim_ns_per_param", "2"}}},
      {"compress_pull",
       {{"policy.name", "hybrid"},
        {"compress.pull", "fp16"},
        {"compress.push", "sign"},
        {"compress.sim_ns_per_param", "2"}}},
      {"compress_pull_only",
       {{"policy.name", "async"}, {"compress.pull", "bf16"}, {"compress.sim_ns_per_param", "2"}}},
  };
  return c;
}

TEST(SimThreads, EveryPolicyGivesTheSameCsvAndParametersForAnyThreadCount) {
  for (const auto& [name, o] : cases()) {
    std::string csv1;
    const RunResult r1 = Sim(with(o, "sim.threads", "1")).run(name + "_t1", &csv1);
    EXPECT_GT(r1.gradients, 50) << name;
    for (const char* t : {"2", "3"}) {
      std::string csv;
      const RunResult r = Sim(with(o, "sim.threads", t)).run(name + "_t" + t, &csv);
      EXPECT_EQ(csv, csv1) << name << " threads " << t;
      EXPECT_EQ(r.params, r1.params) << name << " threads " << t;
      EXPECT_EQ(r.staleness_histogram, r1.staleness_histogram) << name;
      EXPECT_EQ(r.worker_pushes, r1.worker_pushes) << name;
    }
  }
}

// Checkpoints written with one thread count resume under another, byte for
// byte as the uninterrupted run.
TEST(SimThreads, ResumeUnderAnotherThreadCountIsByteExact) {
  for (const std::string name :
       {"async", "sync", "local", "skewed_importance", "churn", "compress_pull"}) {
    std::vector<Override> o;
    for (const auto& c : cases()) {
      if (c.first == name) o = c.second;
    }
    SCOPED_TRACE(name);
    std::string whole;
    const RunResult a = Sim(with(with(o, "sim.threads", "2"), "train.budget", "1.5"))
                            .run("resume_whole_" + name, &whole);
    const std::string dir = testing::fresh_dir("simc_resume_" + name);
    auto run_part = [&](const std::string& threads, const std::string& budget, bool resume) {
      Sim s(with(with(with(o, "sim.threads", threads), "train.budget", budget),
                 "train.checkpoint_every", "0.4"));
      Job j = s.job();
      j.identity = {config_hash(s.config), "linear-test",
                    static_cast<int64_t>(j.initial_params.size())};
      Checkpoint ck;
      if (resume) {
        ck = CheckpointStore::load_latest(dir, j.identity);
        j.resume = &ck;
      }
      CheckpointStore store(dir, 2);
      j.checkpoints = &store;
      std::unique_ptr<Recorder> rec =
          resume ? std::make_unique<Recorder>(dir, ck.info.rows) : std::make_unique<Recorder>(dir);
      RunResult r = SimRuntime().run(j, rec.get(), nullptr);
      rec->finish();
      return r;
    };
    run_part("3", "0.7", false);
    const RunResult b = run_part("1", "1.5", true);
    EXPECT_EQ(slurp(dir + "/metrics.csv"), whole);
    EXPECT_EQ(b.params, a.params);
    EXPECT_EQ(b.worker_pushes, a.worker_pushes);
  }
}

TEST(SimThreads, ThreadsIsValidatedAndLeftOutOfTheConfigHash) {
  EXPECT_THROW(load_config("", {{"train.budget", "1"}, {"sim.threads", "-1"}}), InputError);
  EXPECT_EQ(config_hash(load_config("", {{"train.budget", "1"}, {"sim.threads", "1"}})),
            config_hash(load_config("", {{"train.budget", "1"}, {"sim.threads", "2"}})));
}

}  // namespace
}  // namespace hsgd
