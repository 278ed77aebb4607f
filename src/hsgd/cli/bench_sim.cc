// hsgd bench --sim: the parallel simulator's figures of BENCHMARKS.md.
//  1. Gradient rate at 256 workers (softmax, LeNet-5) with sim.threads = 1
//     and 2, against the one-thread compute-only rate, side by side per round.
//  2. Peak resident memory of 256-worker runs (LeNet-5, a 10M-parameter MLP),
//     each measured alone (/proc/self/clear_refs resets the peak).
#include <fmt/format.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "hsgd/cli/bench_common.h"
#include "hsgd/cli/commands.h"
#include "hsgd/core/error.h"
#include "hsgd/core/memory.h"
#include "hsgd/core/stats.h"
#include "hsgd/data/readers.h"
#include "hsgd/data/spec.h"
#include "hsgd/runtime/clock.h"
#include "hsgd/runtime/runtime.h"

namespace hsgd::cli {
namespace {

using Clock = SteadyClock;

// One thread calling Model::gradient on consecutive batches: gradients/s
// over `seconds`.
double compute_only_rate(const ModelSpec& spec, const Dataset& train, int batch, double seconds) {
  GradientLoop loop(spec, train, batch, 3);
  int steps = 0;
  const auto t0 = Clock::now();
  double el = 0;
  while (el < seconds) {
    loop.step();
    ++steps;
    el = since(t0);
  }
  return steps / el;
}

// Two threads each calling Model::gradient on consecutive batches at once,
// for `seconds`: their gradients in total (the CPU they took is read around
// the call). What two cores give two gradient loops, with no simulator.
int64_t compute_pair_gradients(const ModelSpec& spec, const Dataset& train, int batch,
                               double seconds) {
  std::vector<std::unique_ptr<GradientLoop>> loops;
  for (int t = 0; t < 2; ++t)
    loops.push_back(std::make_unique<GradientLoop>(spec, train, batch, 3));
  std::vector<int64_t> steps(2, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      const auto t0 = Clock::now();
      while (since(t0) < seconds) {
        loops[static_cast<size_t>(t)]->step();
        ++steps[static_cast<size_t>(t)];
      }
    });
  }
  for (std::thread& th : threads) th.join();
  return steps[0] + steps[1];
}

RunResult sim_run(const ModelSpec& spec, const Dataset& train, const Dataset& test, int workers,
                  const std::string& policy, int threads, double budget, double compute_time,
                  int batch, double server_ns_per_param) {
  Config c =
      load_config("", {{"train.runtime", "sim"},
                       {"train.workers", std::to_string(workers)},
                       {"train.batch", std::to_string(batch)},
                       {"train.budget", fmt::format("{:.17g}", budget)},
                       {"train.eval_every", "1000000"},
                       {"train.eval_samples", "64"},
                       {"policy.name", policy},
                       {"stragglers.fraction", "0.5"},
                       {"stragglers.sigma", fmt::format("{:.17g}", compute_time)},
                       {"sim.threads", std::to_string(threads)},
                       {"sim.compute_time", fmt::format("{:.17g}", compute_time)},
                       {"sim.server_ns_per_param", fmt::format("{:.17g}", server_ns_per_param)}});
  return run_scratch(c, spec, train, test);
}

// User + system CPU seconds of this process so far (every thread).
double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

// Peak resident memory in MB (core/memory.h), -1 where /proc has none.
double peak_rss_mb() {
  const int64_t b = peak_rss_bytes();
  return b < 0 ? -1.0 : static_cast<double>(b) / (1024.0 * 1024.0);
}

}  // namespace

int bench_sim(const BenchArgs& a) {
  if (a.model_given && a.model != "softmax" && a.model != "lenet5") {
    throw InputError("bench --sim --model '" + a.model + "': expected softmax or lenet5");
  }
  LoadedData loaded = load_data(a.data, SyntheticOptions{});
  Dataset train = std::move(loaded.train);
  Dataset test = loaded.test ? std::move(*loaded.test) : train;
  const int batch = 64, workers = 256;
  const int rounds = std::max(1, std::min(a.repeats, 5));
  std::printf(
      "hsgd bench --sim: data %s, batch %d, %d workers, policy hybrid, half the workers "
      "delayed; %d rounds, each: compute-only (1 thread, then 2 at once, %.1f s each), then the "
      "simulator with "
      "sim.threads = 1 and 2 (~%.1f s each); medians of the per-round figures\n\n",
      train.name.c_str(), batch, workers, rounds, a.seconds / 2, a.seconds);
  std::printf("%-8s %9s %12s %12s %12s %12s %8s %8s %8s %10s %10s %10s %10s %8s\n", "model",
              "params", "compute/s", "sim 1t/s", "sim 2t/s", "2t comp/s", "1t/c", "2t/c", "2t/1t",
              "cpu us/c", "cpu us/pr", "cpu us/1t", "cpu us/2t", "cpu eff");
  for (const char* name : {"softmax", "lenet5"}) {
    if (a.model_given && a.model != name) continue;
    const ModelSpec spec = bench_spec(name, train);
    if (std::string(name) == "lenet5" && train.sample_shape != std::vector<int64_t>{1, 28, 28} &&
        train.sample_shape != std::vector<int64_t>{1, 32, 32}) {
      continue;
    }
    const int64_t np = make_model(spec)->num_params();
    std::vector<double> c, s1, s2, k2, r1, r2, r21, cpu_c, cpu_p, cpu_1, cpu_2;
    for (int r = 0; r < rounds; ++r) {
      const double cpu0 = cpu_seconds();
      c.push_back(compute_only_rate(spec, train, batch, a.seconds / 2));
      cpu_c.push_back((cpu_seconds() - cpu0) / (c.back() * a.seconds / 2));
      const double cpu_p0 = cpu_seconds();
      const int64_t pair = compute_pair_gradients(spec, train, batch, a.seconds / 2);
      cpu_p.push_back((cpu_seconds() - cpu_p0) / static_cast<double>(std::max<int64_t>(1, pair)));
      // Virtual time per gradient = real time per gradient at one thread, so
      // a budget of seconds / workers virtual seconds takes ~seconds (plus
      // the first rounds: every worker computes before its first push lands).
      // The virtual server takes no time: with one it would be the virtual
      // bottleneck at 256 workers (0.5 ns/parameter: 256 pushes take longer
      // than a gradient), the run would end after a fraction of `seconds`
      // and the pushes queued at it would be computed ahead for nothing.
      const double g = 1.0 / c.back();
      const double budget = a.seconds / workers + 4 * g;
      for (int threads : {1, 2}) {
        const double cpu1 = cpu_seconds();
        const RunResult res =
            sim_run(spec, train, test, workers, "hybrid", threads, budget, g, batch, 0.0);
        (threads == 1 ? s1 : s2).push_back(static_cast<double>(res.gradients) / res.real_train_s);
        // Whole run (model builds and evaluation included) per pushed gradient.
        (threads == 1 ? cpu_1 : cpu_2)
            .push_back((cpu_seconds() - cpu1) / static_cast<double>(res.gradients));
        if (threads == 2) {
          k2.push_back(static_cast<double>(res.sampler_cost.batches) / res.real_train_s);
        }
      }
      r1.push_back(s1.back() / c.back());
      r2.push_back(s2.back() / c.back());
      r21.push_back(s2.back() / s1.back());
    }
    std::printf(
        "%-8s %9lld %12.0f %12.0f %12.0f %12.0f %8.3f %8.3f %8.3f %10.1f %10.1f %10.1f %10.1f "
        "%8.3f\n",
        name, static_cast<long long>(np), median(c), median(s1), median(s2), median(k2), median(r1),
        median(r2), median(r21), 1e6 * median(cpu_c), 1e6 * median(cpu_p), 1e6 * median(cpu_1),
        1e6 * median(cpu_2), median(cpu_c) / median(cpu_2));
    std::fflush(stdout);
  }
  std::printf(
      "\ngradients per real second of training (evaluation excluded). sim 1t/s, sim 2t/s: pushes\n"
      "applied; 2t comp/s: gradients the pool computed (it also computes pushes the budget\n"
      "cuts off, which one thread, computing on demand, never does: up to one per worker,\n"
      "a visible share of a short run). Ratios: medians of the per-round ratios.\n"
      "cpu us/c, cpu us/pr, cpu us/1t, cpu us/2t: CPU microseconds (user + system, all\n"
      "threads) per gradient: compute-only, two compute-only threads at once (pr: what two\n"
      "cores give two gradient loops, no simulator), and per pushed gradient of the 1- and\n"
      "2-thread simulator (whole run); cpu eff = cpu us/c over cpu us/2t: the 2-thread rate\n"
      "over 2 x compute-only when both cores are free.\n\n");
  if (a.model_given) return 0;  // --model: that model's rate only

  // Memory: peak RSS of one short run each, 256 workers, 2 threads.
  std::printf("peak resident memory, %d workers, sim.threads = 2, each run alone:\n", workers);
  struct MemCase {
    const char* label;
    ModelSpec spec;
    const char* policy;
    double budget;
  };
  const std::vector<MemCase> mem = {
      {"lenet5 sync", bench_spec("lenet5", train), "sync", 0.02},
      {"lenet5 async", bench_spec("lenet5", train), "async", 0.02},
      {"mlp 10M sync", bench_spec("mlp", train, {12500}), "sync", 0.3},
      {"mlp 10M hybrid", bench_spec("mlp", train, {12500}), "hybrid", 0.3},
  };
  for (const MemCase& m : mem) {
    if (m.spec.name == "lenet5" && train.sample_shape != std::vector<int64_t>{1, 28, 28} &&
        train.sample_shape != std::vector<int64_t>{1, 32, 32}) {
      continue;
    }
    const int64_t np = make_model(m.spec)->num_params();
    reset_peak_rss();
    const double before = peak_rss_mb();
    const auto t0 = Clock::now();
    const RunResult r =
        sim_run(m.spec, train, test, workers, m.policy, 2, m.budget, 0.01, batch, 0.5);
    std::printf(
        "  %-15s %9lld params (%6.1f MB each)  peak RSS %8.0f MB (%6.0f MB before the run; "
        "%lld gradients, %.1f s)\n",
        m.label, static_cast<long long>(np), 4.0 * static_cast<double>(np) / 1e6, peak_rss_mb(),
        before, static_cast<long long>(r.gradients), since(t0));
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace hsgd::cli
