#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>

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
  // Nothing before the first write (a run refused while it sets up leaves
  // the directory untouched).
  EXPECT_FALSE(fs::exists(d + "/metrics.csv.partial"));
  EXPECT_FALSE(fs::exists(d + "/metrics.jsonl.partial"));
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

// The simulator's shared network adds net_util (issue 27) after the other
// columns; readers find every column by its name, with or without it, and
// a resumed run keeps it.
TEST(Recorder, TheNetUtilColumnIsReadByNameAndKeptOnResume) {
  for (const bool compress : {false, true}) {
    const std::string d = fresh_dir(compress ? "net_util_z" : "net_util");
    {
      Recorder rec(d, compress);
      for (int t = 0; t < 3; ++t) {
        MetricsRow r = row(t, 0.5, "async");
        r.has_compress = compress;
        r.bytes_pushed = 100 * t;
        r.has_net = true;
        r.net_util = 0.25 * t;
        rec.write(r);
      }
      rec.finish();
    }
    std::ifstream in(d + "/metrics.csv");
    std::string header;
    std::getline(in, header);
    EXPECT_EQ(header, (compress ? csv_header_compress() : csv_header()) + ",net_util");
    const std::vector<MetricsRow> rows = read_metrics_csv(d + "/metrics.csv");
    ASSERT_EQ(rows.size(), 3u);
    EXPECT_TRUE(rows[2].has_net);
    EXPECT_DOUBLE_EQ(rows[2].net_util, 0.5);
    EXPECT_EQ(rows[2].has_compress, compress);
    EXPECT_EQ(rows[2].bytes_pushed, compress ? 200 : 0);
    EXPECT_EQ(rows[2].policy, "async");
    {
      Recorder again(d, 2, compress);  // resume after two rows
      MetricsRow r = row(5, 0.6, "async");
      r.has_compress = compress;
      r.has_net = true;
      r.net_util = 0.75;
      again.write(r);
      again.finish();
    }
    const std::vector<MetricsRow> resumed = read_metrics_csv(d + "/metrics.csv");
    ASSERT_EQ(resumed.size(), 3u);
    EXPECT_DOUBLE_EQ(resumed[2].net_util, 0.75);
  }
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

// Issue 25, defect 12: each panel plots the metrics.csv column it is named
// for. The columns are found here by their header name, independently of
// plot.cc, and every value of every series in the script (the inline data
// its `using 1:N` reads) must be that column's. Every column of the rows
// differs, so a panel reading another one (test_auc and staleness_max, as
// it did by position since test_auc and test_logloss were added) fails.
TEST(Plot, EachPanelPlotsTheColumnItIsNamedFor) {
  std::vector<std::string> dirs;
  for (const bool compress : {false, true}) {
    const std::string d = fresh_dir(compress ? "plot_cols_z" : "plot_cols");
    Recorder rec(d, compress);
    for (int t = 0; t < 6; ++t) {
      MetricsRow r = row(t, 0.1 + 0.1 * t, compress ? "async" : "sync");
      r.test_auc = 0.6 + 0.01 * t;
      r.test_logloss = 0.7 + 0.02 * t;
      r.staleness_mean = 0.25 * t + 0.125;
      r.staleness_max = 10 + t;
      r.dropped = 20 + t;
      r.nonfinite = 30 + t;
      r.idle_frac = 0.03 * t + 0.01;
      r.has_compress = compress;
      r.bytes_pushed = 1000 * t;
      rec.write(r);
    }
    rec.finish();
    dirs.push_back(d);
  }
  const std::string script = plot_script(dirs, "/tmp/never.png");
  // The CSV's columns by header name.
  auto column = [](const std::string& csv, const std::string& name) {
    std::ifstream in(csv);
    std::string line;
    std::getline(in, line);
    std::vector<std::string> head;
    std::stringstream hs(line);
    for (std::string c; std::getline(hs, c, ',');) head.push_back(c);
    const size_t at = static_cast<size_t>(std::find(head.begin(), head.end(), name) - head.begin());
    EXPECT_LT(at, head.size()) << name;
    std::vector<double> v;
    while (std::getline(in, line)) {
      std::vector<std::string> f;
      std::stringstream ls(line);
      for (std::string c; std::getline(ls, c, ',');) f.push_back(c);
      v.push_back(std::stod(f.at(at)));
    }
    return v;
  };
  // The script's datablocks: $runI -> rows of numbers.
  std::map<std::string, std::vector<std::vector<double>>> blocks;
  std::vector<std::string> plots;
  {
    std::stringstream ss(script);
    std::string line, block;
    while (std::getline(ss, line)) {
      if (line.rfind("$run", 0) == 0 && line.find("<< EOD") != std::string::npos) {
        block = line.substr(0, line.find(' '));
      } else if (line == "EOD") {
        block.clear();
      } else if (!block.empty() && line[0] != '#') {
        std::stringstream ls(line);
        std::vector<double> r;
        for (double x; ls >> x;) r.push_back(x);
        blocks[block].push_back(r);
      } else if (line.rfind("plot ", 0) == 0) {
        plots.push_back(line);
      }
    }
  }
  ASSERT_EQ(blocks.size(), 2u);
  const std::vector<std::string> named = {"test_acc", "test_loss", "staleness_mean", "idle_frac"};
  ASSERT_EQ(plots.size(), named.size());  // the panels, in this order
  EXPECT_NE(script.find("set title 'mean staleness of applied pushes'"), std::string::npos);
  for (size_t p = 0; p < plots.size(); ++p) {
    for (size_t run = 0; run < dirs.size(); ++run) {
      const std::string use = "$run" + std::to_string(run) + " using ";
      const size_t at = plots[p].find(use);
      ASSERT_NE(at, std::string::npos) << plots[p];
      int x = 0, y = 0;
      ASSERT_EQ(std::sscanf(plots[p].c_str() + at + use.size(), "%d:%d", &x, &y), 2) << plots[p];
      const auto& rows = blocks["$run" + std::to_string(run)];
      const std::string csv = dirs[run] + "/metrics.csv";
      const std::vector<double> time = column(csv, "time_s"), want = column(csv, named[p]);
      ASSERT_EQ(rows.size(), want.size());
      for (size_t i = 0; i < rows.size(); ++i) {
        ASSERT_GE(rows[i].size(), static_cast<size_t>(std::max(x, y)));
        EXPECT_EQ(rows[i][static_cast<size_t>(x - 1)], time[i]) << named[p];
        EXPECT_EQ(rows[i][static_cast<size_t>(y - 1)], want[i]) << named[p] << " row " << i;
      }
    }
  }
}

// gnuplot's warnings (an empty y range: a constant accuracy) do not reach
// the user's terminal.
TEST(Plot, GnuplotWarningsStayOffTheTerminal) {
  if (std::system("command -v gnuplot > /dev/null") != 0) GTEST_SKIP() << "no gnuplot";
  const std::string d = fresh_dir("plot_flat");
  {
    Recorder rec(d);
    for (int t = 0; t < 3; ++t) rec.write(row(t, 0.5, "sync"));  // a flat accuracy
    rec.finish();
  }
  const std::string png = d + "/plot.png";
  std::fflush(stdout);
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  plot_runs({d}, png);
  std::fflush(stdout);
  const std::string out = ::testing::internal::GetCapturedStdout();
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(out, "");
  EXPECT_EQ(err, "");
  EXPECT_TRUE(fs::exists(png));
  EXPECT_FALSE(fs::exists(png + ".gnuplot.log"));
  // A failing script still says what gnuplot said.
  try {
    run_gnuplot("plot $nothing using 1:2\n", d + "/bad.png");
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("gnuplot failed"), std::string::npos) << e.what();
    EXPECT_GT(std::string(e.what()).size(), std::string("gnuplot failed (exit 256)").size())
        << e.what();
  }
}

// Mixture models (dpgmm): effective_k and ari after every other column,
// found by name, kept by a resume.
TEST(Recorder, MixtureColumnsAreWrittenReadAndResumed) {
  const std::string d = fresh_dir("mixture");
  {
    Recorder rec(d);
    for (int t = 0; t < 3; ++t) {
      MetricsRow r = row(t, 0.5, "async");
      r.test_acc = std::nan("");
      r.has_mixture = true;
      r.effective_k = 10 + t;
      r.ari = 0.25 * t;
      rec.write(r);
    }
    rec.finish();
  }
  std::ifstream in(d + "/metrics.csv");
  std::string header;
  std::getline(in, header);
  EXPECT_EQ(header, csv_header() + ",effective_k,ari");
  const std::vector<MetricsRow> rows = read_metrics_csv(d + "/metrics.csv");
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_TRUE(rows[2].has_mixture);
  EXPECT_DOUBLE_EQ(rows[2].effective_k, 12);
  EXPECT_DOUBLE_EQ(rows[2].ari, 0.5);
  EXPECT_TRUE(std::isnan(rows[2].test_acc));
  {
    Recorder again(d, int64_t{2});
    MetricsRow r = row(5, 0.6, "async");
    r.has_mixture = true;
    r.effective_k = 9;
    r.ari = 0.75;
    again.write(r);
    again.finish();
  }
  const std::vector<MetricsRow> resumed = read_metrics_csv(d + "/metrics.csv");
  ASSERT_EQ(resumed.size(), 3u);
  EXPECT_DOUBLE_EQ(resumed[2].effective_k, 9);
  EXPECT_DOUBLE_EQ(resumed[2].ari, 0.75);
}

// Every combination of the optional groups: the header names them in the
// documented order, a reader finds each column by name, and a resumed
// recorder keeps them.
TEST(Recorder, EveryCombinationOfOptionalGroupsIsWrittenReadAndResumed) {
  EXPECT_EQ(
      csv_header_of(Columns{.consensus = true, .worker_eval = true}),
      csv_header() + ",consensus,consensus_rel,worker_acc_min,worker_acc_mean,worker_acc_max");
  EXPECT_EQ(columns_of_header(csv_header() + ",worker_acc_min"), std::nullopt);
  EXPECT_EQ(columns_of_header("time_s,updates"), std::nullopt);
  for (int bits = 0; bits < 64; ++bits) {
    const Columns c{.compress = (bits & 1) != 0,
                    .net = (bits & 2) != 0,
                    .consensus = (bits & 4) != 0,
                    .worker_eval = (bits & 8) != 0,
                    .mixture = (bits & 16) != 0,
                    .noise = (bits & 32) != 0};
    SCOPED_TRACE(bits);
    ASSERT_EQ(columns_of_header(csv_header_of(c)), c);
    auto make = [&](int t) {
      MetricsRow r = row(t, 0.5, "dpsgd");
      r.has_compress = c.compress;
      r.bytes_pushed = 100 + t;
      r.bytes_pulled = 200 + t;
      r.compress_s = 0.125 * t;
      r.has_net = c.net;
      r.net_util = 0.25 * t;
      r.has_consensus = c.consensus;
      r.consensus = 0.5 + t;
      r.consensus_rel = 0.0625 * t;
      r.has_worker_eval = c.worker_eval;
      r.worker_acc_min = 0.25 + 0.125 * t;
      r.worker_acc_mean = 0.5 + 0.125 * t;
      r.worker_acc_max = 0.625 + 0.125 * t;
      r.has_mixture = c.mixture;
      r.effective_k = 3 + t;
      r.ari = 0.375;
      r.has_noise = c.noise;
      r.noise_scale = t == 7 ? std::nan("") : 100.5 + t;
      r.grad_norm_sq = 0.25 * t;
      r.grad_trace_cov = -1.5 + t;
      r.noise_lag = 0.5 * t;
      return r;
    };
    const std::string d = fresh_dir("groups-" + std::to_string(bits));
    {
      Recorder rec(d, c.compress);
      for (int t = 0; t < 3; ++t) rec.write(make(t));
      rec.finish();
    }
    {
      Recorder again(d, int64_t{2}, c.compress);  // resume after two rows
      again.write(make(7));
      again.finish();
    }
    std::ifstream in(d + "/metrics.csv");
    std::string header;
    std::getline(in, header);
    EXPECT_EQ(header, csv_header_of(c));
    const std::vector<MetricsRow> rows = read_metrics_csv(d + "/metrics.csv");
    ASSERT_EQ(rows.size(), 3u);
    const MetricsRow& r = rows[2];
    EXPECT_EQ(Columns::of(r), c);
    if (c.compress) {
      EXPECT_EQ(r.bytes_pushed, 107);
      EXPECT_EQ(r.bytes_pulled, 207);
      EXPECT_DOUBLE_EQ(r.compress_s, 0.875);
    }
    if (c.net) {
      EXPECT_DOUBLE_EQ(r.net_util, 1.75);
    }
    if (c.consensus) {
      EXPECT_DOUBLE_EQ(r.consensus, 7.5);
      EXPECT_DOUBLE_EQ(r.consensus_rel, 0.4375);
    }
    if (c.worker_eval) {
      EXPECT_DOUBLE_EQ(r.worker_acc_min, 1.125);
      EXPECT_DOUBLE_EQ(r.worker_acc_mean, 1.375);
      EXPECT_DOUBLE_EQ(r.worker_acc_max, 1.5);
    }
    if (c.mixture) {
      EXPECT_DOUBLE_EQ(r.effective_k, 10);
      EXPECT_DOUBLE_EQ(r.ari, 0.375);
    }
    if (c.noise) {
      EXPECT_TRUE(std::isnan(r.noise_scale));  // written "nan", read back NaN
      EXPECT_DOUBLE_EQ(r.grad_norm_sq, 1.75);
      EXPECT_DOUBLE_EQ(r.grad_trace_cov, 5.5);
      EXPECT_DOUBLE_EQ(r.noise_lag, 3.5);
      EXPECT_DOUBLE_EQ(rows[1].noise_scale, 101.5);
    }
    std::ifstream jl(d + "/metrics.jsonl");
    std::string last, line;
    while (std::getline(jl, line)) last = line;
    EXPECT_EQ(last.find("worker_acc_mean") != std::string::npos, c.worker_eval);
    EXPECT_EQ(last.find("net_util") != std::string::npos, c.net);
    EXPECT_EQ(last.find("\"noise_scale\":null") != std::string::npos, c.noise);
  }
}

}  // namespace
}  // namespace hsgd
