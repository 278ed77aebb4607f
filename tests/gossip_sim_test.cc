// The gossip policies on the simulator (runtime/gossip_sim.h) with the
// plain-C++ linear model: every policy and topology runs for odd n, lr 0
// keeps the average model, determinism byte for byte, exact resume.
#include "hsgd/runtime/gossip_sim.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <memory>

#include "choco_reference.h"
#include "hsgd/checkpoint/checkpoint.h"
#include "hsgd/core/error.h"
#include "hsgd/core/rng.h"
#include "hsgd/core/state.h"
#include "hsgd/policy/gossip.h"
#include "hsgd/runtime/gossip_choco.h"
#include "hsgd/runtime/gossip_row.h"
#include "hsgd/runtime/membership.h"
#include "hsgd/runtime/row.h"
#include "linear_job.h"
#include "test_helpers.h"

namespace hsgd {
namespace {

using testing_helpers::slurp;

struct Gossip : testing::LinearJob {
  explicit Gossip(const std::vector<Override>& o, int64_t samples = 2000)
      : LinearJob({{"train.runtime", "sim"},
                   {"policy.name", "dpsgd"},
                   {"train.workers", "5"},
                   {"train.batch", "16"},
                   {"train.budget", "2"},
                   {"train.eval_every", "0.25"},
                   {"optim.lr", "0.1"},
                   {"sim.compute_time", "0.01"},
                   {"sim.latency", "0.0005"},
                   {"sim.bandwidth", "1e8"}},
                  o, samples) {}

  // The job with its identity, as checkpoints need it.
  Job identified_job() const {
    Job j = job();
    j.identity = {config_hash(config), "linear-test",
                  static_cast<int64_t>(j.initial_params.size())};
    return j;
  }

  // Runs with train.checkpoint_every's checkpoints into a fresh directory
  // `name`; returns the newest (the final one).
  Checkpoint run_to_last_checkpoint(const std::string& name) {
    const std::string dir = testing::fresh_dir(name);
    const Job j = identified_job();
    {
      CheckpointStore store(dir, 2);
      Job with = j;
      with.checkpoints = &store;
      Recorder rec(dir);
      GossipSimRuntime().run(with, &rec, nullptr);
      rec.finish();
    }
    return CheckpointStore::load_latest(dir, j.identity);
  }

  RunResult run(const std::string& name, std::string* csv = nullptr) {
    const std::string dir = testing::fresh_dir("gossip_" + name);
    RunResult r;
    {
      Recorder rec(dir);
      r = GossipSimRuntime().run(job(), &rec, nullptr);
      rec.finish();
    }
    if (csv) *csv = slurp(dir + "/metrics.csv");
    return r;
  }
};

const std::vector<std::string>& Policies() {
  static const std::vector<std::string> p = {"dpsgd", "adpsgd", "sgp", "pdsgdm:3"};
  return p;
}

TEST(GossipSim, EveryPolicyAndTopologyRunsForOddN) {
  for (const std::string& policy : Policies()) {
    for (const std::string& topo : topology_names()) {
      SCOPED_TRACE(policy + " on " + topo);
      Gossip g({{"policy.name", policy},
                {"gossip.topology", topo},
                {"train.workers", "7"},
                {"train.budget", "0.5"}});
      std::string csv;
      const RunResult r = g.run("odd", &csv);
      EXPECT_TRUE(r.stopped.empty()) << r.stopped;
      EXPECT_DOUBLE_EQ(r.train_s, 0.5);
      EXPECT_GT(r.gradients, 7 * 10);
      EXPECT_EQ(r.worker_pushes.size(), 7u);
      EXPECT_TRUE(r.gossip.on);
      EXPECT_EQ(r.gossip.steps, r.gradients);
      if (policy != "adpsgd") {
        EXPECT_GT(r.gossip.rounds, 0);
      }
      EXPECT_GT(r.gossip.bytes_per_node_step, 0);
      // The consensus columns are there, found by name, finite.
      for (double x : testing::csv_column(csv, "consensus")) EXPECT_TRUE(std::isfinite(x));
      EXPECT_FALSE(testing::csv_column(csv, "consensus_rel").empty());
      EXPECT_GT(r.last.test_acc, 0.3);  // it learns (10 classes)
    }
  }
}

// lr 0: no step moves a model, and mixing or push-sum keeps their sum, so
// the average model stays the initial one (1e-6 relative) and consensus 0.
TEST(GossipSim, LrZeroKeepsTheAverageModel) {
  for (const std::string& policy : Policies()) {
    SCOPED_TRACE(policy);
    Gossip g({{"policy.name", policy}, {"gossip.topology", "onepeer-exp"}});
    g.config.optim.lr = 0;  // the config refuses lr 0 for a run; the exactness test needs it
    const RunResult r = g.run("lr0");
    const std::vector<float> init = g.job().initial_params;
    double norm = 0, diff = 0;
    for (size_t i = 0; i < init.size(); ++i) {
      norm += static_cast<double>(init[i]) * init[i];
      diff += std::pow(static_cast<double>(r.params[i]) - init[i], 2);
    }
    EXPECT_LE(std::sqrt(diff), 1e-6 * std::sqrt(norm));
    EXPECT_EQ(r.last.consensus, 0.0);
  }
}

// Bytes per node: a ring node sends its model to 2 neighbours per step and
// receives 2; onepeer-exp sends 1 and receives 1, whatever n.
TEST(GossipSim, BytesPerNodeAreDegreeTimesModel) {
  for (const auto& [topo, degree] :
       std::vector<std::pair<std::string, int>>{{"ring", 2}, {"onepeer-exp", 1}, {"complete", 6}}) {
    Gossip g({{"gossip.topology", topo}, {"train.workers", "7"}, {"train.budget", "1"}});
    const RunResult r = g.run("bytes");
    const double model = 4.0 * static_cast<double>(g.job().initial_params.size());
    // Messages of the last round may be in flight at the end: within 10 %.
    EXPECT_NEAR(r.gossip.bytes_per_node_step, 2 * degree * model, 0.1 * 2 * degree * model) << topo;
  }
}

TEST(GossipSim, SameConfigAndSeedGiveTheSameCsvByteForByte) {
  for (const std::string& policy : Policies()) {
    std::vector<Override> o = {{"policy.name", policy},
                               {"stragglers.fraction", "0.4"},
                               {"stragglers.sigma", "0.01"},
                               {"gossip.topology", "random-matching"}};
    std::string a, b;
    const RunResult ra = Gossip(o).run("det_a", &a);
    const RunResult rb = Gossip(o).run("det_b", &b);
    EXPECT_EQ(a, b) << policy;
    EXPECT_EQ(ra.params, rb.params) << policy;
  }
}

TEST(GossipSim, GlobalAverageEveryHStepsZeroesTheConsensus) {
  Gossip g({{"policy.name", "pdsgdm:4"},
            {"gossip.global_every", "8"},
            {"optim.kind", "momentum"},
            {"train.budget", "1"}});
  const RunResult r = g.run("pga");
  EXPECT_GT(r.gossip.global_averages, 5);
  EXPECT_TRUE(r.stopped.empty());
}

// Runs to 2 s in one go, and to 1 s with checkpoints then resumed to 2 s:
// the same metrics and average model, bit for bit.
void ExpectExactResume(const std::vector<Override>& o, const std::string& name) {
  SCOPED_TRACE(name);
  std::vector<Override> whole = o;
  whole.push_back({"train.budget", "2"});
  std::string csv_whole;
  const RunResult a = Gossip(whole).run(name + "_whole", &csv_whole);

  const std::string dir = testing::fresh_dir("gossip_resume_" + name);
  auto with = [&](const std::string& budget) {
    std::vector<Override> v = o;
    v.push_back({"train.budget", budget});
    v.push_back({"train.checkpoint_every", "0.4"});
    return v;
  };
  Gossip s1(with("1"));
  Job j1 = s1.identified_job();
  {
    CheckpointStore store(dir, 2);
    j1.checkpoints = &store;
    Recorder rec(dir);
    const RunResult r1 = GossipSimRuntime().run(j1, &rec, nullptr);
    EXPECT_TRUE(r1.stopped.empty());
    EXPECT_GE(store.written(), 1);
    rec.finish();
  }
  Gossip s2(with("2"));
  Job j2 = s2.identified_job();
  const Checkpoint ck = CheckpointStore::load_latest(dir, j2.identity);
  EXPECT_DOUBLE_EQ(ck.info.train_s, 1.0);
  RunResult b;
  {
    CheckpointStore store(dir, 2);
    j2.checkpoints = &store;
    j2.resume = &ck;
    Recorder rec(dir, ck.info.rows);
    b = GossipSimRuntime().run(j2, &rec, nullptr);
    rec.finish();
  }
  EXPECT_EQ(slurp(dir + "/metrics.csv"), csv_whole);
  EXPECT_EQ(b.params, a.params);
  EXPECT_EQ(b.worker_pushes, a.worker_pushes);
  EXPECT_EQ(b.gossip.rounds, a.gossip.rounds);
}

TEST(GossipSim, ResumesExactly) {
  ExpectExactResume({{"policy.name", "dpsgd"}, {"optim.kind", "momentum"}}, "dpsgd");
  ExpectExactResume({{"policy.name", "dpsgd"}, {"gossip.order", "atc"}}, "dpsgd_atc");
  ExpectExactResume({{"policy.name", "sgp"}, {"gossip.topology", "onepeer-exp"}}, "sgp");
  ExpectExactResume(
      {{"policy.name", "adpsgd"}, {"stragglers.fraction", "0.4"}, {"stragglers.sigma", "0.02"}},
      "adpsgd");
  ExpectExactResume({{"policy.name", "pdsgdm:3"}, {"gossip.global_every", "6"}}, "pdsgdm");
  ExpectExactResume({{"policy.name", "pdsgdm:3"},
                     {"gossip.global_every", "6"},
                     {"local.outer", "momentum"},
                     {"local.outer_momentum", "0.5"}},
                    "pdsgdm_slowmo");
}

// ---- sim.cores (runtime/sim_cores.h: the parameter-server simulator's rule)

// 4 workers, 10 ms of compute a step, a free network (no latency, no
// bandwidth limit) and 1.005 s of budget, so a compute never ends at the
// budget: with every worker on a core of its own each takes 100 steps; on
// C cores, first come first served, the computes follow each other back to
// back (a worker is always ready: none waits for a round that nobody
// computes), 100 C of them in 1.005 s, each worker's step taking 4 / C
// times as long. adpsgd counts a step when its compute ends (its pairing
// is instant): exactly 100 C steps, 100 C / 4 per worker (the line is
// round robin). The synchronous policies count a step when its round is
// in, so up to 3 computed steps still wait for a neighbour's at the end.
// With as many cores as workers nobody waits: the run is the unlimited
// one, byte for byte.
TEST(GossipSim, CoresSerialiseTheWorkersCompute) {
  const std::vector<Override> base = {{"train.workers", "4"},      {"train.budget", "1.005"},
                                      {"train.eval_every", "0.5"}, {"sim.compute_time", "0.01"},
                                      {"sim.latency", "0"},        {"sim.bandwidth", "1e30"}};
  for (const std::string& policy : Policies()) {
    SCOPED_TRACE(policy);
    std::vector<Override> o = base;
    o.push_back({"policy.name", policy});
    std::string free_csv, four_csv;
    const RunResult free = Gossip(o).run("cores_free", &free_csv);
    EXPECT_EQ(free.gradients, 400);
    for (const int cores : {1, 2}) {
      std::vector<Override> with = o;
      with.push_back({"sim.cores", std::to_string(cores)});
      const RunResult r = Gossip(with).run("cores", nullptr);
      EXPECT_TRUE(r.stopped.empty()) << r.stopped;
      if (policy == "adpsgd") {
        EXPECT_EQ(r.gradients, 100 * cores);
        for (int64_t steps : r.worker_pushes) EXPECT_EQ(steps, 25 * cores);
      } else {
        EXPECT_LE(r.gradients, 100 * cores) << cores;
        EXPECT_GE(r.gradients, 100 * cores - 3) << cores;
      }
    }
    std::vector<Override> four = o;
    four.push_back({"sim.cores", "4"});
    const RunResult r4 = Gossip(four).run("cores_four", &four_csv);
    EXPECT_EQ(four_csv, free_csv);
    EXPECT_EQ(r4.params, free.params);
  }
}

// A straggler's slow-down is spent asleep after its gradient (as on threads
// and mpi): only the gradient holds a core. adpsgd on 2 workers, one core,
// 10 ms a gradient, worker 0 slowed down 11 times (100 ms asleep after each
// gradient): worker 1 computes while it sleeps, 89 steps in 1 s, worker 0's
// 7 of them (worker 1 waits a little for its passive peer's replies).
// Holding the core through the sleep, the two would alternate: about 17.
TEST(GossipSim, AStragglersDelayHoldsNoCore) {
  const std::vector<Override> o = {
      {"policy.name", "adpsgd"},     {"train.workers", "2"},       {"train.budget", "1.005"},
      {"train.eval_every", "0.5"},   {"sim.compute_time", "0.01"}, {"sim.latency", "0"},
      {"sim.bandwidth", "1e30"},     {"sim.cores", "1"},           {"stragglers.fraction", "0.5"},
      {"stragglers.slowdown", "11"}, {"stragglers.sigma", "1e-9"}};
  const RunResult r = Gossip(o).run("cores_straggler", nullptr);
  EXPECT_TRUE(r.stopped.empty()) << r.stopped;
  EXPECT_GE(r.gradients, 80);
  ASSERT_EQ(r.worker_pushes.size(), 2u);
  EXPECT_GE(r.worker_pushes[0], 6);
  EXPECT_LE(r.worker_pushes[0], 9);
}

// On fewer cores than workers the run is still deterministic, and resumes
// exactly with computes waiting in line or holding a core at the cut, with
// stragglers, a slow network and workers leaving (a leaver's core goes to
// the next in line, its place in line is dropped) and rejoining.
TEST(GossipSim, DeterministicAndResumesExactlyOnFewerCores) {
  const std::vector<Override> cores = {{"sim.cores", "2"},
                                       {"stragglers.fraction", "0.4"},
                                       {"stragglers.sigma", "0.003"},
                                       {"sim.latency", "0.002"}};
  for (const std::string& policy : Policies()) {
    std::vector<Override> o = cores;
    o.push_back({"policy.name", policy});
    std::string a, b;
    const RunResult ra = Gossip(o).run("cores_det_a", &a);
    const RunResult rb = Gossip(o).run("cores_det_b", &b);
    EXPECT_EQ(a, b) << policy;
    EXPECT_EQ(ra.params, rb.params) << policy;
    o.push_back({"faults.kill", "worker:1@0.5s,worker:2@0.6s,worker:3@1.3s"});
    o.push_back({"faults.rejoin", "worker:1@0.9s,worker:3@1.6s"});
    o.push_back({"faults.exception_rate", "0.002"});
    o.push_back({"faults.rejoin_after", "0.2"});
    ExpectExactResume(o, "cores_churn_" + policy);
  }
}

// SlowMo's outer step is taken at every global average: with local.outer =
// sgd and a tiny local.outer_lr every average sends the workers back to
// (almost) where the previous one started, so the run hardly leaves the
// initial model (it ends about one local step away), while the plain
// average (the default) trains.
TEST(GossipSim, TheOuterStepIsTakenAtEveryGlobalAverage) {
  for (const std::string policy : {"dpsgd", "sgp", "pdsgdm:1"}) {
    SCOPED_TRACE(policy);
    const std::vector<Override> o = {{"policy.name", policy}, {"gossip.global_every", "1"}};
    Gossip plain(o);
    std::vector<Override> with = o;
    with.push_back({"local.outer_lr", "1e-6"});
    Gossip held(with);
    const double moved =
        testing::distance(plain.run("outer_plain").params, plain.job().initial_params);
    const double held_moved =
        testing::distance(held.run("outer_held").params, held.job().initial_params);
    EXPECT_GT(moved, 0.1);
    EXPECT_LT(held_moved, 0.1 * moved);  // about one local step against many
  }
}

// ---- membership (docs/gossip.md#membership)

// Kills of workers 1 and 2 at 0.5 and 0.6 s, worker 1 back at 1.0 s.
std::vector<Override> Churn(std::vector<Override> o) {
  o.push_back({"faults.kill", "worker:1@0.5s,worker:2@0.6s"});
  o.push_back({"faults.rejoin", "worker:1@1s"});
  return o;
}

// A run checkpointed before a kill (at 1 s, before worker 3's kill at
// 1.3 s) and after others, resumed, equals the uninterrupted run byte for
// byte: the membership state, the live graph and the messages of the old
// graph are in the checkpoint.
TEST(GossipSim, ResumesExactlyWithFaults) {
  auto faults = [](std::vector<Override> o) {
    o.push_back({"faults.kill", "worker:1@0.5s,worker:2@0.6s,worker:3@1.3s"});
    o.push_back({"faults.rejoin", "worker:1@0.9s,worker:3@1.6s"});
    o.push_back({"faults.kill_rate", "6"});
    o.push_back({"faults.rejoin_after", "0.2"});
    // A slow network and stragglers: messages are in flight at the cut and
    // at the changes.
    o.push_back({"sim.latency", "0.004"});
    o.push_back({"stragglers.fraction", "0.4"});
    o.push_back({"stragglers.sigma", "0.003"});
    return o;
  };
  ExpectExactResume(faults({{"policy.name", "dpsgd"}, {"optim.kind", "momentum"}}), "churn_dpsgd");
  ExpectExactResume(faults({{"policy.name", "sgp"}, {"gossip.topology", "onepeer-exp"}}),
                    "churn_sgp");
  ExpectExactResume(faults({{"policy.name", "adpsgd"}}), "churn_adpsgd");
  ExpectExactResume(faults({{"policy.name", "pdsgdm:3"}, {"gossip.global_every", "6"}}),
                    "churn_pdsgdm");
}

TEST(GossipSim, SameConfigAndSeedGiveTheSameCsvWithFaults) {
  for (const std::string& policy : Policies()) {
    std::vector<Override> o = Churn({{"policy.name", policy},
                                     {"stragglers.fraction", "0.4"},
                                     {"stragglers.sigma", "0.01"},
                                     {"faults.kill_rate", "5"},
                                     {"faults.rejoin_after", "0.2"},
                                     {"faults.exception_rate", "0.002"}});
    std::string a, b;
    const RunResult ra = Gossip(o).run("det_faults_a", &a);
    const RunResult rb = Gossip(o).run("det_faults_b", &b);
    EXPECT_EQ(a, b) << policy;
    EXPECT_EQ(ra.params, rb.params) << policy;
    EXPECT_GT(ra.membership.size(), 4u) << policy;
  }
}

// Every policy, a synchronous one with a global average among them, on
// several graphs: the run ends at its budget (no deadlock on a dead
// in-peer), the membership log is the fault plan's, the rows count the
// live workers, and it learns.
TEST(GossipSim, EveryPolicyRunsThroughKillsAndRejoins) {
  std::vector<std::vector<Override>> cases;
  for (const std::string& policy : Policies()) {
    for (const std::string topo : {"ring", "onepeer-exp", "exp", "random-matching"}) {
      cases.push_back({{"policy.name", policy}, {"gossip.topology", topo}});
    }
  }
  cases.push_back({{"policy.name", "dpsgd"}, {"gossip.global_every", "4"}});
  cases.push_back({{"policy.name", "sgp"}, {"gossip.global_every", "5"}});
  cases.push_back({{"policy.name", "dpsgd"}, {"gossip.order", "atc"}});
  for (const std::vector<Override>& o : cases) {
    SCOPED_TRACE(o[0].second + " " + o[1].first + "=" + o[1].second);
    std::string csv;
    const RunResult r = Gossip(Churn(o)).run("churn", &csv);
    EXPECT_TRUE(r.stopped.empty()) << r.stopped;
    EXPECT_DOUBLE_EQ(r.train_s, 2.0);
    ASSERT_EQ(r.membership.size(), 3u);
    EXPECT_EQ(r.membership[0].worker, 1);
    EXPECT_FALSE(r.membership[0].join);
    EXPECT_DOUBLE_EQ(r.membership[0].time, 0.5);
    EXPECT_EQ(r.membership[1].worker, 2);
    EXPECT_FALSE(r.membership[1].join);
    EXPECT_EQ(r.membership[2].worker, 1);
    EXPECT_TRUE(r.membership[2].join);
    EXPECT_DOUBLE_EQ(r.membership[2].time, 1.0);
    const std::vector<double> live = testing::csv_column(csv, "live_workers");
    const std::vector<double> time = testing::csv_column(csv, "time_s");
    for (size_t i = 0; i < live.size(); ++i) {
      const double t = time[i];
      // A row at a fault's time is taken before it.
      EXPECT_EQ(live[i], t <= 0.5 ? 5 : t <= 0.6 ? 4 : t <= 1.0 ? 3 : 4) << "at " << t;
    }
    for (double x : testing::csv_column(csv, "consensus")) EXPECT_TRUE(std::isfinite(x));
    // Worker 2 stopped at 0.6 s: fewer steps than the others.
    EXPECT_LT(r.worker_pushes[2], r.worker_pushes[0]);
    EXPECT_GT(r.last.test_acc, 0.3);
  }
}

// Nothing is sent to a worker once it left: worker 1 (killed at 0.6 s,
// never back; passive under adpsgd) receives no more by 2 s than by 0.62 s
// (messages in flight at its kill arrive by then).
TEST(GossipSim, NothingIsSentToALeaver) {
  for (const std::string& policy : Policies()) {
    for (const std::string topo : {"ring", "complete"}) {
      SCOPED_TRACE(policy + " on " + topo);
      auto received = [&](const std::string& budget) {
        const RunResult r = Gossip({{"policy.name", policy},
                                    {"gossip.topology", topo},
                                    {"faults.kill", "worker:1@0.6s"},
                                    {"train.budget", budget}})
                                .run("leaver");
        return r.network.received.at(1);
      };
      const double at_kill = received("0.62"), at_end = received("2");
      EXPECT_GT(at_kill, 0);
      EXPECT_EQ(at_end, at_kill);
    }
  }
}

// Shards follow the live set: worker 2 killed at 0.6 s for good, by 2 s
// (several epochs later) the four live workers' shards (read back from the
// final checkpoint's membership part) cover the whole training set again.
TEST(GossipSim, ShardsFollowTheLiveSet) {
  for (const std::string& policy : Policies()) {
    SCOPED_TRACE(policy);
    Gossip g({{"policy.name", policy},
              {"faults.kill", "worker:2@0.6s"},
              {"train.checkpoint_every", "100"}});
    const Job j = g.identified_job();
    const Checkpoint ck = g.run_to_last_checkpoint("gossip_shards");
    Membership m(j, 5);
    StateReader r(ck.blob("membership"), "membership.bin");
    m.load(r);
    int64_t covered = 0;
    for (int w : {0, 1, 3, 4}) covered += m.sampler_for(w).shard_size();
    EXPECT_EQ(covered, g.train.size());
  }
}

// gossip.eval_workers evaluates the live workers' models only: worker 2
// (killed at 0.6 s for good) holds no model, and the lowest accuracy stays
// that of a trained model.
TEST(GossipSim, EvalWorkersSkipsTheWorkersThatLeft) {
  for (const std::string& policy : Policies()) {
    SCOPED_TRACE(policy);
    std::string csv;
    Gossip({{"policy.name", policy},
            {"faults.kill", "worker:2@0.6s"},
            {"gossip.eval_workers", "true"}})
        .run("eval_workers", &csv);
    const std::vector<double> low = testing::csv_column(csv, "worker_acc_min");
    ASSERT_FALSE(low.empty());
    EXPECT_GT(low.back(), 0.3);
  }
}

// Below train.min_workers the run stops with the run layer's line (the CLI
// exits 3 on it: cli_test).
TEST(GossipSim, TooFewLiveWorkersStopTheRun) {
  for (const std::string& policy : Policies()) {
    const RunResult r =
        Gossip(Churn({{"policy.name", policy}, {"train.min_workers", "4"}})).run("min");
    EXPECT_NE(r.stopped.find("3 of 5 workers live, fewer than train.min_workers = 4: worker 2 "
                             "left at 0.600 s"),
              std::string::npos)
        << policy << ": " << r.stopped;
    EXPECT_LT(r.train_s, 0.7);
  }
}

// sgp with lr 0 through kills and rejoins: at every cut the total
// push-sum weight (the workers' and the shares in flight or delivered and
// not yet combined) is n and the total mass is n x0, read from the head of
// the simulator's checkpoint (the models, then the messages).
TEST(GossipSim, PushSumKeepsTotalWeightAndMassThroughChurn) {
  for (const std::string budget :
       {"0.3", "0.5", "0.55", "0.6", "0.61", "0.95", "1.0", "1.02", "1.5"}) {
    SCOPED_TRACE(budget);
    // A slow network (shares in flight most of the time) and many changes.
    Gossip g(Churn({{"policy.name", "sgp"},
                    {"gossip.topology", "exp"},
                    {"train.budget", budget},
                    {"stragglers.fraction", "0.4"},
                    {"stragglers.sigma", "0.01"},
                    {"sim.latency", "0.006"},
                    {"faults.kill_rate", "20"},
                    {"faults.rejoin_after", "0.05"},
                    {"train.checkpoint_every", "100"}}));
    g.config.optim.lr = 0;
    const Job j = g.identified_job();
    const Checkpoint ck = g.run_to_last_checkpoint("gossip_mass");
    StateReader r(ck.blob("gossip"), "gossip.bin");
    (void)r.get<uint32_t>();
    const int n = r.get<int32_t>();
    ASSERT_EQ(n, 5);
    (void)r.get<double>();
    (void)r.get<double>();
    const std::vector<float>& x0 = j.initial_params;
    GossipModels m(n, x0, LocalUpdate{});
    m.load(r);
    double weight = 0;
    std::vector<double> mass(x0.size(), 0.0);
    for (int i = 0; i < n; ++i) {
      weight += m.weight(i);
      for (size_t p = 0; p < x0.size(); ++p) mass[p] += m.x(i)[p];
    }
    auto message = [&] {
      (void)r.get<int32_t>();  // from
      (void)r.get<int32_t>();  // to
      (void)r.get<int32_t>();  // kind
      (void)r.get<int64_t>();  // round
      (void)r.get<int64_t>();  // generation
      (void)r.get<int32_t>();  // life
      const double w = r.get<double>();
      const std::vector<float> x = r.get_vec<float>();
      weight += w;
      for (size_t p = 0; p < x.size(); ++p) mass[p] += x[p];
    };
    for (uint64_t k = r.get<uint64_t>(); k > 0; --k) {
      (void)r.get<int64_t>();
      message();
    }
    for (uint64_t k = r.get<uint64_t>(); k > 0; --k) {
      (void)r.get<int64_t>();
      (void)r.get<int64_t>();
      (void)r.get<int64_t>();
      message();
    }
    EXPECT_NEAR(weight, 5.0, 1e-9);
    double norm = 0, diff = 0;
    for (size_t p = 0; p < x0.size(); ++p) {
      norm += 25.0 * x0[p] * x0[p];
      diff += std::pow(mass[p] - 5.0 * x0[p], 2);
    }
    EXPECT_LE(std::sqrt(diff), 1e-6 * std::sqrt(norm));
    EXPECT_TRUE(ck.has("membership"));
  }
}

TEST(GossipSim, RefusedCombinationsNameTheKey) {
  auto refused = [](const std::vector<Override>& o, const std::string& what) {
    try {
      Gossip g(o);
      ADD_FAILURE() << "accepted: " << what;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  refused({{"compress.push", "topk:0.1"}}, "gossip.order = 'cta'");  // CHOCO is atc
  refused({{"policy.name", "adpsgd"}, {"gossip.global_every", "4"}}, "gossip.global_every");
  refused({{"optim.kind", "adam"}}, "optim.kind");
  refused({{"gossip.topology", "hypercube"}}, "gossip.topology");
  refused({{"policy.name", "pdsgdm"}}, "pdsgdm:P");
  refused({{"train.servers", "2"}}, "train.servers");
  // No server: 0 says so, 1 (the default) is ignored; both run.
  EXPECT_NO_THROW(Gossip(std::vector<Override>{{"train.servers", "0"}}));
  EXPECT_NO_THROW(Gossip(std::vector<Override>{{"train.runtime", "mpi"}, {"train.servers", "0"}}));
  // Checkpoints on every runtime (threads and mpi: gossip_threads_test,
  // mpi_gossip_test).
  for (const std::string runtime : {"threads", "mpi"}) {
    EXPECT_NO_THROW(
        Gossip(std::vector<Override>{{"train.runtime", runtime}, {"train.checkpoint_every", "1"}}));
  }
}

// The run layer's stops hold here as everywhere: a diverging run ends with
// one line (the CLI exits 3 on it).
TEST(GossipSim, DivergenceStopsTheRun) {
  for (const std::string& policy : Policies()) {
    SCOPED_TRACE(policy);
    const RunResult r = Gossip({{"policy.name", policy}, {"optim.lr", "1e6"}}).run("diverge");
    EXPECT_FALSE(r.stopped.empty());
  }
}

// The row's worker_acc_* columns (gossip_row, shared by sim and threads)
// are the workers' own de-biased models evaluated one by one, and the
// average model is evaluated after them (its accuracy is test_acc).
TEST(GossipSim, TheWorkerAccuracyColumnsAreEachDebiasedModelEvaluated) {
  Gossip g(std::vector<Override>{{"gossip.eval_workers", "true"}});
  g.accuracy_is_param0 = true;  // the accuracy shows the scale of what was evaluated
  const Job j = g.job();
  const int n = 5;
  const size_t np = j.initial_params.size();
  GossipModels models(n, j.initial_params, gossip_local_update(g.config));
  for (int i = 0; i < n; ++i) {  // models far apart, push-sum weights != 1
    std::span<float> x = models.x(i);
    for (size_t p = 0; p < np; ++p) x[p] = static_cast<float>(std::sin(1.0 + i * 7.0 + p * 0.37));
    models.weight(i) = 0.5 + 0.25 * i;
  }
  const Dataset test = head(*j.test, g.config.train.eval_samples);
  std::vector<float> params(np), grads(np);
  std::unique_ptr<Model> m = j.make_model();
  m->bind(params, grads);
  std::vector<double> acc;
  for (int i = 0; i < n; ++i) {
    models.debiased(i, params);
    acc.push_back(m->evaluate(test).accuracy);
  }
  models.average(params);
  const double avg_acc = m->evaluate(test).accuracy;
  GossipCounts counts;
  const MetricsRow r =
      gossip_row(g.config, models, *m, params, test, j.train->size(), 1.0, counts, 0.0);
  const WorkerAccuracy want = worker_accuracy(acc);
  ASSERT_LT(want.min, want.max) << "the models scored alike: the test cannot tell them";
  EXPECT_TRUE(r.has_worker_eval);
  EXPECT_EQ(r.worker_acc_min, want.min);
  EXPECT_EQ(r.worker_acc_mean, want.mean);
  EXPECT_EQ(r.worker_acc_max, want.max);
  EXPECT_EQ(r.test_acc, avg_acc);
  std::vector<double> raw;  // what the probe reads from the un-de-biased models
  for (int i = 0; i < n; ++i) raw.push_back(models.x(i)[0]);
  EXPECT_NE(worker_accuracy(raw).mean, want.mean) << "the test cannot tell de-biasing";
  std::vector<float> avg(np);
  models.average(avg);
  EXPECT_EQ(params, avg) << "params must hold the average model after the row";
}

// gossip.eval_workers: the spread of the workers' own models. At t = 0
// every worker holds the initial model, so min = mean = max = the average
// model's accuracy; later they differ (a ring mixes slowly), and the run is
// otherwise the run without the option, column for column.
TEST(GossipSim, EvalWorkersReportsTheSpreadOfTheWorkersOwnModels) {
  for (const auto& [policy, topology] :
       std::vector<std::pair<std::string, std::string>>{{"dpsgd", "ring"}, {"sgp", "star"}}) {
    SCOPED_TRACE(policy);
    const std::vector<Override> o = {
        {"policy.name", policy}, {"gossip.topology", topology}, {"optim.lr", "0.5"}};
    std::vector<Override> with = o;
    with.push_back({"gossip.eval_workers", "true"});
    std::string plain, spread;
    Gossip(o).run("ew_plain_" + policy, &plain);
    Gossip(with).run("ew_" + policy, &spread);
    for (const char* col : {"test_acc", "test_loss", "consensus", "samples", "time_s"}) {
      EXPECT_EQ(testing::csv_column(plain, col), testing::csv_column(spread, col)) << col;
    }
    const std::vector<double> acc = testing::csv_column(spread, "test_acc");
    const std::vector<double> lo = testing::csv_column(spread, "worker_acc_min");
    const std::vector<double> mean = testing::csv_column(spread, "worker_acc_mean");
    const std::vector<double> hi = testing::csv_column(spread, "worker_acc_max");
    ASSERT_EQ(lo.size(), acc.size());
    ASSERT_GT(acc.size(), 4u);
    EXPECT_EQ(lo[0], acc[0]);
    EXPECT_EQ(mean[0], acc[0]);
    EXPECT_EQ(hi[0], acc[0]);
    int apart = 0;
    for (size_t i = 0; i < acc.size(); ++i) {
      EXPECT_LE(lo[i], mean[i] + 1e-12);
      EXPECT_LE(mean[i], hi[i] + 1e-12);
      if (hi[i] > lo[i]) ++apart;
    }
    EXPECT_GT(apart, 0) << "every worker's model scored alike at every row";
  }
}

// ---- CHOCO compressed gossip (runtime/gossip_choco.h)

// One synchronous CHOCO round of every worker, as the runtimes run it:
// every worker encodes its round, then every worker combines.
void ChocoRound(ChocoGossip& choco, GossipModels& m, const Topology& topo, int64_t step) {
  const int n = m.size();
  std::vector<std::vector<float>> q(static_cast<size_t>(n), std::vector<float>(m.num_params()));
  std::string bytes;
  for (int i = 0; i < n; ++i) choco.encode(i, step, m.x(i), &bytes, q[static_cast<size_t>(i)]);
  for (int i = 0; i < n; ++i) {
    const MixRow row = topo.mixing_row(i, step);
    std::vector<std::span<const float>> qs;
    for (const auto& [j, w] : row) qs.push_back(q[static_cast<size_t>(j)]);
    choco.combine(i, row, qs, m.x(i));
  }
}

std::vector<float> Normal(size_t n, uint64_t stream) {
  Rng r(7, stream);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(r.normal());
  return v;
}

// n workers of np parameters, worker i at Normal(np, i), momenta 0.
GossipModels RandomModels(int n, size_t np) {
  GossipModels m(n, std::vector<float>(np, 0.0f), LocalUpdate{});
  for (int i = 0; i < n; ++i) {
    const std::vector<float> x = Normal(np, static_cast<uint64_t>(i));
    std::copy(x.begin(), x.end(), m.x(i).begin());
  }
  return m;
}

// lr 0, 5 workers on a ring, each from its own random model: CHOCO's
// consensus step x_i += gamma (s_i - xhat_i) keeps sum_i x_i (W doubly
// stochastic: sum_i s_i = sum_i xhat_i) to 1e-6 relative at every round,
// and the consensus distance goes to 0, for the biased and the unbiased
// compressors.
TEST(GossipChoco, LrZeroConservesTheSumAndReachesConsensus) {
  for (const auto& [spec, gamma] : std::vector<std::pair<std::string, std::string>>{
           {"topk:0.1", "0.2"}, {"randomk:0.2", "0.2"}, {"qsgd:4", "0.5"}}) {
    SCOPED_TRACE(spec);
    Gossip g({{"gossip.order", "atc"}, {"compress.push", spec}, {"gossip.consensus_lr", gamma}});
    const int n = 5;
    const size_t np = 300;
    GossipModels m = RandomModels(n, np);
    // The public copies start at 0, as in the paper (s_i = 0 matches).
    ChocoGossip choco(g.config, {}, std::vector<float>(np, 0.0f), n);
    const Topology topo("ring", "uniform", n, 1);
    auto sum = [&] {
      std::vector<double> s(np, 0.0);
      for (int i = 0; i < n; ++i) {
        for (size_t p = 0; p < np; ++p) s[p] += m.x(i)[p];
      }
      return s;
    };
    const std::vector<double> s0 = sum();
    double norm0 = 0;
    for (double v : s0) norm0 += v * v;
    const double xi0 = m.consensus().xi;
    double xi_half = 0;
    for (int64_t t = 0; t < 2000; ++t) {
      ChocoRound(choco, m, topo, t);
      const std::vector<double> s = sum();
      double d = 0;
      for (size_t p = 0; p < np; ++p) d += (s[p] - s0[p]) * (s[p] - s0[p]);
      ASSERT_LE(std::sqrt(d), 1e-6 * std::sqrt(norm0)) << "round " << t;
      if (t == 999) xi_half = m.consensus().xi;
    }
    EXPECT_LT(xi_half, 0.1 * xi0);
    EXPECT_LT(m.consensus().xi, 1e-3 * xi0);
  }
}

// With the none compressor and gamma = 1 CHOCO is plain adapt-then-combine
// gossip: q_i = x_i - xhat_i, xhat_i = x_i, x_i <- s_i = sum_j w_ij x_j.
// dpsgd (a round every step) and pdsgdm:3 (every third), with momentum.
TEST(GossipChoco, NoneWithGammaOneIsPlainGossip) {
  for (const int period : {1, 3}) {
    SCOPED_TRACE(period);
    Gossip g(std::vector<Override>{{"gossip.order", "atc"}});
    ASSERT_TRUE(g.config.compress.push.none());
    ASSERT_EQ(g.config.gossip.consensus_lr, 1.0);
    const int n = 5;
    const size_t np = 300;
    const std::vector<float> init = Normal(np, 99);
    const LocalUpdate up{"momentum", 0.9f, 0.0f};
    GossipModels plain(n, init, up), choco_m(n, init, up);
    ChocoGossip choco(g.config, {}, init, n);
    const Topology topo("torus", "metropolis", n, 1);
    for (int64_t step = 0; step < 150; ++step) {
      for (int i = 0; i < n; ++i) {
        const std::vector<float> grad = Normal(np, 1000 + static_cast<uint64_t>(step * n + i));
        plain.local_step(i, grad, 0.05f);
        choco_m.local_step(i, grad, 0.05f);
      }
      if ((step + 1) % period != 0) continue;
      plain.mix(topo, step);
      ChocoRound(choco, choco_m, topo, step);
    }
    double worst = 0;
    for (int i = 0; i < n; ++i) {
      for (size_t p = 0; p < np; ++p) {
        worst = std::max(worst, std::abs(static_cast<double>(plain.x(i)[p]) - choco_m.x(i)[p]));
      }
    }
    EXPECT_LE(worst, 1e-6);
    EXPECT_GT(plain.consensus().xi, 1e-3);  // the models differ: the comparison means something
  }
}

// The same in the simulator: topk:1 keeps every coordinate (lossless), so
// CHOCO with gamma = 1 runs plain atc gossip; on a network fast enough that
// its bigger messages cost no step, the runs take the same steps and end
// with the same model (1e-6).
TEST(GossipChoco, LosslessChocoIsPlainGossipInTheSimulator) {
  for (const std::string policy : {"dpsgd", "pdsgdm:3"}) {
    SCOPED_TRACE(policy);
    const std::vector<Override> base = {{"policy.name", policy},
                                        {"gossip.order", "atc"},
                                        {"optim.kind", "momentum"},
                                        {"sim.bandwidth", "1e15"}};
    std::vector<Override> choco = base;
    choco.push_back({"compress.push", "topk:1"});
    choco.push_back({"compress.sim_ns_per_param", "0"});
    const RunResult a = Gossip(base).run("choco_plain");
    const RunResult b = Gossip(choco).run("choco_lossless");
    ASSERT_EQ(a.gradients, b.gradients);
    ASSERT_EQ(a.params.size(), b.params.size());
    for (size_t p = 0; p < a.params.size(); ++p) EXPECT_NEAR(a.params[p], b.params[p], 1e-6) << p;
    EXPECT_NEAR(a.last.consensus, b.last.consensus, 1e-6);
    EXPECT_GT(a.last.consensus, 0);
  }
}

// The simulator's workers advance in step here (no stragglers, a network
// too fast to matter): after K steps every worker's model is what the
// shared step computes by hand (tests/choco_reference.h), bit for bit, with
// the global averages resetting the public copies.
TEST(GossipChoco, TheSimulatorIsTheReferenceStepByStep) {
  for (const std::string every : {"0", "3"}) {
    SCOPED_TRACE("global_every " + every);
    const int steps = 40;
    Gossip g({{"gossip.order", "atc"},
              {"compress.push", "qsgd:4"},
              {"gossip.consensus_lr", "0.5"},
              {"gossip.global_every", every},
              {"optim.kind", "momentum"},
              {"sim.latency", "0"},
              {"sim.bandwidth", "1e15"},
              {"compress.sim_ns_per_param", "0"},
              // Step K + 1's gradient not yet applied at the end.
              {"train.budget", std::to_string(0.01 * steps + 0.005)}});
    const RunResult r = g.run("choco_reference");
    ASSERT_EQ(r.gradients, 5 * steps);
    EXPECT_EQ(r.params, testing::reference_choco(g.config, g.job(), steps));
  }
}

// What a gossip step sends is the encoded message: a ring node sends one to
// each of its 2 neighbours and receives 2 per step.
TEST(GossipChoco, BytesPerStepAreTheEncodedSize) {
  for (const std::string spec : {"topk:0.1", "qsgd:4", "sign"}) {
    SCOPED_TRACE(spec);
    Gossip g({{"gossip.order", "atc"},
              {"compress.push", spec},
              {"compress.sim_ns_per_param", "0"},
              {"train.budget", "1"}});
    const Job j = g.job();
    const std::unique_ptr<Model> model = j.make_model();
    const size_t msg =
        ChocoGossip(g.config, model->param_shapes(), j.initial_params, 1).message_bytes();
    EXPECT_LT(msg, 4 * j.initial_params.size());
    const RunResult r = g.run("choco_bytes");
    // A round may be in flight at the end: within 2 %.
    EXPECT_NEAR(r.gossip.bytes_per_node_step, 2 * 2 * static_cast<double>(msg), 0.02 * 4 * msg);
  }
}

// On a slow network compression pays: a step's virtual time is its compute
// plus the exchange, and the exchange is the encoded bytes.
TEST(GossipChoco, CompressionSpeedsUpASlowNetwork) {
  const std::vector<Override> slow = {{"gossip.order", "atc"},
                                      {"sim.bandwidth", "2e4"},
                                      {"train.budget", "2"},
                                      {"compress.sim_ns_per_param", "0"}};
  std::vector<Override> topk = slow;
  topk.push_back({"compress.push", "topk:0.05"});
  const RunResult a = Gossip(slow).run("choco_slow_plain");
  const RunResult b = Gossip(topk).run("choco_slow_topk");
  const double per_step_a = a.train_s * 5 / static_cast<double>(a.gradients);
  const double per_step_b = b.train_s * 5 / static_cast<double>(b.gradients);
  EXPECT_LT(per_step_b, 0.5 * per_step_a) << per_step_a << " " << per_step_b;
  EXPECT_LT(b.gossip.bytes_per_node_step, 0.2 * a.gossip.bytes_per_node_step);
}

TEST(GossipChoco, ResumesExactly) {
  ExpectExactResume({{"policy.name", "dpsgd"},
                     {"gossip.order", "atc"},
                     {"optim.kind", "momentum"},
                     {"compress.push", "topk:0.2"},
                     {"gossip.consensus_lr", "0.5"},
                     {"compress.sim_ns_per_param", "0"}},
                    "choco_dpsgd");
  ExpectExactResume({{"policy.name", "pdsgdm:3"},
                     {"gossip.global_every", "6"},
                     {"gossip.topology", "exp"},
                     {"compress.push", "qsgd:4"},
                     {"compress.sim_ns_per_param", "1"}},
                    "choco_pdsgdm");
  ExpectExactResume({{"policy.name", "dpsgd"},
                     {"gossip.order", "atc"},
                     {"compress.push", "randomk:0.3"},
                     {"stragglers.fraction", "0.4"},
                     {"stragglers.sigma", "0.02"},
                     {"compress.sim_ns_per_param", "0"}},
                    "choco_randomk");
}

// A global average resets every public copy to the average: right after it
// the consensus distance is 0 and stays exactly 0 with lr 0 (every q is 0).
TEST(GossipChoco, GlobalAverageResetsThePublicCopies) {
  Gossip g({{"gossip.order", "atc"}, {"compress.push", "topk:0.1"}});
  const int n = 5;
  const size_t np = 100;
  GossipModels m = RandomModels(n, np);
  ChocoGossip choco(g.config, {}, std::vector<float>(np, 0.0f), n);
  const Topology topo("ring", "uniform", n, 1);
  for (int64_t t = 0; t < 5; ++t) ChocoRound(choco, m, topo, t);
  m.global_average();
  for (int i = 0; i < n; ++i) choco.reset(i, m.x(i));
  for (int64_t t = 5; t < 10; ++t) ChocoRound(choco, m, topo, t);
  EXPECT_EQ(m.consensus().xi, 0.0);
  for (int i = 0; i < n; ++i) {
    for (size_t p = 0; p < np; ++p) EXPECT_EQ(choco.xhat(i)[p], static_cast<double>(m.x(i)[p]));
  }
}

TEST(GossipChoco, RefusedCombinationsNameTheKey) {
  auto refused = [](const std::vector<Override>& o, const std::string& what) {
    try {
      Gossip g(o);
      ADD_FAILURE() << "accepted: " << what;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  const Override atc{"gossip.order", "atc"}, topk{"compress.push", "topk:0.1"};
  refused({topk}, "gossip.order = 'cta'");
  refused({{"policy.name", "sgp"}, topk}, "policy 'sgp'");
  refused({{"policy.name", "adpsgd"}, topk}, "policy 'adpsgd'");
  refused({atc, topk, {"gossip.topology", "onepeer-exp"}}, "gossip.topology = 'onepeer-exp'");
  refused({atc, topk, {"gossip.topology", "random-matching"}},
          "gossip.topology = 'random-matching'");
  refused({atc, {"compress.pull", "topk:0.1"}}, "compress.pull = 'topk:0.1'");
  refused({atc, topk, {"faults.kill", "worker:1@1s"}}, "[faults] with compress.push");
  refused({atc, topk, {"gossip.consensus_lr", "0"}}, "gossip.consensus_lr = 0");
  refused({atc, topk, {"gossip.consensus_lr", "1.01"}}, "gossip.consensus_lr = 1.01");
  // What composes: every static topology and weighting, dpsgd (atc) and pdsgdm.
  for (const std::string topo : {"ring", "torus", "exp", "complete", "star"}) {
    EXPECT_NO_THROW(Gossip(std::vector<Override>{atc, topk, {"gossip.topology", topo}})) << topo;
    EXPECT_NO_THROW(Gossip(std::vector<Override>{{"policy.name", "pdsgdm:2"},
                                                 topk,
                                                 {"gossip.topology", topo},
                                                 {"gossip.weights", "metropolis"},
                                                 {"gossip.global_every", "4"}}))
        << topo;
  }
}

}  // namespace
}  // namespace hsgd
