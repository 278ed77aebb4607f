// The run layer's rules (runtime/run_control.h): the schedule and the stops
// every runtime shares, tested without a runtime.
#include "hsgd/runtime/run_control.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "hsgd/core/stop.h"

namespace hsgd {
namespace {

Config config(double budget, double epochs, double eval_every, double checkpoint_every) {
  Config c;
  c.train.budget = budget;
  c.train.epochs = epochs;
  c.train.eval_every = eval_every;
  c.train.checkpoint_every = checkpoint_every;
  return c;
}

TEST(TrainSchedule, BudgetEpochsAndTheTimesOfEvaluationsAndCheckpoints) {
  const Config c = config(2.0, 1.5, 0.5, 0.75);
  TrainSchedule s(c, 1000, /*checkpoints=*/true);
  EXPECT_EQ(s.budget(), 2.0);
  EXPECT_FALSE(s.past_budget(1.999));
  EXPECT_TRUE(s.past_budget(2.0));  // a push at the budget is not training
  EXPECT_EQ(s.clamp(2.5), 2.0);
  EXPECT_EQ(s.clamp(1.5), 1.5);
  EXPECT_EQ(s.epoch_samples(), 1500);
  EXPECT_FALSE(s.epochs_done(1499));
  EXPECT_TRUE(s.epochs_done(1500));
  EXPECT_EQ(s.next_eval(), 0.5);
  EXPECT_EQ(s.next_checkpoint(), 0.75);
  EXPECT_FALSE(s.eval_due(0.49));
  EXPECT_TRUE(s.eval_due(0.5));
  s.eval_done(1.2);  // past several: the next after 1.2
  EXPECT_EQ(s.next_eval(), 1.5);
  s.checkpoint_done(0.75);
  EXPECT_EQ(s.next_checkpoint(), 1.5);
  s.eval_done(1.5);
  s.checkpoint_done(1.5);
  // Nothing periodic falls at or after the budget: the closing row is the
  // runtime's.
  EXPECT_EQ(s.next_eval(), 2.0);
  EXPECT_FALSE(s.eval_due(2.0));
  EXPECT_FALSE(s.checkpoint_due(5.0));
}

TEST(TrainSchedule, NoBudgetNoEpochsNoCheckpointsWithoutAStore) {
  const Config c = config(0, 0, 1.0, 0.5);
  const TrainSchedule s(c, 100, /*checkpoints=*/false);
  EXPECT_FALSE(std::isfinite(s.budget()));
  EXPECT_FALSE(s.past_budget(1e12));
  EXPECT_EQ(s.epoch_samples(), 0);
  EXPECT_FALSE(s.epochs_done(1 << 30));
  EXPECT_FALSE(std::isfinite(s.next_checkpoint()));
}

TEST(TrainSchedule, SavedTimesComeBackAndFollowANewCheckpointPeriod) {
  const Config c = config(10, 0, 0.3, 1.0);
  TrainSchedule s(c, 100, true);
  s.eval_done(0.95);
  s.checkpoint_done(1.0);
  StateWriter w;
  s.save(w);
  const std::string bytes = w.take();
  {
    TrainSchedule t(c, 100, true);
    StateReader r(bytes, "schedule");
    t.load(r, 1.0);
    EXPECT_EQ(t.next_eval(), s.next_eval());  // accumulated, bit for bit
    EXPECT_EQ(t.next_checkpoint(), 2.0);
  }
  {  // checkpoints off on resume
    TrainSchedule t(c, 100, false);
    StateReader r(bytes, "schedule");
    t.load(r, 1.0);
    EXPECT_FALSE(std::isfinite(t.next_checkpoint()));
  }
  {  // a resume without saved times starts after the cut
    TrainSchedule t(c, 100, true);
    t.start_at(1.0);
    EXPECT_DOUBLE_EQ(t.next_eval(), 1.2);
    EXPECT_EQ(t.next_checkpoint(), 2.0);
  }
}

MetricsRow row(double time_s, double train_loss, double test_loss) {
  MetricsRow r;
  r.time_s = time_s;
  r.updates = 7;
  r.train_loss = train_loss;
  r.test_loss = test_loss;
  return r;
}

// The simulators' loop before each event: everything due by t, in time
// order, an evaluation before a checkpoint at the same time, nothing after a
// stop.
TEST(TrainSchedule, RunDueRunsEvaluationsAndCheckpointsInTimeOrder) {
  const Config c = config(10, 0, 0.5, 1.0);
  TrainSchedule s(c, 100, true);
  s.start_at(0);
  RunStops stops(c);
  std::vector<std::string> done;
  auto eval = [&](double at) { done.push_back(fmt::format("eval {}", at)); };
  auto ckpt = [&](double at) { done.push_back(fmt::format("ckpt {}", at)); };
  run_due(s, 2.2, stops, eval, ckpt);
  EXPECT_EQ(done, (std::vector<std::string>{"eval 0.5", "eval 1", "ckpt 1", "eval 1.5", "eval 2",
                                            "ckpt 2"}));
  done.clear();
  run_due(s, 2.2, stops, eval, ckpt);  // nothing more is due
  EXPECT_TRUE(done.empty());
  stops.stop("test");
  run_due(s, 5, stops, eval, ckpt);  // one, then the stop ends the loop
  EXPECT_EQ(done, (std::vector<std::string>{"eval 2.5"}));
}

TEST(RunStops, NonFiniteParametersOrTestLossStop) {
  Config c;
  const std::vector<MetricsRow> rows = {row(0, NAN, 2.3)};
  std::vector<float> p = {1, 2, 3};
  {
    RunStops s(c);
    EXPECT_FALSE(s.check_row(row(1, 2.0, 2.0), p, rows));
    EXPECT_FALSE(s.stopped());
    EXPECT_TRUE(s.check_row(row(1, 2.0, NAN), p, rows));
    EXPECT_NE(s.reason().find("test loss is not finite"), std::string::npos) << s.reason();
    EXPECT_FALSE(s.below_min());
    EXPECT_FALSE(s.final_checkpoint_allowed());
  }
  {
    RunStops s(c);
    p[1] = INFINITY;
    EXPECT_TRUE(s.check_row(row(1, 2.0, 2.0), p, rows));
    EXPECT_NE(s.reason().find("parameters are not finite"), std::string::npos) << s.reason();
    EXPECT_NE(s.reason().find("training diverged at update 7 (1.000 s)"), std::string::npos);
  }
}

TEST(RunStops, AFiniteBlowUpAboveTheFactorStops) {
  Config c;
  c.train.diverge_factor = 100;
  const std::vector<MetricsRow> rows = {row(0, NAN, 2.0)};
  const std::vector<float> p = {1};
  RunStops s(c);
  EXPECT_FALSE(s.check_row(row(1, 150, 199), p, rows));  // below 100 x 2
  EXPECT_TRUE(s.check_row(row(2, 150, 201), p, rows));
  EXPECT_NE(s.reason().find("test loss 201 is above train.diverge_factor = 100"), std::string::npos)
      << s.reason();
  RunStops t(c);
  EXPECT_TRUE(t.check_row(row(2, 8e28, 3.0), p, rows));  // the training loss alone
  EXPECT_NE(t.reason().find("training loss 8e+28"), std::string::npos) << t.reason();
  c.train.diverge_factor = 0;  // off
  RunStops off(c);
  EXPECT_FALSE(off.check_row(row(2, 8e28, 8e28), p, rows));
}

TEST(RunStops, NonFinitePushesMembershipAndTheFirstStopWins) {
  Config c;
  c.train.max_nonfinite = 3;
  RunStops s(c);
  EXPECT_FALSE(s.check_pushes(3, 10, 1.0));
  EXPECT_TRUE(s.check_pushes(4, 10, 1.0));
  EXPECT_NE(s.reason().find("4 consecutive pushes held a NaN or Inf"), std::string::npos);
  const std::string first = s.reason();
  s.check_membership("fewer than 2 workers");
  EXPECT_EQ(s.reason(), first);
  EXPECT_FALSE(s.below_min());

  RunStops m(c);
  EXPECT_FALSE(m.check_membership(""));
  EXPECT_TRUE(m.check_membership("fewer than 2 workers live"));
  EXPECT_TRUE(m.below_min());
  EXPECT_TRUE(m.final_checkpoint_allowed());  // its state is worth resuming
}

TEST(RunStops, ASavedStopComesBackAndABelowMinimumOneIsLiftedByAFreshMembership) {
  Config c;
  RunStops m(c);
  m.check_membership("fewer than 2 workers live");
  StateWriter w;
  m.save(w);
  const std::string bytes = w.take();
  RunStops back(c);
  StateReader r(bytes, "stops");
  back.load(r);
  r.expect_end();
  EXPECT_TRUE(back.stopped());
  EXPECT_TRUE(back.below_min());
  EXPECT_EQ(back.reason(), m.reason());
  back.membership_restarted();
  EXPECT_FALSE(back.stopped());

  RunStops d(c);
  d.stop("diverged");
  d.membership_restarted();  // only a membership stop is lifted
  EXPECT_TRUE(d.stopped());
}

TEST(RunStops, AFrontEndsRequestStopsAtItsEvaluationOrAfterAPushAndIsNotSaved) {
  Config c;
  StopRequest callback, interrupt;
  c.stop = &callback;
  MetricsRow row;
  row.test_loss = 1.0;
  const std::vector<float> params = {0.5f};
  RunStops a(c);
  EXPECT_FALSE(a.check_row(row, params, {}));  // no request yet
  callback.request("the callback returned False", /*at_evaluation=*/true);
  EXPECT_TRUE(a.check_row(row, params, {}));  // that evaluation is the last
  EXPECT_EQ(a.reason(), "stopped by request: the callback returned False");
  EXPECT_TRUE(StopRequest::is_request(a.reason()));
  EXPECT_TRUE(a.requested());
  EXPECT_TRUE(a.final_checkpoint_allowed());  // a sound state

  c.stop = &interrupt;
  RunStops b(c);
  interrupt.request("KeyboardInterrupt");
  interrupt.request("a second request");       // the first wins
  EXPECT_FALSE(b.check_row(row, params, {}));  // Ctrl-C waits for the next push...
  EXPECT_TRUE(b.check_pushes(0, 7, 1.5));      // ...after which a final checkpoint is allowed
  EXPECT_EQ(b.reason(), "stopped by request: KeyboardInterrupt");
  EXPECT_TRUE(b.final_checkpoint_allowed());
  // A checkpoint does not keep it: the resumed run trains on.
  StateWriter w;
  b.save(w);
  const std::string bytes = w.take();
  c.stop = nullptr;
  RunStops back(c);
  StateReader r(bytes, "stops");
  back.load(r);
  EXPECT_FALSE(back.stopped());

  // A divergence found at the same row wins over the request.
  c.stop = &callback;
  RunStops d(c);
  MetricsRow bad = row;
  bad.test_loss = std::nan("");
  EXPECT_TRUE(d.check_row(bad, params, {}));
  EXPECT_FALSE(StopRequest::is_request(d.reason()));
  EXPECT_FALSE(d.requested());
}

}  // namespace
}  // namespace hsgd
