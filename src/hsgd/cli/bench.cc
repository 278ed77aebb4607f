// hsgd bench: the throughput figures of BENCHMARKS.md, measured side by side
// in one run. Reports medians; the machine is shared and noisy.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <filesystem>

#include "hsgd/checkpoint/checkpoint.h"
#include "hsgd/cli/bench_common.h"
#include "hsgd/cli/commands.h"
#include "hsgd/core/state.h"
#include "hsgd/core/stats.h"
#include "hsgd/data/readers.h"
#include "hsgd/data/spec.h"
#include "hsgd/runtime/clock.h"
#include "hsgd/runtime/runtime.h"
#include "hsgd/server/server.h"

namespace hsgd::cli {
namespace {

using Clock = SteadyClock;

// Server cost of one async update (accumulate + SGD step) per parameter.
double server_ns_per_param(const std::string& optimizer, size_t n, int repeats) {
  std::vector<float> params(n, 0.0f), grad(n, 1e-6f);
  const std::unique_ptr<Server> owned = async_server(params, optimizer);
  Server& server = *owned;
  std::vector<double> ns;
  for (int r = 0; r < repeats; ++r) {
    const int pushes = 20;
    const auto t0 = Clock::now();
    for (int i = 0; i < pushes; ++i) server.on_push(0, server.version(), grad, 1, 0.0, 0.0);
    const double el = since(t0);
    ns.push_back(el * 1e9 / (pushes * static_cast<double>(n)));
  }
  return median(ns);
}

// The simulator's rate in simulated gradients per real second, evaluation
// excluded, for `workers` workers of softmax.
double sim_rate(const Dataset& train, const Dataset& test, int workers, int batch,
                double virtual_seconds, int64_t* gradients) {
  Config c = load_config("", {{"train.runtime", "sim"},
                              {"train.workers", std::to_string(workers)},
                              {"train.batch", std::to_string(batch)},
                              {"train.budget", fmt::format("{}", virtual_seconds)},
                              {"train.eval_every", "1000000"},
                              {"policy.name", "hybrid"},
                              {"sim.compute_time", "0.01"},
                              {"sim.server_ns_per_param", "1"}});
  RunResult r = run_scratch(c, bench_spec("softmax", train), train, test);
  *gradients = r.gradients;
  return static_cast<double>(r.gradients) / r.real_train_s;
}

// Median seconds to write one checkpoint of a server of `n` parameters
// (momentum, a half-full sync buffer) and to resume from it (read, verify
// every checksum, restore the server).
void checkpoint_cost(size_t n, int repeats, double* write_s, double* resume_s) {
  auto make = [n](std::vector<float>& params) {
    ServerOptions so;
    so.workers = 4;
    PolicyOptions po;
    po.kind = "sync";
    OptimizerOptions oo;
    oo.kind = "momentum";
    return std::make_unique<Server>(params, so, make_policy(po, 4, 0.01), make_optimizer(oo, n));
  };
  std::vector<float> params(n, 0.5f), grad(n, 1e-3f);
  std::unique_ptr<Server> server = make(params);
  for (int w = 0; w < 4; ++w) server->on_push(w, 0, grad, 1, 0.0, 0.0);  // one update
  for (int w = 0; w < 2; ++w) server->on_push(w, 1, grad, 1, 0.0, 0.0);  // buffered
  const std::string dir = (std::filesystem::temp_directory_path() /
                           fmt::format("hsgd-bench-ckpt-{}", static_cast<long>(getpid())))
                              .string();
  std::filesystem::remove_all(dir);
  const CheckpointIdentity id{"bench", "bench", static_cast<int64_t>(n)};
  std::vector<double> w_s, r_s;
  for (int r = 0; r < repeats; ++r) {
    CheckpointStore store(dir, 2);
    const auto t0 = Clock::now();
    StateWriter sw;
    server->save(sw);
    CheckpointInfo info;
    info.id = id;
    store.write(info, {{"server", sw.take()}});
    w_s.push_back(since(t0));
    std::vector<float> restored_params(n);
    std::unique_ptr<Server> restored = make(restored_params);
    const auto t1 = Clock::now();
    const Checkpoint ck = CheckpointStore::load_latest(dir, id);
    StateReader sr(ck.blob("server"), "server");
    restored->load(sr);
    r_s.push_back(since(t1));
  }
  std::filesystem::remove_all(dir);
  *write_s = median(w_s);
  *resume_s = median(r_s);
}

}  // namespace

void print_checkpoint_costs(int repeats) {
  std::printf(
      "checkpoint (server with momentum and a half-full sync buffer; write = serialize + "
      "write + fsync + rename, resume = read + verify CRC-32C + restore), median of %d:\n",
      repeats);
  for (const size_t n : {size_t{61706}, size_t{10000000}}) {
    double w = 0, r = 0;
    checkpoint_cost(n, repeats, &w, &r);
    std::printf("  %9zu params (%6.1f MB of state)  write %8.1f ms  resume %8.1f ms\n", n,
                3.0 * 4.0 * static_cast<double>(n) / 1e6, 1e3 * w, 1e3 * r);
  }
}

int bench(const BenchArgs& a) {
  if (a.checkpoint) {
    print_checkpoint_costs(a.repeats);
    return 0;
  }
  LoadedData loaded = load_data(a.data, SyntheticOptions{});
  Dataset train = std::move(loaded.train);
  Dataset test = loaded.test ? std::move(*loaded.test) : train;
  const int batch = 64;
  std::printf(
      "hsgd bench: data %s (%lld samples, shape %s), batch %d, %d rounds of 0.5 s per "
      "compute figure (median), %.1f s per runtime figure\n\n",
      train.name.c_str(), static_cast<long long>(train.size()),
      fmt::format("{{{}}}", fmt::join(train.sample_shape, ",")).c_str(), batch, a.repeats,
      a.seconds);
  std::printf("%-10s %10s %16s %16s %16s %10s %10s\n", "model", "params", "compute-only/s",
              "async 1 worker/s", "async 2 workers/s", "eff(1)", "eff(2)");
  for (const char* name : {"softmax", "mlp", "lenet5"}) {
    const ModelSpec spec = bench_spec(name, train);
    if ((std::string(name) == "lenet5") && train.sample_shape != std::vector<int64_t>{1, 28, 28} &&
        train.sample_shape != std::vector<int64_t>{1, 32, 32}) {
      continue;
    }
    const int64_t np = make_model(spec)->num_params();
    const double c = compute_only(spec, train, batch, a.repeats);
    const double r1 = runtime_rate(spec, train, test, "async", 1, batch, a.seconds);
    const double r2 = runtime_rate(spec, train, test, "async", 2, batch, a.seconds);
    std::printf("%-10s %10lld %16.0f %16.0f %16.0f %10.3f %10.3f\n", name,
                static_cast<long long>(np), c, r1, r2, r1 / c, r2 / (2 * c));
    std::fflush(stdout);
  }
  std::printf(
      "\neff(1) = async samples/s with 1 worker / compute-only samples/s\n"
      "eff(2) = async samples/s with 2 workers / (2 x compute-only samples/s)\n\n");
  const size_t n = 1 << 20;
  std::printf("server update cost (async push of %zu params: accumulate, step, clear):\n", n);
  for (const char* o : {"sgd", "momentum"}) {
    std::printf("  %-9s %.3f ns/param\n", o, server_ns_per_param(o, n, a.repeats));
  }
  print_server_vs_triad(a.repeats);

  // The simulator adds little beyond the gradients it must compute.
  {
    SyntheticOptions so;
    Dataset all = make_synthetic(so), train, test;
    split_train_test(std::move(all), 0.2, 1, &train, &test);
    const int sb = 32;
    // Side by side: each round measures the compute-only rate, then the
    // simulator; the figure is the median of the per-round ratios.
    std::vector<double> c_rates, s_rates, ratios;
    int64_t grads = 0;
    for (int r = 0; r < 3; ++r) {
      c_rates.push_back(compute_only(bench_spec("softmax", train), train, sb, a.repeats) / sb);
      s_rates.push_back(sim_rate(train, test, 256, sb, 20.0, &grads));
      ratios.push_back(s_rates.back() / c_rates.back());
    }
    std::printf(
        "\nsimulator, 256 workers, softmax on synthetic (20 features, 10 classes), batch %d:\n"
        "  compute-only     %10.0f gradients/s (1 thread)\n"
        "  sim              %10.0f simulated gradients per real second (%lld gradients)\n"
        "  ratio            %10.3f (median of 3 side-by-side rounds)\n",
        sb, median(c_rates), median(s_rates), static_cast<long long>(grads), median(ratios));
  }

  std::printf("\n");
  print_checkpoint_costs(a.repeats);
  return 0;
}

}  // namespace hsgd::cli
