// The typed job configuration: built from a TOML file, command-line flags and
// `--set section.key=value` overrides (in that order of precedence, lowest
// first), validated once. Unknown sections or keys, wrong types and impossible
// values throw InputError naming the key and what was expected.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "hsgd/compress/stage.h"
#include "hsgd/core/faults.h"
#include "hsgd/data/importance.h"
#include "hsgd/data/partition.h"
#include "hsgd/data/readers.h"
#include "hsgd/optim/optimizer.h"
#include "hsgd/policy/gossip.h"
#include "hsgd/policy/mitigation.h"
#include "hsgd/policy/policy.h"

namespace hsgd {

class StopRequest;  // core/stop.h

struct DataConfig {
  std::string spec = "fashion-mnist";  // see data/spec.h
  std::string test;                    // a separate test-set spec, or "" for a held-out fraction
  double test_fraction = 0.2;
  // Standardize features with the training set's mean and std (recorded in
  // the saved model, so `hsgd eval` applies the same).
  bool normalize = true;
  SyntheticOptions synthetic;
  // How the training set is split over the workers (data.partition,
  // data.alpha, data.min_partition_size, data.classes_per_worker,
  // data.global_fraction; data/partition.h).
  PartitionOptions partition;
  // A seeded Gaussian random projection of the features to this many
  // dimensions (data/project.h), before standardization; 0 = off.
  int64_t project = 0;
};

struct ModelConfig {
  std::string name = "lenet5";
  std::vector<int64_t> hidden = {128};  // mlp; dlrm: the bottom MLP's hidden widths
  // dlrm (model/dlrm.cc): embedding width (also the bottom MLP's output) and
  // the top MLP's hidden widths. The rows per table are model.table_rows,
  // held in data.synthetic.ctr.rows (the data needs them too).
  int64_t embedding_dim = 16;
  std::vector<int64_t> top_hidden = {64};
  // Row-sparse push/pull of the embedding rows (server/sparse.h): workers
  // pull the dense part and the rows of their next batch, push the dense
  // gradient and the touched rows' gradients.
  bool sparse = false;
  // dpgmm (model/dpgmm.h): the stick-breaking truncation and the DP
  // concentration.
  int64_t truncation = 50;
  double alpha = 1.0;
};

struct TrainConfig {
  int workers = 4;
  int batch = 64;            // per worker
  double budget = 0;         // seconds of training; 0 = no time limit
  double epochs = 0;         // passes over the training set; 0 = no limit
  double eval_every = 5;     // seconds between evaluations
  int64_t eval_samples = 0;  // evaluate on at most this many test samples; 0 = all
  // The server estimates the gradient noise scale of the pushes
  // (server/noise.h) into three more metrics columns.
  bool noise_scale = false;
  uint64_t seed = 1;
  std::string runtime = "threads";  // threads | sim | mpi
  std::string out = "runs/latest";
  // mpi: the first `servers` ranks hold contiguous shards of the parameters;
  // the other ranks are the workers (train.workers is set to ranks - servers).
  int servers = 1;
  // Seconds of training (wall or virtual) between checkpoints; 0 = off. When
  // on, a final checkpoint is also written at the end of the run.
  double checkpoint_every = 0;
  // The run stops (exit code 3) after more than this many consecutive pushes
  // were dropped for a NaN or Inf. >= 1.
  int64_t max_nonfinite = 100;
  // The run stops (exit code 3) at an evaluation whose test or training loss
  // is above this multiple of the first evaluation's test loss: a finite
  // blow-up (runtime/run_control.h). 0 = off.
  double diverge_factor = 1e4;
  // Membership (issue 10): the run stops (exit code 3) when fewer than this
  // many workers are live. 1..workers.
  int min_workers = 1;
};

// [checkpoint]: how many of the newest checkpoints are kept (>= 1).
struct CheckpointConfig {
  int keep = 2;
};

// The MPI runtime (runtime = "mpi").
struct MpiConfig {
  // Seconds any one wait for a message may last before the run stops with an
  // error naming the rank and the operation. Must exceed the longest
  // legitimate wait: a gradient plus straggler delay, an evaluation.
  double timeout = 120;
  // Floats per message of a push or a pull (a shard's slice travels in
  // chunks of this many, the last shorter). The server's update runs and
  // is sent chunk by chunk (mpi/shard_server.h); 2^17 floats (512 KiB) was
  // the best of 64K-2M floats at 1M and 10M parameters over shared memory
  // here (docs/benchmarks.md). Changes no result.
  int64_t chunk = int64_t{1} << 17;
};

struct StragglerConfig {
  // Workers 0 .. round(fraction * workers) - 1 are stragglers.
  double fraction = 0;
  // The delay added to each straggler gradient, in seconds:
  //   none; halfnormal: |N(0, sigma)| (the paper); exponential: mean `scale`;
  //   lognormal: scale * exp(N(0, sigma)).
  std::string delay = "halfnormal";
  double sigma = 0;
  double scale = 0;
  // Each straggler computes `slowdown` times slower (>= 1).
  double slowdown = 1;
};

// The simulator's cost model (runtime = "sim"). Times in seconds.
struct SimConfig {
  // Compute time of one batch on a full-speed worker; 0 = calibrate by timing
  // the model's real gradient on this machine (the value found is written to
  // the run's config.toml, so rerunning that file reproduces the run).
  double compute_time = 0;
  // Server time per update and per push, per parameter, in nanoseconds;
  // -1 = calibrate (likewise recorded).
  double server_ns_per_param = -1;
  double latency = 50e-6;     // one-way network latency per message
  double bandwidth = 1.25e9;  // bytes per second (10 Gbit/s); a message carries 4 bytes/param
  // Threads that compute the simulated workers' gradients (runtime/sim_compute.h);
  // 0 = every core. The output is the same for any value.
  int threads = 0;
  // The network model (issue 27, core/network.h): "shared" (interfaces
  // shared by concurrent messages, max-min fair) or "independent" (every
  // message priced alone: latency + bytes / bandwidth, the model before).
  std::string network = "shared";
  // Bytes per second of each server shard's link; 0 = sim.bandwidth.
  double server_bandwidth = 0;
  // Cores the simulated workers' compute (and the server's updates) share;
  // 0 = unlimited (every worker computes on its own core).
  int cores = 0;
};

struct Config {
  DataConfig data;
  ModelConfig model;
  TrainConfig train;
  PolicyOptions policy;
  // As written: sync | async | hybrid | kasync:K | kbatch:K | local:H |
  // ssp:S (S sets policy.s, the staleness bound) | hogwild | dpsgd | adpsgd |
  // sgp | pdsgdm:P (P sets policy.k).
  // The [local] keys set policy.local.
  std::string policy_name = "hybrid";
  // [gossip]: the serverless policies' graph and rounds (policy/gossip.h).
  GossipOptions gossip;
  OptimizerOptions optim;
  LrSchedule lr_schedule;
  MitigationOptions staleness;  // [staleness]
  StragglerConfig stragglers;
  SamplingOptions sampling;  // [sampling]: data/importance.h
  SimConfig sim;
  MpiConfig mpi;
  CheckpointConfig checkpoint;
  // [compress] (issue 14): push/pull compressors and error feedback. The
  // section is written by to_toml only when a compressor is on.
  CompressOptions compress;
  FaultOptions faults;  // [faults]: core/faults.h
  // Not a key (never parsed, written or hashed): a front end's request to
  // end the run early (core/stop.h; the Python module's callback and
  // Ctrl-C), checked by the run layer's stops. Borrowed; null = none.
  const StopRequest* stop = nullptr;
};

// One override: "section.key" and its value as text (parsed as a TOML value;
// bare words are strings).
using Override = std::pair<std::string, std::string>;

// Builds a config: defaults, then the TOML file (if `path` is not empty), then
// the overrides in order. Validates the result. Throws InputError.
// The file must be a readable, non-empty text file; otherwise one line
// naming it: "<path>: expected a TOML config file, got a directory",
// "<path>: cannot open (<reason>)", "<path>: expected a TOML config, got an
// empty file", "<path>: expected a TOML config (text), got binary data ...",
// "<path>:<line>:<column>: expected a TOML config: <parser's reason>".
Config load_config(const std::string& path, const std::vector<Override>& overrides);

// load_config on the file's text held in memory (`path` names it in messages;
// empty `path`: no file, `text` ignored). load_config reads the file and
// calls this; the config fuzz target calls it directly. Every message is one
// line (control characters written as \xNN).
Config parse_config(const std::string& path, std::string_view text,
                    const std::vector<Override>& overrides);

// Checks every value (called by load_config; callable after edits).
void validate(const Config& c);

// A hash of everything that decides a run's course: the config as TOML with
// the keys a resume may change (train.budget, train.epochs,
// train.checkpoint_every, checkpoint.keep, train.out, train.workers) set to
// fixed values. 8 hex digits (CRC-32C).
std::string config_hash(const Config& c);

// The keys `hsgd train --resume` accepts as flags or --set overrides.
bool resumable_key(const std::string& dotted);

// `s` as a TOML basic string ("..." with quotes and backslashes escaped), so
// an override value is never read as a number or date.
std::string toml_string(const std::string& s);

// The resolved config as TOML text, every key written (round-trips through
// load_config).
std::string to_toml(const Config& c);

}  // namespace hsgd
