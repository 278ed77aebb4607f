// The Runtime seam: drives workers and the server state machine over some
// notion of time and transport. `threads` (here) runs one thread per worker
// with the server in-process; `sim` and `mpi` come later on the same seam.
#pragma once
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "hsgd/checkpoint/checkpoint.h"
#include "hsgd/config/config.h"
#include "hsgd/data/dataset.h"
#include "hsgd/data/partition.h"
#include "hsgd/metrics/recorder.h"
#include "hsgd/model/model.h"
#include "hsgd/server/sparse.h"

namespace hsgd {

// Builds one model instance; called once per worker and once for evaluation,
// from the thread that will use it.
using ModelFactory = std::function<std::unique_ptr<Model>()>;

// The seeded initial parameters of the model `make_model` builds.
std::vector<float> initial_params(const ModelFactory& make_model, uint64_t seed);
// Their dense part only (Model::init_dense; the first row_layout().dense
// floats), built without the rows: row-sparse on mpi, where each server rank
// initialises its own rows (Model::init_row).
std::vector<float> initial_dense_params(const ModelFactory& make_model, uint64_t seed);

// Everything a run needs. The runtime reads but does not own these.
struct Job {
  const Config* config = nullptr;
  const Dataset* train = nullptr;
  const Dataset* test = nullptr;
  ModelFactory make_model;
  std::vector<float> initial_params;  // every worker and the server start here
  // The model's parameter count when initial_params holds only the dense
  // part (row-sparse on mpi); 0 = initial_params.size(). See job_params().
  int64_t num_params = 0;
  // Checkpoints (train.checkpoint_every > 0): where to write them, or null.
  CheckpointStore* checkpoints = nullptr;
  // A checkpoint to resume from (verified), or null for a fresh run. Its
  // metrics rows are already in the recorder.
  const Checkpoint* resume = nullptr;
  CheckpointIdentity identity;  // written into every checkpoint's manifest
  // The split of `train` over the workers (data.partition); null = computed
  // from the config by make_sampler.
  std::shared_ptr<const Partition> partition;
  // Called by the runtime once every input of the run, a resume's
  // checkpoint included, is decoded and checked, and before anything is
  // written (the first row, a checkpoint): the front end writes config.toml
  // and opens the recorder here, so a resume refused while restoring leaves
  // the output directory as it was. May be empty. On mpi, rank 0 calls it
  // once every rank has restored.
  std::function<void()> open_outputs;
};

// Checks what every runtime needs of a job before it starts: complete, and
// at least one training sample per worker (InputError naming
// train.workers otherwise).
void check_job(const Job& job);

// Calls job.open_outputs if set.
inline void open_outputs(const Job& job) {
  if (job.open_outputs) job.open_outputs();
}

// The model's parameter count: job.num_params, or initial_params.size().
inline int64_t job_params(const Job& job) {
  return job.num_params > 0 ? job.num_params : static_cast<int64_t>(job.initial_params.size());
}

// The partition a job's config asks for, over all train.workers workers.
// Throws InputError when the [data] partition keys cannot be met.
Partition make_partition(const Job& job);

// Worker `worker`'s sampler: its shard of job.partition (or of
// make_partition(job)) plus the global pool, with the [sampling] options.
ShardSampler make_sampler(const Job& job, int worker);

// A live view of a running job, for progress lines.
struct Status {
  double time_s = 0;
  int64_t updates = 0;
  int64_t samples = 0;
  int k = 0;
  double train_loss = 0;     // mean over the last interval (NaN if none)
  double test_acc = 0;       // last evaluation
  double samples_per_s = 0;  // over the last interval
  double epochs = 0;
};

// Receives rows and status while a job runs (on the runtime's driving
// thread). Default: ignore.
class Observer {
 public:
  virtual ~Observer() = default;
  virtual void on_row(const MetricsRow&) {}
  virtual void on_status(const Status&) {}
};

// model.sparse (issue 16): the row tables' counts since the start, over
// every server rank on mpi (summary.json "sparse").
struct SparseResult {
  bool on = false;
  int64_t dense = 0;       // dense parameters
  int64_t dim = 0;         // embedding width
  int64_t num_params = 0;  // dense + every row: what a dense message carries
  RowStats stats;
  // Per server rank (one entry on threads and sim): the rows its table
  // holds and the bytes of its row state (rows, optimizer state, versions).
  std::vector<int64_t> server_rows, server_state_bytes;
  // mpi: the rows rank 0 gathers for an evaluation (those the evaluated test
  // samples read; -1 on threads and sim, whose server holds every row).
  int64_t eval_rows = -1;
  // mpi: each server rank's peak resident memory (VmHWM, bytes; -1 where
  // unknown) at the last evaluation (rank 0: after model.bin's rows).
  std::vector<int64_t> server_peak_rss_bytes;
};

// The simulator's network (issue 27; summary.json "network"): on when the
// simulated cluster runs (sim.network = "shared", train.servers > 1 or
// sim.cores set). Bytes as the interfaces carried them, per node.
struct NetworkResult {
  bool on = false;
  std::string model;                   // sim.network
  double busiest_util = 0;             // the busiest interface's utilisation over the run
  std::string busiest;                 // which: "server 0 ingress", "worker 3 egress"
  std::vector<std::string> nodes;      // "server 0", ..., "worker 0", ...
  std::vector<double> sent, received;  // bytes, per node
};

// The serverless gossip policies (issue 28; summary.json "gossip"): the
// graph and what a node moved.
struct GossipResult {
  bool on = false;
  std::string topology, weights;
  double spectral_gap = 0;  // 1 - |lambda_2(W)|; NaN for a time-varying graph
  int max_degree = 0;
  int64_t steps = 0;   // local steps, every worker's
  int64_t rounds = 0;  // gossip rounds a worker took part in, every worker's
  int64_t global_averages = 0;
  // Bytes a node sent and received per local step of its own, mean over
  // nodes, and at the busiest node (the most bytes sent plus received).
  double bytes_per_node_step = 0;
  double busiest_bytes_per_step = 0;
  std::string busiest;  // "worker 3"
};

struct RunResult {
  std::vector<float> params;  // final parameters
  // Row-sparse on mpi: a file holding the final rows (raw float32, global
  // row order), written by rank 0 chunk by chunk; `params` then holds only
  // the dense part. The CLI writes model.bin from both and removes it.
  std::string rows_file;
  MetricsRow last;          // the final evaluation
  double wall_s = 0;        // real seconds, evaluation included
  double train_s = 0;       // training seconds (wall or virtual), evaluation excluded
  double real_train_s = 0;  // real seconds spent training, evaluation excluded
  int64_t gradients = 0;    // pushes made
  // Applied pushes by staleness 0, 1, ..., the last bucket for 64 and above.
  std::vector<int64_t> staleness_histogram;
  // Config values the runtime resolved itself (the simulator's calibrated
  // costs), as overrides: applying them to the config reproduces the run.
  std::vector<std::pair<std::string, std::string>> resolved;
  // Pushes made by each worker (its SSP clock), dropped ones included.
  std::vector<int64_t> worker_pushes;
  // Why the run stopped before its budget (non-finite parameters or test
  // loss, too many non-finite pushes): one line, or empty when it ran to
  // its budget. The CLI exits with code 3 when set.
  std::string stopped;
  // The workers' sampling and gradient time, summed (threads and sim; the
  // mpi runtime leaves it empty).
  SamplerCost sampler_cost;
  // [compress] on: bytes of all pushes and pulls as they travelled and the
  // seconds spent compressing/decompressing (virtual on sim), since the start.
  bool compress_on = false;
  CompressCounters compress;
  // mpi: the server ranks' part of compress.compress_s (decoding pushes,
  // encoding pulls), -1 on the other runtimes (their total has it too).
  double server_compress_s = -1;
  // Every leave and join during the run, in order (issue 10; summary.json
  // "membership"). Empty when membership never changed.
  std::vector<MembershipEvent> membership;
  SparseResult sparse;    // model.sparse
  NetworkResult network;  // sim: the simulated cluster's network
  GossipResult gossip;    // the gossip policies
  // False on the MPI ranks other than 0: they hold no results (every other
  // field is left empty) and write nothing.
  bool primary = true;
};

class Runtime {
 public:
  virtual ~Runtime() = default;
  // Values the runtime would measure itself (the simulator's calibrated
  // costs), as overrides that applying to the config makes explicit. Called
  // before run() so config.toml can record them before training starts and
  // a comparison can share one measurement. Default: none.
  virtual std::vector<std::pair<std::string, std::string>> resolve(const Job&) { return {}; }
  // Runs the job to its budget (time or epochs), writing one row per
  // evaluation to `recorder` (at t = 0, every eval_every seconds, and at the
  // end). Blocks until done. Errors from worker threads are rethrown here.
  virtual RunResult run(const Job& job, Recorder* recorder, Observer* observer) = 0;
};

// "threads" or "sim". Throws InputError for an unknown or unavailable runtime
// ("mpi" is built by the CLI: mpi/mpi_runtime.h, which needs an MPI session).
std::unique_ptr<Runtime> make_runtime(const std::string& name);
// The runtime a config asks for: train.runtime, or the lock-free hogwild
// runtime for policy hogwild on threads.
std::unique_ptr<Runtime> make_runtime(const Config& c);

}  // namespace hsgd
