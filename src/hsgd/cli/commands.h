// The hsgd subcommands. Each returns the process exit code; InputError
// propagates to main(), which prints it and exits with 2. The library
// hsgd_cli (every file of cli/ but main.cc) is also what the Python module
// (src/hsgd/python/) calls: both front ends train through run_train().
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "hsgd/config/config.h"
#include "hsgd/core/stop.h"
#include "hsgd/runtime/runtime.h"

namespace CLI {
class App;
}

namespace hsgd::cli {

struct TrainArgs {
  std::string config_path;
  std::vector<Override> overrides;  // flags first, then --set, in order
  bool quiet = false;
  // --resume DIR: continue the run in DIR from its newest checkpoint, with
  // DIR/config.toml as the config; only resumable_key() overrides allowed.
  std::string resume_dir;
};

// What a front end hands in besides the config: data and a model held in
// memory instead of files (the Python module). Borrowed; outlive the call.
struct TrainInputs {
  // The training set, replacing data.spec (which then only names it), and
  // its test set, replacing data.test and the held-out fraction; null: as
  // the config says. A borrowed training set (Dataset::borrowed) is used
  // without a copy; the test set is copied (it is standardized in place).
  std::shared_ptr<const Dataset> train, test;
  // For model.name = torchscript:NAME: the TorchScript archive's bytes (NAME
  // is then only its name, recorded in config.toml and model.bin). Empty:
  // NAME is read as a file.
  std::string model_archive;
};

// Hooks into a run. `observer` sees every row (at each evaluation, before
// the stops are checked on it) and status, on the runtime's driving thread,
// besides the progress line; on mpi only rank 0's is called. `stop` ends
// the run early (core/stop.h). `progress_line`: draw the CLI's progress line
// (unless quiet); a front end with its own (tqdm) turns it off.
struct TrainHooks {
  Observer* observer = nullptr;
  const StopRequest* stop = nullptr;
  bool progress_line = true;
};

// How a run ended (its outputs are in `out`).
struct TrainOutcome {
  int code = 0;         // the exit code: 0 done, 2 refused (mpi: agreed by every rank), 3 stopped
  std::string out;      // train.out
  std::string stopped;  // RunResult::stopped: why it ended early, or ""
  // "" (ran to its end), "requested" (a StopRequest's line, core/stop.h:
  // told apart by its prefix, so on every mpi rank), "too_few_workers"
  // (train.min_workers), "diverged" (any other stop: divergence, non-finite
  // pushes).
  std::string stop_kind;
  std::string error;    // code 2 under mpirun: the agreed setup error
  bool primary = true;  // false on mpi ranks other than 0 (they write nothing)
  std::string role;     // mpi: "primary" (rank 0), "server" or "worker"; else ""
  int rank = 0;
};

// The one train path of both front ends: config (file, then overrides) ->
// data (files, or `in`) -> model -> runtime -> the outputs in train.out.
// Under mpirun, every rank calls it. Throws InputError for bad input before
// anything is written (outside mpirun; under it, code 2 and `error`).
TrainOutcome run_train(const TrainArgs& a, const TrainInputs& in, const TrainHooks& hooks);

// hsgd train: run_train(a, {}, {}).code. Exit codes: 0 done; 2 bad input
// (nothing written); 3 stopped early (divergence), metrics and checkpoints
// kept.
int train(const TrainArgs& a);

// The values the run's runtime would calibrate (the simulator's costs), as
// overrides; empty for the other runtimes. Loads the job to measure.
std::vector<Override> resolve_costs(const TrainArgs& a, const TrainInputs& in = {});

struct EvalArgs {
  std::string model_path;
  std::string data;
  bool json = false;
};
int eval(const EvalArgs& a);
// What `hsgd eval --json` prints (one JSON object, no newline); with `data`
// (in memory; a.data then only names it), on that data set.
std::string eval_json(const EvalArgs& a, const Dataset* data = nullptr);

int plot(const std::vector<std::string>& dirs, std::string out);

// hsgd compare: runs every policy for `rounds` rounds through train() (round
// r of every policy with seed = train.seed + r, so the policies of a round
// share initial weights, data order and delay draws), into
// out/<policy with ':' -> '-'>/round-<r>, then writes out/compare.{md,json,png}
// (see metrics/compare.h). Everything, every policy's config included, is
// validated before the first run.
struct CompareArgs {
  std::string config_path;
  std::vector<std::string> policies;  // e.g. sync, async, hybrid, kasync:12
  int rounds = 1;
  std::string out = "runs/compare";
  std::string baseline = "async";   // one of `policies`
  std::vector<Override> overrides;  // applied to every run, before the per-run keys
};
// `in` and `hooks`: every run's, as run_train's (the Python module); a run
// ended by hooks.stop ends the comparison with 3, before the table.
int compare(const CompareArgs& a, const TrainInputs& in = {}, const TrainHooks& hooks = {});
// A policy's directory name under compare's and fidelity's out: ':', '='
// and '/' become '-' ("kasync:12" -> "kasync-12").
std::string policy_dir(std::string policy);

// hsgd sweep GRID.toml: every cell of the grid x every policy x every seed
// on the simulator, `jobs` child `hsgd train` processes at a time, into
// out/cells/<cell>/<policy>/seed-<s>; runs already done (same config) are
// skipped; then out/sweep.{md,json} and heatmap*.{dat,png} (metrics/sweep.h).
struct SweepArgs {
  std::string grid_path;
  std::string out = "runs/sweep";
  int jobs = 0;          // 0: the grid's `jobs` (default 2)
  bool check = false;    // --check: validate the grid and every run's config, run nothing
  bool rescore = false;  // --rescore: the tables from the finished runs in `out`, run nothing
};
int sweep(const SweepArgs& a);
// Whether `path` reads as a sweep grid: TOML with a top-level [axes] table or
// a `policies` list (a config has neither). False if it does not parse.
bool is_sweep_grid(const std::string& path);

// hsgd config: with `reference`, prints the config reference (markdown, every
// key from its declaration; docs/config-reference.md is this output);
// with `check`, validates each file (a config, or a sweep grid as `hsgd sweep
// --check` does) and prints one line per file, exit 2 if any is bad;
// otherwise loads --config and --set like train, prints the moot-setting
// warnings on stderr and the resolved config.toml on stdout.
struct ConfigArgs {
  std::string config_path;
  std::vector<Override> overrides;
  bool reference = false;
  std::vector<std::string> check;  // --check FILE...
};
int config(const ConfigArgs& a);

// One "hsgd: warning: <key> = <value> has no effect: <why>" line on stderr
// per moot setting of `c` (config/effective.h).
void warn_moot_settings(const Config& c);
// The same for the runs of a compare or sweep, for the keys moot in every
// one of `configs` (a key read by some of its policies is not moot).
void warn_moot_in_every(const std::vector<Config>& configs);
// The budget a compare's round or a sweep's cell measures on when all its
// runs stopped early (metrics/compare.h, extend_to_budget): the longest
// train.budget of `configs`, 0 when any has an epoch limit (a whole run may
// end before its budget).
double common_budget(const std::vector<Config>& configs);

// hsgd fidelity: the job of `config_path` + `overrides` run for `rounds`
// rounds per policy on a real runtime and on the simulator with the same
// network and calibrated costs, into out/<policy>/round-<r>/{real,sim}; then
// out/fidelity.{md,json} (metrics/fidelity.h). real = "mpi": 1 server + hosts
// - 1 workers, one rank per emulated host (scripts/mpi-netns.sh, root),
// links at `rate` (empty: unlimited), the server's at `server_rate`;
// real = "threads": `workers` threads, no network.
struct FidelityArgs {
  std::string config_path;
  std::vector<Override> overrides;
  std::vector<std::string> policies;  // empty: the config's
  std::string real = "mpi";
  int hosts = 4;
  int workers = 4;                // --real threads
  std::string rate, server_rate;  // tc rates, e.g. 100mbit
  int rounds = 3;
  int cores = 0;  // sim.cores; 0: this machine's
  double target = 0.85;
  // Payload bytes per byte on a rate-limited Ethernet link: TCP segments of
  // 1448 bytes (MSS with timestamps) in 1514-byte frames.
  double wire_efficiency = 1448.0 / 1514.0;
  std::string netns_script;  // default: scripts/mpi-netns.sh beside the build
  std::string out = "runs/fidelity";
};
int fidelity(const FidelityArgs& a);

struct BenchArgs {
  std::string data = "fashion-mnist";
  double seconds = 3;            // per throughput measurement
  int repeats = 5;               // compute-only rounds (median reported)
  bool mpi = false;              // the mpi runtime's figures (under mpirun -np 3)
  int64_t chunk = 0;             // --mpi: mpi.chunk of the chunked round trip (0: its default)
  bool round_trip_only = false;  // --mpi: only the round trips (no compression, no LeNet-5)
  bool checkpoint = false;       // only the checkpoint write/resume figures
  bool compress = false;         // only the compressors' costs (issue 14)
  std::string model = "lenet5";  // the model of --compress
  bool model_given = false;      // --model was given (--sim: only its rate, no memory runs)
  bool auto_policy = false;      // only the auto policy's decision cost (#17)
  bool sim = false;              // only the parallel simulator's figures (bench_sim.cc)
  bool stream = false;           // only the server update against the triad (bench_stream.cc)
  bool threads = false;  // only the threads runtime's efficiency, sync and async (bench_threads.cc)
};
int bench(const BenchArgs& a);
int bench_mpi(const BenchArgs& a);
int bench_compress(const BenchArgs& a);
int bench_auto(const BenchArgs& a);
int bench_sim(const BenchArgs& a);
int bench_threads(const BenchArgs& a);
// bench_stream.cc: the server's update at 10M parameters against a triad.
void print_server_vs_triad(int repeats);

// hsgd help-markdown: the CLI reference (markdown) from `app`'s own
// subcommands, options and help strings; docs/cli-reference.md is this output.
std::string help_markdown(const CLI::App& app);

}  // namespace hsgd::cli
