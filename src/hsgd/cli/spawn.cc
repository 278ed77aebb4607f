#include "hsgd/cli/spawn.h"

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <stdexcept>

extern char** environ;

namespace hsgd::cli {

std::string self_exe() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) throw std::runtime_error("cannot find the hsgd executable (/proc/self/exe)");
  return std::string(buf, static_cast<size_t>(n));
}

pid_t spawn_logged(const std::vector<std::string>& args, const std::string& log) {
  std::vector<std::string> copy = args;
  std::vector<char*> argv;
  for (std::string& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  // A close-on-exec pipe carries the child's errno if it cannot start.
  int report[2];
  if (pipe2(report, O_CLOEXEC) != 0)
    throw std::runtime_error(std::string("cannot start ") + copy[0] +
                             ": pipe: " + std::strerror(errno));
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid == 0) {
    // Only async-signal-safe calls between fork and exec. SIGTERM when the
    // parent dies, whatever kills it, so no run outlives its sweep; if the
    // parent died before this line, go now.
    int err = 0;
    if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0 || getppid() != parent) {
      err = ESRCH;
    } else {
      const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0) {
        err = errno;
      } else {
        if (fd > 2) close(fd);
        execve(copy[0].c_str(), argv.data(), environ);
        err = errno;
      }
    }
    [[maybe_unused]] const ssize_t w = write(report[1], &err, sizeof err);
    _exit(127);
  }
  const int fork_errno = errno;
  close(report[1]);
  if (pid < 0) {
    close(report[0]);
    throw std::runtime_error("cannot start " + copy[0] + ": fork: " + std::strerror(fork_errno));
  }
  int child_errno = 0;
  ssize_t n;
  while ((n = read(report[0], &child_errno, sizeof child_errno)) < 0 && errno == EINTR) {
  }
  close(report[0]);
  if (n > 0) {
    waitpid(pid, nullptr, 0);
    throw std::runtime_error("cannot start " + copy[0] + " (log " + log +
                             "): " + std::strerror(child_errno));
  }
  return pid;
}

int wait_exit(pid_t pid) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) throw std::runtime_error(std::string("waitpid: ") + std::strerror(errno));
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : -1;
}

}  // namespace hsgd::cli
