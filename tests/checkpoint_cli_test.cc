// End-to-end tests of checkpoints and resume through the hsgd binary: exact
// resume on the simulator, kill -9 and resume on threads, every refusal, and
// divergence (exit code 3).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "cli_helpers.h"
#include "hsgd/checkpoint/checkpoint.h"
#include "hsgd/metrics/recorder.h"
#include "test_helpers.h"

namespace hsgd {
namespace {

using testing_helpers::slurp;

// A small synthetic job on the plain-C++ linear model: fast to start.
std::string job(const std::string& out, const std::string& more) {
  return "train --quiet --data synthetic --model linear-test --workers 3 --batch 16 --lr 0.1 "
         "--eval-every 0.25 --set data.synthetic_samples=3000 --out " +
         out + " " + more;
}

const std::string kSim =
    "--runtime sim --set sim.compute_time=0.002 --set sim.server_ns_per_param=50 "
    "--set stragglers.fraction=0.5 --set stragglers.sigma=0.01 ";

TEST(CheckpointCli, SimResumeIsByteExactAndSummaryDescribesTheWholeRun) {
  // auto's controller state is part of the cut too (issue 25, defect 14).
  for (const char* policy : {"hybrid", "ssp:1", "local:2", "auto"}) {
    SCOPED_TRACE(policy);
    const std::string whole = tmp(std::string("sim_whole_") + policy);
    const std::string part = tmp(std::string("sim_part_") + policy);
    const std::string p = std::string("--policy ") + policy + " ";
    ASSERT_EQ(run(job(whole, kSim + p + "--budget 3")).code, 0);
    ASSERT_EQ(run(job(part, kSim + p + "--budget 1.3 --checkpoint-every 0.5")).code, 0);
    const Outcome o = run("train --quiet --resume " + part + " --budget 3");
    ASSERT_EQ(o.code, 0) << o.err;
    EXPECT_EQ(slurp(part + "/metrics.csv"), slurp(whole + "/metrics.csv"));
    EXPECT_EQ(slurp(part + "/metrics.jsonl"), slurp(whole + "/metrics.jsonl"));
    EXPECT_EQ(slurp(part + "/model.bin"), slurp(whole + "/model.bin"));
    const nlohmann::json a = summary(whole), b = summary(part);
    EXPECT_EQ(a["updates"], b["updates"]);
    EXPECT_EQ(a["worker_pushes"], b["worker_pushes"]);
    EXPECT_EQ(a["staleness_histogram"], b["staleness_histogram"]);
    EXPECT_FALSE(a["worker_pushes"].empty());
    EXPECT_GE(b["checkpoints"]["written"].get<int>(), 1);
    EXPECT_LT(b["checkpoints"]["write_s"].get<double>(), 5.0);
    EXPECT_DOUBLE_EQ(b["checkpoints"]["resumed_at_s"].get<double>(), 1.3);
    // config.toml records the extended budget and the costs at full precision.
    EXPECT_NE(slurp(part + "/config.toml").find("budget = 3"), std::string::npos);
  }
}

TEST(CheckpointCli, RefusalsAreOneLineExitTwoAndOverwriteNothing) {
  const std::string dir = tmp("refusals");
  ASSERT_EQ(run(job(dir, kSim + "--budget 1 --checkpoint-every 0.5")).code, 0);
  const std::string metrics = slurp(dir + "/metrics.csv");
  auto refused = [&](const std::string& args, const std::string& needle) {
    const Outcome o = run(args);
    EXPECT_EQ(o.code, 2) << args << "\n" << o.err;
    EXPECT_NE(o.err.find(needle), std::string::npos) << args << "\n" << o.err;
    EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << o.err;
    EXPECT_EQ(slurp(dir + "/metrics.csv"), metrics) << args;
  };
  refused("train --resume " + dir + " --policy async", "policy.name would change the run");
  refused("train --resume " + dir + " --set optim.lr=0.5", "optim.lr would change the run");
  refused("train --resume " + dir + " --workers 5", "the simulator resumes exactly");
  refused("train --resume " + tmp("nowhere"), "not a directory");
  const std::string empty = tmp("empty_run");
  fs::create_directories(empty);
  refused("train --resume " + empty, "no config.toml");
  // A run without checkpoints.
  const std::string plain = tmp("plain_run");
  ASSERT_EQ(run(job(plain, kSim + "--budget 0.5")).code, 0);
  {
    const Outcome o = run("train --resume " + plain);
    EXPECT_EQ(o.code, 2);
    EXPECT_NE(o.err.find("no checkpoint to resume from"), std::string::npos) << o.err;
  }
  // Another model in the run's config: the checkpoint is of another model.
  const std::string other = tmp("other_model");
  fs::copy(dir, other, fs::copy_options::recursive);
  {
    std::string cfg = slurp(other + "/config.toml");
    const size_t at = cfg.find("name = 'linear-test'");
    ASSERT_NE(at, std::string::npos) << cfg;
    cfg.replace(at, 20, "name = 'softmax'");
    std::ofstream(other + "/config.toml") << cfg;
    const Outcome o = run("train --resume " + other);
    EXPECT_EQ(o.code, 2);
    EXPECT_NE(o.err.find("a checkpoint of model \"linear-test\""), std::string::npos) << o.err;
  }
  // A corrupt blob in the newest checkpoint; then a truncated one.
  const std::string ck = CheckpointDirs(dir).front();
  {
    std::fstream f(ck + "/server.bin", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(40);
    f.put('\x7f');
  }
  refused("train --resume " + dir, "server.bin: checksum mismatch");
  fs::resize_file(ck + "/server.bin", 10);
  refused("train --resume " + dir, "server.bin: truncated");
}

// Issue 30: parts larger than kVerifyWholeBytes are streamed into the
// runtime's buffers and verified as they go. A corrupt byte in the middle
// of the parameters (decodes fine) and one in a length (fails to decode)
// are both refused as a checksum mismatch; a truncated part by its size;
// one line, exit 2, the run's outputs untouched, on sim and threads.
TEST(CheckpointCli, StreamedPartsAreVerifiedAsTheyAreRead) {
  for (const char* runtime : {"sim", "threads"}) {
    SCOPED_TRACE(runtime);
    const std::string dir = tmp(std::string("streamed_") + runtime);
    // 4000 features x 10 classes: a server part of ~320 KB, streamed.
    const std::string big = "--set data.synthetic_features=4000 --budget 1 --checkpoint-every 0.5 ";
    ASSERT_EQ(
        run(job(dir,
                (std::string(runtime) == "sim" ? kSim : std::string("--runtime threads ")) + big))
            .code,
        0);
    const std::string ck = CheckpointDirs(dir).front();
    const std::string server = ck + "/server.bin";
    ASSERT_GT(fs::file_size(server), 4 * kVerifyWholeBytes);
    const std::string metrics = slurp(dir + "/metrics.csv");
    const std::string good = slurp(server);
    auto refused = [&](const std::string& needle) {
      const Outcome o = run("train --quiet --resume " + dir + " --budget 2");
      EXPECT_EQ(o.code, 2) << o.err;
      EXPECT_NE(o.err.find(needle), std::string::npos) << o.err;
      EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << o.err;
      EXPECT_EQ(slurp(dir + "/metrics.csv"), metrics);
    };
    auto poke = [&](size_t at, char byte) {
      std::ofstream(server, std::ios::binary) << good;
      std::fstream f(server, std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(static_cast<std::streamoff>(at));
      f.put(byte);
    };
    poke(good.size() / 3, '\x55');  // a parameter: decodes, the checksum differs
    refused("server.bin: checksum mismatch");
    poke(4, '\x7f');  // the parameters' length: the decoding fails first
    refused("server.bin: checksum mismatch");
    std::ofstream(server, std::ios::binary) << good;
    fs::resize_file(server, good.size() - 1);
    refused("server.bin: truncated");
    // Put back whole, it resumes.
    std::ofstream(server, std::ios::binary) << good;
    const Outcome o = run("train --quiet --resume " + dir + " --budget 2");
    EXPECT_EQ(o.code, 0) << o.err;
  }
}

TEST(CheckpointCli, DivergenceStopsWithExitCodeThreeAndKeepsTheMetrics) {
  for (const char* runtime : {"threads", "sim"}) {
    const std::string dir = tmp(std::string("diverge_") + runtime);
    const Outcome o = run(job(
        dir,
        std::string("--runtime ") + runtime + " " +
            "--set sim.compute_time=0.002 --set optim.lr=1e38 --set optim.kind=momentum --budget 2 "
            "--policy async --set train.eval_every=0.05"));
    EXPECT_EQ(o.code, 3) << o.err;
    EXPECT_NE(o.err.find("hsgd: stopped: training diverged"), std::string::npos) << o.err;
    EXPECT_NE(o.err.find("optim.clip_norm"), std::string::npos);
    EXPECT_FALSE(read_metrics_csv(dir + "/metrics.csv").empty());
    EXPECT_TRUE(summary(dir)["stopped"].is_string());
  }
}

// Starts hsgd with `args` in the background; returns its pid.
pid_t spawn(const std::string& args, const std::string& log) {
  const pid_t pid = fork();
  if (pid == 0) {
    const std::string cmd = "exec " + kHsgd + " " + args + " > " + log + " 2>&1";
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  return pid;
}

TEST(CheckpointCli, KilledAtARandomMomentThenResumedTenOfTenRunsComplete) {
  const char* policies[] = {"sync", "async", "hybrid", "kasync:2", "ssp:1"};
  std::mt19937 rng(2026);  // seeded moments
  int completed = 0;
  for (int i = 0; i < 10; ++i) {
    const std::string policy = policies[i % 5];
    SCOPED_TRACE(policy + " run " + std::to_string(i));
    const std::string dir = tmp("kill_" + std::to_string(i));
    const pid_t pid =
        spawn(job(dir, "--policy " + policy + " --budget 1 --checkpoint-every 0.1"), dir + ".log");
    // Wait for a first checkpoint, then kill at a seeded moment after it.
    const auto t0 = std::chrono::steady_clock::now();
    while (CheckpointDirs(dir).empty() &&
           std::chrono::steady_clock::now() - t0 < std::chrono::seconds(60)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ASSERT_FALSE(CheckpointDirs(dir).empty()) << slurp(dir + ".log");
    std::this_thread::sleep_for(
        std::chrono::milliseconds(std::uniform_int_distribution<int>(0, 700)(rng)));
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    const Outcome o = run("train --quiet --resume " + dir);
    ASSERT_EQ(o.code, 0) << o.err;
    const std::vector<MetricsRow> rows = read_metrics_csv(dir + "/metrics.csv");
    ASSERT_GE(rows.size(), 3u);
    for (size_t r = 1; r < rows.size(); ++r) {
      EXPECT_GE(rows[r].time_s, rows[r - 1].time_s) << "row " << r;
      EXPECT_GE(rows[r].updates, rows[r - 1].updates) << "row " << r;
    }
    EXPECT_NEAR(rows.back().time_s, 1.0, 0.3);
    EXPECT_FALSE(fs::exists(dir + "/metrics.csv.partial"));
    EXPECT_GT(summary(dir)["test_acc"].get<double>(), 0.5);
    ++completed;
  }
  EXPECT_EQ(completed, 10);
}

TEST(CheckpointCli, CompareCalibratesTheSimulatorOncePerComparison) {
  const std::string out = tmp("compare_once");
  const Outcome o =
      run("compare --runtime sim --policies sync,async,hybrid --rounds 2 --out " + out +
          " --set data.spec=synthetic --set model.name=linear-test --set train.workers=3 "
          "--set train.budget=0.3 --set train.eval_every=0.1");
  ASSERT_EQ(o.code, 0) << o.err;
  std::string first;
  for (const char* p : {"sync", "async", "hybrid"}) {
    for (int r = 0; r < 2; ++r) {
      const std::string cfg = slurp(out + "/" + p + "/round-" + std::to_string(r) + "/config.toml");
      const size_t at = cfg.find("compute_time = ");
      ASSERT_NE(at, std::string::npos);
      const std::string line = cfg.substr(at, cfg.find('\n', at) - at);
      if (first.empty()) first = line;
      EXPECT_EQ(line, first) << p << " round " << r;
    }
  }
}

}  // namespace
}  // namespace hsgd
