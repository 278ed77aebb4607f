// Hogwild (Niu et al. 2011): no server. Worker threads read the shared
// parameters and write their SGD steps straight into them, without locks.
//
// Memory model: concurrent plain reads and writes of the same float would be
// a data race, which C++ leaves undefined. Every access to the shared buffer
// is therefore a relaxed std::atomic_ref<float> load or store: on x86-64 and
// ARM64 these compile to the same plain loads and stores, so nothing is
// serialised, and the program is race-free (ThreadSanitizer-clean, no
// suppression). What Hogwild gives up stays given up: a worker's read of the
// parameters is not a consistent snapshot (coordinates may come from
// different steps), and two workers updating one coordinate at once can lose
// one of the two steps (load, subtract, store is not one atomic operation).
// Hogwild's analysis assumes such conflicts are rare (sparse gradients); with
// dense models they happen and are part of what is measured.
//
// Runs on the threads runtime only; plain SGD with optim.lr, the lr schedule
// and weight decay, applied by each worker. Metrics: `updates` counts worker
// steps, staleness is not tracked (0), `k` is 1, `idle_frac` 0.
#pragma once
#include "hsgd/runtime/runtime.h"

namespace hsgd {

class HogwildRuntime final : public Runtime {
 public:
  RunResult run(const Job& job, Recorder* recorder, Observer* observer) override;
};

}  // namespace hsgd
