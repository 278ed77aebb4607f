// hsgd: data-parallel SGD through a parameter server with pluggable
// synchronization. Environment variables are read here only.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>

#include "hsgd/cli/commands.h"
#include "hsgd/config/effective.h"
#include "hsgd/core/error.h"
#include "hsgd/model/model.h"

int main(int argc, char** argv) {
  using hsgd::Override;
  CLI::App app{"hsgd: data-parallel SGD through a parameter server (sync, async, hybrid, ...)"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("hsgd ") + HSGD_VERSION);  // CMake project(VERSION)

  // ---- train
  hsgd::cli::TrainArgs ta;
  CLI::App* train =
      app.add_subcommand("train", "Train a model; writes metrics, config and model to --out");
  // No CLI11 ExistingFile check: load_config names the file in one line.
  train->add_option("--config", ta.config_path, "TOML config file");
  std::vector<std::string> sets;
  struct Flag {
    const char* name;
    const char* key;
    const char* help;
    std::string value;
  };
  std::vector<Flag> flags = {
      {"--data",
       "data.spec",
       "fashion-mnist | synthetic | synthetic-ctr | idx:DIR | cifar10:DIR | csv:FILE | libsvm:FILE "
       "| "
       "npy:X.npy,Y.npy | npz:FILE[:XKEY,YKEY] | criteo:FILE",
       {}},
      {"--test-data",
       "data.test",
       "test set spec (default: the data's own test split or a held-out fraction)",
       {}},
      {"--test-fraction",
       "data.test_fraction",
       "held-out fraction when the data has no test split (0.2)",
       {}},
      {"--model",
       "model.name",
       "softmax | mlp | lenet5 | cifar-cnn | dlrm | linear-test | dpgmm | torchscript:FILE",
       {}},
      {"--policy",
       "policy.name",
       "sync | async | hybrid | auto | kasync:K | kbatch:K | ssp:S | local:H | hogwild | dpsgd | "
       "adpsgd | sgp | pdsgdm:P",
       {}},
      {"--workers", "train.workers", "number of workers (4)", {}},
      {"--batch", "train.batch", "batch size per worker (64)", {}},
      {"--lr", "optim.lr", "learning rate (0.01)", {}},
      {"--budget", "train.budget", "training seconds (evaluation excluded)", {}},
      {"--epochs", "train.epochs", "passes over the training set", {}},
      {"--eval-every", "train.eval_every", "seconds between evaluations (5)", {}},
      {"--seed", "train.seed", "random seed (1)", {}},
      {"--out", "train.out", "output directory (runs/latest)", {}},
      {"--runtime", "train.runtime", "threads | sim | mpi (under mpirun)", {}},
      {"--servers",
       "train.servers",
       "mpi: server ranks holding parameter shards; sim: server nodes, the same shards (1)",
       {}},
      {"--checkpoint-every",
       "train.checkpoint_every",
       "seconds of training between checkpoints (0 = off)",
       {}},
  };
  for (Flag& f : flags) train->add_option(f.name, f.value, f.help);
  train->add_option("--set", sets, "override any config key: section.key=value (repeatable)");
  train->add_flag("--quiet", ta.quiet, "no progress output");
  train->add_option("--resume", ta.resume_dir,
                    "continue the run in DIR from its newest checkpoint (only the resumable keys "
                    "may change: " +
                        hsgd::resumable_keys() + ")");

  // ---- eval
  hsgd::cli::EvalArgs ea;
  CLI::App* eval = app.add_subcommand("eval", "Evaluate a saved model on a data set");
  eval->add_option("--model", ea.model_path, "model file written by train (model.bin)")->required();
  eval->add_option("--data", ea.data, "data spec (its test split if it has one)")->required();
  eval->add_flag("--json", ea.json, "print one JSON object");

  // ---- plot
  std::vector<std::string> plot_dirs;
  std::string plot_out;
  CLI::App* plot = app.add_subcommand("plot", "Plot test accuracy and loss against time for runs");
  plot->add_option("dirs", plot_dirs, "run directories (each with metrics.csv)")->required();
  plot->add_option("-o,--out", plot_out, "PNG file (default: DIR/plot.png for one run, plot.png)");

  // ---- compare
  hsgd::cli::CompareArgs ca;
  std::vector<std::string> compare_sets;
  std::string compare_runtime;
  CLI::App* compare = app.add_subcommand(
      "compare", "Run several policies for several rounds and compare them against a baseline");
  compare->add_option("--config", ca.config_path, "TOML config file");
  compare->add_option("--policies", ca.policies, "comma-separated, e.g. sync,async,hybrid,kasync:2")
      ->required()
      ->delimiter(',');
  compare->add_option("--rounds", ca.rounds, "rounds per policy; round r uses seed train.seed + r");
  compare->add_option("--out", ca.out, "output directory (runs/compare)");
  compare->add_option("--baseline", ca.baseline, "the policy to compare against (async)");
  compare->add_option("--runtime", compare_runtime, "train.runtime for every run");
  compare->add_option("--set", compare_sets, "override any config key for every run (repeatable)");

  // ---- sweep
  hsgd::cli::SweepArgs sa;
  CLI::App* sweep = app.add_subcommand(
      "sweep", "Run a grid of configs x policies x seeds on the simulator and tabulate it");
  sweep->add_option("grid", sa.grid_path, "sweep grid (TOML; docs/compare-and-sweep.md)")
      ->required();
  sweep->add_option("--out", sa.out, "output directory (runs/sweep); a rerun resumes it");
  sweep->add_option("--jobs", sa.jobs, "runs at a time (default: the grid's jobs, 2)");
  sweep->add_flag("--check", sa.check,
                  "validate the grid and every run's config, print the run count, run nothing");
  sweep->add_flag("--rescore", sa.rescore,
                  "write the tables again from the finished runs in --out, run nothing (after "
                  "the scoring changed; each run's metrics as they are)");

  // ---- config
  hsgd::cli::ConfigArgs cfa;
  std::vector<std::string> config_sets;
  CLI::App* config = app.add_subcommand(
      "config", "Print the resolved config (and its moot settings), or the config reference");
  config->add_option("--config", cfa.config_path, "TOML config file");
  config->add_option("--set", config_sets,
                     "override any config key: section.key=value (repeatable)");
  config->add_flag("--reference", cfa.reference,
                   "print the reference of every config key (markdown; docs/config-reference.md)");
  config
      ->add_option("--check", cfa.check,
                   "validate each FILE (a config, or a sweep grid: a file with [axes] or "
                   "policies) and print one line per file; exit 2 if any is bad")
      ->expected(1, -1);

  // ---- fidelity
  hsgd::cli::FidelityArgs fa;
  std::vector<std::string> fidelity_sets;
  CLI::App* fidelity = app.add_subcommand(
      "fidelity", "Run a job on a real runtime and on the simulator and compare their figures");
  fidelity->add_option("--config", fa.config_path, "TOML config file");
  fidelity->add_option("--policies", fa.policies, "comma-separated (default: the config's)")
      ->delimiter(',');
  fidelity->add_option("--real", fa.real, "mpi (emulated hosts, needs root) | threads");
  fidelity->add_option("--hosts", fa.hosts,
                       "mpi: emulated hosts, 1 server + HOSTS - 1 workers; a gossip policy: "
                       "the HOSTS - 1 workers on a host each, no server (4)");
  fidelity->add_option("--workers", fa.workers, "threads: worker threads (4)");
  fidelity->add_option("--rate", fa.rate,
                       "mpi: every link's rate, e.g. 100mbit (default unlimited)");
  fidelity->add_option("--server-rate", fa.server_rate, "mpi: the server's link (default --rate)");
  fidelity->add_option("--rounds", fa.rounds,
                       "rounds per policy; round r uses seed train.seed + r");
  fidelity->add_option("--cores", fa.cores,
                       "sim.cores of the simulated runs (default: this machine's)");
  fidelity->add_option("--target", fa.target, "test accuracy of the time-to-target figure (0.85)");
  fidelity->add_option("--wire-efficiency", fa.wire_efficiency,
                       "payload bytes per byte on a limited link (1448/1514: TCP over Ethernet)");
  fidelity->add_option("--netns-script", fa.netns_script, "scripts/mpi-netns.sh");
  fidelity->add_option("--out", fa.out, "output directory (runs/fidelity)");
  fidelity->add_option("--set", fidelity_sets,
                       "override any config key for every run (repeatable)");

  // ---- bench
  hsgd::cli::BenchArgs ba;
  CLI::App* bench =
      app.add_subcommand("bench", "Print throughput figures (see docs/benchmarks.md)");
  bench->add_option("--data", ba.data, "data spec for the model benchmarks");
  bench->add_option("--seconds", ba.seconds, "seconds per runtime throughput measurement");
  bench->add_option("--repeats", ba.repeats, "rounds per compute-only figure (median)");
  bench->add_flag("--mpi", ba.mpi,
                  "the mpi runtime's figures instead; run as mpirun -np 3 hsgd bench --mpi");
  bench
      ->add_option("--chunk", ba.chunk,
                   "with --mpi: mpi.chunk of the chunked round trip (default: mpi.chunk's)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  bench->add_flag("--round-trip", ba.round_trip_only,
                  "with --mpi: only the push + pull round trips against raw MPI");
  bench->add_flag("--checkpoint", ba.checkpoint, "only the checkpoint write and resume figures");
  bench->add_flag("--compress", ba.compress,
                  "only the compressors' cost per gradient and bytes per push ([compress])");
  CLI::Option* bench_model = bench->add_option(
      "--model", ba.model, "the model of --compress (lenet5); with --sim: only that model's rate");
  bench->add_flag("--auto", ba.auto_policy,
                  "only the auto policy's decision cost against the server's");
  bench->add_flag("--sim", ba.sim,
                  "only the parallel simulator's gradient rate (256 workers, 1 and 2 threads)");
  bench->add_flag("--threads", ba.threads,
                  "only the threads runtime's 2-worker efficiency, async and sync, side by side");
  bench->add_flag("--stream", ba.stream,
                  "only the server's update at 10M parameters against a STREAM-like triad");

  // ---- help-markdown
  CLI::App* help_md = app.add_subcommand(
      "help-markdown", "Print this CLI reference as markdown (docs/cli-reference.md)");

  try {
    app.parse(argc, argv);
    ba.model_given = bench_model->count() > 0;
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }

  // --set section.key=value, in order, after the flags.
  const auto add_sets = [](const std::vector<std::string>& in, std::vector<Override>* out) {
    for (const std::string& s : in) {
      const size_t eq = s.find('=');
      if (eq == std::string::npos) {
        throw hsgd::InputError("--set '" + s + "': expected section.key=value");
      }
      out->push_back({s.substr(0, eq), s.substr(eq + 1)});
    }
  };
  try {
    hsgd::configure_math_threads();
    if (*train) {
      for (const Flag& f : flags) {
        if (!f.value.empty()) ta.overrides.push_back({f.key, f.value});
      }
      add_sets(sets, &ta.overrides);
      return hsgd::cli::train(ta);
    }
    if (*help_md) {
      std::fputs(hsgd::cli::help_markdown(app).c_str(), stdout);
      return 0;
    }
    if (*eval) return hsgd::cli::eval(ea);
    if (*plot) return hsgd::cli::plot(plot_dirs, plot_out);
    if (*sweep) return hsgd::cli::sweep(sa);
    if (*config) {
      add_sets(config_sets, &cfa.overrides);
      return hsgd::cli::config(cfa);
    }
    if (*bench) {
      if (ba.compress) return hsgd::cli::bench_compress(ba);
      if (ba.auto_policy) return hsgd::cli::bench_auto(ba);
      if (ba.sim) return hsgd::cli::bench_sim(ba);
      if (ba.threads) return hsgd::cli::bench_threads(ba);
      if (ba.stream) {
        hsgd::cli::print_server_vs_triad(ba.repeats);
        return 0;
      }
      return ba.mpi ? hsgd::cli::bench_mpi(ba) : hsgd::cli::bench(ba);
    }
    if (*fidelity) {
      add_sets(fidelity_sets, &fa.overrides);
      return hsgd::cli::fidelity(fa);
    }
    if (*compare) {
      if (!compare_runtime.empty()) ca.overrides.push_back({"train.runtime", compare_runtime});
      add_sets(compare_sets, &ca.overrides);
      return hsgd::cli::compare(ca);
    }
  } catch (const hsgd::InputError& e) {
    std::fprintf(stderr, "hsgd: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hsgd: failed: %s\n", e.what());
    return 1;
  }
  return 0;
}
