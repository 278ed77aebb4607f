#include "hsgd/policy/auto_policy.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "hsgd/core/error.h"

namespace hsgd {

AutoParts auto_rule_parts(int rule) {
  AutoParts p;
  if (rule == 5) return p;
  if (rule < 6 || rule > 19) {
    throw InputError("policy.auto_rule = " + std::to_string(rule) +
                     ": expected 18 (today's rule), 16 (the rule before it), 14 (the rule before "
                     "the sixteenth), 9 (the rule before the fourteenth), 10 to 13, 15, 17 or 19 "
                     "(tried), 8, 7, 6 or 5 (the rules before the ninth)");
  }
  // The sixth rule: on the design cells the probes and the window rises
  // added nothing on the MLP and cost on LeNet-5 (docs/results-auto.md,
  // "The sixth rule").
  p.rise = p.up = p.down = p.curve = false;
  // The seventh: the budget at the concurrency n / K, not the measured
  // staleness, which stragglers inflate (docs/results-auto.md).
  p.concurrency = rule >= 7;
  // The eighth: a spike's K is retried after a hold (exponential back-off).
  p.retry = rule == 8;
  // The ninth: no spike guard where the budget is on and models the step
  // (plain sgd steps; docs/results-auto.md, "The ninth rule").
  p.spike_with_budget = rule < 9;
  // The tenth: the budget counts lr x the step gain (momentum's 1 / (1 -
  // mu)), and the guard goes wherever that gain is known.
  p.step_gain = rule == 10 || rule == 11;
  p.early_cap = rule >= 10;
  // The eleventh: the tenth without the momentum correction (the budget's
  // step gain already bounds the drift momentum adds; lowering mu slowed
  // runs at small rates: docs/results-auto.md, "The tenth rule").
  p.momentum = rule != 11;
  // The twelfth: the ninth's K, and the momentum lowered only as far as the
  // budget needs (the correction cost at small rates, the eleventh's lack
  // of it at large ones: docs/results-auto.md, "The twelfth rule").
  p.momentum_budget = rule == 12;
  // The thirteenth: the eleventh where the momentum's step needs K <= 2,
  // the ninth elsewhere (the two rules' clean momentum cells split so:
  // docs/results-auto.md, "The thirteenth rule").
  p.momentum_switch = rule == 13;
  // The fourteenth (the rule before the sixteenth): the correction under
  // the condition the README gives for the fixed policies
  // (docs/results-auto.md, "The fourteenth rule" and "The fourteenth rule
  // adopted").
  p.momentum_gate = rule >= 14;
  // The fifteenth (tried): the fourteenth with the spike guard armed after
  // the first block (docs/results-auto.md, "The fourteenth rule adopted,
  // the fifteenth tried").
  p.spike_late = rule == 15;
  // The sixteenth (the rule before the eighteenth): the fourteenth whose spike guard, where mu is
  // kept, first turns the momentum correction on (docs/results-auto.md,
  // "The sixteenth rule adopted").
  p.spike_corrects = rule >= 16;
  // The seventeenth (tried): the sixteenth whose guard, where mu is kept,
  // tests a window's mean (docs/results-auto.md, "The seventeenth rule").
  p.spike_window = rule == 17;
  // The eighteenth (today's): the sixteenth whose guard is also armed on
  // plain sgd while the cap holds K below the budget's floor
  // (docs/results-auto.md, "The eighteenth rule adopted").
  p.spike_under_cap = rule >= 18;
  // The nineteenth (tried): the eighteenth whose budget counts the step's
  // gradient noise, lr x sqrt(batch_ref / batch) (the square-root scaling
  // of the rate with the batch; docs/results-auto.md, "The nineteenth rule
  // tried").
  p.batch_budget = rule == 19;
  return p;
}

AutoParts parse_auto_ablate(const std::string& s, AutoParts base) {
  AutoParts p = base;
  std::stringstream ss(s);
  std::string part;
  while (std::getline(ss, part, ',')) {
    if (part.empty()) continue;
    if (part == "rise") {
      p.rise = false;
    } else if (part == "up") {
      p.up = false;
    } else if (part == "down") {
      p.down = false;
    } else if (part == "cap") {
      p.cap = false;
    } else if (part == "momentum") {
      p.momentum = false;
    } else if (part == "spike") {
      p.spike = false;
    } else if (part == "spikecap") {
      p.spikecap = false;
    } else if (part == "curve") {
      p.curve = false;
    } else if (part == "budget") {
      p.budget = false;
    } else if (part == "measured") {
      p.measured = false;
    } else {
      throw InputError("policy.auto_ablate = '" + s + "': unknown part '" + part +
                       "' (expected a comma-separated list of rise, up, down, cap, momentum, "
                       "spike, spikecap, curve, budget, measured)");
    }
  }
  return p;
}

namespace {

// Each constant's name, its place in AutoConstants, and whether it counts
// (an integer, at least 1) or measures (a real number, above 0).
struct ConstantField {
  const char* name;
  int AutoConstants::*count;
  double AutoConstants::*measure;
};

constexpr ConstantField kConstantFields[] = {
    {"min_window", &AutoConstants::min_window, nullptr},
    {"rise_sigmas", nullptr, &AutoConstants::rise_sigmas},
    {"rise_windows", &AutoConstants::rise_windows, nullptr},
    {"blow_up", nullptr, &AutoConstants::blow_up},
    {"probe_sigmas", nullptr, &AutoConstants::probe_sigmas},
    {"gap_min", &AutoConstants::gap_min, nullptr},
    {"gap_max", &AutoConstants::gap_max, nullptr},
    {"cap_factor", nullptr, &AutoConstants::cap_factor},
    {"spike", nullptr, &AutoConstants::spike},
    {"spike_sds", nullptr, &AutoConstants::spike_sds},
    {"spike_pushes", &AutoConstants::spike_pushes, nullptr},
    {"spike_factor", &AutoConstants::spike_factor, nullptr},
    {"accel_sigmas", nullptr, &AutoConstants::accel_sigmas},
    {"fall_sigmas", nullptr, &AutoConstants::fall_sigmas},
    {"budget", nullptr, &AutoConstants::budget},
    {"retry_blocks", &AutoConstants::retry_blocks, nullptr},
    {"switch_k", &AutoConstants::switch_k, nullptr},
    {"batch_ref", nullptr, &AutoConstants::batch_ref},
};

}  // namespace

AutoConstants parse_auto_constants(const std::string& s) {
  AutoConstants c;
  auto bad = [&](const std::string& why) {
    return InputError("policy.auto_constants = '" + s + "': " + why);
  };
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    if (eq == std::string::npos) throw bad("expected name=value, got '" + item + "'");
    const std::string name = item.substr(0, eq), text = item.substr(eq + 1);
    const ConstantField* f = nullptr;
    for (const ConstantField& g : kConstantFields) {
      if (name == g.name) f = &g;
    }
    if (f == nullptr) {
      std::string names;
      for (const ConstantField& g : kConstantFields)
        names += std::string(names.empty() ? "" : ", ") + g.name;
      throw bad("unknown constant '" + name + "' (expected one of " + names + ")");
    }
    size_t used = 0;
    double v = std::nan("");
    try {
      v = std::stod(text, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != text.size() || text.empty() || !std::isfinite(v)) {
      throw bad("'" + name + "' expects a number, got '" + text + "'");
    }
    if (f->count != nullptr) {
      if (v < 1 || v != std::floor(v) || v > 1 << 20) {
        throw bad("'" + name + "' expects a whole number >= 1, got '" + text + "'");
      }
      c.*(f->count) = static_cast<int>(v);
    } else {
      if (v <= 0) throw bad("'" + name + "' expects a number > 0, got '" + text + "'");
      c.*(f->measure) = v;
    }
  }
  if (c.gap_min > c.gap_max) {
    throw bad("gap_min (" + std::to_string(c.gap_min) + ") above gap_max (" +
              std::to_string(c.gap_max) + ")");
  }
  if (c.spike_factor < 2) throw bad("'spike_factor' expects a whole number >= 2");
  return c;
}

std::vector<std::pair<std::string, double>> auto_constant_values(const AutoConstants& c) {
  std::vector<std::pair<std::string, double>> v;
  for (const ConstantField& f : kConstantFields) {
    v.emplace_back(f.name, f.count != nullptr ? static_cast<double>(c.*(f.count)) : c.*(f.measure));
  }
  return v;
}

AutoController::AutoController(int workers, AutoParts parts, double lr, AutoConstants constants)
    : parts_(parts),
      cst_(constants),
      workers_(std::max(1, workers)),
      lr_(std::max(0.0, lr)),
      rate_on_(lr_ > 0),
      free_since_(kTracked, -1.0),
      duration_(kTracked, 0.0) {
  gap_ = cst_.gap_min;
  // The first ban (a spike's hold): the fifth rule's down-probes wait it out;
  // the eighth rule retries the budget's K when it ends.
  ban_len_ = parts_.retry ? cst_.retry_blocks : cst_.gap_max;
  set_live(workers);
  first_k();
}

// The first K. The seventh rule: its floor (concurrency_floor). The fifth
// and sixth, before any staleness is measured: n workers in step give
// staleness + 1 = (n / K + 1) / 2 on average (K = 1: (n + 1) / 2), so the
// budget asks for K >= n / (2 cst_.budget / lr - 1). 1 with the budget off.
void AutoController::first_k() {
  k_ = 1;
  if (budget_on() && parts_.concurrency) {
    k_ = concurrency_floor(workers_);
  } else if (budget_on()) {
    const double r = 2 * cst_.budget / rate() - 1;
    k_ = r <= 1 ? workers_
                : std::clamp(static_cast<int>(std::ceil(workers_ / r - 1e-9)), 1, workers_);
  }
  base_k_ = probe_k_ = k_;
  budget_set_ = k_ > 1;
  set_spike_gate();
}

void AutoController::on_step_gain(double gain) {
  gain_ = std::max(0.0, gain);
  // Before the first push K is still the budget's prior, which the tenth,
  // the eleventh and (where it raises K) the thirteenth rule count with the
  // gain (the others count lr alone).
  if ((parts_.step_gain || parts_.momentum_switch) && rate_on_ && tau_.count == 0) first_k();
  set_spike_gate();
}

void AutoController::set_batch(int batch) {
  batch_scale_ = parts_.batch_budget && batch > 0 ? std::sqrt(cst_.batch_ref / batch) : 1.0;
  // Before the first push K is still the budget's prior.
  if (tau_.count == 0) first_k();
  set_spike_gate();
}

void AutoController::on_lr(double lr) {
  if (!rate_on_ || lr == lr_) return;
  lr_ = std::max(0.0, lr);
  // Before the first push K is still the budget's prior: it follows the rate
  // (the server's, given after construction: optim.scale_lr, a warm-up).
  if (tau_.count == 0) first_k();
  set_spike_gate();  // a rate of 0 turns the budget off, and the ninth rule's guard on
}

int AutoController::threshold(const Progress&, int live) const {
  return std::clamp(k_, 1, std::max(1, live));
}

int AutoController::cap() const {
  // The known durations, on the stack (no allocation: bench --auto); none
  // is known past tracked_.
  std::array<double, kTracked> d;
  size_t m = 0;
  for (size_t i = 0; i < tracked_; ++i) {
    if (duration_[i] > 0) d[m++] = duration_[i];
  }
  if (m < 2) return live_;
  // The fastest quarter's duration: the (m / 4)-th smallest.
  std::nth_element(d.begin(), d.begin() + static_cast<std::ptrdiff_t>(m / 4),
                   d.begin() + static_cast<std::ptrdiff_t>(m));
  const double quarter = d[m / 4];
  int n = 0;
  for (size_t i = 0; i < m; ++i) n += d[i] <= cst_.cap_factor * quarter ? 1 : 0;
  return std::clamp(n, 1, std::max(1, live_));
}

int AutoController::known_arrivals() const {
  int m = 0;
  for (size_t i = 0; i < tracked_; ++i) m += duration_[i] > 0 ? 1 : 0;
  return m;
}

// Staleness + 1 scales as 1 / K (n workers, K pushes per update: an update
// every K pushes, a push spans about n / K updates), so the smallest K that
// keeps lr x (staleness + 1) within the budget is K x lr (tau + 1) / cst_.budget.
int AutoController::budget_floor() const {
  if (!budget_on()) return 1;
  if (parts_.concurrency) return concurrency_floor(live_);
  if (!parts_.measured) {
    const double r = 2 * cst_.budget / rate() - 1;
    return r <= 1
               ? std::max(1, live_)
               : std::clamp(static_cast<int>(std::ceil(live_ / r - 1e-9)), 1, std::max(1, live_));
  }
  const double need = static_cast<double>(k_) * rate() * (tau_.mean + 1) / cst_.budget;
  return std::clamp(static_cast<int>(std::ceil(need - 1e-9)), 1, std::max(1, live_));
}

// The seventh rule: n equally fast workers, K pushes per update, have n / K
// gradients in flight per update, so staleness + 1 = n / K and the budget
// asks for K >= lr x n / cst_.budget.
int AutoController::concurrency_floor(int n) const {
  const double need = rate() * batch_scale_ * static_cast<double>(n) / cst_.budget;
  return std::clamp(static_cast<int>(std::ceil(need - 1e-9)), 1, std::max(1, n));
}

// At a block's end, not in a probe, one block after K last changed (the
// staleness EMA has then followed it): raise K to the budget's floor, at
// most to the arrival-time cap; and bring a K the budget set above the cap
// back to it (the first K is set before any arrival is known). True if K
// changed.
bool AutoController::budget_step() {
  if (!budget_on() || since_ < 1) return false;
  const int floor = budget_floor();
  if (floor <= k_ && !budget_set_) return false;  // (without computing the cap)
  const int limit = std::min(live_, parts_.cap ? cap() : live_);
  int target = k_;
  if (budget_set_ && k_ > limit) {
    target = limit;
  } else if (k_ < limit) {
    target = std::max(k_, std::min(limit, floor));
  }
  if (target == k_) return false;
  set_budget_k(target);
  return true;
}

// The tenth rule, at a window's end in the first block: the first K (the
// budget's, set before any arrival is known) comes down to the cap as soon
// as every live worker's arrival time is known, not at the block's end,
// which may be four slow rounds away. Later the budget's block-end steps
// keep K within the cap as before. True if K changed.
bool AutoController::early_cap_step() {
  if (!parts_.early_cap || !parts_.cap || !budget_on() || !budget_set_ || phase_ != 0 ||
      windows_ >= kBlock) {
    return false;
  }
  if (k_ <= 1 || known_arrivals() < live_) return false;
  const int limit = std::min(live_, cap());
  if (k_ <= limit) return false;
  set_budget_k(limit);
  return true;
}

// K set by the budget (its floor, the cap, or the eighth rule's retry):
// the base of any probe, a fresh count of blocks at it.
void AutoController::set_budget_k(int k) {
  set_k(k);
  base_k_ = probe_k_ = k_;
  since_ = 0;
  budget_set_ = true;
}

// The eighth rule, at a block's end: a spike's hold is over (ban_ = 0),
// K is still where a spike put it (no budget step since: budget_set_ off,
// rises_ > 0), and the loss has come back below the loss at the start
// (start_armed_, re-armed by a window below it): K returns to the budget's
// floor, at most to the arrival-time cap. Another spike there raises K again
// and holds it twice as long (ban). True if K changed.
bool AutoController::retry_step() {
  if (!parts_.retry || ban_ > 0 || budget_set_ || rises_ == 0 || !start_armed_) return false;
  const int limit = std::min(live_, parts_.cap ? cap() : live_);
  const int target = std::min(limit, budget_floor());
  if (target >= k_) return false;
  set_budget_k(target);
  set_spike_gate();
  return true;
}

// Derived from the state (not saved): the staleness EMA's weight, about two
// rounds of pushes, and the spike guard's line.
void AutoController::set_live(int live) {
  live_ = std::max(1, live);
  window_ = std::max<int64_t>(cst_.min_window, live_);
}

void AutoController::set_spike_line() {
  spike_line_ =
      start_mean_ + std::max(cst_.spike * std::abs(start_mean_), cst_.spike_sds * start_sd_);
}

double AutoController::amplified_step(int k) const {
  return lr_ * gain_ * batch_scale_ * static_cast<double>(live_) /
         static_cast<double>(std::max(1, k));
}

bool AutoController::raises_k() const {
  if (!parts_.momentum_switch || !budget_on() || !(gain_ > 1)) return false;
  const double need = amplified_step(1) / cst_.budget;
  return std::ceil(need - 1e-9) <= cst_.switch_k || live_ <= cst_.switch_k;
}

// The sixteenth rule: a spike now turns the momentum correction on rather
// than raising K: server momentum the rule corrects (a gain above 1) that it
// keeps as configured (the amplified step within the budget), and
// not already corrected by a spike.
bool AutoController::corrects_first() const {
  return parts_.spike_corrects && parts_.momentum && parts_.momentum_gate && budget_on() &&
         gain_ > 1 && !spike_corrected_ && !raises_k() && within_budget(amplified_step(k_));
}

double AutoController::implicit_momentum() const {
  if (!parts_.momentum || raises_k()) return 0.0;
  const double m = implicit_momentum_of_staleness(tau_.mean);
  if (!(parts_.momentum_budget || parts_.momentum_gate) || !budget_on() || !(gain_ > 0)) return m;
  // The twelfth and the fourteenth to seventeenth rules: the momentum-amplified
  // step at the concurrency n / K against the budget. Within it, no
  // correction (until a spike, the sixteenth and seventeenth); above it the
  // twelfth lowers mu by the excess only, the others fully.
  const double drift = amplified_step(k_);
  if (within_budget(drift) && !spike_corrected_) return 0.0;
  if (parts_.momentum_gate) return m;
  return std::min(m, 1.0 - cst_.budget / drift);
}

void AutoController::observe_push(const PushSignal& s) {
  // The signal's fields in locals: the stores below to members cannot then
  // make the compiler load them again (s might alias *this, for all it
  // knows). The arithmetic is the same, operation for operation.
  const int worker = s.worker;
  const double t = s.seconds, loss = s.loss;
  const auto tau = static_cast<double>(s.staleness);
  const bool waits = s.pusher_waits;
  const std::vector<int>* released = s.released;
  if (s.live_workers != live_) set_live(s.live_workers);
  // Arrival times: a worker's duration is the time from getting parameters
  // (a release, or its own push when it did not wait) to its next push.
  double* const free_since = free_since_.data();
  if (worker >= 0 && worker < kTracked) {
    const auto w = static_cast<size_t>(worker);
    const double since = free_since[w];
    if (since >= 0) {
      const double d = t - since;
      if (d >= 0) {
        const double old = duration_[w];
        if (old > 0) {
          duration_[w] = 0.8 * old + 0.2 * d;
        } else {
          duration_[w] = d;  // the first (0: still unknown)
          if (d > 0 && w >= tracked_) tracked_ = w + 1;
        }
      }
    }
    free_since[w] = waits ? -1.0 : t;
  }
  if (released) {
    for (int r : *released) {
      if (r >= 0 && r < kTracked) free_since[static_cast<size_t>(r)] = t;
    }
  }
  // Staleness, averaged over about two rounds of pushes.
  tau_.add(tau, live_);
  // The loss window: one round of pushes (at least cst_.min_window).
  sum_ += loss;
  sumsq_ += loss * loss;
  tsum_ += t;
  ++count_;
  // The spike guard: cst_.spike_pushes pushes in a row far above the starting
  // loss are a blow-up under way (LeNet-5 at lr 0.1: from the first such
  // push to a dead network takes ~30 pushes, less than two windows), so K
  // is multiplied by cst_.spike_factor at the push, not at a window's end. It
  // is armed again one round of pushes later (the pushes in flight were
  // computed before the new K took effect). The first test is the common
  // case's only one: armed, not cooling down, no streak, loss under the line.
  // (Past this test the guard is armed: the gate is +inf otherwise.)
  if (loss > spike_gate_ ||
      ((spike_cool_ | spike_streak_) != 0 && spike_armed() && !window_guard())) {
    if (spike_cool_ > 0) {
      --spike_cool_;
    } else {
      spike_streak_ = loss > spike_line_ ? spike_streak_ + 1 : 0;
      if (spike_streak_ >= cst_.spike_pushes) {
        spike_streak_ = 0;
        spike_cool_ = window_;
        sum_ = sumsq_ = tsum_ = 0;
        count_ = 0;
        if (corrects_first()) {
          // The sixteenth rule: the correction first, K as it is.
          spike_corrected_ = true;
        } else {
          rise(cst_.spike_factor, true);
        }
        set_spike_gate();
        return;
      }
    }
  }
  if (count_ >= window_) {
    end_window();
    set_spike_gate();
  }
}

// Derived (not saved): the spike guard's line while it is armed, +inf
// otherwise. Armed depends on K and on the start being known, which change
// only in end_window() and rise(); observe_push calls this after both.
void AutoController::set_spike_gate() {
  spike_gate_ =
      spike_armed() && !window_guard() ? spike_line_ : std::numeric_limits<double>::infinity();
}

void AutoController::end_window() {
  const auto n = static_cast<double>(count_);
  const double mean = sum_ / n;
  const double var = std::max(0.0, sumsq_ / n - mean * mean) * n / (n - 1);
  const double se2 = var / n;
  const double tsum = tsum_;
  const int64_t pushes = count_;
  sum_ = sumsq_ = tsum_ = 0;
  count_ = 0;
  ++windows_;
  if (!start_known_) {
    start_known_ = true;
    start_mean_ = mean;
    start_se2_ = se2;
    start_sd_ = std::sqrt(var);
    set_spike_line();
  }
  if (hist_n_ == kBlock + 1) {
    for (size_t i = 0; i < kBlock; ++i) {
      hist_mean_[i] = hist_mean_[i + 1];
      hist_se2_[i] = hist_se2_[i + 1];
    }
    --hist_n_;
  }
  hist_mean_[hist_n_] = mean;
  hist_se2_[hist_n_] = se2;
  ++hist_n_;
  // The seventeenth rule, where mu is kept: a window whose mean loss is above
  // the spike line turns the momentum correction on (the per-push test is
  // off here); the per-push guard is armed again one round later.
  if (windows_ > 1 && window_guard() && spike_armed() && mean > spike_line_) {
    spike_corrected_ = true;
    spike_streak_ = 0;
    spike_cool_ = window_;
  }
  // Rise: this window against the kBlock before it, or against the loss at
  // the start (a stable run does not end up worse than it began), beyond
  // noise in cst_.rise_windows windows in a row: the steps are too stale or too
  // large for this point of training. Halve the staleness by doubling K.
  const size_t h = hist_n_;
  bool rose = false, blew_up = false;
  if (windows_ > 1 && start_armed_) {
    rose = mean - start_mean_ > cst_.rise_sigmas * std::sqrt(se2 + start_se2_);
    // A blow-up: one window cst_.blow_up above the start (and beyond the start's
    // noise). Its own spread is not asked: a blow-up is a few huge losses,
    // which make the window's own standard error huge too.
    blew_up = mean - start_mean_ > std::max(cst_.blow_up * std::abs(start_mean_),
                                            cst_.rise_sigmas * std::sqrt(2 * start_se2_));
  } else if (mean < start_mean_) {
    start_armed_ = true;  // recovered below the start: the test is armed again
  }
  if (h >= kBlock + 1) {
    double ref = 0, ref_se2 = 0;
    for (size_t i = h - 1 - kBlock; i < h - 1; ++i) {
      ref += hist_mean_[i] / kBlock;
      ref_se2 += hist_se2_[i] / (kBlock * kBlock);
    }
    rose = rose || mean - ref > cst_.rise_sigmas * std::sqrt(se2 + ref_se2);
  }
  rise_streak_ = rose ? rise_streak_ + 1 : 0;
  if (parts_.rise && (rise_streak_ >= cst_.rise_windows || blew_up)) {
    rise();
    return;
  }
  b_mean_ += mean;
  b_se2_ += se2;
  b_t_ += tsum;
  b_pushes_ += pushes;
  if (++b_windows_ >= kBlock) {
    end_block();
  } else {
    early_cap_step();
  }
}

void AutoController::rise(int factor, bool spike) {
  rise_streak_ = 0;
  hist_n_ = 0;
  b_mean_ = b_se2_ = b_t_ = 0;
  b_windows_ = b_pushes_ = 0;
  n_blocks_ = 0;
  since_ = 0;
  if (phase_ == 1 && probe_k_ < base_k_) {
    // A down-probe made the loss rise: abort it, back to the base K, which
    // was stable, and do not go down there again soon.
    ++aborts_;
    phase_ = 0;
    k_ = static_cast<int>(base_k_);
    gap_ = std::min<int64_t>(cst_.gap_max, 2 * gap_);
    dir_ = 1;
    ban(static_cast<int>(probe_k_));
    return;
  }
  // Otherwise the K in force is too small: `factor` times the base K (an
  // up-probe cannot be the cause: its base K was where the loss began to
  // rise, and the probe's K, 2 x base, is already the doubled one).
  ++rises_;
  budget_set_ = false;
  const int from = phase_ == 1 && probe_k_ > base_k_ ? static_cast<int>(base_k_) : k_;
  phase_ = 0;
  k_ = std::min(workers_, factor * from);
  if (spike && parts_.spikecap) {
    // A blow-up below the arrival-time cap goes to the cap, no further:
    // waiting for the workers that arrive in time is as far as auto goes
    // without a measurement (the probes and the budget stop there too), and
    // past it every update waits for stragglers. A blow-up at or above the
    // cap multiplies K as before, so a sustained one still reaches n.
    const int limit = parts_.cap ? cap() : workers_;
    if (from < limit) k_ = std::min(k_, limit);
  }
  base_k_ = probe_k_ = k_;
  start_armed_ = false;     // until the loss is back below the start
  gap_ = 2 * cst_.gap_min;  // a hold: the new K runs a while before anything probes it
  dir_ = -1;                // and the first probe asks whether the rise was needed.
  // A rise of the window tests bans nothing (a loss that climbs for a while
  // at lr 0.01 on LeNet-5 is often a bump async rides out; a down-probe
  // that makes the loss climb again is aborted and bans its K then). A
  // blow-up (spike) bans every K below the new one: the K it blew up at may
  // have been far too small, and a blow-up may be unrecoverable.
  if (spike) ban(k_ - 1);
}

// K <= `unstable` was measured unstable: no down-probe goes there for the
// next ban_len_ blocks, and the next ban is twice as long. (Probing an
// unstable K can undo minutes of training in one block: async with server
// momentum, docs/results.md.)
void AutoController::ban(int unstable) {
  unstable_k_ = std::max<int64_t>(ban_ > 0 ? unstable_k_ : 0, unstable);
  ban_ = ban_len_;
  ban_len_ = std::min<int64_t>(2 * ban_len_, 1 << 20);
}

// The local rise test compares windows at one K only: leaving a good probe
// raises the loss without anything going wrong.
void AutoController::set_k(int k) {
  if (k == k_) return;
  k_ = k;
  hist_n_ = 0;
  rise_streak_ = 0;
}

void AutoController::end_block() {
  Block b;
  b.mean = b_mean_ / static_cast<double>(b_windows_);
  b.se2 = b_se2_ / static_cast<double>(b_windows_ * b_windows_);
  b.t = b_t_ / static_cast<double>(std::max<int64_t>(1, b_pushes_));
  b_mean_ = b_se2_ = b_t_ = 0;
  b_windows_ = b_pushes_ = 0;
  std::rotate(blocks_.begin(), blocks_.begin() + 1, blocks_.end());
  blocks_.back() = b;
  n_blocks_ = std::min<int64_t>(n_blocks_ + 1, static_cast<int64_t>(blocks_.size()));
  ++since_;
  if (ban_ > 0) --ban_;
  if (retry_step()) return;
  if (phase_ == 1) {
    // The probe block is done: back to the base K for one block, so that
    // the probe is judged between blocks at the base K on both sides.
    phase_ = 2;
    set_k(static_cast<int>(base_k_));
    return;
  }
  if (phase_ == 2) {
    phase_ = 0;
    since_ = 0;
    if (probe_kept()) {
      ++kept_;
      set_k(static_cast<int>(probe_k_));
      gap_ = cst_.gap_min;  // and probe on in the same direction soon
    } else {
      gap_ = std::min<int64_t>(cst_.gap_max, 2 * gap_);
      dir_ = -dir_;
    }
    base_k_ = k_;
    return;
  }
  if (budget_step()) return;
  if (since_ < gap_) return;
  // The line through two base blocks is a fair baseline only where the
  // descent is not speeding up (leaving a plateau): there it lies above the
  // curve and favours any probe. So a probe needs three blocks since the
  // start or the last rise, and waits while the last three show an
  // accelerating descent (docs/results.md, LeNet-5 at lr 0.01).
  if (parts_.curve && (n_blocks_ < 3 || accelerating())) return;
  // Start a probe from k_: up to 2K (at most the workers that arrive in
  // time) or down to K / 2, in the direction dir_ if that is possible.
  const int limit = std::min(live_, parts_.cap ? cap() : live_);
  const int up = parts_.up && 2 * k_ <= std::max(limit, 1) ? 2 * k_
                 : parts_.up && limit > k_                 ? limit
                                                           : k_;
  const int half = k_ / 2;
  // A down-probe stays within the staleness budget (K / 2 about doubles
  // staleness + 1).
  const bool in_budget =
      !budget_on() || static_cast<double>(k_) * rate() * (tau_.mean + 1) <= cst_.budget * half;
  const int down =
      parts_.down && k_ > 1 && in_budget && (ban_ == 0 || half > unstable_k_) ? half : k_;
  int target = dir_ > 0 ? up : down;
  if (target == k_) target = dir_ > 0 ? down : up;
  since_ = 0;
  if (target == k_) return;  // nothing to try: wait another gap
  ++probes_;
  base_k_ = k_;
  probe_k_ = target;
  // The rise test keeps the base-K windows: a probe that makes the loss rise
  // is aborted.
  k_ = target;
  phase_ = 1;
  dir_ = target > base_k_ ? 1 : -1;
}

// The last three blocks' means fall, and faster and faster, beyond noise:
// the last fall exceeds cst_.fall_sigmas standard errors and the second
// difference is below minus cst_.accel_sigmas. (Without the first condition the
// gate would also fire on noise around a flat loss and, by postponing probes
// whenever the last block happened to be low, start them when it happened to
// be high: a baseline biased upwards, which keeps up-probes on noise.)
bool AutoController::accelerating() const {
  if (n_blocks_ < 3) return false;
  const Block& a = blocks_[1];
  const Block& b = blocks_[2];
  const Block& c = blocks_[3];
  return b.mean - c.mean > cst_.fall_sigmas * std::sqrt(b.se2 + c.se2) &&
         c.mean - 2 * b.mean + a.mean < -cst_.accel_sigmas * std::sqrt(a.se2 + 4 * b.se2 + c.se2);
}

// Did the loss fall faster than before during the probe? The probe block
// and the block after it (back at the base K: it carries the probe's
// after-effects, e.g. damage done by too stale steps) against the line
// through the two base-K blocks before, in time. Comparing at equal *time*
// makes it "the loss falls faster per second": a larger K that waits for
// stragglers pays for its waiting here. Extrapolating a line is
// conservative while the descent slows down (a probe must beat the curve's
// own flattening) but favours any probe where the descent speeds up, as
// when the loss leaves a plateau (docs/results.md, LeNet-5).
bool AutoController::probe_kept() const {
  if (n_blocks_ < 4) return false;
  const Block& a = blocks_[0];
  const Block& b = blocks_[1];
  const Block& p = blocks_[2];
  const Block& c = blocks_[3];
  const double t = 0.5 * (p.t + c.t);
  double wa = 0, wb = 1;  // equal times: the block before
  if (b.t - a.t > 1e-12) {
    wb = (t - a.t) / (b.t - a.t);
    wa = 1 - wb;
  }
  double trend = wa * a.mean + wb * b.mean;
  if (parts_.curve && b.mean > a.mean) {
    trend = b.mean;
    wa = 0;
    wb = 1;
  }
  const double d = 0.5 * (p.mean + c.mean) - trend;
  const double se2 = 0.25 * (p.se2 + c.se2) + wa * wa * a.se2 + wb * wb * b.se2;
  // Waiting more must pay measurably; waiting less need only not cost: when
  // the two are level, the smaller K (less waiting) is kept.
  const double margin = probe_k_ > base_k_ ? cst_.probe_sigmas * std::sqrt(se2) : 0.0;
  return d < -margin;
}

std::vector<double> AutoController::save_state() const {
  std::vector<double> s = {static_cast<double>(k_),
                           static_cast<double>(live_),
                           sum_,
                           sumsq_,
                           tsum_,
                           static_cast<double>(count_),
                           static_cast<double>(hist_n_),
                           start_mean_,
                           start_se2_,
                           start_known_ ? 1.0 : 0.0,
                           start_armed_ ? 1.0 : 0.0,
                           static_cast<double>(windows_),
                           static_cast<double>(rise_streak_),
                           static_cast<double>(rises_),
                           static_cast<double>(probes_),
                           static_cast<double>(kept_),
                           b_mean_,
                           b_se2_,
                           b_t_,
                           static_cast<double>(b_windows_),
                           static_cast<double>(b_pushes_),
                           static_cast<double>(n_blocks_),
                           static_cast<double>(phase_),
                           static_cast<double>(base_k_),
                           static_cast<double>(probe_k_),
                           static_cast<double>(since_),
                           static_cast<double>(gap_),
                           static_cast<double>(dir_),
                           tau_.mean,
                           static_cast<double>(tau_.count),
                           static_cast<double>(aborts_),
                           static_cast<double>(unstable_k_),
                           static_cast<double>(ban_),
                           static_cast<double>(ban_len_),
                           start_sd_,
                           static_cast<double>(spike_streak_),
                           static_cast<double>(spike_cool_),
                           budget_set_ ? 1.0 : 0.0,
                           spike_corrected_ ? 1.0 : 0.0};
  for (size_t i = 0; i < kBlock + 1; ++i) {
    s.push_back(i < hist_n_ ? hist_mean_[i] : 0.0);
    s.push_back(i < hist_n_ ? hist_se2_[i] : 0.0);
  }
  for (const Block& b : blocks_) {
    s.push_back(b.mean);
    s.push_back(b.se2);
    s.push_back(b.t);
  }
  s.insert(s.end(), free_since_.begin(), free_since_.end());
  s.insert(s.end(), duration_.begin(), duration_.end());
  return s;
}

// 39 scalars, then the tails; the fifteenth rule's and earlier had 38 (no
// spike_corrected_, read as 0), the third rule's 37 (no budget_set_ either).
constexpr size_t kAutoTail =
    2 * (AutoController::kBlock + 1) + 3 * 4 + 2 * static_cast<size_t>(AutoController::kTracked);

bool AutoController::reads_state(size_t size) const {
  return size == 39 + kAutoTail || size == 38 + kAutoTail || size == 37 + kAutoTail;
}

void AutoController::restore_state(std::span<const double> s) {
  constexpr size_t kTail = kAutoTail;
  HSGD_ASSERT(reads_state(s.size()), "auto policy state size");
  const size_t scalars = s.size() - kTail;
  const size_t head = scalars + 2 * (kBlock + 1) + 3 * 4;
  auto i64 = [&](size_t i) { return static_cast<int64_t>(s[i]); };
  k_ = std::clamp(static_cast<int>(s[0]), 1, workers_);
  set_live(static_cast<int>(s[1]));
  sum_ = s[2];
  sumsq_ = s[3];
  tsum_ = s[4];
  count_ = i64(5);
  const auto h = std::min<size_t>(static_cast<size_t>(s[6]), kBlock + 1);
  start_mean_ = s[7];
  start_se2_ = s[8];
  start_known_ = s[9] != 0;
  start_armed_ = s[10] != 0;
  windows_ = i64(11);
  rise_streak_ = i64(12);
  rises_ = i64(13);
  probes_ = i64(14);
  kept_ = i64(15);
  b_mean_ = s[16];
  b_se2_ = s[17];
  b_t_ = s[18];
  b_windows_ = i64(19);
  b_pushes_ = i64(20);
  n_blocks_ = std::clamp<int64_t>(i64(21), 0, 4);
  phase_ = i64(22);
  base_k_ = i64(23);
  probe_k_ = i64(24);
  since_ = i64(25);
  gap_ = i64(26);
  dir_ = i64(27);
  tau_.mean = s[28];
  tau_.count = i64(29);
  aborts_ = i64(30);
  unstable_k_ = i64(31);
  ban_ = i64(32);
  ban_len_ = i64(33);
  start_sd_ = s[34];
  spike_streak_ = i64(35);
  spike_cool_ = i64(36);
  budget_set_ = scalars > 37 && s[37] != 0;
  spike_corrected_ = scalars > 38 && s[38] != 0;
  set_spike_line();
  hist_n_ = h;
  for (size_t i = 0; i < h; ++i) {
    hist_mean_[i] = s[scalars + 2 * i];
    hist_se2_[i] = s[scalars + 2 * i + 1];
  }
  for (size_t i = 0; i < blocks_.size(); ++i) {
    const size_t o = scalars + 2 * (kBlock + 1) + 3 * i;
    blocks_[i] = {s[o], s[o + 1], s[o + 2]};
  }
  free_since_.assign(s.begin() + head, s.begin() + head + kTracked);
  duration_.assign(s.begin() + head + kTracked, s.end());
  set_spike_gate();
  tracked_ = 0;
  for (size_t i = 0; i < duration_.size(); ++i) {
    if (duration_[i] > 0) tracked_ = i + 1;
  }
}

}  // namespace hsgd
