// The threads side of the run layer (runtime/worker_crew.h): the controller
// that hogwild and the gossip policies on threads share, tested with plain
// worker loops and no model.
#include "hsgd/runtime/worker_crew.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <functional>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include "hsgd/core/stop.h"

namespace hsgd {
namespace {

namespace fs = std::filesystem;

std::string fresh_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("hsgd_worker_crew_" + name);
  fs::remove_all(d);
  fs::create_directories(d);
  return d.string();
}

Config config(double budget, double eval_every) {
  Config c;
  c.train.budget = budget;
  c.train.eval_every = eval_every;
  return c;
}

// A worker loop of the shape the runtimes have: a step inside the gate,
// `stop` read under the crew's mutex.
struct Steps {
  WorkerCrew& crew;
  std::atomic<int> inside{0};
  std::atomic<int64_t> steps{0};
  std::atomic<int> running{0};

  void work() {
    running.fetch_add(1);
    GateScope scope(crew.gate);
    while (scope.enter()) {
      if (crew.stopped()) break;
      inside.fetch_add(1);
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      steps.fetch_add(1);
      inside.fetch_sub(1);
      scope.exit();
    }
    running.fetch_sub(1);
  }
};

MetricsRow row(double t, double loss) {
  MetricsRow r;
  r.time_s = t;
  r.test_loss = loss;
  r.test_acc = 0.5;
  r.train_loss = loss;
  return r;
}

// One run's parts: the config's schedule and stops, a clock, a recorder in
// a fresh directory, a crew with the worker loop above, and hooks whose
// evaluation records a row of test loss `loss(t)`.
struct Rig {
  Rig(const std::string& name, Config config)
      : c(std::move(config)),
        schedule(c, 100, /*checkpoints=*/false),
        stops(c),
        recorder(fresh_dir(name)) {
    hooks.evaluate = [this](double t) {
      const MetricsRow r = row(t, loss(t));
      crew.record(r, params, &recorder, &observer, stops);
      return r;
    };
    hooks.progress = [](Status*) {};
    hooks.work = [this](int) { steps.work(); };
  }
  WorkerCrew::End run(int workers) {
    return crew.run(workers, clock, schedule, stops, &observer, hooks);
  }
  Config c;
  TrainSchedule schedule;
  RunStops stops;
  TrainClock clock;
  Recorder recorder;
  Observer observer;
  WorkerCrew crew;
  Steps steps{crew};
  std::vector<float> params = std::vector<float>(4, 1.0f);
  std::function<double(double)> loss = [](double) { return 1.0; };
  WorkerCrew::Hooks hooks;
};

TEST(WorkerCrew, EvaluatesOnTheScheduleWithEveryWorkerPausedAndEndsAtTheBudget) {
  Rig g("schedule", config(0.6, 0.2));
  std::vector<double> times;
  std::vector<int> inside_at_eval;
  const auto evaluate = g.hooks.evaluate;
  g.hooks.evaluate = [&](double t) {
    times.push_back(t);
    inside_at_eval.push_back(g.steps.inside.load());
    return evaluate(t);
  };
  const WorkerCrew::End end = g.run(3);
  EXPECT_FALSE(end.at_row);
  EXPECT_DOUBLE_EQ(end.train_s, 0.6);    // clamped to the budget
  EXPECT_EQ(g.steps.running.load(), 0);  // every worker joined
  EXPECT_GT(g.steps.steps.load(), 0);
  // The first row at 0, then one at each multiple of eval_every before the
  // budget (the closing row is the runtime's), each with nobody inside.
  ASSERT_EQ(times.size(), 3u);
  EXPECT_EQ(times[0], 0.0);
  EXPECT_GE(times[1], 0.2);
  EXPECT_LT(times[1], 0.4);
  EXPECT_GE(times[2], 0.4);
  EXPECT_LT(times[2], 0.6);
  for (int n : inside_at_eval) EXPECT_EQ(n, 0);
  EXPECT_EQ(g.recorder.rows().size(), 3u);
}

TEST(WorkerCrew, AnInitialModelThatDivergesIsTheLastRowAndNoWorkerStarts) {
  Rig g("diverged", config(5.0, 0.1));
  g.loss = [](double) { return std::nan(""); };  // a non-finite test loss
  std::atomic<int> started{0};
  g.hooks.work = [&](int) { started.fetch_add(1); };
  const WorkerCrew::End end = g.run(4);
  EXPECT_TRUE(end.at_row);
  EXPECT_TRUE(g.stops.stopped());
  EXPECT_EQ(started.load(), 0);
  EXPECT_LT(end.train_s, 0.01);  // the clock started and stopped at once
  EXPECT_EQ(g.recorder.rows().size(), 1u);
}

TEST(WorkerCrew, AWorkersErrorStopsTheOthersAndIsRethrownAfterTheyAreJoined) {
  Rig g("error", config(30.0, 10.0));
  g.hooks.work = [&](int w) {
    if (w == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      throw std::runtime_error("worker 1 failed");
    }
    g.steps.work();
  };
  const auto t0 = std::chrono::steady_clock::now();
  try {
    g.run(3);
    ADD_FAILURE() << "expected the worker's error";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "worker 1 failed");
    EXPECT_EQ(g.steps.running.load(), 0);  // joined before the rethrow
  }
  // Not at the budget (30 s): the error ended the run.
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
}

TEST(WorkerCrew, AnEvaluationThatThrowsJoinsTheWorkersBeforeTheErrorLeaves) {
  Rig g("eval_error", config(30.0, 0.05));
  int evaluations = 0;
  const auto evaluate = g.hooks.evaluate;
  g.hooks.evaluate = [&](double t) {
    if (++evaluations == 2) throw std::runtime_error("evaluation failed");
    return evaluate(t);
  };
  try {
    g.run(2);
    ADD_FAILURE() << "expected the evaluation's error";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "evaluation failed");
    // The workers use state the runtime unwinds next: none may still run.
    EXPECT_EQ(g.steps.running.load(), 0);
  }
}

TEST(WorkerCrew, AFrontEndsStopRequestEndsTheRunLikeItsBudget) {
  StopRequest request;
  Config c = config(30.0, 10.0);
  c.stop = &request;
  Rig g("request", c);
  std::thread asker([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    request.request("Ctrl-C");
  });
  const WorkerCrew::End end = g.run(2);
  asker.join();
  EXPECT_FALSE(end.at_row);
  EXPECT_LT(end.train_s, 5.0);
  EXPECT_EQ(g.steps.running.load(), 0);
  EXPECT_TRUE(StopRequest::is_request(g.stops.reason()));
}

}  // namespace
}  // namespace hsgd
