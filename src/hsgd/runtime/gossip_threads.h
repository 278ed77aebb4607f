// The serverless gossip policies on the threads runtime (issue 28): one
// thread and one model copy per worker (policy/gossip.h's GossipModels), the
// gossip messages through shared memory with the simulator's semantics
// (gossip_sim.h):
//   dpsgd (cta)   the model is posted to the out-peers' mailboxes before the
//                 gradient is computed; after it, the worker waits for its
//                 in-peers' round-t models, combines, then takes its step;
//   dpsgd (atc), pdsgdm, sgp
//                 the step, then the post (sgp: its shares), the wait and the
//                 combination;
//   adpsgd        an active (even) worker averages its model with a random
//                 passive neighbour's under both workers' locks
//                 (std::scoped_lock: no deadlock whatever the pairing), then
//                 takes its step; a passive worker takes its steps on
//                 whatever its model is;
//   gossip.global_every = H: a barrier of every worker after each H-th step;
//                 the last to arrive replaces every model by the average.
// A worker waits for messages and barriers outside the evaluation gate, so an
// evaluation (of the average model, with the consensus distance) or a
// checkpoint pauses every worker between steps or in such a wait. Bytes per
// node are those a message would carry (4 x params; push-sum + 8).
// Checkpoints (runtime/gossip_checkpoint.h): each worker is saved in its
// phase of the step (between steps, waiting for its in-peers' round with
// the parts already in its mailbox, at a global average's barrier, or, at
// the final cut, its gradient not yet counted) and resumes in it; a resume
// needs the same train.workers. Restoring is exact; the run after it is as
// nondeterministic as any threads run.
// Membership ([faults], train.min_workers; docs/gossip.md#membership): the
// simulator's rules. A worker carries out its own leave at the start of a
// step (a kill due on the training clock, or its gradient drawn to throw)
// and its own join once its rejoin is due, inside the gate with every
// model lock and the run's lock held: the graph is rebuilt over the live
// workers, a new generation of rounds voids the old round's messages
// (push-sum shares credited to their receiver, the leaver's to its heir),
// a waiting worker ends its step with what it has. Rounds are named by
// step: in a new generation nobody waits for an in-peer that already took
// the round's step. A checkpoint with [faults] also holds the membership
// (gossip_membership and membership: who is live, the generation, the
// fault plan's position, the log, the shards); a worker that had left
// resumes sitting out until its rejoin, and a fault carried out before the
// cut is not carried out again.
#pragma once
#include <functional>

#include "hsgd/runtime/runtime.h"

namespace hsgd {

class GossipModels;
struct MembershipEvent;

class GossipThreadsRuntime final : public Runtime {
 public:
  RunResult run(const Job& job, Recorder* recorder, Observer* observer) override;

  // Tests: called on the worker's thread right after each leave or join,
  // with every model and the run's shared state locked, so nothing is in
  // flight (a membership change credits or voids every message): the
  // event, the leaver's push-sum heir or the joiner's donor (or -1), and
  // every worker's model.
  using MembershipProbe =
      std::function<void(const MembershipEvent& e, int other, const GossipModels& models)>;
  MembershipProbe on_membership;
};

}  // namespace hsgd
