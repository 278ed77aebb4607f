#include "hsgd/server/server.h"

#include <algorithm>
#include <cmath>

#include "hsgd/core/error.h"
#include "hsgd/core/simd.h"

namespace hsgd {

Server::Server(std::span<float> params, const ServerOptions& o, std::unique_ptr<Policy> policy,
               std::unique_ptr<Optimizer> optimizer)
    : params_(params),
      opt_(o),
      policy_(std::move(policy)),
      optimizer_(std::move(optimizer)),
      acc_(params.size(), 0.0f),
      live_(static_cast<size_t>(o.workers), true),
      waiting_(static_cast<size_t>(o.workers), false),
      clock_(static_cast<size_t>(o.workers), 0),
      pull_waiting_(static_cast<size_t>(o.workers), false),
      live_count_(o.workers) {
  HSGD_ASSERT(o.workers >= 1, "server needs at least one worker");
  HSGD_ASSERT(opt_.samples_per_epoch >= 1, "samples_per_epoch must be >= 1");
  validate(opt_.staleness);
  const MitigationOptions& m = opt_.staleness;
  if (m.transforms()) scratch_.assign(params.size(), 0.0f);
  if (m.needs_pulled_copy()) grow(live_.size());
  if (m.gap_aware) {
    step_ema_.assign(params.size(), 0.0f);
    before_.assign(params.size(), 0.0f);
  }
  policy_->on_step_gain(optimizer_->step_gain());
  policy_->on_lr(lr_at(opt_.lr_schedule, opt_.lr, 0));  // the rate of the first update
  if (m.momentum_correction) {
    tau_mean_.start(steady_staleness(o.workers, policy_->threshold(Progress{}, o.workers)));
  }
}

void Server::grow(size_t workers) {
  if (!opt_.staleness.needs_pulled_copy()) return;
  if (pulled_.size() < workers) {
    pulled_.resize(workers);
    pulled_version_.resize(workers, kNoCopy);
  }
}

void Server::set_params(std::span<float> p) {
  // The caller copied params() into p: a pending step would be lost.
  HSGD_ASSERT(!step_.pending, "set_params with a step pending");
  HSGD_ASSERT(p.size() == params_.size(), "set_params: another parameter count");
  params_ = p;
}

Progress Server::progress(double seconds) const {
  return Progress{
      static_cast<int64_t>(version_), seconds,
      static_cast<double>(total_samples_) / static_cast<double>(opt_.samples_per_epoch)};
}

int Server::threshold(double seconds) const {
  return policy_->threshold(progress(seconds), live_count_);
}

Decision Server::decision() const {
  Decision d;
  d.version = version_;
  return d;
}

int64_t Server::min_live_clock() const {
  int64_t m = INT64_MAX;
  for (size_t w = 0; w < live_.size(); ++w) {
    if (live_[w]) m = std::min(m, clock_[w]);
  }
  return m;
}

void Server::release_pull_waiters(Decision* d) {
  const int s = policy_->staleness_bound();
  if (s < 0) return;
  const int64_t m = min_live_clock();
  for (size_t w = 0; w < pull_waiting_.size(); ++w) {
    if (pull_waiting_[w] && (!live_[w] || clock_[w] - m <= s)) {
      pull_waiting_[w] = false;
      d->released.push_back(static_cast<int>(w));
    }
  }
}

Decision Server::on_pull(int worker) {
  HSGD_ASSERT(worker >= 0 && static_cast<size_t>(worker) < live_.size(),
              "pull from unknown worker");
  const int bound = policy_->staleness_bound();
  if (bound >= 0 && live_[static_cast<size_t>(worker)]) {
    const auto w = static_cast<size_t>(worker);
    HSGD_ASSERT(!waiting_[w] && !pull_waiting_[w], "pull from a worker that is waiting");
    if (clock_[w] - min_live_clock() > bound) {
      pull_waiting_[w] = true;
      Decision d = decision();
      d.caller_waits = true;
      return d;
    }
  }
  if (opt_.staleness.needs_pulled_copy()) {
    finish_update();
    const auto w = static_cast<size_t>(worker);
    pulled_[w].assign(params_.begin(), params_.end());  // allocated on the first pull
    pulled_version_[w] = version_;
  }
  return decision();
}

std::span<const float> Server::mitigate(size_t w, uint64_t version, int64_t tau,
                                        std::span<const float> grad) {
  const MitigationOptions& m = opt_.staleness;
  std::copy(grad.begin(), grad.end(), scratch_.begin());
  // At tau = 0 the parameters have not moved since the pull: no gap.
  if (tau > 0 && m.needs_pulled_copy() && pulled_version_[w] == version) {
    const std::span<const float> now = params_, then = pulled_[w];
    if (m.rebase_on()) rebase_push(scratch_, now, then);
    if (m.dc_on()) dc_compensate(scratch_, now, then, m.lambda());
    if (m.gap_aware && tracked_updates_ > 0) {
      const double correction = 1.0 - std::pow(m.gap_decay, static_cast<double>(tracked_updates_));
      gap_aware_divide(scratch_, now, then, step_ema_, correction);
    }
  }
  if (m.scaled_lr) scale_by_staleness(scratch_, tau);
  return scratch_;
}

bool Server::ready(double seconds) const {
  if (pending_.empty() || live_count_ == 0) return false;
  int count = 0;
  if (policy_->pusher_waits()) {
    // Distinct live workers: few pending pushes, so a quadratic scan is cheap.
    for (size_t i = 0; i < pending_.size(); ++i) {
      const int w = pending_[i].worker;
      if (!live_[static_cast<size_t>(w)]) continue;
      bool seen = false;
      for (size_t j = 0; j < i && !seen; ++j) seen = pending_[j].worker == w;
      count += seen ? 0 : 1;
    }
  } else {
    for (const Pending& p : pending_) count += live_[static_cast<size_t>(p.worker)] ? 1 : 0;
  }
  return count >= threshold(seconds);
}

bool Server::screen_part(std::span<const float> part) { return all_finite(part); }

bool Server::screen(std::span<const float>* g, const bool* finite) {
  if (opt_.clip_norm <= 0) return finite ? *finite : all_finite(*g);  // core/simd.h: ~memory speed
  double sq = 0;
  for (float v : *g) sq += static_cast<double>(v) * v;
  if (!std::isfinite(sq)) return false;
  const double norm = std::sqrt(sq);
  if (opt_.clip_norm > 0 && norm > opt_.clip_norm) {
    clipped_.resize(g->size());
    const auto s = static_cast<float>(opt_.clip_norm / norm);
    for (size_t i = 0; i < g->size(); ++i) clipped_[i] = (*g)[i] * s;
    *g = clipped_;
  }
  return true;
}

void Server::apply(Decision* d, std::span<const float> sum) {
  const size_t n = pending_.size();
  for (const Pending& p : pending_) {
    const int64_t tau = static_cast<int64_t>(version_ - p.version);
    stats_.staleness_sum += static_cast<double>(tau);
    stats_.staleness_count += 1;
    stats_.staleness_max = std::max(stats_.staleness_max, tau);
    staleness_hist_[std::min<size_t>(static_cast<size_t>(tau), kStalenessBuckets - 1)] += 1;
  }
  const bool buffered = sum.data() == acc_.data();
  HSGD_ASSERT(buffered || n == 1, "only a single push may skip the buffer");
  if (opt_.aggregation == Aggregation::kMean && n > 1) {
    const float inv = 1.0f / static_cast<float>(n);
    for (float& g : acc_) g *= inv;
  }
  if (opt_.staleness.gap_aware) std::copy(params_.begin(), params_.end(), before_.begin());
  const double lr = lr_at(opt_.lr_schedule, opt_.lr, static_cast<int64_t>(version_));
  // Staleness's implicit momentum: auto's own (#17), or the mitigation's.
  double m = policy_->implicit_momentum();
  if (opt_.staleness.momentum_correction) {
    m = std::max(m, implicit_momentum_of_staleness(tau_mean_.mean));
  }
  optimizer_->set_implicit_momentum(m);
  optimizer_->begin_step(lr);
  step_ = {.pending = true, .clears_acc = buffered, .sum = sum, .done = 0};
  if (!defer_ || hook_ || opt_.staleness.gap_aware) finish_update();
  if (hook_) hook_->on_apply(n, lr);
  if (opt_.staleness.gap_aware) {
    track_step(step_ema_, before_, params_, opt_.staleness.gap_decay);
    ++tracked_updates_;
  }
  ++version_;
  policy_->on_lr(lr_at(opt_.lr_schedule, opt_.lr, static_cast<int64_t>(version_)));
  ++stats_.updates;
  for (const Pending& p : pending_) {
    const auto w = static_cast<size_t>(p.worker);
    if (waiting_[w]) {
      waiting_[w] = false;
      d->released.push_back(p.worker);
    }
  }
  pending_.clear();
  d->applied = true;
  d->version = version_;
}

void Server::update_to(size_t end) {
  if (!step_.pending) return;
  end = std::min(end, params_.size());
  if (end > step_.done) {
    const size_t n = end - step_.done;
    optimizer_->step_part(params_.subspan(step_.done, n), step_.sum.subspan(step_.done, n),
                          step_.done);
    step_.done = end;
  }
  if (step_.done < params_.size()) return;
  if (step_.clears_acc) std::fill(acc_.begin(), acc_.end(), 0.0f);
  step_ = {};
}

Decision Server::on_push(int worker, uint64_t version, std::span<const float> grad,
                         int64_t batch_size, double loss, double seconds) {
  return push(worker, version, grad, batch_size, loss, seconds, nullptr);
}

Decision Server::on_screened_push(int worker, uint64_t version, std::span<const float> grad,
                                  int64_t batch_size, double loss, double seconds, bool finite) {
  return push(worker, version, grad, batch_size, loss, seconds, &finite);
}

Decision Server::push(int worker, uint64_t version, std::span<const float> grad, int64_t batch_size,
                      double loss, double seconds, const bool* finite) {
  finish_update();
  const auto w = static_cast<size_t>(worker);
  HSGD_ASSERT(worker >= 0 && w < live_.size() && live_[w], "push from a worker that is not live");
  HSGD_ASSERT(!waiting_[w], "push from a worker that is waiting");
  HSGD_ASSERT(grad.size() == acc_.size(), "gradient size differs from the parameter count");
  HSGD_ASSERT(version <= version_, "push from the future");
  HSGD_ASSERT(!pull_waiting_[w], "push from a worker waiting to pull");
  ++clock_[w];
  total_samples_ += batch_size;
  ++total_pushes_;
  stats_.pushes += 1;
  stats_.samples += batch_size;
  if (!screen(&grad, finite) || !std::isfinite(loss)) {
    ++consecutive_nonfinite_;
    stats_.nonfinite += 1;
    Decision d = decision();
    if (ready(seconds)) apply(&d, acc_);
    release_pull_waiters(&d);
    return d;
  }
  consecutive_nonfinite_ = 0;
  if (opt_.noise_scale) noise_.observe(grad, batch_size, version);  // as pushed (after clipping)
  policy_->on_push_loss(loss);
  stats_.loss_sum += loss;
  stats_.loss_count += 1;
  // The version changes only in apply(), which empties the buffer: tau now
  // is the staleness this push will have when its update is applied.
  const int64_t tau = static_cast<int64_t>(version_ - version);
  if (drop_push(opt_.staleness, tau)) {
    // Not buffered: no share of K, and the pusher goes on. K may still have
    // changed since the last event (a schedule on the seconds clock), so the
    // buffer is checked as at any event.
    stats_.dropped += 1;
    Decision d = decision();
    if (ready(seconds)) apply(&d, acc_);
    release_pull_waiters(&d);
    return d;
  }
  const std::span<const float> g =
      opt_.staleness.transforms() ? mitigate(w, version, tau, grad) : grad;
  if (opt_.staleness.momentum_correction) tau_mean_.add(static_cast<double>(tau), live_count_);
  pending_.push_back({worker, version});
  if (hook_) hook_->on_buffered(worker, tau);
  Decision d = decision();
  if (policy_->pusher_waits()) waiting_[w] = true;
  if (pending_.size() == 1 && ready(seconds)) {
    apply(&d, g);  // an update of this push alone (async): straight from the push
  } else {
    for (size_t i = 0; i < acc_.size(); ++i) acc_[i] += g[i];
    if (ready(seconds)) apply(&d, acc_);
  }
  // The pusher waits only if its push is still buffered.
  if (waiting_[w]) {
    d.caller_waits = true;
  } else {
    d.released.erase(std::remove(d.released.begin(), d.released.end(), worker), d.released.end());
  }
  policy_->observe_push(
      {worker, tau, loss, seconds, live_count_, waiting_[w], &d.released});  // auto (#17)
  release_pull_waiters(&d);
  return d;
}

Decision Server::on_join(int worker, double seconds) {
  finish_update();
  HSGD_ASSERT(worker >= 0, "negative worker id");
  const auto w = static_cast<size_t>(worker);
  if (w >= live_.size()) {
    live_.resize(w + 1, false);
    waiting_.resize(w + 1, false);
    clock_.resize(w + 1, 0);
    pull_waiting_.resize(w + 1, false);
    grow(w + 1);
  }
  if (!live_[w]) {
    const int64_t m = min_live_clock();
    if (m != INT64_MAX) clock_[w] = std::max(clock_[w], m);
    live_[w] = true;
    ++live_count_;
  }
  Decision d = decision();
  if (ready(seconds)) apply(&d, acc_);
  release_pull_waiters(&d);
  return d;
}

Decision Server::on_leave(int worker, double seconds) {
  finish_update();
  const auto w = static_cast<size_t>(worker);
  HSGD_ASSERT(worker >= 0 && w < live_.size(), "leave from unknown worker");
  Decision d = decision();
  if (!live_[w]) return d;
  live_[w] = false;
  --live_count_;
  if (waiting_[w]) {
    waiting_[w] = false;
    d.released.push_back(worker);
  }
  if (live_count_ > 0 && ready(seconds)) apply(&d, acc_);
  release_pull_waiters(&d);
  return d;
}

ServerStats Server::take_stats() {
  ServerStats s = stats_;
  stats_ = ServerStats{};
  return s;
}

}  // namespace hsgd

namespace hsgd {
namespace {
constexpr uint32_t kServerTag = 0x53525652;  // "SRVR"
}

void Server::save(StateWriter& w) const {
  HSGD_ASSERT(!step_.pending, "a server saved with a step pending");
  w.tag(kServerTag);
  w.put_span(std::span<const float>(params_));
  w.put<uint64_t>(version_);
  w.put_vec(acc_);
  w.put<uint64_t>(pending_.size());
  for (const Pending& p : pending_) {
    w.put<int32_t>(p.worker);
    w.put<uint64_t>(p.version);
  }
  w.put_bools(live_);
  w.put_bools(waiting_);
  w.put_vec(clock_);
  w.put_bools(pull_waiting_);
  w.put<int64_t>(total_samples_);
  w.put<int64_t>(total_pushes_);
  w.put_vec(staleness_hist_);
  w.put(stats_);
  w.put<int64_t>(consecutive_nonfinite_);
  w.put<uint64_t>(pulled_.size());
  for (const std::vector<float>& p : pulled_) w.put_vec(p);
  w.put_vec(pulled_version_);
  w.put_vec(step_ema_);
  w.put<int64_t>(tracked_updates_);
  // Only with the mitigation on (a key of the run's identity), so the state
  // of every other run is as before.
  if (opt_.staleness.momentum_correction) {
    w.put<double>(tau_mean_.mean);
    w.put<int64_t>(tau_mean_.count);
  }
  if (opt_.noise_scale) noise_.save(w);  // likewise
  w.put_vec(policy_->save_state());
  optimizer_->save(w);
  if (hook_) hook_->save(w);
}

void Server::load(StateReader& r) {
  finish_update();
  r.expect_tag(kServerTag, "server");
  r.get_into(params_, "parameters");
  version_ = r.get<uint64_t>();
  r.get_into(std::span<float>(acc_), "buffer");
  const uint64_t np = r.get<uint64_t>();
  if (np > (1u << 24)) r.fail("corrupt (pending count " + std::to_string(np) + ")");
  pending_.clear();
  for (uint64_t i = 0; i < np; ++i) {
    const int32_t wk = r.get<int32_t>();
    const uint64_t v = r.get<uint64_t>();
    pending_.push_back({wk, v});
  }
  live_ = r.get_bools();
  waiting_ = r.get_bools();
  clock_ = r.get_vec<int64_t>();
  pull_waiting_ = r.get_bools();
  const size_t n = live_.size();
  if (n == 0 || waiting_.size() != n || clock_.size() != n || pull_waiting_.size() != n) {
    r.fail("corrupt (membership arrays of different sizes)");
  }
  for (const Pending& p : pending_) {
    if (p.worker < 0 || static_cast<size_t>(p.worker) >= n || p.version > version_) {
      r.fail("corrupt (a pending push of an unknown worker or a future version)");
    }
  }
  live_count_ = static_cast<int>(std::count(live_.begin(), live_.end(), true));
  total_samples_ = r.get<int64_t>();
  total_pushes_ = r.get<int64_t>();
  std::vector<int64_t> hist = r.get_vec<int64_t>();
  if (hist.size() != kStalenessBuckets) r.fail("corrupt (staleness histogram size)");
  staleness_hist_ = std::move(hist);
  stats_ = r.get<ServerStats>();
  consecutive_nonfinite_ = r.get<int64_t>();
  const uint64_t npulled = r.get<uint64_t>();
  if (npulled > n) r.fail("corrupt (pulled copies for more workers than known)");
  pulled_.assign(static_cast<size_t>(npulled), {});
  for (std::vector<float>& p : pulled_) {
    p = r.get_vec<float>();
    if (!p.empty() && p.size() != params_.size()) r.fail("corrupt (pulled copy size)");
  }
  pulled_version_ = r.get_vec<uint64_t>();
  if (pulled_version_.size() != pulled_.size()) r.fail("corrupt (pulled versions)");
  for (size_t i = 0; i < pulled_.size(); ++i) {
    if (pulled_version_[i] != kNoCopy && pulled_[i].empty())
      r.fail("corrupt (pulled copy missing)");
  }
  std::vector<float> ema = r.get_vec<float>();
  if (ema.size() != step_ema_.size()) r.fail("corrupt (Gap-Aware state of another size)");
  step_ema_ = std::move(ema);
  tracked_updates_ = r.get<int64_t>();
  if (opt_.staleness.momentum_correction) {
    tau_mean_.mean = r.get<double>();
    tau_mean_.count = r.get<int64_t>();
    if (!(tau_mean_.mean >= 0) || tau_mean_.count < 0) r.fail("corrupt (staleness mean)");
  }
  if (opt_.noise_scale) noise_.load(r, params_.size());
  const std::vector<double> ps = r.get_vec<double>();
  if (!policy_->reads_state(ps.size())) r.fail("policy state of another policy");
  policy_->restore_state(ps);
  policy_->on_lr(lr_at(opt_.lr_schedule, opt_.lr, static_cast<int64_t>(version_)));
  optimizer_->load(r);
  grow(n);
  if (hook_) hook_->load(r);
}

}  // namespace hsgd
