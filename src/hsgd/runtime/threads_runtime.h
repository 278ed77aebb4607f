// The threads runtime: one std::thread per worker, the server state machine
// in-process behind one mutex, evaluation on the calling thread while the
// workers are paused (so evaluation never counts as training time).
//
// Protocol per worker step:
//   1. enter the gate (blocks while the evaluator runs);
//   2. under the server lock: on_pull, copy the parameters;
//   3. compute the gradient on the worker's own model (no lock held);
//      stragglers then sleep for their delay;
//   4. under the server lock: on_push; mark released workers and wake them;
//   5. exit the gate; if the push said so, wait (outside the gate) until
//      released. Waiting time is the worker's idle time.
#pragma once
#include "hsgd/runtime/runtime.h"

namespace hsgd {

class ThreadsRuntime final : public Runtime {
 public:
  RunResult run(const Job& job, Recorder* recorder, Observer* observer) override;
};

}  // namespace hsgd
