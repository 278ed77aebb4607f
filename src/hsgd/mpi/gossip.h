// The serverless gossip policies on the mpi runtime (issue 28): no server
// ranks; rank i is worker i, with its own model, momentum and push-sum
// weight (policy/gossip.h's GossipModels, of one worker) and its own shard
// of the training data. MpiRuntime::run (mpi_runtime.cc) dispatches here.
//
// One step of rank i, with the threads runtime's semantics
// (runtime/gossip_threads.h) and gossip_combine's arithmetic:
//   1. the gradient at the de-biased model; dpsgd cta posts the round's
//      exchange (below) first, so that it overlaps the gradient;
//   2. the agreement: one small all-reduce of every rank's step (samples,
//      loss, finite or not, its training clock, a front end's stop request,
//      whether it leaves now),
//      so that every rank takes the run layer's decisions
//      (runtime/run_control.h: budget, evaluation, epoch target,
//      train.max_nonfinite) on the same figures at the same step. The ranks
//      therefore advance in lockstep, one agreement per step (a cost the
//      threads runtime does not pay; its workers are coupled only through
//      their neighbours);
//   3. an evaluation when one is due (below), then the step: dpsgd atc,
//      pdsgdm (on its gossip steps) and sgp take their local step, post the
//      round's exchange, wait for it and combine; cta waits, combines, then
//      steps; pdsgdm's other steps are local only;
//   4. gossip.global_every = H: after every H-th step an all-reduce replaces
//      every model by the average (push-sum weights back to 1).
// The exchange of round t: nonblocking point-to-point on the topology,
// MPI_Irecv from topo.in_peers(i, t) and MPI_Isend to topo.out_peers(i, t),
// the message tags carrying the round (gossip_tag); sgp sends its push-sum
// share of the weight as a second message. A step dropped at the budget or
// a stop still completes the exchange it posted (every rank posted its
// part), so that no message is left in flight.
//
// Evaluation (every rank, collectively, with the training clocks paused;
// mpi/gossip_eval.h, shared with adpsgd): an all-reduce of the models and
// the weights gives every rank the average model x_bar = sum_i x_i /
// sum_i w_i; a reduce of ||x_i / w_i - x_bar||^2 gives rank 0 the
// consensus distance. Rank 0 evaluates x_bar, writes the row
// (runtime/gossip_row.h) and checks it for divergence; its verdict is
// broadcast, and a diverged run ends on every rank (the stop line reaches
// every rank through MpiRuntime::run: exit 3).
//
// Checkpoints (runtime/gossip_checkpoint.h's layout, as on threads): a
// checkpoint due at the agreed time is cut after that step, every rank
// between steps; each rank sends its part to rank 0, which writes it. At the
// final cut of a budget or a stop every rank holds the gradient it computed
// past the end (a resume takes it first). On resume rank 0 checks the
// checkpoint (check_gossip_resume; a refusal is the same InputError on
// every rank) and sends each rank its part: a resumed run is the
// uninterrupted one, bit for bit. The same rank count is needed.
//
// A leave (dpsgd, sgp, pdsgdm; docs/gossip.md#mpi): SIGTERM or SIGINT to
// rank R sets R's flag in the agreement's SUM (one element per rank), so
// every rank learns at the same step which ranks leave, and carries the
// leave out as the threads runtime does: the graph becomes the live graph
// (GossipGraph; with every rank live the configured topology, peer for
// peer), sgp sends the leaver's (x, w) to its live successor (tag
// kTagGossipLeave), dpsgd and pdsgdm drop it; every rank records the event
// in its Membership (the log, the shards, train.min_workers). The leaver
// drops its gradient and goes dormant: no step, no data, no round, but it
// enters every collective (the agreement, rows, global averages,
// checkpoints, the end) with a zero contribution, and returns at the end
// like every rank. Checkpoints after a leave add gossip_membership-W per
// rank (the live set, the live ranks' steps, its Membership); without a
// leave they are unchanged. CHOCO, and a leave of every live rank, stop the
// whole run instead (a request, exit 3).
//
// adpsgd takes no per-step agreement and runs apart: run_gossip hands it to
// mpi/gossip_adpsgd.h.
//
// Every wait has the deadline mpi.timeout; past it the rank throws MpiError
// naming the step and the peers (or the collective) it waited for.
#pragma once
#include <mpi.h>

#include "hsgd/runtime/runtime.h"

namespace hsgd::mpi {

// Throws InputError (the same on every rank, before any message) unless a
// gossip run can go on `ranks` ranks: train.workers must equal the rank
// count, a model must fit one message.
void check_gossip_launch(const Job& job, int ranks);

// Rank 0 of a resumed launch of `ranks` ranks, before anything is written:
// `ck` must be a gossip checkpoint of the mpi layout with one worker per rank
// (the same rank count), every part decoding as the ranks' restore will.
// Throws InputError, one line naming the file.
void check_gossip_resume(const Job& job, const Checkpoint& ck, int ranks);

// Every rank of `comm` calls it with the same job (rank 0 with a recorder
// that is not null). Rank 0's result is the run's; the others have
// primary = false and, when they learnt of it, the stop line.
RunResult run_gossip(const Job& job, MPI_Comm comm, Recorder* recorder, Observer* observer);

// Tests (dpsgd, sgp, pdsgdm): rank `rank` of the next runs in this process
// leaves after `step` of its steps, as on SIGTERM; rank < 0 clears every
// such leave.
void set_gossip_leave_for_test(int rank, int64_t step);

}  // namespace hsgd::mpi
