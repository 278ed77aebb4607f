// One table of jobs run on every runtime that takes them (threads, sim,
// hogwild, mpi), through the hsgd binary, asserting the run layer's shared
// definitions (runtime/run_control.h, README "What the figures mean"):
// training time is the budget, samples are applied pushes x batch, bytes
// are those of the pushes the server took, a divergence or a finite
// blow-up exits 3 with one line, a resume refused while restoring touches
// nothing, a run stopped below train.min_workers stays stopped on resume.
// Drift between the runtimes' copies of a rule fails here the day it
// happens.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_helpers.h"
#include "hsgd/core/state.h"
#include "hsgd/metrics/recorder.h"
#include "test_helpers.h"

namespace hsgd {
namespace {

using testing_helpers::slurp;

struct Runtime {
  std::string name;
  std::string prefix;  // before the binary (mpirun ...)
  std::string flags;   // after `train`
};

bool have_mpirun() { return std::system("command -v mpirun > /dev/null 2>&1") == 0; }

// The runtimes a job of a server policy runs on; hogwild is its own row.
std::vector<Runtime> server_runtimes() {
  std::vector<Runtime> r = {
      {"threads", "", "--runtime threads "},
      {"sim", "", "--runtime sim --set sim.compute_time=0.002 --set sim.server_ns_per_param=20 "},
  };
  if (have_mpirun()) {
    r.push_back({"mpi", "mpirun --quiet --oversubscribe --allow-run-as-root -np 3 ",
                 "--runtime mpi --servers 1 "});
  }
  return r;
}

Outcome run_on(const Runtime& rt, const std::string& args) { return run(rt.prefix, args); }

// A small job on the plain-C++ linear model: fast to start on every runtime.
std::string job(const Runtime& rt, const std::string& out, const std::string& more) {
  return "train --quiet --data synthetic --model linear-test --workers 2 --batch 16 --lr 0.05 "
         "--set data.synthetic_samples=2000 --out " +
         out + " " + rt.flags + more;
}

int lines(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }

// A deterministic single-worker job ends with the same parameters on every
// runtime: the arithmetic order is the same, so bit for bit (model.bin).
TEST(Conformance, ASingleWorkerJobEndsWithTheSameParametersOnEveryRuntime) {
  const std::vector<std::string> jobs = {
      "--policy sync",
      "--policy sync --set optim.kind=momentum",
      "--policy sync --set optim.kind=adam --set optim.lr=0.01",
      "--policy sync --set compress.push=topk:0.25 --set compress.min_bytes=0",
      // local:H with pull compression: the worker's own steps must not leak
      // into what the pulls update (issue 25, defect 2).
      "--policy local:2 --set compress.pull=fp16 --set compress.min_bytes=0",
      "--policy local:3 --set compress.push=qsgd:16 --set compress.pull=topk:0.5 "
      "--set compress.min_bytes=0",
  };
  std::vector<Runtime> rts = server_runtimes();
  for (Runtime& rt : rts) {
    if (rt.name == "mpi") rt.prefix = "mpirun --quiet --oversubscribe --allow-run-as-root -np 2 ";
  }
  for (size_t j = 0; j < jobs.size(); ++j) {
    std::string reference;
    for (const Runtime& rt : rts) {
      SCOPED_TRACE(rt.name + " " + jobs[j]);
      const std::string dir = tmp("single_" + rt.name + "_" + std::to_string(j));
      const Outcome o =
          run_on(rt,
                 "train --quiet --data synthetic --model linear-test --workers 1 --batch 16 "
                 "--lr 0.05 --set data.synthetic_samples=1200 --epochs 1 --eval-every 1000 --out " +
                     dir + " " + rt.flags + jobs[j]);
      ASSERT_EQ(o.code, 0) << o.err;
      const std::string model = slurp(dir + "/model.bin");
      ASSERT_FALSE(model.empty());
      if (reference.empty()) {
        reference = model;
      } else {
        EXPECT_TRUE(model == reference) << "model.bin differs from " << rts.front().name;
      }
    }
  }
}

TEST(Conformance, TrainingTimeIsTheBudgetWithAndWithoutCheckpoints) {
  for (const Runtime& rt : server_runtimes()) {
    for (const char* ckpt : {"", "--checkpoint-every 0.3 "}) {
      SCOPED_TRACE(rt.name + " " + ckpt);
      const std::string dir = tmp("budget_" + rt.name + (*ckpt ? "_ck" : ""));
      const Outcome o = run_on(
          rt, job(rt, dir, std::string("--policy async --budget 1.1 --eval-every 0.5 ") + ckpt));
      ASSERT_EQ(o.code, 0) << o.err;
      EXPECT_EQ(summary(dir)["train_s"].get<double>(), 1.1);
      const std::vector<MetricsRow> rows = read_metrics_csv(dir + "/metrics.csv");
      ASSERT_FALSE(rows.empty());
      EXPECT_DOUBLE_EQ(rows.back().time_s, 1.1);
      // Rows fall at t = 0, the evaluation times and the budget: a
      // checkpoint writes none of its own.
      ASSERT_EQ(rows.size(), 4u);
      EXPECT_EQ(rows[0].time_s, 0.0);
      EXPECT_NEAR(rows[1].time_s, 0.5, rt.name == "sim" ? 0 : 0.2);
      EXPECT_NEAR(rows[2].time_s, 1.0, rt.name == "sim" ? 0 : 0.2);
    }
  }
  const Runtime hog{"hogwild", "", "--runtime threads --policy hogwild "};
  const std::string dir = tmp("budget_hogwild");
  const Outcome o = run_on(hog, job(hog, dir, "--budget 1.1 --eval-every 0.5 --set optim.lr=0.01"));
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(summary(dir)["train_s"].get<double>(), 1.1);
  EXPECT_DOUBLE_EQ(read_metrics_csv(dir + "/metrics.csv").back().time_s, 1.1);
}

// `samples` counts the pushes the server took (applied, buffered, or
// dropped by a filter: their data was consumed), `gradients` those pushes.
TEST(Conformance, SamplesArePushesTakenTimesTheBatch) {
  for (const Runtime& rt : server_runtimes()) {
    for (const char* policy : {"sync", "async", "local:3"}) {
      SCOPED_TRACE(rt.name + " " + policy);
      const std::string dir = tmp(std::string("samples_") + rt.name + "_" + policy[0] + policy[1]);
      const Outcome o =
          run_on(rt, job(rt, dir, std::string("--budget 0.8 --eval-every 0.4 --policy ") + policy));
      ASSERT_EQ(o.code, 0) << o.err;
      const nlohmann::json s = summary(dir);
      int64_t applied = 0;
      for (int64_t n : s["staleness_histogram"].get<std::vector<int64_t>>()) applied += n;
      const int64_t taken = s["gradients"].get<int64_t>();
      const int64_t steps = std::string(policy) == "local:3" ? 3 : 1;
      EXPECT_GT(applied, 0);
      // At most one push per worker is still buffered at the end.
      EXPECT_LE(applied, taken);
      EXPECT_GE(applied + 2, taken);
      EXPECT_EQ(s["samples"].get<int64_t>(), taken * 16 * steps);
      int64_t worker_pushes = 0;
      for (int64_t n : s["worker_pushes"].get<std::vector<int64_t>>()) worker_pushes += n;
      EXPECT_EQ(worker_pushes, taken);
    }
  }
}

TEST(Conformance, BytesPushedAreThoseOfThePushesTheServerTook) {
  // fp16 pushes have one size: bytes_pushed / pushes taken is that size,
  // the same on every runtime, with nothing counted for a push computed or
  // sent but never taken (in flight at the budget, after a stop).
  std::vector<double> per_push;
  for (const Runtime& rt : server_runtimes()) {
    SCOPED_TRACE(rt.name);
    const std::string dir = tmp("bytes_" + rt.name);
    const Outcome o =
        run_on(rt, job(rt, dir,
                       "--policy async --budget 0.8 --eval-every 0.4 --set compress.push=fp16 "
                       "--set compress.min_bytes=0 --set compress.warmup=0"));
    ASSERT_EQ(o.code, 0) << o.err;
    const nlohmann::json s = summary(dir);
    const int64_t taken = s["gradients"].get<int64_t>();
    const int64_t bytes = s["compress"]["bytes_pushed"].get<int64_t>();
    ASSERT_GT(taken, 0);
    EXPECT_EQ(bytes % taken, 0) << bytes << " bytes for " << taken << " pushes";
    per_push.push_back(static_cast<double>(bytes) / static_cast<double>(taken));
    EXPECT_EQ(read_metrics_csv(dir + "/metrics.csv").back().bytes_pushed, bytes);
  }
  for (double b : per_push) EXPECT_EQ(b, per_push.front());
}

// Every runtime stops a diverging run at an evaluation with exit code 3,
// one line, summary.json "stopped", the metrics kept and no model.bin.
void expect_stopped(const Outcome& o, const std::string& dir, const std::string& needle) {
  EXPECT_EQ(o.code, 3) << o.err;
  EXPECT_NE(o.err.find("hsgd: stopped: training diverged"), std::string::npos) << o.err;
  EXPECT_NE(o.err.find(needle), std::string::npos) << o.err;
  EXPECT_EQ(lines(o.err), 1) << o.err;
  ASSERT_TRUE(fs::exists(dir + "/summary.json")) << o.err;
  EXPECT_TRUE(summary(dir)["stopped"].is_string());
  EXPECT_FALSE(read_metrics_csv(dir + "/metrics.csv").empty());
}

// (Hogwild's plain SGD stays finite at any lr on this model: the blow-up
// test below covers it.)
TEST(Conformance, ANonFiniteDivergenceExitsThreeOnEveryRuntime) {
  for (const Runtime& rt : server_runtimes()) {
    SCOPED_TRACE(rt.name);
    const std::string dir = tmp("nan_" + rt.name);
    // diverge_factor off: the non-finite rules themselves (parameters or
    // test loss at a row, or too many non-finite pushes).
    const Outcome o = run_on(rt, job(rt, dir,
                                     "--set optim.lr=1e38 --set optim.kind=momentum "
                                     "--set train.diverge_factor=0 --policy async --budget 2 "
                                     "--eval-every 0.2"));
    expect_stopped(o, dir, "diverged at update");
    EXPECT_FALSE(fs::exists(dir + "/model.bin"));
  }
}

TEST(Conformance, AFiniteBlowUpExitsThreeOnEveryRuntime) {
  // The run: softmax at lr 1e30 ended with exit 0 and a test loss
  // of 8e28. A loss above train.diverge_factor x the first one stops it.
  std::vector<Runtime> rts = server_runtimes();
  rts.push_back({"hogwild", "", "--runtime threads --policy hogwild "});
  for (const Runtime& rt : rts) {
    SCOPED_TRACE(rt.name);
    const std::string dir = tmp("blowup_" + rt.name);
    const std::string pol = rt.name == "hogwild" ? "" : "--policy async ";
    const Outcome o =
        run_on(rt,
               "train --quiet --data synthetic --model softmax --workers 2 --lr 1e30 --budget 3 "
               "--eval-every 0.5 --out " +
                   dir + " " + rt.flags + pol);
    expect_stopped(o, dir, "train.diverge_factor");
    const std::vector<MetricsRow> rows = read_metrics_csv(dir + "/metrics.csv");
    EXPECT_LT(rows.back().time_s, 3.0);
  }
}

std::string fmt_crc(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%08x", v);
  return buf;
}

// Rewrites blob `name` of checkpoint `ck` with `bytes` and its manifest's
// size and checksum, so that only decoding can refuse it.
void replace_blob(const std::string& ck, const std::string& name, const std::string& bytes) {
  std::ofstream(ck + "/" + name + ".bin", std::ios::binary | std::ios::trunc) << bytes;
  nlohmann::json m = nlohmann::json::parse(slurp(ck + "/manifest.json"));
  for (auto& b : m["blobs"]) {
    if (b["name"] == name) {
      b["bytes"] = bytes.size();
      b["crc32c"] = fmt_crc(crc32c(std::span<const char>(bytes.data(), bytes.size())));
    }
  }
  std::ofstream(ck + "/manifest.json", std::ios::trunc) << m.dump(2);
}

TEST(Conformance, AResumeRefusedWhileRestoringTouchesNothing) {
  for (const Runtime& rt : server_runtimes()) {
    if (rt.name == "mpi") continue;  // mpi_cli_test covers its collective refusal
    SCOPED_TRACE(rt.name);
    const std::string dir = tmp("refused_" + rt.name);
    ASSERT_EQ(run_on(rt, job(rt, dir,
                             "--policy async --budget 0.6 --eval-every 0.2 "
                             "--checkpoint-every 0.3"))
                  .code,
              0);
    const std::string ck = CheckpointDirs(dir).front();
    const std::string blob = rt.name;  // threads.bin or sim.bin
    std::string bytes = slurp(ck + "/" + blob + ".bin");
    bytes[0] ^= 0x5a;  // the runtime's tag: decodes as another part
    replace_blob(ck, blob, bytes);
    const std::string metrics = slurp(dir + "/metrics.csv");
    const std::string config = slurp(dir + "/config.toml");
    const std::string jsonl = slurp(dir + "/metrics.jsonl");
    const Outcome o = run_on(rt, "train --quiet --resume " + dir + " --budget 1.2");
    EXPECT_EQ(o.code, 2) << o.err;
    EXPECT_NE(o.err.find(blob + ".bin: corrupt"), std::string::npos) << o.err;
    EXPECT_EQ(lines(o.err), 1) << o.err;
    EXPECT_EQ(slurp(dir + "/metrics.csv"), metrics);
    EXPECT_EQ(slurp(dir + "/metrics.jsonl"), jsonl);
    EXPECT_EQ(slurp(dir + "/config.toml"), config);
    EXPECT_FALSE(fs::exists(dir + "/metrics.csv.partial"));
  }
}

TEST(Conformance, ARunStoppedBelowTheMinimumStaysStoppedOnResume) {
  for (const Runtime& rt : server_runtimes()) {
    if (rt.name == "mpi") continue;  // mpi takes no fault plan
    SCOPED_TRACE(rt.name);
    const std::string dir = tmp("belowmin_" + rt.name);
    const Outcome first =
        run_on(rt, job(rt, dir,
                       "--policy async --budget 2 --eval-every 0.2 --checkpoint-every 0.25 "
                       "--set train.min_workers=2 --set 'faults.kill=[\"worker:1@0.5s\"]'"));
    ASSERT_EQ(first.code, 3) << first.err;
    ASSERT_NE(first.err.find("train.min_workers = 2"), std::string::npos) << first.err;
    const std::vector<MetricsRow> before = read_metrics_csv(dir + "/metrics.csv");
    const Outcome again = run_on(rt, "train --quiet --resume " + dir + " --budget 4");
    EXPECT_EQ(again.code, 3) << again.err;
    EXPECT_NE(again.err.find("train.min_workers = 2"), std::string::npos) << again.err;
    const std::vector<MetricsRow> after = read_metrics_csv(dir + "/metrics.csv");
    // No training after the stop: the closing row again, at the same time.
    ASSERT_FALSE(after.empty());
    EXPECT_EQ(after.back().time_s, before.back().time_s);
    EXPECT_EQ(after.back().samples, before.back().samples);
    EXPECT_LT(after.back().time_s, 2.0);
  }
}

}  // namespace
}  // namespace hsgd
