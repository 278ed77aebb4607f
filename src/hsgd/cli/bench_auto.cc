// hsgd bench --auto: what auto's decisions cost against the server's own
// time per push (issue 17's overhead target: under 1 %).
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>

#include "hsgd/cli/commands.h"
#include "hsgd/core/stats.h"
#include "hsgd/policy/auto_policy.h"
#include "hsgd/server/server.h"

namespace hsgd::cli {
namespace {

using Clock = std::chrono::steady_clock;

// The signals of `pushes` pushes of `workers` round-robin workers (equal
// durations, noisy slowly falling loss), as the server would send them.
std::vector<PushSignal> signals(int workers, int pushes) {
  std::mt19937_64 rng(1);
  std::normal_distribution<double> z(0, 0.1);
  std::vector<PushSignal> out;
  for (int i = 0; i < pushes; ++i) {
    PushSignal s;
    s.worker = i % workers;
    s.staleness = workers - 1;
    s.seconds = 0.004 * i;
    s.loss = 2.0 * std::exp(-s.seconds / 50) + z(rng);
    s.live_workers = workers;
    out.push_back(s);
  }
  return out;
}

// Nanoseconds per observe_push + threshold call, median over rounds.
double controller_ns(int workers, int repeats) {
  const int pushes = 200000;
  const std::vector<PushSignal> sig = signals(workers, pushes);
  std::vector<double> ns;
  int64_t sink = 0;
  for (int r = 0; r < repeats; ++r) {
    AutoController c(workers, {}, 0.01);  // lr 0.01: the staleness budget on (and not binding)
    const auto t0 = Clock::now();
    for (const PushSignal& s : sig) {
      c.observe_push(s);
      sink += c.threshold(Progress{}, workers);
    }
    ns.push_back(std::chrono::duration<double>(Clock::now() - t0).count() * 1e9 / pushes);
  }
  if (sink == 42) std::puts("");  // keeps the loop
  return median(ns);
}

// Nanoseconds per push into a server of `n` parameters under auto (the
// whole on_push: screen, buffer, threshold, update when ready, observe).
double server_ns(const std::string& policy, int workers, size_t n, int repeats) {
  std::vector<float> params(n, 0.0f), grad(n, 1e-6f);
  ServerOptions so;
  so.workers = workers;
  PolicyOptions po;
  po.kind = policy;
  OptimizerOptions oo;
  oo.kind = "momentum";
  Server server(params, so, make_policy(po, workers, 0.01), make_optimizer(oo, n));
  const std::vector<PushSignal> sig = signals(workers, 2000);
  std::vector<double> ns;
  std::vector<uint64_t> pulled(static_cast<size_t>(workers), 0);
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = Clock::now();
    int pushes = 0;
    for (const PushSignal& s : sig) {
      if (server.is_waiting(s.worker)) continue;
      const Decision d = server.on_push(s.worker, pulled[static_cast<size_t>(s.worker)], grad, 32,
                                        s.loss, s.seconds);
      ++pushes;
      if (!d.caller_waits) pulled[static_cast<size_t>(s.worker)] = server.version();
      for (int w : d.released) pulled[static_cast<size_t>(w)] = server.version();
    }
    ns.push_back(std::chrono::duration<double>(Clock::now() - t0).count() * 1e9 / pushes);
  }
  return median(ns);
}

}  // namespace

int bench_auto(const BenchArgs& a) {
  const int workers = 25;
  std::printf("hsgd bench --auto: %d workers, momentum optimizer, median of %d rounds\n\n", workers,
              a.repeats);
  const double ctl = controller_ns(workers, a.repeats);
  std::printf("auto controller (observe_push + threshold): %.1f ns per push\n\n", ctl);
  std::printf("%-10s %10s %18s %18s %12s\n", "model", "params", "server ns/push", "auto ns/push",
              "auto share");
  for (const auto& [name, n] :
       {std::pair<const char*, size_t>{"mlp-64", 1994}, {"lenet5", 61706}, {"cifar-cnn", 620810}}) {
    const double srv = server_ns("async", workers, n, a.repeats);
    std::printf("%-10s %10zu %18.0f %18.1f %11.3f%%\n", name, n, srv, ctl, 100 * ctl / srv);
  }
  return 0;
}

}  // namespace hsgd::cli
