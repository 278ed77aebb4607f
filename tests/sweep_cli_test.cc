// hsgd sweep end to end: a 2x2 grid, two policies, the linear-test model on
// the simulator (fixed costs): the table, resumption, determinism, a changed
// setting rerunning, calibrated costs kept or measured again, and bad grid
// files (one line, exit 2). Also hsgd config: the reference and the warnings.
#include <chrono>
#include <map>
#include <sstream>
#include <thread>

#include "cli_helpers.h"
#include "hsgd/metrics/recorder.h"
#include "test_helpers.h"

namespace hsgd {
namespace {

using testing_helpers::slurp;

std::string grid(const std::string& extra = "", const std::string& budget = "2") {
  return "policies = [\"async\", \"sync\"]\n"
         "candidate = \"sync\"\n"
         "seeds = [1]\n" +
         extra +
         "[set]\n"
         "data.spec = \"synthetic\"\n"
         "model.name = \"linear-test\"\n"
         "train.workers = 3\n"
         "train.budget = " +
         budget +
         "\n"
         "train.eval_every = 1\n"
         "sim.compute_time = 0.1\n"
         "sim.server_ns_per_param = 1.0\n"
         "[axes]\n"
         "optim.lr = [0.01, 0.1]\n"
         "train.batch = [8, 32]\n";
}

TEST(SweepCli, TableResumptionAndDeterminism) {
  const std::string g = write("grid.toml", grid());
  const std::string out = tmp("sweep-a");
  Outcome o = run("sweep " + g + " --out " + out);
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_NE(o.err.find("8 runs, 0 done, 8 to run"), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("[8/8]"), std::string::npos) << o.err;
  const std::string md = slurp(out + "/sweep.md");
  EXPECT_EQ(md, o.out);
  // One summary row per cell, the axis values first, async best.
  for (const char* row : {"| 0.01 | 8 | async |", "| 0.01 | 32 | async |", "| 0.1 | 8 | async |",
                          "| 0.1 | 32 | async |"}) {
    EXPECT_NE(md.find(row), std::string::npos) << row << "\n" << md;
  }
  const nlohmann::json j = nlohmann::json::parse(slurp(out + "/sweep.json"));
  ASSERT_EQ(j["cells"].size(), 4u);
  for (const auto& c : j["cells"]) {
    const double a = c["policies"]["async"]["interval_mean"]["mean"];
    const double s = c["policies"]["sync"]["interval_mean"]["mean"];
    EXPECT_NEAR(c["candidate_minus_best"].get<double>(), s - std::max(a, s), 1e-12);
    EXPECT_GT(a, 0.2);
  }
  EXPECT_TRUE(fs::exists(out + "/heatmap.dat"));

  // Resumption: nothing to run again; one run's marker removed: only it runs.
  o = run("sweep " + g + " --out " + out);
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_NE(o.err.find("8 runs, 8 done, 0 to run"), std::string::npos) << o.err;
  EXPECT_EQ(slurp(out + "/sweep.md"), md);
  fs::remove(out + "/cells/optim.lr-0.1_train.batch-8/sync/seed-1/sweep-done");
  o = run("sweep " + g + " --out " + out + " --jobs 1");
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_NE(o.err.find("8 runs, 7 done, 1 to run"), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("optim.lr-0.1_train.batch-8 | sync"), std::string::npos) << o.err;
  EXPECT_EQ(slurp(out + "/sweep.md"), md);

  // Determinism: a second sweep into another directory, byte for byte.
  const std::string g2 = write("grid2.toml", grid());
  const std::string out_b = tmp("sweep-b");
  o = run("sweep " + g2 + " --out " + out_b);
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(slurp(out_b + "/sweep.json"), slurp(out + "/sweep.json"));
  EXPECT_EQ(slurp(out_b + "/sweep.md"), md);

  // A changed setting reruns what it changes: train.budget, which the
  // resume identity (config_hash) leaves out, reruns every run.
  const std::string g3 = write("grid3.toml", grid("", "3"));
  o = run("sweep " + g3 + " --out " + out);
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_NE(o.err.find("8 runs, 0 done, 8 to run"), std::string::npos) << o.err;
  const std::string run_dir = out + "/cells/optim.lr-0.1_train.batch-8/sync/seed-1";
  EXPECT_NE(slurp(run_dir + "/config.toml").find("budget = 3.0"), std::string::npos);
  EXPECT_NE(slurp(out + "/sweep.md"), md);
  o = run("sweep " + g3 + " --out " + out);
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_NE(o.err.find("8 runs, 8 done, 0 to run"), std::string::npos) << o.err;
}

size_t count_of(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

// "key value" of a cell's costs.txt.
std::map<std::string, std::string> costs(const std::string& file) {
  std::map<std::string, std::string> m;
  std::istringstream in(slurp(file));
  std::string k, v;
  while (in >> k >> v) m[k] = v;
  return m;
}

// The calibrated costs are measured again when what they measure changes
// (the batch), and reused when it does not (the budget).
TEST(SweepCli, CalibratedCostsFollowWhatTheyMeasure) {
  auto grid_with = [](const std::string& set) {
    return "policies = [\"async\"]\n"
           "[set]\n"
           "data.spec = \"synthetic\"\n"
           "model.name = \"linear-test\"\n"
           "train.workers = 2\n"
           "train.eval_every = 0.5\n" +
           set;
  };
  const std::string out = tmp("sweep-costs");
  const std::string file = out + "/cells/all/costs.txt";
  Outcome o = run("sweep " + write("c1.toml", grid_with("train.budget = 1\ntrain.batch = 8\n")) +
                  " --out " + out);
  ASSERT_EQ(o.code, 0) << o.err;
  const auto first = costs(file);
  ASSERT_EQ(first.count("sim.compute_time"), 1u) << slurp(file);
  // Another budget: the runs again, the same costs.
  o = run("sweep " + write("c2.toml", grid_with("train.budget = 2\ntrain.batch = 8\n")) +
          " --out " + out);
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_NE(o.err.find("1 runs, 0 done, 1 to run"), std::string::npos) << o.err;
  EXPECT_EQ(costs(file), first);
  // Another batch: measured again.
  o = run("sweep " + write("c3.toml", grid_with("train.budget = 2\ntrain.batch = 512\n")) +
          " --out " + out);
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_NE(o.err.find("1 runs, 0 done, 1 to run"), std::string::npos) << o.err;
  const auto third = costs(file);
  EXPECT_NE(third.at("sim.compute_time"), first.at("sim.compute_time")) << slurp(file);
  EXPECT_NE(slurp(out + "/cells/all/async/seed-1/config.toml")
                .find("compute_time = " + third.at("sim.compute_time")),
            std::string::npos);
}

TEST(SweepCli, BadGridsOneLineExit2) {
  struct Case {
    std::string text, expect;
  };
  const std::vector<Case> cases = {
      {"policies = [\n", "expected a sweep grid (TOML)"},
      {"", "empty file"},
      {"seeds = [1]\n", "policies: expected a non-empty array"},
      {grid("colour = 1\n"), "unknown key 'colour'"},
      {"policies = [\"async\"]\ncandidate = \"auto\"\n",
       "candidate = 'auto': expected one of policies"},
      {"policies = [\"async\", \"async\"]\n", "'async' is listed twice"},
      {"policies = [\"async\"]\n[axes]\noptim.lr = 0.1\n",
       "[axes] optim.lr: expected a non-empty array"},
      {"policies = [\"async\"]\n[axes]\ntrain.seed = [1, 2]\n",
       "[axes] 'train.seed': the sweep sets it"},
      {"policies = [\"async\"]\n[axes]\noptim.lr = [0.1]\n[plot]\nx = \"optim.lr\"\ny = "
       "\"train.batch\"\n",
       "[plot] 'train.batch': expected one of the [axes] keys"},
      {"policies = [\"nosuch\"]\n[set]\ntrain.budget = 1\n", "expected sync, async"},
      {"policies = [\"async\"]\n[set]\ntrain.budget = 1\noptim.lr = -1\n", "optim.lr"},
      // An axis whose values change nothing (no straggler for sigma to delay).
      {"policies = [\"async\"]\n[set]\ntrain.budget = 1\n[axes]\nstragglers.sigma = [0.0, 0.25]\n",
       "[axes] stragglers.sigma: the values 0.0 and 0.25 give the same runs (stragglers.sigma = "
       "0.25 has no effect: stragglers.fraction = 0)"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string g = write("bad" + std::to_string(i) + ".toml", cases[i].text);
    const std::string out = tmp("bad-out" + std::to_string(i));
    const Outcome o = run("sweep " + g + " --out " + out);
    EXPECT_EQ(o.code, 2) << cases[i].text;
    EXPECT_NE(o.err.find(cases[i].expect), std::string::npos) << cases[i].text << "\n" << o.err;
    EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << o.err;
    EXPECT_FALSE(fs::exists(out)) << "nothing written for: " << cases[i].text;
  }
  const Outcome o = run("sweep " + tmp("missing.toml"));
  EXPECT_EQ(o.code, 2);
  EXPECT_NE(o.err.find("cannot open"), std::string::npos) << o.err;
}

// Settings moot in every run are said once; a key some policy reads is not
// moot (policy.step: hybrid reads it, async does not).
// A sweep of one policy whose run diverges (exit 3) at its first evaluation:
// the run is scored over the cell's budget, held at its last value from there
// on (0, 1 s, then 2..6 s: seven evaluations), not over its own first second.
TEST(SweepCli, ADivergedRunAloneIsScoredOverTheBudget) {
  const std::string g = write("grid-diverged.toml",
                              "policies = [\"async\"]\n"
                              "seeds = [1]\n"
                              "[set]\n"
                              "data.spec = \"synthetic\"\n"
                              "model.name = \"linear-test\"\n"
                              "train.workers = 3\n"
                              "train.budget = 6\n"
                              "train.eval_every = 1\n"
                              "train.diverge_factor = 1.5\n"
                              "sim.compute_time = 0.1\n"
                              "sim.server_ns_per_param = 1.0\n"
                              "[axes]\n"
                              "optim.lr = [1.0e6]\n");
  const std::string out = tmp("sweep-diverged");
  const Outcome o = run("sweep " + g + " --out " + out);
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_NE(o.err.find("(stopped early)"), std::string::npos) << o.err;
  const auto rows = read_metrics_csv(out + "/cells/optim.lr-1000000.0/async/seed-1/metrics.csv");
  ASSERT_EQ(rows.size(), 2u);
  ASSERT_EQ(rows.back().time_s, 1.0);
  const nlohmann::json j = nlohmann::json::parse(slurp(out + "/sweep.json"));
  EXPECT_NEAR(j["cells"][0]["policies"]["async"]["interval_mean"]["mean"].get<double>(),
              (rows[0].test_acc + 6 * rows[1].test_acc) / 7, 1e-12);

  // --rescore writes the tables again from the runs as they are, running
  // nothing, whatever identity their markers carry; a run without results
  // is one line and exit 2.
  const std::string dir = out + "/cells/optim.lr-1000000.0/async/seed-1";
  const std::string json = slurp(out + "/sweep.json");
  fs::remove(out + "/sweep.json");
  std::ofstream(dir + "/sweep-done") << "an older identity\n";
  Outcome r = run("sweep " + g + " --out " + out + " --rescore");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("1 done, 0 to run"), std::string::npos) << r.err;
  EXPECT_EQ(slurp(out + "/sweep.json"), json);
  EXPECT_EQ(slurp(dir + "/sweep-done"), "an older identity\n");
  fs::remove(dir + "/metrics.csv");
  r = run("sweep " + g + " --out " + out + " --rescore");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find(dir + ": no finished run to rescore"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir + "/metrics.csv"));
}

TEST(SweepCli, SettingsMootInEveryRunAreSaidOnce) {
  const std::string g = write("moot.toml",
                              "policies = [\"async\", \"hybrid\"]\n"
                              "[set]\n"
                              "data.spec = \"synthetic\"\n"
                              "model.name = \"linear-test\"\n"
                              "train.workers = 2\n"
                              "train.budget = 0.5\n"
                              "train.eval_every = 0.25\n"
                              "sim.compute_time = 0.01\n"
                              "sim.server_ns_per_param = 1.0\n"
                              "policy.step = 50\n"
                              "stragglers.sigma = 0.25\n");
  const Outcome o = run("sweep " + g + " --out " + tmp("sweep-moot"));
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(count_of(o.err, "hsgd: warning: "), 1u) << o.err;
  EXPECT_EQ(count_of(o.err,
                     "hsgd: warning: stragglers.sigma = 0.25 has no effect: "
                     "stragglers.fraction = 0\n"),
            1u)
      << o.err;
}

// docs/config-reference.md is the command's output; moot settings are one
// warning line each.
// A sweep killed with SIGKILL (no handler can run) takes its runs with it:
// they get SIGTERM from the kernel when their parent dies, and stop.
TEST(SweepCli, AKilledSweepLeavesNoRunBehind) {
  const std::string g = write("grid-kill.toml", grid("", "100000"));
  const std::string out = tmp("sweep-kill");
  const pid_t sweep = start_hsgd({"sweep", g, "--out", out, "--jobs", "2"}, tmp("sweep-kill.log"));
  ASSERT_GT(sweep, 0);
  const auto t0 = std::chrono::steady_clock::now();
  while (descendants_of(sweep).size() < 2 &&
         std::chrono::steady_clock::now() - t0 < std::chrono::seconds(60)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_EQ(descendants_of(sweep).size(), 2u) << slurp(tmp("sweep-kill.log"));
  const std::vector<pid_t> alive = kill_and_orphans(sweep);
  EXPECT_TRUE(alive.empty()) << alive.size() << " runs outlived their sweep";
  // A rerun finds no run done and starts them again.
  EXPECT_FALSE(fs::exists(out + "/sweep.md"));
}

TEST(ConfigCli, ReferenceIsTheCommittedPageAndMootSettingsAreSaid) {
  Outcome o = run("config --reference");
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(o.out, slurp(std::string(HSGD_SOURCE_DIR) + "/docs/config-reference.md"))
      << "regenerate: build/release/hsgd config --reference > docs/config-reference.md";
  EXPECT_EQ(o.err, "");
  o = run("config --set train.budget=1 --set stragglers.sigma=0.25");
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(o.err,
            "hsgd: warning: stragglers.sigma = 0.25 has no effect: stragglers.fraction = 0\n");
  EXPECT_NE(o.out.find("sigma = 0.25"), std::string::npos) << o.out;
  o = run("config --set train.budget=1 --set stragglers.sigma=0.25 --set stragglers.fraction=0.5");
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(o.err, "");
  // hsgd train says them before it trains.
  o =
      run("train --data synthetic --model linear-test --runtime sim --budget 0.2 --eval-every 0.1 "
          "--set sim.compute_time=0.01 --set sim.server_ns_per_param=1 --set stragglers.sigma=0.25 "
          "--out " +
          tmp("train-moot"));
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(
      o.err.rfind("hsgd: warning: stragglers.sigma = 0.25 has no effect: stragglers.fraction = 0\n",
                  0),
      0u)
      << o.err;
  o = run("config --reference --set train.budget=1");
  EXPECT_EQ(o.code, 2);
  EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << o.err;
}

// config --check FILE...: configs and grids in one process, one stdout line
// per good file, one error line per bad one naming it, exit 2 if any is bad.
TEST(ConfigCli, CheckValidatesEveryFileAndNamesTheBadOnes) {
  const std::string good = write("check-good.toml", "[train]\nbudget = 1\n");
  const std::string moot =
      write("check-moot.toml", "[train]\nbudget = 1\n[stragglers]\nsigma = 0.25\n");
  const std::string grid_file = write("check-grid.toml", grid());
  const std::string bad_key = write("check-bad-key.toml", "[train]\nbudget = 1\nbatch = 0\n");
  std::string twice = grid();
  twice.replace(twice.find("seeds = [1]"), 11, "seeds = [1, 1]");
  const std::string bad_grid = write("check-bad-grid.toml", twice);
  Outcome o = run("config --check " + good + " " + moot + " " + grid_file);
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(o.out, good + ": valid config\n" + moot + ": valid config\n" + grid_file +
                       ": 4 cells x 2 policies x 1 seeds = 8 runs, every config valid\n");
  EXPECT_EQ(o.err, "hsgd: warning: " + moot +
                       ": stragglers.sigma = 0.25 has no effect: stragglers.fraction = 0\n");

  o = run("config --check " + good + " " + bad_key + " " + grid_file + " " + bad_grid + " " +
          tmp("check-missing.toml"));
  EXPECT_EQ(o.code, 2);
  EXPECT_EQ(o.out, good + ": valid config\n" + grid_file +
                       ": 4 cells x 2 policies x 1 seeds = 8 runs, every config valid\n");
  EXPECT_NE(o.err.find("hsgd: error: " + bad_key + ": train.batch = 0: expected >= 1\n"),
            std::string::npos)
      << o.err;
  EXPECT_NE(o.err.find("hsgd: error: " + bad_grid + ": seeds"), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("check-missing.toml: cannot open"), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("hsgd: 3 of 5 files are bad\n"), std::string::npos) << o.err;
  EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 4) << o.err;

  o = run("config --check " + good + " --set train.budget=2");
  EXPECT_EQ(o.code, 2);
  EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << o.err;
}

}  // namespace
}  // namespace hsgd
