#include "hsgd/runtime/runtime.h"

#include "hsgd/core/error.h"
#include "hsgd/runtime/sim_runtime.h"
#include "hsgd/runtime/threads_runtime.h"

namespace hsgd {

std::unique_ptr<Runtime> make_runtime(const std::string& name) {
  if (name == "threads") return std::make_unique<ThreadsRuntime>();
  if (name == "sim") return std::make_unique<SimRuntime>();
  throw InputError("train.runtime = '" + name + "': expected threads or sim");
}

}  // namespace hsgd
