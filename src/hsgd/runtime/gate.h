// A gate that lets the evaluator pause the workers: workers enter() before a
// step and exit() after it; pause() blocks until no worker is inside and keeps
// new ones out until resume(). Thread-safe.
#pragma once
#include <condition_variable>
#include <mutex>

namespace hsgd {

class Gate {
 public:
  // Blocks while paused. Returns false (without entering) once closed.
  bool enter() {
    std::unique_lock lk(mu_);
    cv_.wait(lk, [&] { return !paused_ || closed_; });
    if (closed_) return false;
    ++active_;
    return true;
  }
  void exit() {
    std::lock_guard lk(mu_);
    if (--active_ == 0) cv_.notify_all();
  }
  void pause() {
    std::unique_lock lk(mu_);
    paused_ = true;
    cv_.wait(lk, [&] { return active_ == 0; });
  }
  void resume() {
    std::lock_guard lk(mu_);
    paused_ = false;
    cv_.notify_all();
  }
  // Lets every blocked and future enter() return false.
  void close() {
    std::lock_guard lk(mu_);
    closed_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int active_ = 0;
  bool paused_ = false;
  bool closed_ = false;
};

// One worker's presence in a gate; leaves it on destruction.
class GateScope {
 public:
  explicit GateScope(Gate& g) : gate_(g) {}
  ~GateScope() { exit(); }
  GateScope(const GateScope&) = delete;
  GateScope& operator=(const GateScope&) = delete;
  bool enter() {
    inside_ = gate_.enter();
    return inside_;
  }
  void exit() {
    if (inside_) gate_.exit();
    inside_ = false;
  }

 private:
  Gate& gate_;
  bool inside_ = false;
};

}  // namespace hsgd
