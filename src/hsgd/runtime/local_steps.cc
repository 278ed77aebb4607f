#include "hsgd/runtime/local_steps.h"

#include <algorithm>

#include "hsgd/config/config.h"
#include "hsgd/core/error.h"

namespace hsgd {

LocalWorker::LocalWorker(size_t n, double lr, double momentum)
    : lr_(static_cast<float>(lr)), mu_(static_cast<float>(momentum)), v_(n, 0.0f), pulled_(n) {}

double LocalWorker::run(Model& model, std::span<float> params, std::span<float> grads,
                        ShardSampler& sampler, int64_t batch, int h, Batch* scratch,
                        int64_t* samples) {
  HSGD_ASSERT(h >= 1 && params.size() == v_.size() && grads.size() == v_.size(),
              "local steps: bad arguments");
  std::copy(params.begin(), params.end(), pulled_.begin());
  const size_t n = v_.size();
  double loss = 0;
  *samples = 0;
  for (int s = 0; s < h; ++s) {
    sampler.next(batch, scratch);
    loss += model.gradient(*scratch);
    *samples += scratch->size();
    for (size_t i = 0; i < n; ++i) {
      v_[i] = mu_ * v_[i] + grads[i];
      params[i] -= lr_ * v_[i];
    }
  }
  for (size_t i = 0; i < n; ++i) grads[i] = pulled_[i] - params[i];
  return loss / h;
}

double compute_push(Model& model, std::span<float> params, std::span<float> grads,
                    ShardSampler& sampler, int64_t batch, LocalWorker* local, int h, Batch* scratch,
                    int64_t* samples) {
  if (local) return local->run(model, params, grads, sampler, batch, h, scratch, samples);
  sampler.next(batch, scratch);
  const double loss = model.gradient(*scratch);
  *samples = scratch->size();
  return loss;
}

void save_sampler(const ShardSampler& s, StateWriter& w) { w.put(s.state()); }

void load_sampler(ShardSampler& s, StateReader& r) { s.restore(r.get<SamplerState>()); }

LocalWorker make_local_worker(const Config& c, size_t num_params) {
  const double lr = c.policy.local.lr > 0 ? c.policy.local.lr : c.optim.lr;
  return LocalWorker(num_params, lr, c.policy.local.momentum);
}

}  // namespace hsgd
