// The Policy seam: when buffered pushes become one update, and whether a
// pusher must wait for it. Semantics: DESIGN.md, "Policies: the exact
// semantics". A policy owns no thread, buffer or clock; the server asks it.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "hsgd/policy/schedule.h"

namespace hsgd {

// How far training has come, as the server knows it. `seconds` is supplied
// by the runtime with each event (wall or virtual time); the server reads no
// clock.
struct Progress {
  int64_t updates = 0;  // the server's version V
  double seconds = 0;
  double epochs = 0;
};

enum class Aggregation { kMean, kSum };
Aggregation parse_aggregation(const std::string& s);  // mean | sum
const char* to_string(Aggregation a);

struct PolicyOptions {
  std::string kind = "hybrid";  // sync | async | kasync | kbatch | hybrid
  int k = 0;                    // kasync, kbatch: the threshold K (>= 1)
  ScheduleOptions schedule;     // hybrid
  Aggregation aggregation = Aggregation::kMean;
};

class Policy {
 public:
  virtual ~Policy() = default;
  // "sync", "async", "kasync:4", "kbatch:4", "hybrid(step)".
  virtual std::string name() const = 0;
  // The number of buffered pushes from live workers that fires an update,
  // clamped to [1, live_workers] (live_workers >= 1).
  virtual int threshold(const Progress& p, int live_workers) const = 0;
  // True: a pusher waits until the update containing its push is applied
  // (sync, kasync, hybrid). False: it pulls again at once (async, kbatch).
  virtual bool pusher_waits() const = 0;
  // Per-run state for checkpoints (empty for the stateless policies).
  virtual std::vector<double> save_state() const { return {}; }
  virtual void restore_state(std::span<const double>) {}
};

// Builds a policy for `workers` workers. Throws InputError for an unknown
// kind or K outside [1, workers] (naming the key policy.k).
std::unique_ptr<Policy> make_policy(const PolicyOptions& o, int workers, double lr);

}  // namespace hsgd
