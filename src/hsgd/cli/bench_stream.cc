// The server's update against memory speed: a STREAM-like triad
// (a[i] = b[i] + s * c[i]) and the server's async update at 10M parameters
// with SGD, momentum and Adam, as bytes moved per second, in one run.
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <vector>

#include "hsgd/cli/bench_common.h"
#include "hsgd/cli/commands.h"
#include "hsgd/core/stats.h"
#include "hsgd/runtime/clock.h"
#include "hsgd/server/server.h"

namespace hsgd::cli {
namespace {

using Clock = SteadyClock;

// Median GB/s of the triad over n floats (12 bytes per element: two reads,
// one write; write-allocate traffic not counted, as STREAM does).
double triad_gbs(size_t n, int repeats) {
  std::vector<float> a(n, 0.0f), b(n, 1.0f), c(n, 2.0f);
  std::vector<double> r;
  for (int k = 0; k < repeats + 1; ++k) {
    const auto t0 = Clock::now();
    const float s = 0.5f + static_cast<float>(k) * 1e-3f;
    for (size_t i = 0; i < n; ++i) a[i] = b[i] + s * c[i];
    const double el = since(t0);
    if (k > 0) r.push_back(12.0 * static_cast<double>(n) / el / 1e9);  // first: warm-up
  }
  volatile float sink = a[n / 2];
  (void)sink;
  return median(r);
}

// Median GB/s of one async push + update into the server (the push is the
// update: K = 1 skips the buffer), counting the optimizer's minimal
// traffic: gradient read + parameters read and written (SGD: 12 bytes per
// parameter), + velocity read and written (momentum: 20), + two moments
// read and written (Adam: 28).
double server_gbs(const std::string& optimizer, size_t n, int repeats, double bytes_per_param) {
  std::vector<float> params(n, 0.0f), grad(n, 1e-6f);
  const std::unique_ptr<Server> owned = async_server(params, optimizer);
  Server& server = *owned;
  server.on_push(0, server.version(), grad, 1, 0.0, 0.0);  // warm-up: touches every buffer
  std::vector<double> r;
  for (int k = 0; k < repeats; ++k) {
    const auto t0 = Clock::now();
    server.on_push(0, server.version(), grad, 1, 0.0, 0.0);
    const double el = since(t0);
    r.push_back(bytes_per_param * static_cast<double>(n) / el / 1e9);
  }
  return median(r);
}

}  // namespace

void print_server_vs_triad(int repeats) {
  const size_t n = 10000000;
  const int reps = std::max(3, repeats);
  std::printf("server update at %zu params against a STREAM-like triad, median of %d:\n", n, reps);
  const double triad = triad_gbs(n, reps);
  std::printf("  triad      %7.2f GB/s (12 bytes per element)\n", triad);
  struct Opt {
    const char* name;
    double bytes;
  };
  for (const Opt& o : {Opt{"sgd", 12}, Opt{"momentum", 20}, Opt{"adam", 28}}) {
    // Interleaved with a fresh triad, so the ratio is side by side.
    const double s = server_gbs(o.name, n, reps, o.bytes);
    const double t = triad_gbs(n, reps);
    std::printf("  %-9s  %7.2f GB/s (%2.0f bytes per parameter)  %5.3f of the triad\n", o.name, s,
                o.bytes, s / t);
  }
}

}  // namespace hsgd::cli
