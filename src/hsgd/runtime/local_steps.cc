#include "hsgd/runtime/local_steps.h"

#include <algorithm>
#include <chrono>

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
    loss += sampled_gradient(model, sampler, batch, scratch);
    *samples += scratch->size();
    for (size_t i = 0; i < n; ++i) {
      v_[i] = mu_ * v_[i] + grads[i];
      params[i] -= lr_ * v_[i];
    }
  }
  for (size_t i = 0; i < n; ++i) grads[i] = pulled_[i] - params[i];
  return loss / h;
}

double sampled_gradient(Model& model, ShardSampler& sampler, int64_t batch, Batch* scratch) {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  sampler.next(batch, scratch);
  const auto t1 = Clock::now();
  double loss = 0;
  if (sampler.wants_losses()) {
    std::vector<float> losses(static_cast<size_t>(scratch->size()));
    loss = model.gradient(*scratch, losses);
    const auto t2 = Clock::now();
    sampler.observe(losses);
    sampler.cost.sampling_s += std::chrono::duration<double>(Clock::now() - t2).count();
    sampler.cost.gradient_s += std::chrono::duration<double>(t2 - t1).count();
  } else {
    loss = model.gradient(*scratch);
    sampler.cost.gradient_s += std::chrono::duration<double>(Clock::now() - t1).count();
  }
  sampler.cost.sampling_s += std::chrono::duration<double>(t1 - t0).count();
  sampler.cost.batches += 1;
  return loss;
}

double compute_push(Model& model, std::span<float> params, std::span<float> grads,
                    ShardSampler& sampler, int64_t batch, LocalWorker* local, int h, Batch* scratch,
                    int64_t* samples) {
  if (local) return local->run(model, params, grads, sampler, batch, h, scratch, samples);
  const double loss = sampled_gradient(model, sampler, batch, scratch);
  *samples = scratch->size();
  return loss;
}

void save_sampler(const ShardSampler& s, StateWriter& w) {
  const SamplerState st = s.state();
  w.put(st.epoch);
  w.put(st.position);
  w.put(st.epoch_rng);
  w.put(st.draw_rng);
  w.put_vec(st.scores);
}

SamplerState read_sampler(StateReader& r) {
  SamplerState st;
  st.epoch = r.get<int64_t>();
  st.position = r.get<int64_t>();
  st.epoch_rng = r.get<uint64_t>();
  st.draw_rng = r.get<uint64_t>();
  st.scores = r.get_vec<float>();
  return st;
}

void load_sampler(ShardSampler& s, StateReader& r) { s.restore(read_sampler(r)); }

LocalWorker make_local_worker(const Config& c, size_t num_params) {
  const double lr = c.policy.local.lr > 0 ? c.policy.local.lr : c.optim.lr;
  return LocalWorker(num_params, lr, c.policy.local.momentum);
}

}  // namespace hsgd
