// The simulator's network model end to end (issue 27): the model before it
// reproduces the committed examples (every count, time and decision exactly;
// the losses and accuracies to their last printed digit, since LibTorch's
// kernels differ by CPU), checkpoints from before it resume, and a run
// reports its network.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "cli_helpers.h"
#include "hsgd/metrics/recorder.h"

namespace hsgd {
namespace {

const std::string kSrc = HSGD_SOURCE_DIR;

std::string slurp_file(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::vector<std::vector<std::string>> csv_cells(const std::string& text) {
  std::vector<std::vector<std::string>> rows;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> cells;
    std::istringstream l(line);
    std::string cell;
    while (std::getline(l, cell, ',')) cells.push_back(cell);
    rows.push_back(cells);
  }
  return rows;
}

// `got` is `want` (a golden metrics.csv), except that the columns a model
// computes in floating point (losses, accuracies) may differ by one in their
// last printed digit: the golden files were written on a CPU whose LibTorch
// kernels (AVX2 or AVX-512, chosen at run time) round differently. Every
// other column (time, updates, samples, k, bytes, idle, policy, ...) must be
// equal as text, and so must the header.
void expect_same_metrics(const std::string& got, const std::string& want, const std::string& what) {
  const auto g = csv_cells(got), w = csv_cells(want);
  ASSERT_FALSE(w.empty()) << what;
  ASSERT_EQ(g.size(), w.size()) << what << ": rows";
  ASSERT_EQ(g[0], w[0]) << what << ": header";
  const std::vector<std::string>& header = w[0];
  for (size_t r = 1; r < w.size(); ++r) {
    ASSERT_EQ(g[r].size(), w[r].size()) << what << " row " << r;
    for (size_t c = 0; c < w[r].size(); ++c) {
      const std::string& name = header[c];
      const bool model_figure =
          name.find("loss") != std::string::npos || name.find("acc") != std::string::npos;
      if (!model_figure || g[r][c] == w[r][c]) {
        EXPECT_EQ(g[r][c], w[r][c]) << what << " row " << r << " column " << name;
        continue;
      }
      const size_t dot = w[r][c].find('.');
      const double ulp = dot == std::string::npos
                             ? 1.0
                             : std::pow(10.0, -static_cast<double>(w[r][c].size() - dot - 1));
      EXPECT_NEAR(std::stod(g[r][c]), std::stod(w[r][c]), 1.5 * ulp)
          << what << " row " << r << " column " << name;
    }
  }
}

// tests/data/golden/*.csv: metrics.csv of the committed examples as hsgd
// wrote them before the network model (commit 3154353). (examples/paper/
// now sets sim.network = "independent" itself; churn.toml runs the default.)
TEST(SimNetworkCli, IndependentReproducesTheCommittedExamples) {
  for (const auto& [example, golden] : std::vector<std::pair<std::string, std::string>>{
           {"examples/churn.toml", "churn-metrics.csv"},
           {"examples/paper/synthetic.toml", "paper-synthetic-metrics.csv"}}) {
    const std::string out = tmp("golden_" + golden);
    fs::remove_all(out);
    const Outcome o = run("train --config " + kSrc + "/" + example +
                          " --set sim.network=independent --quiet --out " + out);
    ASSERT_EQ(o.code, 0) << o.err;
    expect_same_metrics(slurp_file(out + "/metrics.csv"),
                        slurp_file(kSrc + "/tests/data/golden/" + golden), example);
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
