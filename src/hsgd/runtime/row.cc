#include "hsgd/runtime/row.h"

#include <algorithm>
#include <cmath>

namespace hsgd {

MetricsRow build_row(const Server& server, const ServerStats& st, const NoiseSums& noise,
                     const EvalResult& e, double time_s, double idle_frac, const Job& job) {
  MetricsRow r;
  r.time_s = time_s;
  r.updates = static_cast<int64_t>(server.version());
  r.samples = server.samples();
  r.epoch = static_cast<double>(r.samples) / static_cast<double>(job.train->size());
  r.k = server.threshold(time_s);
  r.train_loss = st.loss_count ? st.loss_sum / static_cast<double>(st.loss_count) : std::nan("");
  put_evaluation(e, &r);
  r.staleness_mean =
      st.staleness_count ? st.staleness_sum / static_cast<double>(st.staleness_count) : 0.0;
  r.staleness_max = st.staleness_max;
  r.dropped = st.dropped;
  r.nonfinite = st.nonfinite;
  r.idle_frac = idle_frac;
  r.live_workers = server.live_workers();
  r.policy = server.policy().name();
  r.seed = job.config->train.seed;
  if (job.config->train.noise_scale) {
    r.has_noise = true;
    r.noise_scale = noise.scale();
    r.grad_norm_sq = noise.mean_norm();
    r.grad_trace_cov = noise.mean_trace();
    r.noise_lag = noise.mean_lag();
  }
  return r;
}

double idle_fraction(double idle_delta, double interval, int workers) {
  if (!(interval > 0) || workers < 1) return 0.0;
  return std::clamp(idle_delta / (interval * workers), 0.0, 1.0);
}

Dataset head(const Dataset& d, int64_t n) {
  if ((n <= 0 || n >= d.size()) && d.borrowed.empty()) return d;
  if (n <= 0 || n > d.size()) n = d.size();
  Dataset h;
  h.name = d.name;
  h.sample_shape = d.sample_shape;
  h.num_classes = d.num_classes;
  h.labels.assign(d.labels.begin(), d.labels.begin() + n);
  if (d.borrowed.empty()) {
    h.features.assign(d.features.begin(), d.features.begin() + n * d.sample_size());
  } else {  // owned, standardized
    std::vector<int64_t> first(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) first[static_cast<size_t>(i)] = i;
    Batch b;
    gather(d, first, &b);
    h.features = std::move(b.features);
  }
  h.categorical_rows = d.categorical_rows;
  h.categorical.assign(d.categorical.begin(), d.categorical.begin() + n * d.num_categorical());
  h.planted_auc = d.planted_auc;
  return h;
}

void put_evaluation(const EvalResult& e, MetricsRow* r) {
  r->test_loss = e.loss;
  r->test_acc = e.accuracy;
  r->test_auc = e.auc;
  r->test_logloss = e.log_loss;
  r->has_mixture = std::isfinite(e.effective_k);
  r->effective_k = e.effective_k;
  r->ari = e.ari;
}

ServerOptions server_options(const Job& job) {
  const Config& c = *job.config;
  ServerOptions so;
  so.workers = c.train.workers;
  so.aggregation = c.policy.aggregation;
  so.lr = scaled_lr(c.optim, c.train.workers, c.train.batch);
  so.staleness = server_mitigations(c.policy, c.staleness);
  // staleness.rebase = "auto": on for the model whose pushes are SVI steps.
  if (so.staleness.rebase < 0) so.staleness.rebase = c.model.name == "dpgmm" ? 1 : 0;
  so.lr_schedule = c.lr_schedule;
  so.samples_per_epoch = job.train->size();
  so.clip_norm = c.optim.clip_norm;
  so.noise_scale = c.train.noise_scale;
  if (c.policy.kind == "local") {
    so.lr = c.policy.local.outer_lr;
    so.lr_schedule = LrSchedule{};
  }
  return so;
}

OptimizerOptions server_optimizer(const Config& c) {
  if (c.policy.kind != "local") return c.optim;
  OptimizerOptions o;
  o.kind = c.policy.local.outer;
  o.lr = c.policy.local.outer_lr;
  o.momentum = c.policy.local.outer_momentum;
  o.weight_decay = 0;
  return o;
}

std::unique_ptr<Policy> server_policy(const Config& c, int workers) {
  return make_policy(c.policy, workers, c.optim.lr, c.train.batch);
}

}  // namespace hsgd
