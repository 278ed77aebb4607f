#include "hsgd/server/server.h"

#include <algorithm>

#include "hsgd/core/error.h"

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
      live_count_(o.workers) {
  HSGD_ASSERT(o.workers >= 1, "server needs at least one worker");
  HSGD_ASSERT(opt_.samples_per_epoch >= 1, "samples_per_epoch must be >= 1");
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

Decision Server::on_pull(int worker) {
  HSGD_ASSERT(worker >= 0 && static_cast<size_t>(worker) < live_.size(),
              "pull from unknown worker");
  return decision();
}

bool Server::ready(double seconds) const {
  if (pending_.empty() || live_count_ == 0) return false;
  int live_pushes = 0;
  for (const Pending& p : pending_) live_pushes += live_[static_cast<size_t>(p.worker)] ? 1 : 0;
  return live_pushes >= threshold(seconds);
}

void Server::apply(Decision* d) {
  const size_t n = pending_.size();
  for (const Pending& p : pending_) {
    const int64_t tau = static_cast<int64_t>(version_ - p.version);
    stats_.staleness_sum += static_cast<double>(tau);
    stats_.staleness_count += 1;
    stats_.staleness_max = std::max(stats_.staleness_max, tau);
  }
  if (opt_.aggregation == Aggregation::kMean && n > 1) {
    const float inv = 1.0f / static_cast<float>(n);
    for (float& g : acc_) g *= inv;
  }
  optimizer_->step(params_, acc_, lr_at(opt_.lr_schedule, opt_.lr, static_cast<int64_t>(version_)));
  std::fill(acc_.begin(), acc_.end(), 0.0f);
  ++version_;
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

Decision Server::on_push(int worker, uint64_t version, std::span<const float> grad,
                         int64_t batch_size, double loss, double seconds) {
  const auto w = static_cast<size_t>(worker);
  HSGD_ASSERT(worker >= 0 && w < live_.size() && live_[w], "push from a worker that is not live");
  HSGD_ASSERT(!waiting_[w], "push from a worker that is waiting");
  HSGD_ASSERT(grad.size() == acc_.size(), "gradient size differs from the parameter count");
  HSGD_ASSERT(version <= version_, "push from the future");
  for (size_t i = 0; i < acc_.size(); ++i) acc_[i] += grad[i];
  pending_.push_back({worker, version});
  total_samples_ += batch_size;
  ++total_pushes_;
  stats_.pushes += 1;
  stats_.samples += batch_size;
  stats_.loss_sum += loss;
  stats_.loss_count += 1;
  Decision d = decision();
  if (policy_->pusher_waits()) waiting_[w] = true;
  if (ready(seconds)) apply(&d);
  // The pusher waits only if its push is still buffered.
  if (waiting_[w]) {
    d.caller_waits = true;
  } else {
    d.released.erase(std::remove(d.released.begin(), d.released.end(), worker), d.released.end());
  }
  return d;
}

Decision Server::on_join(int worker, double seconds) {
  HSGD_ASSERT(worker >= 0, "negative worker id");
  const auto w = static_cast<size_t>(worker);
  if (w >= live_.size()) {
    live_.resize(w + 1, false);
    waiting_.resize(w + 1, false);
  }
  if (!live_[w]) {
    live_[w] = true;
    ++live_count_;
  }
  Decision d = decision();
  if (ready(seconds)) apply(&d);
  return d;
}

Decision Server::on_leave(int worker, double seconds) {
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
  if (live_count_ > 0 && ready(seconds)) apply(&d);
  return d;
}

ServerStats Server::take_stats() {
  ServerStats s = stats_;
  stats_ = ServerStats{};
  return s;
}

}  // namespace hsgd
