// The simulator's network (issue 27): a flow-level model of nodes (each
// simulated worker, each server shard) whose interfaces have an egress and
// an ingress capacity (bytes per second) and a per-message latency.
//
// A message occupies the sender's egress and the receiver's ingress while
// its bytes are transmitted, and is delivered `latency` seconds after its
// last byte left. Messages in transmission at the same time share the
// interfaces by max-min fairness (progressive filling): every message gets
// the same rate unless an interface elsewhere on its path gives it less, and
// what such a message leaves unused is shared among the others. This is how
// long-lived TCP flows through a rate-limited link (tc tbf, a switch port)
// share it, to first order; a FIFO per interface would instead deliver the
// messages one after the other, which no TCP stack does. Rates change only
// when a message starts or finishes, so the model is exact between events.
//
// With `shared = false` every message is priced alone (latency + bytes /
// min(egress, ingress)), as the simulator did before issue 27.
//
// A plain state machine: no clock, no threads. The caller passes virtual
// times that never decrease. Deterministic: the same calls give the same
// deliveries, bit for bit; save()/load() restore the state exactly.
// Cost: O((F + N) log N) per change for F messages in transmission on N
// nodes (256 workers: a few thousand operations per message).
#pragma once
#include <cstdint>
#include <limits>
#include <vector>

#include "hsgd/core/state.h"

namespace hsgd {

struct NodeLink {
  double egress = 0;   // bytes per second sent
  double ingress = 0;  // bytes per second received
};

class Network {
 public:
  Network(std::vector<NodeLink> nodes, double latency, bool shared);

  // Starts a message of `bytes` (>= 0) from node `from` to node `to` at
  // time `now`; `tag` is the caller's, returned on delivery.
  void send(double now, int from, int to, double bytes, int64_t tag);

  // The earliest time something is due (a message's last byte leaves, or a
  // message is delivered); +inf when the network is empty.
  double next_time() const;

  // Advances to time `t` (no later than next_time()) and returns the tags of
  // the messages delivered at `t`, in the order they were sent.
  std::vector<int64_t> advance(double t);

  // Messages sent and not yet delivered.
  size_t in_flight() const { return flows_.size() + landing_.size(); }

  // Bytes each node has sent and received so far (messages in transmission
  // count the bytes already carried), and the busiest interface's
  // utilisation over [t0, t]: carried bytes / (capacity * (t - t0)), where
  // `since` holds the carried bytes at t0 (from carried()).
  struct Carried {
    std::vector<double> sent, received;
  };
  Carried carried(double t) const;
  double busiest_util(const Carried& since, const Carried& now, double seconds) const;

  int nodes() const { return static_cast<int>(nodes_.size()); }
  double latency() const { return latency_; }
  bool shared() const { return shared_; }

  void save(StateWriter& w) const;
  void load(StateReader& r);

 private:
  struct Flow {
    int32_t from, to;
    int64_t tag;
    uint64_t seq;   // send order
    double left;    // bytes not yet transmitted at time `at_`
    double rate;    // bytes per second since `at_`
    double finish;  // when its last byte leaves at this rate
  };
  struct Landing {  // transmitted, delivered at `time`
    double time;
    uint64_t seq;
    int64_t tag;
  };
  void progress_to(double t);  // moves every flow's bytes on to t
  void share();                // max-min fair rates, and finish times
  double lone_rate(const Flow& f) const;

  std::vector<NodeLink> nodes_;
  double latency_;
  bool shared_;
  double at_ = 0;  // the time flows' `left` refers to
  uint64_t next_seq_ = 0;
  std::vector<Flow> flows_;              // in transmission, in send order
  std::vector<Landing> landing_;         // in send order
  std::vector<double> sent_, received_;  // bytes carried up to at_
};

}  // namespace hsgd
