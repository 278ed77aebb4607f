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
        schedule(c, 100, /*checkpoints=*/c.train.checkpoint_every > 0),
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
  WorkerCrew::End run(int workers, const WorkerCrew::Resumed* resumed = nullptr) {
    return crew.run(workers, clock, schedule, stops, &observer, hooks, resumed);
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

// Checkpoints at the schedule's times, with every worker paused and after
// the evaluation due at the same time (the checkpoint holds its row).
TEST(WorkerCrew, CheckpointsOnTheScheduleAfterTheRowOfTheSameTime) {
  Config c = config(0.7, 0.2);
  c.train.checkpoint_every = 0.2;
  Rig g("checkpoints", c);
  std::vector<std::pair<char, double>> events;
  std::vector<int> inside_at_cut;
  const auto evaluate = g.hooks.evaluate;
  g.hooks.evaluate = [&](double t) {
    events.push_back({'e', t});
    return evaluate(t);
  };
  g.hooks.checkpoint = [&](double t) {
    events.push_back({'c', t});
    inside_at_cut.push_back(g.steps.inside.load());
  };
  g.run(3);
  // e0, then (e, c) at about 0.2, 0.4, 0.6.
  ASSERT_EQ(events.size(), 7u);
  for (size_t i = 1; i < events.size(); i += 2) {
    EXPECT_EQ(events[i].first, 'e');
    EXPECT_EQ(events[i + 1].first, 'c');
    EXPECT_EQ(events[i + 1].second, events[i].second);
    EXPECT_GE(events[i].second, 0.2 * static_cast<double>((i + 1) / 2));
  }
  for (int n : inside_at_cut) EXPECT_EQ(n, 0);
  EXPECT_GE(g.schedule.next_checkpoint(), 0.8) << "the runtime's schedule is advanced";
}

// A resumed run: no row at 0, the clock from the cut's time; one that had
// ended at its cut starts no worker.
TEST(WorkerCrew, AResumedRunStartsAtItsCut) {
  Rig g("resumed", config(0.5, 0.2));
  g.schedule.start_at(0.3);
  WorkerCrew::Resumed at;
  at.at = 0.3;
  const WorkerCrew::End end = g.run(2, &at);
  EXPECT_DOUBLE_EQ(end.train_s, 0.5);
  EXPECT_GT(g.steps.steps.load(), 0);
  ASSERT_EQ(g.recorder.rows().size(), 1u);  // at 0.4 only
  EXPECT_GE(g.recorder.rows()[0].time_s, 0.4);

  Rig h("resumed_ended", config(0.5, 0.2));
  std::atomic<int> started{0};
  h.hooks.work = [&](int) { started.fetch_add(1); };
  WorkerCrew::Resumed ended;
  ended.at = 0.5;
  ended.ended = true;
  const WorkerCrew::End e = h.run(2, &ended);
  EXPECT_DOUBLE_EQ(e.train_s, 0.5);
  EXPECT_EQ(started.load(), 0);
  EXPECT_TRUE(h.recorder.rows().empty());
}

}  // namespace
}  // namespace hsgd
