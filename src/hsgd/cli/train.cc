// hsgd train: config -> data -> model -> runtime -> outputs.
#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "hsgd/cli/commands.h"
#include "hsgd/cli/progress.h"
#include "hsgd/core/error.h"
#include "hsgd/data/spec.h"
#include "hsgd/metrics/plot.h"
#include "hsgd/runtime/runtime.h"

namespace hsgd::cli {
namespace {

namespace fs = std::filesystem;

// The files a finished run leaves in its directory. A run removes them first
// and writes each under a .partial name until it is complete.
const char* kOutputs[] = {"metrics.csv", "metrics.jsonl", "config.toml",
                          "model.bin",   "summary.json",  "plot.png"};

void prepare_out_dir(const std::string& dir) {
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec)) {
    throw InputError("train.out = '" + dir + "': exists and is not a directory");
  }
  fs::create_directories(dir, ec);
  if (ec) throw InputError("train.out = '" + dir + "': cannot create (" + ec.message() + ")");
  for (const char* f : kOutputs) {
    fs::remove(fs::path(dir) / f, ec);
    fs::remove(fs::path(dir) / (std::string(f) + ".partial"), ec);
  }
}

}  // namespace

int train(const TrainArgs& a) {
  // 1. Everything that can be wrong with the input is checked before the
  //    output directory is touched.
  const Config c = load_config(a.config_path, a.overrides);
  LoadedData loaded = load_data(c.data.spec, c.data.synthetic);
  Dataset train_set, test_set;
  if (!c.data.test.empty()) {
    train_set = std::move(loaded.train);
    test_set = load_test_data(c.data.test, c.data.synthetic);
  } else if (loaded.test) {
    train_set = std::move(loaded.train);
    test_set = std::move(*loaded.test);
  } else {
    split_train_test(std::move(loaded.train), c.data.test_fraction, c.train.seed, &train_set,
                     &test_set);
  }
  check_compatible(train_set, &test_set);
  if (train_set.size() < c.train.workers) {
    throw InputError(fmt::format("train.workers = {}: the training set {} has only {} samples",
                                 c.train.workers, train_set.name, train_set.size()));
  }
  ModelSpec spec;
  if (c.data.normalize) {
    feature_moments(train_set, &spec.input_mean, &spec.input_std);
    standardize(&train_set, spec.input_mean, spec.input_std);
    standardize(&test_set, spec.input_mean, spec.input_std);
  }
  spec.name = c.model.name;
  spec.sample_shape = train_set.sample_shape;
  spec.num_classes = train_set.num_classes;
  spec.hidden = c.model.hidden;
  Job job;
  job.config = &c;
  job.train = &train_set;
  job.test = &test_set;
  job.make_model = [spec] { return make_model(spec); };
  job.initial_params = initial_params(job.make_model, c.train.seed);  // validates the shape
  std::unique_ptr<Runtime> runtime = make_runtime(c);

  // 2. Run.
  const std::string& out = c.train.out;
  prepare_out_dir(out);
  if (!a.quiet) {
    std::fprintf(stderr,
                 "hsgd: %s on %s (%lld train / %lld test samples, %d classes), %lld params, "
                 "policy %s, %d workers x batch %d, lr %g, %s -> %s\n",
                 spec.name.c_str(), train_set.name.c_str(),
                 static_cast<long long>(train_set.size()), static_cast<long long>(test_set.size()),
                 train_set.num_classes, static_cast<long long>(job.initial_params.size()),
                 make_policy(c.policy, c.train.workers, c.optim.lr)->name().c_str(),
                 c.train.workers, c.train.batch, c.optim.lr,
                 c.train.budget > 0 ? fmt::format("{}s", c.train.budget).c_str()
                                    : fmt::format("{} epochs", c.train.epochs).c_str(),
                 out.c_str());
  }
  Recorder recorder(out);
  Progress progress(stderr, isatty(STDERR_FILENO) != 0, c.train.budget, c.train.epochs);
  Observer quiet;
  RunResult r = runtime->run(job, &recorder, a.quiet ? &quiet : &progress);
  progress.finish();

  // 3. Outputs, each complete or absent.
  save_model(out + "/model.bin", spec, r.params);
  // The config as run: with the values the runtime resolved (calibrations).
  std::vector<Override> as_run = a.overrides;
  as_run.insert(as_run.end(), r.resolved.begin(), r.resolved.end());
  write_file_atomic(out + "/config.toml", to_toml(load_config(a.config_path, as_run)));
  const MetricsRow& last = r.last;
  const double sps = r.train_s > 0 ? static_cast<double>(last.samples) / r.train_s : 0.0;
  nlohmann::json summary = {{"policy", last.policy},
                            {"seed", last.seed},
                            {"aggregation", to_string(c.policy.aggregation)},
                            {"model", spec.name},
                            {"data", train_set.name},
                            {"workers", c.train.workers},
                            {"runtime", c.train.runtime},
                            {"train_s", r.train_s},
                            {"real_train_s", r.real_train_s},
                            {"gradients", r.gradients},
                            {"wall_s", r.wall_s},
                            {"updates", last.updates},
                            {"samples", last.samples},
                            {"epoch", last.epoch},
                            {"samples_per_s", sps},
                            {"test_acc", last.test_acc},
                            {"test_loss", last.test_loss},
                            {"final_k", last.k},
                            {"staleness_histogram", r.staleness_histogram}};
  write_file_atomic(out + "/summary.json", summary.dump(2) + "\n");
  recorder.finish();
  std::string plot_note;
  try {
    plot_runs({out}, out + "/plot.png");
    plot_note = ", plot.png";
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hsgd: warning: no plot: %s\n", e.what());
  }
  if (!a.quiet) {
    std::fprintf(stderr,
                 "hsgd: done: test_acc %.2f%%  test_loss %.4f  after %.1f s of training "
                 "(%lld updates, %.2f epochs, %.0f samples/s, final K %d)\n"
                 "hsgd: wrote %s/{metrics.csv, metrics.jsonl, config.toml, model.bin, "
                 "summary.json%s}\n",
                 100.0 * last.test_acc, last.test_loss, r.train_s,
                 static_cast<long long>(last.updates), last.epoch, sps, last.k, out.c_str(),
                 plot_note.c_str());
  }
  return 0;
}

}  // namespace hsgd::cli
