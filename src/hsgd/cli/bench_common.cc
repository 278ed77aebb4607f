#include "hsgd/cli/bench_common.h"

#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>

#include "hsgd/core/stats.h"
#include "hsgd/metrics/recorder.h"
#include "hsgd/runtime/clock.h"

namespace hsgd::cli {

ModelSpec bench_spec(const std::string& name, const Dataset& d, std::vector<int64_t> hidden) {
  ModelSpec s;
  s.name = name;
  s.sample_shape = d.sample_shape;
  s.num_classes = d.num_classes;
  s.hidden = std::move(hidden);
  return s;
}

GradientLoop::GradientLoop(const ModelSpec& spec, const Dataset& train, int batch, int warmup)
    : model_(make_model(spec)),
      params_(static_cast<size_t>(model_->num_params())),
      grads_(params_.size()),
      sampler_(train, 0, 1, 1),
      batch_size_(batch) {
  model_->bind(params_, grads_);
  model_->init_params(1);
  for (int i = 0; i < warmup; ++i) step();
}

void GradientLoop::next_batch() { sampler_.next(batch_size_, &batch_); }

double GradientLoop::gradient() { return model_->gradient(batch_); }

Job bench_job(const Config& c, const ModelSpec& spec, const Dataset& train, const Dataset& test) {
  Job job;
  job.config = &c;
  job.train = &train;
  job.test = &test;
  job.make_model = [spec] { return make_model(spec); };
  job.initial_params = initial_params(job.make_model, 1);
  // One partition for every worker (as hsgd train does), not one per
  // worker's sampler: 256 shuffles of the data set per run would be charged
  // to the runtimes' figures.
  job.partition = std::make_shared<const Partition>(make_partition(job));
  return job;
}

RunResult run_scratch(const Config& c, const ModelSpec& spec, const Dataset& train,
                      const Dataset& test) {
  const Job job = bench_job(c, spec, train, test);
  const std::string dir = (std::filesystem::temp_directory_path() /
                           fmt::format("hsgd-bench-{}", static_cast<long>(getpid())))
                              .string();
  std::filesystem::create_directories(dir);
  RunResult r;
  {
    Recorder rec(dir);
    r = make_runtime(c)->run(job, &rec, nullptr);
  }
  std::filesystem::remove_all(dir);
  return r;
}

// Single-thread gradient throughput (samples/s), median over rounds.
double compute_only(const ModelSpec& spec, const Dataset& train, int batch, int repeats) {
  GradientLoop loop(spec, train, batch, 10);
  std::vector<double> rates;
  for (int r = 0; r < repeats; ++r) {
    int steps = 0;
    const auto t0 = SteadyClock::now();
    double el = 0;
    while (el < 0.5) {
      loop.step();
      ++steps;
      el = since(t0);
    }
    rates.push_back(steps * batch / el);
  }
  return median(rates);
}

// Threads-runtime throughput (samples per training second).
double runtime_rate(const ModelSpec& spec, const Dataset& train, const Dataset& test,
                    const std::string& policy, int workers, int batch, double seconds) {
  Config c = load_config("", {{"train.workers", std::to_string(workers)},
                              {"train.batch", std::to_string(batch)},
                              {"train.budget", fmt::format("{}", seconds)},
                              {"train.eval_every", "1000000"},
                              {"train.eval_samples", "64"},
                              {"policy.name", policy}});
  RunResult r = run_scratch(c, spec, train, test);
  return static_cast<double>(r.last.samples) / r.train_s;
}

std::unique_ptr<Server> async_server(std::span<float> params, const std::string& optimizer) {
  ServerOptions so;
  so.workers = 1;
  PolicyOptions po;
  po.kind = "async";
  OptimizerOptions oo;
  oo.kind = optimizer;
  return std::make_unique<Server>(params, so, make_policy(po, 1, 0.01),
                                  make_optimizer(oo, params.size()));
}

}  // namespace hsgd::cli
