// The parameter server as a state machine. It takes events (push, pull, join,
// leave) and returns decisions (an update was applied; these waiting workers
// may go on). It owns no thread, reads no clock and does no I/O: the threads
// runtime calls it under a lock, the simulator at virtual times, an MPI server
// rank from its message loop. Time, where a policy needs it, comes in with the
// event.
//
// Thread-safety: none. The caller serialises all calls on one Server.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "hsgd/core/error.h"
#include "hsgd/core/state.h"
#include "hsgd/optim/optimizer.h"
#include "hsgd/policy/mitigation.h"
#include "hsgd/policy/policy.h"
#include "hsgd/server/noise.h"

namespace hsgd {

struct ServerOptions {
  int workers = 1;  // initial live workers: ids 0..workers-1
  Aggregation aggregation = Aggregation::kMean;
  double lr = 0.01;  // base learning rate (after optim.scale_lr: see scaled_lr)
  LrSchedule lr_schedule;
  int64_t samples_per_epoch = 1;  // training-set size, for Progress::epochs
  // Staleness mitigations applied to each push before aggregation. With
  // DC-ASGD or Gap-Aware on, the server keeps a copy of the parameters each
  // worker last pulled: workers x params floats (plus 2 x params for
  // Gap-Aware's average step and scratch).
  MitigationOptions staleness;
  // Clip each push to this L2 norm before the mitigations; 0 = off (>= 0).
  double clip_norm = 0;
  // Estimate the gradient noise scale of the pushes (server/noise.h;
  // train.noise_scale): one more pass over each finite push, and a copy
  // of every other one.
  bool noise_scale = false;
};

// What the runtime must do after an event.
struct Decision {
  bool applied = false;       // an update was applied during this event
  uint64_t version = 0;       // the server's version after the event
  bool caller_waits = false;  // the calling worker must wait until released
  std::vector<int> released;  // workers whose wait ends now
};

// Counters since the last take_stats() call.
struct ServerStats {
  int64_t pushes = 0;
  int64_t updates = 0;
  int64_t samples = 0;       // sum of pushed batch sizes
  double staleness_sum = 0;  // over applied pushes
  int64_t staleness_count = 0;
  int64_t staleness_max = 0;
  int64_t dropped = 0;    // pushes discarded by the staleness filter (also counted in pushes)
  int64_t nonfinite = 0;  // pushes discarded for a NaN or Inf (also counted in pushes)
  double loss_sum = 0;    // sum of pushed training losses
  int64_t loss_count = 0;
};

// What a row-sparse table (server/sparse.h) must follow of a Server: the
// pushes that join the buffer and the updates that apply it, and its part
// of the checkpoint. Called by the Server, under the caller's
// serialisation; the hook must not call back into the Server.
class ServerHook {
 public:
  virtual ~ServerHook() = default;
  // A push of `worker` with staleness `tau` joined the buffer (dropped and
  // non-finite pushes never do).
  virtual void on_buffered(int worker, int64_t tau) = 0;
  // The buffered `pushes` pushes are applied as one update with rate `lr`.
  virtual void on_apply(size_t pushes, double lr) = 0;
  // Appended to / read after the Server's own state.
  virtual void save(StateWriter& w) const = 0;
  virtual void load(StateReader& r) = 0;
};

class Server {
 public:
  // `params` is the server's parameter shard (owned by the caller, outlives
  // the server); it is updated in place.
  Server(std::span<float> params, const ServerOptions& o, std::unique_ptr<Policy> policy,
         std::unique_ptr<Optimizer> optimizer);

  // A worker asks for the parameters. When !caller_waits the runtime copies
  // params() (at `version`) to the worker before any other event. With
  // DC-ASGD or Gap-Aware on, the server records its own copy of params()
  // as the worker's pulled parameters.
  //
  // SSP (Policy::staleness_bound() = s >= 0): the server counts each
  // worker's clock, the pushes it has made (dropped ones included). A pull
  // from a live worker whose clock exceeds the minimum clock over live
  // workers by more than s returns caller_waits = true and nothing else
  // happens: the pull did not complete. The worker is then a pull-waiter
  // until a later event (a push, leave or join that raises the minimum, or
  // its own leave) names it in `released`; the runtime must then call
  // on_pull again for it, which returns at once (the minimum never falls).
  // A worker is never both a pull-waiter and a push-waiter. The slowest live
  // worker never waits, so SSP cannot deadlock.
  Decision on_pull(int worker);

  // A worker pushes a gradient of the mean loss over `batch_size` samples,
  // computed from parameters at `version`. `seconds` is the runtime's time
  // since training started. May apply an update.
  //
  // A push holding a NaN or Inf is never applied: it is counted (pushes,
  // samples, nonfinite; its loss is not) and discarded like a filtered push
  // (no share of K, its pusher does not wait). consecutive_nonfinite()
  // counts such pushes since the last finite one. With clip_norm > 0 a
  // finite push is scaled to L2 norm <= clip_norm before the mitigations.
  //
  // Staleness mitigations (ServerOptions::staleness) act here, on the push's
  // tau = version() - version, before it joins the buffer. A push the filter
  // drops (tau > tau_max) is counted (pushes, samples, loss, dropped) but
  // never buffered: it does not count toward K, and its pusher does not
  // wait (caller_waits = false) even under a waiting policy; the runtime
  // lets it pull fresh parameters at once. (Like any event it may still fire
  // the buffered pushes of others if the threshold fell meanwhile.) DC-ASGD and Gap-Aware
  // use the copy recorded by the worker's last on_pull if that was at
  // `version`; without one (a runtime that pushes without pulling) the push
  // is left uncompensated.
  Decision on_push(int worker, uint64_t version, std::span<const float> grad, int64_t batch_size,
                   double loss, double seconds);
  // The same for a push the runtime screened part by part (screen_part on
  // each, every one true: `finite`), e.g. as the worker sent its chunks, so
  // that the check overlaps the transfer and covers a push sharded over
  // several servers whole; the push is still applied only whole, and a
  // non-finite one not at all. With clip_norm on (it needs the whole push's
  // norm) the push is screened here as by on_push.
  Decision on_screened_push(int worker, uint64_t version, std::span<const float> grad,
                            int64_t batch_size, double loss, double seconds, bool finite);
  // Whether a part of a push passes the non-finite rule (all its values
  // finite); a push passes when all its parts do.
  static bool screen_part(std::span<const float> part);

  // Membership. A worker that leaves is released if it was waiting and stops
  // counting towards thresholds; its buffered push, if any, stays in the
  // buffer. Leaving may make the buffer ready and apply an update. Under SSP
  // a leaver no longer holds back the minimum clock, so pull-waiters may be
  // released; a (re)joining worker's clock starts at the minimum over the
  // other live workers (if higher than its own), so joining never blocks
  // anyone.
  Decision on_join(int worker, double seconds);
  Decision on_leave(int worker, double seconds);

  // Saves and restores everything the server's future depends on: the
  // parameters, version, buffer (pending pushes and their sum), membership,
  // waits, clocks, counters (staleness histogram, stats since the last row),
  // mitigation state, and the policy's and optimizer's state. load() takes
  // what save() wrote for the same parameter count (throws InputError naming
  // the blob otherwise); the worker count may differ (ids the saved state
  // knows keep their membership: the runtime joins or removes workers after).
  void save(StateWriter& w) const;
  void load(StateReader& r);

  // Attaches a row-sparse table (borrowed, outlives the server; null
  // detaches). See ServerHook and server/sparse.h.
  void set_hook(ServerHook* hook) { hook_ = hook; }

  // Overlapping an update with the sends of its parameters (the mpi
  // runtime: mpi/shard_server.h). With deferred updates on, an event that
  // applies an update leaves the optimizer's step pending: its Decision,
  // the version and every counter are as after the step, but the
  // parameters change only as update_to(end) runs the step over
  // [update_done(), end), front to back. Every event that reads or writes
  // the parameters (a push, join, leave, load; a pull only when DC-ASGD or
  // Gap-Aware copies them) first finishes a pending step, so the results
  // equal those of the step run in the event. save(), params() and
  // set_params() require no pending step.
  // The push an update takes straight (one push alone, async) is read by
  // the pending step: the caller keeps it unchanged until the step is done.
  // Never deferred (the step runs in the event) while Gap-Aware or a
  // row-sparse table needs the whole step at once; off by default.
  void set_deferred_updates(bool on) { defer_ = on; }
  // The first parameter the pending step has not yet written:
  // params().size() when no step is pending.
  size_t update_done() const { return step_.pending ? step_.done : params_.size(); }
  void update_to(size_t end);
  void finish_update() { update_to(params_.size()); }

  std::span<const float> params() const {
    HSGD_ASSERT(!step_.pending, "the parameters read with a step pending");
    return params_;
  }
  // Moves the server onto `p`, which must hold the same values as params()
  // (same size): for a runtime that double-buffers the parameters its
  // sends read (mpi/param_buffers.h).
  void set_params(std::span<float> p);
  uint64_t version() const { return version_; }
  int live_workers() const { return live_count_; }
  int64_t samples() const { return total_samples_; }
  int64_t pushes() const { return total_pushes_; }
  int64_t consecutive_nonfinite() const { return consecutive_nonfinite_; }
  bool is_live(int worker) const {
    return worker >= 0 && static_cast<size_t>(worker) < live_.size() &&
           live_[static_cast<size_t>(worker)];
  }
  // True while `worker` waits: after a push (until its update) or, under SSP,
  // after a pull that did not complete.
  bool is_waiting(int worker) const {
    const auto w = static_cast<size_t>(worker);
    return w < waiting_.size() && (waiting_[w] || pull_waiting_[w]);
  }
  // The number of worker ids the server knows (live or not).
  int known_workers() const { return static_cast<int>(live_.size()); }
  // How many applied pushes had staleness 0, 1, ...; the last bucket
  // (kStalenessBuckets - 1) counts that staleness and above. Since the start.
  static constexpr size_t kStalenessBuckets = 65;
  const std::vector<int64_t>& staleness_histogram() const { return staleness_hist_; }
  const Policy& policy() const { return *policy_; }
  // A worker's clock: the pushes it has made (SSP).
  int64_t clock(int worker) const { return clock_[static_cast<size_t>(worker)]; }
  // The threshold K in force now.
  int threshold(double seconds) const;
  Progress progress(double seconds) const;
  ServerStats take_stats();
  // The noise-scale sums since the last call (ServerOptions::noise_scale;
  // all zero when off).
  NoiseSums take_noise() { return noise_.take(); }

 private:
  struct Pending {
    int worker;
    uint64_t version;
  };
  // True when the buffer holds enough pushes from live workers for the
  // threshold: distinct workers under a waiting policy (a worker that
  // pushed, left, rejoined and pushed again counts once), pushes otherwise
  // (kbatch: one worker may contribute several).
  bool ready(double seconds) const;
  // Returns false for a non-finite push; clips a finite one
  // into scratch_ when clip_norm is on, setting *g to it.
  // on_push and on_screened_push (`finite` set).
  Decision push(int worker, uint64_t version, std::span<const float> grad, int64_t batch_size,
                double loss, double seconds, const bool* finite);
  // `finite`: the push was screened part by part (on_screened_push).
  bool screen(std::span<const float>* g, const bool* finite = nullptr);
  // Applies the buffered pushes, whose sum is `sum`: acc_, or the one
  // buffered push itself (an update of one push skips the buffer).
  void apply(Decision* d, std::span<const float> sum);
  Decision decision() const;
  // SSP: the minimum clock over live workers (INT64_MAX if none), and the
  // release of the pull-waiters it now lets through.
  int64_t min_live_clock() const;
  void release_pull_waiters(Decision* d);
  // The push after DC-ASGD, Gap-Aware and staleness scaling (in scratch_).
  std::span<const float> mitigate(size_t worker, uint64_t version, int64_t tau,
                                  std::span<const float> grad);
  void grow(size_t workers);

  std::span<float> params_;
  ServerOptions opt_;
  std::unique_ptr<Policy> policy_;
  std::unique_ptr<Optimizer> optimizer_;
  uint64_t version_ = 0;
  std::vector<float> acc_;        // sum of buffered gradients
  std::vector<Pending> pending_;  // buffered pushes
  std::vector<bool> live_;
  std::vector<bool> waiting_;       // push-waiters
  std::vector<int64_t> clock_;      // pushes made, per worker
  std::vector<bool> pull_waiting_;  // SSP pull-waiters
  int live_count_ = 0;
  int64_t total_samples_ = 0;
  int64_t total_pushes_ = 0;
  std::vector<int64_t> staleness_hist_ = std::vector<int64_t>(kStalenessBuckets, 0);
  ServerStats stats_;
  // Mitigation state (empty unless the mitigation needing it is on).
  static constexpr uint64_t kNoCopy = UINT64_MAX;
  std::vector<std::vector<float>> pulled_;  // per worker: params at its last pull
  std::vector<uint64_t> pulled_version_;    // per worker: that pull's version, or kNoCopy
  std::vector<float> scratch_;              // the mitigated push
  std::vector<float> step_ema_;             // Gap-Aware: average |dw| (biased EMA)
  std::vector<float> before_;               // Gap-Aware: params before the update
  int64_t tracked_updates_ = 0;             // Gap-Aware: updates folded into step_ema_
  StalenessMean tau_mean_;                  // momentum_correction: running mean staleness
  NoisePairs noise_;                        // noise_scale: the pairs of pushes
  int64_t consecutive_nonfinite_ = 0;
  std::vector<float> clipped_;  // the clipped push (clip_norm > 0)
  ServerHook* hook_ = nullptr;  // row-sparse table, if any
  // The pending step (set_deferred_updates): the sum it applies (acc_, or
  // the one push it takes straight) and how far it has written.
  struct PendingStep {
    bool pending = false;
    bool clears_acc = false;  // the sum is acc_: zeroed once the step is done
    std::span<const float> sum;
    size_t done = 0;
  };
  bool defer_ = false;
  PendingStep step_;
};

}  // namespace hsgd
