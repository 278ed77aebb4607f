// The threads runtime with the plain-C++ linear model (no torch), so this
// test also runs under ThreadSanitizer.
#include "hsgd/runtime/threads_runtime.h"

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <memory>

#include "hsgd/core/error.h"
#include "hsgd/model/linear_model.h"
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
