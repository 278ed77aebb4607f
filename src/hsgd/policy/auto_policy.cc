#include "hsgd/policy/auto_policy.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "hsgd/core/error.h"

namespace hsgd {

AutoParts parse_auto_ablate(const std::string& s) {
  AutoParts p;
  std::stringstream ss(s);
  std::string part;
  while (std::getline(ss, part, ',')) {
    if (part.empty()) continue;
    if (part == "rise") {
      p.rise = false;
    } else if (part == "fall") {
      p.fall = false;
    } else if (part == "flat") {
      p.flat = false;
    } else if (part == "cap") {
      p.cap = false;
    } else if (part == "momentum") {
      p.momentum = false;
    } else {
      throw InputError("policy.auto_ablate = '" + s + "': unknown part '" + part +
                       "' (expected a comma-separated list of rise, fall, flat, cap, momentum)");
    }
  }
  return p;
}

AutoController::AutoController(int workers, AutoParts parts)
    : parts_(parts),
      workers_(std::max(1, workers)),
      live_(std::max(1, workers)),
      free_since_(kTracked, -1.0),
      duration_(kTracked, 0.0) {}

int AutoController::threshold(const Progress&, int live) const {
  return std::clamp(k_, 1, std::max(1, live));
}

int AutoController::cap() const {
  std::vector<double> d;
  for (double x : duration_) {
    if (x > 0) d.push_back(x);
  }
  if (d.size() < 2) return live_;
  std::vector<double> sorted = d;
  std::sort(sorted.begin(), sorted.end());
  const double quarter = sorted[sorted.size() / 4];
  int n = 0;
  for (double x : d) n += x <= kCapFactor * quarter ? 1 : 0;
  return std::clamp(n, 1, std::max(1, live_));
}

double AutoController::implicit_momentum() const {
  return parts_.momentum ? tau_ema_ / (tau_ema_ + 1.0) : 0.0;
}

void AutoController::observe_push(const PushSignal& s) {
  live_ = std::max(1, s.live_workers);
  // Arrival times: a worker's duration is the time from getting parameters
  // (a release, or its own push when it did not wait) to its next push.
  if (s.worker >= 0 && s.worker < kTracked) {
    const auto w = static_cast<size_t>(s.worker);
    if (free_since_[w] >= 0) {
      const double d = s.seconds - free_since_[w];
      if (d >= 0) duration_[w] = duration_[w] > 0 ? 0.8 * duration_[w] + 0.2 * d : d;
    }
    free_since_[w] = s.pusher_waits ? -1.0 : s.seconds;
  }
  if (s.released) {
    for (int r : *s.released) {
      if (r >= 0 && r < kTracked) free_since_[static_cast<size_t>(r)] = s.seconds;
    }
  }
  // Staleness, averaged over about two rounds of pushes.
  const double a = 1.0 / std::max(kMinWindow, 2 * live_);
  const auto tau = static_cast<double>(s.staleness);
  tau_ema_ = tau_count_ == 0 ? tau : (1 - a) * tau_ema_ + a * tau;
  ++tau_count_;
  // The loss window: one round of pushes (at least kMinWindow).
  sum_ += s.loss;
  sumsq_ += s.loss * s.loss;
  ++count_;
  if (count_ >= std::max<int64_t>(kMinWindow, live_)) end_window();
}

void AutoController::end_window() {
  const auto n = static_cast<double>(count_);
  const double mean = sum_ / n;
  const double var = std::max(0.0, sumsq_ / n - mean * mean) * n / (n - 1);
  sum_ = sumsq_ = 0;
  count_ = 0;
  ++windows_;
  hist_mean_.push_back(mean);
  hist_se2_.push_back(var / n);
  if (hist_mean_.size() > 2 * kBlock) {
    hist_mean_.erase(hist_mean_.begin());
    hist_se2_.erase(hist_se2_.begin());
  }
  const size_t h = hist_mean_.size();
  if (hold_ > 0) --hold_;
  // Rise: this window against the kBlock before it. The steps are too stale
  // (or too large) for this point: halve the staleness by doubling K, and
  // start the history afresh under the new K.
  if (h >= kBlock + 1) {
    double ref = 0, ref_se2 = 0;
    for (size_t i = h - 1 - kBlock; i < h - 1; ++i) {
      ref += hist_mean_[i] / kBlock;
      ref_se2 += hist_se2_[i] / (kBlock * kBlock);
    }
    const bool rose = mean - ref > kRiseSigmas * std::sqrt(hist_se2_[h - 1] + ref_se2);
    rise_streak_ = rose ? rise_streak_ + 1 : 0;
    if (parts_.rise && rise_streak_ >= kRiseWindows) {
      rise_streak_ = 0;
      k_ = std::min(workers_, 2 * k_);
      hold_ = kHoldWindows;
      hist_mean_.clear();
      hist_se2_.clear();
      block_pos_ = flat_streak_ = last_change_ = 0;
      flat_need_ = kFlatBlocks;
      return;
    }
  }
  // Trend, once per block: the last kBlock windows against the kBlock before.
  if (h < 2 * kBlock || ++block_pos_ < kBlock) return;
  block_pos_ = 0;
  double before = 0, after = 0, se2 = 0;
  for (size_t i = 0; i < h; ++i) {
    (i < kBlock ? before : after) += hist_mean_[i] / kBlock;
    se2 += hist_se2_[i] / (kBlock * kBlock);
  }
  if (after - before < -kTrendSigmas * std::sqrt(se2)) {
    // Falling beyond noise. Right after a flat K + 1 that is the increase
    // paying off: keep it. Otherwise more, staler updates are paying: step
    // back towards async.
    flat_streak_ = 0;
    flat_need_ = kFlatBlocks;
    if (last_change_ > 0) {
      last_change_ = 0;
    } else if (parts_.fall && hold_ == 0 && k_ > 1) {
      --k_;
    }
  } else if (++flat_streak_ >= flat_need_) {
    // Flat (or creeping up) within noise: at the noise floor, averaging more
    // pushes per update lowers it, as long as waiting for them is cheap.
    // Each such step needs twice the flat stretch of the one before, so a
    // slow but real descent (invisible block to block) is not mistaken for
    // a floor more than a few times.
    flat_streak_ = 0;
    const int limit = parts_.cap ? cap() : workers_;
    if (parts_.flat && k_ < limit) {
      ++k_;
      last_change_ = 1;
      flat_need_ *= 2;
    }
  }
}

std::vector<double> AutoController::save_state() const {
  std::vector<double> s = {static_cast<double>(k_),
                           sum_,
                           sumsq_,
                           static_cast<double>(count_),
                           static_cast<double>(hist_mean_.size()),
                           static_cast<double>(hold_),
                           static_cast<double>(block_pos_),
                           static_cast<double>(flat_streak_),
                           static_cast<double>(windows_),
                           tau_ema_,
                           static_cast<double>(tau_count_),
                           static_cast<double>(live_),
                           static_cast<double>(rise_streak_),
                           static_cast<double>(flat_need_),
                           static_cast<double>(last_change_)};
  for (size_t i = 0; i < 2 * kBlock; ++i) {
    s.push_back(i < hist_mean_.size() ? hist_mean_[i] : 0.0);
    s.push_back(i < hist_se2_.size() ? hist_se2_[i] : 0.0);
  }
  s.insert(s.end(), free_since_.begin(), free_since_.end());
  s.insert(s.end(), duration_.begin(), duration_.end());
  return s;
}

void AutoController::restore_state(std::span<const double> s) {
  constexpr size_t kHead = 15 + 4 * kBlock;
  HSGD_ASSERT(s.size() == kHead + 2 * static_cast<size_t>(kTracked), "auto policy state size");
  k_ = std::clamp(static_cast<int>(s[0]), 1, workers_);
  sum_ = s[1];
  sumsq_ = s[2];
  count_ = static_cast<int64_t>(s[3]);
  const auto h = std::min<size_t>(static_cast<size_t>(s[4]), 2 * kBlock);
  hold_ = static_cast<int64_t>(s[5]);
  block_pos_ = static_cast<int64_t>(s[6]);
  flat_streak_ = static_cast<int64_t>(s[7]);
  windows_ = static_cast<int64_t>(s[8]);
  tau_ema_ = s[9];
  tau_count_ = static_cast<int64_t>(s[10]);
  live_ = std::max(1, static_cast<int>(s[11]));
  rise_streak_ = static_cast<int64_t>(s[12]);
  flat_need_ = std::max<int64_t>(kFlatBlocks, static_cast<int64_t>(s[13]));
  last_change_ = static_cast<int64_t>(s[14]);
  hist_mean_.clear();
  hist_se2_.clear();
  for (size_t i = 0; i < h; ++i) {
    hist_mean_.push_back(s[15 + 2 * i]);
    hist_se2_.push_back(s[15 + 2 * i + 1]);
  }
  free_since_.assign(s.begin() + kHead, s.begin() + kHead + kTracked);
  duration_.assign(s.begin() + kHead + kTracked, s.end());
}

}  // namespace hsgd
