// Hogwild on worker threads, with the plain-C++ linear model (so this test
// also runs under ThreadSanitizer, which must find no race: see
// hogwild_runtime.h).
#include "hsgd/runtime/hogwild_runtime.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "hsgd/core/error.h"
#include "hsgd/model/linear_model.h"
#include "linear_job.h"

namespace hsgd {
namespace {

namespace fs = std::filesystem;

struct Hog : testing::LinearJob {
  std::string dir;

  explicit Hog(const std::string& name, const std::vector<Override>& o = {})
      : LinearJob({{"policy.name", "hogwild"},
                   {"train.workers", "2"},
                   {"train.batch", "16"},
                   {"train.epochs", "3"},
                   {"train.eval_every", "100"},
                   {"optim.lr", "0.1"}},
                  o),
        dir(testing::fresh_dir("hogwild_" + name)) {}

  RunResult run() {
    Recorder rec(dir);
    RunResult r = make_runtime(config)->run(job(), &rec, nullptr);
    rec.finish();
    return r;
  }
};

TEST(Hogwild, TwoWorkersLearnWithoutLocks) {
  Hog h("learn");
  RunResult r = h.run();
  auto rows = read_metrics_csv(h.dir + "/metrics.csv");
  ASSERT_GE(rows.size(), 2u);
  EXPECT_EQ(rows.back().policy, "hogwild");
  EXPECT_GT(r.last.test_acc, rows.front().test_acc + 0.2);
  EXPECT_GE(r.last.samples, 3 * h.train.size());
  EXPECT_EQ(r.gradients, r.last.updates);
}

TEST(Hogwild, OneWorkerIsSequentialSgdExactly) {
  Hog h("seq", {{"train.workers", "1"}, {"train.epochs", "1"}});
  RunResult r = h.run();
  Job j = h.job();
  auto model = j.make_model();
  std::vector<float> w = j.initial_params, g(w.size());
  model->bind(w, g);
  ShardSampler sampler(h.train, 0, 1, h.config.train.seed);
  Batch b;
  for (int64_t seen = 0; seen < h.train.size(); seen += 16) {
    sampler.next(16, &b);
    model->gradient(b);
    for (size_t i = 0; i < w.size(); ++i) w[i] = w[i] - 0.1f * (g[i] + 0.0f * w[i]);
  }
  ASSERT_EQ(r.params.size(), w.size());
  for (size_t i = 0; i < w.size(); ++i) ASSERT_FLOAT_EQ(r.params[i], w[i]) << i;
}

TEST(Hogwild, TimeBudgetAndStragglers) {
  Hog h("budget", {{"train.epochs", "0"},
                   {"train.budget", "0.5"},
                   {"train.eval_every", "0.2"},
                   {"stragglers.fraction", "0.5"},
                   {"stragglers.sigma", "0.002"}});
  RunResult r = h.run();
  EXPECT_NEAR(r.train_s, 0.5, 0.3);
  EXPECT_GE(read_metrics_csv(h.dir + "/metrics.csv").size(), 3u);
}

TEST(Hogwild, RefusedOutsideTheThreadsRuntimeAndWithMomentum) {
  auto error = [](std::vector<Override> o) {
    o.insert(o.begin(), {{"policy.name", "hogwild"}, {"train.budget", "1"}});
    try {
      load_config("", o);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error({{"train.runtime", "sim"}}).find("threads runtime only"), std::string::npos);
  EXPECT_NE(error({{"optim.kind", "momentum"}}).find("expected sgd"), std::string::npos);
  EXPECT_EQ(error({}), "");
}

}  // namespace
}  // namespace hsgd
