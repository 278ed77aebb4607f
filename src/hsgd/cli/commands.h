// The hsgd subcommands. Each returns the process exit code; InputError
// propagates to main(), which prints it and exits with 2.
#pragma once
#include <string>
#include <vector>

#include "hsgd/config/config.h"

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
// Exit codes: 0 done; 2 bad input (nothing written); 3 stopped early
// (divergence), metrics and checkpoints kept.
int train(const TrainArgs& a);

// The values the run's runtime would calibrate (the simulator's costs), as
// overrides; empty for the other runtimes. Loads the job to measure.
std::vector<Override> resolve_costs(const TrainArgs& a);

struct EvalArgs {
  std::string model_path;
  std::string data;
  bool json = false;
};
int eval(const EvalArgs& a);

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
int compare(const CompareArgs& a);

// hsgd sweep GRID.toml: every cell of the grid x every policy x every seed
// on the simulator, `jobs` child `hsgd train` processes at a time, into
// out/cells/<cell>/<policy>/seed-<s>; runs already done (same config) are
// skipped; then out/sweep.{md,json} and heatmap*.{dat,png} (metrics/sweep.h).
struct SweepArgs {
  std::string grid_path;
  std::string out = "runs/sweep";
  int jobs = 0;  // 0: the grid's `jobs` (default 2)
  bool check = false;  // --check: validate the grid and every run's config, run nothing
};
int sweep(const SweepArgs& a);

// hsgd config: with `reference`, prints the config reference (markdown, every
// key from its declaration; docs/config-reference.md is this output);
// otherwise loads --config and --set like train, prints the moot-setting
// warnings on stderr and the resolved config.toml on stdout.
struct ConfigArgs {
  std::string config_path;
  std::vector<Override> overrides;
  bool reference = false;
};
int config(const ConfigArgs& a);

// One "hsgd: warning: <key> = <value> has no effect: <why>" line on stderr
// per moot setting of `c` (config/effective.h).
void warn_moot_settings(const Config& c);
// The same for the runs of a compare or sweep, for the keys moot in every
// one of `configs` (a key read by some of its policies is not moot).
void warn_moot_in_every(const std::vector<Config>& configs);

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
