// The gossip policies on the mpi runtime (mpi/gossip.h) with the plain-C++
// linear model. Run by CTest under mpirun with 4 ranks:
//   mpirun -np 4 mpi_gossip_test
// Every rank runs every test (the runs are collective); results are checked
// on rank 0, which holds them. 3-rank runs use ranks 0..2 of the launch
// (rank 3 sits them out). The process exits nonzero if any rank failed.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <thread>

#include "choco_reference.h"
#include "hsgd/core/error.h"
#include "hsgd/core/stop.h"
#include "hsgd/core/topology.h"
#include "hsgd/mpi/gossip.h"
#include "hsgd/mpi/gossip_eval.h"
#include "hsgd/mpi/mpi_runtime.h"
#include "hsgd/mpi/session.h"
#include "hsgd/mpi/transport.h"
#include "hsgd/optim/optimizer.h"
#include "hsgd/policy/gossip.h"
#include "hsgd/runtime/gossip_checkpoint.h"
#include "hsgd/runtime/gossip_choco.h"
#include "hsgd/runtime/gossip_row.h"
#include "hsgd/runtime/gossip_threads.h"
#include "hsgd/runtime/local_steps.h"
#include "hsgd/runtime/row.h"
#include "linear_job.h"
#include "mpi_gtest.h"

namespace hsgd {
namespace {

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

// The first `ranks` ranks of the launch, or MPI_COMM_NULL on the others.
MPI_Comm first_ranks(int ranks) {
  MPI_Comm c = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, world_rank() < ranks ? 0 : MPI_UNDEFINED, world_rank(), &c);
  return c;
}

// 1600 training samples; batch 16: 4 ranks take 64 samples a step.
struct Fixture : testing::LinearJob {
  std::string dir;
  int ranks;

  Fixture(const std::string& name, int ranks, const std::vector<Override>& o = {})
      : LinearJob({{"train.runtime", "mpi"},
                   {"train.servers", "0"},
                   {"policy.name", "dpsgd"},
                   {"train.workers", std::to_string(ranks)},
                   {"train.batch", "16"},
                   {"train.budget", "0"},
                   {"train.epochs", "1"},
                   {"train.eval_every", "100"},
                   {"optim.lr", "0.1"},
                   {"mpi.timeout", "30"}},
                  o),
        ranks(ranks) {
    dir = (std::filesystem::path(::testing::TempDir()) /
           ("hsgd_mpi_gossip_" + std::to_string(getpid()) + "_" + name))
              .string();
    if (world_rank() == 0) {
      std::filesystem::remove_all(dir);
      std::filesystem::create_directories(dir);
    }
  }

  // Exactly `steps` synchronous steps of every rank (the epoch target).
  void steps(int steps) {
    const int64_t per_step = static_cast<int64_t>(ranks) * config.train.batch;
    config.train.epochs =
        static_cast<double>(steps * per_step - per_step / 2) / static_cast<double>(train.size());
  }

  // Plain SGD for `steps` steps, then lr 0: gossip-only steps.
  void lr_zero_after(int steps) {
    config.lr_schedule.kind = "step";
    config.lr_schedule.step_size = steps;
    config.lr_schedule.gamma = 0;
  }

  // On ranks outside the run: nullopt. Rank 0 writes checkpoints into `dir`
  // (every one kept) when train.checkpoint_every > 0, and resumes from
  // `resume` (rank 0's; its rows kept when `dir` holds them).
  std::optional<RunResult> run(const Checkpoint* resume = nullptr, bool* opened = nullptr) {
    MPI_Comm comm = first_ranks(ranks);
    if (comm == MPI_COMM_NULL) return std::nullopt;
    std::optional<Recorder> rec;
    std::optional<CheckpointStore> store;
    Job j = job();
    if (world_rank() == 0) {
      const bool keep = resume && std::filesystem::exists(dir + "/metrics.csv");
      if (keep) {
        rec.emplace(dir, resume->info.rows);
      } else {
        rec.emplace(dir);
      }
      if (config.train.checkpoint_every > 0) store.emplace(dir, 100);
      j.checkpoints = store ? &*store : nullptr;
      j.resume = resume;
      if (opened) j.open_outputs = [opened] { *opened = true; };
    }
    RunResult r;
    try {
      r = MpiRuntime(comm).run(j, rec ? &*rec : nullptr, nullptr);
    } catch (...) {
      MPI_Comm_free(&comm);
      throw;
    }
    if (rec) rec->finish();
    MPI_Comm_free(&comm);
    return r;
  }
};

double norm(std::span<const float> v) {
  double s = 0;
  for (float x : v) s += static_cast<double>(x) * x;
  return std::sqrt(s);
}

using testing::distance;

// Synchronous dpsgd (cta) for `steps` steps, by hand on one GossipModels of
// every worker: what the ranks must compute. Returns the average model.
std::vector<float> reference_dpsgd(const Fixture& f, int steps) {
  const Config& c = f.config;
  const Job j = f.job();
  const int n = c.train.workers;
  const size_t np = j.initial_params.size();
  GossipModels models(n, j.initial_params, gossip_local_update(c));
  const Topology topo(c.gossip.topology, c.gossip.weights, n, c.train.seed);
  testing::ReferenceWorkers rw(j, n);
  auto& [samplers, nets, params, grads] = rw;
  Batch b;
  for (int s = 0; s < steps; ++s) {
    for (int i = 0; i < n; ++i) {
      models.debiased(i, params[i]);
      sampled_gradient(*nets[i], samplers[i], c.train.batch, &b);
    }
    models.mix(topo, s);
    const float lr = static_cast<float>(lr_at(c.lr_schedule, c.optim.lr, s));
    for (int i = 0; i < n; ++i) models.local_step(i, grads[i], lr);
  }
  std::vector<float> avg(np);
  models.average(avg);
  return avg;
}

std::vector<float> reference_choco(const Fixture& f, int steps) {
  return testing::reference_choco(f.config, f.job(), steps);
}

// CHOCO on mpi: the encoded bytes cross the ranks and decode to what the
// sender decoded, so the run is the shared step (runtime/gossip_choco.h)
// computed in one process, bit for bit; with global averages too.
TEST(MpiGossip, ChocoIsTheReferenceStepByStep) {
  // The last case sends every message in chunks of 3 floats' bytes (12).
  struct Case {
    std::string spec, every, chunk;
  };
  for (const auto& [spec, every, chunk] : std::vector<Case>{{"topk:0.2", "0", "131072"},
                                                            {"qsgd:4", "0", "131072"},
                                                            {"randomk:0.3", "0", "131072"},
                                                            {"topk:0.2", "3", "131072"},
                                                            {"qsgd:4", "0", "3"}}) {
    SCOPED_TRACE(spec + " global_every " + every + " mpi.chunk " + chunk);
    Fixture f("choco_reference", 4,
              {{"gossip.order", "atc"},
               {"gossip.topology", "torus"},
               {"compress.push", spec},
               {"gossip.consensus_lr", "0.5"},
               {"gossip.global_every", every},
               {"optim.kind", "momentum"},
               {"mpi.chunk", chunk}});
    f.steps(20);
    const std::optional<RunResult> r = f.run();
    if (world_rank() != 0) continue;
    const std::vector<float> want = reference_choco(f, 20);
    EXPECT_EQ(r->gradients, 4 * 20);
    EXPECT_EQ(r->params, want);
    // Bytes: every rank sends its encoded message to its out-peers.
    const size_t msg =
        ChocoGossip(f.config, f.job().make_model()->param_shapes(), f.job().initial_params, 1)
            .message_bytes();
    const Topology topo("torus", "uniform", 4, 1);
    const double degree = static_cast<double>(topo.out_peers(0, 0).size());
    if (every == "0") {
      EXPECT_NEAR(r->gossip.bytes_per_node_step, 2 * degree * static_cast<double>(msg), 1e-6);
    }
  }
}

// Doubly stochastic mixing (and push-sum) conserve the sum of the models:
// 6 steps of SGD make the ranks' models differ, then 4 steps at lr 0 leave
// the average model where it was (1e-6 relative).
TEST(MpiGossip, LrZeroConservesTheSumOfTheModels) {
  for (const std::string policy : {"dpsgd", "sgp", "pdsgdm:2"}) {
    for (const std::string order : {"cta", "atc"}) {
      if (order == "atc" && policy != "dpsgd") continue;
      SCOPED_TRACE(policy + " " + order);
      Fixture a("conserve_a", 4, {{"policy.name", policy}, {"gossip.order", order}});
      a.steps(6);
      const std::optional<RunResult> ra = a.run();
      Fixture b("conserve_b", 4, {{"policy.name", policy}, {"gossip.order", order}});
      b.steps(10);
      b.lr_zero_after(6);
      const std::optional<RunResult> rb = b.run();
      if (world_rank() != 0) continue;
      ASSERT_TRUE(ra->stopped.empty()) << ra->stopped;
      EXPECT_EQ(ra->gradients, 4 * 6);
      EXPECT_EQ(rb->gradients, 4 * 10);
      EXPECT_GT(ra->last.consensus_rel, 1e-4) << "the models should differ before lr 0";
      EXPECT_LE(distance(ra->params, rb->params), 1e-6 * norm(ra->params));
    }
  }
}

// onepeer-exp on 4 = 2^2 ranks: two gossip rounds after the last update
// average exactly, one does not. dpsgd (cta) mixes before its update, so
// that takes two gossip-only steps; sgp mixes after it, so its last step
// with lr > 0 already brings the first of the two rounds.
TEST(MpiGossip, OnePeerExpReachesConsensusAfterLog2NGossipSteps) {
  for (const std::string policy : {"dpsgd", "sgp"}) {
    SCOPED_TRACE(policy);
    const int lr_steps = 5;
    const int first = policy == "sgp" ? 0 : 1;  // gossip-only steps before one round is done
    Fixture one("onepeer_1", 4, {{"policy.name", policy}, {"gossip.topology", "onepeer-exp"}});
    one.steps(lr_steps + first);
    one.lr_zero_after(lr_steps);
    const std::optional<RunResult> r1 = one.run();
    Fixture two("onepeer_2", 4, {{"policy.name", policy}, {"gossip.topology", "onepeer-exp"}});
    two.steps(lr_steps + first + 1);
    two.lr_zero_after(lr_steps);
    const std::optional<RunResult> r2 = two.run();
    if (world_rank() != 0) continue;
    EXPECT_GT(r1->last.consensus_rel, 1e-4) << "one round does not average";
    EXPECT_LE(r2->last.consensus_rel, 1e-6);
    EXPECT_LE(distance(r1->params, r2->params), 1e-6 * norm(r1->params));
  }
}

// The ranks compute synchronous dpsgd exactly: the same average model as
// the mixing of GossipModels by hand (1e-6 relative: only the sum over the
// ranks is in another order), for a static and a time-varying graph.
TEST(MpiGossip, DpsgdIsTheReferenceMixingStepByStep) {
  // The last case sends each model in messages of 7 floats (mpi.chunk).
  for (const auto& [topo, chunk] :
       std::vector<std::pair<std::string, std::string>>{{"ring", "131072"},
                                                        {"onepeer-exp", "131072"},
                                                        {"random-matching", "131072"},
                                                        {"torus", "7"}}) {
    SCOPED_TRACE(topo + " mpi.chunk " + chunk);
    Fixture f("reference", 4,
              {{"gossip.topology", topo}, {"optim.kind", "momentum"}, {"mpi.chunk", chunk}});
    f.steps(20);
    const std::optional<RunResult> r = f.run();
    if (world_rank() != 0) continue;
    const std::vector<float> want = reference_dpsgd(f, 20);
    EXPECT_EQ(r->gradients, 4 * 20);
    EXPECT_LE(distance(r->params, want), 1e-6 * norm(want));
  }
}

// The same config on the threads runtime (in process, on rank 0). The
// threads workers end their last step unevenly at the epoch target (one
// that reaches account() after the target is met drops its step, so the
// average can miss up to 3/4 of the last step of 50), so the average models
// agree to a tolerance: within 10 % of the distance they travelled from the
// initial model (measured: 0 when every threads worker took the last step,
// 1.6 % when one did not), and the accuracy within 2 pp.
TEST(MpiGossip, DpsgdMatchesTheThreadsRuntime) {
  for (int round = 0; round < 3; ++round) {
    Fixture f("vs_threads", 4, {{"train.epochs", "2"}, {"optim.lr", "0.05"}});
    const std::optional<RunResult> r = f.run();
    if (world_rank() != 0) continue;
    Config tc = f.config;
    tc.train.runtime = "threads";
    Job j = f.job();
    j.config = &tc;
    Recorder rec(testing::fresh_dir("mpi_gossip_threads"));
    const RunResult t = GossipThreadsRuntime().run(j, &rec, nullptr);
    rec.finish();
    const double travelled = distance(r->params, j.initial_params);
    std::printf(
        "mpi vs threads: distance of the average models %.3g of %.3g travelled, test_acc "
        "%.4f vs %.4f\n",
        distance(r->params, t.params), travelled, r->last.test_acc, t.last.test_acc);
    EXPECT_LE(distance(r->params, t.params), 0.10 * travelled);
    EXPECT_NEAR(r->last.test_acc, t.last.test_acc, 0.02);
    EXPECT_GT(r->last.test_acc, 0.5);
  }
}

// Every policy and topology on an odd rank count, with a time budget,
// evaluations, and a global average.
TEST(MpiGossip, EveryPolicyAndTopologyRunsOnThreeRanks) {
  for (const std::string policy : {"dpsgd", "sgp", "pdsgdm:3"}) {
    for (const std::string& topo : topology_names()) {
      SCOPED_TRACE(policy + " on " + topo);
      Fixture f("odd", 3,
                {{"policy.name", policy},
                 {"gossip.topology", topo},
                 {"train.epochs", "0"},
                 {"train.budget", "0.3"},
                 {"train.eval_every", "0.1"},
                 {"gossip.global_every", policy == "sgp" ? "5" : "0"}});
      const std::optional<RunResult> r = f.run();
      if (world_rank() == 3) {
        EXPECT_FALSE(r.has_value());
        continue;
      }
      if (world_rank() != 0) {
        EXPECT_FALSE(r->primary);
        continue;
      }
      EXPECT_TRUE(r->stopped.empty()) << r->stopped;
      EXPECT_NEAR(r->train_s, 0.3, 1e-9);
      EXPECT_GT(r->gradients, 3);
      ASSERT_EQ(r->worker_pushes.size(), 3u);
      EXPECT_EQ(r->worker_pushes[0] * 3, r->gradients) << "every rank takes every step";
      EXPECT_TRUE(r->gossip.on);
      if (policy == "sgp") {
        EXPECT_GT(r->gossip.global_averages, 0);
      }
      EXPECT_TRUE(std::isfinite(r->last.consensus));
      EXPECT_GT(r->last.test_acc, 0.3);
      const auto rows = read_metrics_csv(f.dir + "/metrics.csv");
      EXPECT_GE(rows.size(), 3u);
    }
  }
}

TEST(MpiGossip, ABadLaunchIsTheSameInputErrorOnEveryRank) {
  {
    Fixture f("bad_workers", 4, {{"train.workers", "5"}});
    try {
      f.run();
      ADD_FAILURE() << "no error on rank " << world_rank();
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("train.workers = 5: under the mpi runtime"),
                std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find("expected train.workers = 4"), std::string::npos);
    }
  }
}

// A diverging run stops at an evaluation on every rank with the run
// layer's line (the CLI exits 3 on it).
TEST(MpiGossip, ADivergingRunStopsOnEveryRank) {
  Fixture f("diverge", 4,
            {{"train.epochs", "0"},
             {"train.budget", "2"},
             {"train.eval_every", "0.1"},
             {"train.max_nonfinite", "1000000000"},
             {"optim.lr", "1e30"}});
  const std::optional<RunResult> r = f.run();
  EXPECT_NE(r->stopped.find("training diverged"), std::string::npos)
      << "rank " << world_rank() << ": '" << r->stopped << "'";
  if (world_rank() == 0) {
    EXPECT_LT(r->train_s, 2.0);
  }
}

// A front end's stop request (Config::stop: on rank 0, the Python callback
// returning False or the progress display raising) comes from another
// thread at any time; the ranks agree on it at a step's agreement. One that
// comes while rank 0 waits in that agreement is rank 0's alone until the
// next one, and the rule of the non-finite gradients (train.max_nonfinite,
// checked on every rank after the agreement) must not read it: rank 0
// alone would end, the others go on to a gossip round and the next
// agreement (a timeout, or MPI_ERR_TRUNCATE on rank 0). Every gradient here
// is non-finite (NaN features, train.max_nonfinite out of reach), and rank
// 0 waits in the agreement for the others' heavy-tailed delays most of a
// step, so a request at a random time mostly falls there: with the rule
// reading the request, the first round failed in 6 of 6 runs here
// (MPI_ERR_TRUNCATE on rank 0, timeouts on the others).
TEST(MpiGossip, AStopRequestDuringAStepEndsEveryRankTogether) {
  for (int round = 0; round < 5; ++round) {
    SCOPED_TRACE(fmt::format("round {}", round));
    Fixture f("stop_request_nonfinite", 4,
              {{"train.epochs", "0"},
               {"train.budget", "30"},
               {"train.max_nonfinite", "1000000000"},
               {"stragglers.fraction", "1"},
               {"stragglers.delay", "lognormal"},
               {"stragglers.scale", "0.002"},
               {"stragglers.sigma", "1.5"},
               {"mpi.timeout", "10"}});
    std::fill(f.train.features.begin(), f.train.features.end(), std::nanf(""));
    StopRequest request;
    std::thread requester;
    if (world_rank() == 0) {
      f.config.stop = &request;
      requester = std::thread([&request, round] {
        std::this_thread::sleep_for(std::chrono::milliseconds(300 + 37 * round));
        request.request("a test's request");
      });
    }
    std::optional<RunResult> r;
    try {
      r = f.run();
    } catch (const mpi::MpiError& e) {
      ADD_FAILURE() << "rank " << world_rank() << ": " << e.what();
    }
    if (requester.joinable()) requester.join();
    // Every rank goes on to the next round only if every rank ended.
    int failed = r ? 0 : 1;
    MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (failed) return;
    EXPECT_TRUE(StopRequest::is_request(r->stopped))
        << "rank " << world_rank() << ": '" << r->stopped << "'";
    if (world_rank() == 0) {
      EXPECT_LT(r->train_s, 30.0);
    }
  }
}

// ---- checkpoints

// Rank 0's value on every rank.
template <class T>
T from_rank0(T v, MPI_Datatype type) {
  MPI_Bcast(&v, 1, type, 0, MPI_COMM_WORLD);
  return v;
}

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Every rank's part of a checkpoint, decoded by the runtime's readers.
struct Decoded {
  std::vector<GossipWorkerState> workers;
  double total_weight = 0;  // push-sum mass: the ranks' weights
};
Decoded decode(const Fixture& f, const Checkpoint& ck) {
  const Job j = f.job();
  const int n = f.config.train.workers;
  GossipModels models(n, j.initial_params, gossip_local_update(f.config));
  DelayModel delays(f.config.stragglers, n, f.config.train.seed);
  std::vector<float> grad(j.initial_params.size());
  Decoded d;
  for (int w = 0; w < n; ++w) {
    ShardSampler sampler = make_sampler(j, w);
    GossipWorkerState st;
    ck.read(gossip_worker_blob(w), [&](StateReader& r) {
      load_gossip_worker(r, w, n, models, w, sampler, delays, &st, grad);
    });
    d.total_weight += models.weight(w);
    d.workers.push_back(std::move(st));
  }
  return d;
}

std::vector<std::vector<Override>> CheckpointedJobs() {
  return {
      {{"policy.name", "dpsgd"}, {"optim.kind", "momentum"}, {"optim.momentum", "0.9"}},
      {{"policy.name", "dpsgd"}, {"gossip.order", "atc"}, {"optim.kind", "nesterov"}},
      {{"policy.name", "sgp"}, {"gossip.topology", "onepeer-exp"}, {"optim.kind", "momentum"}},
      // (push-sum weights stay 1 on a regular graph; the star's do not)
      {{"policy.name", "sgp"}, {"gossip.topology", "star"}},
      {{"policy.name", "pdsgdm:2"}, {"gossip.global_every", "3"}, {"optim.kind", "momentum"}},
      {{"policy.name", "sgp"},  // SlowMo
       {"gossip.topology", "star"},
       {"gossip.global_every", "3"},
       {"local.outer", "momentum"},
       {"local.outer_momentum", "0.5"}},
      // CHOCO: the public copies and s (gossip_choco-W) go through rank 0 too.
      {{"policy.name", "dpsgd"},
       {"gossip.order", "atc"},
       {"compress.push", "topk:0.2"},
       {"gossip.consensus_lr", "0.5"},
       {"optim.kind", "momentum"}},
      {{"policy.name", "pdsgdm:2"}, {"gossip.global_every", "3"}, {"compress.push", "qsgd:4"}},
  };
}

std::string describe(const std::vector<Override>& o) {
  std::string out;
  for (const auto& [k, v] : o) out += k + "=" + v + " ";
  return out;
}

// The ranks advance in lockstep, so a run resumed from a checkpoint is the
// run without one: 10 steps, a final checkpoint, a resume to 20 steps give
// the 20-step run's average model bit for bit (models, momenta, push-sum
// weights, samplers, steps and the lr schedule's position all restored),
// and push-sum's total weight is n in both checkpoints.
TEST(MpiGossipCheckpoint, AResumedRunIsTheRunWithoutACheckpoint) {
  for (const std::vector<Override>& o : CheckpointedJobs()) {
    SCOPED_TRACE(describe(o));
    std::vector<Override> with = o;
    with.push_back({"train.checkpoint_every", "1000"});  // the final checkpoint only
    Fixture whole("ckpt_whole", 4, o);
    whole.steps(20);
    const std::optional<RunResult> rw = whole.run();
    Fixture a("ckpt_a", 4, with);
    a.steps(10);
    a.run();
    std::optional<Checkpoint> ck;
    if (world_rank() == 0) {
      ck.emplace(CheckpointStore::load_latest(a.dir, a.job().identity));
      EXPECT_EQ(ck->info.runtime, "mpi");
      EXPECT_EQ(ck->info.workers, 4);
      EXPECT_EQ(ck->info.updates, 4 * 10);
      EXPECT_NEAR(decode(a, *ck).total_weight, 4.0, 4e-6);
      for (const GossipWorkerState& w : decode(a, *ck).workers) {
        EXPECT_EQ(w.step, 10);
        EXPECT_EQ(w.phase, kGossipBetween);
      }
    }
    Fixture b("ckpt_a_resumed", 4, with);
    b.dir = a.dir;  // the same directory: the run goes on
    b.steps(20);
    const std::optional<RunResult> rb = b.run(ck ? &*ck : nullptr);
    if (world_rank() != 0) continue;
    ASSERT_TRUE(rb->stopped.empty()) << rb->stopped;
    EXPECT_EQ(rb->gradients, 4 * 20);
    EXPECT_EQ(rb->params, rw->params) << "the resumed run differs from the whole one";
    EXPECT_EQ(rb->worker_pushes, rw->worker_pushes);
    EXPECT_EQ(rb->gossip.rounds, rw->gossip.rounds);
    EXPECT_EQ(rb->gossip.global_averages, rw->gossip.global_averages);
    const Checkpoint end = CheckpointStore::load_latest(a.dir, b.job().identity);
    EXPECT_EQ(end.info.updates, 4 * 20);
    EXPECT_NEAR(decode(b, end).total_weight, 4.0, 4e-6);
  }
}

// Every checkpoint of a run with a time budget (the periodic cuts, every
// rank between steps, and the final one, each rank's gradient in hand)
// restores exactly: a run resumed from it that ends at once writes a final
// checkpoint whose every part is byte for byte the one it read.
TEST(MpiGossipCheckpoint, RestoredStateIsTheSavedStateExactly) {
  for (const std::vector<Override>& o : CheckpointedJobs()) {
    SCOPED_TRACE(describe(o));
    std::vector<Override> with = o;
    with.push_back({"train.checkpoint_every", "0.1"});
    with.push_back({"train.eval_every", "0.1"});
    with.push_back({"train.epochs", "0"});
    with.push_back({"train.budget", "0.3"});
    Fixture a("ckpt_exact", 4, with);
    a.run();
    std::vector<std::string> cks;
    if (world_rank() == 0) cks = CheckpointStore::list(a.dir);
    const int count = from_rank0(static_cast<int>(cks.size()), MPI_INT);
    EXPECT_GE(count, 2) << "periodic cuts and the final one";
    int in_hand = 0;
    for (int i = 0; i < count; ++i) {
      std::optional<Checkpoint> ck;
      if (world_rank() == 0) {
        ck.emplace(CheckpointStore::load(cks[static_cast<size_t>(i)], a.job().identity));
        for (const GossipWorkerState& w : decode(a, *ck).workers) {
          in_hand += w.phase == kGossipGradient;
        }
      }
      const double t = from_rank0(ck ? ck->info.train_s : 0.0, MPI_DOUBLE);
      std::vector<Override> until = with;
      until.push_back({"train.budget", fmt::format("{:.17g}", t)});
      Fixture b("ckpt_exact_b", 4, until);
      const std::optional<RunResult> rb = b.run(ck ? &*ck : nullptr);
      if (world_rank() != 0) continue;
      EXPECT_TRUE(rb->stopped.empty()) << rb->stopped;
      EXPECT_EQ(rb->gradients, ck->info.updates) << "no step after the cut";
      const Checkpoint again = CheckpointStore::load_latest(b.dir, b.job().identity);
      EXPECT_EQ(again.info.train_s, ck->info.train_s);
      ASSERT_EQ(again.entries.size(), ck->entries.size());
      for (const auto& [name, entry] : ck->entries) {
        EXPECT_EQ(slurp(again.path + "/" + name + ".bin"), slurp(ck->path + "/" + name + ".bin"))
            << ck->path << ": " << name << " differs";
      }
    }
    if (world_rank() == 0) {
      EXPECT_EQ(in_hand, 4) << "the final cut: every rank's gradient in hand";
    }
  }
}

// A resumed run goes on from its cut: the rows kept, the budget counting
// from the start of the original run, every rank at the same step.
TEST(MpiGossipCheckpoint, ResumeContinuesTheRun) {
  std::vector<Override> with = {
      {"policy.name", "sgp"},      {"gossip.topology", "star"}, {"train.checkpoint_every", "0.1"},
      {"train.eval_every", "0.1"}, {"train.epochs", "0"},       {"train.budget", "0.15"}};
  Fixture a("ckpt_continue", 4, with);
  a.run();
  std::optional<Checkpoint> ck;
  if (world_rank() == 0) ck.emplace(CheckpointStore::load_latest(a.dir, a.job().identity));
  with.back().second = "0.4";
  Fixture b("ckpt_continue_b", 4, with);
  b.dir = a.dir;
  const std::optional<RunResult> rb = b.run(ck ? &*ck : nullptr);
  if (world_rank() != 0) return;
  EXPECT_DOUBLE_EQ(ck->info.train_s, 0.15);
  ASSERT_TRUE(rb->stopped.empty()) << rb->stopped;
  EXPECT_NEAR(rb->train_s, 0.4, 1e-9);
  EXPECT_NEAR(rb->real_train_s, 0.4 - 0.15, 1e-9) << "the budget counts from the cut";
  EXPECT_GT(rb->gradients, ck->info.updates);
  EXPECT_EQ(rb->worker_pushes[0] * 4, rb->gradients) << "every rank takes every step";
  const std::vector<MetricsRow> rows = read_metrics_csv(a.dir + "/metrics.csv");
  ASSERT_GT(rows.size(), static_cast<size_t>(ck->info.rows));
  for (size_t i = static_cast<size_t>(ck->info.rows); i < rows.size(); ++i) {
    EXPECT_GT(rows[i].time_s, 0.15);
    EXPECT_GE(rows[i].updates, ck->info.updates);
  }
  EXPECT_NEAR(rows.back().time_s, 0.4, 1e-9);
  const Checkpoint end = CheckpointStore::load_latest(a.dir, b.job().identity);
  EXPECT_NEAR(decode(b, end).total_weight, 4.0, 4e-6) << "push-sum weight across the resume";
}

// What a gossip run on mpi does not resume from: the same InputError, one
// line naming the checkpoint, on every rank, and nothing opened.
TEST(MpiGossipCheckpoint, RefusalsAreTheSameOnEveryRank) {
  Fixture a("ckpt_refuse", 4, {{"train.checkpoint_every", "1000"}});
  a.steps(3);
  a.run();
  std::optional<Checkpoint> four, threads;
  if (world_rank() == 0) {
    four.emplace(CheckpointStore::load_latest(a.dir, a.job().identity));
    // A threads run's gossip checkpoint of the same job.
    Config tc = a.config;
    tc.train.runtime = "threads";
    Job j = a.job();
    j.config = &tc;
    const std::string dir = testing::fresh_dir("mpi_gossip_threads_ckpt");
    CheckpointStore store(dir, 2);
    j.checkpoints = &store;
    Recorder rec(dir);
    GossipThreadsRuntime().run(j, &rec, nullptr);
    rec.finish();
    threads.emplace(CheckpointStore::load_latest(dir, j.identity));
  }
  auto refused = [](Fixture& f, const std::optional<Checkpoint>& ck, const std::string& what) {
    bool opened = false;
    try {
      const std::optional<RunResult> r = f.run(ck ? &*ck : nullptr, &opened);
      if (r) ADD_FAILURE() << "accepted on rank " << world_rank();
    } catch (const InputError& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find(what), std::string::npos) << m;
      EXPECT_NE(m.find("/checkpoints/ckpt-"), std::string::npos) << m;
      EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    }
    EXPECT_FALSE(opened) << "outputs opened before the refusal";
  };
  Fixture three("ckpt_refuse_3", 3, {{"train.checkpoint_every", "1000"}});
  refused(three, four, "expected 4, not 3");
  Fixture from_threads("ckpt_refuse_threads", 4, {{"train.checkpoint_every", "1000"}});
  refused(from_threads, threads, "written by the threads runtime");
}

// ---- adpsgd (mpi/gossip_adpsgd.h): wait-free pairs, no per-step agreement

std::vector<Override> Adpsgd(std::vector<Override> o = {}) {
  o.insert(o.begin(), {{"policy.name", "adpsgd"},
                       {"train.epochs", "0"},
                       {"train.budget", "0.6"},
                       {"train.eval_every", "0.2"}});
  return o;
}

// Every rank starts from its own model (rank r: the initial model plus r
// on every parameter; mpi::run_gossip is called without MpiRuntime's
// broadcast of rank 0's) and lr is 0: pairwise averaging keeps the sum of
// the models (1e-6 relative) and brings them to consensus. On the ring
// every active rank has passive neighbours; on the star and on 3 ranks
// active ranks also pair with each other (rank 2's only neighbour is rank
// 0, on the star), so a rank answers requests while its own is out.
TEST(MpiAdpsgd, PairwiseAveragingKeepsTheSumAndReachesConsensus) {
  for (const auto& [topo, ranks] : std::vector<std::pair<std::string, int>>{
           {"ring", 4}, {"star", 4}, {"complete", 3}, {"ring", 3}}) {
    SCOPED_TRACE(topo + " on " + std::to_string(ranks) + " ranks");
    Fixture f("adpsgd_sum", ranks,
              Adpsgd({{"gossip.topology", topo}, {"train.budget", "1"}, {"mpi.chunk", "5"}}));
    f.config.optim.lr = 0;  // (the config refuses 0; the runtime takes it)
    MPI_Comm comm = first_ranks(ranks);
    if (comm == MPI_COMM_NULL) continue;
    Job j = f.job();
    const std::vector<float> init = j.initial_params;
    for (float& v : j.initial_params) v += static_cast<float>(world_rank());
    std::optional<Recorder> rec;
    if (world_rank() == 0) rec.emplace(f.dir);
    const RunResult r = mpi::run_gossip(j, comm, rec ? &*rec : nullptr, nullptr);
    if (rec) rec->finish();
    MPI_Comm_free(&comm);
    if (world_rank() != 0) continue;
    ASSERT_TRUE(r.stopped.empty()) << r.stopped;
    std::vector<float> want(init.size());
    for (size_t p = 0; p < init.size(); ++p) want[p] = init[p] + 0.5F * (ranks - 1);
    EXPECT_LE(distance(r.params, want), 1e-6 * norm(want)) << "the sum of the models moved";
    const std::vector<MetricsRow> rows = read_metrics_csv(f.dir + "/metrics.csv");
    ASSERT_GE(rows.size(), 2u);
    EXPECT_GT(rows.front().consensus, 0.5) << "the ranks should start apart";
    EXPECT_LT(rows.back().consensus, 1e-3 * rows.front().consensus) << "no consensus";
    EXPECT_GT(r.gossip.bytes_per_node_step, 0);
  }
}

// Two stragglers of four (ranks 0 and 1: an active and a passive one,
// 40 ms per gradient) do not hold the other two to their pace: ranks 2 and
// 3 take at least three times their steps (about 10x on a quiet machine;
// 4.9x once, with a sweep and the whole suite on two cores, when this said
// 5x; lockstep gives 1x). Rank 1 answers rank 2's requests while
// it sleeps through its delay (else rank 2 would wait up to 40 ms on half
// of its exchanges). dpsgd on mpi, in lockstep, gives every rank the same
// count.
TEST(MpiAdpsgd, StragglersDoNotSlowTheOthers) {
  const std::vector<Override> slow = {{"stragglers.fraction", "0.5"},
                                      {"stragglers.delay", "lognormal"},
                                      {"stragglers.scale", "0.04"},
                                      {"stragglers.sigma", "0"},
                                      {"train.budget", "1"}};
  Fixture a("adpsgd_straggler", 4, Adpsgd(slow));
  const std::optional<RunResult> ra = a.run();
  std::vector<Override> lockstep = Adpsgd(slow);
  lockstep.push_back({"policy.name", "dpsgd"});
  Fixture d("dpsgd_straggler", 4, lockstep);
  const std::optional<RunResult> rd = d.run();
  if (world_rank() != 0) return;
  ASSERT_TRUE(ra->stopped.empty()) << ra->stopped;
  const std::vector<int64_t>& s = ra->worker_pushes;
  ASSERT_EQ(s.size(), 4u);
  std::printf("adpsgd steps per rank with ranks 0 and 1 straggling: %lld %lld %lld %lld\n",
              static_cast<long long>(s[0]), static_cast<long long>(s[1]),
              static_cast<long long>(s[2]), static_cast<long long>(s[3]));
  EXPECT_LE(std::max(s[0], s[1]), 30) << "a straggler takes at most 1 s / 40 ms steps";
  EXPECT_GE(std::min(s[2], s[3]), 3 * std::max(s[0], s[1]));
  EXPECT_EQ(rd->worker_pushes[0], rd->worker_pushes[3]) << "dpsgd on mpi is in lockstep";
}

// `o` with every worker's gradient taking 1 ms more (a delay for all).
std::vector<Override> with_ms_for_all(std::vector<Override> o) {
  o.insert(o.end(), {{"stragglers.fraction", "1"},
                     {"stragglers.delay", "lognormal"},
                     {"stragglers.scale", "0.001"},
                     {"stragglers.sigma", "0"}});
  return o;
}

// On the same job with an epoch target (the same samples), adpsgd on mpi
// learns as adpsgd on threads does: test loss within 2 % and accuracy
// within 2 pp, run by run, and the epoch target (rank 0's stop message)
// ends the mpi run within two steps of every rank. Every worker's gradient
// takes 1 ms more (a delay for all), so that every worker takes its share
// of the steps on both runtimes (without it one threads worker can take
// them all on this tiny model before the others start).
TEST(MpiAdpsgd, LearnsAsOnTheThreadsRuntime) {
  for (int round = 0; round < 3; ++round) {
    Fixture f("adpsgd_vs_threads", 4,
              with_ms_for_all(
                  Adpsgd({{"train.budget", "0"}, {"train.epochs", "4"}, {"optim.lr", "0.05"}})));
    const std::optional<RunResult> r = f.run();
    if (world_rank() != 0) continue;
    ASSERT_TRUE(r->stopped.empty()) << r->stopped;
    Config tc = f.config;
    tc.train.runtime = "threads";
    Job j = f.job();
    j.config = &tc;
    Recorder rec(testing::fresh_dir("mpi_adpsgd_threads"));
    const RunResult t = GossipThreadsRuntime().run(j, &rec, nullptr);
    rec.finish();
    std::printf(
        "adpsgd mpi vs threads: test_acc %.4f vs %.4f, test_loss %.4f vs %.4f, samples %lld vs "
        "%lld\n",
        r->last.test_acc, t.last.test_acc, r->last.test_loss, t.last.test_loss,
        static_cast<long long>(r->last.samples), static_cast<long long>(t.last.samples));
    const int64_t target = static_cast<int64_t>(std::ceil(4.0 * f.train.size()));
    EXPECT_GE(r->last.samples, target);
    // The stop is a message's round trip after the target (docs/gossip.md):
    // a step or two per rank on an idle machine; it was 2.25 (6544 against
    // 6400 + 128) once with a compiler running beside ctest -j 2. At most 8
    // steps per rank: an epoch target that does not stop the run still fails.
    EXPECT_LE(r->last.samples, target + 8 * 4 * f.config.train.batch) << "stopped late";
    EXPECT_NEAR(r->last.test_loss, t.last.test_loss, 0.02 * t.last.test_loss);
    EXPECT_NEAR(r->last.test_acc, t.last.test_acc, 0.02);
    EXPECT_GT(r->last.test_acc, 0.6);
  }
}

// Busy threads for as long as it lives: the ranks' threads then wait for a
// core for whole time slices (milliseconds), as on a loaded machine.
class CpuLoad {
 public:
  explicit CpuLoad(int threads) {
    for (int i = 0; i < threads; ++i) {
      threads_.emplace_back([this] {
        volatile uint64_t x = 0;
        while (!stop_.load(std::memory_order_relaxed)) x = x + 1;
      });
    }
  }
  ~CpuLoad() {
    stop_ = true;
    for (std::thread& t : threads_) t.join();
  }

 private:
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
};

// Rank 0's stop (the epoch target, from the ranks' counts) can come while
// another rank already waits at its row: that row's meeting is the one
// that tells the rank the run stopped, and it ends there with the others
// (no second meeting that the others, already ending, never join: with
// one, the ranks' collectives mismatched: MPI_ERR_TRUNCATE or a timeout).
// Rows every 0.5 ms and two busy threads on rank 0 (its threads then wait
// for time slices, so it comes to rows late and decides the stop while the
// others wait at one) make the coincidence common: with the second meeting
// put back, 6 of 8 single rounds failed here, so five rounds miss it
// rarely.
TEST(MpiAdpsgd, AStopThatMeetsARowEndsEveryRankTogether) {
  const CpuLoad load(world_rank() == 0 ? 2 : 0);
  for (int round = 0; round < 5; ++round) {
    SCOPED_TRACE(fmt::format("round {}", round));
    Fixture f("adpsgd_stop_at_row", 4,
              with_ms_for_all(Adpsgd(
                  {{"train.budget", "0"}, {"train.epochs", "1"}, {"train.eval_every", "0.0005"}})));
    const std::optional<RunResult> r = f.run();
    ASSERT_TRUE(r.has_value());
    EXPECT_TRUE(r->stopped.empty()) << "rank " << world_rank() << ": " << r->stopped;
    if (world_rank() == 0) {
      EXPECT_GE(r->last.samples, static_cast<int64_t>(f.train.size()));
    }
  }
}

// A diverging adpsgd run stops on every rank with the run layer's line
// (the CLI exits 3): at a row (train.max_nonfinite out of reach), and by
// rank 0's stop message once the non-finite gradients pass
// train.max_nonfinite (between rows: eval_every is past the budget).
TEST(MpiAdpsgd, ADivergingRunStopsOnEveryRank) {
  for (const std::string max_nonfinite : {"1000000000", "20"}) {
    SCOPED_TRACE("train.max_nonfinite " + max_nonfinite);
    const bool rows = max_nonfinite != "20";
    Fixture f("adpsgd_diverge", 4,
              Adpsgd({{"train.budget", "2"},
                      {"train.eval_every", rows ? "0.1" : "5"},
                      {"train.max_nonfinite", max_nonfinite},
                      // (momentum at 1e38 overflows the model: non-finite gradients)
                      {"optim.kind", rows ? "sgd" : "momentum"},
                      {"train.diverge_factor", rows ? "10000" : "0"},
                      {"optim.lr", rows ? "1e30" : "1e38"}}));
    const std::optional<RunResult> r = f.run();
    EXPECT_NE(r->stopped.find("training diverged"), std::string::npos)
        << "rank " << world_rank() << ": '" << r->stopped << "'";
    if (world_rank() == 0) {
      EXPECT_LT(r->train_s, 1.0);
      if (rows) {  // at a row's time, with no closing row
        EXPECT_NEAR(std::remainder(r->train_s, 0.1), 0.0, 1e-9) << r->train_s;
      } else {
        EXPECT_NE(r->stopped.find("consecutive pushes held a NaN"), std::string::npos)
            << r->stopped;
      }
    }
  }
}

// adpsgd's checkpoints on mpi (cut at a collective every rank enters at
// its own checkpoint time, each with its gradient in hand) restore
// exactly: a run resumed from any of them that ends at once writes a final
// checkpoint whose every part is byte for byte the one it read. (The run
// itself is not deterministic, so a resumed run is not compared with an
// uninterrupted one.)
TEST(MpiAdpsgd, RestoredStateIsTheSavedStateExactly) {
  const std::vector<Override> with = Adpsgd({{"train.checkpoint_every", "0.1"},
                                             {"train.eval_every", "0.1"},
                                             {"train.budget", "0.3"},
                                             {"optim.kind", "momentum"}});
  Fixture a("adpsgd_ckpt_exact", 4, with);
  a.run();
  std::vector<std::string> cks;
  if (world_rank() == 0) cks = CheckpointStore::list(a.dir);
  const int count = from_rank0(static_cast<int>(cks.size()), MPI_INT);
  EXPECT_GE(count, 3) << "periodic cuts and the final one";
  for (int i = 0; i < count; ++i) {
    std::optional<Checkpoint> ck;
    if (world_rank() == 0) {
      ck.emplace(CheckpointStore::load(cks[static_cast<size_t>(i)], a.job().identity));
      EXPECT_EQ(ck->info.runtime, "mpi");
      int64_t steps = 0;
      for (const GossipWorkerState& w : decode(a, *ck).workers) {
        EXPECT_EQ(w.phase, kGossipGradient) << "every rank cut with its gradient in hand";
        steps += w.step;
      }
      EXPECT_EQ(steps, ck->info.updates) << "the run's steps are the ranks' steps";
    }
    const double t = from_rank0(ck ? ck->info.train_s : 0.0, MPI_DOUBLE);
    std::vector<Override> until = with;
    until.push_back({"train.budget", fmt::format("{:.17g}", t)});
    Fixture b("adpsgd_ckpt_exact_b", 4, until);
    const std::optional<RunResult> rb = b.run(ck ? &*ck : nullptr);
    if (world_rank() != 0) continue;
    EXPECT_TRUE(rb->stopped.empty()) << rb->stopped;
    EXPECT_EQ(rb->gradients, ck->info.updates) << "no step after the cut";
    const Checkpoint again = CheckpointStore::load_latest(b.dir, b.job().identity);
    EXPECT_EQ(again.info.train_s, ck->info.train_s);
    ASSERT_EQ(again.entries.size(), ck->entries.size());
    for (const auto& [name, entry] : ck->entries) {
      EXPECT_EQ(slurp(again.path + "/" + name + ".bin"), slurp(ck->path + "/" + name + ".bin"))
          << ck->path << ": " << name << " differs";
    }
  }
}

// A resumed adpsgd run goes on from its cut: the rows kept, the budget
// counting from the start of the original run, the steps and samples going
// on from the cut's; a resume on another rank count is refused on every
// rank with one line.
TEST(MpiAdpsgd, ResumeContinuesTheRun) {
  std::vector<Override> with = Adpsgd(
      {{"train.checkpoint_every", "0.1"}, {"train.eval_every", "0.1"}, {"train.budget", "0.15"}});
  Fixture a("adpsgd_ckpt_continue", 4, with);
  a.run();
  std::optional<Checkpoint> ck;
  if (world_rank() == 0) ck.emplace(CheckpointStore::load_latest(a.dir, a.job().identity));
  // 1 s, so the resumed part is 5.7 times the cut's: wall clock, and a
  // loaded machine can slow a rank several times over.
  with.back().second = "1.0";
  Fixture b("adpsgd_ckpt_continue_b", 4, with);
  b.dir = a.dir;
  const std::optional<RunResult> rb = b.run(ck ? &*ck : nullptr);
  Fixture three("adpsgd_ckpt_3", 3, with);
  try {
    if (three.run(ck ? &*ck : nullptr)) ADD_FAILURE() << "accepted on rank " << world_rank();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("expected 4, not 3"), std::string::npos) << e.what();
  }
  if (world_rank() != 0) return;
  EXPECT_DOUBLE_EQ(ck->info.train_s, 0.15);
  ASSERT_TRUE(rb->stopped.empty()) << rb->stopped;
  EXPECT_NEAR(rb->train_s, 1.0, 1e-9);
  EXPECT_NEAR(rb->real_train_s, 1.0 - 0.15, 1e-9) << "the budget counts from the cut";
  EXPECT_GT(rb->gradients, 2 * ck->info.updates);
  int64_t steps = 0;
  for (int64_t s : rb->worker_pushes) steps += s;
  EXPECT_EQ(steps, rb->gradients) << "the ranks' steps, from the start of the original run";
  const std::vector<MetricsRow> rows = read_metrics_csv(a.dir + "/metrics.csv");
  ASSERT_GT(rows.size(), static_cast<size_t>(ck->info.rows));
  for (size_t i = static_cast<size_t>(ck->info.rows); i < rows.size(); ++i) {
    EXPECT_GT(rows[i].time_s, 0.15);
    EXPECT_GE(rows[i].updates, ck->info.updates);
  }
  EXPECT_NEAR(rows.back().time_s, 1.0, 1e-9);
}

// A rank slower than mpi.timeout: every rank stops with MpiError naming
// what it waited for instead of hanging. (Last: it leaves the run's
// collectives behind on its own communicator.)
// gossip.eval_workers on mpi: every rank evaluates its own de-biased model
// and rank 0 reduces the lowest, mean and highest accuracy. Checked against
// the models of the final checkpoint, each evaluated here: sgp on a star,
// where the push-sum weights differ from 1 (so de-biasing matters).
TEST(MpiGossipCheckpoint, EvalWorkersIsEachRanksOwnModelEvaluated) {
  Fixture f("eval_workers", 4,
            {{"policy.name", "sgp"},
             {"gossip.topology", "star"},
             {"optim.lr", "0.5"},
             {"gossip.eval_workers", "true"},
             {"train.checkpoint_every", "1000"}});  // the final checkpoint only
  f.accuracy_is_param0 = true;  // the accuracy shows the scale of what was evaluated
  f.steps(6);
  const std::optional<RunResult> r = f.run();
  if (world_rank() != 0) return;
  ASSERT_TRUE(r->stopped.empty()) << r->stopped;
  ASSERT_TRUE(r->last.has_worker_eval);
  const Checkpoint ck = CheckpointStore::load_latest(f.dir, f.job().identity);
  const Job j = f.job();
  const int n = f.config.train.workers;
  GossipModels models(n, j.initial_params, gossip_local_update(f.config));
  DelayModel delays(f.config.stragglers, n, f.config.train.seed);
  std::vector<float> grad(j.initial_params.size()), own(j.initial_params.size()), g2(own.size());
  const Dataset test = head(*j.test, f.config.train.eval_samples);
  std::unique_ptr<Model> m = j.make_model();
  m->bind(own, g2);
  std::vector<double> acc;
  bool weights_differ = false;
  for (int w = 0; w < n; ++w) {
    ShardSampler sampler = make_sampler(j, w);
    GossipWorkerState st;
    ck.read(gossip_worker_blob(w), [&](StateReader& rd) {
      load_gossip_worker(rd, w, n, models, w, sampler, delays, &st, grad);
    });
    weights_differ = weights_differ || std::abs(models.weight(w) - 1.0) > 1e-6;
    models.debiased(w, own);
    acc.push_back(m->evaluate(test).accuracy);
  }
  EXPECT_TRUE(weights_differ) << "every push-sum weight is 1: the test does not see de-biasing";
  const WorkerAccuracy want = worker_accuracy(acc);
  EXPECT_EQ(r->last.worker_acc_min, want.min);
  EXPECT_NEAR(r->last.worker_acc_mean, want.mean, 1e-12);
  EXPECT_EQ(r->last.worker_acc_max, want.max);
  EXPECT_LT(want.min, want.max) << "the workers' models scored alike: the test cannot tell them";
}

// SlowMo's outer step is taken at every global average, alike on every
// rank: with a tiny local.outer_lr the run stays about one local step
// from the initial model.
TEST(MpiGossip, TheOuterStepIsTakenAtEveryGlobalAverage) {
  Fixture plain("outer_plain", 3, {{"gossip.global_every", "1"}});
  plain.steps(40);
  const std::optional<RunResult> rp = plain.run();
  Fixture held("outer_held", 3, {{"gossip.global_every", "1"}, {"local.outer_lr", "1e-6"}});
  held.steps(40);
  const std::optional<RunResult> rh = held.run();
  if (world_rank() != 0) return;
  const double moved = distance(rp->params, plain.job().initial_params);
  EXPECT_GT(moved, 0.1);
  EXPECT_LT(distance(rh->params, held.job().initial_params), 0.3 * moved);  // one step, 40
}

// ---- a graceful leave (SIGTERM to a rank; here set_gossip_leave_for_test)

// The run with rank `rank` leaving after `step` of its steps.
std::optional<RunResult> run_with_leave(Fixture& f, int rank, int64_t step,
                                        const Checkpoint* resume = nullptr) {
  mpi::set_gossip_leave_for_test(rank, step);
  std::optional<RunResult> r;
  try {
    r = f.run(resume);
  } catch (...) {
    mpi::set_gossip_leave_for_test(-1, 0);
    throw;
  }
  mpi::set_gossip_leave_for_test(-1, 0);
  return r;
}

// sgp at lr 0 after 6 steps: rank 2 leaves after step 8 and its (x, w)
// goes to its live successor, so the average model sum x / sum w is the
// one of the run without a leave (1e-6 relative), and the live ranks'
// weights still sum to n (star: weights other than 1).
TEST(MpiGossipLeave, SgpKeepsThePushSumMassAtALeave) {
  for (const std::string topo : {"ring", "star"}) {
    SCOPED_TRACE(topo);
    const std::vector<Override> o = {
        {"policy.name", "sgp"}, {"gossip.topology", topo}, {"train.checkpoint_every", "1000"}};
    Fixture a("leave_sgp_a", 4, o);
    a.steps(12);
    a.lr_zero_after(6);
    const std::optional<RunResult> ra = a.run();
    Fixture b("leave_sgp_b", 4, o);
    b.steps(12);
    b.lr_zero_after(6);
    const std::optional<RunResult> rb = run_with_leave(b, 2, 8);
    if (world_rank() != 0) continue;
    ASSERT_TRUE(rb->stopped.empty()) << rb->stopped;
    ASSERT_EQ(rb->membership.size(), 1u);
    EXPECT_EQ(rb->membership[0].worker, 2);
    EXPECT_FALSE(rb->membership[0].join);
    EXPECT_EQ(rb->membership[0].cause, MembershipCause::kSignal);
    EXPECT_EQ(rb->last.live_workers, 3);
    EXPECT_EQ(ra->last.live_workers, 4);
    EXPECT_EQ(rb->worker_pushes[2], 8) << "the leaver took no step after its leave";
    EXPECT_GT(rb->worker_pushes[0], 8);
    EXPECT_EQ(rb->gradients, 4 * 8 + 3 * (rb->worker_pushes[0] - 8));
    EXPECT_GT(ra->last.consensus_rel, 0) << "the models should differ";
    EXPECT_LE(distance(ra->params, rb->params), 1e-6 * norm(ra->params));
    // The final checkpoint: the live set, and the live ranks' weights.
    const Checkpoint ck = CheckpointStore::load_latest(b.dir, b.job().identity);
    EXPECT_FALSE(
        CheckpointStore::load_latest(a.dir, a.job().identity).has(mpi::gossip_membership_blob(0)))
        << "a checkpoint without a leave holds no live set";
    for (int w = 0; w < 4; ++w) EXPECT_TRUE(ck.has(mpi::gossip_membership_blob(w)));
    const Job j = b.job();
    GossipModels models(4, j.initial_params, gossip_local_update(b.config));
    DelayModel delays(b.config.stragglers, 4, b.config.train.seed);
    std::vector<float> grad(j.initial_params.size());
    double live_weight = 0;
    for (int w = 0; w < 4; ++w) {
      ShardSampler sampler = make_sampler(j, w);
      GossipWorkerState st;
      ck.read(gossip_worker_blob(w), [&](StateReader& r) {
        load_gossip_worker(r, w, 4, models, w, sampler, delays, &st, grad);
      });
      if (w == 2) {
        EXPECT_EQ(norm(models.x(w)), 0.0) << "the leaver holds nothing";
      } else {
        live_weight += models.weight(w);
      }
    }
    EXPECT_NEAR(live_weight, 4.0, 1e-9);
  }
}

// dpsgd (cta, atc) and pdsgdm: the live ranks go on over the live graph,
// the leaver's model is dropped; the rows count the live ranks.
TEST(MpiGossipLeave, DpsgdAndPdsgdmGoOnWithTheLiveRanks) {
  for (const std::vector<Override>& o : std::vector<std::vector<Override>>{
           {{"policy.name", "dpsgd"}},
           {{"policy.name", "dpsgd"}, {"gossip.order", "atc"}, {"gossip.global_every", "3"}},
           {{"policy.name", "pdsgdm:2"}, {"optim.kind", "momentum"}},
           {{"policy.name", "sgp"}, {"gossip.global_every", "2"}}}) {
    SCOPED_TRACE(describe(o));
    Fixture f("leave_dpsgd", 4, o);
    f.steps(16);
    f.lr_zero_after(10);
    const std::optional<RunResult> r = run_with_leave(f, 1, 5);
    if (world_rank() != 0) continue;
    ASSERT_TRUE(r->stopped.empty()) << r->stopped;
    ASSERT_EQ(r->membership.size(), 1u);
    EXPECT_EQ(r->membership[0].worker, 1);
    EXPECT_EQ(r->last.live_workers, 3);
    EXPECT_EQ(r->worker_pushes[1], 5);
    EXPECT_EQ(r->worker_pushes[0], r->worker_pushes[3]);
    EXPECT_GE(r->worker_pushes[0], 16);
    EXPECT_EQ(r->gradients, 4 * 5 + 3 * (r->worker_pushes[0] - 5));
    EXPECT_TRUE(std::isfinite(r->last.consensus_rel));
    EXPECT_LT(r->last.consensus_rel, 0.05) << "the live ranks gossip with each other";
    EXPECT_GT(r->last.test_acc, 0.5);
  }
}

// Two ranks leave at the same step, rank 0 (which still writes the rows)
// among them, with every worker's model evaluated: the mass of both goes
// to their live successors, the log has both leaves, the rows count 2.
TEST(MpiGossipLeave, TwoRanksLeaveAtOnceRankZeroAmongThem) {
  const std::vector<Override> o = {{"policy.name", "sgp"}, {"gossip.eval_workers", "true"}};
  Fixture a("leave_two_a", 4, o);
  a.steps(12);
  a.lr_zero_after(4);
  const std::optional<RunResult> ra = a.run();
  Fixture b("leave_two_b", 4, o);
  b.steps(12);
  b.lr_zero_after(4);
  mpi::set_gossip_leave_for_test(3, 6);
  const std::optional<RunResult> rb = run_with_leave(b, 0, 6);  // (clears both)
  if (world_rank() != 0) return;
  ASSERT_TRUE(rb->stopped.empty()) << rb->stopped;
  ASSERT_EQ(rb->membership.size(), 2u);
  EXPECT_EQ(rb->membership[0].worker, 0);
  EXPECT_EQ(rb->membership[1].worker, 3);
  EXPECT_EQ(rb->last.live_workers, 2);
  EXPECT_EQ(rb->worker_pushes[0], 6);
  EXPECT_EQ(rb->worker_pushes[3], 6);
  EXPECT_GT(rb->worker_pushes[1], 6);
  EXPECT_GT(rb->last.worker_acc_min, 0.3) << "a left rank's model is not evaluated";
  EXPECT_LE(distance(ra->params, rb->params), 1e-6 * norm(ra->params));
}

// train.min_workers = 4: the leave stops the run on every rank, with the
// shared line.
TEST(MpiGossipLeave, ALeaveBelowMinWorkersStopsTheRun) {
  Fixture f("leave_min", 4, {{"policy.name", "sgp"}, {"train.min_workers", "4"}});
  f.steps(12);
  const std::optional<RunResult> r = run_with_leave(f, 3, 4);
  if (!r) return;
  EXPECT_NE(r->stopped.find("fewer than train.min_workers = 4"), std::string::npos)
      << "rank " << world_rank() << ": " << r->stopped;
  if (world_rank() != 0) return;
  EXPECT_EQ(r->worker_pushes[0], 4);
}

// A checkpoint after a leave resumes with the leaver still out: the resumed
// run is the run without a checkpoint, bit for bit.
TEST(MpiGossipLeave, AResumeAfterALeaveKeepsTheRankOut) {
  for (const std::string policy : {"sgp", "dpsgd"}) {
    SCOPED_TRACE(policy);
    const std::vector<Override> o = {
        {"policy.name", policy}, {"optim.kind", "momentum"}, {"train.checkpoint_every", "1000"}};
    Fixture whole("leave_whole", 4, o);
    whole.steps(14);
    const std::optional<RunResult> rw = run_with_leave(whole, 2, 4);
    Fixture a("leave_ckpt", 4, o);
    a.steps(8);
    run_with_leave(a, 2, 4);
    std::optional<Checkpoint> ck;
    if (world_rank() == 0) ck.emplace(CheckpointStore::load_latest(a.dir, a.job().identity));
    Fixture b("leave_ckpt_resumed", 4, o);
    b.dir = a.dir;
    b.steps(14);
    const std::optional<RunResult> rb = b.run(ck ? &*ck : nullptr);
    if (world_rank() != 0) continue;
    ASSERT_TRUE(rb->stopped.empty()) << rb->stopped;
    ASSERT_EQ(rb->membership.size(), 1u);
    EXPECT_EQ(rb->membership[0].worker, 2);
    EXPECT_EQ(rb->last.live_workers, 3);
    EXPECT_EQ(rb->worker_pushes, rw->worker_pushes);
    EXPECT_EQ(rb->gradients, rw->gradients);
    EXPECT_EQ(rb->params, rw->params) << "the resumed run differs from the whole one";
  }
}

TEST(MpiGossip, ZzATimeoutNamesTheWaitOnEveryRank) {
  Fixture f("timeout", 4,
            {{"mpi.timeout", "0.5"},
             {"stragglers.fraction", "0.25"},  // rank 0
             {"stragglers.delay", "lognormal"},
             {"stragglers.scale", "2"},
             {"stragglers.sigma", "0"}});
  try {
    f.run();
    ADD_FAILURE() << "no timeout on rank " << world_rank();
  } catch (const mpi::MpiError& e) {
    EXPECT_NE(std::string(e.what()).find("timed out after 0.5 s on worker"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace hsgd

int main(int argc, char** argv) {
  hsgd::mpi::Session session(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  return hsgd::mpi_gtest::run_all_tests();
}
