// The gossip policies on the threads runtime (runtime/gossip_threads.h)
// with the plain-C++ linear model: every policy and topology runs for odd
// n, lr 0 keeps the average model, the global average and the budget;
// checkpoints restore every worker's state exactly and a resume continues.
#include "hsgd/runtime/gossip_threads.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <tuple>

#include "hsgd/core/error.h"
#include "hsgd/core/faults.h"
#include "hsgd/policy/gossip.h"
#include "hsgd/runtime/gossip_checkpoint.h"
#include "hsgd/runtime/gossip_choco.h"
#include "hsgd/runtime/gossip_row.h"
#include "hsgd/runtime/gossip_sim.h"
#include "hsgd/runtime/membership.h"
#include "hsgd/runtime/threads_runtime.h"
#include "linear_job.h"

namespace hsgd {
namespace {

struct Gossip : testing::LinearJob {
  explicit Gossip(const std::vector<Override>& o)
      : LinearJob({{"train.runtime", "threads"},
                   {"policy.name", "dpsgd"},
                   {"train.workers", "5"},
                   {"train.batch", "16"},
                   {"train.budget", "0.3"},
                   {"train.eval_every", "0.1"},
                   {"optim.lr", "0.1"}},
                  o) {}

  RunResult run(const std::string& name) {
    const std::string dir = testing::fresh_dir("gossip_threads_" + name);
    Recorder rec(dir);
    RunResult r = GossipThreadsRuntime().run(job(), &rec, nullptr);
    rec.finish();
    return r;
  }
};

const std::vector<std::string>& Policies() {
  static const std::vector<std::string> p = {"dpsgd", "adpsgd", "sgp", "pdsgdm:3"};
  return p;
}

// SlowMo's outer step is taken at every global average (gossip_sim_test
// has the same): with a tiny local.outer_lr the run stays within about one
// step of the initial model (a worker may stop between its step and the
// barrier), while the plain average trains.
TEST(GossipThreads, TheOuterStepIsTakenAtEveryGlobalAverage) {
  for (const std::string policy : {"dpsgd", "sgp"}) {
    SCOPED_TRACE(policy);
    const std::vector<Override> o = {{"policy.name", policy}, {"gossip.global_every", "1"}};
    Gossip plain(o);
    std::vector<Override> with = o;
    with.push_back({"local.outer_lr", "1e-6"});
    Gossip held(with);
    const RunResult rp = plain.run("outer_plain"), rh = held.run("outer_held");
    const double moved = testing::distance(rp.params, plain.job().initial_params);
    const double held_moved = testing::distance(rh.params, held.job().initial_params);
    ASSERT_GT(rp.gossip.global_averages, 20);
    ASSERT_GT(rh.gossip.global_averages, 20);
    EXPECT_LT(held_moved, 0.2 * moved);
  }
}

TEST(GossipThreads, EveryPolicyAndTopologyRunsForOddN) {
  for (const std::string& policy : Policies()) {
    for (const std::string& topo : topology_names()) {
      SCOPED_TRACE(policy + " on " + topo);
      const RunResult r =
          Gossip({{"policy.name", policy}, {"gossip.topology", topo}, {"train.workers", "7"}})
              .run("odd");
      EXPECT_TRUE(r.stopped.empty()) << r.stopped;
      EXPECT_NEAR(r.train_s, 0.3, 1e-9);
      EXPECT_GT(r.gradients, 7);
      EXPECT_TRUE(r.gossip.on);
      EXPECT_TRUE(r.last.has_consensus);
      EXPECT_TRUE(std::isfinite(r.last.consensus));
      EXPECT_GT(r.last.test_acc, 0.3);
    }
  }
}

// lr 0: the average model stays the initial one (1e-6 relative).
TEST(GossipThreads, LrZeroKeepsTheAverageModel) {
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
  }
}

TEST(GossipThreads, GlobalAveragesAndEpochTarget) {
  const RunResult r = Gossip({{"policy.name", "sgp"},
                              {"gossip.global_every", "4"},
                              {"train.budget", "0"},
                              {"train.epochs", "2"}})
                          .run("pga");
  EXPECT_TRUE(r.stopped.empty()) << r.stopped;
  EXPECT_GT(r.gossip.global_averages, 2);
  EXPECT_GE(r.last.epoch, 2.0);
}

// CHOCO on threads: it learns, and a node's bytes per step are its 2 ring
// neighbours' encoded messages in and its own 2 out.
TEST(GossipThreads, ChocoLearnsAndCountsTheEncodedBytes) {
  for (const std::string spec : {"topk:0.2", "qsgd:4"}) {
    SCOPED_TRACE(spec);
    Gossip g({{"gossip.order", "atc"}, {"compress.push", spec}, {"gossip.consensus_lr", "0.5"}});
    const Job j = g.job();
    const size_t msg =
        ChocoGossip(g.config, j.make_model()->param_shapes(), j.initial_params, 1).message_bytes();
    const RunResult r = g.run("choco");
    EXPECT_TRUE(r.stopped.empty()) << r.stopped;
    EXPECT_GT(r.last.test_acc, 0.3);
    EXPECT_GT(r.gossip.rounds, 0);
    // A worker stopped inside a round has posted it without finishing it.
    EXPECT_NEAR(r.gossip.bytes_per_node_step, 4.0 * static_cast<double>(msg), 0.1 * 4 * msg);
  }
}

// The run layer's stops hold here as everywhere: a diverging run ends with
// one line (the CLI exits 3 on it).
TEST(GossipThreads, DivergenceStopsTheRun) {
  for (const std::string& policy : Policies()) {
    SCOPED_TRACE(policy);
    const RunResult r = Gossip({{"policy.name", policy}, {"optim.lr", "1e6"}}).run("diverge");
    EXPECT_FALSE(r.stopped.empty());
  }
}

// ---- checkpoints

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Every blob of a checkpoint, as its file holds it.
std::map<std::string, std::string> blobs(const Checkpoint& ck) {
  std::map<std::string, std::string> out;
  for (const auto& [name, entry] : ck.entries) out[name] = slurp(ck.path + "/" + name + ".bin");
  return out;
}

// A run of `g` into `dir` with a checkpoint every train.checkpoint_every
// (all kept), resumed from `resume` when not null (its rows kept when `dir`
// holds them: the run's own directory).
RunResult run_with_checkpoints(Gossip& g, const std::string& dir, const Checkpoint* resume,
                               bool* opened = nullptr) {
  Job j = g.job();
  CheckpointStore store(dir, 100);
  j.checkpoints = &store;
  j.resume = resume;
  if (opened) j.open_outputs = [opened] { *opened = true; };
  const bool keep = resume && std::filesystem::exists(dir + "/metrics.csv");
  std::unique_ptr<Recorder> rec =
      keep ? std::make_unique<Recorder>(dir, resume->info.rows) : std::make_unique<Recorder>(dir);
  RunResult r = GossipThreadsRuntime().run(j, rec.get(), nullptr);
  rec->finish();
  return r;
}

// What a checkpoint says of every worker, decoded by the runtime's own
// readers.
struct Decoded {
  std::vector<GossipWorkerState> workers;
  std::vector<double> weights;  // push-sum weights
  double total_weight = 0;      // models' plus messages' (push-sum mass)
};
Decoded decode(const Gossip& g, const Checkpoint& ck) {
  const Job j = g.job();
  const int n = g.config.train.workers;
  GossipModels models(n, j.initial_params, gossip_local_update(g.config));
  DelayModel delays(g.config.stragglers, n, g.config.train.seed);
  std::vector<float> grad(j.initial_params.size());
  // With [faults], the shards of the live set (as the runtime reads them).
  Membership membership(j, n);
  if (ck.has("membership")) ck.read("membership", [&](StateReader& r) { membership.load(r); });
  Decoded d;
  for (int w = 0; w < n; ++w) {
    ShardSampler sampler = membership.changed() ? membership.sampler_for(w) : make_sampler(j, w);
    GossipWorkerState st;
    ck.read(gossip_worker_blob(w), [&](StateReader& r) {
      load_gossip_worker(r, w, n, models, w, sampler, delays, &st, grad);
    });
    d.weights.push_back(models.weight(w));
    d.total_weight += models.weight(w);
    for (const GossipMail& m : st.inbox) d.total_weight += m.weight;
    d.workers.push_back(std::move(st));
  }
  return d;
}

std::vector<std::vector<Override>> CheckpointedJobs() {
  return {
      {{"policy.name", "dpsgd"}, {"optim.kind", "momentum"}, {"optim.momentum", "0.9"}},
      {{"policy.name", "dpsgd"}, {"gossip.order", "atc"}, {"optim.kind", "nesterov"}},
      {{"policy.name", "sgp"}, {"gossip.topology", "onepeer-exp"}, {"optim.kind", "momentum"}},
      {{"policy.name", "sgp"}, {"gossip.global_every", "4"}},
      {{"policy.name", "pdsgdm:3"}, {"gossip.global_every", "6"}, {"optim.kind", "momentum"}},
      {{"policy.name", "dpsgd"},  // SlowMo
       {"gossip.global_every", "4"},
       {"local.outer", "nesterov"},
       {"local.outer_momentum", "0.5"}},
      {{"policy.name", "adpsgd"}, {"stragglers.fraction", "0.4"}, {"stragglers.sigma", "0.002"}},
      // CHOCO: the public copies and s (gossip_choco-W) restore exactly too.
      {{"policy.name", "dpsgd"},
       {"gossip.order", "atc"},
       {"compress.push", "topk:0.2"},
       {"gossip.consensus_lr", "0.5"},
       {"optim.kind", "momentum"}},
      {{"policy.name", "pdsgdm:3"}, {"gossip.global_every", "6"}, {"compress.push", "qsgd:4"}},
  };
}

std::string describe(const std::vector<Override>& o) {
  std::string out;
  for (const auto& [k, v] : o) out += k + "=" + v + " ";
  return out;
}

// Every checkpoint (the periodic cuts, with workers paused between steps or
// waiting for their in-peers, and the final one) restores exactly: a run
// resumed from it that ends at once (its budget is the cut's time) writes a
// final checkpoint whose every part (models, momenta, push-sum weights,
// samplers, steps and phases, gradients in hand, messages not yet taken,
// counters, the run layer's schedule) is byte for byte the one it read.
TEST(GossipThreadsCheckpoint, RestoredStateIsTheSavedStateExactly) {
  for (const std::vector<Override>& o : CheckpointedJobs()) {
    SCOPED_TRACE(describe(o));
    std::vector<Override> with = o;
    with.push_back({"train.checkpoint_every", "0.1"});
    Gossip a(with);
    const std::string dir = testing::fresh_dir("gossip_threads_ckpt");
    const RunResult ra = run_with_checkpoints(a, dir, nullptr);
    ASSERT_TRUE(ra.stopped.empty()) << ra.stopped;
    const std::vector<std::string> cks = CheckpointStore::list(dir);
    ASSERT_GE(cks.size(), 2u) << "periodic cuts and the final one";
    int waiting = 0;
    for (const std::string& path : cks) {
      const Checkpoint ck = CheckpointStore::load(path, a.job().identity);
      EXPECT_EQ(ck.info.runtime, "threads");
      for (const GossipWorkerState& w : decode(a, ck).workers) waiting += w.phase != kGossipBetween;
      std::vector<Override> until = with;
      until.push_back({"train.budget", fmt::format("{:.17g}", ck.info.train_s)});
      Gossip b(until);
      const std::string bdir = testing::fresh_dir("gossip_threads_ckpt_b");
      const RunResult rb = run_with_checkpoints(b, bdir, &ck);
      EXPECT_TRUE(rb.stopped.empty()) << rb.stopped;
      EXPECT_EQ(rb.gradients, ck.info.updates) << "no step after the cut";
      const std::vector<std::string> again = CheckpointStore::list(bdir);
      ASSERT_EQ(again.size(), 1u);
      const Checkpoint ck2 = CheckpointStore::load(again[0], b.job().identity);
      EXPECT_EQ(ck2.info.train_s, ck.info.train_s);
      EXPECT_EQ(ck2.info.updates, ck.info.updates);
      const auto want = blobs(ck), got = blobs(ck2);
      ASSERT_EQ(got.size(), want.size());
      for (const auto& [name, bytes] : want) {
        EXPECT_TRUE(got.count(name) && got.at(name) == bytes) << path << ": " << name << " differs";
      }
    }
    std::printf("%s: %zu checkpoints, %d workers cut inside a step\n", describe(o).c_str(),
                cks.size(), waiting);
  }
}

// A resumed run goes on: the rows before the cut are kept and new ones
// follow, the budget counts from the start of the original run (training
// from the cut's time to it), every worker goes on from its step, and the
// counters continue.
TEST(GossipThreadsCheckpoint, ResumeContinuesTheRun) {
  for (const std::vector<Override>& o : CheckpointedJobs()) {
    SCOPED_TRACE(describe(o));
    std::vector<Override> with = o;
    with.push_back({"train.checkpoint_every", "0.1"});
    with.push_back({"train.budget", "0.15"});
    Gossip a(with);
    const std::string dir = testing::fresh_dir("gossip_threads_resume");
    const RunResult ra = run_with_checkpoints(a, dir, nullptr);
    ASSERT_TRUE(ra.stopped.empty()) << ra.stopped;
    const Checkpoint ck = CheckpointStore::load_latest(dir, a.job().identity);
    EXPECT_DOUBLE_EQ(ck.info.train_s, 0.15);
    const std::vector<MetricsRow> before = read_metrics_csv(dir + "/metrics.csv");
    const Decoded saved = decode(a, ck);
    with.back().second = "0.4";
    Gossip b(with);
    const RunResult rb = run_with_checkpoints(b, dir, &ck);
    ASSERT_TRUE(rb.stopped.empty()) << rb.stopped;
    EXPECT_NEAR(rb.train_s, 0.4, 1e-9);
    EXPECT_NEAR(rb.real_train_s, 0.4 - 0.15, 1e-9) << "the budget counts from the cut";
    EXPECT_GT(rb.gradients, ck.info.updates);
    ASSERT_EQ(rb.worker_pushes.size(), saved.workers.size());
    for (size_t w = 0; w < saved.workers.size(); ++w) {
      EXPECT_GE(rb.worker_pushes[w], saved.workers[w].step);
    }
    const std::vector<MetricsRow> rows = read_metrics_csv(dir + "/metrics.csv");
    ASSERT_GT(rows.size(), static_cast<size_t>(ck.info.rows));
    for (int64_t i = 0; i < ck.info.rows; ++i) {
      EXPECT_EQ(rows[static_cast<size_t>(i)].time_s, before[static_cast<size_t>(i)].time_s);
      EXPECT_EQ(rows[static_cast<size_t>(i)].updates, before[static_cast<size_t>(i)].updates);
    }
    for (size_t i = static_cast<size_t>(ck.info.rows); i < rows.size(); ++i) {
      EXPECT_GT(rows[i].time_s, 0.15);
      EXPECT_GE(rows[i].updates, ck.info.updates);
    }
    EXPECT_NEAR(rows.back().time_s, 0.4, 1e-9);
    EXPECT_GT(rb.last.test_acc, 0.3);
  }
}

// Push-sum conserves the total weight (the workers' plus the shares in the
// mailboxes), n, across a cut and a resume (1e-6 relative).
TEST(GossipThreadsCheckpoint, PushSumWeightIsConservedAcrossAResume) {
  for (const std::string topo : {"ring", "onepeer-exp", "exp"}) {
    SCOPED_TRACE(topo);
    std::vector<Override> with = {{"policy.name", "sgp"},
                                  {"gossip.topology", topo},
                                  {"train.checkpoint_every", "0.1"},
                                  {"train.budget", "0.2"}};
    Gossip a(with);
    const std::string dir = testing::fresh_dir("gossip_threads_pushsum");
    run_with_checkpoints(a, dir, nullptr);
    const int n = a.config.train.workers;
    for (const std::string& path : CheckpointStore::list(dir)) {
      const Decoded d = decode(a, CheckpointStore::load(path, a.job().identity));
      EXPECT_NEAR(d.total_weight, n, 1e-6 * n) << path;
    }
    const Checkpoint ck = CheckpointStore::load_latest(dir, a.job().identity);
    with.back().second = "0.4";
    Gossip b(with);
    run_with_checkpoints(b, dir, &ck);
    const Checkpoint end = CheckpointStore::load_latest(dir, b.job().identity);
    ASSERT_NE(end.path, ck.path);
    const Decoded after = decode(b, end);
    EXPECT_NEAR(after.total_weight, n, 1e-6 * n);
    EXPECT_GT(end.info.updates, ck.info.updates) << "the resumed run mixed on";
  }
}

// What a gossip run on threads cannot resume from: one line naming the
// checkpoint and what was expected, and nothing opened for writing.
TEST(GossipThreadsCheckpoint, RefusesCheckpointsOfAnotherKind) {
  auto refused = [](Gossip& g, const Checkpoint& ck, const std::string& what) {
    bool opened = false;
    try {
      run_with_checkpoints(g, testing::fresh_dir("gossip_threads_refused"), &ck, &opened);
      ADD_FAILURE() << "accepted: " << ck.path;
    } catch (const InputError& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find(ck.path), std::string::npos) << m;
      EXPECT_NE(m.find(what), std::string::npos) << m;
      EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    }
    EXPECT_FALSE(opened) << "outputs opened before the refusal";
  };
  // A parameter server's checkpoint (threads, policy sync).
  Gossip ps({{"policy.name", "sync"}, {"train.checkpoint_every", "0.1"}});
  const std::string ps_dir = testing::fresh_dir("gossip_threads_ps");
  {
    Job j = ps.job();
    CheckpointStore store(ps_dir, 2);
    j.checkpoints = &store;
    Recorder rec(ps_dir);
    ThreadsRuntime().run(j, &rec, nullptr);
    rec.finish();
  }
  const Checkpoint ps_ck = CheckpointStore::load_latest(ps_dir, ps.job().identity);
  Gossip g(std::vector<Override>{{"train.checkpoint_every", "0.1"}});
  refused(g, ps_ck, "a parameter-server checkpoint");
  // A gossip checkpoint given to a parameter server's runtime.
  const std::string dir = testing::fresh_dir("gossip_threads_for_ps");
  run_with_checkpoints(g, dir, nullptr);
  const Checkpoint gossip_ck = CheckpointStore::load_latest(dir, g.job().identity);
  {
    Job j = ps.job();
    j.resume = &gossip_ck;
    bool opened = false;
    j.open_outputs = [&] { opened = true; };
    Recorder rec(testing::fresh_dir("gossip_threads_ps_refused"));
    try {
      ThreadsRuntime().run(j, &rec, nullptr);
      ADD_FAILURE() << "a parameter server resumed a gossip checkpoint";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("a gossip policy's checkpoint"), std::string::npos)
          << e.what();
    }
    EXPECT_FALSE(opened);
  }
  // Another worker count.
  Gossip seven({{"train.checkpoint_every", "0.1"}, {"train.workers", "7"}});
  refused(seven, gossip_ck, "resumes with the same train.workers");
  // The simulator's gossip checkpoint.
  Gossip sim({{"train.runtime", "sim"}, {"train.checkpoint_every", "0.1"}});
  const std::string sim_dir = testing::fresh_dir("gossip_threads_sim");
  {
    Job j = sim.job();
    CheckpointStore store(sim_dir, 2);
    j.checkpoints = &store;
    Recorder rec(sim_dir);
    GossipSimRuntime().run(j, &rec, nullptr);
    rec.finish();
  }
  refused(g, CheckpointStore::load_latest(sim_dir, sim.job().identity),
          "the simulator's gossip checkpoint");
}

// ---- membership (docs/gossip.md#membership)

// Kills of workers 1 and 2 at 0.1 and 0.15 s of training, worker 1 back at
// 0.25 s, in a run of 0.4 s.
std::vector<Override> Churn(std::vector<Override> o) {
  o.push_back({"faults.kill", "worker:1@0.1s,worker:2@0.15s"});
  o.push_back({"faults.rejoin", "worker:1@0.25s"});
  o.push_back({"train.budget", "0.4"});
  return o;
}

// What the membership probe saw at one leave or join (copied under the
// runtime's locks, checked on the test's thread).
struct Seen {
  MembershipEvent e;
  int other = -1;
  std::vector<char> live;             // GossipModels::live of every worker
  std::vector<std::vector<float>> x;  // every worker's x_i
  std::vector<double> w;              // and w_i
};

GossipThreadsRuntime::MembershipProbe Recording(std::vector<Seen>* seen) {
  return [seen](const MembershipEvent& e, int other, const GossipModels& m) {
    Seen s;
    s.e = e;
    s.other = other;
    for (int i = 0; i < m.size(); ++i) {
      s.live.push_back(m.live(i) ? 1 : 0);
      s.x.emplace_back(m.x(i).begin(), m.x(i).end());
      s.w.push_back(m.weight(i));
    }
    seen->push_back(std::move(s));
  };
}

RunResult RunProbed(Gossip& g, const std::string& name, std::vector<Seen>* seen,
                    std::string* csv = nullptr) {
  const std::string dir = testing::fresh_dir("gossip_threads_" + name);
  RunResult r;
  {
    Recorder rec(dir);
    GossipThreadsRuntime rt;
    if (seen) rt.on_membership = Recording(seen);
    r = rt.run(g.job(), &rec, nullptr);
    rec.finish();
  }
  if (csv) *csv = slurp(dir + "/metrics.csv");
  return r;
}

// Every policy runs through two kills and a rejoin on threads: the
// membership log is the fault plan's (a worker leaves or joins at its
// first step start at or after the planned training time), the rows count
// the live workers, and no live worker waits for a dead in-peer or for a
// dead worker at a global average's barrier: the workers that stayed take
// more than twice the steps of worker 2, which left at 0.15 s of 1 s.
// (Without the graph rebuilt over the live workers, worker 2's ring
// neighbours stall at its death and take about as many steps as it did.)
TEST(GossipThreadsMembership, EveryPolicyRunsThroughKillsAndRejoins) {
  std::vector<std::vector<Override>> cases;
  for (const std::string& policy : Policies()) {
    for (const std::string topo : {"ring", "onepeer-exp"}) {
      cases.push_back({{"policy.name", policy}, {"gossip.topology", topo}});
    }
  }
  cases.push_back({{"policy.name", "dpsgd"}, {"gossip.global_every", "4"}});
  cases.push_back({{"policy.name", "sgp"}, {"gossip.global_every", "3"}});
  cases.push_back({{"policy.name", "dpsgd"}, {"gossip.order", "atc"}});
  for (const std::vector<Override>& o : cases) {
    SCOPED_TRACE(o[0].second + " " + o[1].first + "=" + o[1].second);
    // A run of 1 s, not 0.4: the live workers' steps after 0.15 s then
    // outnumber worker 2's before it by about 6 to 1, so "more than twice"
    // holds however the loaded cores share out the threads (at 0.4 s the
    // margin was 2.7 to 1, and a busy machine took it under 2).
    std::vector<Override> with = Churn(o);
    with.push_back({"train.budget", "1.0"});
    Gossip g(with);
    std::string csv;
    const RunResult r = RunProbed(g, "churn", nullptr, &csv);
    EXPECT_TRUE(r.stopped.empty()) << r.stopped;
    ASSERT_EQ(r.membership.size(), 3u);
    EXPECT_EQ(r.membership[0].worker, 1);
    EXPECT_FALSE(r.membership[0].join);
    EXPECT_GE(r.membership[0].time, 0.1);
    EXPECT_EQ(r.membership[1].worker, 2);
    EXPECT_FALSE(r.membership[1].join);
    EXPECT_GE(r.membership[1].time, 0.15);
    EXPECT_EQ(r.membership[2].worker, 1);
    EXPECT_TRUE(r.membership[2].join);
    EXPECT_EQ(r.membership[2].cause, MembershipCause::kRejoin);
    EXPECT_GE(r.membership[2].time, 0.25);
    EXPECT_LT(r.membership[2].time, 1.0);
    const std::vector<double> live = testing::csv_column(csv, "live_workers");
    ASSERT_FALSE(live.empty());
    EXPECT_EQ(live.front(), 5);
    EXPECT_EQ(live.back(), 4);
    for (double x : testing::csv_column(csv, "consensus")) EXPECT_TRUE(std::isfinite(x));
    for (int w : {0, 3, 4}) EXPECT_GT(r.worker_pushes[w], 2 * r.worker_pushes[2]) << w;
    EXPECT_GT(r.last.test_acc, 0.3);
  }
}

// sgp with lr 0 through scheduled and random kills and rejoins (with and
// without global averages). At every
// leave and join the probe runs with every lock held and no share in
// flight (a membership change credits them all), so the workers' models
// hold all the mass: the total push-sum weight is n = 5 (a leaver's goes
// to its heir, a joiner takes half its donor's) and sum_i x_i = 5 x0 to
// 1e-6 relative; the final average model is x0.
TEST(GossipThreadsMembership, PushSumKeepsTotalWeightAndMassAtEveryChange) {
  for (const auto& [topo, global] : std::vector<std::pair<std::string, std::string>>{
           {"exp", "0"}, {"onepeer-exp", "0"}, {"ring", "4"}}) {
    SCOPED_TRACE(topo + " gossip.global_every=" + global);
    Gossip g({{"policy.name", "sgp"},
              {"gossip.topology", topo},
              {"gossip.global_every", global},
              {"train.budget", "0.4"},
              {"faults.kill", "worker:1@0.05s,worker:3@0.1s"},
              {"faults.rejoin", "worker:1@0.15s"},
              {"faults.kill_rate", "120"},
              {"faults.rejoin_after", "0.03"}});
    g.config.optim.lr = 0;  // the config refuses lr 0 for a run; the exactness test needs it
    std::vector<Seen> seen;
    const RunResult r = RunProbed(g, "mass", &seen);
    ASSERT_GE(seen.size(), 3u);
    const std::vector<float>& x0 = g.job().initial_params;
    double norm = 0;
    for (float v : x0) norm += 25.0 * v * v;
    for (const Seen& s : seen) {
      SCOPED_TRACE(fmt::format("worker {} {} at {:.3f} s", s.e.worker, s.e.join ? "joined" : "left",
                               s.e.time));
      double weight = 0, diff = 0;
      for (double w : s.w) weight += w;
      EXPECT_NEAR(weight, 5.0, 1e-9);
      for (size_t p = 0; p < x0.size(); ++p) {
        double mass = 0;
        for (const std::vector<float>& x : s.x) mass += x[p];
        diff += std::pow(mass - 5.0 * x0[p], 2);
      }
      EXPECT_LE(std::sqrt(diff), 1e-6 * std::sqrt(norm));
    }
    double diff = 0;
    for (size_t p = 0; p < x0.size(); ++p) diff += std::pow(r.params[p] - x0[p], 2);
    EXPECT_LE(std::sqrt(diff), 1e-6 * std::sqrt(norm / 25.0));
  }
}

// A rejoiner starts from its live successor (the first live worker after
// it in id order, cyclically), probed at the join: dpsgd and pdsgdm copy
// its model bit for bit; sgp takes half its (x, w), so both hold the same
// x and w. The leaver holds nothing after its leave.
TEST(GossipThreadsMembership, ARejoinerStartsFromItsLiveSuccessor) {
  for (const std::string policy : {"dpsgd", "sgp", "pdsgdm:3", "adpsgd"}) {
    SCOPED_TRACE(policy);
    std::vector<Override> o = Churn({{"policy.name", policy}});
    o.push_back({"faults.rejoin", "worker:1@0.25s,worker:2@0.3s"});
    Gossip g(o);
    std::vector<Seen> seen;
    RunProbed(g, "rejoin", &seen);
    int joins = 0;
    for (const Seen& s : seen) {
      const int w = s.e.worker;
      const auto i = static_cast<size_t>(w);
      if (!s.e.join) {
        EXPECT_FALSE(s.live[i]);
        EXPECT_EQ(s.w[i], 0.0);
        continue;
      }
      ++joins;
      int succ = -1;
      for (int k = 1; k < 5 && succ < 0; ++k) {
        if (s.live[static_cast<size_t>((w + k) % 5)]) succ = (w + k) % 5;
      }
      ASSERT_EQ(s.other, succ) << "worker " << w;
      const auto d = static_cast<size_t>(succ);
      EXPECT_EQ(s.x[i], s.x[d]) << "worker " << w << " from " << succ;
      EXPECT_EQ(s.w[i], s.w[d]);
      EXPECT_GT(s.w[i], 0.0);
    }
    EXPECT_EQ(joins, 2);
  }
}

// dpsgd, pdsgdm (with global averages) and adpsgd with lr 0: every live
// model stays x0, so the average of the live models stays x0 across every
// leave and join, probed there, and the final average is x0 (1e-6
// relative). It holds because a combine is a weighted sum of x0's copies
// whose weights sum to 1 on the graph rebuilt over the live workers (an
// in-peer that passed the round counts as the worker's own model), an
// adpsgd pair averages two live models, a leaver's model leaves with it,
// and a joiner copies a live model.
TEST(GossipThreadsMembership, LrZeroKeepsTheLiveAverageAcrossLeavesAndJoins) {
  for (const std::vector<Override>& o : std::vector<std::vector<Override>>{
           {{"policy.name", "dpsgd"}},
           {{"policy.name", "pdsgdm:2"}, {"gossip.global_every", "3"}},
           {{"policy.name", "dpsgd"}, {"gossip.order", "atc"}},
           {{"policy.name", "adpsgd"}}}) {
    SCOPED_TRACE(o[0].second);
    Gossip g(Churn(o));
    g.config.optim.lr = 0;
    std::vector<Seen> seen;
    const RunResult r = RunProbed(g, "lr0_live", &seen);
    ASSERT_EQ(seen.size(), 3u);
    const std::vector<float>& x0 = g.job().initial_params;
    double norm = 0;
    for (float v : x0) norm += static_cast<double>(v) * v;
    for (const Seen& s : seen) {
      int live = 0;
      std::vector<double> sum(x0.size(), 0.0);
      for (size_t i = 0; i < s.x.size(); ++i) {
        if (!s.live[i]) continue;
        ++live;
        for (size_t p = 0; p < x0.size(); ++p) sum[p] += s.x[i][p];
      }
      double diff = 0;
      for (size_t p = 0; p < x0.size(); ++p) diff += std::pow(sum[p] / live - x0[p], 2);
      EXPECT_LE(std::sqrt(diff), 1e-6 * std::sqrt(norm)) << "at worker " << s.e.worker;
    }
    double diff = 0;
    for (size_t p = 0; p < x0.size(); ++p) diff += std::pow(r.params[p] - x0[p], 2);
    EXPECT_LE(std::sqrt(diff), 1e-6 * std::sqrt(norm));
  }
}

// Below train.min_workers the run stops with the run layer's line (the CLI
// exits 3 on it: cli_test).
TEST(GossipThreadsMembership, TooFewLiveWorkersStopTheRun) {
  for (const std::string& policy : Policies()) {
    SCOPED_TRACE(policy);
    Gossip g(Churn({{"policy.name", policy}, {"train.min_workers", "4"}}));
    const RunResult r = RunProbed(g, "min", nullptr);
    EXPECT_NE(r.stopped.find("3 of 5 workers live, fewer than train.min_workers = 4: worker 2 "
                             "left at 0."),
              std::string::npos)
        << r.stopped;
    EXPECT_LT(r.train_s, 0.3);
    ASSERT_EQ(r.membership.size(), 2u);
  }
}

// ---- membership checkpoints (docs/gossip.md#checkpoints)

// What a checkpoint says of the membership: the live workers and the log,
// decoded by the runtime's own readers.
struct Members {
  GossipLiveState live;
  std::vector<MembershipEvent> log;
};
Members members(const Gossip& g, const Checkpoint& ck) {
  const Job j = g.job();
  const int n = g.config.train.workers;
  Members m;
  Membership membership(j, n);
  ck.read("membership", [&](StateReader& r) { membership.load(r); });
  m.log = membership.log();
  ck.read(kGossipMembershipBlob, [&](StateReader& r) { load_gossip_membership(r, n, &m.live); });
  return m;
}

// The live mask the log leaves: every worker live, then each event.
std::vector<char> replay(const std::vector<MembershipEvent>& log, int n) {
  std::vector<char> live(static_cast<size_t>(n), 1);
  for (const MembershipEvent& e : log) live[static_cast<size_t>(e.worker)] = e.join ? 1 : 0;
  return live;
}

// "-1@0.021 +3@0.070": who left (-) or joined (+) when.
std::string describe(const std::vector<MembershipEvent>& log) {
  std::string out;
  for (const MembershipEvent& e : log) {
    out +=
        fmt::format("{}{}{}@{:.3f}", out.empty() ? "" : " ", e.join ? '+' : '-', e.worker, e.time);
  }
  return out;
}

RunResult run_probed_with_checkpoints(Gossip& g, const std::string& dir, const Checkpoint* resume,
                                      std::vector<Seen>* seen) {
  Job j = g.job();
  CheckpointStore store(dir, 100);
  j.checkpoints = &store;
  j.resume = resume;
  const bool keep = resume && std::filesystem::exists(dir + "/metrics.csv");
  std::unique_ptr<Recorder> rec =
      keep ? std::make_unique<Recorder>(dir, resume->info.rows) : std::make_unique<Recorder>(dir);
  GossipThreadsRuntime rt;
  if (seen) rt.on_membership = Recording(seen);
  RunResult r = rt.run(j, rec.get(), nullptr);
  rec->finish();
  return r;
}

// Policies through kills, a rejoin and (sgp) injected exceptions with
// timed rejoins, checkpointed every 0.1 s: every checkpoint, taken with
// workers out of the run or back in it, restores exactly (as
// RestoredStateIsTheSavedStateExactly: a resume that ends at once
// re-saves every part byte for byte, the membership parts too), and its
// live workers are those its membership log leaves, with the models of
// the workers out holding nothing.
TEST(GossipThreadsMembershipCheckpoint, RestoredStateIsTheSavedStateExactly) {
  for (const std::vector<Override>& o : std::vector<std::vector<Override>>{
           {{"policy.name", "dpsgd"}, {"optim.kind", "momentum"}, {"optim.momentum", "0.9"}},
           {{"policy.name", "sgp"},
            {"gossip.global_every", "3"},
            {"faults.exception_rate", "0.0002"},
            {"faults.rejoin_after", "0.03"}},
           {{"policy.name", "adpsgd"}},
           {{"policy.name", "pdsgdm:3"}, {"gossip.topology", "onepeer-exp"}}}) {
    SCOPED_TRACE(describe(o));
    std::vector<Override> with = o;
    with.push_back({"faults.kill", "worker:1@0.02s,worker:3@0.12s"});
    with.push_back({"faults.rejoin", "worker:1@0.15s"});
    with.push_back({"train.checkpoint_every", "0.1"});
    with.push_back({"train.budget", "0.25"});
    Gossip a(with);
    const std::string dir = testing::fresh_dir("gossip_threads_members_ckpt");
    const RunResult ra = run_with_checkpoints(a, dir, nullptr);
    ASSERT_TRUE(ra.stopped.empty()) << ra.stopped;
    const std::vector<std::string> cks = CheckpointStore::list(dir);
    ASSERT_GE(cks.size(), 2u) << "periodic cuts and the final one";
    int with_out = 0;
    for (const std::string& path : cks) {
      const Checkpoint ck = CheckpointStore::load(path, a.job().identity);
      const Members m = members(a, ck);
      EXPECT_EQ(m.live.live, replay(m.log, 5)) << path;
      const Decoded d = decode(a, ck);
      for (size_t w = 0; w < 5; ++w) EXPECT_EQ(d.weights[w] > 0, m.live.live[w] != 0) << path;
      with_out += std::count(m.live.live.begin(), m.live.live.end(), 0) > 0 ? 1 : 0;
      std::vector<Override> until = with;
      until.push_back({"train.budget", fmt::format("{:.17g}", ck.info.train_s)});
      Gossip b(until);
      const std::string bdir = testing::fresh_dir("gossip_threads_members_ckpt_b");
      const RunResult rb = run_with_checkpoints(b, bdir, &ck);
      EXPECT_EQ(rb.gradients, ck.info.updates) << "no step after the cut";
      EXPECT_EQ(rb.membership.size(), m.log.size()) << "no membership change after the cut";
      const std::vector<std::string> again = CheckpointStore::list(bdir);
      ASSERT_EQ(again.size(), 1u);
      const Checkpoint ck2 = CheckpointStore::load(again[0], b.job().identity);
      const auto want = blobs(ck), got = blobs(ck2);
      ASSERT_EQ(got.size(), want.size());
      EXPECT_TRUE(want.count(kGossipMembershipBlob) && want.count("membership"));
      for (const auto& [name, bytes] : want) {
        EXPECT_TRUE(got.count(name) && got.at(name) == bytes) << path << ": " << name << " differs";
      }
    }
    EXPECT_GE(with_out, 1) << "no checkpoint was cut with a worker out of the run";
  }
}

// A run cut at 0.2 s with workers 1 and 2 out (killed at 0.02 and 0.04 s)
// and worker 3 back (killed at 0.03 s, rejoined at 0.07 s), resumed to
// 0.4 s, goes on with that membership and the rest of the fault plan: the
// changes before the cut are not carried out again (worker 3's kill would
// be due again on a plan that forgot it); worker 4's kill at 0.22 s and
// worker 1's rejoin at 0.32 s, after it, are. (The margins leave a loaded
// machine 0.08 s or more to carry out each change before the cut or the
// end, where it is checked.)
// Worker 1 rejoins from its live successor on the restored graph, 3 (2 is
// still out); worker 2 takes no step after the cut; the workers that
// stayed are not held up by the ones out; the rows after the cut count 3
// live workers, then 2 or (worker 1 back before worker 4 left) 4, never 5,
// and 3 at the end; sgp's total push-sum weight stays 5.
TEST(GossipThreadsMembershipCheckpoint, ResumeGoesOnWithTheSameMembership) {
  for (const std::vector<Override>& o : std::vector<std::vector<Override>>{
           {{"policy.name", "dpsgd"}},
           {{"policy.name", "sgp"}, {"gossip.topology", "onepeer-exp"}},
           {{"policy.name", "adpsgd"}},
           {{"policy.name", "pdsgdm:3"}, {"gossip.global_every", "6"}}}) {
    SCOPED_TRACE(describe(o));
    std::vector<Override> with = o;
    with.push_back({"faults.kill", "worker:1@0.02s,worker:2@0.04s,worker:3@0.03s,worker:4@0.22s"});
    with.push_back({"faults.rejoin", "worker:1@0.32s,worker:3@0.07s"});
    with.push_back({"train.checkpoint_every", "0.2"});
    with.push_back({"train.budget", "0.2"});
    Gossip a(with);
    const std::string dir = testing::fresh_dir("gossip_threads_members_resume");
    const RunResult ra = run_with_checkpoints(a, dir, nullptr);
    ASSERT_TRUE(ra.stopped.empty()) << ra.stopped;
    const Checkpoint ck = CheckpointStore::load_latest(dir, a.job().identity);
    const Members saved = members(a, ck);
    ASSERT_EQ(saved.log.size(), 4u) << describe(saved.log);
    ASSERT_EQ(saved.live.live, (std::vector<char>{1, 0, 0, 1, 1}));
    const Decoded before = decode(a, ck);

    with.back().second = "0.4";
    Gossip b(with);
    std::vector<Seen> seen;
    const RunResult rb = run_probed_with_checkpoints(b, dir, &ck, &seen);
    ASSERT_TRUE(rb.stopped.empty()) << rb.stopped;
    ASSERT_EQ(rb.membership.size(), 6u)
        << "the four changes before the cut, two after: " << describe(rb.membership);
    for (size_t k = 0; k < 4; ++k) {
      EXPECT_EQ(rb.membership[k].worker, saved.log[k].worker);
      EXPECT_EQ(rb.membership[k].join, saved.log[k].join);
      EXPECT_EQ(rb.membership[k].time, saved.log[k].time);
    }
    ASSERT_EQ(seen.size(), 2u) << "changes carried out after the resume";
    for (const Seen& s : seen) {
      EXPECT_GT(s.e.time, 0.2);
      if (s.e.join) {
        EXPECT_EQ(s.e.worker, 1);
        EXPECT_GE(s.e.time, 0.32);
        EXPECT_EQ(s.other, 3) << "its live successor on the restored graph";
        EXPECT_FALSE(s.live[2]);
      } else {
        EXPECT_EQ(s.e.worker, 4);
        EXPECT_GE(s.e.time, 0.22);
      }
    }
    // Steps of its own (worker_pushes: less those taken over at joins).
    auto own = [&](size_t w) { return before.workers[w].step - saved.live.inherited[w]; };
    EXPECT_EQ(rb.worker_pushes[2], own(2)) << "worker 2 stayed out";
    for (size_t w : {0u, 3u}) EXPECT_GT(rb.worker_pushes[w], own(w) + 5) << w;
    const std::vector<double> live =
        testing::csv_column(slurp(dir + "/metrics.csv"), "live_workers");
    ASSERT_GT(live.size(), static_cast<size_t>(ck.info.rows));
    for (size_t i = static_cast<size_t>(ck.info.rows); i < live.size(); ++i) {
      EXPECT_TRUE(live[i] >= 2 && live[i] <= 4)
          << "row " << i << ": " << live[i] << "; " << describe(rb.membership);
    }
    EXPECT_EQ(live.back(), 3);
    const Checkpoint end = CheckpointStore::load_latest(dir, b.job().identity);
    ASSERT_NE(end.path, ck.path);
    EXPECT_EQ(members(b, end).live.live, (std::vector<char>{1, 1, 0, 1, 0}));
    if (o[0].second == "sgp") {
      EXPECT_NEAR(before.total_weight, 5.0, 1e-6);
      EXPECT_NEAR(decode(b, end).total_weight, 5.0, 1e-6);
    }
  }
}

// A resume keeps the run's [faults]: a checkpoint with membership given to
// a run without [faults], or one without to a run with them, is refused
// with one line naming the checkpoint, nothing opened. (The CLI's config
// hash refuses both first; this guards jobs built without it.)
TEST(GossipThreadsMembershipCheckpoint, RefusesAResumeThatChangesFaults) {
  const std::vector<Override> plain = {{"train.checkpoint_every", "0.1"}, {"train.budget", "0.1"}};
  std::vector<Override> faulty = plain;
  faulty.push_back({"faults.kill", "worker:1@0.02s"});
  Gossip without(plain), with(faulty);
  const std::string dir_without = testing::fresh_dir("gossip_threads_members_plain");
  const std::string dir_with = testing::fresh_dir("gossip_threads_members_faulty");
  run_with_checkpoints(without, dir_without, nullptr);
  run_with_checkpoints(with, dir_with, nullptr);
  const Checkpoint ck_without = CheckpointStore::load_latest(dir_without, without.job().identity);
  const Checkpoint ck_with = CheckpointStore::load_latest(dir_with, with.job().identity);
  for (const auto& [g, ck, what] : std::vector<std::tuple<Gossip*, const Checkpoint*, std::string>>{
           {&with, &ck_without, "a gossip checkpoint without membership"},
           {&without, &ck_with, "a gossip checkpoint with membership"}}) {
    bool opened = false;
    try {
      run_with_checkpoints(*g, testing::fresh_dir("gossip_threads_members_refused"), ck, &opened);
      ADD_FAILURE() << "accepted: " << ck->path;
    } catch (const InputError& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find(ck->path), std::string::npos) << m;
      EXPECT_NE(m.find(what), std::string::npos) << m;
      EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    }
    EXPECT_FALSE(opened);
  }
}

}  // namespace
}  // namespace hsgd
