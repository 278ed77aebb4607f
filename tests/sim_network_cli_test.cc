// The simulator's network model end to end (issue 27): the model before it
// reproduces the committed examples byte for byte, checkpoints from before
// it resume, and a run reports its network.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli_helpers.h"
#include "hsgd/metrics/recorder.h"

namespace hsgd {
namespace {

const std::string kSrc = HSGD_SOURCE_DIR;

std::string slurp_file(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// tests/data/golden/*.csv: metrics.csv of the committed examples as hsgd
// wrote them before the network model (commit 3154353). (examples/paper/
// now sets sim.network = "independent" itself; churn.toml runs the default.)
TEST(SimNetworkCli, IndependentReproducesTheCommittedExamplesByteForByte) {
  for (const auto& [example, golden] : std::vector<std::pair<std::string, std::string>>{
           {"examples/churn.toml", "churn-metrics.csv"},
           {"examples/paper/synthetic.toml", "paper-synthetic-metrics.csv"}}) {
    const std::string out = tmp("golden_" + golden);
    fs::remove_all(out);
    const Outcome o = run("train --config " + kSrc + "/" + example +
                          " --set sim.network=independent --quiet --out " + out);
    ASSERT_EQ(o.code, 0) << o.err;
    EXPECT_EQ(slurp_file(out + "/metrics.csv"), slurp_file(kSrc + "/tests/data/golden/" + golden))
        << example;
    // The shared network (the default) is another model: another run.
    const std::string shared = tmp("shared_" + golden);
    fs::remove_all(shared);
    ASSERT_EQ(run("train --config " + kSrc + "/" + example +
                  " --set sim.network=shared --quiet --out " + shared)
                  .code,
              0);
    EXPECT_NE(slurp_file(shared + "/metrics.csv"), slurp_file(out + "/metrics.csv"));
  }
}

// A run of the independent model resumes: config.toml keeps sim.network (it
// is written for every sim run, though left out of the identity when
// independent), so the resumed config is the checkpoint's.
TEST(SimNetworkCli, AnIndependentRunResumesFromItsOwnConfig) {
  const std::string dir = tmp("independent_resume");
  fs::remove_all(dir);
  ASSERT_EQ(
      run("train --config " + kSrc +
          "/examples/paper/synthetic.toml --budget 1 --checkpoint-every 0.5 --quiet --out " + dir)
          .code,
      0);
  EXPECT_NE(slurp_file(dir + "/config.toml").find("network = 'independent'"), std::string::npos);
  const Outcome o = run("train --resume " + dir + " --budget 2 --quiet");
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_NE(slurp_file(dir + "/metrics.csv").find("\n2.000,"), std::string::npos);
}

// tests/data/sim2-checkpoint: examples/churn.toml with budget 10 and
// checkpoint_every 5 as hsgd wrote it before the network model (sim part
// version 2), cut at 5 s; its metrics.csv is the whole 10 s run's.
TEST(SimNetworkCli, ACheckpointFromBeforeTheNetworkModelResumesAsIndependent) {
  const std::string dir = tmp("sim2");
  fs::remove_all(dir);
  fs::copy(kSrc + "/tests/data/sim2-checkpoint", dir, fs::copy_options::recursive);
  const std::string whole = slurp_file(dir + "/metrics.csv");
  const Outcome refused = run("train --resume " + dir + " --quiet");
  EXPECT_EQ(refused.code, 2);
  EXPECT_NE(refused.err.find("resumes with network = \"independent\" in its config.toml"),
            std::string::npos)
      << refused.err;
  // The model it ran, said in its config: the same identity as before.
  std::string cfg = slurp_file(dir + "/config.toml");
  const size_t sim = cfg.find("[sim]\n");
  ASSERT_NE(sim, std::string::npos);
  cfg.insert(sim + 6, "network = \"independent\"\n");
  std::ofstream(dir + "/config.toml") << cfg;
  const Outcome o = run("train --resume " + dir + " --quiet");
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(slurp_file(dir + "/metrics.csv"), whole);
}

TEST(SimNetworkCli, ARunReportsItsNetwork) {
  const std::string out = tmp("net_report");
  fs::remove_all(out);
  const Outcome o = run("train --config " + kSrc +
                        "/examples/churn.toml --set train.budget=4 --set train.servers=2 "
                        "--set sim.bandwidth=1e6 --quiet --out " +
                        out);
  ASSERT_EQ(o.code, 0) << o.err;
  const nlohmann::json s = nlohmann::json::parse(slurp_file(out + "/summary.json"));
  ASSERT_TRUE(s.contains("network")) << s.dump(2);
  const nlohmann::json& n = s["network"];
  EXPECT_EQ(n["model"], "shared");
  EXPECT_GT(n["busiest_util"].get<double>(), 0.1);
  EXPECT_LE(n["busiest_util"].get<double>(), 1.0 + 1e-9);
  ASSERT_EQ(n["bytes_per_node"].size(), 10u);  // 2 servers + 8 workers
  EXPECT_EQ(n["bytes_per_node"][1]["node"], "server 1");
  EXPECT_GT(n["bytes_per_node"][1]["received"].get<double>(), 0);
  // The net_util column, found by its name.
  const std::vector<MetricsRow> rows = read_metrics_csv(out + "/metrics.csv");
  ASSERT_GE(rows.size(), 2u);
  EXPECT_TRUE(rows.back().has_net);
  EXPECT_GT(rows.back().net_util, 0.1);
  EXPECT_LE(rows.back().net_util, 1.0 + 1e-9);
  // The model before issue 27 reports no network.
  const std::string ind = tmp("net_report_ind");
  fs::remove_all(ind);
  ASSERT_EQ(run("train --config " + kSrc +
                "/examples/churn.toml --set train.budget=2 --set sim.network=independent "
                "--quiet --out " +
                ind)
                .code,
            0);
  EXPECT_FALSE(nlohmann::json::parse(slurp_file(ind + "/summary.json")).contains("network"));
  EXPECT_EQ(slurp_file(ind + "/metrics.csv").find("net_util"), std::string::npos);
}

}  // namespace
}  // namespace hsgd
