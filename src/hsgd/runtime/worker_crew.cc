#include "hsgd/runtime/worker_crew.h"

#include <algorithm>
#include <chrono>
#include <cmath>

namespace hsgd {

WorkerCrew::~WorkerCrew() { join(); }

void WorkerCrew::request_stop() {
  std::lock_guard lk(mu);
  stop = true;
  cv.notify_all();
}

bool WorkerCrew::stopped() {
  std::lock_guard lk(mu);
  return stop;
}

void WorkerCrew::join() {
  request_stop();
  gate.close();
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
  threads_.clear();
}

void WorkerCrew::record(const MetricsRow& r, std::span<const float> params, Recorder* recorder,
                        Observer* observer, RunStops& stops) {
  recorder->write(r);
  observer->on_row(r);
  std::lock_guard lk(mu);
  if (stops.check_row(r, params, recorder->rows())) {
    stop = true;
    cv.notify_all();
  }
}

WorkerCrew::End WorkerCrew::run(int workers, TrainClock& clock, TrainSchedule& schedule,
                                RunStops& stops, Observer* observer, const Hooks& hooks,
                                const Resumed* resumed) {
  try {
    return drive(workers, clock, schedule, stops, observer, hooks, resumed);
  } catch (...) {
    join();  // before the runtime's state that the workers use unwinds
    throw;
  }
}

WorkerCrew::End WorkerCrew::drive(int workers, TrainClock& clock, TrainSchedule& schedule,
                                  RunStops& stops, Observer* observer, const Hooks& hooks,
                                  const Resumed* resumed) {
  End end;
  double last_acc = 0;
  if (resumed) {
    last_acc = resumed->last_acc;
    clock.start(resumed->at);
    if (resumed->ended) {  // no training: the run ends at the cut's time
      clock.pause();
      end.train_s = resumed->at;
      join();
      return end;
    }
  } else {
    gate.pause();
    end.first = hooks.evaluate(0.0);
    last_acc = end.first.test_acc;
    // The initial model diverged: that row is the last, and no worker starts.
    end.at_row = stops.stopped();
    clock.start();
    gate.resume();
  }

  for (int w = 0; w < workers && !stopped(); ++w) {
    threads_.emplace_back([this, &hooks, w] {
      try {
        hooks.work(w);
      } catch (...) {
        {
          std::lock_guard lk(mu);
          if (!error_) error_ = std::current_exception();
        }
        request_stop();
      }
    });
  }
  while (!end.at_row) {
    const double now = clock.seconds();
    const double wake =
        std::min({schedule.next_eval(), schedule.next_checkpoint(), schedule.budget(), now + 0.5});
    {
      std::unique_lock lk(mu);
      cv.wait_for(lk, std::chrono::duration<double>(std::max(0.0, wake - now)),
                  [&] { return stop; });
      if (stop) break;
      // A front end's stop (Config::stop): the workers' steps check no
      // stops, so this loop does, at most 0.5 s after the request.
      if (stops.check_request(/*at_evaluation=*/false)) break;
    }
    const double t = clock.seconds();
    if (schedule.past_budget(t)) break;
    if (schedule.eval_due(t) || schedule.checkpoint_due(t)) {
      gate.pause();
      clock.pause();
      const double at = schedule.clamp(clock.seconds());
      if (schedule.eval_due(at)) {
        const MetricsRow r = hooks.evaluate(at);
        last_acc = r.test_acc;
        end.at_row = stops.stopped();
        schedule.eval_done(at);
      }
      // A stop found meanwhile (a worker's, a row's) ends the run: its
      // final checkpoint follows.
      if (!stops.stopped() && !stopped() && schedule.checkpoint_due(at)) {
        schedule.checkpoint_done(at);
        if (hooks.checkpoint) hooks.checkpoint(at);
      }
      clock.resume();
      gate.resume();
    }
    Status st;
    st.time_s = clock.seconds();
    hooks.progress(&st);
    st.k = 1;
    st.test_acc = last_acc;
    st.train_loss = std::nan("");
    observer->on_status(st);
  }
  // Training ends here: no step is applied after the stop or the budget.
  clock.pause();
  end.train_s = schedule.clamp(clock.seconds());
  join();
  std::exception_ptr error;
  {
    std::lock_guard lk(mu);
    error = error_;
  }
  if (error) std::rethrow_exception(error);
  return end;
}

}  // namespace hsgd
