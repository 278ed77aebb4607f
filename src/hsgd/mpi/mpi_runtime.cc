#include "hsgd/mpi/mpi_runtime.h"

#include <fmt/format.h>
#include <mpi.h>

#include <algorithm>
#include <climits>

#include "hsgd/core/error.h"
#include "hsgd/mpi/gossip.h"
#include "hsgd/mpi/roles.h"
#include "hsgd/mpi/transport.h"
#include "hsgd/policy/gossip.h"
#include "hsgd/runtime/sparse_rows.h"

namespace hsgd {
namespace {

using namespace hsgd::mpi;

// Every rank must run the same job: the same parameter count and data.
void check_same_job(const Layout& l, const Job& job) {
  const int64_t mine[3] = {static_cast<int64_t>(l.num_params), job.train->size(), job.test->size()};
  int64_t lo[3], hi[3];
  check(MPI_Allreduce(mine, lo, 3, MPI_INT64_T, MPI_MIN, l.comm), "MPI_Allreduce");
  check(MPI_Allreduce(mine, hi, 3, MPI_INT64_T, MPI_MAX, l.comm), "MPI_Allreduce");
  const char* what[3] = {"model parameters", "training samples", "test samples"};
  for (int i = 0; i < 3; ++i) {
    if (lo[i] != hi[i]) {
      throw InputError(fmt::format(
          "the ranks disagree on the job: between {} and {} {} (is the same data and config on "
          "every machine?)",
          lo[i], hi[i], what[i]));
    }
  }
}

// The layout of a launch of l->ranks ranks (all but comm and rank). Throws
// InputError (alike on every rank) for a launch that cannot work.
void fill_layout(const Job& job, Layout* l) {
  const Config& c = *job.config;
  l->servers = c.train.servers;
  l->workers = l->ranks - l->servers;
  l->timeout = c.mpi.timeout;
  l->chunk = static_cast<size_t>(c.mpi.chunk);
  l->num_params = static_cast<size_t>(job_params(job));
  l->rows = sparse_layout(job);  // model.sparse: dense slices + rows by id (mpi/sparse.h)
  const size_t sliced = l->rows.rows > 0 ? static_cast<size_t>(l->rows.dense) : l->num_params;
  MpiRuntime::check_launch(l->ranks, l->servers, static_cast<int64_t>(sliced));
  if (c.train.workers != l->workers) {
    throw InputError(fmt::format(
        "train.workers = {}: under the mpi runtime the workers are the {} ranks after the {} "
        "server ranks",
        c.train.workers, l->workers, l->servers));
  }
  if (job.train->size() < l->workers) {
    throw InputError(fmt::format("train.workers = {}: the training set has only {} samples",
                                 l->workers, job.train->size()));
  }
  MpiRuntime::check_shards(sliced, l->servers);
  l->shards = split(sliced, l->servers);
}

// Collective: rank 0's `*stopped` on every rank.
void share_stop(const Layout& l, double timeout, std::string* stopped) {
  int64_t n = static_cast<int64_t>(stopped->size());
  MPI_Request r = MPI_REQUEST_NULL;
  check(MPI_Ibcast(&n, 1, MPI_INT64_T, 0, l.comm, &r), "MPI_Ibcast");
  const auto what = [&] { return fmt::format("on rank {} at the final barrier", l.rank); };
  wait_one(&r, timeout, what);
  if (n == 0) return;
  stopped->resize(static_cast<size_t>(n));
  check(MPI_Ibcast(stopped->data(), as_count(stopped->size()), MPI_CHAR, 0, l.comm, &r),
        "MPI_Ibcast");
  wait_one(&r, timeout, what);
}

// The gossip policies (mpi/gossip.h): every rank a worker, rank 0's initial
// parameters for all. Frees l->comm.
RunResult run_gossip_ranks(const Job& job, Layout* l, Recorder* recorder, Observer* observer) {
  l->servers = 0;
  l->workers = l->ranks;
  l->timeout = job.config->mpi.timeout;
  l->num_params = static_cast<size_t>(job_params(job));
  check_gossip_launch(job, l->ranks);
  check_same_job(*l, job);
  // SIGTERM / SIGINT to any rank: the whole run stops at the next step,
  // with its closing row and final checkpoint (no gossip rank leaves alone
  // on mpi: mpi/gossip.h).
  catch_leave_signals();
  Job mine = job;
  check(MPI_Bcast(mine.initial_params.data(), as_count(mine.initial_params.size()), MPI_FLOAT, 0,
                  l->comm),
        "MPI_Bcast");
  RunResult result = run_gossip(mine, l->comm, recorder, observer);
  share_stop(*l, l->timeout, &result.stopped);
  MPI_Comm_free(&l->comm);
  return result;
}

}  // namespace

void MpiRuntime::check_shards(uint64_t sliced, int servers) {
  constexpr auto kMax = static_cast<uint64_t>(INT_MAX);
  const uint64_t largest =
      (sliced + static_cast<uint64_t>(servers) - 1) / static_cast<uint64_t>(std::max(1, servers));
  if (largest > kMax) {
    throw InputError(fmt::format(
        "train.servers = {}: a shard of {} parameters is larger than one MPI message ({} "
        "floats); use at least {} server ranks",
        servers, largest, kMax, (sliced + kMax - 1) / kMax));
  }
}

void MpiRuntime::check_launch(int ranks, int servers, int64_t num_params) {
  if (ranks < servers + 1) {
    throw InputError(fmt::format(
        "train.servers = {}: needs at least {} MPI ranks ({} servers + 1 worker), but mpirun "
        "started {} (-np {})",
        servers, servers + 1, servers, ranks, ranks));
  }
  if (num_params < servers) {
    throw InputError(fmt::format(
        "train.servers = {}: more server shards than the model's {} parameters; expected at "
        "most {}",
        servers, num_params, num_params));
  }
}

void MpiRuntime::check_resume(const Job& job, const Checkpoint& ck, int ranks) {
  if (is_gossip_policy(job.config->policy.kind)) return check_gossip_resume(job, ck, ranks);
  Layout l;
  l.ranks = ranks;
  fill_layout(job, &l);
  check_primary_state(job, l, ck);
  for (int s = 0; s < l.servers; ++s) {
    const std::string name = "server-" + std::to_string(s);
    check_shard_state(job, l, s, ck.blob(name), ck.path + "/" + name + ".bin");
  }
  if (checkpoint_workers(job, l, ck) != l.workers) return;  // the workers start afresh
  for (int w = 0; w < l.workers; ++w) {
    const std::string name = "worker-" + std::to_string(w);
    check_worker_state(job, l, w, ck.blob(name), ck.path + "/" + name + ".bin");
  }
}

RunResult MpiRuntime::run(const Job& job, Recorder* recorder, Observer* observer) {
  HSGD_ASSERT(job.train && job.test && job.make_model, "incomplete job");
  Layout l;
  // A communicator of its own: no message of an earlier (perhaps failed)
  // run on the same ranks can match this run's receives.
  check(MPI_Comm_dup(comm_, &l.comm), "MPI_Comm_dup");
  check(MPI_Comm_rank(l.comm, &l.rank), "MPI_Comm_rank");
  check(MPI_Comm_size(l.comm, &l.ranks), "MPI_Comm_size");
  if (is_gossip_policy(job.config->policy.kind)) {
    return run_gossip_ranks(job, &l, recorder, observer);
  }
  fill_layout(job, &l);
  if (l.rank >= l.servers) catch_leave_signals();  // a graceful leave (issue 10)
  check_same_job(l, job);
  const size_t sliced = l.rows.rows > 0 ? static_cast<size_t>(l.rows.dense) : l.num_params;

  // Rank 0's initial parameters for every server (the same seed may not give
  // the same floats on another machine's build). model.sparse: the dense
  // part only; each server rank initialises its own rows (mpi/sparse.h),
  // and job.initial_params may hold only the dense part.
  HSGD_ASSERT(job.initial_params.size() >= sliced,
              "job.initial_params shorter than the dense part");
  std::vector<float> initial(job.initial_params.begin(),
                             job.initial_params.begin() + static_cast<ptrdiff_t>(sliced));
  for (size_t at = 0; at < initial.size(); at += INT_MAX) {  // in messages of <= INT_MAX floats
    const size_t n = std::min(initial.size() - at, static_cast<size_t>(INT_MAX));
    check(MPI_Bcast(initial.data() + at, as_count(n), MPI_FLOAT, 0, l.comm), "MPI_Bcast");
  }

  // Whether this launch resumes a checkpoint: rank 0 read it.
  int resuming = job.resume != nullptr ? 1 : 0;
  check(MPI_Bcast(&resuming, 1, MPI_INT, 0, l.comm), "MPI_Bcast");

  RunResult result;
  bool left = false;
  if (l.rank == 0) {
    Observer quiet;
    HSGD_ASSERT(recorder != nullptr, "rank 0 needs a recorder");
    result = run_primary(job, l, initial, recorder, observer ? observer : &quiet);
  } else if (l.rank < l.servers) {
    run_replica(job, l, initial, resuming != 0);
    result.primary = false;
  } else {
    left = run_worker(job, l, resuming != 0, initial);
    result.primary = false;
  }
  // Every rank is through its last message: end together, each with rank
  // 0's stop line (RunResult::stopped), so every rank exits alike. A worker
  // that left waits here for the others without a deadline (the run goes
  // on).
  share_stop(l, left ? 1e9 : l.timeout, &result.stopped);
  MPI_Comm_free(&l.comm);
  return result;
}

}  // namespace hsgd
