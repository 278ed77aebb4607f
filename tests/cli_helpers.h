// Running the hsgd binary from a test: its exit code, stderr and stdout,
// fixture files in a directory of the test process's own. Shared by the
// end-to-end test files.
#pragma once
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "hsgd/data/dataset.h"

namespace hsgd {
namespace {

namespace fs = std::filesystem;

const std::string kHsgd = HSGD_BINARY_DIR "/hsgd";

struct Outcome {
  int code = -1;
  std::string err;  // stderr
  std::string out;  // stdout
};

// A directory of this process's own: CTest runs the tests of this file as
// separate processes, in parallel, and each writes the fixtures.
inline std::string tmp(const std::string& name) {
  struct Dir {
    fs::path path = fs::path(::testing::TempDir()) / ("hsgd_cli_" + std::to_string(getpid()));
    Dir() { fs::create_directories(path); }
    ~Dir() {
      std::error_code ec;
      fs::remove_all(path, ec);
    }
  };
  static const Dir dir;
  return (dir.path / name).string();
}

inline Outcome run(const std::string& args) {
  const std::string err_file = tmp("stderr.txt");
  const std::string cmd = kHsgd + " " + args + " 2> " + err_file;
  Outcome o;
  FILE* p = popen(cmd.c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) o.out.append(buf, n);
  const int status = pclose(p);
  o.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream e(err_file);
  o.err.assign(std::istreambuf_iterator<char>(e), {});
  return o;
}

// Runs `prefix hsgd args` (prefix: e.g. "mpirun -np 3 "), stdout
// discarded, stderr kept.
inline Outcome run(const std::string& prefix, const std::string& args) {
  const std::string err_file = tmp("stderr_prefixed.txt");
  const std::string cmd = prefix + kHsgd + " " + args + " > /dev/null 2> " + err_file;
  const int status = std::system(cmd.c_str());
  Outcome o;
  o.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream e(err_file);
  o.err.assign(std::istreambuf_iterator<char>(e), {});
  return o;
}

inline std::string write(const std::string& name, const std::string& text) {
  const std::string p = tmp(name);
  std::ofstream(p, std::ios::binary) << text;
  return p;
}

inline void write_csv(const std::string& path, const Dataset& d) {
  std::ofstream f(path);
  for (int64_t i = 0; i < d.size(); ++i) {
    f << d.labels[static_cast<size_t>(i)];
    for (float v : d.sample(i)) f << ',' << v;
    f << '\n';
  }
}

inline nlohmann::json summary(const std::string& dir) {
  std::ifstream f(dir + "/summary.json");
  return nlohmann::json::parse(f);
}

// A run's complete checkpoint directories, newest first.
inline std::vector<std::string> CheckpointDirs(const std::string& run_dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(fs::path(run_dir) / "checkpoints", ec)) {
    if (e.path().filename().string().rfind("ckpt-", 0) == 0) out.push_back(e.path().string());
  }
  std::sort(out.rbegin(), out.rend());
  return out;
}

}  // namespace
}  // namespace hsgd
