// hsgd fidelity end to end: the linear-test model on the synthetic set, on
// threads and on the simulator, one round, a short budget; and the launches
// over emulated hosts (mpi-netns.sh) where namespaces can be made.
#include <unistd.h>

#include <thread>

#include "cli_helpers.h"
#include "test_helpers.h"

namespace hsgd {
namespace {

using testing_helpers::slurp;

std::string job_config() {
  const std::string path = tmp("job.toml");
  std::ofstream(path) << "[data]\nspec = \"synthetic\"\n[model]\nname = \"linear-test\"\n"
                         "[train]\nbatch = 16\nbudget = 1.5\neval_every = 0.5\nseed = 3\n"
                         "[optim]\nlr = 0.1\n";
  return path;
}

TEST(FidelityCli, ThreadsAgainstTheSimulatorWritesTheTableAndBothRuns) {
  const std::string out = tmp("fid-threads");
  const Outcome o = run("fidelity --config " + job_config() +
                        " --real threads --workers 2 --rounds 1 --policies async,sync --target 0.6"
                        " --out " +
                        out);
  ASSERT_EQ(o.code, 0) << o.err;
  for (const char* p : {"async", "sync"}) {
    for (const char* side : {"real", "sim"}) {
      const std::string dir = out + "/" + p + "/round-0/" + side;
      ASSERT_TRUE(fs::exists(dir + "/metrics.csv")) << dir;
      const nlohmann::json s = nlohmann::json::parse(std::ifstream(dir + "/summary.json"));
      EXPECT_EQ(s["runtime"], std::string(side) == "real" ? "threads" : "sim");
      EXPECT_EQ(s["workers"], 2);
      EXPECT_EQ(s["seed"], 3);
    }
    // The simulated run has the calibrated costs and this machine's cores.
    std::ifstream cfg(out + "/" + p + "/round-0/sim/config.toml");
    const std::string text(std::istreambuf_iterator<char>(cfg), {});
    const std::string cores = "cores = " + std::to_string(std::thread::hardware_concurrency());
    EXPECT_NE(text.find(cores + "\n"), std::string::npos) << text;
  }
  const nlohmann::json j = nlohmann::json::parse(std::ifstream(out + "/fidelity.json"));
  ASSERT_EQ(j["runs"].size(), 2u);
  EXPECT_EQ(j["runs"][0]["run"], "async");
  EXPECT_EQ(j["runs"][0]["figures"][0]["figure"], "samples/s");
  EXPECT_TRUE(j["runs"][0]["figures"][0]["real_mean"].get<double>() > 0);
  EXPECT_TRUE(j["runs"][0]["figures"][0]["sim_mean"].get<double>() > 0);
  EXPECT_NE(o.out.find("| sync | samples/s |"), std::string::npos) << o.out;
  std::ifstream costs(out + "/costs.txt");
  const std::string c(std::istreambuf_iterator<char>(costs), {});
  EXPECT_NE(c.find("sim.compute_time = "), std::string::npos) << c;
}

TEST(FidelityCli, RefusesBadArgumentsInOneLineBeforeRunning) {
  const std::string cfg = job_config();
  const std::string out = tmp("fid-bad");
  struct Case {
    std::string args, message;
  } cases[] = {
      {"--real threads --rate 100mbit", "--rate: the threads runtime has no network"},
      {"--real mpi --rate 100mbps", "--rate: expected a rate like 100mbit"},
      {"--real mpi --hosts 1", "--hosts = 1: expected 2 to 26"},
      {"--real slurm", "--real 'slurm': expected mpi or threads"},
      {"--real threads --rounds 0", "--rounds = 0: expected >= 1"},
      {"--real threads --set optim.lr=-1", "optim.lr"},
      {"--real threads --policies nope", "nope"},
      {"--real mpi --netns-script /nonexistent.sh", "--netns-script /nonexistent.sh: not found"},
  };
  for (const Case& c : cases) {
    const Outcome o = run("fidelity --config " + cfg + " " + c.args + " --out " + out);
    EXPECT_EQ(o.code, 2) << c.args << "\n" << o.err;
    EXPECT_NE(o.err.find(c.message), std::string::npos) << c.args << "\n" << o.err;
    EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << o.err;
    EXPECT_FALSE(fs::exists(out)) << c.args;
  }
}

TEST(FidelityCli, MpiOverFourRateLimitedHosts) {
  if (getuid() != 0) GTEST_SKIP() << "mpi-netns.sh needs root";
  const std::string out = tmp("fid-mpi");
  const Outcome o = run("fidelity --config " + job_config() +
                        " --real mpi --hosts 4 --rate 100mbit --rounds 1 --policies async,dpsgd"
                        " --set mpi.timeout=60"
                        " --netns-script " HSGD_SOURCE_DIR "/scripts/mpi-netns.sh --out " +
                        out);
  if (o.code != 0 && o.err.find("exit 77") != std::string::npos)
    GTEST_SKIP() << "no network namespaces here: " << o.err;
  ASSERT_EQ(o.code, 0) << o.err;
  const nlohmann::json real =
      nlohmann::json::parse(std::ifstream(out + "/async/round-0/real/summary.json"));
  EXPECT_EQ(real["runtime"], "mpi");
  EXPECT_EQ(real["workers"], 3);
  const nlohmann::json j = nlohmann::json::parse(std::ifstream(out + "/fidelity.json"));
  // The server's link: measured on the emulated host, predicted by the
  // simulator's shared network.
  const nlohmann::json& util = j["runs"][0]["figures"][6];
  EXPECT_EQ(util["figure"], "server link util");
  EXPECT_TRUE(util["real_mean"].is_number()) << util;
  EXPECT_TRUE(util["sim_mean"].is_number()) << util;
  // A gossip policy: the same 3 workers, on a host each, with no server;
  // its busiest link, measured and predicted.
  const nlohmann::json gossip =
      nlohmann::json::parse(std::ifstream(out + "/dpsgd/round-0/real/summary.json"));
  EXPECT_EQ(gossip["runtime"], "mpi");
  EXPECT_EQ(gossip["servers"], 0);
  EXPECT_EQ(gossip["workers"], 3);
  EXPECT_EQ(gossip["worker_pushes"].size(), 3u);
  const nlohmann::json& gutil = j["runs"][1]["figures"][6];
  EXPECT_TRUE(gutil["real_mean"].is_number()) << gutil;
  EXPECT_TRUE(gutil["sim_mean"].is_number()) << gutil;
}

// A fidelity run killed with SIGKILL during its mpi run takes the whole
// launch with it: the netns script (SIGTERM from the kernel), mpirun (from
// the script) and the ranks (from mpirun), within 20 s.
TEST(FidelityCli, AKilledFidelityRunLeavesNoMpiLaunchBehind) {
  if (getuid() != 0) GTEST_SKIP() << "mpi-netns.sh needs root";
  const std::string out = tmp("fid-kill");
  const std::string log = tmp("fid-kill.log");
  const pid_t fid = start_hsgd(
      {"fidelity", "--config", job_config(), "--real", "mpi", "--hosts", "3", "--rounds", "1",
       "--policies", "async", "--set", "train.budget=600", "--set", "mpi.timeout=60",
       "--netns-script", HSGD_SOURCE_DIR "/scripts/mpi-netns.sh", "--out", out},
      log);
  ASSERT_GT(fid, 0);
  // Wait for the ranks: three `hsgd train` processes below the fidelity run.
  auto ranks = [&] {
    int n = 0;
    for (pid_t p : descendants_of(fid)) {
      std::ifstream f("/proc/" + std::to_string(p) + "/cmdline");
      const std::string cmd((std::istreambuf_iterator<char>(f)), {});
      n += cmd.find("--runtime") != std::string::npos && cmd.rfind(kHsgd, 0) == 0;
    }
    return n;
  };
  const auto t0 = std::chrono::steady_clock::now();
  while (ranks() < 3 && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(60)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    int status = 0;
    if (waitpid(fid, &status, WNOHANG) == fid) {  // ended before its ranks started
      const std::string text = slurp(log);
      if (text.find("exit 77") != std::string::npos)
        GTEST_SKIP() << "no network namespaces here: " << text;
      FAIL() << text;
    }
  }
  ASSERT_EQ(ranks(), 3) << slurp(log);
  const std::vector<pid_t> alive = kill_and_orphans(fid);
  EXPECT_TRUE(alive.empty()) << alive.size() << " processes outlived the fidelity run";
}

}  // namespace
}  // namespace hsgd
