// Fault injection ([faults]) and the membership log: which workers leave and
// (re)join, when and why. Torch-free, thread-free, clock-free: times come in
// from the runtime (virtual seconds on sim, training seconds on threads).
//
// FaultPlan is a deterministic stream: scheduled kills and rejoins from the
// config, random kills at faults.kill_rate (a Poisson process per live
// worker), rejoins faults.rejoin_after seconds after a random kill or an
// exception, and the per-gradient exception draws; every draw comes from the
// worker's own stream seeded by train.seed, so the same config gives the same
// faults. Its whole state saves and restores (checkpoints).
#pragma once
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "hsgd/core/rng.h"
#include "hsgd/core/state.h"

namespace hsgd {

// "worker:3@20s" (the s is optional): worker 3 at 20 training seconds.
struct FaultAt {
  int worker = 0;
  double at = 0;
  bool operator==(const FaultAt&) const = default;
};

struct FaultOptions {
  std::vector<FaultAt> kill;    // faults.kill
  std::vector<FaultAt> rejoin;  // faults.rejoin
  // Expected random kills per live worker per minute of training (>= 0).
  double kill_rate = 0;
  // Seconds after a random kill or an injected exception until the worker
  // rejoins; < 0 = off (it stays out). Scheduled kills rejoin only by
  // faults.rejoin.
  double rejoin_after = -1;
  // Probability that one gradient computation throws, in [0, 1].
  double exception_rate = 0;
  bool any() const {
    return !kill.empty() || !rejoin.empty() || kill_rate > 0 || exception_rate > 0;
  }
};

// Parses "worker:W@Ts" (W >= 0, T >= 0 seconds, finite). Throws InputError
// "<key> = '<spec>': expected worker:W@Ts, e.g. worker:3@20s" otherwise.
FaultAt parse_fault_at(const std::string& key, const std::string& spec);
std::string to_string(const FaultAt& f);

// Throws InputError (one line naming the key) for negative rates, an
// exception_rate above 1, a worker id >= workers, a non-finite value.
void validate(const FaultOptions& o, int workers, int min_workers);

// Why a worker left or joined.
enum class MembershipCause : int32_t {
  kKill,        // faults.kill
  kRandomKill,  // faults.kill_rate
  kException,   // faults.exception_rate, or the gradient threw
  kRejoin,      // faults.rejoin or faults.rejoin_after
  kSignal,      // mpi: SIGTERM / SIGINT
  kError,       // threads: the worker's gradient threw a real error
};
const char* to_string(MembershipCause c);

struct MembershipEvent {
  double time = 0;
  int worker = 0;
  bool join = false;  // false = leave
  MembershipCause cause = MembershipCause::kKill;
  std::string detail;  // an error's message, or empty
};

// The next fault of one worker.
struct FaultDue {
  double time = std::numeric_limits<double>::infinity();
  bool join = false;
  MembershipCause cause = MembershipCause::kKill;
};

class FaultPlan {
 public:
  FaultPlan() = default;
  FaultPlan(const FaultOptions& o, int workers, uint64_t seed);
  bool enabled() const { return opt_.any(); }

  // The next membership fault due for `worker` given whether it is live now
  // (a scheduled kill or random kill if live; a scheduled or timed rejoin if
  // not); time = infinity when none.
  FaultDue next(int worker, bool live) const;
  // The runtime carried out `e` (a fault from next() or any other leave or
  // join: an error, a signal): consumes it and draws what follows (the next
  // random kill after a join, the rejoin time after a random kill or an
  // exception).
  void apply(const MembershipEvent& e);
  // A resume that does not restore the plan (threads, mpi): every worker is
  // live at `t`; scheduled faults before t are void and random kills are
  // drawn from t.
  void restart_at(double t);
  // One draw per gradient: true when this gradient throws.
  bool gradient_throws(int worker);

  void save(StateWriter& w) const;
  void load(StateReader& r);

 private:
  struct PerWorker {
    Rng rng;
    size_t next_kill = 0;    // index into kills_[w] not yet done
    size_t next_rejoin = 0;  // index into rejoins_[w]
    double random_kill = std::numeric_limits<double>::infinity();
    double timed_rejoin = std::numeric_limits<double>::infinity();
  };
  double draw_kill(PerWorker& p, double from);

  FaultOptions opt_;
  std::vector<std::vector<double>> kills_, rejoins_;  // per worker, sorted
  std::vector<PerWorker> w_;
};

// Rng stream ids: worker w's fault draws use kFaultStream + w.
inline constexpr uint64_t kFaultStream = 7000000;

}  // namespace hsgd
