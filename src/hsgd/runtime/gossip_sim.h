// The serverless gossip policies on the simulator (issue 28): dpsgd,
// adpsgd, sgp and pdsgdm:P (policy/gossip.h) over a gossip topology
// (core/topology.h). Every worker is a node of the simulator's network
// (core/network.h) with its own model; a gossip round is real messages of
// 4 x params bytes to the worker's out-peers, so a node moves O(degree)
// bytes per step.
//
// One worker step, by policy (t: the worker's own step count):
//   dpsgd (cta)  at the start: the gradient at x_i is taken and x_i is sent
//                to the out-peers; after compute_time and every in-peer's
//                round-t model: x_i <- sum_j w_ij x_j, then the local step.
//   dpsgd (atc), pdsgdm (gossip steps)
//                after compute_time: the local step, x_i sent; when every
//                in-peer's round-t model is in: x_i <- sum_j w_ij x_j.
//   sgp          after compute_time: the local step on x_i (gradient at
//                z_i = x_i / w_i), then (x_i, w_i) split over itself and its
//                out-peers; the step ends when every in-peer's share is in.
//   adpsgd       after compute_time: an active (even) worker sends x_i to a
//                random passive (odd) neighbour; on arrival both become the
//                average, the passive side replies (4 x params bytes), and
//                on the reply the active worker applies its gradient. A
//                passive worker (or one without a passive neighbour)
//                applies its gradient at once. Nobody waits for anyone's
//                computation.
//   gossip.global_every = H: after every H-th step a worker sends its ring
//   successor 2 (n - 1) / n x 4 x params bytes (a ring all-reduce's share)
//   and waits until every worker has; then every model is the average, after
//   2 (n - 1) - 1 further latencies.
// Compute time: sim.compute_time x the straggler slow-down plus the delay
// draw. Evaluation (the average model x_bar, and the consensus distance)
// costs no virtual time. Deterministic: events at equal times in the order
// they were scheduled, sums in sender order, every random draw seeded.
// Checkpoints hold every worker's model, momentum, push-sum weight and
// gradient in flight, the messages in flight, the network and the event
// queue: a resume continues byte for byte.
#pragma once
#include "hsgd/runtime/runtime.h"

namespace hsgd {

class GossipSimRuntime final : public Runtime {
 public:
  // sim.compute_time = 0: calibrated (like the simulator's).
  std::vector<std::pair<std::string, std::string>> resolve(const Job& job) override;
  RunResult run(const Job& job, Recorder* recorder, Observer* observer) override;
};

}  // namespace hsgd
