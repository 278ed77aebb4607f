// hsgd bench --threads: the threads runtime's parallel efficiency, side by
// side per round. Each round measures, for each model, the one-thread
// compute-only rate, then async with 1 and 2 workers and sync with 2
// workers; the figures are medians over rounds of the rates and of the
// per-round ratios (the machine is shared: ratios of one round are taken
// within seconds of each other).
#include <fmt/format.h>

#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "hsgd/cli/bench_common.h"
#include "hsgd/cli/commands.h"
#include "hsgd/core/stats.h"
#include "hsgd/data/readers.h"
#include "hsgd/data/spec.h"
#include "hsgd/runtime/clock.h"

namespace hsgd::cli {
namespace {

// Two threads computing gradients side by side, no server, for `seconds`:
// their summed samples/s. What two workers could do on this machine at best
// (two cores' shared caches, memory bandwidth and clock).
double compute_only_pair(const ModelSpec& spec, const Dataset& train, int batch, double seconds) {
  std::vector<std::unique_ptr<GradientLoop>> loops;
  for (int t = 0; t < 2; ++t)
    loops.push_back(std::make_unique<GradientLoop>(spec, train, batch, 10));
  std::vector<int64_t> steps(2, 0);
  std::vector<double> elapsed(2, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      const auto t0 = SteadyClock::now();
      double el = 0;
      while (el < seconds) {
        loops[static_cast<size_t>(t)]->step();
        ++steps[static_cast<size_t>(t)];
        el = since(t0);
      }
      elapsed[static_cast<size_t>(t)] = el;
    });
  }
  for (std::thread& th : threads) th.join();
  return static_cast<double>(batch) *
         (static_cast<double>(steps[0]) / elapsed[0] + static_cast<double>(steps[1]) / elapsed[1]);
}

}  // namespace

int bench_threads(const BenchArgs& a) {
  LoadedData loaded = load_data(a.data, SyntheticOptions{});
  Dataset train = std::move(loaded.train);
  Dataset test = loaded.test ? std::move(*loaded.test) : train;
  const int batch = 64;
  const bool lenet = train.sample_shape == std::vector<int64_t>{1, 28, 28} ||
                     train.sample_shape == std::vector<int64_t>{1, 32, 32};
  std::vector<std::string> models = {"softmax", "mlp"};
  if (lenet) models.push_back("lenet5");
  std::printf(
      "hsgd bench --threads: data %s, batch %d, %d rounds; per round and model: compute-only "
      "(1 thread, 0.5 s), then async 1 worker, async 2 workers, sync 2 workers (%.1f s each)\n\n",
      train.name.c_str(), batch, a.repeats, a.seconds);
  struct Row {
    std::vector<double> c, c2, a1, a2, s2, e1, e2, es2, ec2, a2_c2, sync_async;
  };
  std::vector<Row> rows(models.size());
  for (int r = 0; r < a.repeats; ++r) {
    for (size_t m = 0; m < models.size(); ++m) {
      const ModelSpec spec = bench_spec(models[m], train);
      const double c = compute_only(spec, train, batch, 1);
      const double c2 = compute_only_pair(spec, train, batch, 0.5);
      const double a1 = runtime_rate(spec, train, test, "async", 1, batch, a.seconds);
      const double a2 = runtime_rate(spec, train, test, "async", 2, batch, a.seconds);
      const double s2 = runtime_rate(spec, train, test, "sync", 2, batch, a.seconds);
      Row& row = rows[m];
      row.c.push_back(c);
      row.c2.push_back(c2);
      row.ec2.push_back(c2 / (2 * c));
      row.a2_c2.push_back(a2 / c2);
      row.a1.push_back(a1);
      row.a2.push_back(a2);
      row.s2.push_back(s2);
      row.e1.push_back(a1 / c);
      row.e2.push_back(a2 / (2 * c));
      row.es2.push_back(s2 / (2 * c));
      row.sync_async.push_back(s2 / a2);
      std::printf(
          "round %d %-8s compute %9.0f  pair %9.0f  async1 %9.0f  async2 %9.0f  "
          "sync2 %9.0f  eff(2) %.3f  sync/async %.3f\n",
          r + 1, models[m].c_str(), c, c2, a1, a2, s2, a2 / (2 * c), s2 / a2);
      std::fflush(stdout);
    }
  }
  std::printf("\nmedians (rates: samples/s; ratios: median of the per-round ratios):\n");
  std::printf("%-8s %10s %10s %10s %10s %10s %7s %7s %7s %8s %8s %10s\n", "model", "compute/s",
              "pair/s", "async1/s", "async2/s", "sync2/s", "pair", "eff(1)", "eff(2)", "sync(2)",
              "a2/pair", "sync/async");
  for (size_t m = 0; m < models.size(); ++m) {
    const Row& row = rows[m];
    std::printf("%-8s %10.0f %10.0f %10.0f %10.0f %10.0f %7.3f %7.3f %7.3f %8.3f %8.3f %10.3f\n",
                models[m].c_str(), median(row.c), median(row.c2), median(row.a1), median(row.a2),
                median(row.s2), median(row.ec2), median(row.e1), median(row.e2), median(row.es2),
                median(row.a2_c2), median(row.sync_async));
  }
  std::printf(
      "\ncompute/s: one thread computing gradients; pair/s: two such threads at once\n"
      "pair = pair/s / (2 x compute/s): what two cores give two gradient loops here\n"
      "eff(1) = async 1 worker / compute/s; eff(2) = async 2 workers / (2 x compute/s);\n"
      "sync(2) = sync 2 workers / (2 x compute/s); a2/pair = async 2 workers / pair/s\n");
  return 0;
}

}  // namespace hsgd::cli
