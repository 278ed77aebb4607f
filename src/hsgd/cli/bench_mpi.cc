// hsgd bench --mpi, under `mpirun -np 3`: the mpi runtime's transport against
// raw MPI on this machine, and LeNet-5 async over MPI against the threads
// runtime, side by side in one run (BENCHMARKS.md, "MPI runtime").
#include <fmt/format.h>
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <thread>

#include "hsgd/cli/bench_common.h"
#include "hsgd/cli/commands.h"
#include "hsgd/core/error.h"
#include "hsgd/core/stats.h"
#include "hsgd/data/readers.h"
#include "hsgd/data/spec.h"
#include "hsgd/mpi/mpi_runtime.h"
#include "hsgd/mpi/session.h"
#include "hsgd/mpi/transport.h"
#include "hsgd/runtime/threads_runtime.h"

namespace hsgd::cli {
namespace {

using Clock = std::chrono::steady_clock;

// A model of n parameters whose gradient costs nothing: the pushes carry
// whatever its gradient buffer holds. Isolates the transport.
class NullModel final : public Model {
 public:
  explicit NullModel(int64_t n) : n_(n) {}
  int64_t num_params() const override { return n_; }
  void bind(std::span<float>, std::span<float> g) override { std::fill(g.begin(), g.end(), 1e-9f); }
  void init_params(uint64_t) override {}
  double gradient(const Batch&, std::span<float>) override { return 0.0; }
  using Model::gradient;
  EvalResult evaluate(const Dataset&) override { return {}; }

 private:
  int64_t n_;
};

// Blocking MPI_Send/MPI_Recv of n floats there and back between ranks 0 and
// 1 of `c`; the median seconds per round trip.
double pingpong(MPI_Comm c, size_t n, int reps) {
  int rank = 0;
  MPI_Comm_rank(c, &rank);
  std::vector<float> buf(n, 1.0f);
  std::vector<double> t;
  for (int i = 0; i < reps + 2; ++i) {
    const auto t0 = Clock::now();
    if (rank == 0) {
      MPI_Send(buf.data(), static_cast<int>(n), MPI_FLOAT, 1, 1, c);
      MPI_Recv(buf.data(), static_cast<int>(n), MPI_FLOAT, 1, 1, c, MPI_STATUS_IGNORE);
    } else {
      MPI_Recv(buf.data(), static_cast<int>(n), MPI_FLOAT, 0, 1, c, MPI_STATUS_IGNORE);
      MPI_Send(buf.data(), static_cast<int>(n), MPI_FLOAT, 0, 1, c);
    }
    if (i >= 2) t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return median(t);
}

// A scratch directory for rank 0's metrics, removed afterwards.
struct Scratch {
  std::string dir = (std::filesystem::temp_directory_path() /
                     fmt::format("hsgd-bench-mpi-{}", static_cast<long>(getpid())))
                        .string();
  Scratch() { std::filesystem::create_directories(dir); }
  ~Scratch() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
};

// Runs `job` on `comm` (collective) or, with comm = MPI_COMM_NULL, on the
// threads runtime. Returns rank 0's result.
RunResult run(const Job& job, MPI_Comm comm, int rank) {
  Scratch scratch;
  std::optional<Recorder> rec;
  if (rank == 0) rec.emplace(scratch.dir);
  RunResult r = comm == MPI_COMM_NULL ? ThreadsRuntime().run(job, &*rec, nullptr)
                                      : MpiRuntime(comm).run(job, rec ? &*rec : nullptr, nullptr);
  if (rec) rec->finish();
  return r;
}

// `chunk`: mpi.chunk, or 0 for its default.
Config config(const std::string& runtime, int workers, double seconds,
              const std::string& compress = "none", int64_t chunk = 0) {
  std::vector<Override> o = {
      {"train.runtime", runtime},      {"train.workers", std::to_string(workers)},
      {"train.batch", "64"},           {"train.budget", fmt::format("{}", seconds)},
      {"train.eval_every", "1000000"}, {"train.eval_samples", "256"},
      {"policy.name", "async"},        {"mpi.timeout", "120"}};
  if (chunk > 0) o.push_back({"mpi.chunk", std::to_string(chunk)});
  if (compress != "none") {  // issue 14: both directions
    o.push_back({"compress.push", compress});
    o.push_back({"compress.pull", compress});
  }
  return load_config("", o);
}

// The transport Open MPI was told to use (mpirun --mca btl ...), for the
// rows' labels: "tcp" when only TCP (and self), else what was set, else the
// default (shared memory within a host).
std::string transport() {
  const char* btl = std::getenv("OMPI_MCA_btl");
  if (!btl || !*btl) return "default (shared memory)";
  const std::string b = btl;
  if (b == "tcp,self" || b == "self,tcp") return "tcp";
  return b;
}

// Waits at a barrier polling once a millisecond: the waiting rank leaves the
// cores to the measured ones.
void quiet_barrier() {
  MPI_Request r = MPI_REQUEST_NULL;
  MPI_Ibarrier(MPI_COMM_WORLD, &r);
  for (int done = 0;;) {
    MPI_Test(&r, &done, MPI_STATUS_IGNORE);
    if (done) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace

int bench_mpi(const BenchArgs& a) {
  mpi::Session session(nullptr, nullptr);
  const int rank = session.rank();
  std::string error;
  LoadedData loaded;
  try {
    if (session.size() != 3) {
      throw InputError(fmt::format(
          "hsgd bench --mpi: expects 3 ranks (mpirun -np 3): 1 server + 2 workers; got {}",
          session.size()));
    }
    loaded = load_data(a.data, SyntheticOptions{});
  } catch (const std::exception& e) {
    error = e.what();
  }
  if (!session.agree(error)) return 2;
  const bool root = rank == 0;

  // 1. Push + pull round trip of a 1M- and a 10M-parameter model (1 server,
  //    1 worker: ranks 0 and 1) against a raw MPI ping-pong of the same size.
  MPI_Comm pair = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, rank < 2 ? 0 : MPI_UNDEFINED, rank, &pair);
  SyntheticOptions so;
  so.samples = 1000;
  Dataset tiny_train, tiny_test;
  split_train_test(make_synthetic(so), 0.2, 1, &tiny_train, &tiny_test);
  // A job of n parameters over the NullModel (the server path alone).
  const auto null_job = [&](const Config& c, int64_t n) {
    Job job;
    job.config = &c;
    job.train = &tiny_train;
    job.test = &tiny_test;
    job.make_model = [n] { return std::make_unique<NullModel>(n); };
    job.initial_params.assign(static_cast<size_t>(n), 0.0f);
    return job;
  };
  if (root) {
    std::printf(
        "hsgd bench --mpi: %d ranks; round trip = push of the gradient + pull of the parameters "
        "(1 server, 1 worker, async, sgd, a model with a free gradient), raw = MPI_Send + "
        "MPI_Recv of the same floats there and back; bandwidth = 2 x 4 bytes x params / round "
        "trip\ntransport: %s (Open MPI btl)\n\n",
        session.size(), transport().c_str());
    std::printf(
        "hsgd: chunks of mpi.chunk = %lld floats (the server's update overlaps its sends); whole: "
        "one message a slice (mpi.chunk = 2^30), the update before the send\n\n",
        static_cast<long long>(a.chunk > 0 ? a.chunk : Config{}.mpi.chunk));
    std::printf("%-10s %10s %10s %12s %10s %12s %10s\n", "params", "raw rt ms", "raw GB/s",
                "hsgd rt ms", "hsgd GB/s", "whole rt ms", "ratio");
  }
  for (const int64_t n : {int64_t{1} << 20, int64_t{10} << 20}) {
    const auto bytes = 2.0 * 4.0 * static_cast<double>(n);
    std::vector<double> raw, ours, whole, ratios, whole_ratios;
    for (int round = 0; round < a.repeats; ++round) {
      double raw_s = 0, ours_s = 0, whole_s = 0;
      if (pair != MPI_COMM_NULL) {
        raw_s = pingpong(pair, static_cast<size_t>(n), 10);
        for (const bool chunked : {true, false}) {
          const Config c =
              config("mpi", 1, std::max(1.0, a.seconds / 2), "none", chunked ? a.chunk : 1 << 30);
          const RunResult r = run(null_job(c, n), pair, rank);
          if (root) (chunked ? ours_s : whole_s) = r.train_s / static_cast<double>(r.gradients);
        }
      }
      quiet_barrier();
      raw.push_back(raw_s);
      ours.push_back(ours_s);
      whole.push_back(whole_s);
      ratios.push_back(raw_s / ours_s);
      whole_ratios.push_back(raw_s / whole_s);
    }
    if (root) {
      std::printf("%-10lld %10.3f %10.2f %12.3f %10.2f %12.3f %10.3f   (whole: %.3f)\n",
                  static_cast<long long>(n), 1e3 * median(raw), bytes / median(raw) / 1e9,
                  1e3 * median(ours), bytes / median(ours) / 1e9, 1e3 * median(whole),
                  median(ratios), median(whole_ratios));
      std::fflush(stdout);
    }
  }

  if (a.round_trip_only) {
    if (pair != MPI_COMM_NULL) MPI_Comm_free(&pair);
    return 0;
  }
  // 1b. The same round trip at 10M parameters with both directions
  //     compressed (issue 14): bytes on the wire per push and per pull
  //     against the plain 4 bytes per parameter, and the round trip.
  if (root) {
    std::printf(
        "\ncompressed (push and pull, error feedback auto; bytes as sent, headers included):\n"
        "%-10s %-12s %14s %14s %10s %14s\n",
        "params", "compressor", "bytes/push", "bytes/pull", "ratio", "hsgd rt ms");
  }
  for (const char* z : {"topk:0.01", "fp16"}) {
    const int64_t n = int64_t{10} << 20;
    std::vector<double> rt, push_b, pull_b;
    for (int round = 0; round < a.repeats; ++round) {
      if (pair != MPI_COMM_NULL) {
        const Config c = config("mpi", 1, std::max(4.0, a.seconds), z);
        const RunResult r = run(null_job(c, n), pair, rank);
        if (root) {
          // One worker: it sent one push more than was applied (the one
          // after the budget, discarded) and pulled once per applied push
          // plus the first pull; the byte counters include both.
          const auto g = static_cast<double>(r.gradients);
          rt.push_back(r.train_s / g);
          push_b.push_back(static_cast<double>(r.compress.bytes_pushed) / (g + 1));
          pull_b.push_back(static_cast<double>(r.compress.bytes_pulled) / (g + 1));
        }
      }
      quiet_barrier();
    }
    if (root) {
      std::printf("%-10lld %-12s %14.0f %14.0f %10.1f %14.3f\n", static_cast<long long>(n), z,
                  median(push_b), median(pull_b), 4.0 * static_cast<double>(n) / median(push_b),
                  1e3 * median(rt));
      std::fflush(stdout);
    }
  }
  if (pair != MPI_COMM_NULL) MPI_Comm_free(&pair);

  // 2. LeNet-5 async, 2 workers: mpi (1 server + 2 worker ranks) against the
  //    threads runtime (on rank 0 while the others wait), alternately.
  Dataset train = std::move(loaded.train);
  Dataset test = loaded.test ? std::move(*loaded.test) : train;
  if (train.sample_shape != std::vector<int64_t>{1, 28, 28}) {
    if (root) std::printf("\n(LeNet-5 skipped: the data is not 28x28 images)\n");
    return 0;
  }
  const ModelSpec spec = bench_spec("lenet5", train);
  std::vector<double> mpi_rates, thr_rates, ratios;
  for (int round = 0; round < a.repeats; ++round) {
    double rates[2] = {0, 0};
    for (int k = 0; k < 2; ++k) {
      const bool over_mpi = k == 0;
      const Config c = config(over_mpi ? "mpi" : "threads", 2, a.seconds);
      const Job job = bench_job(c, spec, train, test);
      if (over_mpi || root) {
        const RunResult r = run(job, over_mpi ? MPI_COMM_WORLD : MPI_COMM_NULL, rank);
        if (root) rates[k] = static_cast<double>(r.last.samples) / r.train_s;
      }
      quiet_barrier();
    }
    mpi_rates.push_back(rates[0]);
    thr_rates.push_back(rates[1]);
    ratios.push_back(rates[0] / rates[1]);
  }
  if (root) {
    std::printf(
        "\nLeNet-5 on %s, async, 2 workers, batch 64, %g s per run, %d rounds (medians):\n"
        "  threads runtime  %10.0f samples/s\n"
        "  mpi runtime      %10.0f samples/s (1 server rank + 2 worker ranks)\n"
        "  ratio mpi/threads %9.3f (median of per-round ratios)\n",
        train.name.c_str(), a.seconds, a.repeats, median(thr_rates), median(mpi_rates),
        median(ratios));
  }
  return 0;
}

}  // namespace hsgd::cli
