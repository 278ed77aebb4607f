// The run layer's rules (DESIGN.md, "The run layer"): what every runtime
// (threads, sim, mpi, hogwild) means by a run's schedule and by the stops
// that end it early. Each rule exists here once; a runtime supplies only its
// clock (wall or virtual) and calls these at its own events.
//
// Schedule (TrainSchedule):
// - the budget is train.budget training seconds; a push whose time is at or
//   after it is not training and is dropped, and the run's training time is
//   the budget exactly when it runs to it (time_s of the closing row);
// - the epoch target is ceil(train.epochs x training-set size) samples; the
//   run ends at the first push that reaches it;
// - evaluations fall at multiples of train.eval_every (next = previous +
//   eval_every), checkpoints at multiples of train.checkpoint_every; an
//   evaluation due at a checkpoint's time comes first, so the checkpoint
//   holds its row.
//
// Stops (RunStops), each ending the run with exit code 3 and one line:
// - divergence at an evaluation: parameters or test loss not finite, or a
//   test or training loss above train.diverge_factor x the first row's test
//   loss (a finite blow-up; 0 = off);
// - more than train.max_nonfinite consecutive pushes dropped for a NaN/Inf;
// - fewer than train.min_workers live workers (membership). A checkpoint
//   taken at such a stop keeps it (save()/load()), so resuming it ends at
//   once with the same line rather than training on with too few workers.
// - a front end's request (Config::stop, core/stop.h: the Python module's
//   callback returning False, checked at the evaluation whose row it saw,
//   or Ctrl-C, checked after every push): the run ends as at its budget,
//   with a final checkpoint when checkpoints are on. A checkpoint does not
//   keep this stop: resuming it trains on.
// The first stop wins; later ones do not overwrite its line.
#pragma once
#include <cstdint>
#include <functional>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "hsgd/checkpoint/checkpoint.h"
#include "hsgd/config/config.h"
#include "hsgd/core/state.h"
#include "hsgd/metrics/recorder.h"

namespace hsgd {

class Server;

class TrainSchedule {
 public:
  static constexpr double kNever = std::numeric_limits<double>::infinity();

  // `checkpoints`: whether this run writes checkpoints at all.
  TrainSchedule(const Config& c, int64_t train_samples, bool checkpoints);

  // Training seconds of the budget, or kNever.
  double budget() const { return budget_; }
  // A push (or step) finishing at training time t is dropped: not training.
  bool past_budget(double t) const { return t >= budget_; }
  // Training time clamped to the budget (a pause that ends past the budget
  // sees the state at the budget, since no push is taken after it).
  double clamp(double t) const { return t < budget_ ? t : budget_; }
  // Samples that end the run (0 = no epoch target).
  int64_t epoch_samples() const { return epoch_samples_; }
  bool epochs_done(int64_t samples) const {
    return epoch_samples_ > 0 && samples >= epoch_samples_;
  }

  // The first evaluation and checkpoint after training time t (a fresh run:
  // t = 0; a resume: the cut's time, when the checkpoint carries no times).
  void start_at(double t);
  double next_eval() const { return next_eval_; }
  double next_checkpoint() const { return next_checkpoint_; }
  bool eval_due(double t) const { return next_eval_ <= t && next_eval_ < budget_; }
  bool checkpoint_due(double t) const {
    return next_checkpoint_ <= t && next_checkpoint_ < budget_;
  }
  // Moves the next evaluation (checkpoint) past training time t.
  void eval_done(double t);
  void checkpoint_done(double t);

  // The next evaluation and checkpoint times. load() follows a changed
  // train.checkpoint_every: the next cut is then one new period after the
  // saved cut's time `cut_s`.
  void save(StateWriter& w) const;
  void load(StateReader& r, double cut_s);
  // The same from times read elsewhere (a next checkpoint <= 0: none saved).
  void resume_times(double next_eval, double next_checkpoint, double cut_s);

 private:
  double budget_ = kNever;
  int64_t epoch_samples_ = 0;
  double eval_every_ = 0;
  double checkpoint_every_ = 0;  // 0 = no checkpoints
  double next_eval_ = kNever;
  double next_checkpoint_ = kNever;
};

class RunStops;

// Runs the evaluations and checkpoints due at or before training time t, in
// time order (an evaluation due at a checkpoint's time comes first, so the
// checkpoint holds its row): evaluate(at) then eval_done, or
// checkpoint_done then checkpoint(at), until none is due or `stops` has
// stopped. For a runtime that advances through its own events (the
// simulators): call it before each event at time t.
void run_due(TrainSchedule& schedule, double t, const RunStops& stops,
             const std::function<void(double)>& evaluate,
             const std::function<void(double)>& checkpoint);

class RunStops {
 public:
  explicit RunStops(const Config& c) : c_(&c) {}

  bool stopped() const { return !reason_.empty(); }
  // One line saying why, or "" while the run goes on.
  const std::string& reason() const { return reason_; }
  // True when the stop is for too few live workers.
  bool below_min() const { return below_min_; }
  // A final checkpoint is written when the run ended normally or below
  // train.min_workers (a diverged state is never worth resuming).
  // (A front end's request, too: the state is sound.)
  bool final_checkpoint_allowed() const { return !stopped() || below_min_ || requested_; }
  // True when the stop is a front end's request (Config::stop).
  bool requested() const { return requested_; }

  // At an evaluation: `row` (just built), the parameters it evaluated and
  // the rows before it (rows.front(), the row at t = 0, is the reference of
  // train.diverge_factor). Returns true if the run must stop.
  bool check_row(const MetricsRow& row, std::span<const float> params,
                 const std::vector<MetricsRow>& rows);
  // After a push: more than train.max_nonfinite consecutive non-finite
  // pushes at the server (`consecutive`), at training time t, version
  // `updates`.
  bool check_pushes(int64_t consecutive, int64_t updates, double t);
  bool check_pushes(const Server& server, double t);
  // check_pushes without the front end's request: the train.max_nonfinite
  // rule alone. For ranks that must all take the same decision (mpi
  // gossip): the request, read on one rank at any time, is agreed on
  // separately.
  bool check_nonfinite(int64_t consecutive, int64_t updates, double t);
  // Membership: `why` is Membership::record()'s line ("" = enough workers).
  bool check_membership(const std::string& why);
  // After a resume whose membership started afresh (another worker count:
  // every worker live again), a saved stop below train.min_workers no
  // longer holds and is lifted; any other saved stop stays.
  void membership_restarted() {
    if (below_min_) {
      reason_.clear();
      below_min_ = false;
    }
  }
  // Any other stop (first wins).
  void stop(const std::string& why, bool below_min = false);
  // A request from outside the run that the runtime received itself (a
  // signal to an mpi gossip rank): `why` after StopRequest::kPrefix, and a
  // final checkpoint is allowed, as for Config::stop.
  void request(const std::string& why);
  // Config::stop, if requested. At an evaluation (`at_evaluation`) only a
  // request made for that evaluation (StopRequest::at_evaluation(): the
  // callback's) counts, so Ctrl-C during an evaluation ends the run at the
  // next push, after which a final checkpoint is allowed; after a push,
  // every request counts. Returns stopped().
  bool check_request(bool at_evaluation);

  void save(StateWriter& w) const;
  void load(StateReader& r);

 private:
  const Config* c_;
  std::string reason_;
  bool below_min_ = false;
  bool requested_ = false;
};

// The run layer's part of every runtime's checkpoint: blob "run" (the stops,
// then the schedule). kRunBlob names it.
inline constexpr const char* kRunBlob = "run";
std::string save_run_state(const RunStops& stops, const TrainSchedule& schedule);
// Restores both from ck's "run" blob. A checkpoint written before the blob
// existed has none: the schedule then starts after the cut (ck.info.train_s)
// and no stop is pending. Throws InputError naming the blob if corrupt.
void load_run_state(const Checkpoint& ck, RunStops& stops, TrainSchedule& schedule);
// The same from the blob's bytes (`what` names them in messages) and the
// cut's training time (an mpi rank that received them from rank 0).
void load_run_state(std::string_view bytes, const std::string& what, double cut_s, RunStops& stops,
                    TrainSchedule& schedule);

// The lines themselves (tests and the stops above).
std::string divergence_line(std::span<const float> params, const MetricsRow& row,
                            double first_test_loss, double factor);

}  // namespace hsgd
