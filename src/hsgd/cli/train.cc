// hsgd train: config -> data -> model -> runtime -> outputs.
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>

#include "hsgd/cli/commands.h"
#include "hsgd/cli/network_summary.h"
#include "hsgd/cli/progress.h"
#include "hsgd/cli/sparse_summary.h"
#include "hsgd/config/effective.h"
#include "hsgd/core/error.h"
#include "hsgd/core/stop.h"
#include "hsgd/data/project.h"
#include "hsgd/data/spec.h"
#include "hsgd/metrics/plot.h"
#include "hsgd/mpi/mpi_runtime.h"
#include "hsgd/mpi/session.h"
#include "hsgd/policy/gossip.h"
#include "hsgd/runtime/pilot.h"
#include "hsgd/runtime/runtime.h"

namespace hsgd::cli {
namespace {

namespace fs = std::filesystem;

// The files a finished run leaves in its directory. A run removes them first
// and writes each under a .partial name until it is complete.
// model-rows: row-sparse on mpi, the final rows for model.bin (mpi/sparse.h).
const char* kOutputs[] = {"metrics.csv", "metrics.jsonl", "config.toml", "model.bin",
                          "model.pt",    "summary.json",  "plot.png",    "model-rows"};

void prepare_out_dir(const std::string& dir) {
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec)) {
    throw InputError("train.out = '" + dir + "': exists and is not a directory");
  }
  fs::create_directories(dir, ec);
  if (ec) throw InputError("train.out = '" + dir + "': cannot create (" + ec.message() + ")");
  // Writable? (A read-only directory or file system; access(2) would let
  // root through, a file actually created does not.)
  const std::string probe = (fs::path(dir) / ".hsgd-write-probe.partial").string();
  if (FILE* f = std::fopen(probe.c_str(), "wb")) {
    std::fclose(f);
    std::remove(probe.c_str());
  } else {
    throw InputError("train.out = '" + dir + "': cannot write (" + std::strerror(errno) + ")");
  }
  for (const char* f : kOutputs) {
    fs::remove(fs::path(dir) / f, ec);
    fs::remove(fs::path(dir) / (std::string(f) + ".partial"), ec);
  }
  // A fresh run must never resume from an older run's checkpoints.
  fs::remove_all(fs::path(dir) / "checkpoints", ec);
}

// The arguments of the run to make: for --resume DIR, DIR's own config with
// only the keys a resume may change.
TrainArgs effective_args(const TrainArgs& a) {
  if (a.resume_dir.empty()) return a;
  if (!a.config_path.empty()) {
    throw InputError("--config with --resume: the run's own " + a.resume_dir +
                     "/config.toml is its config");
  }
  for (const Override& o : a.overrides) {
    if (!resumable_key(o.first)) {
      throw InputError("--resume: " + o.first +
                       " would change the run's meaning; with --resume only these keys may be "
                       "given (as --set or their flags): " +
                       resumable_keys());
    }
  }
  const std::string cfg = a.resume_dir + "/config.toml";
  std::error_code ec;
  if (!fs::is_directory(a.resume_dir, ec)) {
    throw InputError("--resume " + a.resume_dir + ": not a directory");
  }
  if (!fs::is_regular_file(cfg, ec)) {
    throw InputError("--resume " + a.resume_dir + ": not a run directory (no config.toml)");
  }
  TrainArgs e = a;
  e.config_path = cfg;
  e.overrides = a.overrides;
  e.overrides.push_back({"train.out", toml_string(a.resume_dir)});
  // A resume never runs a pilot: a run's config.toml holds its pilot's
  // choice, and a run without one trained with the rule (one made without a
  // pilot, as every auto run was before the pilot became auto's default),
  // and resumes so.
  const Config c = load_config(cfg, e.overrides);
  if (c.policy.kind == "auto" && c.policy.auto_pilot > 0 && c.policy.auto_choice.empty()) {
    e.overrides.push_back({"policy.auto_pilot", "0"});
  }
  return e;
}

// A loaded job: the config, the data and the model, everything checked.
// Not movable (the Job points into it).
struct Prepared {
  Config c;
  Dataset train_set, test_set;
  ModelSpec spec;
  Job job;
  std::optional<PilotResult> pilot;  // auto's pilot, when this run ran one
};

// The config of `a`, with the front end's stop request.
Config load_train_config(const TrainArgs& a, const std::vector<Override>& overrides,
                         const TrainHooks& hooks) {
  Config c = load_config(a.config_path, overrides);
  c.stop = hooks.stop;
  return c;
}

// Everything that can be wrong with the input is checked here, before the
// output directory is touched.
std::unique_ptr<Prepared> prepare(const TrainArgs& a, const TrainInputs& in,
                                  const TrainHooks& hooks) {
  auto p = std::make_unique<Prepared>();
  p->c = load_train_config(a, a.overrides, hooks);
  const Config& c = p->c;
  Dataset& train_set = p->train_set;
  Dataset& test_set = p->test_set;
  LoadedData loaded;
  if (in.train) {  // in memory (a borrowed training set is copied as a view)
    loaded.train = *in.train;
    if (in.test) loaded.test = *in.test;
  } else {
    loaded = load_data(c.data.spec, c.data.synthetic);
  }
  if (!in.test && !c.data.test.empty()) {
    train_set = std::move(loaded.train);
    test_set = load_test_data(c.data.test, c.data.synthetic);
  } else if (loaded.test) {
    train_set = std::move(loaded.train);
    test_set = std::move(*loaded.test);
  } else {
    split_train_test(std::move(loaded.train), c.data.test_fraction, c.train.seed, &train_set,
                     &test_set);
  }
  if (c.data.project > 0) {  // the same seeded matrix for both
    project_features(&train_set, c.data.project, c.train.seed);
    project_features(&test_set, c.data.project, c.train.seed);
  }
  check_compatible(train_set, &test_set);
  if (train_set.size() < c.train.workers) {
    throw InputError(fmt::format("train.workers = {}: the training set {} has only {} samples",
                                 c.train.workers, train_set.name, train_set.size()));
  }
  ModelSpec& spec = p->spec;
  if (c.data.normalize) {
    feature_moments(train_set, &spec.input_mean, &spec.input_std);
    standardize(&train_set, spec.input_mean, spec.input_std);
    standardize(&test_set, spec.input_mean, spec.input_std);
  }
  spec.name = c.model.name;
  spec.sample_shape = train_set.sample_shape;
  spec.num_classes = train_set.num_classes;
  spec.hidden = c.model.hidden;
  spec.table_rows = train_set.categorical_rows;  // dlrm
  spec.embedding_dim = c.model.embedding_dim;
  spec.top_hidden = c.model.top_hidden;
  spec.truncation = c.model.truncation;
  spec.alpha = c.model.alpha;
  if (is_torchscript(spec.name) && !in.model_archive.empty()) spec.archive = in.model_archive;
  read_model_archive(&spec);  // torchscript:FILE (unless handed in)
  Job& job = p->job;
  job.config = &p->c;
  job.train = &train_set;
  job.test = &test_set;
  // The training set calibrates buffers (BatchNorm statistics) at evaluation.
  job.make_model = [spec, &train_set] { return make_model(spec, &train_set); };
  if (c.model.sparse && c.train.runtime == "mpi") {
    // Row-sparse on mpi: the rows never exist whole; each server rank
    // initialises its own (Model::init_row, mpi/sparse.h).
    job.num_params = job.make_model()->num_params();
    job.initial_params = initial_dense_params(job.make_model, c.train.seed);
  } else {
    job.initial_params = initial_params(job.make_model, c.train.seed);  // validates the shape
  }
  job.partition = std::make_shared<const Partition>(make_partition(job));  // checks [data] keys
  return p;
}

// What can be checked only once the config is known.
void check_checkpoint_settings(const Config& c, bool resume) {
  const bool on = c.train.checkpoint_every > 0 || resume;
  if (!on) return;
  if (c.policy.kind == "hogwild") {
    throw InputError(
        "policy.name = 'hogwild': has no server state to checkpoint (workers write into shared "
        "memory); train.checkpoint_every and --resume are for the other policies");
  }
}

void print_header(const Prepared& p) {
  const Config& c = p.c;
  warn_moot_settings(c);
  std::fprintf(stderr,
               "hsgd: %s on %s (%lld train / %lld test samples, %d classes), %lld params, "
               "policy %s, %d workers x batch %d, lr %g, %s%s -> %s\n",
               p.spec.name.c_str(), p.train_set.name.c_str(),
               static_cast<long long>(p.train_set.size()),
               static_cast<long long>(p.test_set.size()), p.train_set.num_classes,
               static_cast<long long>(job_params(p.job)),
               make_policy(c.policy, c.train.workers, c.optim.lr)->name().c_str(), c.train.workers,
               c.train.batch, c.optim.lr,
               c.train.budget > 0 ? fmt::format("{}s", c.train.budget).c_str()
                                  : fmt::format("{} epochs", c.train.epochs).c_str(),
               c.train.runtime != "mpi" ? ""
               : is_gossip_policy(c.policy.kind)
                   ? ", mpi with no server (a worker per rank)"
                   : fmt::format(", mpi with {} server shard(s)", c.train.servers).c_str(),
               c.train.out.c_str());
  if (std::isfinite(p.test_set.planted_auc)) {
    std::fprintf(stderr,
                 "hsgd: %s: the planted model's AUC over all generated samples is %.4f (the best "
                 "a model can expect)\n",
                 p.test_set.name.c_str(), p.test_set.planted_auc);
  }
  const PartitionStats ps = partition_stats(p.train_set, *p.job.partition);
  std::fprintf(stderr,
               "hsgd: data partition %s: label skew %.3f (mean TV distance to the global "
               "label distribution)%s, sampling %s\n",
               c.data.partition.kind.c_str(), ps.skew_tv,
               ps.global_pool_size > 0
                   ? fmt::format("; global pool {} samples, skew with the pool {:.3f}",
                                 ps.global_pool_size, ps.effective_skew_tv)
                         .c_str()
                   : "",
               c.sampling.kind.c_str());
}

// Row-sparse on mpi (RunResult::rows_file): model.bin from the dense part
// and the rows file, one chunk in memory at a time (written only if every
// value is finite); removes the rows file.
void write_streamed_model(const std::string& path, const ModelSpec& spec, const RunResult& r,
                          int64_t num_params, bool dense_finite) {
  struct Remove {
    const std::string& f;
    ~Remove() { std::remove(f.c_str()); }
  } remove{r.rows_file};
  if (!dense_finite) return;
  std::FILE* f = std::fopen(r.rows_file.c_str(), "rb");
  if (f == nullptr) throw InputError(r.rows_file + ": cannot open: " + std::strerror(errno));
  struct Close {
    std::FILE* f;
    ~Close() { std::fclose(f); }
  } close{f};
  bool dense_done = false;
  std::vector<float> chunk(size_t{1} << 20);
  save_model_stream(path, spec, static_cast<uint64_t>(num_params),
                    [&](std::span<const float>* next) {
                      if (!dense_done) {
                        dense_done = true;
                        *next = r.params;
                        return true;
                      }
                      const size_t n = std::fread(chunk.data(), sizeof(float), chunk.size(), f);
                      if (n == 0) {
                        if (std::ferror(f)) throw InputError(r.rows_file + ": read failed");
                        return false;
                      }
                      *next = std::span<const float>(chunk).first(n);
                      return true;
                    });
}

// Writes the outputs of a finished run, each complete or absent, and the
// closing lines.
void write_outputs(const TrainArgs& a, const Prepared& p, const RunResult& r, Recorder& recorder,
                   const CheckpointStore* store, const Checkpoint* resumed) {
  const Config& c = p.c;
  const std::string& out = c.train.out;
  const ModelSpec& spec = p.spec;
  bool finite = true;
  for (float v : r.params) finite = finite && std::isfinite(v);
  // A torchscript model's file embeds the trained module (with its buffers);
  // model.pt is the trained model taking unstandardized inputs, for
  // torch.jit.load.
  std::string model_pt;
  if (!r.rows_file.empty()) {
    write_streamed_model(out + "/model.bin", spec, r, job_params(p.job), finite);
  } else if (finite) {
    ModelSpec trained = spec;
    if (is_torchscript(spec.name)) {
      trained.archive = export_torchscript(spec, r.params, &p.train_set, /*standalone=*/false);
    }
    save_model(out + "/model.bin", trained, r.params);
    model_pt = export_torchscript(spec, r.params, &p.train_set, /*standalone=*/true);
    if (!model_pt.empty()) write_file_atomic(out + "/model.pt", model_pt);
  }
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
                            {"data", p.train_set.name},
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
                            {"staleness_histogram", r.staleness_histogram},
                            {"worker_pushes", r.worker_pushes}};
  if (c.train.runtime == "mpi") {
    summary["servers"] = is_gossip_policy(c.policy.kind) ? 0 : c.train.servers;
  }
  int64_t dropped = 0, nonfinite = 0;
  for (const MetricsRow& row : recorder.rows()) {
    dropped += row.dropped;
    nonfinite += row.nonfinite;
  }
  if (std::isfinite(last.test_auc)) {  // binary models (dlrm)
    summary["final_test_auc"] = last.test_auc;
    summary["final_test_logloss"] = last.test_logloss;
  }
  if (std::isfinite(p.test_set.planted_auc)) summary["planted_auc"] = p.test_set.planted_auc;
  if (last.has_mixture) {  // mixture models (dpgmm): test_loss is -held-out LL per point
    summary["effective_k"] = last.effective_k;
    summary["ari"] = std::isfinite(last.ari) ? nlohmann::json(last.ari) : nlohmann::json();
    summary["test_loglik"] = -last.test_loss;
  }
  summary["dropped"] = dropped;
  summary["nonfinite"] = nonfinite;
  summary["stopped"] = r.stopped.empty() ? nlohmann::json() : nlohmann::json(r.stopped);
  // Membership events (issue 10): [{time_s, worker, event, cause, detail}].
  summary["membership"] = nlohmann::json::array();
  for (const MembershipEvent& e : r.membership) {
    summary["membership"].push_back({{"time_s", e.time},
                                     {"worker", e.worker},
                                     {"event", e.join ? "join" : "leave"},
                                     {"cause", to_string(e.cause)},
                                     {"detail", e.detail}});
  }
  if (store || resumed) {
    summary["checkpoints"] = {
        {"written", store ? store->written() : 0},
        {"write_s", store ? store->seconds_spent() : 0.0},
        {"resumed_from", resumed ? nlohmann::json(resumed->path) : nlohmann::json()},
        {"resumed_at_s", resumed ? nlohmann::json(resumed->info.train_s) : nlohmann::json()}};
  }
  const PartitionStats ps = partition_stats(p.train_set, *p.job.partition);
  summary["partition"] = {{"kind", c.data.partition.kind},
                          {"skew_tv", ps.skew_tv},
                          {"effective_skew_tv", ps.effective_skew_tv},
                          {"global_pool_size", ps.global_pool_size},
                          {"shard_sizes", ps.shard_sizes},
                          {"label_histograms", ps.histograms}};
  const SamplerCost& sc = r.sampler_cost;
  if (sc.batches > 0) {  // the mpi runtime does not collect it
    summary["sampling"] = {{"kind", c.sampling.kind},
                           {"batches", sc.batches},
                           {"sampling_s_per_batch", sc.sampling_s / sc.batches},
                           {"gradient_s_per_batch", sc.gradient_s / sc.batches}};
  }
  if (r.compress_on) {  // [compress] (issue 14): totals since the start
    const double pushes = static_cast<double>(std::max<int64_t>(1, r.gradients));
    summary["compress"] = {
        {"push", c.compress.push.name()},
        {"pull", c.compress.pull.name()},
        {"error_feedback", c.compress.push_feedback()},
        {"bytes_pushed", r.compress.bytes_pushed},
        {"bytes_pulled", r.compress.bytes_pulled},
        {"bytes_per_push", static_cast<double>(r.compress.bytes_pushed) / pushes},
        {"compress_s", r.compress.compress_s},
        {"plain_bytes_per_message", 4 * job_params(p.job)}};
    if (r.server_compress_s >= 0) summary["compress"]["server_compress_s"] = r.server_compress_s;
  }
  if (r.sparse.on) summary["sparse"] = sparse_summary(r.sparse, c.train.runtime);  // issue 16
  if (r.network.on) summary["network"] = network_summary(r.network);               // issue 27
  if (r.gossip.on) {                                                               // issue 28
    summary["gossip"] = gossip_summary(r.gossip);
    if (last.has_worker_eval) {  // gossip.eval_workers: the last row's
      summary["gossip"]["worker_acc"] = {{"min", last.worker_acc_min},
                                         {"mean", last.worker_acc_mean},
                                         {"max", last.worker_acc_max}};
    }
  }
  if (p.pilot) {  // auto's pilot (issue 32): every candidate's figures and the choice
    const auto finite = [](double v) {
      return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json();
    };
    auto figures = [&](const std::vector<PilotCandidate>& round) {
      nlohmann::json cands = nlohmann::json::array();
      for (const PilotCandidate& k : round) {
        cands.push_back(
            {{"policy", k.policy},
             {"interval_mean", finite(k.interval_mean)},
             {"ranked", finite(k.ranked)},
             {"final_test_acc", finite(k.final_acc)},
             {"stopped", k.stopped.empty() ? nlohmann::json() : nlohmann::json(k.stopped)}});
      }
      return cands;
    };
    summary["auto_pilot"] = {{"fraction", p.pilot->fraction},
                             {"window", p.pilot->window},
                             {"margin", p.pilot->margin},
                             {"keep", p.pilot->keep},
                             {"budget", p.pilot->budget},
                             {"epochs", p.pilot->epochs},
                             {"sim_compute_time", p.pilot->compute_time},
                             {"wall_s", p.pilot->wall_s},
                             {"candidates", figures(p.pilot->candidates)},
                             {"second_fraction", p.pilot->second_fraction},
                             {"second", figures(p.pilot->second)},
                             {"chosen", p.pilot->chosen}};
  }
  write_file_atomic(out + "/summary.json", summary.dump(2) + "\n");
  recorder.finish();
  std::string plot_note;
  try {
    plot_runs({out}, out + "/plot.png");
    plot_note = ", plot.png";
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hsgd: warning: no plot: %s\n", e.what());
  }
  if (!r.stopped.empty()) {
    std::fprintf(stderr, "hsgd: stopped: %s\n", r.stopped.c_str());
  } else if (!a.quiet) {
    std::fprintf(stderr,
                 "hsgd: done: test_acc %.2f%%  test_loss %.4f  after %.1f s of training "
                 "(%lld updates, %.2f epochs, %.0f samples/s, final K %d)\n"
                 "hsgd: wrote %s/{metrics.csv, metrics.jsonl, config.toml, model.bin%s, "
                 "summary.json%s}\n",
                 100.0 * last.test_acc, last.test_loss, r.train_s,
                 static_cast<long long>(last.updates), last.epoch, sps, last.k, out.c_str(),
                 model_pt.empty() ? "" : ", model.pt", plot_note.c_str());
    if (last.has_mixture) {
      std::fprintf(stderr,
                   "hsgd: mixture: held-out log-likelihood %.4f nats/point (test_loss is its "
                   "negative), effective_k %.0f, ari %.4f\n",
                   -last.test_loss, last.effective_k, last.ari);
    }
  }
}

// Rows and status to the progress line (if any) and the front end's observer.
class Tee final : public Observer {
 public:
  Tee(Observer* a, Observer* b) : a_(a), b_(b) {}
  void on_row(const MetricsRow& r) override {
    if (a_) a_->on_row(r);
    if (b_) b_->on_row(r);
  }
  void on_status(const Status& s) override {
    if (a_) a_->on_status(s);
    if (b_) b_->on_status(s);
  }

 private:
  Observer* a_;
  Observer* b_;
};

// How a run that ended early ended (TrainOutcome::stop_kind).
std::string stop_kind(const std::string& stopped) {
  if (stopped.empty()) return "";
  if (StopRequest::is_request(stopped)) return "requested";
  // Membership::record's line (runtime/membership.cc).
  if (stopped.find("fewer than train.min_workers") != std::string::npos) return "too_few_workers";
  return "diverged";
}

TrainOutcome outcome_of(const Prepared& p, const RunResult& r) {
  TrainOutcome o;
  o.code = r.stopped.empty() ? 0 : 3;
  o.out = p.c.train.out;
  o.stopped = r.stopped;
  o.stop_kind = stop_kind(r.stopped);
  o.primary = r.primary;
  return o;
}

// auto's pilot (runtime/pilot.h), with a line per candidate unless quiet.
PilotResult pilot_with_lines(const Prepared& p, bool quiet) {
  const Config& c = p.c;
  if (!quiet) {
    const std::vector<std::string> cands = pilot_candidates(c);
    std::fprintf(stderr,
                 "hsgd: auto pilot: %zu candidates on the simulator, each for %g of the budget "
                 "(%s)\n",
                 cands.size(), c.policy.auto_pilot,
                 c.train.budget > 0
                     ? fmt::format("{:g} s", c.train.budget * c.policy.auto_pilot).c_str()
                     : fmt::format("{:g} epochs", c.train.epochs * c.policy.auto_pilot).c_str());
  }
  if (!quiet && c.policy.auto_pilot_keep > 0 && c.policy.auto_pilot < 1) {
    std::fprintf(stderr,
                 "hsgd: auto pilot: then the best %d continue to %g of the budget "
                 "(policy.auto_pilot_keep)\n",
                 c.policy.auto_pilot_keep, std::min(1.0, 2 * c.policy.auto_pilot));
  }
  PilotResult r = run_pilot(p.job, [&](const PilotCandidate& cand) {
    if (quiet) return;
    const std::string name = cand.round == 2 ? cand.policy + " (2nd)" : cand.policy;
    if (cand.stopped.empty()) {
      std::fprintf(
          stderr, "hsgd: auto pilot: %-10s interval-mean test_acc %.2f%%%s, final %.2f%%\n",
          name.c_str(), 100 * cand.interval_mean,
          c.policy.auto_pilot_window < 1
              ? fmt::format(" (last {:g}: {:.2f}%)", c.policy.auto_pilot_window, 100 * cand.ranked)
                    .c_str()
              : "",
          100 * cand.final_acc);
    } else {
      std::fprintf(stderr, "hsgd: auto pilot: %-10s stopped: %s\n", name.c_str(),
                   cand.stopped.c_str());
    }
  });
  if (!quiet && r.stopped.empty()) {
    std::fprintf(stderr, "hsgd: auto pilot: chose %s (%.1f s); policy.auto_choice = \"%s\"\n",
                 r.chosen.c_str(), r.wall_s, r.chosen.c_str());
  }
  return r;
}

// A stop request that ended the pilot: nothing was trained or written.
TrainOutcome stopped_in_pilot(const Prepared& p, const std::string& why, bool print) {
  if (print) std::fprintf(stderr, "hsgd: stopped: %s (during auto's pilot; no run)\n", why.c_str());
  TrainOutcome o;
  o.code = 3;
  o.out = p.c.train.out;
  o.stopped = why;
  o.stop_kind = "requested";
  return o;
}

TrainOutcome run_in_process(const TrainArgs& args, Prepared& p, const TrainHooks& hooks) {
  TrainArgs a = args;
  std::unique_ptr<Runtime> runtime = make_runtime(p.c);
  // Calibrations first, so config.toml records them before training starts.
  const std::vector<Override> resolved = runtime->resolve(p.job);
  if (!resolved.empty()) {
    a.overrides.insert(a.overrides.end(), resolved.begin(), resolved.end());
    p.c = load_train_config(a, a.overrides, hooks);
  }
  // auto's pilot, after the calibrations it shares (a resume's config.toml
  // holds its choice: no pilot then).
  if (wants_pilot(p.c)) {
    p.pilot = pilot_with_lines(p, a.quiet);
    if (!p.pilot->stopped.empty()) return stopped_in_pilot(p, p.pilot->stopped, true);
    a.overrides.push_back({"policy.auto_choice", toml_string(p.pilot->chosen)});
    p.c = load_train_config(a, a.overrides, hooks);
  }
  const bool resume = !a.resume_dir.empty();
  check_checkpoint_settings(p.c, resume);
  p.job.identity = CheckpointIdentity{config_hash(p.c), p.spec.name, job_params(p.job)};
  std::optional<Checkpoint> ck;
  if (resume) {
    ck = CheckpointStore::load_latest(p.c.train.out, p.job.identity);
    if (p.c.train.runtime == "sim" && ck->info.workers != p.c.train.workers) {
      throw InputError(fmt::format(
          "--workers {}: {} is a simulation of {} workers; the simulator resumes exactly, with "
          "the same train.workers",
          p.c.train.workers, ck->path, ck->info.workers));
    }
    if (ck->info.runtime != p.c.train.runtime) {
      throw InputError(ck->path + ": written by the " + ck->info.runtime + " runtime, not " +
                       p.c.train.runtime);
    }
  } else {
    prepare_out_dir(p.c.train.out);
  }
  if (!a.quiet) {
    print_header(p);
    if (ck) {
      std::fprintf(stderr, "hsgd: resuming from %s (%.3f s of training, update %lld)\n",
                   ck->path.c_str(), ck->info.train_s, static_cast<long long>(ck->info.updates));
    }
  }
  std::optional<Recorder> recorder;
  if (ck) {
    recorder.emplace(p.c.train.out, ck->info.rows, p.c.compress.on());
  } else {
    recorder.emplace(p.c.train.out, p.c.compress.on());
  }
  std::optional<CheckpointStore> store;
  if (p.c.train.checkpoint_every > 0) store.emplace(p.c.train.out, p.c.checkpoint.keep);
  p.job.checkpoints = store ? &*store : nullptr;
  p.job.resume = ck ? &*ck : nullptr;
  // Once the runtime has restored (a resume refused there touches nothing).
  p.job.open_outputs = [&] {
    write_file_atomic(p.c.train.out + "/config.toml", to_toml(p.c));
    recorder->open();
  };
  Progress progress(stderr, isatty(STDERR_FILENO) != 0, p.c.train.budget, p.c.train.epochs);
  Tee observer(a.quiet || !hooks.progress_line ? nullptr : &progress, hooks.observer);
  RunResult r = runtime->run(p.job, &*recorder, &observer);
  progress.finish();
  write_outputs(a, p, r, *recorder, store ? &*store : nullptr, ck ? &*ck : nullptr);
  return outcome_of(p, r);
}

// Under mpirun: every rank loads the job; the ranks agree that nobody failed
// before any rank starts; rank 0 alone prints and writes.
TrainOutcome run_under_mpirun(const TrainArgs& args, const TrainInputs& in,
                              const TrainHooks& hooks) {
  mpi::Session session(nullptr, nullptr);
  TrainOutcome refused;  // a setup error every rank agreed on (printed by rank 0)
  refused.code = 2;
  refused.primary = session.rank() == 0;
  refused.rank = session.rank();
  TrainArgs a = args;
  std::unique_ptr<Prepared> p;
  std::optional<Checkpoint> ck;  // rank 0, with --resume
  std::string error;
  try {
    a = effective_args(args);  // (a --resume refusal, too, is rank 0's one line)
    const Config c0 = load_train_config(a, a.overrides, hooks);
    const bool gossip = is_gossip_policy(c0.policy.kind);
    if (c0.train.runtime == "mpi" && gossip) {
      // No server ranks: every rank is a worker (mpi/gossip.h).
      a.overrides.push_back({"train.workers", std::to_string(session.size())});
    } else if (c0.train.runtime == "mpi") {
      MpiRuntime::check_launch(session.size(), c0.train.servers, INT64_MAX);
      // The workers are the ranks after the servers.
      a.overrides.push_back({"train.workers", std::to_string(session.size() - c0.train.servers)});
    } else if (session.size() > 1) {
      throw InputError(fmt::format(
          "train.runtime = '{}': mpirun started {} ranks; pass --runtime mpi (or run hsgd "
          "without mpirun)",
          c0.train.runtime, session.size()));
    }
    p = prepare(a, in, hooks);
    check_checkpoint_settings(p->c, !a.resume_dir.empty());
    if (p->c.train.runtime == "mpi" && !is_gossip_policy(p->c.policy.kind)) {
      MpiRuntime::check_launch(session.size(), p->c.train.servers, job_params(p->job));
    }
    p->job.identity = CheckpointIdentity{config_hash(p->c), p->spec.name, job_params(p->job)};
    if (session.rank() == 0) {
      if (!a.resume_dir.empty()) {
        ck.emplace(CheckpointStore::load_latest(p->c.train.out, p->job.identity));
        if (ck->info.runtime != p->c.train.runtime) {
          throw InputError(ck->path + ": written by the " + ck->info.runtime + " runtime, not " +
                           p->c.train.runtime);
        }
        // (A gossip policy has no server ranks: train.servers 0 or 1 alike.)
        if (!is_gossip_policy(p->c.policy.kind) && ck->info.servers != p->c.train.servers) {
          throw InputError(fmt::format(
              "--resume: {} was written by {} server ranks; resume with --servers {} (the "
              "worker ranks may differ)",
              ck->path, ck->info.servers, ck->info.servers));
        }
        // Every blob decoded now, so that a refusal stops every rank here,
        // before the output directory is touched (issue 25, defect 5).
        if (p->c.train.runtime == "mpi") MpiRuntime::check_resume(p->job, *ck, session.size());
      } else {
        prepare_out_dir(p->c.train.out);
      }
    }
  } catch (const std::exception& e) {
    error = e.what();
    if (error.empty()) error = "setup failed";
  }
  if (!session.agree(error)) {
    refused.error = error;
    return refused;
  }
  if (p->c.train.runtime != "mpi") return run_in_process(a, *p, hooks);  // mpirun -np 1
  // auto's pilot: rank 0 runs it while the others wait; every rank trains
  // with its choice.
  if (wants_pilot(p->c)) {
    std::string failed, chosen;
    if (session.rank() == 0) {
      try {
        p->pilot = pilot_with_lines(*p, a.quiet);
        chosen = p->pilot->stopped.empty() ? p->pilot->chosen : "";
      } catch (const std::exception& e) {
        failed = e.what();
        if (failed.empty()) failed = "auto's pilot failed";
      }
    }
    if (!session.agree(failed)) {
      refused.error = failed;
      return refused;
    }
    chosen = session.broadcast(chosen);
    if (chosen.empty()) {  // a stop request ended rank 0's pilot
      TrainOutcome o = stopped_in_pilot(
          *p,
          session.rank() == 0 ? p->pilot->stopped : StopRequest::kPrefix + std::string("rank 0"),
          session.rank() == 0);
      o.primary = session.rank() == 0;
      o.rank = session.rank();
      return o;
    }
    try {
      a.overrides.push_back({"policy.auto_choice", toml_string(chosen)});
      p->c = load_train_config(a, a.overrides, hooks);
      p->job.identity = CheckpointIdentity{config_hash(p->c), p->spec.name, job_params(p->job)};
    } catch (const std::exception& e) {
      session.abort(e.what(), 2);
    }
  }
  const auto role = [&](TrainOutcome o) {
    o.rank = session.rank();
    const int servers = is_gossip_policy(p->c.policy.kind) ? 0 : p->c.train.servers;
    o.role = session.rank() == 0 ? "primary" : session.rank() < servers ? "server" : "worker";
    return o;
  };

  const bool root = session.rank() == 0;
  std::optional<Recorder> recorder;
  std::optional<CheckpointStore> store;
  // Rank 0 opens the outputs; a refusal there (a resumed run's metrics with
  // fewer rows than its checkpoint) is agreed by every rank like a setup
  // error. The recorder first: it checks the rows before anything is
  // written (issue 25, defect 5).
  std::string opening;
  if (root) {
    try {
      if (ck) {
        recorder.emplace(p->c.train.out, ck->info.rows, p->c.compress.on());
      } else {
        recorder.emplace(p->c.train.out, p->c.compress.on());
      }
      write_file_atomic(p->c.train.out + "/config.toml", to_toml(p->c));
      if (p->c.train.checkpoint_every > 0) store.emplace(p->c.train.out, p->c.checkpoint.keep);
    } catch (const std::exception& e) {
      opening = e.what();
      if (opening.empty()) opening = "cannot open the outputs";
    }
  }
  if (!session.agree(opening)) {
    refused.error = opening;
    return refused;
  }
  if (root && !a.quiet) {
    print_header(*p);
    if (ck) {
      std::fprintf(stderr, "hsgd: resuming from %s (%.3f s of training, update %lld)\n",
                   ck->path.c_str(), ck->info.train_s, static_cast<long long>(ck->info.updates));
    }
  }
  p->job.checkpoints = store ? &*store : nullptr;
  p->job.resume = ck ? &*ck : nullptr;
  Progress progress(stderr, isatty(STDERR_FILENO) != 0, p->c.train.budget, p->c.train.epochs);
  Tee observer(root && !a.quiet && hooks.progress_line ? &progress : nullptr,
               root ? hooks.observer : nullptr);
  RunResult r;
  try {
    r = MpiRuntime().run(p->job, recorder ? &*recorder : nullptr, &observer);
  } catch (const InputError& e) {
    // Raised alike on every rank before any message of the run.
    if (root) std::fprintf(stderr, "hsgd: error: %s\n", e.what());
    refused.error = e.what();
    return role(refused);
  } catch (const std::exception& e) {
    session.abort(e.what(), 3);
  }
  if (!r.primary) return role(outcome_of(*p, r));  // rank 0 prints the line
  progress.finish();
  write_outputs(a, *p, r, *recorder, store ? &*store : nullptr, ck ? &*ck : nullptr);
  return role(outcome_of(*p, r));
}

}  // namespace

TrainOutcome run_train(const TrainArgs& args, const TrainInputs& in, const TrainHooks& hooks) {
  if (mpi::launched_by_mpirun()) return run_under_mpirun(args, in, hooks);
  const TrainArgs a = effective_args(args);
  std::unique_ptr<Prepared> p = prepare(a, in, hooks);
  return run_in_process(a, *p, hooks);
}

int train(const TrainArgs& args) { return run_train(args, {}, {}).code; }

std::vector<Override> resolve_costs(const TrainArgs& a, const TrainInputs& in) {
  std::unique_ptr<Prepared> p = prepare(a, in, {});
  return make_runtime(p->c)->resolve(p->job);
}

}  // namespace hsgd::cli
