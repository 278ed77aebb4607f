// auto: a K-async policy that chooses K online from what the server sees
// (README, "The auto policy", has the rule and its reasoning). Torch-free,
// clock-free: every signal comes in through Policy::observe_push, so the
// replicas of a sharded MPI server, which see the same events, take the
// same decisions.
#pragma once
#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "hsgd/policy/mitigation.h"
#include "hsgd/policy/policy.h"

namespace hsgd {

// Which parts of the rule are on (all, by default; switching parts off is for
// ablations only: policy.auto_ablate).
struct AutoParts {
  bool rise = true;      // a loss rise (or a loss above the starting loss) doubles K
  bool up = true;        // probes of a larger K (2K), kept if the loss falls faster per second
  bool down = true;      // probes of a smaller K (K / 2), kept likewise
  bool cap = true;       // up-probes stop at the workers that arrive in time
  bool momentum = true;  // server momentum lowered by staleness's implicit momentum
  bool spike = true;     // two pushes far above the starting loss multiply K by 4 at once
  bool spikecap = true;  // ... but from below the arrival-time cap only up to the cap
  bool curve = true;     // no probe on a speeding-up descent; no rising baseline
  bool budget = true;    // K never below what keeps lr x (staleness + 1) within the budget constant
  bool measured =
      true;  // ... at the measured staleness (off: at n / K, the pushes in flight per update)
  // The seventh rule's budget: at the staleness of n equally fast workers,
  // staleness + 1 = n / K (the gradients in flight per update), whatever the
  // measured staleness; stragglers' rare, very stale pushes do not raise K.
  bool concurrency = false;
  // The eighth rule: a spike's K is held for a while, not for good. When its
  // hold ends (retry_blocks blocks, doubled after every spike) and the loss
  // is back below the loss at the start, K returns to the budget's K: the
  // instability a spike measured belongs to that phase of training (the
  // early one, where warm-ups are used, is the sharpest), so it is retried,
  // with exponential back-off.
  bool retry = false;
  // The spike guard also where the staleness budget is on (off in the ninth
  // rule: the budget's K is the stability prior there, and the guard fired
  // on transients that K rides out). The ninth keeps it where the budget
  // does not model the step: sum aggregation, an unknown rate, or an
  // optimizer other than sgd (momentum amplifies a stale step; the guard is
  // what saves async with server momentum).
  bool spike_with_budget = true;
  // The tenth rule: the budget counts a step as the server moves the
  // parameters, lr x the step gain (1 / (1 - mu) with server momentum mu),
  // so the drift it bounds is in gradients also under momentum; the spike
  // guard then goes wherever the gain is known (sgd, momentum, nesterov),
  // not only with plain sgd.
  bool step_gain = false;
  // The tenth rule also: the first K (the budget's, set before any arrival
  // is known), if above the arrival-time cap, comes down to the cap at the
  // first window's end at which every live worker's arrival time is known,
  // not at the first block's end (under a sync-like K a block is four
  // rounds behind the slowest straggler).
  bool early_cap = false;
  // The twelfth rule: the momentum correction goes only as far as the
  // staleness budget needs. The server's momentum mu amplifies a step by
  // g = 1 / (1 - mu); at the concurrency n / K the step it drifts by is
  // lr x g x n / K, which the budget bounds by its constant b. So the
  // implicit momentum the server subtracts is 1 - b / (lr g n / K) where
  // that is positive (then lr / (1 - mu') x n / K = b), 0 where the step is
  // within the budget, and never more than the staleness correction's
  // tau / (tau + 1) (`momentum` on; an unknown gain: the full correction).
  bool momentum_budget = false;
  // The thirteenth rule: with server momentum (a known step gain g > 1),
  // raise K or lower mu, whichever the momentum-amplified step asks less
  // of. If the budget at lr x g is met by K <= 2 (lr x g x n <= 2 b: at
  // most one doubling of K), K counts the gain (the tenth's budget) and mu
  // stays as configured; otherwise K is the ninth's (lr alone), mu is
  // lowered by the staleness's implicit momentum, and the spike guard stays.
  bool momentum_switch = false;
  // The fourteenth rule: the momentum correction (`momentum`) only where
  // the momentum-amplified step at the concurrency, lr x g x n / K, is
  // above the budget: the condition the README gives users of the fixed
  // asynchronous policies for staleness.momentum_correction. At or below
  // it the server's mu stays as configured.
  bool momentum_gate = false;
  // The fifteenth rule (tried): the spike guard is armed only after the
  // first block (kBlock windows), meant to keep it off momentum's early
  // bumps where the fourteenth keeps mu. Measured, those firings came after
  // the first block (0.75 to 3.5 s) on real loss rises, so it changed
  // little.
  bool spike_late = false;
  // The sixteenth rule (today's): where the fourteenth keeps mu (the
  // momentum-amplified step within the budget), the spike guard's first
  // firing turns the momentum correction on instead of raising K; a later
  // firing raises K as before. A blow-up under momentum and staleness is
  // the two momenta together overshooting (Mitliagkas et al. 2016), and
  // taking staleness's share off mu costs no throughput; raising K does.
  bool spike_corrects = false;
  // The seventeenth rule (tried): the sixteenth, whose guard, where it
  // keeps mu, asks for a window (one round of pushes) whose mean loss is
  // above the spike line before it turns the correction on, not two pushes
  // in a row. Momentum's overshoot under staleness recurs push after push
  // (an oscillation that lifts whole windows); a stale gradient's bump is
  // a few pushes, which async rides out.
  bool spike_window = false;
  // The eighteenth rule (today's): the sixteenth whose spike guard is also
  // armed where the steps are plain sgd but the arrival-time cap holds K
  // below the budget's floor. The ninth rule dropped the guard where the
  // budget models the step; where the cap overrides the budget, its
  // stability bound is not in force and nothing else guards it (an MLP on
  // 4 workers, 2 straggling, at lr 0.69: K held at 2 under a floor of 4,
  // 14 pp below sync: docs/results-auto.md, "The eighteenth rule adopted").
  bool spike_under_cap = false;
  // The nineteenth rule (tried, not adopted): the eighteenth whose staleness budget
  // measures the step by its gradient noise: lr x sqrt(batch_ref / batch),
  // the rate at which a worker's batch gives the step the noise a batch of
  // batch_ref gives at lr (the square-root scaling rule). Batch 8 doubles
  // the budget's rate, batch 128 halves it (LeNet-5 on 5 workers with
  // batch 8 at lr x n = 0.41, inside the budget, async collapsed in 2 of 3
  // seeds; it then trained, but the MLP grid lost up to 2.21 pp against
  // the eighteenth: docs/results-auto.md, "The nineteenth rule tried").
  bool batch_budget = false;
};
// The parts of rule `rule` (policy.auto_rule; docs/auto.md):
//   19 (tried): the eighteenth whose budget counts lr x sqrt(batch_ref /
//     batch) (`batch_budget`).
//   18 (today's): the sixteenth whose guard is also armed on plain sgd while
//     the arrival-time cap holds K below the budget's floor
//     (`spike_under_cap`).
//   17 (tried): the sixteenth whose guard, where mu is kept, tests a
//     window's mean loss, not two pushes (`spike_window`).
//   16 (the rule before the eighteenth): the fourteenth whose spike guard, where mu is kept, first
//     turns the momentum correction on (`spike_corrects`).
//   15 (tried): the fourteenth with the spike guard armed only after the
//     first block (`spike_late`).
//   14 (the rule before the sixteenth): the ninth with the momentum
//     correction only where the momentum-amplified step is above the
//     budget (`momentum_gate`), and the early cap.
//   13 (tried): the ninth, but with momentum whose amplified step the
//     budget meets at K <= 2, the eleventh (`momentum_switch`); the early
//     cap.
//   12 (tried): the ninth with the momentum correction only as far as the
//     budget needs it (`momentum_budget`) and the tenth's early cap
//     (`early_cap`).
//   11 (tried): the tenth without the momentum correction (`momentum`).
//   10 (tried): the ninth with the budget at lr x the step gain, and the
//     spike guard only where the gain is unknown or the budget off
//     (`step_gain`); a K above the cap comes down to it once every arrival
//     is known (`early_cap`).
//   9 (the rule before the fourteenth): the seventh with the spike guard
//     only where the budget does not model the step: the budget off, or
//     steps that are not plain sgd (`spike_with_budget` off).
//   8: the seventh with a spike's K retried (`retry`); tried, not adopted.
//   7 (the rule before the ninth): the sixth with the budget at the
//     concurrency n / K (`concurrency`), not at the measured staleness.
//   6 (the rule before it): the staleness budget, the spike guard
//     (stopping at the arrival-time cap), the cap and the momentum
//     correction; no probes and no window rises (rise, up, down and curve
//     off).
//   5 (the rule before the sixth): every part.
// 8 to 5 are kept to reproduce the results made with them.
// Throws InputError naming policy.auto_rule for another number.
AutoParts auto_rule_parts(int rule);
// `base` with the parts a comma-separated list names switched off ("" ->
// `base` as it is). Throws InputError naming policy.auto_ablate for an
// unknown part.
AutoParts parse_auto_ablate(const std::string& s, AutoParts base = {});

// The rule's constants (README, "The auto policy", states the meaning of
// each; docs/results-auto-sensitivity.md the result at half and twice each).
// The defaults are the rule; policy.auto_constants overrides them, for
// sensitivity studies only ("name=value,...", the names below).
struct AutoConstants {
  int min_window = 8;         // pushes per window, at least
  double rise_sigmas = 2.5;   // a rise: a window's mean above the reference by this many s.e. ...
  int rise_windows = 2;       // ... in this many windows in a row
  double blow_up = 0.1;       // or one window this fraction above the starting loss
  double probe_sigmas = 1.0;  // a larger K is kept if it beats the trend by this many s.e.
  int gap_min = 2;            // blocks at a K before probing from it
  int gap_max = 16;           // the longest back-off between probes, in blocks
  double cap_factor = 1.5;    // "in time": a duration <= this x the fastest quarter's
  double spike = 0.5;         // a spike: a push this fraction above the starting loss ...
  double spike_sds = 4.0;     // ... and this many of the start's per-push deviations ...
  int spike_pushes = 2;       // ... in this many pushes in a row
  int spike_factor = 4;       // multiplies K by this (and bans every smaller K)
  double accel_sigmas = 1.0;  // no probe on a descent accelerating beyond this many s.e.
  double fall_sigmas = 2.0;   // ... that is a descent: its last fall beyond this many s.e.
  double budget = 0.5;        // the staleness budget: lr x (staleness + 1) <= this
  int retry_blocks = 16;      // the eighth rule: a spike's K held this many blocks (doubling)
  int switch_k = 2;       // the thirteenth rule: momentum whose step the budget meets at K <= this
                          // raises K (mu stays); above it mu is lowered instead
  double batch_ref = 32;  // the nineteenth rule: the batch the budget was measured at
};
// "" -> the defaults. Throws InputError naming policy.auto_constants for an
// unknown name, a value that is not a number, or one out of its range.
AutoConstants parse_auto_constants(const std::string& s);
// The names, in the order above, and each one's value in `c` (for the
// sensitivity script and the docs).
std::vector<std::pair<std::string, double>> auto_constant_values(const AutoConstants& c);

class AutoController final : public Policy {
 public:
  // Per-worker arrival statistics are kept for ids < kTracked (fixed, so the
  // checkpointed state has one size whatever the worker count).
  static constexpr int kTracked = 256;
  // Windows per block (the probes' unit). Not a tunable constant: it sizes
  // the checkpointed state.
  static constexpr int kBlock = 4;

  // `lr` > 0 turns the staleness budget on (mean aggregation), with that
  // rate until the server gives its own through on_lr; 0 with sum
  // aggregation or when unknown (the budget is then off, and on_lr does not
  // turn it on: with sum a larger K does not shorten the steps).
  AutoController(int workers, AutoParts parts, double lr = 0, AutoConstants constants = {});
  std::string name() const override { return "auto"; }
  int threshold(const Progress& p, int live) const override;
  bool pusher_waits() const override { return true; }
  void observe_push(const PushSignal& s) override;
  double implicit_momentum() const override;
  // The budget uses the rate the server steps with (issue 25, defect 10):
  // optim.lr after optim.scale_lr and the lr schedule, updated after every
  // update. Not saved: the server gives it again after a load.
  void on_lr(double lr) override;
  // Not saved either: the server gives it at every construction.
  void on_step_gain(double gain) override;
  // The workers' batch (train.batch; make_policy gives it at every
  // construction, so it is not saved). The nineteenth rule's budget counts
  // lr x sqrt(batch_ref / batch); the other rules ignore it, as does every
  // rule when it is not given (0).
  void set_batch(int batch);
  std::vector<double> save_state() const override;
  // This rule's state (573 numbers), the fifteenth's and earlier (572:
  // without the sixteenth's flag, read as off) and the third rule's (571:
  // without the budget's flag either).
  bool reads_state(size_t size) const override;
  void restore_state(std::span<const double> s) override;
  double lr() const { return lr_; }

  // For tests and the recorder.
  int k() const { return k_; }
  int cap() const;  // the arrival-time cap on K (live workers if unknown)
  // The staleness budget's floor on K at the measured staleness (1 when the
  // budget is off), before the cap.
  int budget_floor() const;
  double staleness() const { return tau_.mean; }
  // Whether the spike guard is part of the rule here (the ninth rule: only
  // where the budget is off or the steps are not plain sgd; the tenth: only
  // where the budget is off or the step gain unknown).
  bool spike_guard() const {
    return parts_.spike && (parts_.spike_with_budget || !budget_on() || !step_modeled() ||
                            (parts_.spike_under_cap && k_ < budget_floor()));
  }
  // The rate the budget counts: lr, or lr x the step gain where it is known
  // and the rule counts it (counts_gain).
  double rate() const { return counts_gain() ? lr_ * gain_ : lr_; }
  // The thirteenth rule: momentum the budget meets by raising K to at most
  // switch_k (K counts the gain; mu stays).
  bool raises_k() const;
  int64_t decisions() const { return windows_; }
  int64_t rises() const { return rises_; }
  int64_t probes() const { return probes_; }
  int64_t kept() const { return kept_; }
  int64_t aborts() const { return aborts_; }
  // The sixteenth rule: a spike turned the momentum correction on.
  bool spike_corrected() const { return spike_corrected_; }
  bool probing() const { return phase_ != 0; }

 private:
  struct Block {
    double mean = 0, se2 = 0, t = 0;
  };
  void first_k();
  void end_window();
  void end_block();
  void rise(int factor = 2, bool spike = false);
  bool accelerating() const;
  bool budget_on() const { return parts_.budget && lr_ > 0; }
  // The budget models the server's step: plain sgd (the ninth rule), any
  // known gain (the tenth).
  bool step_modeled() const { return parts_.step_gain ? gain_ > 0 : gain_ == 1 || raises_k(); }
  // The budget counts lr x the step gain (the tenth and eleventh rules; the
  // thirteenth where it raises K).
  bool counts_gain() const { return gain_ > 0 && (parts_.step_gain || raises_k()); }
  // The momentum-amplified step at the concurrency n / K, lr x g x n / K
  // (the twelfth to seventeenth rules weigh it against the budget).
  double amplified_step(int k) const;
  bool within_budget(double step) const { return step <= cst_.budget * (1 + 1e-9); }
  bool corrects_first() const;
  // The seventeenth rule: the guard tests windows, not pushes, here.
  bool window_guard() const { return parts_.spike_window && corrects_first(); }
  int concurrency_floor(int n) const;
  bool budget_step();
  bool early_cap_step();
  int known_arrivals() const;  // workers whose duration is known
  bool retry_step();
  void set_budget_k(int k);
  void set_live(int live);
  void set_spike_line();
  void set_spike_gate();
  bool spike_armed() const {
    return spike_guard() && start_known_ && k_ < workers_ &&
           (!parts_.spike_late || windows_ >= kBlock);
  }
  void set_k(int k);
  void ban(int unstable);
  bool probe_kept() const;

  AutoParts parts_;
  AutoConstants cst_;
  int workers_;
  double lr_ = 0;
  bool rate_on_ = false;  // the budget may run (lr > 0 at construction)
  double gain_ = 1;       // the server's step gain (on_step_gain; 1: plain sgd)
  // The nineteenth rule: sqrt(batch_ref / batch) (set_batch); 1 otherwise.
  double batch_scale_ = 1;
  int live_ = 0;
  int k_ = 1;
  // The current window of pushed losses (and the sum of their times).
  double sum_ = 0, sumsq_ = 0, tsum_ = 0;
  int64_t count_ = 0;
  // The last kBlock + 1 windows' means and squared standard errors, oldest
  // first (hist_n_ of them: fewer at the start and after a rise): the rise
  // test.
  std::array<double, kBlock + 1> hist_mean_{}, hist_se2_{};
  size_t hist_n_ = 0;
  // The first window's mean and squared standard error: the loss at the
  // start, which a stable run never exceeds for long.
  double start_mean_ = 0, start_se2_ = 0;
  bool start_known_ = false;
  bool start_armed_ = true;  // off after a rise until the loss is below the start again
  int64_t windows_ = 0, rise_streak_ = 0, rises_ = 0, probes_ = 0, kept_ = 0;
  // The current block: sum of window means, of their se2, of push times,
  // windows and pushes in it.
  double b_mean_ = 0, b_se2_ = 0, b_t_ = 0;
  int64_t b_windows_ = 0, b_pushes_ = 0;
  // The last 4 complete blocks, oldest first (n_blocks_ of them valid).
  std::array<Block, 4> blocks_{};
  int64_t n_blocks_ = 0;
  // Probe state: phase 0 steady, 1 in the probe block (K = probe_k_), 2 in
  // the block after it (K = base_k_ again). since_ counts complete blocks at
  // the current K; a probe starts when since_ >= gap_; dir_ is the next
  // probe's direction (+1 up, -1 down).
  int64_t phase_ = 0, base_k_ = 1, probe_k_ = 1, since_ = 0, gap_ = 2, dir_ = 1;
  // Probes aborted by a rise; K <= unstable_k_ is not probed while ban_ > 0
  // (blocks); the next ban lasts ban_len_ blocks.
  int64_t aborts_ = 0, unstable_k_ = 0, ban_ = 0, ban_len_ = 16;
  // The spike guard: the first window's per-push standard deviation, pushes
  // in a row above the spike line, pushes left before it is armed again.
  double start_sd_ = 0;
  int64_t spike_streak_ = 0, spike_cool_ = 0;
  double spike_line_ = 0;  // derived: start + max(spike |start|, spike_sds sd)
  double spike_gate_ = 0;  // derived: spike_line_ while armed, +inf otherwise
  // Staleness of observed pushes: exponential moving average (weight 1/n).
  StalenessMean tau_;   // staleness over about two rounds of pushes (policy/mitigation.h)
  int64_t window_ = 8;  // derived: pushes per window, max(min_window, live_)
  // Per worker: when it last got parameters (-1 unknown) and the EMA of the
  // time from there to its next push (0 unknown).
  std::vector<double> free_since_, duration_;
  size_t tracked_ = 0;  // derived: 1 + the largest worker id with a known duration
  // K was set by the staleness budget (not by a rise or a probe): the budget
  // never keeps K above the arrival-time cap.
  bool budget_set_ = false;
  // The sixteenth rule: a spike turned the momentum correction on (for good).
  bool spike_corrected_ = false;
};

}  // namespace hsgd
