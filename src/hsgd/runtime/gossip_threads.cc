#include "hsgd/runtime/gossip_threads.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>

#include "hsgd/core/error.h"
#include "hsgd/core/rng.h"
#include "hsgd/core/simd.h"
#include "hsgd/core/topology.h"
#include "hsgd/optim/optimizer.h"
#include "hsgd/policy/gossip.h"
#include "hsgd/runtime/clock.h"
#include "hsgd/runtime/delay.h"
#include "hsgd/runtime/gossip_row.h"
#include "hsgd/runtime/local_steps.h"
#include "hsgd/runtime/row.h"
#include "hsgd/runtime/run_control.h"
#include "hsgd/runtime/worker_crew.h"

namespace hsgd {
namespace {

struct Mail {
  std::vector<float> payload;
  double weight = 0;  // push-sum: the sender's share of its weight
};

struct Shared {
  Shared(const Config& c, const Job& job)
      : c(c),
        n(c.train.workers),
        np(job.initial_params.size()),
        topo(c.gossip.topology, c.gossip.weights, n, c.train.seed),
        models(n, job.initial_params, gossip_local_update(c)),
        sent(static_cast<size_t>(n), 0.0),
        received(static_cast<size_t>(n), 0.0),
        steps(static_cast<size_t>(n), 0),
        idle(static_cast<size_t>(n), 0.0) {
    for (int i = 0; i < n; ++i) model_mu.push_back(std::make_unique<std::mutex>());
  }
  const Config& c;
  const int n;
  const size_t np;
  const Topology topo;
  GossipModels models;  // x_i, m_i, w_i: worker i's under model_mu[i]
  std::vector<std::unique_ptr<std::mutex>> model_mu;
  WorkerCrew crew;  // the threads, and crew.mu: it guards everything below
  std::map<std::array<int64_t, 3>, Mail> mailbox;  // (receiver, round, sender)
  GossipCounts counts;
  int64_t consecutive_nonfinite = 0, rounds = 0, global_averages = 0;
  int barrier_count = 0;
  int64_t barrier_gen = 0;
  std::vector<double> sent, received;
  std::vector<int64_t> steps;
  std::vector<double> idle;  // seconds each worker spent waiting
  SamplerCost sampler_cost;
  RunStops* stops = nullptr;
  const TrainSchedule* schedule = nullptr;
  TrainClock* clock = nullptr;
};

// Posts worker `from`'s model (or push-sum share) to `to` for `round`.
void post(Shared& s, int from, int to, int64_t round, std::span<const float> x, double weight) {
  Mail m;
  m.payload.assign(x.begin(), x.end());
  m.weight = weight;
  const double bytes = 4.0 * static_cast<double>(s.np) + (s.c.policy.kind == "sgp" ? 8.0 : 0.0);
  std::lock_guard lk(s.crew.mu);
  s.mailbox[{to, round, from}] = std::move(m);
  s.sent[static_cast<size_t>(from)] += bytes;
  s.received[static_cast<size_t>(to)] += bytes;
  s.crew.cv.notify_all();
}

class Worker {
 public:
  Worker(int id, const Job& job, Shared& s, DelayModel& delays)
      : id_(id),
        c_(*job.config),
        s_(s),
        delays_(delays),
        sampler_(make_sampler(job, id)),
        model_(job.make_model()),
        local_(s.np),
        grads_(s.np),
        rng_(c_.train.seed, 0x676f73736970ULL + static_cast<uint64_t>(id)) {
    model_->bind(local_, grads_);
    kind_ = c_.policy.kind;
    period_ = kind_ == "pdsgdm" ? std::max(1, c_.policy.k) : 1;
    cta_ = kind_ == "dpsgd" && c_.gossip.order == "cta";
  }

  void run() {
    GateScope inside(s_.crew.gate);
    while (inside.enter()) {
      if (s_.crew.stopped()) break;
      const bool gossip = kind_ != "adpsgd" && s_.n > 1 && (step_ + 1) % period_ == 0;
      const int64_t round = (step_ + 1) / period_ - 1;
      {
        std::lock_guard lk(*s_.model_mu[static_cast<size_t>(id_)]);
        s_.models.debiased(id_, local_);
      }
      if (cta_ && gossip) post_model(round);
      const auto t0 = SteadyClock::now();
      Batch batch;
      const double loss = sampled_gradient(*model_, sampler_, c_.train.batch, &batch);
      const double delay = delays_.extra_seconds(id_, since(t0));
      if (delay > 0) {
        std::unique_lock lk(s_.crew.mu);
        s_.crew.cv.wait_for(lk, std::chrono::duration<double>(delay), [&] { return s_.crew.stop; });
      }
      const bool finite = std::isfinite(loss) && all_finite(grads_);
      if (!account(finite)) break;  // past the budget, or stopped
      const float lr = static_cast<float>(lr_at(c_.lr_schedule, c_.optim.lr, step_));
      if (kind_ == "adpsgd") {
        const int peer = hsgd::adpsgd_peer(s_.topo, id_, step_, rng_);
        if (peer >= 0) {
          std::scoped_lock lk(*s_.model_mu[static_cast<size_t>(id_)],
                              *s_.model_mu[static_cast<size_t>(peer)]);
          s_.models.pair_average(id_, peer);
          std::lock_guard g(s_.crew.mu);
          const double bytes = 4.0 * static_cast<double>(s_.np);
          s_.sent[static_cast<size_t>(id_)] += bytes;
          s_.received[static_cast<size_t>(peer)] += bytes;
          s_.sent[static_cast<size_t>(peer)] += bytes;
          s_.received[static_cast<size_t>(id_)] += bytes;
        }
        step(finite, lr);
      } else if (!gossip) {
        step(finite, lr);
      } else {
        if (!cta_) {
          step(finite, lr);
          if (kind_ == "sgp") {
            post_shares(round);
          } else {
            post_model(round);
          }
        }
        // The wait for the in-peers happens outside the gate, so an
        // evaluation can pause every worker meanwhile.
        inside.exit();
        std::vector<Mail> mails;
        std::vector<int> from = s_.topo.in_peers(id_, round);
        if (!wait_for_round(round, from, &mails)) break;
        if (!inside.enter()) break;
        combine(round, from, mails);
        if (cta_) step(finite, lr);
      }
      finish(batch.size(), loss, finite);
      inside.exit();
      if (c_.gossip.global_every > 0 && s_.n > 1 && step_ % c_.gossip.global_every == 0) {
        if (!global_average(inside)) break;
      }
    }
    std::lock_guard lk(s_.crew.mu);
    s_.sampler_cost += sampler_.cost;
  }

 private:
  void post_model(int64_t round) {
    std::vector<float> x;
    {
      std::lock_guard lk(*s_.model_mu[static_cast<size_t>(id_)]);
      std::span<const float> xi = s_.models.x(id_);
      x.assign(xi.begin(), xi.end());
    }
    for (int to : s_.topo.out_peers(id_, round)) post(s_, id_, to, round, x, 0);
  }

  // Push-sum: keeps one share of (x, w) and posts one to each out-peer.
  void post_shares(int64_t round) {
    const std::vector<int> out = s_.topo.out_peers(id_, round);
    const double share = 1.0 / (static_cast<double>(out.size()) + 1.0);
    std::vector<float> x;
    double w = 0;
    {
      std::lock_guard lk(*s_.model_mu[static_cast<size_t>(id_)]);
      for (float& v : s_.models.x(id_)) v = static_cast<float>(v * share);
      s_.models.weight(id_) *= share;
      std::span<const float> xi = s_.models.x(id_);
      x.assign(xi.begin(), xi.end());
      w = s_.models.weight(id_);
    }
    for (int to : out) post(s_, id_, to, round, x, w);
  }

  // Waits until every in-peer's part of `round` is in the mailbox and takes
  // them, in `from`'s (ascending) order. False when the run stopped.
  bool wait_for_round(int64_t round, const std::vector<int>& from, std::vector<Mail>* mails) {
    const auto t0 = SteadyClock::now();
    std::unique_lock lk(s_.crew.mu);
    s_.crew.cv.wait(lk, [&] {
      if (s_.crew.stop) return true;
      for (int j : from) {
        if (!s_.mailbox.count({id_, round, j})) return false;
      }
      return true;
    });
    s_.idle[static_cast<size_t>(id_)] += since(t0);
    if (s_.crew.stop) return false;
    for (int j : from) {
      auto it = s_.mailbox.find({id_, round, j});
      mails->push_back(std::move(it->second));
      s_.mailbox.erase(it);
    }
    ++s_.rounds;
    return true;
  }

  void combine(int64_t round, const std::vector<int>& from, const std::vector<Mail>& mails) {
    std::lock_guard lk(*s_.model_mu[static_cast<size_t>(id_)]);
    std::span<float> x = s_.models.x(id_);
    const std::vector<float> own(x.begin(), x.end());
    std::vector<std::span<const float>> parts;
    for (const Mail& m : mails) parts.push_back(m.payload);
    const bool push_sum = kind_ == "sgp";
    gossip_combine(s_.topo, id_, round, push_sum, x, own, from, parts);
    if (push_sum) {
      for (const Mail& m : mails) s_.models.weight(id_) += m.weight;
    }
  }

  void step(bool finite, float lr) {
    if (!finite) return;
    std::lock_guard lk(*s_.model_mu[static_cast<size_t>(id_)]);
    s_.models.local_step(id_, grads_, lr);
  }

  // The run layer's rules for a step finishing now: past the budget it is
  // not training and the run ends; non-finite ones are counted (too many in
  // a row stop the run). False when the worker must stop.
  bool account(bool finite) {
    std::lock_guard lk(s_.crew.mu);
    if (s_.crew.stop) return false;
    const double now = s_.clock->seconds();
    if (s_.schedule->past_budget(now)) {
      s_.crew.stop = true;
      s_.crew.cv.notify_all();
      return false;
    }
    if (!finite) {
      ++s_.counts.nonfinite;
      ++s_.consecutive_nonfinite;
      if (s_.stops->check_pushes(s_.consecutive_nonfinite, s_.counts.steps, now)) {
        s_.crew.stop = true;
        s_.crew.cv.notify_all();
        return false;
      }
    } else {
      s_.consecutive_nonfinite = 0;
    }
    return true;
  }

  void finish(int64_t batch, double loss, bool finite) {
    ++step_;
    bool done = false;
    {
      std::lock_guard lk(s_.crew.mu);
      ++s_.counts.steps;
      s_.steps[static_cast<size_t>(id_)] = step_;
      if (finite) {
        s_.counts.samples += batch;
        s_.counts.loss_sum += loss;
        ++s_.counts.loss_count;
      }
      done = s_.schedule->epochs_done(s_.counts.samples);
    }
    if (done) s_.crew.request_stop();
  }

  // Gossip-PGA: every worker meets; the last to arrive averages every model
  // (inside the gate, so no evaluation sees half of it). False when the run
  // stopped.
  bool global_average(GateScope& inside) {
    const auto t0 = SteadyClock::now();
    std::unique_lock lk(s_.crew.mu);
    const int64_t gen = s_.barrier_gen;
    const double bytes = 2.0 * (s_.n - 1) / s_.n * 4.0 * static_cast<double>(s_.np);
    s_.sent[static_cast<size_t>(id_)] += bytes;
    s_.received[static_cast<size_t>((id_ + 1) % s_.n)] += bytes;
    if (++s_.barrier_count < s_.n) {
      s_.crew.cv.wait(lk, [&] { return s_.crew.stop || s_.barrier_gen != gen; });
      s_.idle[static_cast<size_t>(id_)] += since(t0);
      return !s_.crew.stop;
    }
    s_.barrier_count = 0;
    lk.unlock();
    if (!inside.enter()) return false;
    {
      std::vector<std::unique_lock<std::mutex>> all;
      for (auto& m : s_.model_mu) all.emplace_back(*m);
      s_.models.global_average();
    }
    inside.exit();
    lk.lock();
    ++s_.barrier_gen;
    ++s_.global_averages;
    s_.crew.cv.notify_all();
    return !s_.crew.stop;
  }

  const int id_;
  const Config& c_;
  Shared& s_;
  DelayModel& delays_;
  ShardSampler sampler_;
  std::unique_ptr<Model> model_;
  std::vector<float> local_, grads_;
  Rng rng_;
  std::string kind_;
  int period_ = 1;
  bool cta_ = false;
  int64_t step_ = 0;
};

}  // namespace

RunResult GossipThreadsRuntime::run(const Job& job, Recorder* recorder, Observer* observer) {
  const Config& c = *job.config;
  const int n = c.train.workers;
  check_job(job);
  Observer quiet;
  if (!observer) observer = &quiet;
  const auto wall0 = SteadyClock::now();
  Shared s(c, job);
  DelayModel delays(c.stragglers, n, c.train.seed);
  const Dataset test = head(*job.test, c.train.eval_samples);
  std::unique_ptr<Model> eval_model = job.make_model();
  std::vector<float> eval_params(s.np), eval_grads(s.np);
  eval_model->bind(eval_params, eval_grads);

  TrainClock clock;
  const TrainSchedule schedule(c, job.train->size(), /*checkpoints=*/false);
  RunStops stops(c);
  s.stops = &stops;
  s.schedule = &schedule;
  s.clock = &clock;
  double last_time = 0, last_idle = 0;
  // Evaluates with every worker paused between steps.
  auto evaluate = [&](double time_s) {
    double idle_frac = 0;
    GossipCounts counts;
    {
      std::lock_guard lk(s.crew.mu);
      double idle = 0;
      for (double x : s.idle) idle += x;
      const double span = (time_s - last_time) * n;
      idle_frac = span > 0 ? std::clamp((idle - last_idle) / span, 0.0, 1.0) : 0.0;
      last_idle = idle;
      counts = s.counts;
      s.counts.loss_sum = 0;
      s.counts.loss_count = 0;
      s.counts.nonfinite = 0;
    }
    const MetricsRow r = gossip_row(c, s.models, *eval_model, eval_params, test, job.train->size(),
                                    time_s, counts, idle_frac);
    last_time = time_s;
    s.crew.record(r, eval_params, recorder, observer, stops);
    return r;
  };

  open_outputs(job);
  std::vector<std::unique_ptr<Worker>> workers;
  for (int w = 0; w < n; ++w) workers.push_back(std::make_unique<Worker>(w, job, s, delays));
  WorkerCrew::Hooks hooks;
  hooks.evaluate = evaluate;
  hooks.progress = [&](Status* st) {
    std::lock_guard lk(s.crew.mu);
    st->updates = s.counts.steps;
    st->samples = s.counts.samples;
  };
  hooks.work = [&](int w) { workers[static_cast<size_t>(w)]->run(); };
  const WorkerCrew::End end = s.crew.run(n, clock, schedule, stops, observer, hooks);
  const double train_s = end.train_s;

  RunResult result;
  if (end.at_row) {
    result.last = recorder->rows().back();
    s.models.average(eval_params);
  } else {
    result.last = evaluate(train_s);
  }
  result.params.assign(eval_params.begin(), eval_params.end());
  result.stopped = stops.reason();
  result.train_s = result.last.time_s;
  result.real_train_s = train_s;
  result.gradients = s.counts.steps;
  result.wall_s = since(wall0);
  result.sampler_cost = s.sampler_cost;
  result.worker_pushes = s.steps;
  result.gossip =
      gossip_result(c, s.topo, s.counts, s.rounds, s.global_averages, s.sent, s.received, s.steps);
  return result;
}

}  // namespace hsgd
