// Staleness mitigations, applied by the server to each push before it is
// aggregated (DESIGN.md, "Policies", staleness paragraph). Pure functions on
// flat spans: no torch, no threads, no clock. `tau` is the push's staleness
// V - v: the server's version now minus the version the worker pulled. It is
// the same when the push is applied, because an update empties the whole
// buffer and the version changes only then.
//
// Order on one push (Server::on_push): the filter (drop), then the rebase,
// then DC-ASGD compensation, then the Gap-Aware division, then the staleness scaling.
// All are identities at tau = 0 (so under sync, where every push has tau = 0,
// they change nothing and the server does not special-case it).
#pragma once
#include <cstdint>
#include <span>

namespace hsgd {

// The [staleness] config section. Hyperparameters only; per-run state (the
// pulled copies, the average step) lives in the Server.
struct MitigationOptions {
  // Multiply a push by 1 / max(1, tau) (Zhang et al. 2016; for plain SGD
  // the same as lr / max(1, tau) for that push).
  bool scaled_lr = false;
  // Drop pushes with tau > tau_max (counted in ServerStats::dropped);
  // -1 = off. >= -1.
  int64_t tau_max = -1;
  // DC-ASGD (Zheng et al. 2017): g + lambda * g * g * (w_now - w_pulled). On
  // when dc_asgd or dc_lambda > 0; lambda = dc_lambda, or kDefaultDcLambda
  // when dc_lambda = 0.
  bool dc_asgd = false;
  double dc_lambda = 0.0;  // >= 0
  // Gap-Aware (Barkai et al. 2019): g_i / max(1, |w_now,i - w_pulled,i| / C_i),
  // C_i a bias-corrected exponential average (decay gap_decay) of |dw_i|
  // over the applied updates.
  bool gap_aware = false;
  double gap_decay = 0.99;  // not a config key; in (0, 1)
  // Staleness-corrected momentum (Mitliagkas et al. 2016): asynchrony with
  // mean staleness tau adds implicit momentum m = tau / (tau + 1), so the
  // server's momentum is lowered to mu' = max(0, 1 - (1 - mu) / (1 - m))
  // (Optimizer::set_implicit_momentum), tau a running mean over about two
  // rounds of pushes, starting from steady_staleness(workers, the policy's
  // first K). What auto does for itself, offered to every policy.
  bool momentum_correction = false;

  // Rebase (asynchronous SVI, Mohamad et al. 2018): a push g computed at
  // w_pulled is applied as a step toward its target w_pulled - g from the
  // current parameters: g + (w_now - w_pulled). The server's SGD step is then
  // w <- (1 - lr) w_now + lr (w_pulled - g), a convex combination however
  // stale the push (model dpgmm needs it: its Beta and Gamma parameters stay
  // positive only so). 1 on, 0 off, -1 auto: the run layer resolves it
  // (server_options: on for model dpgmm, off otherwise); the Server treats
  // -1 as off.
  int rebase = -1;
  bool rebase_on() const { return rebase > 0; }
  static constexpr double kDefaultDcLambda = 0.04;
  bool dc_on() const { return dc_asgd || dc_lambda > 0; }
  double lambda() const { return dc_lambda > 0 ? dc_lambda : kDefaultDcLambda; }
  // DC-ASGD and Gap-Aware need each worker's pulled copy of the parameters.
  bool needs_pulled_copy() const { return dc_on() || gap_aware || rebase_on(); }
  // Any transform of the gradient (filtering aside).
  bool transforms() const { return scaled_lr || needs_pulled_copy(); }
};

// Throws InputError naming the staleness.* key (tau_max < -1, dc_lambda < 0
// or not finite).
void validate(const MitigationOptions& o);

// True when the filter is on and tau > tau_max.
bool drop_push(const MitigationOptions& o, int64_t tau);

// 1 / max(1, tau).
double staleness_scale(int64_t tau);

// The momentum asynchrony adds at mean staleness tau >= 0: tau / (tau + 1)
// (Mitliagkas et al. 2016, with the queueing model's mean staleness).
double implicit_momentum_of_staleness(double tau);

// The running mean of staleness behind momentum_correction (and auto's):
// an exponential average with weight 1 / max(8, 2 x live workers), about
// two rounds of pushes; the first push sets it.
struct StalenessMean {
  double mean = 0;
  int64_t count = 0;
  void add(double tau, int live);
  // Starts from a prior instead of the first push (counted as one push).
  void start(double prior) {
    mean = prior;
    count = 1;
  }
};

// The mean staleness of n workers pushing in turn to a server that applies
// every K pushes: n / K - 1 (0 for K >= n). momentum_correction's prior, so
// that the first updates, before any staleness is measured, are corrected.
double steady_staleness(int workers, int k);

// g *= 1 / max(1, tau).
void scale_by_staleness(std::span<float> g, int64_t tau);

// Rebase: g_i += w_now_i - w_pulled_i. Sizes equal.
void rebase_push(std::span<float> g, std::span<const float> w_now, std::span<const float> w_pulled);
// DC-ASGD: g_i += lambda * g_i * g_i * (w_now_i - w_pulled_i). Sizes equal.
void dc_compensate(std::span<float> g, std::span<const float> w_now,
                   std::span<const float> w_pulled, double lambda);

// Gap-Aware: g_i /= max(1, |w_now_i - w_pulled_i| / C_i) with the average
// step C_i = ema_i / correction (correction = 1 - decay^updates, the bias
// correction of track_step's average; 1 for an unbiased average). A
// coordinate with C_i <= 0 (it never moved) is left as is. Sizes equal;
// correction > 0.
void gap_aware_divide(std::span<float> g, std::span<const float> w_now,
                      std::span<const float> w_pulled, std::span<const float> ema,
                      double correction = 1.0);

// Folds one update's per-coordinate step |after_i - before_i| into the
// exponential average ema_i = decay * ema_i + (1 - decay) * |step_i|. The
// average step after `updates` such calls is ema_i / (1 - decay^updates).
void track_step(std::span<float> ema, std::span<const float> before, std::span<const float> after,
                double decay);

}  // namespace hsgd
