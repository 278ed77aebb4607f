// What the `hsgd bench` figures share: a model spec for a data set, a model
// computing gradients on consecutive batches (the compute-only reference),
// and a whole run in a scratch directory.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "hsgd/config/config.h"
#include "hsgd/data/dataset.h"
#include "hsgd/model/model.h"
#include "hsgd/runtime/runtime.h"
#include "hsgd/server/server.h"

namespace hsgd::cli {

// `name` on `d`'s samples and classes; `hidden` for an MLP.
ModelSpec bench_spec(const std::string& name, const Dataset& d,
                     std::vector<int64_t> hidden = {128});

// A model bound to its own buffers and initialised (seed 1), drawing
// consecutive batches of one shard over all of `train`; `warmup` gradients
// are computed by the constructor.
class GradientLoop {
 public:
  GradientLoop(const ModelSpec& spec, const Dataset& train, int batch, int warmup);
  // The next batch's gradient (into grads()); returns its loss.
  double step() {
    next_batch();
    return gradient();
  }
  // The two halves of step(), for timing the gradient alone.
  void next_batch();
  double gradient();
  Model& model() { return *model_; }
  std::vector<float>& params() { return params_; }
  std::vector<float>& grads() { return grads_; }

 private:
  std::unique_ptr<Model> model_;
  std::vector<float> params_, grads_;
  ShardSampler sampler_;
  Batch batch_;
  int batch_size_;
};

// The job of config `c` on train/test with `spec`'s model, every worker
// starting from its seed-1 parameters.
Job bench_job(const Config& c, const ModelSpec& spec, const Dataset& train, const Dataset& test);

// Runs bench_job(...) with metrics in a scratch directory removed afterwards.
RunResult run_scratch(const Config& c, const ModelSpec& spec, const Dataset& train,
                      const Dataset& test);

// One thread's gradient throughput (samples/s): median over `repeats`
// rounds of 0.5 s of GradientLoop::step.
double compute_only(const ModelSpec& spec, const Dataset& train, int batch, int repeats);

// The threads runtime's throughput with `policy` and `workers` workers:
// samples pushed per second of training time over a `seconds` budget.
double runtime_rate(const ModelSpec& spec, const Dataset& train, const Dataset& test,
                    const std::string& policy, int workers, int batch, double seconds);

// A one-worker async server over `params` with `optimizer` (lr 0.01): each
// push is an update (K = 1 skips the buffer). For the server-cost figures.
std::unique_ptr<Server> async_server(std::span<float> params, const std::string& optimizer);

}  // namespace hsgd::cli
