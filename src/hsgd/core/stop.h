// A request from outside a run to end it early: the Python module's
// callback returning False (at an evaluation) or Ctrl-C (anywhere). The run
// layer (runtime/run_control.h) checks it at every evaluation and after
// every push, on every runtime, and ends the run as it ends one at its
// budget: a closing row, and a final checkpoint when checkpoints are on.
//
// Thread-safety: request() and requested() from any thread (the first
// request wins); reason() and at_evaluation() once requested() returned
// true. The owner keeps it alive for the whole run.
#pragma once
#include <atomic>
#include <string>

namespace hsgd {

class StopRequest {
 public:
  // Every request's line starts with this (so every MPI rank, which sees
  // only rank 0's line, can tell a request from a divergence).
  static constexpr const char* kPrefix = "stopped by request: ";
  static bool is_request(const std::string& line) { return line.rfind(kPrefix, 0) == 0; }

  // `why`: what the run reports (RunResult::stopped), after kPrefix.
  // `at_evaluation`: made while the run is paused at an evaluation, for it
  // (the run ends with that row); otherwise the run ends after its next push.
  // The first request wins (lock-free: the line is written once, before the
  // flag that publishes it).
  void request(const std::string& why, bool at_evaluation = false) {
    int none = kNone;
    if (!state_.compare_exchange_strong(none, kWriting, std::memory_order_acq_rel)) return;
    reason_ = kPrefix + why;
    at_evaluation_ = at_evaluation;
    state_.store(kRequested, std::memory_order_release);
  }
  bool requested() const { return state_.load(std::memory_order_acquire) == kRequested; }
  // Only once requested() is true.
  const std::string& reason() const { return reason_; }
  bool at_evaluation() const { return at_evaluation_; }

 private:
  enum : int { kNone, kWriting, kRequested };
  std::atomic<int> state_{kNone};
  std::string reason_;
  bool at_evaluation_ = false;
};

}  // namespace hsgd
