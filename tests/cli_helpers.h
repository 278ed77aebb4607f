// Running the hsgd binary from a test: its exit code, stderr and stdout,
// fixture files in a directory of the test process's own. Shared by the
// end-to-end test files.
#pragma once
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
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

// A process's state letter and parent pid (/proc/PID/stat), false if it is
// gone.
inline bool proc_stat(pid_t pid, char* state, pid_t* ppid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  const std::string stat((std::istreambuf_iterator<char>(f)), {});
  const size_t close = stat.rfind(')');  // the command name may hold spaces
  if (close == std::string::npos || close + 2 >= stat.size()) return false;
  std::istringstream rest(stat.substr(close + 2));
  return static_cast<bool>(rest >> *state >> *ppid);
}

// The processes below `root` (children, their children, ...).
inline std::vector<pid_t> descendants_of(pid_t root) {
  std::vector<std::pair<pid_t, pid_t>> all;  // (pid, ppid)
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    char state = 0;
    pid_t ppid = 0;
    if (proc_stat(std::stoi(name), &state, &ppid)) all.emplace_back(std::stoi(name), ppid);
  }
  std::vector<pid_t> out;
  std::vector<pid_t> frontier = {root};
  while (!frontier.empty()) {
    const pid_t parent = frontier.back();
    frontier.pop_back();
    for (const auto& [pid, ppid] : all) {
      if (ppid == parent) {
        out.push_back(pid);
        frontier.push_back(pid);
      }
    }
  }
  return out;
}

// Whether `pid` still runs (a zombie waiting for its new parent to reap it
// does not).
inline bool running(pid_t pid) {
  char state = 0;
  pid_t ppid = 0;
  return proc_stat(pid, &state, &ppid) && state != 'Z';
}

// Starts `hsgd ARGS...` (no shell), its stdout and stderr into `log`.
inline pid_t start_hsgd(const std::vector<std::string>& args, const std::string& log) {
  const pid_t pid = fork();
  if (pid == 0) {
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    std::vector<char*> argv = {const_cast<char*>(kHsgd.c_str())};
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(kHsgd.c_str(), argv.data());
    _exit(127);
  }
  return pid;
}

// Kills `pid` with SIGKILL (no handler runs) and waits up to 20 s for
// every process that was below it then to end; returns those still running
// (and kills them, so that a failing test leaves nothing behind).
inline std::vector<pid_t> kill_and_orphans(pid_t pid) {
  std::vector<pid_t> alive = descendants_of(pid);
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  const auto t0 = std::chrono::steady_clock::now();
  while (!alive.empty() && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(20)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    std::erase_if(alive, [](pid_t p) { return !running(p); });
  }
  for (pid_t p : alive) kill(p, SIGKILL);
  return alive;
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
