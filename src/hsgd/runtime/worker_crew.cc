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

WorkerCrew::End WorkerCrew::run(int workers, TrainClock& clock, const TrainSchedule& schedule,
                                RunStops& stops, Observer* observer, const Hooks& hooks) {
  try {
    return drive(workers, clock, schedule, stops, observer, hooks);
  } catch (...) {
    join();  // before the runtime's state that the workers use unwinds
    throw;
  }
}

WorkerCrew::End WorkerCrew::drive(int workers, TrainClock& clock, const TrainSchedule& schedule,
                                  RunStops& stops, Observer* observer, const Hooks& hooks) {
  End end;
  gate.pause();
  end.first = hooks.evaluate(0.0);
  // The initial model diverged: that row is the last, and no worker starts.
  end.at_row = stops.stopped();
  clock.start();
  gate.resume();

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
  TrainSchedule evals = schedule;  // this loop's evaluation times
  double last_acc = end.first.test_acc;
  while (!end.at_row) {
    const double now = clock.seconds();
    const double wake = std::min({evals.next_eval(), schedule.budget(), now + 0.5});
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
    if (evals.eval_due(t)) {
      gate.pause();
      clock.pause();
      const MetricsRow r = hooks.evaluate(clock.seconds());
      last_acc = r.test_acc;
      end.at_row = stops.stopped();
      clock.resume();
      gate.resume();
      evals.eval_done(t);
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
