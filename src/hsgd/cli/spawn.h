// Child processes of the CLI (hsgd sweep, hsgd fidelity): the hsgd
// executable itself, a process started with its output in a log file, and
// its exit code.
#pragma once
#include <sys/types.h>

#include <string>
#include <vector>

namespace hsgd::cli {

// The path of the running hsgd executable (/proc/self/exe).
std::string self_exe();
// Starts args[0] with args (PATH not searched), stdout and stderr into `log`
// (created or truncated). The child gets SIGTERM when this process dies (by
// any signal, SIGKILL included), so no child outlives the sweep or fidelity
// run that started it. Throws std::runtime_error if it cannot start.
pid_t spawn_logged(const std::vector<std::string>& args, const std::string& log);
// Waits for `pid`: its exit code, 128 + signal if a signal ended it.
int wait_exit(pid_t pid);

}  // namespace hsgd::cli
