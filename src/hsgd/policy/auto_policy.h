// auto: a K-async policy that chooses K online from what the server sees
// (README, "The auto policy", has the rule and its reasoning). Torch-free,
// clock-free: every signal comes in through Policy::observe_push, so the
// replicas of a sharded MPI server, which see the same events, take the
// same decisions.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "hsgd/policy/policy.h"

namespace hsgd {

// Which parts of the rule are on (all, by default; switching parts off is for
// ablations only: policy.auto_ablate).
struct AutoParts {
  bool rise = true;      // a significant loss rise doubles K
  bool fall = true;      // a steadily falling loss lowers K by one
  bool flat = true;      // a flat loss (noise floor) raises K by one
  bool cap = true;       // the flat rise stops at the workers that arrive in time
  bool momentum = true;  // server momentum lowered by staleness's implicit momentum
};
// "" -> all on; otherwise a comma-separated list of the parts to switch off.
// Throws InputError naming policy.auto_ablate for an unknown part.
AutoParts parse_auto_ablate(const std::string& s);

class AutoController final : public Policy {
 public:
  // Per-worker arrival statistics are kept for ids < kTracked (fixed, so the
  // checkpointed state has one size whatever the worker count).
  static constexpr int kTracked = 256;
  // Constants of the rule (not per-problem settings: README explains each).
  static constexpr int kMinWindow = 8;        // pushes per window, at least
  static constexpr int kBlock = 4;            // windows per block (trend tests)
  static constexpr double kRiseSigmas = 2.5;  // a rise: > 2.5 standard errors ...
  static constexpr int kRiseWindows = 2;      // ... in 2 windows in a row
  static constexpr double kTrendSigmas = 2;   // a fall: < -2 standard errors
  static constexpr int kHoldWindows = 8;      // no decrease this long after a rise
  static constexpr int kFlatBlocks = 2;       // flat blocks in a row before the first K + 1
                                              // (doubling after each flat K + 1)
  static constexpr double kCapFactor = 1.5;   // "in time": duration <= 1.5 x the fastest quarter's

  AutoController(int workers, AutoParts parts);
  std::string name() const override { return "auto"; }
  int threshold(const Progress& p, int live) const override;
  bool pusher_waits() const override { return true; }
  void observe_push(const PushSignal& s) override;
  double implicit_momentum() const override;
  std::vector<double> save_state() const override;
  void restore_state(std::span<const double> s) override;

  // For tests and the recorder.
  int k() const { return k_; }
  int cap() const;  // the arrival-time cap on K (live workers if unknown)
  double staleness() const { return tau_ema_; }
  int64_t decisions() const { return windows_; }

 private:
  void end_window();

  AutoParts parts_;
  int workers_;
  int live_ = 0;
  int k_ = 1;
  // The current window of pushed losses.
  double sum_ = 0, sumsq_ = 0;
  int64_t count_ = 0;
  // The last 2 kBlock windows' means and squared standard errors, oldest
  // first (fewer at the start and after a rise).
  std::vector<double> hist_mean_, hist_se2_;
  int64_t hold_ = 0, block_pos_ = 0, flat_streak_ = 0, windows_ = 0, rise_streak_ = 0;
  int64_t flat_need_ = kFlatBlocks;  // flat blocks needed for the next K + 1
  int64_t last_change_ = 0;          // +1: the last change was a flat K + 1
  // Staleness of observed pushes: exponential moving average (weight 1/n).
  double tau_ema_ = 0;
  int64_t tau_count_ = 0;
  // Per worker: when it last got parameters (-1 unknown) and the EMA of the
  // time from there to its next push (0 unknown).
  std::vector<double> free_since_, duration_;
};

}  // namespace hsgd
