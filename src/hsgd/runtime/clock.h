// The one definition of time for the runtimes on real time (threads,
// hogwild, mpi). The simulator's time is virtual and needs none of this.
//
// Training time: wall time since training started, minus the time the
// workers were paused (evaluation, checkpoints), plus the training time of
// the run it resumes. While paused the clock stands still, so every
// timestamp taken during a pause (a row's time_s, the end of a wait) reads
// the moment the pause began, and the time column never goes backwards.
//
// Idle time (idle_frac): the training time a live worker spends blocked by
// its policy (a push waiting for its update, an SSP pull waiting for the
// slowest worker), measured on this clock, waits still in progress
// included; idle_frac is the idle time accumulated over a row's interval
// divided by interval x workers. The simulator applies the same definition
// on its virtual clock.
#pragma once
#include <chrono>
#include <mutex>
#include <vector>

#include "hsgd/core/state.h"

namespace hsgd {

using SteadyClock = std::chrono::steady_clock;

// Real seconds since t.
inline double since(SteadyClock::time_point t) {
  return std::chrono::duration<double>(SteadyClock::now() - t).count();
}

// Thread-safe.
class TrainClock {
 public:
  // Starts (or restarts) the clock at `offset` training seconds, running,
  // or standing still at exactly `offset` until resume() when `paused`.
  void start(double offset = 0, bool paused = false) {
    std::lock_guard lk(mu_);
    start_ = SteadyClock::now();
    offset_ = offset;
    paused_total_ = 0;
    paused_ = paused;
    pause_began_ = start_;
  }
  double seconds() const {
    std::lock_guard lk(mu_);
    return now_locked(paused_ ? pause_began_ : SteadyClock::now());
  }
  // Freezes the clock (idempotent).
  void pause() {
    std::lock_guard lk(mu_);
    if (paused_) return;
    paused_ = true;
    pause_began_ = SteadyClock::now();
  }
  void resume() {
    std::lock_guard lk(mu_);
    if (!paused_) return;
    paused_ = false;
    paused_total_ += std::chrono::duration<double>(SteadyClock::now() - pause_began_).count();
  }

 private:
  double now_locked(SteadyClock::time_point t) const {
    return offset_ + std::chrono::duration<double>(t - start_).count() - paused_total_;
  }
  mutable std::mutex mu_;
  SteadyClock::time_point start_ = SteadyClock::now();
  SteadyClock::time_point pause_began_;
  double offset_ = 0;
  double paused_total_ = 0;
  bool paused_ = false;
};

// Per-worker idle accounting on a TrainClock's seconds. Not thread-safe: the
// caller guards it (the threads runtime under its server lock).
class IdleMeter {
 public:
  void resize(size_t workers) {
    idle_.resize(workers, 0.0);
    since_.resize(workers, -1.0);
  }
  void begin(size_t w, double now) { since_[w] = now; }
  void end(size_t w, double now) {
    if (since_[w] >= 0) idle_[w] += now - since_[w];
    since_[w] = -1;
  }
  // For checkpoints: per worker, idle seconds and the start of a wait in
  // progress. load() accepts another worker count (missing ones start idle).
  void save(StateWriter& w) const {
    w.put_vec(idle_);
    w.put_vec(since_);
  }
  void load(StateReader& r) {
    std::vector<double> idle = r.get_vec<double>(), since = r.get_vec<double>();
    if (idle.size() != since.size()) r.fail("corrupt (idle times)");
    for (size_t w = 0; w < idle_.size() && w < idle.size(); ++w) {
      idle_[w] = idle[w];
      since_[w] = since[w];
    }
  }
  // Total idle seconds over every worker up to `now`, waits in progress
  // included.
  double total(double now) const {
    double t = 0;
    for (size_t w = 0; w < idle_.size(); ++w)
      t += idle_[w] + (since_[w] >= 0 ? now - since_[w] : 0.0);
    return t;
  }

 private:
  std::vector<double> idle_;
  std::vector<double> since_;
};

}  // namespace hsgd
