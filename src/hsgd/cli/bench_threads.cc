// hsgd bench --threads: the threads runtime's parallel efficiency, side by
// side per round. Each round measures, for each model, the one-thread
// compute-only rate, then async with 1 and 2 workers and sync with 2
// workers; the figures are medians over rounds of the rates and of the
// per-round ratios (the machine is shared: ratios of one round are taken
// within seconds of each other).
#include <fmt/format.h>

#include <cstdio>
#include <string>
#include <vector>

#include "hsgd/cli/bench_common.h"
#include "hsgd/cli/commands.h"
#include "hsgd/core/stats.h"
#include "hsgd/data/readers.h"
#include "hsgd/data/spec.h"

namespace hsgd::cli {

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
    std::vector<double> c, a1, a2, s2, e1, e2, es2, sync_async;
  };
  std::vector<Row> rows(models.size());
  for (int r = 0; r < a.repeats; ++r) {
    for (size_t m = 0; m < models.size(); ++m) {
      const ModelSpec spec = bench_spec(models[m], train);
      const double c = compute_only(spec, train, batch, 1);
      const double a1 = runtime_rate(spec, train, test, "async", 1, batch, a.seconds);
      const double a2 = runtime_rate(spec, train, test, "async", 2, batch, a.seconds);
      const double s2 = runtime_rate(spec, train, test, "sync", 2, batch, a.seconds);
      Row& row = rows[m];
      row.c.push_back(c);
      row.a1.push_back(a1);
      row.a2.push_back(a2);
      row.s2.push_back(s2);
      row.e1.push_back(a1 / c);
      row.e2.push_back(a2 / (2 * c));
      row.es2.push_back(s2 / (2 * c));
      row.sync_async.push_back(s2 / a2);
      std::printf("round %d %-8s compute %9.0f  async1 %9.0f  async2 %9.0f  sync2 %9.0f  "
                  "eff(2) %.3f  sync/async %.3f\n",
                  r + 1, models[m].c_str(), c, a1, a2, s2, a2 / (2 * c), s2 / a2);
      std::fflush(stdout);
    }
  }
  std::printf("\nmedians (rates: samples/s; ratios: median of the per-round ratios):\n");
  std::printf("%-8s %11s %11s %11s %11s %8s %8s %12s %11s\n", "model", "compute/s", "async1/s",
              "async2/s", "sync2/s", "eff(1)", "eff(2)", "sync eff(2)", "sync/async");
  for (size_t m = 0; m < models.size(); ++m) {
    const Row& row = rows[m];
    std::printf("%-8s %11.0f %11.0f %11.0f %11.0f %8.3f %8.3f %12.3f %11.3f\n",
                models[m].c_str(), median(row.c), median(row.a1), median(row.a2),
                median(row.s2), median(row.e1), median(row.e2), median(row.es2),
                median(row.sync_async));
  }
  std::printf(
      "\neff(1) = async 1 worker / compute-only; eff(2) = 2 workers / (2 x compute-only)\n");
  return 0;
}

}  // namespace hsgd::cli
