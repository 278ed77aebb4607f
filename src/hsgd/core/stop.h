// A request from outside a run to end it early: the Python module's
// callback returning False (at an evaluation) or Ctrl-C (anywhere). The run
// layer (runtime/run_control.h) checks it at every evaluation and after
// every push, on every runtime, and ends the run as it ends one at its
// budget: a closing row, and a final checkpoint when checkpoints are on.
//
// Thread-safety: request() from any thread (first request wins); the reads
// from any thread. The owner keeps it alive for the whole run.
#pragma once
#include <atomic>
#include <mutex>
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
  void request(const std::string& why, bool at_evaluation = false) {
    std::lock_guard<std::mutex> lk(mu_);
    if (requested_.load(std::memory_order_relaxed)) return;
    reason_ = kPrefix + why;
    at_evaluation_ = at_evaluation;
    requested_.store(true, std::memory_order_release);
  }
  bool requested() const { return requested_.load(std::memory_order_acquire); }
  bool at_evaluation() const {
    std::lock_guard<std::mutex> lk(mu_);
    return at_evaluation_;
  }
  std::string reason() const {
    std::lock_guard<std::mutex> lk(mu_);
    return reason_;
  }

 private:
  mutable std::mutex mu_;
  std::atomic<bool> requested_{false};
  std::string reason_;
  bool at_evaluation_ = false;
};

}  // namespace hsgd
