#include "hsgd/runtime/sim_runtime.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <limits>
#include <queue>

#include "hsgd/core/error.h"
#include "hsgd/runtime/delay.h"
#include "hsgd/runtime/local_steps.h"
#include "hsgd/runtime/row.h"
#include "hsgd/server/server.h"

namespace hsgd {
namespace {

using SteadyClock = std::chrono::steady_clock;

double since(SteadyClock::time_point t0) {
  return std::chrono::duration<double>(SteadyClock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

enum class EventType { kPullArrive, kPushArrive, kServerDone };

struct Event {
  double time;
  uint64_t seq;  // ties at equal times: first scheduled, first taken
  EventType type;
  int worker;
  bool operator>(const Event& o) const { return time != o.time ? time > o.time : seq > o.seq; }
};

class EventQueue {
 public:
  void push(double time, EventType type, int worker) {
    q_.push(Event{time, next_seq_++, type, worker});
  }
  bool empty() const { return q_.empty(); }
  const Event& top() const { return q_.top(); }
  Event pop() {
    Event e = q_.top();
    q_.pop();
    return e;
  }

 private:
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> q_;
  uint64_t next_seq_ = 0;
};

// One simulated worker's state between its pull and its push.
struct SimWorker {
  std::vector<float> grads;
  uint64_t version = 0;
  double loss = 0;
  int64_t batch = 0;
  double wait_since = -1;  // virtual time it started waiting, or -1
  double idle = 0;         // cumulative waiting seconds
  ShardSampler sampler;
};

std::string num(double v) { return fmt::format("{:.9g}", v); }

}  // namespace

double calibrate_compute_time(Model& model, const Dataset& data, int batch, uint64_t seed) {
  ShardSampler sampler(data, 0, 1, seed);
  Batch b;
  for (int i = 0; i < 3; ++i) {
    sampler.next(batch, &b);
    model.gradient(b);
  }
  std::vector<double> times;
  const auto t_all = SteadyClock::now();
  for (int i = 0; i < 25 && (i < 5 || since(t_all) < 1.0); ++i) {
    sampler.next(batch, &b);
    const auto t0 = SteadyClock::now();
    model.gradient(b);
    times.push_back(since(t0));
  }
  return median(times);
}

double calibrate_server_ns(const Config& c, size_t num_params) {
  std::vector<float> params(num_params, 0.0f), grad(num_params, 1e-7f);
  ServerOptions so;
  so.workers = 1;
  PolicyOptions po;
  po.kind = "async";
  Server server(params, so, make_policy(po, 1, c.optim.lr), make_optimizer(c.optim, num_params));
  const int pushes =
      std::max<int>(5, static_cast<int>(std::min<size_t>(200, (1 << 22) / (num_params + 1))));
  std::vector<double> ns;
  for (int r = 0; r < 5; ++r) {
    const auto t0 = SteadyClock::now();
    for (int i = 0; i < pushes; ++i) server.on_push(0, server.version(), grad, 1, 0.0, 0.0);
    ns.push_back(since(t0) * 1e9 / (pushes * static_cast<double>(num_params)));
  }
  // A push accumulates and an update applies: half the measured cost each.
  return median(ns) / 2.0;
}

RunResult SimRuntime::run(const Job& job, Recorder* recorder, Observer* observer) {
  const Config& c = *job.config;
  const int n = c.train.workers;
  HSGD_ASSERT(job.train && job.test && job.make_model, "incomplete job");
  if (job.train->size() < n) {
    throw InputError(fmt::format("train.workers = {}: the training set has only {} samples", n,
                                 job.train->size()));
  }
  Observer quiet;
  if (!observer) observer = &quiet;
  const auto wall0 = SteadyClock::now();
  double eval_real = 0;  // real seconds spent evaluating

  // One model computes every worker's gradients and the evaluations.
  const size_t np = job.initial_params.size();
  std::unique_ptr<Model> model = job.make_model();
  std::vector<float> work_params(np), work_grads(np);
  model->bind(work_params, work_grads);

  RunResult result;
  double compute_time = c.sim.compute_time;
  if (compute_time == 0) {
    std::copy(job.initial_params.begin(), job.initial_params.end(), work_params.begin());
    compute_time = calibrate_compute_time(*model, *job.train, c.train.batch, c.train.seed);
    result.resolved.push_back({"sim.compute_time", num(compute_time)});
  }
  double server_ns = c.sim.server_ns_per_param;
  if (server_ns < 0) {
    server_ns = calibrate_server_ns(c, np);
    result.resolved.push_back({"sim.server_ns_per_param", num(server_ns)});
  }
  const double bytes = 4.0 * static_cast<double>(np);
  const double transfer = c.sim.latency + bytes / c.sim.bandwidth;  // one message with parameters
  const double server_cost = server_ns * 1e-9 * static_cast<double>(np);

  std::vector<float> params = job.initial_params;
  Server server(params, server_options(job), make_policy(c.policy, n, c.optim.lr),
                make_optimizer(server_optimizer(c), np));
  DelayModel delays(c.stragglers, n, c.train.seed);
  std::vector<SimWorker> workers;
  workers.reserve(static_cast<size_t>(n));
  for (int w = 0; w < n; ++w) {
    workers.push_back(SimWorker{std::vector<float>(np), 0, 0, 0, -1, 0,
                                ShardSampler(*job.train, w, n, c.train.seed)});
  }
  // local:H: per-worker local-SGD state (momentum kept across rounds).
  const int local_h = server.policy().local_steps();
  std::vector<LocalWorker> locals;
  for (int w = 0; local_h > 0 && w < n; ++w) locals.push_back(make_local_worker(c, np));
  const Dataset test = head(*job.test, c.train.eval_samples);
  Batch batch;

  double last_row_time = 0, last_idle = 0;
  auto idle_at = [&](double t) {
    double total = 0;
    for (const SimWorker& sw : workers) {
      total += sw.idle + (sw.wait_since >= 0 ? t - sw.wait_since : 0.0);
    }
    return total;
  };
  auto evaluate = [&](double t) {
    const auto e0 = SteadyClock::now();
    std::span<const float> p = server.params();
    std::copy(p.begin(), p.end(), work_params.begin());
    const EvalResult e = model->evaluate(test);
    const double idle_total = idle_at(t);
    const double interval = t - last_row_time;
    const double idle =
        interval > 0 ? std::clamp((idle_total - last_idle) / (interval * n), 0.0, 1.0) : 0.0;
    last_row_time = t;
    last_idle = idle_total;
    MetricsRow r = build_row(server, server.take_stats(), e, t, idle, job);
    recorder->write(r);
    observer->on_row(r);
    eval_real += since(e0);
    return r;
  };

  EventQueue events;
  for (int w = 0; w < n; ++w) events.push(c.sim.latency, EventType::kPullArrive, w);
  evaluate(0.0);

  const double budget =
      c.train.budget > 0 ? c.train.budget : std::numeric_limits<double>::infinity();
  const int64_t epoch_target =
      c.train.epochs > 0
          ? static_cast<int64_t>(std::ceil(c.train.epochs * static_cast<double>(job.train->size())))
          : 0;
  double next_eval = c.train.eval_every;
  std::deque<int> server_queue;
  bool server_busy = false;
  int in_service = -1;
  Decision in_service_decision;
  double end_time = budget;
  auto last_status = SteadyClock::now();
  uint64_t processed = 0;

  auto start_service = [&](double now) {
    const int w = server_queue.front();
    server_queue.pop_front();
    SimWorker& sw = workers[static_cast<size_t>(w)];
    in_service_decision = server.on_push(w, sw.version, sw.grads, sw.batch, sw.loss, now);
    in_service = w;
    server_busy = true;
    const double cost = server_cost * (in_service_decision.applied ? 2.0 : 1.0);
    events.push(now + cost, EventType::kServerDone, w);
  };

  for (;;) {
    if (events.empty()) {
      throw std::runtime_error(
          fmt::format("simulation deadlocked at t = {} s: every worker is waiting (policy {})",
                      last_row_time, server.policy().name()));
    }
    const double t = events.top().time;
    while (next_eval < budget && next_eval <= t) {
      evaluate(next_eval);
      next_eval += c.train.eval_every;
    }
    if (t >= budget) break;
    const Event ev = events.pop();
    const int w = ev.worker;
    SimWorker& sw = workers[static_cast<size_t>(w)];
    switch (ev.type) {
      case EventType::kPullArrive: {
        const Decision d = server.on_pull(w);
        if (d.caller_waits) {  // SSP: too far ahead; pulls again when released
          sw.wait_since = ev.time;
          break;
        }
        std::span<const float> p = server.params();
        std::copy(p.begin(), p.end(), work_params.begin());
        // local:H: H local steps, H x the compute time below, one delay draw.
        sw.loss = compute_push(*model, work_params, work_grads, sw.sampler, c.train.batch,
                               local_h > 0 ? &locals[static_cast<size_t>(w)] : nullptr, local_h,
                               &batch, &sw.batch);
        std::copy(work_grads.begin(), work_grads.end(), sw.grads.begin());
        sw.version = d.version;
        const double compute =
            std::max(1, local_h) * compute_time * delays.slowdown(w) + delays.draw(w);
        events.push(ev.time + transfer + compute + transfer, EventType::kPushArrive, w);
        break;
      }
      case EventType::kPushArrive:
        server_queue.push_back(w);
        if (!server_busy) start_service(ev.time);
        break;
      case EventType::kServerDone: {
        HSGD_ASSERT(in_service == w, "server finished a push it was not serving");
        server_busy = false;
        for (int r : in_service_decision.released) {
          SimWorker& rw = workers[static_cast<size_t>(r)];
          HSGD_ASSERT(rw.wait_since >= 0, "released a worker that was not waiting");
          rw.idle += ev.time - rw.wait_since;
          rw.wait_since = -1;
          events.push(ev.time + c.sim.latency, EventType::kPullArrive, r);
        }
        if (in_service_decision.caller_waits) {
          sw.wait_since = ev.time;
        } else {
          events.push(ev.time + c.sim.latency, EventType::kPullArrive, w);
        }
        if (!server_queue.empty()) start_service(ev.time);
        break;
      }
    }
    if (epoch_target > 0 && server.samples() >= epoch_target) {
      end_time = ev.time;
      break;
    }
    if ((++processed & 1023) == 0 && since(last_status) > 0.5) {
      last_status = SteadyClock::now();
      Status st;
      st.time_s = ev.time;
      st.updates = static_cast<int64_t>(server.version());
      st.samples = server.samples();
      st.k = server.threshold(ev.time);
      st.epochs = static_cast<double>(st.samples) / static_cast<double>(job.train->size());
      st.train_loss = std::nan("");
      observer->on_status(st);
    }
  }
  result.last = evaluate(end_time);
  result.params.assign(server.params().begin(), server.params().end());
  result.train_s = end_time;
  result.gradients = server.pushes();
  result.staleness_histogram = server.staleness_histogram();
  result.wall_s = since(wall0);
  result.real_train_s = result.wall_s - eval_real;
  return result;
}

}  // namespace hsgd
