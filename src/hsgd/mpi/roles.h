// The mpi runtime's roles (mpi_runtime.h has the protocol): internal to
// src/hsgd/mpi/. MpiRuntime::run (mpi_runtime.cc) sets up the Layout and
// runs one role per rank:
//   rank 0                  run_primary (primary.cc): server shard 0, the
//                           order of events, the schedule and the stops,
//                           evaluation, checkpoints, membership;
//   ranks 1 .. S-1          run_replica (replica.cc): replays rank 0's
//                           events on their shard;
//   ranks S .. N-1          run_worker (worker.cc): the worker loop.
// Each server rank's shard is a ShardServer (shard_server.h).
#pragma once
#include <mpi.h>

#include <climits>
#include <cstddef>
#include <string>
#include <vector>

#include "hsgd/checkpoint/checkpoint.h"
#include "hsgd/core/error.h"
#include "hsgd/mpi/sparse.h"
#include "hsgd/mpi/transport.h"
#include "hsgd/runtime/runtime.h"

namespace hsgd::mpi {

// An element count as MPI's int. The launch checks every count it passes
// (MpiRuntime::check_shards): past INT_MAX is a broken invariant here.
inline int as_count(size_t n) {
  HSGD_ASSERT(n <= static_cast<size_t>(INT_MAX), "an MPI message of more than INT_MAX elements");
  return static_cast<int>(n);
}

// Where this rank stands.
struct Layout {
  MPI_Comm comm = MPI_COMM_WORLD;
  int rank = 0;
  int ranks = 1;
  int servers = 1;
  int workers = 1;
  double timeout = 120;
  size_t chunk = size_t{1} << 17;  // mpi.chunk: floats per message of a push or a pull
  size_t num_params = 0;
  std::vector<Shard> shards;
  RowLayout rows;  // model.sparse: the rows (rows = 0 otherwise); shards cover the dense part

  int worker_rank(int w) const { return servers + w; }
  RowLink row_link(int64_t batch) const { return RowLink{comm, servers, workers, timeout, batch}; }
};

// Rank 0. `recorder` and `observer` are not null. Returns the run's result.
RunResult run_primary(const Job& job, const Layout& l, const std::vector<float>& initial,
                      Recorder* recorder, Observer* observer);

// A server rank other than 0: replays rank 0's events on its shard until
// the stop event.
void run_replica(const Job& job, const Layout& l, const std::vector<float>& initial, bool resuming);

// Makes SIGTERM / SIGINT on a worker rank a graceful leave at its next
// request (issue 10); on a dpsgd, sgp or pdsgdm rank, a leave at the next
// step; with adpsgd or CHOCO, a stop of the whole run (mpi/gossip.h).
void catch_leave_signals();
// True once this rank got SIGTERM or SIGINT (after catch_leave_signals).
bool leave_requested();

// A worker rank: the threads runtime's worker loop over messages. Returns
// true when it left the run on SIGTERM / SIGINT.
bool run_worker(const Job& job, const Layout& l, bool resuming, const std::vector<float>& initial);

// Resuming (MpiRuntime::check_resume): each decodes its role's part of a
// checkpoint as its restore would, into objects it then drops, and throws
// InputError naming the blob where that restore would refuse.
// Blob "mpi" and the run layer's blob "run" (primary.cc):
void check_primary_state(const Job& job, const Layout& l, const Checkpoint& ck);
// The worker count blob "mpi" was written with (the worker blobs are
// restored only when it is this launch's).
int checkpoint_workers(const Job& job, const Layout& l, const Checkpoint& ck);
// Blob server-<shard> (shard_server.cc):
void check_shard_state(const Job& job, const Layout& l, int shard, const std::string& bytes,
                       const std::string& what);
// Blob worker-<w> (worker.cc); empty bytes: the worker starts afresh.
void check_worker_state(const Job& job, const Layout& l, int w, const std::string& bytes,
                        const std::string& what);

}  // namespace hsgd::mpi
