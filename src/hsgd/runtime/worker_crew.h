// The threads side of the run layer for runtimes whose workers step on their
// own, with no server between them: hogwild (hogwild_runtime.h) and the
// gossip policies on threads (gossip_threads.h). One crew is the worker
// threads, their stop flag and first error, and the gate that pauses them
// between steps; run() is the controller that every such runtime shares:
//
// - the first row at training time 0, with the workers not yet started
//   (an initial model that diverges is the last row: no worker starts);
// - the workers, one thread each; an exception in one is kept (the first
//   wins), stops the others and is rethrown once all are joined;
// - evaluations and checkpoints at the run layer's schedule
//   (TrainSchedule, advanced here), with every worker paused between steps
//   and the training clock stopped (an evaluation due at a checkpoint's
//   time first, so the checkpoint holds its row), and a status line for
//   the observer at least every 0.5 s;
// - a resumed run (Resumed): no first row, the clock starting at the cut's
//   time, and no worker at all when the run had already ended there;
// - the end: a stop (a worker's, a row's, a front end's request checked at
//   most 0.5 s after it) or the budget; then the clock stops, no step is
//   taken after it, and the workers are joined.
//
// The runtime keeps its own shared state under `mu` (the crew's stop flag
// lives there too), its worker loop (gate.enter()/exit() around a step,
// `stop` checked under `mu`), and its rows (`record` writes one and checks
// the run layer's stops on it).
#pragma once
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "hsgd/metrics/recorder.h"
#include "hsgd/runtime/clock.h"
#include "hsgd/runtime/gate.h"
#include "hsgd/runtime/run_control.h"
#include "hsgd/runtime/runtime.h"

namespace hsgd {

class WorkerCrew {
 public:
  std::mutex mu;               // guards `stop` and the runtime's own shared fields
  std::condition_variable cv;  // notified when `stop` is set (and by the runtime)
  bool stop = false;           // under mu
  Gate gate;

  WorkerCrew() = default;
  WorkerCrew(const WorkerCrew&) = delete;
  WorkerCrew& operator=(const WorkerCrew&) = delete;
  // An exception unwinding the run: stops, opens the gate and joins.
  ~WorkerCrew();

  void request_stop();
  bool stopped();

  // Writes row `r` (recorder and observer) and checks the run layer's stops
  // on it (divergence; `params` are the evaluated parameters): a stop sets
  // `stop`.
  void record(const MetricsRow& r, std::span<const float> params, Recorder* recorder,
              Observer* observer, RunStops& stops);

  struct Hooks {
    // The row at training time t, recorded (record()), with every worker
    // paused between steps.
    std::function<MetricsRow(double t)> evaluate;
    // The workers' progress for a status line: updates and samples.
    std::function<void(Status*)> progress;
    // Worker w's loop, on its own thread.
    std::function<void(int w)> work;
    // A checkpoint at training time t, with every worker paused between
    // steps (may be empty when the schedule has no checkpoints).
    std::function<void(double t)> checkpoint;
  };
  // A run resumed from a checkpoint taken at training time `at`.
  struct Resumed {
    double at = 0;
    bool ended = false;   // it had ended there (budget, epochs, a stop): no worker starts
    double last_acc = 0;  // the last row's accuracy, for status lines
  };
  struct End {
    double train_s = 0;   // training time at the end, clamped to the budget
    bool at_row = false;  // a row's stop ended the run: that row is the last
    MetricsRow first;     // the row at time 0 (none when resumed)
  };
  // The controller (see the top of this file). Rethrows a worker's error.
  // `resumed`: null for a fresh run.
  End run(int workers, TrainClock& clock, TrainSchedule& schedule, RunStops& stops,
          Observer* observer, const Hooks& hooks, const Resumed* resumed = nullptr);

 private:
  End drive(int workers, TrainClock& clock, TrainSchedule& schedule, RunStops& stops,
            Observer* observer, const Hooks& hooks, const Resumed* resumed);
  void join();  // stops, closes the gate, joins every thread

  std::exception_ptr error_;  // under mu: the first worker error
  std::vector<std::thread> threads_;
};

}  // namespace hsgd
