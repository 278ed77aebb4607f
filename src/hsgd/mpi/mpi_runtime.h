// The mpi runtime: the same server state machine and policies as the threads
// runtime, across processes. Launched as
//   mpirun -np N hsgd train --runtime mpi --servers S ...
// ranks 0 .. S-1 hold contiguous shards of the flat parameters (server
// ranks), ranks S .. N-1 are the N - S workers, each with its own shard of
// the training data. Wire protocol: transport.h.
//
// Consistency across shards: rank 0 orders, every shard replays. Rank 0
// receives every worker request (pull, or push-then-pull), runs the server
// state machine on its shard and sends each event it ran (pull, push,
// discard, evaluate, stop, with the event's time) to the other server ranks,
// in its order. Each of those runs its own replica of the state machine on
// its own shard and replays the events in the same order with the same
// times, so it takes the same decisions (apply now, wait, release) at the
// same versions; it checks that it reached the version rank 0 reports. The
// gradient slices go straight from the worker to every shard; the parameter
// slices straight from every shard to the worker, each sent when its shard
// replays the worker's pull, so the slices a worker receives are all of the
// version rank 0 told it. Policies that wait are decided at rank 0 alone:
// a waiting worker's pull is simply not run (nor replayed) until it is
// released.
//
// With [compress] on, the gradient and parameter slices travel as each
// shard's compressed encoding (variable-size byte messages): mpi/compressed.h.
//
// A worker keeps at most one push in flight, so every shard receives
// gradients into one buffer per worker. A server rank sends parameters from
// the buffer it updates: before it applies the next push it waits for the
// sends still in flight.
//
// Evaluation: rank 0 replays an evaluate event, gathers the shards and
// evaluates on its own model; the time it takes is not training time.
// Rank 0 writes the metrics. Schedule and stops: the run layer's
// (runtime/run_control.h), kept by rank 0. Evaluations, checkpoints and the
// end of training happen at a gate cut (every worker blocked on rank 0).
// The end (the budget, the epoch target, or a stop: divergence at an
// evaluation, train.max_nonfinite, train.min_workers) writes the closing
// row at the training time clamped to the budget, then the final checkpoint
// if the stops allow one; rank 0 then answers every request (and pending
// wait) with stop, dropping pushes that come after the end, and tells the
// other server ranks to stop. Every rank gets the stop line (exit 3).
//
// The gossip policies (dpsgd, sgp, pdsgdm) have no server ranks: every
// rank is a worker and train.workers is the rank count (mpi/gossip.h).
//
// Files, by role: primary.cc (rank 0), replica.cc (server ranks 1 .. S-1),
// shard_server.h (a server rank's shard), worker.cc (worker ranks),
// gossip.cc (every rank under a gossip policy), mpi_runtime.cc (the
// launch); roles.h joins them.
//
// Every wait for a message has the deadline mpi.timeout; past it the rank
// throws MpiError naming the operation and the peer.
#pragma once
#include <mpi.h>

#include "hsgd/runtime/runtime.h"

namespace hsgd {

class MpiRuntime final : public Runtime {
 public:
  // Runs over the ranks of `comm` (all of them by default; tests run
  // smaller layouts on parts of one launch).
  explicit MpiRuntime(MPI_Comm comm = MPI_COMM_WORLD) : comm_(comm) {}

  // MPI must be initialised (mpi::Session), and every rank of the
  // communicator must call run() with the same job. train.workers must be
  // ranks - train.servers (a gossip policy: ranks; mpi/gossip.h). On ranks
  // other than 0 the result has primary = false and rank 0's `stopped` line
  // (nothing else), and `recorder` (which may be null) is not used.
  // Checkpoints (job.checkpoints, on rank 0 only) need
  // train.checkpoint_every > 0, which tells the workers to keep the state
  // a cut without their push in flight saves (worker.cc).
  // Throws InputError (the same on every rank) for a launch that cannot
  // work, MpiError for a timed-out or failed MPI operation.
  RunResult run(const Job& job, Recorder* recorder, Observer* observer) override;

  // Rank 0 of a resumed launch of `ranks` ranks, before anything in the
  // output directory is touched: decodes every blob of `ck` as the ranks'
  // restore in run() will, into objects it then drops, so that a refusal
  // is a setup error all ranks agree on (exit 2, one line) rather than one
  // rank failing while the others wait. Throws InputError naming the blob.
  static void check_resume(const Job& job, const Checkpoint& ck, int ranks);

  // Throws InputError when a shard of `sliced` parameters (those split
  // over the server ranks: model.sparse, the dense part) over `servers`
  // server ranks is larger than one MPI message (INT_MAX floats).
  static void check_shards(uint64_t sliced, int servers);

  // Throws InputError unless `ranks` can hold `servers` server ranks and at
  // least one worker, and the model has at least one parameter per server.
  static void check_launch(int ranks, int servers, int64_t num_params);

 private:
  MPI_Comm comm_;
};

}  // namespace hsgd
