// The auto policy (#17) through the hsgd binary: on the threads runtime, and
// deterministic and exactly resumable on the simulator.
#include <sstream>

#include "cli_helpers.h"
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

const std::string kSim =
    "--runtime sim --set sim.compute_time=0.002 --set sim.server_ns_per_param=50 "
    "--set stragglers.fraction=0.5 --set stragglers.sigma=0.01 --set optim.kind=momentum ";

TEST(AutoCli, RunsOnThreads) {
  const std::string out = tmp("threads");
  const Outcome o = run(job(out, "--runtime threads --budget 1 --set optim.kind=momentum"));
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
              "--policy auto --set policy.auto_rule=19 --eval-every 0.25 "
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

}  // namespace
}  // namespace hsgd
