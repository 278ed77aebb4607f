#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "hsgd/core/error.h"
#include "hsgd/metrics/plot.h"
#include "hsgd/metrics/recorder.h"

namespace hsgd {
namespace {

namespace fs = std::filesystem;

std::string fresh_dir(const std::string& name) {
  const fs::path d = fs::path(::testing::TempDir()) / name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d.string();
}

MetricsRow row(double t, double acc, const std::string& policy) {
  MetricsRow r;
  r.time_s = t;
  r.updates = static_cast<int64_t>(t * 10);
  r.samples = r.updates * 64;
  r.k = 2;
  r.train_loss = 1.0 / (1 + t);
  r.test_loss = 1.5 / (1 + t);
  r.test_acc = acc;
  r.staleness_mean = 0.5;
  r.staleness_max = 3;
  r.live_workers = 4;
  r.policy = policy;
  r.seed = 7;
  return r;
}

TEST(Recorder, WritesPartialFilesThenRenamesOnFinish) {
  const std::string d = fresh_dir("rec");
  Recorder rec(d);
  rec.write(row(0, 0.1, "sync"));
  rec.write(row(1.5, 0.5, "sync"));
  EXPECT_FALSE(fs::exists(d + "/metrics.csv"));
  EXPECT_TRUE(fs::exists(d + "/metrics.csv.partial"));
  rec.finish();
  EXPECT_TRUE(fs::exists(d + "/metrics.csv"));
  EXPECT_TRUE(fs::exists(d + "/metrics.jsonl"));
  EXPECT_FALSE(fs::exists(d + "/metrics.csv.partial"));
  auto rows = read_metrics_csv(d + "/metrics.csv");
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_DOUBLE_EQ(rows[1].time_s, 1.5);
  EXPECT_DOUBLE_EQ(rows[1].test_acc, 0.5);
  EXPECT_EQ(rows[1].policy, "sync");
  EXPECT_EQ(rows[1].seed, 7u);
  std::ifstream j(d + "/metrics.jsonl");
  std::string first;
  std::getline(j, first);
  EXPECT_NE(first.find("\"policy\":\"sync\""), std::string::npos);
}

TEST(Recorder, NanTrainLossIsNullInJson) {
  const std::string d = fresh_dir("nan");
  Recorder rec(d);
  MetricsRow r = row(0, 0.1, "async");
  r.train_loss = std::nan("");
  rec.write(r);
  rec.finish();
  std::ifstream j(d + "/metrics.jsonl");
  std::string line;
  std::getline(j, line);
  EXPECT_NE(line.find("\"train_loss\":null"), std::string::npos);
  EXPECT_TRUE(std::isnan(read_metrics_csv(d + "/metrics.csv")[0].train_loss));
}

TEST(Recorder, MalformedCsvNamesFileAndLine) {
  const std::string d = fresh_dir("bad");
  std::ofstream(d + "/metrics.csv") << csv_header() << "\n1,2,3\n";
  try {
    read_metrics_csv(d + "/metrics.csv");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("metrics.csv:2"), std::string::npos) << e.what();
  }
  std::ofstream(d + "/other.csv") << "a,b\n";
  EXPECT_THROW(read_metrics_csv(d + "/other.csv"), InputError);
  EXPECT_THROW(read_metrics_csv(d + "/none.csv"), InputError);
}

TEST(Plot, DrawsAPngForSeveralRuns) {
  if (std::system("command -v gnuplot > /dev/null") != 0) GTEST_SKIP() << "no gnuplot";
  std::vector<std::string> dirs;
  for (const char* p : {"sync", "async"}) {
    const std::string d = fresh_dir(std::string("plot_") + p);
    Recorder rec(d);
    for (int t = 0; t < 5; ++t) rec.write(row(t, 0.2 * t, p));
    rec.finish();
    dirs.push_back(d);
  }
  const std::string png = ::testing::TempDir() + "/runs.png";
  fs::remove(png);
  plot_runs(dirs, png);
  ASSERT_TRUE(fs::exists(png));
  std::ifstream f(png, std::ios::binary);
  char magic[4] = {};
  f.read(magic, 4);
  EXPECT_EQ(std::string(magic + 1, 3), "PNG");
  EXPECT_GT(fs::file_size(png), 1000u);
  EXPECT_THROW(plot_runs({fresh_dir("empty")}, png), InputError);
}

}  // namespace
}  // namespace hsgd
