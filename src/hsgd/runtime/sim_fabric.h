// The simulator's cluster between a pull and the end of its push's service
// (issue 27): the network (core/network.h), the server shards with one
// update queue each, and the cores the workers compute on (sim.cores).
//
// One worker step, as the simulator's event loop drives it:
//   pull served (SimRun)  -> each shard s sends the worker its slice
//   every slice delivered -> compute (on a core, when sim.cores is set)
//   compute done          -> the worker sends shard s its gradient's slice
//   slice 0 delivered     -> shard 0's queue: it orders the pushes; when it
//                            starts one, the server state machine takes it
//                            (Host::start_push) and decides
//   slice s delivered     -> shard s serves the pushes in shard 0's order,
//                            server_ns_per_param x its slice (x 2 with an
//                            update), on a core when sim.cores is set
//   every shard served    -> Host::push_served (releases, the next pull)
// Bytes are those the mpi runtime sends (mpi/transport.h): a push is the
// 56-byte Request to rank 0 plus each shard's slice of the gradient, a pull
// the 16-byte Reply from rank 0 plus each shard's slice of the parameters.
// Rank 0's 56-byte event notices to the other shards are not modelled.
//
// A plain state machine on virtual time; no torch, no threads. Its whole
// state is saved and restored (save()/load()).
#pragma once
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "hsgd/core/network.h"
#include "hsgd/core/shards.h"
#include "hsgd/core/state.h"
#include "hsgd/runtime/runtime.h"
#include "hsgd/runtime/sim_cores.h"

namespace hsgd {

// The events the fabric asks its host to schedule (and hands back through
// on_event): the network's next delivery, a worker's compute done, a
// shard's service done.
enum class FabricEvent : int32_t { kNetwork, kComputeDone, kShardDone };

class SimFabric {
 public:
  struct Host {
    virtual ~Host() = default;
    virtual void schedule(double t, FabricEvent e, int id) = 0;
    // Shard 0 starts serving w's push: the server takes it. Returns
    // whether an update fired (the service then costs twice as much).
    virtual bool start_push(int w, double t) = 0;
    // Every shard has served w's push.
    virtual void push_served(int w, double t) = 0;
  };
  struct Options {
    int workers = 1;
    std::vector<ParamShard> shards;  // split_shards(params, servers)
    double latency = 0;
    double bandwidth = 1;         // workers' links, bytes/s each direction
    double server_bandwidth = 1;  // each shard's link
    bool shared = true;
    int cores = 0;  // 0 = unlimited
    double server_s_per_param = 0;
  };
  static constexpr int64_t kRequestBytes = 56;  // sizeof(mpi::Request)
  static constexpr int64_t kReplyBytes = 16;    // sizeof(mpi::Reply)

  SimFabric(Options o, Host* host);

  // Shard s's part of a message of `payload` bytes covering every
  // parameter (pro rata to the shard's slice; the first shard's part
  // rounded up), plus the control header on shard 0.
  std::vector<int64_t> split_bytes(int64_t payload, int64_t header) const;

  // Worker w's pull was served at t: the shards send their slices
  // (`bytes[s]`); then it computes for `compute_s` seconds and pushes
  // `push_bytes[s]` to each shard. Of those seconds only the first `core_s`
  // hold a core (sim.cores): the rest is a straggler's injected delay and
  // slow-down, which the real runtimes spend asleep after the gradient.
  void pull_served(double t, int w, std::vector<int64_t> bytes, double compute_s, double core_s,
                   std::vector<int64_t> push_bytes);
  // Shard 0's service of w's next push costs `seconds` instead of its
  // slice's (model.sparse: the dense part and the push's rows; one shard).
  void set_push_cost(int w, double seconds) { steps_[static_cast<size_t>(w)].cost = seconds; }

  void on_event(double t, FabricEvent e, int id);

  // Worker w left at t: its messages, compute and queued push are
  // forgotten. Returns true when shard 0 had already ordered its push,
  // which is still served (DESIGN.md keeps a leaver's push): the host then
  // hears push_served for it and must not start its next pull.
  bool drop_worker(double t, int w);

  // Whether worker w has a push computed or being computed that the server
  // has not yet taken (a checkpoint saves its gradient).
  bool carries_push(int w) const {
    const Step& st = steps_[static_cast<size_t>(w)];
    return st.stage != kIdle && !st.taken;
  }
  const Network& network() const { return net_; }
  // summary.json "network" at time t: the busiest interface over the run
  // and the bytes per node (servers first).
  NetworkResult report(double t, const std::string& model) const;
  int servers() const { return static_cast<int>(shards_.size()); }
  int node_of_shard(int s) const { return o_.workers + s; }

  void save(StateWriter& w) const;
  void load(StateReader& r);

 private:
  // kDelaying (limited cores only): its gradient is done and its core
  // freed; the rest of compute_s (a straggler's delay) runs, then it pushes.
  enum Stage : int32_t { kIdle, kPulling, kCoreWait, kComputing, kPushing, kQueued, kDelaying };
  struct Step {
    int32_t stage = kIdle;
    int32_t pending = 0;  // messages of the stage not yet delivered
    uint32_t gen = 0;     // bumped when the worker leaves: stale messages are ignored
    int32_t taken = 0;    // shard 0 has taken its push (the server has it)
    double compute_s = 0;
    double done_at = -1;  // when its compute ends (a stale kComputeDone differs)
    double cost = -1;     // shard 0's service cost override, or -1
  };
  struct Ordered {  // a push shard 0 has started
    int32_t worker;
    int32_t served;  // shards done with it
    uint8_t applied;
    uint32_t gen;  // the worker's generation when ordered
    double cost0;  // shard 0's cost (its override, when set)
  };
  struct Shard {
    std::deque<int32_t> arrived;  // shard 0: pushes whose slice arrived, FIFO
    uint64_t serving = 0;         // the order number of the push in service (when busy)
    bool busy = false;
    bool core_wait = false;
    uint64_t next = 0;  // the ordered push this shard serves next (shards >= 1)
  };
  int64_t tag(int w, int s, int kind) const;
  void deliver(double t, int64_t tag);
  void compute(double t, int w);
  void try_serve(double t, int s);
  void serve(double t, int s);
  void shard_done(double t, int s);
  // A task's core is free: starts the tasks that take one (worker w >= 0,
  // shard -(s+1)).
  void release(double t);
  void wake_network();

  Options o_;
  Host* host_;
  std::vector<ParamShard> shards_;
  Network net_;
  double net_wake_ = -1;  // the time of the kNetwork event scheduled last
  std::vector<Step> steps_;
  // Per worker: the seconds of its compute in progress that hold a core
  // (the rest of compute_s holds none). Limited cores only; saved only then.
  std::vector<double> core_s_;
  std::vector<std::vector<int64_t>> push_bytes_;  // per worker, per shard
  std::vector<std::vector<uint8_t>> slice_in_;    // per worker: slice s arrived
  std::vector<Shard> shard_;
  std::deque<Ordered> order_;  // pushes shard 0 started, not yet served by all
  uint64_t order_base_ = 0;    // the order number of order_.front()
  CorePool cores_;             // sim.cores (runtime/sim_cores.h)
};

}  // namespace hsgd
