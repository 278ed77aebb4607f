// Elastic membership for the runtimes (issue 10): the fault plan, the log of
// membership events, train.min_workers, and the data shards that follow the
// live set. One Membership per run; the runtime carries out each leave and
// join on the Server (or, for the serverless gossip policies, on its live
// mask: the overloads taking `live`), then tells Membership. Thread-safety: none (the
// threads runtime calls it under its lock).
//
// Shards: when the live set changes, every live worker's shard is stale; a
// worker takes its shard of make_partition(live count) (its rank among the
// live workers, in id order) from its next epoch, i.e. when its next batch
// would wrap around its current shard (the tail shorter than one batch is
// skipped). A (re)joining worker takes its new shard at once.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "hsgd/core/faults.h"
#include "hsgd/core/state.h"
#include "hsgd/runtime/runtime.h"
#include "hsgd/server/server.h"

namespace hsgd {

class Membership {
 public:
  Membership(const Job& job, int workers);

  bool faults_on() const { return plan_.enabled(); }
  FaultPlan& plan() { return plan_; }
  const std::vector<MembershipEvent>& log() const { return log_; }
  // True once any worker has left or joined during the run.
  bool changed() const { return !log_.empty(); }

  // Records a leave or join the runtime has just carried out on `server`:
  // logs it, advances the fault plan, marks the shards stale. Returns the
  // stop line when fewer than train.min_workers are now live, else "".
  std::string record(const MembershipEvent& e, const Server& server);
  // The same without a server: `live` workers are live after the event.
  std::string record(const MembershipEvent& e, int live);

  // Before worker w's next batch of `batch` samples: gives it its shard of
  // the current live set if its shard is stale and its epoch is ending (or
  // at once with `now`, for a joiner).
  void refresh(int w, ShardSampler& sampler, int64_t batch, const Server& server, bool now);
  // The same without a server: live[v] != 0 for the live workers.
  void refresh(int w, ShardSampler& sampler, int64_t batch, const std::vector<char>& live,
               bool now);

  // The sampler worker w had when the state was saved (built for its shard
  // key, fresh): call after load(), before restoring the sampler's position.
  ShardSampler sampler_for(int w);

  void save(StateWriter& w) const;
  void load(StateReader& r);

 private:
  struct Key {
    int32_t count;  // live workers the partition was drawn for
    int32_t rank;   // the worker's index among them
  };
  const Partition& partition(int count);
  // Whether worker w takes a new shard before this batch (refresh's test).
  bool due(int w, const ShardSampler& sampler, int64_t batch, bool now) const;
  // Gives worker w its shard of key k (refresh's second half).
  void take(int w, ShardSampler& sampler, Key k, bool now);
  ShardSampler build(int w, Key k);

  const Job& job_;
  int n_;
  FaultPlan plan_;
  std::vector<MembershipEvent> log_;
  std::vector<Key> have_;
  std::vector<char> stale_;
  std::map<int, std::shared_ptr<const Partition>> partitions_;
};

}  // namespace hsgd
