#include "hsgd/runtime/runtime.h"

#include "hsgd/core/error.h"
#include "hsgd/runtime/gossip_sim.h"
#include "hsgd/runtime/gossip_threads.h"
#include "hsgd/runtime/hogwild_runtime.h"
#include "hsgd/runtime/sim_runtime.h"
#include "hsgd/runtime/sparse_rows.h"
#include "hsgd/runtime/threads_runtime.h"

namespace hsgd {

std::vector<float> initial_params(const ModelFactory& make_model, uint64_t seed) {
  std::unique_ptr<Model> m = make_model();
  std::vector<float> params(static_cast<size_t>(m->num_params())), grads(params.size());
  m->bind(params, grads);
  m->init_params(seed);
  return params;
}

std::vector<float> initial_dense_params(const ModelFactory& make_model, uint64_t seed) {
  std::unique_ptr<Model> m = make_model();
  const auto dense = static_cast<size_t>(m->row_layout().dense);
  // The whole layout is bound (the model's views span it) but only the
  // dense prefix is written: calloc'd, the rows' pages are never touched.
  const ZeroedFloats params(static_cast<size_t>(m->num_params())),
      grads(static_cast<size_t>(m->num_params()));
  m->bind(params.span(), grads.span());
  m->init_dense(seed);
  return std::vector<float>(params.span().begin(),
                            params.span().begin() + static_cast<ptrdiff_t>(dense));
}

void check_job(const Job& job) {
  HSGD_ASSERT(job.config && job.train && job.test && job.make_model, "incomplete job");
  const int n = job.config->train.workers;
  if (job.train->size() < n) {
    throw InputError("train.workers = " + std::to_string(n) + ": the training set has only " +
                     std::to_string(job.train->size()) + " samples");
  }
}

Partition make_partition(const Job& job) {
  const Config& c = *job.config;
  return make_partition(*job.train, c.data.partition, c.train.seed, c.train.workers);
}

ShardSampler make_sampler(const Job& job, int worker) {
  const Config& c = *job.config;
  std::shared_ptr<const Partition> p = job.partition;
  if (!p) p = std::make_shared<const Partition>(make_partition(job));
  HSGD_ASSERT(worker >= 0 && static_cast<size_t>(worker) < p->shards.size(),
              "make_sampler: worker outside the partition");
  std::vector<int64_t> shard = p->shards[static_cast<size_t>(worker)];
  shard.insert(shard.end(), p->global_pool.begin(), p->global_pool.end());
  return ShardSampler(*job.train, worker, std::move(shard), c.train.seed, c.sampling);
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
  if (is_gossip_policy(c.policy.kind)) {
    if (c.train.runtime == "sim") return std::make_unique<GossipSimRuntime>();
    if (c.train.runtime == "threads") return std::make_unique<GossipThreadsRuntime>();
    throw InputError("policy.name = '" + c.policy_name +
                     "': the mpi runtime runs under mpirun, e.g. mpirun -np 4 hsgd train "
                     "--runtime mpi --servers 0 ... (docs/gossip.md)");
  }
  return make_runtime(c.train.runtime);
}

}  // namespace hsgd
