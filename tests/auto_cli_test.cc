// The auto policy (#17) through the hsgd binary: on the threads runtime, and
// deterministic and exactly resumable on the simulator; auto with a pilot
// (issue 32, runtime/pilot.h) on sim and threads (mpi: mpi_cli_test.cc).
#include <cmath>
#include <fstream>
#include <sstream>

#include "cli_helpers.h"
#include "hsgd/metrics/fidelity.h"
#include "hsgd/metrics/recorder.h"
#include "test_helpers.h"

namespace hsgd {
namespace {

using testing_helpers::slurp;

std::string job(const std::string& out, const std::string& more) {
  return "train --quiet --data synthetic --model linear-test --workers 4 --batch 8 --lr 0.1 "
         "--policy auto --eval-every 0.25 --set data.synthetic_samples=3000 --out " +
         out + " " + more;
}

// auto's rule, without its pilot (policy.auto_pilot = 0; the pilot is the
// default, below).
const std::string kSim =
    "--runtime sim --set sim.compute_time=0.002 --set sim.server_ns_per_param=50 "
    "--set stragglers.fraction=0.5 --set stragglers.sigma=0.01 --set optim.kind=momentum "
    "--set policy.auto_pilot=0 ";

TEST(AutoCli, RunsOnThreads) {
  const std::string out = tmp("threads");
  const Outcome o = run(job(out,
                            "--runtime threads --budget 1 --set optim.kind=momentum "
                            "--set policy.auto_pilot=0"));
  ASSERT_EQ(o.code, 0) << o.err;
  const auto s = summary(out);
  EXPECT_EQ(s["policy"], "auto");
  EXPECT_GT(s["updates"].get<int64_t>(), 0);
  EXPECT_GT(s["test_acc"].get<double>(), 0.3);
  // The k column is auto's K, within [1, workers].
  for (const MetricsRow& r : read_metrics_csv(out + "/metrics.csv")) {
    EXPECT_GE(r.k, 1);
    EXPECT_LE(r.k, 4);
  }
}

TEST(AutoCli, SimIsDeterministicAndResumesExactly) {
  const std::string a = tmp("sim_a"), b = tmp("sim_b"), part = tmp("sim_part");
  ASSERT_EQ(run(job(a, kSim + "--budget 3")).code, 0);
  ASSERT_EQ(run(job(b, kSim + "--budget 3")).code, 0);
  EXPECT_EQ(slurp(a + "/metrics.csv"), slurp(b + "/metrics.csv"));
  EXPECT_EQ(slurp(a + "/model.bin"), slurp(b + "/model.bin"));
  ASSERT_EQ(run(job(part, kSim + "--budget 1.3 --checkpoint-every 0.5")).code, 0);
  const Outcome o = run("train --quiet --resume " + part + " --budget 3");
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(slurp(part + "/metrics.csv"), slurp(a + "/metrics.csv"));
  EXPECT_EQ(slurp(part + "/model.bin"), slurp(a + "/model.bin"));
}

// The nineteenth rule reads the workers' batch on the runtimes' servers
// (runtime/row.h, server_policy, which mpi's shard servers call too): 4
// workers at lr 0.1 are within the budget at batch 32 (0.4: K = 1) and need
// K = 2 at batch 8 (0.4 x 2).
TEST(AutoCli, TheNineteenthRuleReadsTheBatchOnSimAndThreads) {
  for (const std::string runtime : {"sim", "threads"}) {
    for (const auto& [batch, k] : {std::pair{8, 2}, std::pair{32, 1}}) {
      const std::string out = tmp("r19_" + runtime + std::to_string(batch));
      const Outcome o =
          run("train --quiet --data synthetic --model linear-test --workers 4 --lr 0.1 "
              "--policy auto --set policy.auto_rule=19 --set policy.auto_pilot=0 "
              "--eval-every 0.25 "
              "--set data.synthetic_samples=3000 --budget 0.5 --runtime " +
              runtime + " --batch " + std::to_string(batch) + " --out " + out);
      ASSERT_EQ(o.code, 0) << o.err;
      const std::vector<MetricsRow> rows = read_metrics_csv(out + "/metrics.csv");
      ASSERT_FALSE(rows.empty());
      EXPECT_EQ(rows.front().k, k) << runtime << " batch " << batch;
    }
  }
}

TEST(AutoCli, AnUnknownAblationPartIsOneLineExit2) {
  const std::string out = tmp("bad");
  const Outcome o = run(job(out, kSim + "--budget 1 --set policy.auto_ablate=colour"));
  EXPECT_EQ(o.code, 2);
  EXPECT_NE(o.err.find("policy.auto_ablate"), std::string::npos) << o.err;
  EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << o.err;
}

// ---- auto with a pilot (policy.auto_pilot)

// Every column but the policy's name (and the wall clock's, if any).
std::string rows_but_policy(const std::string& dir) {
  std::ostringstream o;
  for (const MetricsRow& r : read_metrics_csv(dir + "/metrics.csv")) {
    o << r.time_s << ' ' << r.updates << ' ' << r.samples << ' ' << r.k << ' ' << r.train_loss
      << ' ' << r.test_loss << ' ' << r.test_acc << ' ' << r.staleness_mean << '\n';
  }
  return o.str();
}

// The K a constant-K policy's rows carry on `workers` workers (0: K varies,
// hybrid's).
int k_of(const std::string& policy, int workers) {
  if (policy == "sync") return workers;
  if (policy == "async" || policy.starts_with("async+")) return 1;
  if (policy == "hybrid") return 0;
  return std::stoi(policy.substr(policy.find(':') + 1));
}

// The settings that run a pilot's candidate as a plain policy.
std::string as_plain(const std::string& candidate) {
  if (candidate == "async+staleness.momentum_correction=true") {
    return "--set policy.name=async --set staleness.momentum_correction=true";
  }
  if (candidate == "rule") return "--set policy.name=auto";  // auto's rule, no pilot
  return "--set policy.name=" + candidate;
}

const std::string kPilotSim =
    "--runtime sim --set sim.compute_time=0.002 --set sim.server_ns_per_param=50 "
    "--set stragglers.fraction=0.5 --set stragglers.sigma=0.004 --set optim.kind=momentum "
    "--set policy.auto_pilot=0.25 "  // the candidates: the default set, k+hybrid
    "--set policy.step=40 ";         // hybrid's step: the run's

// On the simulator, a candidate's pilot is its own run cut at the pilot's
// share: each figure the pilot reports is the interval mean of that
// candidate run separately for that long; the choice is the best of them;
// and the piloted run is the chosen policy's run push for push, which its
// config.toml reproduces without a pilot.
TEST(AutoCli, APilotOnSimChoosesTheBestCandidateAndIsThatCandidatesRun) {
  const std::string out = tmp("pilot_sim");
  // Ranked over the last 0.6 of each pilot (policy.auto_pilot_window).
  // Margin 0: the best figure is the choice; one round (the margin and the
  // second round have their own tests).
  const Outcome o =
      run(job(out, kPilotSim + "--budget 2 --set train.workers=9 --set "
                               "policy.auto_pilot_window=0.6 --set "
                               "policy.auto_pilot_margin=0 --set policy.auto_pilot_keep=0"));
  ASSERT_EQ(o.code, 0) << o.err;
  const auto s = summary(out);
  ASSERT_TRUE(s.contains("auto_pilot")) << s.dump();
  const auto& p = s["auto_pilot"];
  EXPECT_DOUBLE_EQ(p["budget"].get<double>(), 0.5);
  std::vector<std::string> names;
  std::string best;
  double best_mean = -1;
  for (const auto& c : p["candidates"]) {
    const std::string name = c["policy"];
    names.push_back(name);
    // The candidate alone, for the pilot's share.
    const std::string alone = tmp("pilot_alone_" + std::to_string(names.size()));
    ASSERT_EQ(
        run(job(alone, kPilotSim + "--budget 0.5 --set train.workers=9 --set policy.auto_pilot=0 " +
                           as_plain(name)))
            .code,
        0);
    const std::vector<MetricsRow> rows = read_metrics_csv(alone + "/metrics.csv");
    double area = 0;
    for (size_t i = 1; i < rows.size(); ++i) {
      area +=
          0.5 * (rows[i].test_acc + rows[i - 1].test_acc) * (rows[i].time_s - rows[i - 1].time_s);
    }
    const double mean = area / (rows.back().time_s - rows.front().time_s);
    EXPECT_NEAR(c["interval_mean"].get<double>(), mean, 1e-6) << name;  // (the CSV's 6 digits)
    // What ranks it: the mean over the last 0.6 of its pilot, [0.2 s, 0.5 s].
    const double late = late_mean_test_acc(rows, 0.6);
    EXPECT_NEAR(c["ranked"].get<double>(), late, 1e-6) << name;
    EXPECT_NE(late, mean) << name;
    if (late > best_mean) best_mean = late, best = name;
  }
  EXPECT_EQ(names,
            (std::vector<std::string>{"sync", "async", "kasync:2", "kasync:4", "kasync:8", "hybrid",
                                      "async+staleness.momentum_correction=true"}));
  EXPECT_EQ(p["chosen"], best);
  // The run is the chosen policy's, under the name auto.
  const std::string plain = tmp("pilot_plain");
  ASSERT_EQ(
      run(job(plain, kPilotSim + "--budget 2 --set train.workers=9 --set policy.auto_pilot=0 " +
                         as_plain(best)))
          .code,
      0);
  EXPECT_EQ(rows_but_policy(out), rows_but_policy(plain));
  for (const MetricsRow& r : read_metrics_csv(out + "/metrics.csv")) {
    EXPECT_EQ(r.policy, "auto");
    if (k_of(best, 9) > 0) {
      EXPECT_EQ(r.k, k_of(best, 9));
    }
  }
  // config.toml holds the choice: rerunning it runs no pilot, the same run.
  const std::string config = slurp(out + "/config.toml");
  EXPECT_NE(config.find("auto_choice = '" + best + "'"), std::string::npos) << config;
  const std::string again = tmp("pilot_again");
  const Outcome r = run("train --config " + out + "/config.toml --out " + again);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err.find("auto pilot"), std::string::npos) << r.err;
  EXPECT_FALSE(summary(again).contains("auto_pilot"));
  EXPECT_EQ(slurp(again + "/metrics.csv"), slurp(out + "/metrics.csv"));
}

// Whatever the pilot chooses, auto then runs that candidate push for push:
// each choice the pilot can make (policy.auto_choice, as config.toml holds
// it) against the candidate run as a plain policy. policy.auto_candidates =
// "k" leaves hybrid and the corrected async out; without server momentum the
// corrected async is not a candidate; "k+rule" adds auto's own rule.
TEST(AutoCli, EveryChoiceOfThePilotRunsThatCandidate) {
  for (const std::string c :
       {"hybrid", "async+staleness.momentum_correction=true", "kasync:2", "rule"}) {
    const std::string chose = tmp("choice"), plain = tmp("choice_plain");
    ASSERT_EQ(run(job(chose, kPilotSim + "--budget 1 --set policy.auto_choice=" + c)).code, 0);
    ASSERT_EQ(
        run(job(plain, kPilotSim + "--budget 1 --set policy.auto_pilot=0 " + as_plain(c))).code, 0);
    EXPECT_EQ(rows_but_policy(chose), rows_but_policy(plain)) << c;
  }
  // The correction is what makes the corrected choice differ from async.
  const std::string corrected = tmp("choice_corrected"), async = tmp("choice_async");
  ASSERT_EQ(run(job(corrected, kPilotSim + "--budget 1 --set "
                                           "policy.auto_choice=async+staleness.momentum_"
                                           "correction=true"))
                .code,
            0);
  ASSERT_EQ(run(job(async, kPilotSim + "--budget 1 --set policy.auto_choice=async")).code, 0);
  EXPECT_NE(rows_but_policy(corrected), rows_but_policy(async));
  const std::string k = tmp("choice_k"), sgd = tmp("choice_sgd");
  ASSERT_EQ(run(job(k, kPilotSim + "--budget 1 --set policy.auto_candidates=k")).code, 0);
  EXPECT_EQ(summary(k)["auto_pilot"]["candidates"].size(), 3u);  // sync, async, kasync:2
  // "k+hybrid" is the default (not written); another set is part of the run's identity.
  EXPECT_NE(slurp(k + "/config.toml").find("auto_candidates = 'k'"), std::string::npos);
  ASSERT_EQ(run(job(sgd, kPilotSim + "--budget 1 --set optim.kind=sgd")).code, 0);
  EXPECT_EQ(slurp(sgd + "/config.toml").find("auto_candidates"), std::string::npos);
  std::vector<std::string> names;
  const auto sgd_summary = summary(sgd);
  for (const auto& c : sgd_summary["auto_pilot"]["candidates"]) names.push_back(c["policy"]);
  EXPECT_EQ(names, (std::vector<std::string>{"sync", "async", "kasync:2", "hybrid"}));
  // "rule" is auto's rule, not the fixed policy whose K it holds here (K = 1:
  // the rule lowers the server's momentum by staleness's, async does not).
  const std::string rule = tmp("choice_rule");
  ASSERT_EQ(run(job(rule, kPilotSim + "--budget 1 --set policy.auto_choice=rule")).code, 0);
  for (const MetricsRow& r : read_metrics_csv(rule + "/metrics.csv")) EXPECT_EQ(r.k, 1);
  EXPECT_NE(rows_but_policy(rule), rows_but_policy(async));
}

// policy.auto_pilot_margin reaches the choice: with every K within it, the
// pilot keeps the largest, sync; without it, the best figure, which here is
// not sync's (one round: every candidate is in the choice).
TEST(AutoCli, APilotsMarginKeepsTheLargestK) {
  const std::string wide = tmp("pilot_margin"), none = tmp("pilot_no_margin");
  const std::string sim =
      kPilotSim + "--budget 1 --set policy.auto_candidates=k --set policy.auto_pilot_keep=0 ";
  ASSERT_EQ(run(job(wide, sim + "--set policy.auto_pilot_margin=0.75")).code, 0);
  ASSERT_EQ(run(job(none, sim + "--set policy.auto_pilot_margin=0")).code, 0);
  const auto s = summary(wide);
  EXPECT_EQ(s["auto_pilot"]["chosen"], "sync");
  EXPECT_DOUBLE_EQ(s["auto_pilot"]["margin"].get<double>(), 0.75);
  EXPECT_NE(summary(none)["auto_pilot"]["chosen"], "sync");
  EXPECT_NE(slurp(wide + "/config.toml").find("auto_pilot_margin = 0.75"), std::string::npos);
}

// policy.auto_pilot_keep = 2 (the default): the best two of the first round
// (0.5 s of 2) continue to twice the share, and each second-round figure is
// that candidate's own run to 1 s; the choice is the best of them (margin
// 0). With 0, one round.
TEST(AutoCli, APilotsSecondRoundContinuesTheBestTwoToTwiceTheShare) {
  const std::string out = tmp("pilot_keep");
  const std::string sim = kPilotSim + "--set train.workers=9 --set policy.auto_candidates=k ";
  const Outcome o = run(job(out, sim + "--budget 2 --set policy.auto_pilot_margin=0"));
  ASSERT_EQ(o.code, 0) << o.err;
  const auto s = summary(out);
  const auto& p = s["auto_pilot"];
  EXPECT_EQ(p["keep"], 2);
  EXPECT_DOUBLE_EQ(p["second_fraction"].get<double>(), 0.5);
  // The survivors: the two best first-round figures (ties: the earlier).
  std::vector<std::pair<double, size_t>> first;
  for (size_t i = 0; i < p["candidates"].size(); ++i) {
    first.push_back({-p["candidates"][i]["ranked"].get<double>(), i});
  }
  std::sort(first.begin(), first.end());
  std::vector<std::string> expected = {
      p["candidates"][std::min(first[0].second, first[1].second)]["policy"],
      p["candidates"][std::max(first[0].second, first[1].second)]["policy"]};
  ASSERT_EQ(p["second"].size(), 2u);
  std::string best;
  double best_ranked = -1;
  for (size_t i = 0; i < 2; ++i) {
    const auto& c = p["second"][i];
    EXPECT_EQ(c["policy"], expected[i]);
    const std::string alone = tmp("pilot_keep_alone_" + std::to_string(i));
    ASSERT_EQ(
        run(job(alone, sim + "--budget 1 --set policy.auto_pilot=0 " + as_plain(c["policy"]))).code,
        0);
    const std::vector<MetricsRow> rows = read_metrics_csv(alone + "/metrics.csv");
    EXPECT_NEAR(c["ranked"].get<double>(), late_mean_test_acc(rows, 0.5), 1e-6) << c.dump();
    EXPECT_NEAR(c["interval_mean"].get<double>(), interval_mean_test_acc(rows), 1e-6);
    if (c["ranked"].get<double>() > best_ranked) {
      best_ranked = c["ranked"];
      best = c["policy"];
    }
  }
  EXPECT_EQ(p["chosen"], best);
  EXPECT_EQ(slurp(out + "/config.toml").find("auto_pilot_keep"), std::string::npos);
  // One round: no second, and the key is written (not the default).
  const std::string one = tmp("pilot_keep_0");
  ASSERT_EQ(run(job(one, sim + "--budget 2 --set policy.auto_pilot_keep=0")).code, 0);
  EXPECT_TRUE(summary(one)["auto_pilot"]["second"].empty());
  EXPECT_DOUBLE_EQ(summary(one)["auto_pilot"]["second_fraction"].get<double>(), 0);
  EXPECT_NE(slurp(one + "/config.toml").find("auto_pilot_keep = 0"), std::string::npos);
}

// With the rule among the candidates (policy.auto_candidates = "k+rule"),
// its pilot is auto's own run without a pilot, cut at the pilot's share.
TEST(AutoCli, TheRulesPilotIsAutosRunWithoutAPilot) {
  const std::string out = tmp("pilot_rule"), alone = tmp("pilot_rule_alone");
  const std::string sim = kPilotSim + "--set policy.auto_candidates=k+rule ";
  ASSERT_EQ(run(job(out, sim + "--budget 2")).code, 0);
  const auto s = summary(out);
  const auto& p = s["auto_pilot"];
  ASSERT_EQ(p["candidates"].size(), 4u);  // sync, async, kasync:2, rule
  const auto& rule = p["candidates"][3];
  EXPECT_EQ(rule["policy"], "rule");
  ASSERT_EQ(run(job(alone, sim + "--budget 0.5 --set policy.auto_pilot=0")).code, 0);
  const std::vector<MetricsRow> rows = read_metrics_csv(alone + "/metrics.csv");
  EXPECT_NEAR(rule["ranked"].get<double>(), late_mean_test_acc(rows, 0.5), 1e-6);
  EXPECT_NE(slurp(out + "/config.toml").find("auto_candidates = 'k+rule'"), std::string::npos);
}

// A checkpointed piloted run resumes with its choice, without a second
// pilot (a longer budget would make a longer pilot), and ends as a run of
// that choice made in one go.
TEST(AutoCli, APilotedRunResumesWithItsChoice) {
  const std::string whole = tmp("pilot_whole"), part = tmp("pilot_part");
  ASSERT_EQ(run(job(part, kPilotSim + "--budget 1 --checkpoint-every 0.5")).code, 0);
  const std::string chosen = summary(part)["auto_pilot"]["chosen"];
  const Outcome o = run("train --resume " + part + " --budget 2");
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(o.err.find("auto pilot"), std::string::npos) << o.err;
  ASSERT_EQ(run(job(whole, kPilotSim + "--budget 2 --set policy.auto_choice=" + chosen)).code, 0);
  EXPECT_EQ(slurp(part + "/metrics.csv"), slurp(whole + "/metrics.csv"));
}

// On threads the simulator stands in for the machine: its compute time is
// measured here (the config's sim.compute_time is not this run's), and the
// run trains with the choice.
TEST(AutoCli, APilotOnThreadsCalibratesTheSimulatorAndTrainsWithTheChoice) {
  const std::string out = tmp("pilot_threads");
  const Outcome o = run(job(out,
                            "--runtime threads --budget 1 --set policy.auto_pilot=0.2 "
                            "--set sim.compute_time=0.5"));
  ASSERT_EQ(o.code, 0) << o.err;
  const auto s = summary(out);
  ASSERT_TRUE(s.contains("auto_pilot")) << s.dump();
  const auto& p = s["auto_pilot"];
  // sync, async, kasync:2 and hybrid on 4 workers with plain SGD (the default set, k+hybrid)
  EXPECT_EQ(p["candidates"].size(), 4u);
  EXPECT_LT(p["sim_compute_time"].get<double>(), 0.05);
  EXPECT_GT(p["sim_compute_time"].get<double>(), 0);
  const std::string chosen = p["chosen"];
  EXPECT_NE(slurp(out + "/config.toml").find("auto_choice = '" + chosen + "'"), std::string::npos);
  for (const MetricsRow& r : read_metrics_csv(out + "/metrics.csv")) {
    EXPECT_EQ(r.policy, "auto");
    if (r.live_workers == 4 && k_of(chosen, 4) > 0) {
      EXPECT_EQ(r.k, k_of(chosen, 4)) << chosen;
    }
  }
}

// The pilot is auto's default (issue 32's ninth study): a plain --policy auto
// run pilots the default candidates (k+hybrid) and writes policy.auto_pilot,
// so its config.toml says whether it had a pilot. A run made without one
// before the default changed has no such key in its config.toml; resumed, it
// keeps its identity and trains on with the rule, never a pilot, as if it
// had not stopped.
TEST(AutoCli, ThePilotIsTheDefaultAndAResumeNeverRunsOne) {
  const std::string sim =
      "--runtime sim --set sim.compute_time=0.002 --set sim.server_ns_per_param=50 "
      "--set stragglers.fraction=0.5 --set stragglers.sigma=0.01 ";
  const std::string piloted = tmp("default_pilot");
  ASSERT_EQ(run(job(piloted, sim + "--budget 1")).code, 0);
  std::vector<std::string> names;
  const auto s = summary(piloted);
  for (const auto& c : s["auto_pilot"]["candidates"]) names.push_back(c["policy"]);
  EXPECT_EQ(names, (std::vector<std::string>{"sync", "async", "kasync:2", "hybrid"}));
  const std::string toml = slurp(piloted + "/config.toml");
  EXPECT_NE(toml.find("auto_pilot = 0.1"), std::string::npos) << toml;
  EXPECT_NE(toml.find("auto_choice = "), std::string::npos) << toml;

  const std::string whole = tmp("rule_whole"), old = tmp("rule_old");
  ASSERT_EQ(run(job(whole, sim + "--budget 2 --set policy.auto_pilot=0")).code, 0);
  EXPECT_NE(slurp(whole + "/config.toml").find("auto_pilot = 0.0"), std::string::npos);
  ASSERT_EQ(run(job(old, sim + "--budget 1 --set policy.auto_pilot=0 --checkpoint-every 0.5")).code,
            0);
  // As the run was written before the default changed: no auto_pilot key.
  std::string before = slurp(old + "/config.toml");
  const size_t at = before.find("auto_pilot = 0.0\n");
  ASSERT_NE(at, std::string::npos) << before;
  before.erase(at, std::string("auto_pilot = 0.0\n").size());
  std::ofstream(old + "/config.toml") << before;
  const Outcome o = run("train --resume " + old + " --budget 2");
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(o.err.find("auto pilot"), std::string::npos) << o.err;
  EXPECT_EQ(slurp(old + "/metrics.csv"), slurp(whole + "/metrics.csv"));
  EXPECT_NE(slurp(old + "/config.toml").find("auto_pilot = 0.0"), std::string::npos);
}

TEST(AutoCli, APilotsBadSettingsAreOneLineExit2) {
  for (const auto& [set, key] : std::vector<std::pair<std::string, std::string>>{
           {"--set policy.auto_pilot=1.5", "policy.auto_pilot"},
           {"--set policy.auto_pilot=0 --set policy.auto_choice=async", "policy.auto_choice"},
           {"--set policy.auto_pilot=0.1 --set policy.auto_choice=kasync:9", "policy.auto_choice"},
           {"--set policy.auto_pilot=0.1 --set policy.auto_choice=ssp:3", "policy.auto_choice"},
           {"--set policy.auto_pilot=0.1 --set policy.auto_candidates=all",
            "policy.auto_candidates"},
           {"--set policy.auto_pilot=0.1 --set policy.auto_pilot_margin=-0.01",
            "policy.auto_pilot_margin"},
           {"--set policy.auto_pilot=0.1 --set policy.auto_pilot_keep=-1",
            "policy.auto_pilot_keep"},
           {"--set policy.auto_pilot=0.1 --set policy.auto_pilot_keep=1.5",
            "policy.auto_pilot_keep"},
           {"--set policy.auto_pilot=0.1 --set policy.auto_choice=async+staleness.gap_aware=true",
            "policy.auto_choice"}}) {
    const std::string out = tmp("pilot_bad");
    const Outcome o = run(job(out, kSim + "--budget 1 " + set));
    EXPECT_EQ(o.code, 2) << set;
    EXPECT_NE(o.err.find(key), std::string::npos) << o.err;
    EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << o.err;
  }
}

}  // namespace
}  // namespace hsgd
