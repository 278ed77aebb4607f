// hsgd bench: the throughput figures of BENCHMARKS.md, measured side by side
// in one run. Reports medians; the machine is shared and noisy.
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>

#include "hsgd/checkpoint/checkpoint.h"
#include "hsgd/cli/bench_common.h"
#include "hsgd/cli/commands.h"
#include "hsgd/core/error.h"
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

// Peak resident memory since the last reset_peak_rss(), and now (bytes;
// /proc/self/status VmHWM and VmRSS; 0 where unavailable).
void rss_now(uint64_t* peak, uint64_t* now) {
  *peak = *now = 0;
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0) *peak = 1024 * std::stoull(line.substr(6));
    if (line.rfind("VmRSS:", 0) == 0) *now = 1024 * std::stoull(line.substr(6));
  }
}
// Resets VmHWM to the current RSS (Linux >= 4.0); false where it cannot.
bool reset_peak_rss() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
  out.flush();
  return static_cast<bool>(out);
}

// What dd if=<resident buffer> of=FILE bs=1M conv=fsync does: the bytes
// written in blocks of 1 MiB, fsynced, closed. Seconds.
double dd_write(const std::string& path, const std::vector<char>& bytes) {
  const auto t0 = Clock::now();
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw InputError(path + ": cannot write");
  for (size_t at = 0; at < bytes.size();) {
    const ssize_t n = ::write(fd, bytes.data() + at, std::min<size_t>(1 << 20, bytes.size() - at));
    if (n <= 0) throw InputError(path + ": write failed");
    at += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) throw InputError(path + ": write failed");
  return since(t0);
}

// What dd if=FILE of=/dev/null bs=1M does. Seconds.
double dd_read(const std::string& path) {
  const auto t0 = Clock::now();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw InputError(path + ": cannot read");
  std::vector<char> block(1 << 20);
  while (::read(fd, block.data(), block.size()) > 0) {
  }
  ::close(fd);
  return since(t0);
}

// The same read landing in `into` (resident, the part's size) 1 MB at a
// time: what any resume must do at least, its bytes written to memory that
// keeps them (dd's 1 MB block stays in cache: about 1.6x faster here).
double read_into(const std::string& path, std::vector<char>& into) {
  const auto t0 = Clock::now();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw InputError(path + ": cannot read");
  for (size_t off = 0; off < into.size();) {
    const ssize_t k = ::read(fd, into.data() + off, std::min<size_t>(1 << 20, into.size() - off));
    if (k <= 0) break;
    off += static_cast<size_t>(k);
  }
  ::close(fd);
  return since(t0);
}

struct CheckpointCost {
  double write_s = 0, resume_s = 0;  // medians
  double dd_write_s = 0, dd_read_s = 0;
  double resident_read_s = 0, resident_ratio = 0;  // read_into; resume against it
  double write_ratio = 0, resume_ratio = 0;        // medians of the per-round ratios
  uint64_t part_bytes = 0;                         // the server part's size
  uint64_t write_peak = 0, resume_peak = 0;        // the largest peak RSS growth over the rounds
};

// Writing one checkpoint of a server of `n` parameters (momentum, a
// half-full sync buffer: the part is three arrays of n floats) and resuming
// from it (read, verify every checksum, restore the server), each round
// beside dd-style write+fsync and read of as many bytes in the same
// directory; the order alternates between rounds. Peak RSS growth is read
// around each checkpoint and each resume.
CheckpointCost checkpoint_cost(size_t n, int repeats) {
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
  std::vector<float> restored_params(n);
  std::unique_ptr<Server> restored = make(restored_params);
  const std::string dir = (std::filesystem::temp_directory_path() /
                           fmt::format("hsgd-bench-ckpt-{}", static_cast<long>(getpid())))
                              .string();
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string dd_file = dir + "/dd.bin";
  const CheckpointIdentity id{"bench", "bench", static_cast<int64_t>(n)};
  CheckpointStore store(dir, 2);
  CheckpointInfo info;
  info.id = id;
  CheckpointCost out;
  std::vector<double> w_s, r_s, dw_s, dr_s, w_ratio, r_ratio, rr_s, rr_ratio;
  std::vector<char> dd_bytes;
  uint64_t peak = 0, before = 0;
  for (int r = 0; r < repeats; ++r) {
    double dw = 0, dr = 0, rr = 0;
    if (r % 2 == 1 && !dd_bytes.empty()) dw = dd_write(dd_file, dd_bytes);
    const bool rss = reset_peak_rss();
    rss_now(&peak, &before);
    const auto t0 = Clock::now();
    PendingCheckpoint p = store.begin();
    p.add("server", [&](StateWriter& sw) { server->save(sw); });
    p.commit(info);
    w_s.push_back(since(t0));
    uint64_t after = 0;
    rss_now(&peak, &after);
    if (rss) out.write_peak = std::max(out.write_peak, peak > before ? peak - before : 0);
    const Checkpoint ck0 = CheckpointStore::load_latest(dir, id);
    out.part_bytes = ck0.entries.at("server").bytes;
    if (dd_bytes.empty()) dd_bytes.assign(out.part_bytes, 'x');  // resident, like the server
    if (r % 2 == 0) dw = dd_write(dd_file, dd_bytes);
    if (r % 2 == 1) {
      dr = dd_read(dd_file);
      rr = read_into(dd_file, dd_bytes);
    }
    uint64_t rbefore = 0;
    const bool rss2 = reset_peak_rss();
    rss_now(&peak, &rbefore);
    const auto t1 = Clock::now();
    const Checkpoint ck = CheckpointStore::load_latest(dir, id);
    ck.read("server", [&](StateReader& sr) { restored->load(sr); });
    r_s.push_back(since(t1));
    uint64_t now = 0;
    rss_now(&peak, &now);
    if (rss2) out.resume_peak = std::max(out.resume_peak, peak > rbefore ? peak - rbefore : 0);
    if (r % 2 == 0) {
      dr = dd_read(dd_file);
      rr = read_into(dd_file, dd_bytes);
    }
    rr_s.push_back(rr);
    rr_ratio.push_back(r_s.back() / rr);
    dw_s.push_back(dw);
    dr_s.push_back(dr);
    w_ratio.push_back(w_s.back() / dw);
    r_ratio.push_back(r_s.back() / dr);
  }
  std::filesystem::remove_all(dir);
  out.write_s = median(w_s);
  out.resume_s = median(r_s);
  out.dd_write_s = median(dw_s);
  out.dd_read_s = median(dr_s);
  out.write_ratio = median(w_ratio);
  out.resume_ratio = median(r_ratio);
  out.resident_read_s = median(rr_s);
  out.resident_ratio = median(rr_ratio);
  return out;
}

}  // namespace

void print_checkpoint_costs(int repeats) {
  std::printf(
      "checkpoint (server with momentum and a half-full sync buffer; write = stream + fsync + "
      "rename, resume = read + verify CRC-32C + restore) beside dd-style write+fsync and read "
      "of the same bytes (bs=1M), alternated, median of %d rounds:\n",
      repeats);
  for (const size_t n : {size_t{61706}, size_t{10000000}}) {
    const CheckpointCost c = checkpoint_cost(n, repeats);
    std::printf(
        "  %9zu params (%6.1f MB part)  write %8.1f ms  dd %8.1f ms  ratio %5.2f   resume %8.1f "
        "ms  dd %8.1f ms  ratio %5.2f\n",
        n, static_cast<double>(c.part_bytes) / 1e6, 1e3 * c.write_s, 1e3 * c.dd_write_s,
        c.write_ratio, 1e3 * c.resume_s, 1e3 * c.dd_read_s, c.resume_ratio);
    std::printf(
        "  %9s resume against the same read landing in a resident buffer of the part's size: "
        "%.1f ms, ratio %.2f\n",
        "", 1e3 * c.resident_read_s, c.resident_ratio);
    std::printf("  %9s peak RSS growth: write %.1f MB, resume %.1f MB (one part: %.1f MB)\n", "",
                static_cast<double>(c.write_peak) / 1e6, static_cast<double>(c.resume_peak) / 1e6,
                static_cast<double>(c.part_bytes) / 1e6);
    std::fflush(stdout);
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
