// The threads runtime with the plain-C++ linear model (no torch), so this
// test also runs under ThreadSanitizer.
#include "hsgd/runtime/threads_runtime.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <memory>
#include <numeric>
#include <thread>

#include "hsgd/checkpoint/checkpoint.h"
#include "hsgd/core/error.h"
#include "hsgd/core/state.h"
#include "hsgd/core/stop.h"
#include "hsgd/model/linear_model.h"
#include "hsgd/runtime/clock.h"
#include "hsgd/runtime/local_steps.h"
#include "hsgd/runtime/row.h"
#include "linear_job.h"

namespace hsgd {
namespace {

namespace fs = std::filesystem;

struct Fixture : testing::LinearJob {
  std::string dir;

  explicit Fixture(const std::string& name, const std::vector<Override>& o = {})
      : LinearJob({{"train.workers", "2"},
                   {"train.batch", "16"},
                   {"train.epochs", "3"},
                   {"train.eval_every", "100"},
                   {"optim.lr", "0.1"},
                   {"policy.step", "5"}},
                  o),
        dir(testing::fresh_dir(name)) {}

  RunResult run() {
    Recorder rec(dir);
    RunResult r = ThreadsRuntime().run(job(), &rec, nullptr);
    rec.finish();
    return r;
  }
};

class EveryPolicy : public ::testing::TestWithParam<std::string> {};

TEST_P(EveryPolicy, LearnsTheSyntheticSetAndStopsAtTheEpochBudget) {
  Fixture f("policy_" + std::to_string(std::hash<std::string>()(GetParam())),
            {{"policy.name", GetParam()}});
  // A single-process baseline: accuracy of the initial model.
  RunResult r = f.run();
  auto rows = read_metrics_csv(f.dir + "/metrics.csv");
  ASSERT_GE(rows.size(), 2u);
  EXPECT_DOUBLE_EQ(rows.front().time_s, 0.0);
  EXPECT_EQ(rows.front().updates, 0);
  EXPECT_GT(r.last.test_acc, rows.front().test_acc + 0.2) << GetParam();
  EXPECT_GE(r.last.samples, static_cast<int64_t>(3 * f.train.size()));
  EXPECT_LT(r.last.samples, static_cast<int64_t>(3 * f.train.size()) + 2 * 16 * 2);
  EXPECT_EQ(r.last.live_workers, 2);
  EXPECT_GT(r.last.updates, 0);
}

INSTANTIATE_TEST_SUITE_P(Threads, EveryPolicy,
                         ::testing::Values("sync", "async", "hybrid", "kasync:1", "kasync:2",
                                           "kbatch:2", "local:4", "ssp:1"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (char& c : s) c = (c == ':') ? '_' : c;
                           return s;
                         });

// Every policy learns on label-skewed shards with a global pool and
// importance sampling (the shared worker loop, compute_push).
TEST_P(EveryPolicy, LearnsOnSkewedShardsWithImportanceSampling) {
  Fixture f("skew_" + std::to_string(std::hash<std::string>()(GetParam())),
            {{"policy.name", GetParam()},
             {"data.partition", "shards"},
             {"data.classes_per_worker", "5"},
             {"data.global_fraction", "0.1"},
             {"sampling.kind", "loss"},
             {"sampling.warmup", "1"}});
  RunResult r = f.run();
  auto rows = read_metrics_csv(f.dir + "/metrics.csv");
  ASSERT_GE(rows.size(), 2u);
  EXPECT_GT(r.last.test_acc, rows.front().test_acc + 0.2) << GetParam();
  EXPECT_GE(r.last.samples, static_cast<int64_t>(3 * f.train.size()));
  EXPECT_GT(r.sampler_cost.batches, 0);
}

TEST(ThreadsRuntime, SyncWithOneWorkerIsSequentialSgdExactly) {
  Fixture f("seq", {{"train.workers", "1"}, {"policy.name", "sync"}, {"train.epochs", "1"}});
  RunResult r = f.run();
  // The same steps by hand: same shard order, same model, plain SGD.
  const std::vector<float> w = f.sequential_sgd_epoch(0.1f, 16);
  ASSERT_EQ(r.params.size(), w.size());
  for (size_t i = 0; i < w.size(); ++i) ASSERT_FLOAT_EQ(r.params[i], w[i]) << i;
}

TEST(ThreadsRuntime, StragglersMakeSyncWorkersIdle) {
  Fixture f("straggle", {{"policy.name", "sync"},
                         {"train.epochs", "0.5"},
                         {"stragglers.fraction", "0.5"},
                         {"stragglers.sigma", "0.002"}});
  RunResult r = f.run();
  EXPECT_GT(r.last.idle_frac, 0.1);
  EXPECT_EQ(r.last.staleness_max, 0);
}

TEST(ThreadsRuntime, AsyncHasStalenessAndNoIdleTime) {
  Fixture f("stale", {{"policy.name", "async"}, {"train.workers", "3"}, {"train.epochs", "1"}});
  RunResult r = f.run();
  EXPECT_DOUBLE_EQ(r.last.idle_frac, 0.0);
}

// Pulls copy the parameters outside the server lock (pinned) while pushes
// wait for the copies in flight; with many workers pulling, the pushes must
// still get through (pulls copy under the lock while a push waits) and each
// policy keep its semantics. A hang here is the test's timeout.
TEST(ThreadsRuntime, ManyWorkersPullingDoNotHoldThePushesOff) {
  for (const char* policy : {"async", "sync"}) {
    Fixture f(std::string("many_") + policy,
              {{"policy.name", policy}, {"train.workers", "16"}, {"train.epochs", "2"}});
    RunResult r = f.run();
    auto rows = read_metrics_csv(f.dir + "/metrics.csv");
    ASSERT_GE(rows.size(), 2u);
    EXPECT_GT(r.last.test_acc, rows.front().test_acc + 0.2) << policy;
    EXPECT_GE(r.last.samples, static_cast<int64_t>(2 * f.train.size())) << policy;
    const int64_t applied =
        std::accumulate(r.staleness_histogram.begin(), r.staleness_histogram.end(), int64_t{0});
    if (std::string(policy) == "async") {
      EXPECT_EQ(r.last.updates, r.gradients) << "async applies every push";
      EXPECT_EQ(applied, r.gradients);
    } else {
      EXPECT_EQ(applied, r.staleness_histogram[0]) << "sync applies only fresh gradients";
      EXPECT_GE(r.gradients - 16 * r.last.updates, 0);
      EXPECT_LT(r.gradients - 16 * r.last.updates, 16);
    }
  }
}

TEST(ThreadsRuntime, TimeBudgetStopsAndEvaluatesPeriodically) {
  Fixture f("budget", {{"train.epochs", "0"},
                       {"train.budget", "0.6"},
                       {"train.eval_every", "0.2"},
                       {"policy.name", "async"}});
  RunResult r = f.run();
  auto rows = read_metrics_csv(f.dir + "/metrics.csv");
  EXPECT_GE(rows.size(), 4u);  // t=0, ~0.2, ~0.4, end
  EXPECT_NEAR(r.train_s, 0.6, 0.3);
  for (size_t i = 1; i < rows.size(); ++i) EXPECT_GE(rows[i].time_s, rows[i - 1].time_s);
}

TEST(ThreadsRuntime, AWorkersErrorIsRethrownAndNothingHangs) {
  for (const char* policy : {"sync", "async"}) {
    Fixture f(std::string("error_") + policy, {{"policy.name", policy}});
    Job j = f.job();
    const int64_t features = f.train.sample_size();
    const int k = f.train.num_classes;
    auto calls = std::make_shared<std::atomic<int>>(0);
    // The evaluator's model (built first) is fine; worker 1's model fails.
    j.make_model = [calls, features, k]() -> std::unique_ptr<Model> {
      if (calls->fetch_add(1) == 2) throw InputError("injected failure");
      return make_linear_model(features, k);
    };
    Recorder rec(f.dir);
    EXPECT_THROW(ThreadsRuntime().run(j, &rec, nullptr), InputError) << policy;
  }
}

}  // namespace
}  // namespace hsgd

namespace hsgd {
namespace {

TEST(ThreadsRuntime, EvaluationPausesDoNotHideTheWorkersTime) {
  // Every gradient is followed by a fixed 0.1 s straggler delay (lognormal
  // with sigma 0), and evaluations come every 0.02 s. The time a pause waits
  // for the workers to finish their step is training: in a 1 s budget each
  // of 2 workers completes at most 1 / 0.1 + 1 steps.
  Fixture f("eval_clock", {{"train.epochs", "0"},
                           {"train.budget", "1"},
                           {"train.eval_every", "0.02"},
                           {"policy.name", "async"},
                           {"stragglers.fraction", "1"},
                           {"stragglers.delay", "lognormal"},
                           {"stragglers.scale", "0.1"},
                           {"stragglers.sigma", "0"}});
  const RunResult r = f.run();
  EXPECT_LE(r.gradients, 2 * (10 + 1));
  EXPECT_GE(r.gradients, 2 * 5);
  const auto rows = read_metrics_csv(f.dir + "/metrics.csv");
  for (size_t i = 1; i < rows.size(); ++i) EXPECT_GE(rows[i].time_s, rows[i - 1].time_s);
  EXPECT_LE(rows.back().time_s, 1.0 + 0.05);
}

TEST(IdleMeter, CountsWaitsInProgressAndOnlyTheirTrainingTime) {
  IdleMeter m;
  m.resize(2);
  m.begin(0, 1.0);
  EXPECT_DOUBLE_EQ(m.total(1.5), 0.5);  // still waiting: counted up to now
  m.end(0, 2.0);
  m.begin(1, 2.0);
  EXPECT_DOUBLE_EQ(m.total(3.0), 2.0);
  m.end(1, 3.0);
  m.end(1, 4.0);  // not waiting: nothing more
  EXPECT_DOUBLE_EQ(m.total(10.0), 2.0);
  EXPECT_DOUBLE_EQ(idle_fraction(1.0, 1.0, 2), 0.5);
  EXPECT_DOUBLE_EQ(idle_fraction(1.0, 0.0, 2), 0.0);
}

TEST(TrainClock, StandsStillWhilePausedAndStartsAtAnOffset) {
  TrainClock c;
  c.start(5.0);
  EXPECT_GE(c.seconds(), 5.0);
  c.pause();
  const double t = c.seconds();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(c.seconds(), t);
  c.resume();
  EXPECT_GE(c.seconds(), t);
  EXPECT_LT(c.seconds(), t + 0.015);
}

std::vector<float> checkpoint_params(const Checkpoint& ck, size_t n) {
  StateReader r(ck.blob("server"), "server");
  r.expect_tag(0x53525652, "server");
  std::vector<float> p = r.get_vec<float>();
  EXPECT_EQ(p.size(), n);
  return p;
}

TEST(ThreadsRuntime, CheckpointsAndResumesWithTheSameOrAnotherWorkerCount) {
  for (const char* policy : {"sync", "async", "hybrid", "ssp:1", "local:2"}) {
    SCOPED_TRACE(policy);
    const std::vector<Override> o = {
        {"train.epochs", "0"},       {"train.budget", "0.4"},
        {"train.eval_every", "0.1"}, {"train.checkpoint_every", "0.15"},
        {"policy.name", policy},     {"optim.kind", "momentum"}};
    Fixture f(std::string("resume_") + (policy[0] == 's' && policy[1] == 's' ? "ssp" : policy), o);
    Job j = f.job();
    j.identity = {config_hash(f.config), "linear-test",
                  static_cast<int64_t>(j.initial_params.size())};
    RunResult r1;
    {
      CheckpointStore store(f.dir, 2);
      j.checkpoints = &store;
      Recorder rec(f.dir);
      r1 = ThreadsRuntime().run(j, &rec, nullptr);
      rec.finish();
      EXPECT_GE(store.written(), 2);
    }
    const Checkpoint ck = CheckpointStore::load_latest(f.dir, j.identity);
    // The final checkpoint holds the final parameters, bit for bit.
    EXPECT_EQ(checkpoint_params(ck, r1.params.size()), r1.params);
    const auto rows1 = read_metrics_csv(f.dir + "/metrics.csv");
    // The final cut is the state at the end of training, before the closing
    // row (as on sim): a longer run resumed from it has no row at 0.4 s.
    ASSERT_GE(rows1.size(), 2u);
    EXPECT_EQ(static_cast<size_t>(ck.info.rows), rows1.size() - 1);
    EXPECT_DOUBLE_EQ(ck.info.train_s, 0.4);
    EXPECT_EQ(ck.info.updates, rows1.back().updates);
    {
      // Resumed with the same budget it trains no more: its closing row is
      // the first run's, evaluated on the restored parameters.
      Fixture h("resume_same_budget", o);
      fs::remove_all(h.dir);
      fs::copy(f.dir, h.dir, fs::copy_options::recursive);
      Job jh = h.job();
      jh.identity = j.identity;
      const Checkpoint ckh = CheckpointStore::load_latest(h.dir, jh.identity);
      jh.resume = &ckh;
      Recorder rec(h.dir, ckh.info.rows);
      const RunResult rh = ThreadsRuntime().run(jh, &rec, nullptr);
      rec.finish();
      EXPECT_EQ(rh.params, r1.params);
      EXPECT_EQ(rh.last.updates, rows1.back().updates);
      EXPECT_EQ(rh.last.samples, rows1.back().samples);
      EXPECT_EQ(rh.train_s, 0.4);
      const auto rowsh = read_metrics_csv(h.dir + "/metrics.csv");
      ASSERT_EQ(rowsh.size(), rows1.size());
      EXPECT_EQ(rowsh.back().test_loss, rows1.back().test_loss);
      EXPECT_EQ(rowsh.back().train_loss, rows1.back().train_loss);
    }
    for (const char* workers : {"2", "3"}) {
      std::vector<Override> o2 = o;
      o2.push_back({"train.budget", "0.8"});
      o2.push_back({"train.workers", workers});
      Fixture g(std::string("resume2_") + workers, o2);
      fs::remove_all(g.dir);
      fs::copy(f.dir, g.dir, fs::copy_options::recursive);
      Job j2 = g.job();
      j2.identity = {config_hash(g.config), "linear-test",
                     static_cast<int64_t>(j2.initial_params.size())};
      const Checkpoint ck2 = CheckpointStore::load_latest(g.dir, j2.identity);
      j2.resume = &ck2;
      RunResult r2;
      {
        Recorder rec(g.dir, ck2.info.rows);
        r2 = ThreadsRuntime().run(j2, &rec, nullptr);
        rec.finish();
      }
      EXPECT_TRUE(r2.stopped.empty());
      const auto rows2 = read_metrics_csv(g.dir + "/metrics.csv");
      ASSERT_GT(rows2.size(), rows1.size());
      for (size_t i = 0; i + 1 < rows1.size(); ++i) EXPECT_EQ(rows2[i].updates, rows1[i].updates);
      // The resumed part starts from the cut: its first row is at or after
      // 0.4 s (an evaluation due at 0.4 s in a longer run is made there),
      // at or past the cut's updates and samples.
      const MetricsRow& next = rows2[rows1.size() - 1];
      EXPECT_GE(next.time_s, 0.4);
      EXPECT_GE(next.updates, ck.info.updates);
      EXPECT_GE(next.samples, rows1.back().samples);
      EXPECT_GT(rows2.back().samples, rows1.back().samples);
      for (size_t i = 1; i < rows2.size(); ++i) EXPECT_GE(rows2[i].time_s, rows2[i - 1].time_s);
      EXPECT_GE(rows2.back().updates, rows1.back().updates);
      EXPECT_NEAR(r2.train_s, 0.8, 0.3);
      EXPECT_GT(r2.last.test_acc, 0.5);
    }
  }
}

// The final cut is consistent (issue 25, defect 8): a push computed but not
// taken when the run stopped is kept in the checkpoint, so the samples the
// samplers handed out equal the server's samples plus the pending pushes'.
// Stragglers make a worker sit in its delay, its batch spent, at the stop.
TEST(ThreadsRuntime, TheFinalCutKeepsThePushesInFlight) {
  const std::vector<Override> o = {{"train.epochs", "0"},       {"train.budget", "0.3"},
                                   {"train.eval_every", "0.1"}, {"train.checkpoint_every", "100"},
                                   {"policy.name", "async"},    {"stragglers.fraction", "1"},
                                   {"stragglers.sigma", "0.05"}};
  int pending_seen = 0;
  for (int round = 0; round < 3; ++round) {
    Fixture f("final_cut_" + std::to_string(round), o);
    Job j = f.job();
    j.identity = {config_hash(f.config), "linear-test",
                  static_cast<int64_t>(j.initial_params.size())};
    CheckpointStore store(f.dir, 1);
    j.checkpoints = &store;
    RunResult r;
    {
      Recorder rec(f.dir);
      r = ThreadsRuntime().run(j, &rec, nullptr);
      rec.finish();
    }
    const Checkpoint ck = CheckpointStore::load_latest(f.dir, j.identity);
    StateReader t(ck.blob("threads"), "threads.bin");
    ASSERT_EQ(t.get<uint32_t>(), 0x54485232u);  // "THR2": with pending pushes
    ASSERT_EQ(t.get<int32_t>(), 2);
    (void)t.get<double>();  // the cut's time
    (void)t.get<double>();  // the pauser's last row time and idle
    (void)t.get<double>();
    int64_t handed_out = 0, pending = 0;
    for (int w = 0; w < 2; ++w) {
      const SamplerState st = read_sampler(t);
      handed_out += st.epoch * make_sampler(j, w).shard_size() + st.position;
      ASSERT_EQ(t.get<uint8_t>(), 0);  // no local-SGD state
      if (t.get<uint8_t>()) {          // a pending push
        ++pending_seen;
        EXPECT_EQ(t.get_vec<float>().size(), j.initial_params.size());
        (void)t.get<uint64_t>();  // version
        pending += t.get<int64_t>();
        (void)t.get<double>();   // loss
        (void)t.get<int64_t>();  // bytes
      }
    }
    EXPECT_EQ(handed_out, r.last.samples + pending) << "round " << round;
  }
  EXPECT_GT(pending_seen, 0);  // the case the test is about happened
}

// A front end's stop (Config::stop, core/stop.h): one made by the observer
// at an evaluation ends the run with that row; one made from another thread
// while training (Ctrl-C) ends it after the next push, with a closing row
// and a final checkpoint.
TEST(ThreadsRuntime, AFrontEndsStopEndsTheRunAtItsRowOrAfterThePush) {
  struct StopAtRow final : Observer {
    StopRequest* stop;
    int rows = 0;
    explicit StopAtRow(StopRequest* s) : stop(s) {}
    void on_row(const MetricsRow&) override {
      if (++rows == 3) stop->request("the callback returned False", /*at_evaluation=*/true);
    }
  };
  Fixture f("stop_at_row", {{"train.epochs", "0"},
                            {"train.budget", "100"},
                            {"train.eval_every", "0.1"},
                            {"policy.name", "async"}});
  StopRequest at_row;
  f.config.stop = &at_row;
  StopAtRow observer(&at_row);
  {
    Recorder rec(f.dir);
    const RunResult r = ThreadsRuntime().run(f.job(), &rec, &observer);
    rec.finish();
    EXPECT_EQ(r.stopped, "stopped by request: the callback returned False");
    EXPECT_EQ(read_metrics_csv(f.dir + "/metrics.csv").size(), 3u);  // that row is the last
    EXPECT_LT(r.train_s, 5.0);
  }

  Fixture g("stop_between", {{"train.epochs", "0"},
                             {"train.budget", "100"},
                             {"train.eval_every", "100"},
                             {"train.checkpoint_every", "100"},
                             {"policy.name", "async"}});
  StopRequest interrupt;
  g.config.stop = &interrupt;
  std::thread ctrl_c([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    interrupt.request("KeyboardInterrupt");
  });
  CheckpointStore store(g.dir, 2);
  Job j = g.job();
  j.checkpoints = &store;
  Recorder rec(g.dir);
  const RunResult r = ThreadsRuntime().run(j, &rec, nullptr);
  rec.finish();
  ctrl_c.join();
  EXPECT_EQ(r.stopped, "stopped by request: KeyboardInterrupt");
  EXPECT_LT(r.train_s, 5.0);
  EXPECT_EQ(read_metrics_csv(g.dir + "/metrics.csv").size(), 2u);  // t = 0 and the closing row
  EXPECT_EQ(store.written(), 1);                                   // the final checkpoint
}

TEST(ThreadsRuntime, DivergenceStopsTheRunWithAReason) {
  Fixture f("diverge", {{"policy.name", "async"},
                        {"optim.lr", "1e38"},
                        {"optim.kind", "momentum"},
                        {"train.eval_every", "0.05"}});
  const RunResult r = f.run();
  EXPECT_NE(r.stopped.find("training diverged"), std::string::npos) << r.stopped;
}

}  // namespace
}  // namespace hsgd

namespace hsgd {
namespace {

// [compress] on threads: the worker really encodes its push (error
// feedback) and decodes its pull; the server decodes and aggregates.
TEST(ThreadsRuntime, CompressedPushAndPullLearnAndCountTheirBytes) {
  for (const auto& [push, pull] : std::vector<std::pair<std::string, std::string>>{
           {"topk:0.1", "qsgd:16"}, {"sign", "none"}, {"powersgd:1", "fp16"}}) {
    Fixture f("threads_compress_" + push.substr(0, 4),
              {{"policy.name", "async"}, {"compress.push", push}, {"compress.pull", pull}});
    RunResult r;
    {
      Recorder rec(f.dir, true);
      r = ThreadsRuntime().run(f.job(), &rec, nullptr);
      rec.finish();
    }
    const auto rows = read_metrics_csv(f.dir + "/metrics.csv");
    ASSERT_GE(rows.size(), 2u);
    EXPECT_TRUE(rows.back().has_compress);
    EXPECT_GT(r.last.test_acc, rows.front().test_acc + 0.2) << push;
    ASSERT_TRUE(r.compress_on);
    const int64_t plain = 4 * static_cast<int64_t>(r.params.size());
    EXPECT_GT(r.compress.bytes_pushed, 0);
    EXPECT_LT(r.compress.bytes_pushed, r.gradients * plain) << push;
    if (pull == "none") {
      EXPECT_EQ(r.compress.bytes_pulled % plain, 0);
    } else {
      EXPECT_LT(r.compress.bytes_pulled, r.gradients * plain) << pull;
    }
    EXPECT_GT(r.compress.compress_s, 0.0);
    EXPECT_EQ(rows.back().bytes_pushed, r.compress.bytes_pushed);
  }
}

}  // namespace
}  // namespace hsgd

namespace hsgd {
namespace {

// [compress] state (residuals, held copies, byte counters) goes into threads
// checkpoints; a resume with the same worker count continues them, with
// another count starts them afresh, and both go on learning.
//
// Continues them exactly: one worker under sync is sequential SGD on threads
// too, so a run resumed from its own mid-run checkpoint must end with the
// same parameters, bit for bit, as the run itself. A residual, a held copy
// or a message round reset on resume changes every push after it.
TEST(ThreadsRuntime, CheckpointsCarryTheCompressionState) {
  {
    const std::vector<Override> one = {{"train.workers", "1"},
                                       {"train.epochs", "2"},
                                       {"train.checkpoint_every", "0.03"},
                                       {"policy.name", "sync"},
                                       {"stragglers.fraction", "1"},
                                       {"stragglers.sigma", "0.001"},  // ~0.2 s in all
                                       {"compress.push", "topk:0.2"},
                                       {"compress.pull", "sign"}};
    Fixture f("resume_compress_exact", one);
    Job j = f.job();
    j.identity = {config_hash(f.config), "linear-test",
                  static_cast<int64_t>(j.initial_params.size())};
    RunResult r1;
    {
      CheckpointStore store(f.dir, 100);
      j.checkpoints = &store;
      Recorder rec(f.dir, true);
      r1 = ThreadsRuntime().run(j, &rec, nullptr);
      rec.finish();
    }
    // The first cut, well inside the run (not the final one).
    const std::vector<std::string> cuts = CheckpointStore::list(f.dir);
    ASSERT_GE(cuts.size(), 2u);
    const Checkpoint ck = CheckpointStore::load(cuts.back(), j.identity);
    ASSERT_GT(ck.info.updates, 0);
    ASSERT_LT(ck.info.updates, r1.last.updates);
    Fixture g("resume_compress_exact2", one);
    fs::remove_all(g.dir);
    fs::copy(f.dir, g.dir, fs::copy_options::recursive);
    Job j2 = g.job();
    j2.identity = j.identity;
    j2.resume = &ck;
    RunResult r2;
    {
      Recorder rec(g.dir, ck.info.rows, true);
      r2 = ThreadsRuntime().run(j2, &rec, nullptr);
      rec.finish();
    }
    EXPECT_EQ(r2.last.updates, r1.last.updates);
    ASSERT_EQ(r2.params.size(), r1.params.size());
    EXPECT_EQ(r2.params, r1.params) << "resumed at update " << ck.info.updates;
    EXPECT_EQ(r2.compress.bytes_pushed, r1.compress.bytes_pushed);
  }
  const std::vector<Override> o = {{"train.epochs", "0"},       {"train.budget", "0.4"},
                                   {"train.eval_every", "0.1"}, {"train.checkpoint_every", "0.15"},
                                   {"policy.name", "async"},    {"compress.push", "topk:0.2"},
                                   {"compress.pull", "sign"}};
  Fixture f("resume_compress", o);
  Job j = f.job();
  j.identity = {config_hash(f.config), "linear-test",
                static_cast<int64_t>(j.initial_params.size())};
  RunResult r1;
  {
    CheckpointStore store(f.dir, 2);
    j.checkpoints = &store;
    Recorder rec(f.dir, true);
    r1 = ThreadsRuntime().run(j, &rec, nullptr);
    rec.finish();
  }
  ASSERT_GT(r1.compress.bytes_pushed, 0);
  for (const char* workers : {"2", "3"}) {
    std::vector<Override> o2 = o;
    o2.push_back({"train.budget", "0.8"});
    o2.push_back({"train.workers", workers});
    Fixture g(std::string("resume_compress2_") + workers, o2);
    fs::remove_all(g.dir);
    fs::copy(f.dir, g.dir, fs::copy_options::recursive);
    Job j2 = g.job();
    j2.identity = {config_hash(g.config), "linear-test",
                   static_cast<int64_t>(j2.initial_params.size())};
    const Checkpoint ck2 = CheckpointStore::load_latest(g.dir, j2.identity);
    j2.resume = &ck2;
    RunResult r2;
    {
      Recorder rec(g.dir, ck2.info.rows, true);
      r2 = ThreadsRuntime().run(j2, &rec, nullptr);
      rec.finish();
    }
    EXPECT_TRUE(r2.stopped.empty());
    // The counters continue from the checkpoint's.
    EXPECT_GE(r2.compress.bytes_pushed, r1.compress.bytes_pushed) << workers;
    EXPECT_GT(r2.last.test_acc, 0.5) << workers;
    const auto rows = read_metrics_csv(g.dir + "/metrics.csv");
    for (size_t i = 1; i < rows.size(); ++i) {
      EXPECT_GE(rows[i].bytes_pushed, rows[i - 1].bytes_pushed);
    }
  }
}

}  // namespace
}  // namespace hsgd

namespace hsgd {
namespace {

// The linear model, but its `at`-th gradient (counted over every instance)
// is NaN in every coordinate, as a blown-up batch gives; its loss is finite,
// so only the gradient tells the server to drop the push.
class NanOnce final : public Model {
 public:
  NanOnce(std::unique_ptr<Model> m, std::shared_ptr<std::atomic<int>> calls, int at)
      : m_(std::move(m)), calls_(std::move(calls)), at_(at) {}
  int64_t num_params() const override { return m_->num_params(); }
  std::vector<std::vector<int64_t>> param_shapes() const override { return m_->param_shapes(); }
  void bind(std::span<float> params, std::span<float> grads) override {
    grads_ = grads;
    m_->bind(params, grads);
  }
  void init_params(uint64_t seed) override { m_->init_params(seed); }
  double gradient(const Batch& batch, std::span<float> losses) override {
    const double loss = m_->gradient(batch, losses);
    if (calls_->fetch_add(1) == at_) std::fill(grads_.begin(), grads_.end(), std::nanf(""));
    return loss;
  }
  EvalResult evaluate(const Dataset& data) override { return m_->evaluate(data); }

 private:
  std::unique_ptr<Model> m_;
  std::shared_ptr<std::atomic<int>> calls_;
  const int at_;
  std::span<float> grads_;
};

// Issue 25, defect 3, end to end: with error feedback on (topk), one NaN
// gradient is the one push the server drops, and its worker goes on
// contributing. Before, its residual became NaN (NaN - NaN) and every later
// push of that worker was dropped as well.
TEST(ThreadsRuntime, OneNanGradientCostsItsWorkerOnlyThatPush) {
  // Delayed gradients (~0.8 ms each): both workers push all along.
  Fixture f("nan_once", {{"policy.name", "async"},
                         {"train.epochs", "2"},
                         {"stragglers.fraction", "1"},
                         {"stragglers.sigma", "0.001"},
                         {"compress.push", "topk:0.1"}});
  Job j = f.job();
  auto calls = std::make_shared<std::atomic<int>>(0);
  const int64_t features = f.train.sample_size();
  const int classes = f.train.num_classes;
  j.make_model = [=] {
    return std::make_unique<NanOnce>(make_linear_model(features, classes), calls, 5);
  };
  RunResult r;
  {
    Recorder rec(f.dir, true);
    r = ThreadsRuntime().run(j, &rec, nullptr);
    rec.finish();
  }
  ASSERT_GT(calls->load(), 50);
  EXPECT_TRUE(r.stopped.empty()) << r.stopped;
  int64_t nonfinite = 0;
  for (const MetricsRow& row : read_metrics_csv(f.dir + "/metrics.csv")) nonfinite += row.nonfinite;
  EXPECT_EQ(nonfinite, 1);
  ASSERT_EQ(r.worker_pushes.size(), 2u);
  EXPECT_GT(std::min(r.worker_pushes[0], r.worker_pushes[1]), 20);
  for (float v : r.params) ASSERT_TRUE(std::isfinite(v));
  EXPECT_GT(r.last.test_acc, 0.5);
}

}  // namespace
}  // namespace hsgd
