// adpsgd on the mpi runtime (AD-PSGD, Lian et al. 2018; policy/gossip.h):
// no server ranks; rank i is worker i with its own model and shard, as for
// the other gossip policies (mpi/gossip.h), but no rank ever waits for a
// step of another: a straggler slows only the exchanges it takes part in.
//
// Two threads per rank. The rank's MPI thread (the one that initialised
// MPI: MPI_THREAD_FUNNELED is enough) owns the model and makes every MPI
// call; a gradient thread computes one gradient at a time on a snapshot of
// the model taken when it starts (so possibly stale by the time it is
// applied) and sleeps the straggler delay. Only the MPI thread writes the
// model, so an average and a local update never interleave (the threads
// runtime gets the same from its model locks). Meanwhile the MPI thread
// polls and answers:
//   - an active (even) rank whose gradient is done sends its model to one
//     random passive neighbour (adpsgd_peer; any neighbour if it has no
//     passive one): a header then the model in mpi.chunk chunks. It then
//     waits for the reply, answering any request that reaches it (an active
//     rank is asked only where it has no passive neighbour); on the reply
//     its model becomes the average and it applies its gradient;
//   - the passive side, on a request, replaces its model by the average at
//     once and replies with its model from before, so both end at the same
//     average (had the active rank answered a request of its own meanwhile,
//     it adds the half-difference instead: the sum of the models is kept);
//   - a passive rank applies its gradients to whatever its model is by
//     then.
// A rank that is at a row or has stopped answers with no average (the
// exchange is over, as on threads when the passive side left).
//
// Agreement, never per step:
//   - the budget: each rank stops by its own training clock; a gradient
//     finishing past it is dropped;
//   - rows and checkpoints: a collective each rank enters at its own row
//     or checkpoint time (train.eval_every, train.checkpoint_every),
//     between its exchanges, answering requests with no average while it
//     waits, so every model in the average (or the cut) is the one the
//     rank contributed. Its clock is paused meanwhile, and every rank
//     restarts its clock at the row's time when the row ends (the clocks
//     stay together). Divergence is found there (rank 0's verdict);
//   - the epoch target, train.max_nonfinite and a front end's stop request:
//     after each step a rank sends its cumulative counts to rank 0
//     (nonblocking, at most one in flight); rank 0 sums the latest of every
//     rank and, when the run must end, sends every rank a stop message. The
//     consecutive non-finite gradients are the sum over the ranks of each
//     rank's trailing run of non-finite ones;
//   - the end: every rank, stopped, enters a final collective (answering
//     with no average meanwhile); once it completes no exchange is in
//     flight, rank 0 takes the counts still in flight, the receives are
//     cancelled, the gradient threads end, and the closing row is as for
//     the other policies.
// Every wait has mpi.timeout; past it the rank throws MpiError naming the
// wait and the peer.
//
// Checkpoints (runtime/gossip_checkpoint.h's layout; mpi/gossip_eval.h's
// gather and resume): at a checkpoint's collective every rank waits for
// the gradient in progress and is cut with it in hand (phase gradient:
// taken first after a resume); rank 0 writes the parts. The run's counts
// are the ranks' summed; after a resume rank 0 carries them and the other
// ranks count their own steps from 0. A restored state is the saved one,
// byte for byte; the run after it is, as any adpsgd run, not
// deterministic.
#pragma once
#include <mpi.h>

#include "hsgd/runtime/runtime.h"

namespace hsgd::mpi {

// Collective over `comm`, every rank with the same job; as run_gossip
// (mpi/gossip.h), whose launch checks it assumes made.
RunResult run_adpsgd(const Job& job, MPI_Comm comm, Recorder* recorder, Observer* observer);

}  // namespace hsgd::mpi
