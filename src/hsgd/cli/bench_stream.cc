// The server's update against memory speed: a STREAM-like triad
// (a[i] = b[i] + s * c[i]) and the server's async update at 10M parameters
// with SGD, momentum and Adam, as bytes moved per second, in one run; then
// the cost of a push and a pull at the zoo's sizes (in cache).
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <vector>

#include "hsgd/cli/bench_common.h"
#include "hsgd/cli/commands.h"
#include "hsgd/core/simd.h"
#include "hsgd/core/stats.h"
#include "hsgd/runtime/clock.h"
#include "hsgd/server/server.h"

namespace hsgd::cli {
namespace {

using Clock = SteadyClock;

// One triad over n floats, a[i] = b[i] + s * c[i], in GB/s (12 bytes per
// element: two reads, one write; write-allocate traffic not counted, as
// STREAM does).
struct Triad {
  explicit Triad(size_t n) : a(n, 0.0f), b(n, 1.0f), c(n, 2.0f) {}
  double run() {
    const size_t n = a.size();
    const float s = 0.5f + static_cast<float>(++k) * 1e-3f;
    const auto t0 = Clock::now();
    for (size_t i = 0; i < n; ++i) a[i] = b[i] + s * c[i];
    const double el = since(t0);
    volatile float sink = a[n / 2];
    (void)sink;
    return 12.0 * static_cast<double>(n) / el / 1e9;
  }
  std::vector<float> a, b, c;
  int k = 0;
};

struct Paired {
  double server_gbs, triad_gbs, ratio;  // medians; ratio: of the per-round ratios
};

// One async push + update into the server per round (the push is the
// update: K = 1 skips the buffer), each right after a triad, so that both
// see the machine in the same moment (it is shared: a triad alone moves by
// 2x between runs). The update counts the optimizer's minimal traffic:
// gradient read + parameters read and written (SGD: 12 bytes per
// parameter), + velocity read and written (momentum: 20), + two moments
// read and written (Adam: 28).
Paired server_vs_triad(Triad& triad, const std::string& optimizer, int repeats,
                       double bytes_per_param) {
  const size_t n = triad.a.size();
  std::vector<float> params(n, 0.0f), grad(n, 1e-6f);
  const std::unique_ptr<Server> owned = async_server(params, optimizer);
  Server& server = *owned;
  server.on_push(0, server.version(), grad, 1, 0.0, 0.0);  // warm-up: touches every buffer
  triad.run();                                             // warm-up
  std::vector<double> s, t, r;
  for (int k = 0; k < repeats; ++k) {
    t.push_back(triad.run());
    const auto t0 = Clock::now();
    server.on_push(0, server.version(), grad, 1, 0.0, 0.0);
    const double el = since(t0);
    s.push_back(bytes_per_param * static_cast<double>(n) / el / 1e9);
    r.push_back(s.back() / t.back());
  }
  return {median(s), median(t), median(r)};
}

// Median microseconds of `f` over `repeats` rounds of `inner` calls each.
template <class F>
double us_per_call(F&& f, int repeats, int inner) {
  std::vector<double> us;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = Clock::now();
    for (int i = 0; i < inner; ++i) f();
    us.push_back(since(t0) * 1e6 / inner);
  }
  return median(us);
}

// What a push and a pull cost the server at the zoo's sizes, where the
// parameters sit in cache and the core, not memory, sets the pace (issue
// 12: cheap gradients): the finiteness check of the push alone, the whole
// async push (check + SGD step), and a copy of the parameters (a pull).
void print_push_costs(int repeats) {
  std::printf(
      "\nserver push and pull at model sizes (async, sgd; medians of %d rounds; us per call):\n"
      "%-9s %10s %12s %12s %12s %12s\n",
      repeats, "model", "params", "finite us", "push us", "copy us", "push ns/par");
  struct Size {
    const char* name;
    size_t n;
  };
  for (const Size z : {Size{"softmax", 7850}, Size{"lenet5", 61706}, Size{"mlp", 101770},
                       Size{"1M", size_t{1} << 20}}) {
    std::vector<float> params(z.n, 0.0f), grad(z.n, 1e-6f), copy(z.n);
    const std::unique_ptr<Server> owned = async_server(params, "sgd");
    Server& server = *owned;
    const int inner = static_cast<int>(std::max<size_t>(1, (size_t{1} << 24) / z.n));
    volatile bool sink = true;
    const double finite = us_per_call([&] { sink = all_finite(grad); }, repeats, inner);
    const double push = us_per_call([&] { server.on_push(0, server.version(), grad, 1, 0.0, 0.0); },
                                    repeats, inner);
    const double cp =
        us_per_call([&] { std::copy(params.begin(), params.end(), copy.begin()); }, repeats, inner);
    (void)sink;
    std::printf("%-9s %10zu %12.3f %12.3f %12.3f %12.3f\n", z.name, z.n, finite, push, cp,
                push * 1e3 / static_cast<double>(z.n));
  }
}

}  // namespace

void print_server_vs_triad(int repeats) {
  const size_t n = 10000000;
  const int reps = std::max(5, repeats);
  std::printf(
      "server update at %zu params against a STREAM-like triad (12 bytes per element),\n"
      "each update right after a triad; medians of %d rounds (ratio: median of the rounds' "
      "ratios):\n",
      n, reps);
  struct Opt {
    const char* name;
    double bytes;
  };
  Triad triad(n);
  for (const Opt& o : {Opt{"sgd", 12}, Opt{"momentum", 20}, Opt{"adam", 28}}) {
    const Paired p = server_vs_triad(triad, o.name, reps, o.bytes);
    std::printf(
        "  %-9s  %7.2f GB/s (%2.0f bytes per parameter)  triad %7.2f GB/s  %5.3f of the triad\n",
        o.name, p.server_gbs, o.bytes, p.triad_gbs, p.ratio);
  }
  print_push_costs(reps);
}

}  // namespace hsgd::cli
