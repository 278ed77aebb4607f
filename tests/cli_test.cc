// End-to-end tests of the hsgd binary: bad input of every kind, learning on
// real data, agreement with a single-process LibTorch loop, eval and plot.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli_helpers.h"
#include "hsgd/data/readers.h"
#include "hsgd/model/model.h"
#include "hsgd/model/reference.h"

namespace hsgd {
namespace {

// ---------------------------------------------------------------- bad input

struct BadCase {
  const char* name;
  std::string args;    // after "train" (or a whole command for eval)
  std::string needle;  // must appear in the one error line
};

void PrintTo(const BadCase& c, std::ostream* os) { *os << c.name; }

class BadInput : public ::testing::TestWithParam<BadCase> {};

TEST_P(BadInput, OneClearLineExitCodeTwoAndNoCompleteOutput) {
  const BadCase& c = GetParam();
  const std::string out = tmp(std::string("bad_out_") + c.name);
  fs::remove_all(out);
  const bool is_train = c.args.rfind("train", 0) == 0;
  Outcome o = run(c.args + (is_train ? " --quiet --out " + out : ""));
  EXPECT_EQ(o.code, 2) << o.err;
  EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << o.err;
  EXPECT_EQ(o.err.rfind("hsgd: error: ", 0), 0u) << o.err;
  EXPECT_NE(o.err.find(c.needle), std::string::npos)
      << "expected '" << c.needle << "' in: " << o.err;
  for (const char* f : {"metrics.csv", "model.bin", "config.toml", "summary.json",
                        "metrics.csv.partial", "metrics.jsonl.partial"}) {
    EXPECT_FALSE(fs::exists(fs::path(out) / f)) << f;
  }
}

std::vector<BadCase> bad_cases() {
  // Fixtures.
  const std::string good_csv = write("good.csv", "0,1,2\n1,3,4\n0,1,1\n1,4,4\n0,0,1\n1,5,5\n");
  const std::string ragged = write("ragged.csv", "0,1,2\n1,3\n");
  const std::string nonnum = write("nonnum.csv", "0,1,2\n1,3,abc\n");
  const std::string labels12 = write("labels12.csv", "0,1,2\n12,3,4\n");
  const std::string svm0 = write("zero.svm", "1 1:0.5 2:1\n0 0:1\n");
  const std::string svmneg = write("neg.svm", "1 1:0.5\n0 -3:1\n");
  const std::string svmorder = write("order.svm", "1 2:0.5 1:1\n");
  const std::string unknown = write("unknown.toml", "[train]\nworkers = 2\nspeed = 3\n");
  // IDX: a header that promises 10 images of 28x28, and only 100 bytes.
  std::string idx;
  for (unsigned char b : {0, 0, 8, 3, 0, 0, 0, 10, 0, 0, 0, 28, 0, 0, 0, 28})
    idx += static_cast<char>(b);
  idx += std::string(100, '\x10');
  const std::string idx_dir = tmp("idx_trunc");
  fs::create_directories(idx_dir);
  write("idx_trunc/train-images-idx3-ubyte", idx);
  std::string labels;
  for (unsigned char b : {0, 0, 8, 1, 0, 0, 0, 10}) labels += static_cast<char>(b);
  labels += std::string(10, '\x01');
  write("idx_trunc/train-labels-idx1-ubyte", labels);
  // A gz file with a valid header and garbage after it.
  const std::string gz_dir = tmp("idx_gz");
  fs::create_directories(gz_dir);
  write("idx_gz/train-images-idx3-ubyte.gz",
        std::string("\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03", 10) + std::string(64, '\x7f'));
  write("idx_gz/train-labels-idx1-ubyte", labels);
  const std::string bad_model = write("bad_model.bin", "HSGDMODEL1\n\x05\x00");
  const std::string syn = "train --data synthetic --model softmax --budget 1 ";
  // Config files that are not configs.
  const std::string not_toml = write("not_toml.toml", "{\"train\": {\"workers\": 2}}\n");
  const std::string empty_toml = write("empty.toml", "");
  std::string garbage;
  for (int i = 0; i < 512; ++i) garbage += static_cast<char>((i * 131 + 7) % 256);
  const std::string binary_toml = write("binary.toml", garbage);
  const std::string high_toml = write("high.toml", "\xde\xad\xbe\xef\xca\xfe\n");
  const std::string config_dir = tmp("config_dir.toml");
  fs::create_directories(config_dir);
  const std::string a_file = write("a_file", "x");
  return {
      {"bench_sim_model", "bench --sim --model mlp",
       "bench --sim --model 'mlp': expected softmax or lenet5"},
      {"config_not_toml", "train --config " + not_toml,
       "not_toml.toml:1:1: expected a TOML config"},
      {"config_directory", "train --config " + config_dir,
       config_dir + ": expected a TOML config file, got a directory"},
      {"config_empty", "train --config " + empty_toml,
       "empty.toml: expected a TOML config, got an empty file"},
      {"config_binary", "train --config " + binary_toml,
       "binary.toml: expected a TOML config (text), got binary data"},
      {"config_non_ascii", "train --config " + high_toml, "high.toml:1:1: expected a TOML config"},
      // As root no file is unreadable by mode bits: a read that fails (EIO).
      {"config_unreadable", "train --config /proc/self/mem",
       "/proc/self/mem: cannot read (Input/output error)"},
      {"config_missing", "train --config /nonexistent/job.toml",
       "/nonexistent/job.toml: cannot open (No such file or directory)"},
      // Outputs that cannot be written, found before training starts.
      {"out_is_a_file", syn + "--set train.out=" + a_file, "exists and is not a directory"},
      {"out_under_a_file", syn + "--set train.out=" + a_file + "/run",
       "train.out = '" + a_file + "/run': cannot create"},
      // sysfs refuses to create files, even for root: a read-only directory.
      {"out_read_only", syn + "--set train.out=/sys/fs", "train.out = '/sys/fs': cannot write"},
      {"idx_truncated", "train --data idx:" + idx_dir + " --budget 1", "offset"},
      {"gz_corrupt", "train --data idx:" + gz_dir + " --budget 1", "train-images-idx3-ubyte.gz"},
      {"csv_ragged", "train --data csv:" + ragged + " --budget 1", "ragged.csv:line 2"},
      {"csv_nonnumber", "train --data csv:" + nonnum + " --budget 1", "nonnum.csv:line 2"},
      {"csv_label_out_of_range",
       "train --data csv:" + good_csv + " --test-data csv:" + labels12 + " --budget 1", "label"},
      {"libsvm_index0", "train --data libsvm:" + svm0 + " --budget 1", "zero.svm:line 2"},
      {"libsvm_negative", "train --data libsvm:" + svmneg + " --budget 1", "neg.svm:line 2"},
      {"libsvm_unordered", "train --data libsvm:" + svmorder + " --budget 1", "order.svm:line 1"},
      {"unknown_key", "train --config " + unknown + " --budget 1", "unknown key 'train.speed'"},
      {"unknown_set_key", syn + "--set optim.speed=3", "unknown key 'optim.speed'"},
      {"k_above_workers", syn + "--workers 4 --policy kasync:5", "policy.k = 5"},
      {"kbatch_above_workers", syn + "--workers 2 --policy kbatch:3", "policy.k = 3"},
      {"lr_zero", syn + "--lr 0", "optim.lr"},
      {"lr_negative", syn + "--lr -0.5", "optim.lr"},
      {"zero_workers", syn + "--workers 0", "train.workers = 0"},
      {"unknown_policy", syn + "--policy fastest", "fastest"},
      {"unknown_model", "train --data synthetic --model resnet --budget 1", "resnet"},
      {"lenet_on_tabular", "train --data synthetic --model lenet5 --budget 1", "lenet5"},
      {"unknown_data", "train --data mnist --budget 1", "--data 'mnist'"},
      {"missing_file", "train --data csv:/nonexistent/x.csv --budget 1", "/nonexistent/x.csv"},
      {"no_budget", "train --data synthetic --model softmax", "train.budget"},
      {"bad_set_syntax", syn + "--set optim.lr", "--set 'optim.lr'"},
      {"eval_corrupt_model", "eval --data synthetic --model " + bad_model, "bad_model.bin"},
      {"partition_unknown", syn + "--set data.partition=label", "data.partition = 'label'"},
      {"shards_too_few_classes",
       syn + "--workers 4 --set data.partition=shards --set data.classes_per_worker=2",
       "data.classes_per_worker = 2"},
      {"dirichlet_unreachable_min_size",
       syn + "--workers 16 --set data.partition=dirichlet --set data.alpha=0.001 "
             "--set data.min_partition_size=60",
       "data.min_partition_size = 60"},
      // Refused by the runtime while it sets up (Membership), after the
      // output directory was made: still nothing written.
      {"partition_faults_infeasible",
       syn + "--runtime sim --workers 4 --set data.partition=shards "
             "--set data.classes_per_worker=3 --set faults.kill=worker:1@0.5s",
       "[faults] can leave 3 of 4 workers live"},
      {"sampling_mix_zero", syn + "--set sampling.kind=loss --set sampling.uniform_mix=0",
       "sampling.uniform_mix = 0"},
      // [compress] (issue 14)
      {"compress_ratio_zero", syn + "--set compress.push=topk:0", "compress.push = 'topk:0'"},
      {"compress_ratio_above_one", syn + "--set compress.pull=randomk:1.5",
       "compress.pull = 'randomk:1.5'"},
      {"compress_qsgd_one_level", syn + "--set compress.push=qsgd:1", "compress.push = 'qsgd:1'"},
      {"compress_randomk_pull", syn + "--set compress.pull=randomk:0.01",
       "compress.pull = 'randomk:0.01': randomk is for the push path only"},
      {"compress_rank_zero", syn + "--set compress.push=powersgd:0",
       "compress.push = 'powersgd:0'"},
      {"compress_unknown", syn + "--set compress.push=zip", "compress.push = 'zip'"},
      {"compress_hogwild", syn + "--policy hogwild --set optim.kind=sgd --set compress.push=sign",
       "policy hogwild has no server"},
      // Gossip membership (and its checkpoints) runs on sim and threads (issue 28).
      {"gossip_faults_mpi", syn + "--runtime mpi --policy sgp --set faults.kill=worker:1@1s",
       "[faults]: fault injection runs on the sim and threads runtimes, not on mpi"},
      // CHOCO compressed gossip: what it does not compose with (issue 28).
      {"choco_sgp", syn + "--runtime sim --policy sgp --set compress.push=topk:0.1",
       "compress.push = 'topk:0.1': policy 'sgp' mixes push-sum shares"},
      {"choco_adpsgd", syn + "--runtime sim --policy adpsgd --set compress.push=qsgd:4",
       "compress.push = 'qsgd:4': policy 'adpsgd' averages pairs wait-free"},
      {"choco_time_varying",
       syn + "--runtime sim --policy pdsgdm:2 --set compress.push=topk:0.1 "
             "--set gossip.topology=onepeer-exp",
       "gossip.topology = 'onepeer-exp': with compress.push = 'topk:0.1' (CHOCO) every worker "
       "mixes its neighbours' public copies, which needs a static graph"},
      {"choco_random_matching",
       syn + "--runtime sim --policy dpsgd --set gossip.order=atc --set compress.push=sign "
             "--set gossip.topology=random-matching",
       "gossip.topology = 'random-matching'"},
      {"choco_pull", syn + "--runtime sim --policy dpsgd --set compress.pull=topk:0.1",
       "compress.pull = 'topk:0.1': policy 'dpsgd' has no pull"},
      {"choco_cta", syn + "--runtime sim --policy dpsgd --set compress.push=topk:0.1",
       "gossip.order = 'cta': with compress.push = 'topk:0.1' dpsgd runs CHOCO, which is "
       "adapt-then-combine; expected \"atc\""},
      {"choco_faults",
       syn + "--runtime sim --policy pdsgdm:2 --set compress.push=topk:0.1 "
             "--set faults.kill=worker:1@0.5s",
       "[faults] with compress.push = 'topk:0.1': membership changes are not implemented for "
       "CHOCO"},
      {"choco_error_feedback",
       syn + "--runtime sim --policy pdsgdm:2 --set compress.push=topk:0.1 "
             "--set compress.error_feedback=true",
       "compress.error_feedback = true: with policy 'pdsgdm:2' CHOCO's public copies"},
      {"choco_warmup",
       syn + "--runtime sim --policy pdsgdm:2 --set compress.push=topk:0.1 "
             "--set compress.warmup=5",
       "compress.warmup = 5: policy 'pdsgdm:2' compresses every gossip round"},
      {"choco_gamma_zero",
       syn + "--runtime sim --policy pdsgdm:2 --set compress.push=topk:0.1 "
             "--set gossip.consensus_lr=0",
       "gossip.consensus_lr = 0: expected in (0, 1]"},
      {"choco_gamma_above_one",
       syn + "--runtime sim --policy pdsgdm:2 --set compress.push=topk:0.1 "
             "--set gossip.consensus_lr=1.5",
       "gossip.consensus_lr = 1.5: expected in (0, 1]"},
      {"sparse_compressed",
       "train --model dlrm --data synthetic-ctr --budget 1 --set model.sparse=true "
       "--set compress.push=sign",
       "model.sparse = true: row-sparse pushes are not compressed"},
  };
}

INSTANTIATE_TEST_SUITE_P(Cli, BadInput, ::testing::ValuesIn(bad_cases()),
                         [](const auto& info) { return std::string(info.param.name); });

// Mode bits: only for a user they apply to (root reads and writes anyway;
// the /proc/self/mem and /sys/fs cases above cover those paths as root).
TEST(Cli, ConfigWithoutReadPermissionAndReadOnlyOutDir) {
  if (geteuid() == 0) GTEST_SKIP() << "running as root: mode bits do not deny root";
  const std::string cfg = write("noread.toml", "[train]\nworkers = 2\n");
  fs::permissions(cfg, fs::perms::none);
  Outcome o = run("train --quiet --config " + cfg);
  EXPECT_EQ(o.code, 2) << o.err;
  EXPECT_NE(o.err.find(cfg + ": cannot open (Permission denied)"), std::string::npos) << o.err;
  const std::string ro = tmp("read_only_out");
  fs::create_directories(ro);
  fs::permissions(ro, fs::perms::owner_read | fs::perms::owner_exec);
  o = run("train --quiet --data synthetic --model softmax --budget 1 --out " + ro);
  EXPECT_EQ(o.code, 2) << o.err;
  EXPECT_NE(o.err.find("train.out = '" + ro + "': cannot write"), std::string::npos) << o.err;
  EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << o.err;
  fs::permissions(ro, fs::perms::owner_all);
}

// ---------------------------------------------------------------- end to end

TEST(Cli, TrainWritesEveryOutputAndEvalAgrees) {
  const std::string out = tmp("e2e");
  fs::remove_all(out);
  Outcome o =
      run("train --data synthetic --model mlp --workers 2 --policy hybrid --epochs 2 "
          "--eval-every 0.5 --batch 32 --lr 0.1 --out " +
          out);
  ASSERT_EQ(o.code, 0) << o.err;
  for (const char* f :
       {"metrics.csv", "metrics.jsonl", "config.toml", "model.bin", "summary.json", "plot.png"}) {
    EXPECT_TRUE(fs::exists(fs::path(out) / f)) << f;
  }
  EXPECT_NE(o.err.find("hsgd: done"), std::string::npos) << o.err;
  const double acc = summary(out)["test_acc"];
  EXPECT_GT(acc, 0.6);
  Outcome e = run("eval --json --data synthetic --model " + out + "/model.bin");
  ASSERT_EQ(e.code, 0) << e.err;
  // eval reads the whole synthetic set (train + test), so compare loosely.
  EXPECT_NEAR(nlohmann::json::parse(e.out)["test_acc"].get<double>(), acc, 0.1);
  // The resolved config reproduces the run's settings.
  Outcome again = run("train --quiet --config " + out + "/config.toml --out " + out + "_again");
  ASSERT_EQ(again.code, 0) << again.err;
  Outcome p = run("plot " + out + " " + out + "_again -o " + tmp("two.png"));
  EXPECT_EQ(p.code, 0) << p.err;
  EXPECT_TRUE(fs::exists(tmp("two.png")));
}

// Gossip membership on the simulator (issue 28): the example config runs
// end to end and writes the membership log; below train.min_workers the
// run stops with one line, exit 3.
TEST(Cli, GossipChurnRunsAndStopsBelowMinWorkers) {
  const std::string ex = std::string(HSGD_SOURCE_DIR) + "/examples/gossip/churn.toml";
  for (const char* policy : {"dpsgd", "sgp", "pdsgdm:4", "adpsgd"}) {
    SCOPED_TRACE(policy);
    const std::string out = tmp(std::string("gossip_churn_") + policy);
    fs::remove_all(out);
    Outcome o = run("train --quiet --config " + ex + " --policy " + policy +
                    " --set train.budget=8 --set train.eval_every=4 --out " + out);
    ASSERT_EQ(o.code, 0) << o.err;
    const nlohmann::json s = summary(out);
    ASSERT_TRUE(s.contains("membership")) << s.dump();
    bool killed3 = false;
    for (const auto& e : s["membership"]) {
      killed3 |= e["worker"] == 3 && e["event"] == "leave" && e["cause"] == "kill";
    }
    EXPECT_TRUE(killed3) << s["membership"].dump();

    const std::string low = tmp(std::string("gossip_low_") + policy);
    fs::remove_all(low);
    o = run("train --quiet --config " + ex + " --policy " + policy +
            " --set train.budget=8 --set train.min_workers=7 --set faults.kill_rate=0 "
            "--set faults.exception_rate=0 --out " +
            low);
    EXPECT_EQ(o.code, 3) << o.err;
    EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << o.err;
    EXPECT_NE(o.err.find("6 of 8 workers live, fewer than train.min_workers = 7: worker 4 left "
                         "at 6.000 s"),
              std::string::npos)
        << o.err;
  }
}

// Gossip membership on threads (issue 28): a kill and a rejoin run end to
// end and summary.json names the leave and the join; below
// train.min_workers the run stops with one line, exit 3.
TEST(Cli, GossipChurnRunsOnThreads) {
  const std::string syn =
      "train --quiet --data synthetic --model softmax --runtime threads --workers 4 "
      "--budget 0.6 --set train.eval_every=0.2 ";
  for (const char* policy : {"dpsgd", "sgp"}) {
    SCOPED_TRACE(policy);
    const std::string out = tmp(std::string("gossip_threads_churn_") + policy);
    fs::remove_all(out);
    Outcome o =
        run(syn + "--policy " + policy +
            " --set faults.kill=worker:1@0.1s --set faults.rejoin=worker:1@0.3s --out " + out);
    ASSERT_EQ(o.code, 0) << o.err;
    const nlohmann::json s = summary(out);
    ASSERT_TRUE(s.contains("membership")) << s.dump();
    ASSERT_EQ(s["membership"].size(), 2u) << s["membership"].dump();
    EXPECT_EQ(s["membership"][0]["worker"], 1);
    EXPECT_EQ(s["membership"][0]["event"], "leave");
    EXPECT_EQ(s["membership"][0]["cause"], "kill");
    EXPECT_EQ(s["membership"][1]["worker"], 1);
    EXPECT_EQ(s["membership"][1]["event"], "join");

    const std::string low = tmp(std::string("gossip_threads_low_") + policy);
    fs::remove_all(low);
    o = run(syn + "--policy " + policy +
            " --set faults.kill=worker:1@0.1s,worker:2@0.15s --set train.min_workers=3 --out " +
            low);
    EXPECT_EQ(o.code, 3) << o.err;
    EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << o.err;
    EXPECT_NE(o.err.find("2 of 4 workers live, fewer than train.min_workers = 3: worker 2 left at"),
              std::string::npos)
        << o.err;
  }
}

// A faulty gossip run on threads checkpoints and resumes from the CLI: the
// resumed run keeps the leave before the cut (not carried out again) and
// carries out the rejoin after it.
TEST(Cli, GossipChurnCheckpointResumesOnThreads) {
  const std::string out = tmp("gossip_threads_churn_resume");
  fs::remove_all(out);
  Outcome o = run(
      "train --quiet --data synthetic --model softmax --runtime threads --workers 4 --policy sgp "
      "--budget 0.3 --set train.eval_every=0.1 --set train.checkpoint_every=0.15 "
      "--set faults.kill=worker:1@0.05s --set faults.rejoin=worker:1@0.4s --out " +
      out);
  ASSERT_EQ(o.code, 0) << o.err;
  const nlohmann::json before = summary(out);
  ASSERT_EQ(before["membership"].size(), 1u) << before["membership"].dump();
  o = run("train --quiet --resume " + out + " --budget 0.6");
  ASSERT_EQ(o.code, 0) << o.err;
  const nlohmann::json s = summary(out);
  ASSERT_EQ(s["membership"].size(), 2u) << s["membership"].dump();
  EXPECT_EQ(s["membership"][0], before["membership"][0]);
  EXPECT_EQ(s["membership"][1]["worker"], 1);
  EXPECT_EQ(s["membership"][1]["event"], "join");
}

TEST(Cli, SoftmaxOnCsvMatchesASingleProcessLibTorchLoop) {
  configure_math_threads();
  SyntheticOptions so;
  so.samples = 6000;
  Dataset train, test;
  split_train_test(make_synthetic(so), 0.25, 3, &train, &test);
  const std::string train_csv = tmp("syn_train.csv"), test_csv = tmp("syn_test.csv");
  write_csv(train_csv, train);
  write_csv(test_csv, test);
  const int epochs = 5, batch = 32;
  const double lr = 0.05;
  const EvalResult ref = train_reference_softmax(train, test, batch, lr, epochs, 1);
  const std::string out = tmp("csv_softmax");
  fs::remove_all(out);
  // Sync over 2 workers of batch 16 is one step on the mean of 32 gradients.
  Outcome o = run("train --quiet --data csv:" + train_csv + " --test-data csv:" + test_csv +
                  " --model softmax --policy sync --workers 2 --batch 16 --lr 0.05 --epochs 5 "
                  "--set optim.kind=sgd --set data.normalize=false --out " +
                  out);
  ASSERT_EQ(o.code, 0) << o.err;
  const double acc = summary(out)["test_acc"];
  EXPECT_GT(ref.accuracy, 0.5);
  EXPECT_NEAR(acc, ref.accuracy, 0.01) << "hsgd " << acc << " vs LibTorch " << ref.accuracy;
}

// ---------------------------------------------------------------- compare

TEST(Cli, CompareRunsEveryPolicyAndRoundAndWritesTheTable) {
  const std::string out = tmp("compare");
  fs::remove_all(out);
  Outcome o =
      run("compare --policies sync,async,hybrid+policy.schedule=linear --rounds 2 --out " + out +
          " --set data.spec=synthetic --set model.name=softmax --set train.workers=2 "
          "--set train.budget=0.4 --set train.eval_every=0.1 --set optim.lr=0.1");
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 3 * 2 + 1) << o.err;
  for (const char* f : {"compare.md", "compare.json", "compare.png", "sync/round-1/metrics.csv",
                        "hybrid+policy.schedule-linear/round-0/summary.json"}) {
    EXPECT_TRUE(fs::exists(fs::path(out) / f)) << f;
  }
  std::ifstream md(out + "/compare.md");
  const std::string table((std::istreambuf_iterator<char>(md)), {});
  EXPECT_EQ(table.rfind("Compare: config (defaults), 2 rounds, baseline async, runtime threads", 0),
            0u)
      << table;
  for (const char* p : {"| sync |", "| async (baseline) |", "| hybrid+policy.schedule=linear |"}) {
    EXPECT_NE(table.find(p), std::string::npos) << p << " in " << table;
  }
  EXPECT_NE(o.out.find("| hybrid+policy.schedule=linear |"), std::string::npos) << o.out;
  std::ifstream cfg(out + "/hybrid+policy.schedule-linear/round-0/config.toml");
  const std::string resolved((std::istreambuf_iterator<char>(cfg)), {});
  EXPECT_NE(resolved.find("schedule = 'linear'"), std::string::npos) << resolved;
  // Round r of every policy starts from seed 1 + r.
  EXPECT_EQ(summary(out + "/sync/round-1")["seed"], 2);
}

// Every run of a round diverged: the differences are measured over the
// budget (the CLI hands train.budget to the table), not over the longest
// run's first second; the curves go on to the budget.
TEST(Cli, CompareMeasuresARoundWhoseEveryRunStoppedToTheBudget) {
  const std::string out = tmp("compare_diverged");
  fs::remove_all(out);
  Outcome o = run("compare --policies sync,async --out " + out +
                  " --set data.spec=synthetic --set model.name=linear-test --set train.workers=3 "
                  "--set train.runtime=sim --set train.budget=6 --set train.eval_every=1 "
                  "--set train.diverge_factor=1.5 --set optim.lr=1.0e6 "
                  "--set sim.compute_time=0.1 --set sim.server_ns_per_param=1.0");
  ASSERT_EQ(o.code, 0) << o.err;
  for (const char* p : {"] sync round 0", "] async round 0"}) {
    const size_t at = o.err.find(p);
    ASSERT_NE(at, std::string::npos) << p << " in " << o.err;
    EXPECT_NE(o.err.substr(at, o.err.find('\n', at) - at).find("stopped early"), std::string::npos)
        << o.err;
  }
  std::ifstream dat(out + "/async.curve.dat");
  std::string line, last;
  while (std::getline(dat, line)) {
    if (!line.empty() && line[0] != '#') last = line;
  }
  EXPECT_EQ(last.rfind("6 ", 0), 0u) << last;
  std::ifstream js(out + "/compare.json");
  const nlohmann::json j = nlohmann::json::parse(js);
  EXPECT_EQ(j["baseline_stopped_rounds"], nlohmann::json::array({0}));
}

// bench --sim --model: that model's rates and CPU figures, no memory runs.
TEST(Cli, BenchSimModelRunsThatModelOnly) {
  Outcome o = run("bench --sim --model softmax --data synthetic --seconds 0.2 --repeats 1");
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_NE(o.out.find("cpu us/pr"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("cpu us/1t"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("\nsoftmax "), std::string::npos) << o.out;
  EXPECT_EQ(o.out.find("\nlenet5 "), std::string::npos) << o.out;
  EXPECT_EQ(o.out.find("peak resident memory"), std::string::npos) << o.out;
}

// bench --stream: the three updates against the triad, then the push and
// pull costs at every size (a row each, with a positive time).
TEST(Cli, BenchStreamPrintsTheTriadAndThePushCosts) {
  Outcome o = run("bench --stream --repeats 1");
  ASSERT_EQ(o.code, 0) << o.err;
  for (const char* update : {"  sgd ", "  momentum ", "  adam "}) {
    EXPECT_NE(o.out.find(update), std::string::npos) << update << "\n" << o.out;
  }
  for (const char* size : {"\nsoftmax ", "\nlenet5 ", "\nmlp ", "\n1M "}) {
    const size_t at = o.out.find(size);
    ASSERT_NE(at, std::string::npos) << size << "\n" << o.out;
    std::istringstream row(o.out.substr(at + 1, o.out.find('\n', at + 1) - at - 1));
    std::string name;
    double params = 0, finite = 0, push = 0, copy = 0;
    row >> name >> params >> finite >> push >> copy;
    EXPECT_GT(params, 0) << row.str();
    EXPECT_GT(push, 0) << row.str();
    EXPECT_GT(copy, 0) << row.str();
  }
}

TEST(Cli, CompareRejectsBadArgumentsBeforeAnyRun) {
  const std::string out = tmp("compare_bad");
  fs::remove_all(out);
  const std::string syn =
      " --set data.spec=synthetic --set model.name=softmax --set train.budget=1";
  for (const auto& [args, needle] : std::vector<std::pair<std::string, std::string>>{
           {"--policies sync,hybrid", "--baseline = 'async'"},
           {"--policies sync,async,sync", "'sync' is listed twice"},
           {"--policies sync,async --rounds 0", "--rounds = 0"},
           {"--policies sync,async,fastest", "fastest"},
           {"--policies async,async+staleness", "expected NAME+section.key=value"},
           {"--policies async,async+staleness.bogus=1", "unknown key 'staleness.bogus'"},
       }) {
    Outcome o = run("compare " + args + " --out " + out + syn);
    EXPECT_EQ(o.code, 2) << args << ": " << o.err;
    EXPECT_EQ(o.err.rfind("hsgd: error: ", 0), 0u) << o.err;
    EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << o.err;
    EXPECT_NE(o.err.find(needle), std::string::npos) << "expected '" << needle << "' in " << o.err;
    EXPECT_FALSE(fs::exists(out)) << args << ": nothing is run";
  }
}

class FashionMnist : public ::testing::TestWithParam<std::string> {};

TEST_P(FashionMnist, LeNet5With2WorkersReaches85PercentIn3Epochs) {
  if (!fs::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  }
  const std::string out = tmp("fmnist_" + GetParam());
  fs::remove_all(out);
  Outcome o =
      run("train --quiet --data fashion-mnist --model lenet5 --workers 2 --batch 32 "
          "--policy " +
          GetParam() +
          " --lr 0.01 --set optim.kind=momentum "
          "--set policy.step=300 --epochs 3 --eval-every 1000 --out " +
          out);
  ASSERT_EQ(o.code, 0) << o.err;
  const nlohmann::json s = summary(out);
  EXPECT_GE(s["test_acc"].get<double>(), 0.85) << s.dump();
  EXPECT_LE(s["epoch"].get<double>(), 3.01);
}

INSTANTIATE_TEST_SUITE_P(Policies, FashionMnist, ::testing::Values("sync", "async", "hybrid"));

}  // namespace
}  // namespace hsgd
