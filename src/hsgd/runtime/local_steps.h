// The worker side of local:H (Local SGD / periodic model averaging), shared by
// every runtime: H SGD steps with worker-local momentum on the worker's own
// copy of the parameters, then the model delta as the pushed pseudo-gradient.
// Torch-free: it drives any Model through the Model interface.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "hsgd/core/state.h"
#include "hsgd/data/dataset.h"
#include "hsgd/model/model.h"

namespace hsgd {

struct Config;

// One worker's local-SGD state: its momentum buffer (kept across rounds)
// and a copy of the parameters it pulled. Thread-safety: none; one per worker.
class LocalWorker {
 public:
  // lr > 0, momentum in [0, 1).
  LocalWorker(size_t num_params, double lr, double momentum);

  // `model` is bound to (params, grads); on entry params hold the parameters
  // just pulled. Takes `h` >= 1 steps, each: a batch of `batch` samples from
  // `sampler`, g = gradient, v = mu v + g, params -= lr v (PyTorch
  // heavy-ball). On return params hold the local model and grads the delta
  // pulled - local. Returns the mean training loss of the h batches and sets
  // *samples to the number of samples used (h x batch). `scratch` is reused
  // between calls for the batch.
  double run(Model& model, std::span<float> params, std::span<float> grads, ShardSampler& sampler,
             int64_t batch, int h, Batch* scratch, int64_t* samples);

  // The momentum buffer (the pulled copy is rewritten by every run()).
  void save(StateWriter& w) const { w.put_vec(v_); }
  void load(StateReader& r) { r.get_into(std::span<float>(v_), "local momentum"); }

 private:
  float lr_, mu_;
  std::vector<float> v_, pulled_;
};

// A worker's next push into `grads` (the model bound to params/grads, params
// holding the pulled parameters): the gradient of one batch of `batch`
// samples from `sampler`, or, with `local` (local:H), the delta of H local
// steps. Returns the mean training loss and sets *samples to the samples
// behind the push. Every runtime's workers compute through this.
double compute_push(Model& model, std::span<float> params, std::span<float> grads,
                    ShardSampler& sampler, int64_t batch, LocalWorker* local, int h, Batch* scratch,
                    int64_t* samples);

// A sampler's position as checkpoint bytes, and back (the sampler must be
// built with the same data, worker, worker count and seed).
void save_sampler(const ShardSampler& s, StateWriter& w);
void load_sampler(ShardSampler& s, StateReader& r);
// Reads a state written by save_sampler without applying it.
SamplerState read_sampler(StateReader& r);
// One batch from `sampler` and its gradient into the model's bound gradient
// buffer: per-example losses are fed back to the sampler when it wants them
// (importance sampling), and the time spent sampling and in the gradient is
// added to sampler.cost. Returns the (weighted) mean loss.
double sampled_gradient(Model& model, ShardSampler& sampler, int64_t batch, Batch* scratch);

// A LocalWorker for config c (local.lr, 0 meaning optim.lr; local.momentum).
LocalWorker make_local_worker(const Config& c, size_t num_params);

}  // namespace hsgd
