#include "hsgd/runtime/runtime.h"

#include "hsgd/core/error.h"
#include "hsgd/runtime/hogwild_runtime.h"
#include "hsgd/runtime/sim_runtime.h"
#include "hsgd/runtime/threads_runtime.h"

namespace hsgd {

std::vector<float> initial_params(const ModelFactory& make_model, uint64_t seed) {
  std::unique_ptr<Model> m = make_model();
  std::vector<float> params(static_cast<size_t>(m->num_params())), grads(params.size());
  m->bind(params, grads);
  m->init_params(seed);
  return params;
}

std::unique_ptr<Runtime> make_runtime(const std::string& name) {
  if (name == "threads") return std::make_unique<ThreadsRuntime>();
  if (name == "sim") return std::make_unique<SimRuntime>();
  if (name == "mpi") {
    throw InputError(
        "train.runtime = 'mpi': launch with mpirun, e.g. mpirun -np 4 hsgd train --runtime mpi "
        "--servers 1 ... (README: Many machines)");
  }
  throw InputError("train.runtime = '" + name + "': expected threads, sim or mpi");
}

std::unique_ptr<Runtime> make_runtime(const Config& c) {
  if (c.policy.kind == "hogwild") {
    if (c.train.runtime != "threads") {
      throw InputError("policy.name = 'hogwild': runs on the threads runtime only");
    }
    return std::make_unique<HogwildRuntime>();
  }
  return make_runtime(c.train.runtime);
}

}  // namespace hsgd
