#include "hsgd/runtime/threads_runtime.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>

#include "hsgd/core/error.h"
#include "hsgd/core/rng.h"
#include "hsgd/runtime/delay.h"
#include "hsgd/runtime/gate.h"
#include "hsgd/runtime/local_steps.h"
#include "hsgd/runtime/row.h"
#include "hsgd/server/server.h"

namespace hsgd {
namespace {

using SteadyClock = std::chrono::steady_clock;

double seconds_between(SteadyClock::time_point a, SteadyClock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Training time: wall time since start minus time spent paused for evaluation.
class TrainClock {
 public:
  void start() { start_ = SteadyClock::now(); }
  double seconds() const {
    return seconds_between(start_, SteadyClock::now()) - paused_.load(std::memory_order_relaxed);
  }
  void add_paused(double s) { paused_.fetch_add(s, std::memory_order_relaxed); }

 private:
  SteadyClock::time_point start_;
  std::atomic<double> paused_{0.0};
};

struct Shared {
  std::mutex mu;  // guards everything below and the server
  std::condition_variable cv;
  Server* server = nullptr;
  std::vector<char> released;
  std::vector<double> idle_s;  // per worker, cumulative
  bool stop = false;
  std::exception_ptr error;
  Gate gate;
  TrainClock clock;
  DelayModel* delays = nullptr;
};

void request_stop(Shared& s) {
  s.stop = true;
  s.cv.notify_all();
}

// Blocks worker `id` (outside the gate) until the server releases it, and
// counts the wait as idle time. Returns false if the run stopped instead.
bool wait_until_released(Shared& s, int id) {
  const auto w0 = SteadyClock::now();
  std::unique_lock lk(s.mu);
  s.cv.wait(lk, [&] { return s.released[static_cast<size_t>(id)] || s.stop; });
  s.released[static_cast<size_t>(id)] = 0;
  s.idle_s[static_cast<size_t>(id)] += seconds_between(w0, SteadyClock::now());
  return !s.stop;
}

struct WorkerArgs {
  int id;
  const Job* job;
  Shared* shared;
  int64_t epoch_target_samples;  // 0 = none
};

void worker_loop(const WorkerArgs& a) {
  const Config& c = *a.job->config;
  Shared& s = *a.shared;
  const int n = c.train.workers;
  DelayModel& delays = *s.delays;
  ShardSampler sampler(*a.job->train, a.id, n, c.train.seed);
  std::unique_ptr<Model> model = a.job->make_model();
  const size_t np = a.job->initial_params.size();
  std::vector<float> params(np), grads(np);
  model->bind(params, grads);
  Batch batch;
  int local_h = 0;  // local:H: H local steps, then push the model delta
  {
    std::lock_guard lk(s.mu);
    local_h = s.server->policy().local_steps();
  }
  std::optional<LocalWorker> local;
  if (local_h > 0) local.emplace(make_local_worker(c, np));
  GateScope inside(s.gate);  // exits on every path, exceptions included
  while (inside.enter()) {
    uint64_t version = 0;
    bool pull_waits = false;
    {
      std::lock_guard lk(s.mu);
      if (s.stop) break;
      const Decision d = s.server->on_pull(a.id);
      pull_waits = d.caller_waits;
      if (!pull_waits) {
        version = d.version;
        std::span<const float> p = s.server->params();
        std::copy(p.begin(), p.end(), params.begin());
      }
    }
    if (pull_waits) {
      // SSP: too far ahead. Wait outside the gate until released, then pull
      // again. (A worker waits either after its pull or after its push,
      // never both, so one `released` flag serves both waits.)
      inside.exit();
      if (!wait_until_released(s, a.id)) break;
      continue;
    }
    int64_t pushed = 0;  // samples behind this push
    const auto t0 = SteadyClock::now();
    const double loss = compute_push(*model, params, grads, sampler, c.train.batch,
                                     local ? &*local : nullptr, local_h, &batch, &pushed);
    const double delay = delays.extra_seconds(a.id, seconds_between(t0, SteadyClock::now()));
    if (delay > 0) {
      std::unique_lock lk(s.mu);
      s.cv.wait_for(lk, std::chrono::duration<double>(delay), [&] { return s.stop; });
    }
    bool wait = false;
    {
      std::lock_guard lk(s.mu);
      if (s.stop) break;
      Decision d = s.server->on_push(a.id, version, grads, pushed, loss, s.clock.seconds());
      for (int r : d.released) s.released[static_cast<size_t>(r)] = 1;
      if (!d.released.empty()) s.cv.notify_all();
      if (a.epoch_target_samples > 0 && s.server->samples() >= a.epoch_target_samples) {
        request_stop(s);
      }
      wait = d.caller_waits;
    }
    inside.exit();
    if (wait && !wait_until_released(s, a.id)) break;
  }
}

// Evaluates the server's current parameters while the workers are paused
// and builds a metrics row. Called on the driving thread.
class Evaluator {
 public:
  Evaluator(const Job& job, Shared& s, const Dataset& test)
      : job_(job),
        s_(s),
        test_(test),
        params_(job.initial_params.size()),
        grads_(job.initial_params.size()) {
    model_ = job.make_model();
    model_->bind(params_, grads_);
  }

  MetricsRow evaluate(bool paused_already = false) {
    const auto p0 = SteadyClock::now();
    if (!paused_already) s_.gate.pause();
    double time_s = 0, idle_total = 0;
    ServerStats st;
    {
      std::lock_guard lk(s_.mu);
      time_s = s_.clock.seconds();
      std::span<const float> p = s_.server->params();
      std::copy(p.begin(), p.end(), params_.begin());
      st = s_.server->take_stats();
      for (double v : s_.idle_s) idle_total += v;
    }
    const EvalResult e = model_->evaluate(test_);
    const double interval = time_s - last_time_;
    const double workers = static_cast<double>(job_.config->train.workers);
    const double idle =
        interval > 0 ? std::clamp((idle_total - last_idle_) / (interval * workers), 0.0, 1.0) : 0.0;
    last_time_ = time_s;
    last_idle_ = idle_total;
    MetricsRow r;
    {
      std::lock_guard lk(s_.mu);  // the server is read while workers may run
      r = build_row(*s_.server, st, e, time_s, idle, job_);
    }
    if (!paused_already) {
      s_.clock.add_paused(seconds_between(p0, SteadyClock::now()));
      s_.gate.resume();
    }
    return r;
  }

  std::vector<float> params() const { return params_; }

 private:
  const Job& job_;
  Shared& s_;
  const Dataset& test_;
  std::vector<float> params_, grads_;
  std::unique_ptr<Model> model_;
  double last_time_ = 0;
  double last_idle_ = 0;
};

}  // namespace

RunResult ThreadsRuntime::run(const Job& job, Recorder* recorder, Observer* observer) {
  const Config& c = *job.config;
  const int n = c.train.workers;
  HSGD_ASSERT(job.train && job.test && job.make_model, "incomplete job");
  if (job.train->size() < n) {
    throw InputError("train.workers = " + std::to_string(n) + ": the training set has only " +
                     std::to_string(job.train->size()) + " samples");
  }
  Observer quiet;
  if (!observer) observer = &quiet;
  const auto wall0 = SteadyClock::now();

  std::vector<float> params = job.initial_params;
  Server server(params, server_options(job), make_policy(c.policy, n, c.optim.lr),
                make_optimizer(server_optimizer(c), params.size()));

  DelayModel delays(c.stragglers, n, c.train.seed);
  Shared s;
  s.server = &server;
  s.delays = &delays;
  s.released.assign(static_cast<size_t>(n), 0);
  s.idle_s.assign(static_cast<size_t>(n), 0.0);
  const Dataset test = head(*job.test, c.train.eval_samples);
  Evaluator evaluator(job, s, test);

  // The row at t = 0: the initial model.
  s.clock.start();
  s.gate.pause();
  MetricsRow first = evaluator.evaluate(/*paused_already=*/true);
  recorder->write(first);
  observer->on_row(first);
  s.clock.start();  // training time starts after the first evaluation
  s.gate.resume();

  const int64_t epoch_target =
      c.train.epochs > 0
          ? static_cast<int64_t>(std::ceil(c.train.epochs * static_cast<double>(job.train->size())))
          : 0;
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(n));
  // On any exit from here, exceptions included: stop, open the gate, join.
  struct Joiner {
    Shared& s;
    std::vector<std::thread>& threads;
    ~Joiner() {
      {
        std::lock_guard lk(s.mu);
        request_stop(s);
      }
      s.gate.close();
      for (std::thread& t : threads) {
        if (t.joinable()) t.join();
      }
    }
  } joiner{s, threads};
  for (int w = 0; w < n; ++w) {
    threads.emplace_back([&, w] {
      try {
        worker_loop(WorkerArgs{w, &job, &s, epoch_target});
      } catch (...) {
        std::lock_guard lk(s.mu);
        if (!s.error) s.error = std::current_exception();
        request_stop(s);
      }
    });
  }

  double next_eval = c.train.eval_every;
  double last_acc = first.test_acc;
  double tick_time = 0;
  int64_t tick_samples = 0;
  const double tick = 0.5;
  for (;;) {
    double now = s.clock.seconds();
    const double budget = c.train.budget > 0 ? c.train.budget : 1e300;
    const double wake = std::min({next_eval, budget, now + tick});
    {
      std::unique_lock lk(s.mu);
      s.cv.wait_for(lk, std::chrono::duration<double>(std::max(0.0, wake - now)),
                    [&] { return s.stop; });
      now = s.clock.seconds();
      if (now >= budget) request_stop(s);
      if (s.stop) break;
    }
    if (now >= next_eval) {
      MetricsRow r = evaluator.evaluate();
      recorder->write(r);
      observer->on_row(r);
      last_acc = r.test_acc;
      while (next_eval <= r.time_s) next_eval += c.train.eval_every;
    }
    Status st;
    {
      std::lock_guard lk(s.mu);
      st.time_s = s.clock.seconds();
      st.updates = static_cast<int64_t>(server.version());
      st.samples = server.samples();
      st.k = server.threshold(st.time_s);
      st.epochs = static_cast<double>(st.samples) / static_cast<double>(job.train->size());
    }
    st.test_acc = last_acc;
    st.samples_per_s = st.time_s > tick_time ? static_cast<double>(st.samples - tick_samples) /
                                                   (st.time_s - tick_time)
                                             : 0.0;
    tick_time = st.time_s;
    tick_samples = st.samples;
    observer->on_status(st);
  }
  const double train_s = s.clock.seconds();
  s.gate.close();
  for (std::thread& t : threads) t.join();
  threads.clear();
  if (s.error) std::rethrow_exception(s.error);

  MetricsRow last = evaluator.evaluate(/*paused_already=*/true);
  last.time_s = train_s;
  recorder->write(last);
  observer->on_row(last);

  RunResult result;
  result.params = evaluator.params();
  result.last = last;
  result.train_s = train_s;
  result.wall_s = seconds_between(wall0, SteadyClock::now());
  result.real_train_s = train_s;
  result.gradients = server.pushes();
  result.staleness_histogram = server.staleness_histogram();
  for (int w = 0; w < n; ++w) result.worker_pushes.push_back(server.clock(w));
  return result;
}

}  // namespace hsgd
