// The cores the simulated workers compute on (sim.cores), one rule for
// both simulators (the parameter server's SimFabric and the gossip
// simulator): C cores, first come first served, a task holding one core
// from its start to its end (no preemption), a task that finds none
// waiting in line. 0 cores = unlimited: every task starts at once.
//
// A plain state machine on virtual time, its state saved and restored
// (save()/load()); the simulator owns the clock and schedules each task's
// end. Tasks are named by an id of the caller's (a worker w >= 0, a
// server shard -(s+1)). Thread-safety: none.
#pragma once
#include <cstdint>
#include <deque>
#include <vector>

#include "hsgd/core/state.h"

namespace hsgd {

class CorePool {
 public:
  explicit CorePool(int cores) : cores_(cores), free_(cores) {}

  // Whether the cores are limited (sim.cores > 0).
  bool limited() const { return cores_ > 0; }

  // Task `who` is ready to run: true when it takes a core now (always,
  // when unlimited), false when it waits in line for release().
  bool acquire(int64_t who);
  // A task holding a core ended (limited only): frees its core and returns
  // the tasks that take a core now, in line order; each holds its core
  // from now on.
  std::vector<int64_t> release();
  // Task `who` is gone from the line (its worker left). A task holding a
  // core frees it with release().
  void drop(int64_t who);

  // The fabric's layout: the free cores (int32), then the line.
  void save(StateWriter& w) const;
  // Throws InputError (the reader's) for more free cores than cores.
  void load(StateReader& r);

 private:
  int cores_;
  int free_;
  std::deque<int64_t> line_;
};

}  // namespace hsgd
