#include "hsgd/runtime/hogwild_runtime.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <mutex>

#include "hsgd/core/error.h"
#include "hsgd/core/simd.h"
#include "hsgd/optim/optimizer.h"
#include "hsgd/runtime/clock.h"
#include "hsgd/runtime/delay.h"
#include "hsgd/runtime/local_steps.h"
#include "hsgd/runtime/row.h"
#include "hsgd/runtime/run_control.h"
#include "hsgd/runtime/worker_crew.h"

namespace hsgd {
namespace {

// Relaxed atomic views of the shared parameters (see the header).
float load(float& x) { return std::atomic_ref<float>(x).load(std::memory_order_relaxed); }
void store(float& x, float v) { std::atomic_ref<float>(x).store(v, std::memory_order_relaxed); }

struct Shared {
  std::vector<float> params;  // accessed only through load/store
  std::atomic<int64_t> steps{0}, samples{0};
  WorkerCrew crew;  // the threads, and crew.mu: it guards the fields below
  double loss_sum = 0;
  int64_t loss_count = 0;
  SamplerCost sampler_cost;  // summed as workers finish
  // The run layer (run_control.h): under `mu`.
  RunStops* stops = nullptr;
  const TrainSchedule* schedule = nullptr;
  TrainClock* clock = nullptr;
  // Non-finite steps: dropped like a server drops a non-finite push, and
  // counted (consecutive ones stop the run: train.max_nonfinite).
  int64_t nonfinite = 0, consecutive_nonfinite = 0;
};

void worker_loop(int id, const Job& job, Shared& s, DelayModel& delays) {
  const Config& c = *job.config;
  ShardSampler sampler = make_sampler(job, id);
  std::unique_ptr<Model> model = job.make_model();
  const size_t np = s.params.size();
  std::vector<float> local(np), grads(np);
  model->bind(local, grads);
  Batch batch;
  const float wd = static_cast<float>(c.optim.weight_decay);
  GateScope inside(s.crew.gate);
  while (inside.enter()) {
    if (s.crew.stopped()) break;
    for (size_t i = 0; i < np; ++i) local[i] = load(s.params[i]);
    const auto t0 = SteadyClock::now();
    const double loss = sampled_gradient(*model, sampler, c.train.batch, &batch);
    const double delay = delays.extra_seconds(id, since(t0));
    if (delay > 0) {
      std::unique_lock lk(s.crew.mu);
      s.crew.cv.wait_for(lk, std::chrono::duration<double>(delay), [&] { return s.crew.stop; });
    }
    // The same rules as a server's push (run_control.h): a step finishing
    // at or after the budget is not training, and a non-finite gradient is
    // dropped and counted.
    const bool finite = std::isfinite(loss) && all_finite(grads);
    {
      std::lock_guard lk(s.crew.mu);
      if (s.crew.stop) break;
      const double now = s.clock->seconds();
      if (s.schedule->past_budget(now)) {
        s.crew.stop = true;
        s.crew.cv.notify_all();
        break;
      }
      if (!finite) {
        ++s.nonfinite;
        ++s.consecutive_nonfinite;
        if (s.stops->check_pushes(s.consecutive_nonfinite, s.steps.load(), now)) {
          s.crew.stop = true;
          s.crew.cv.notify_all();
        }
      } else {
        s.consecutive_nonfinite = 0;
      }
    }
    if (!finite) {
      inside.exit();
      continue;
    }
    const int64_t step = s.steps.fetch_add(1, std::memory_order_relaxed);
    const float lr = static_cast<float>(lr_at(c.lr_schedule, c.optim.lr, step));
    for (size_t i = 0; i < np; ++i) {
      float& w = s.params[i];
      const float v = load(w);
      store(w, v - lr * (grads[i] + wd * v));
    }
    const int64_t samples =
        s.samples.fetch_add(batch.size(), std::memory_order_relaxed) + batch.size();
    {
      std::lock_guard lk(s.crew.mu);
      s.loss_sum += loss;
      s.loss_count += 1;
    }
    inside.exit();
    if (s.schedule->epochs_done(samples)) s.crew.request_stop();
  }
  std::lock_guard lk(s.crew.mu);
  s.sampler_cost += sampler.cost;
}

}  // namespace

RunResult HogwildRuntime::run(const Job& job, Recorder* recorder, Observer* observer) {
  const Config& c = *job.config;
  const int n = c.train.workers;
  check_job(job);
  Observer quiet;
  if (!observer) observer = &quiet;
  const auto wall0 = SteadyClock::now();
  Shared s;
  s.params = job.initial_params;
  DelayModel delays(c.stragglers, n, c.train.seed);
  const Dataset test = head(*job.test, c.train.eval_samples);
  std::unique_ptr<Model> eval_model = job.make_model();
  std::vector<float> eval_params(s.params.size()), eval_grads(s.params.size());
  eval_model->bind(eval_params, eval_grads);

  TrainClock clock;  // runtime/clock.h: stands still while the workers are paused
  TrainSchedule schedule(c, job.train->size(), /*checkpoints=*/false);
  RunStops stops(c);
  s.stops = &stops;
  s.schedule = &schedule;
  s.clock = &clock;
  // Evaluates with the workers paused (they are between steps); the run
  // layer's stops are checked on the row.
  auto evaluate = [&](double time_s) {
    for (size_t i = 0; i < s.params.size(); ++i) eval_params[i] = load(s.params[i]);
    MetricsRow r;
    {
      std::lock_guard lk(s.crew.mu);
      r.train_loss = s.loss_count ? s.loss_sum / static_cast<double>(s.loss_count) : std::nan("");
      s.loss_sum = 0;
      s.loss_count = 0;
      r.nonfinite = s.nonfinite;
      s.nonfinite = 0;
    }
    const EvalResult e = eval_model->evaluate(test);
    r.time_s = time_s;
    r.updates = s.steps.load();
    r.samples = s.samples.load();
    r.epoch = static_cast<double>(r.samples) / static_cast<double>(job.train->size());
    r.k = 1;
    put_evaluation(e, &r);
    r.live_workers = n;
    r.policy = "hogwild";
    r.seed = c.train.seed;
    s.crew.record(r, eval_params, recorder, observer, stops);
    return r;
  };

  open_outputs(job);
  WorkerCrew::Hooks hooks;
  hooks.evaluate = evaluate;
  hooks.progress = [&](Status* st) {
    st->updates = s.steps.load();
    st->samples = s.samples.load();
  };
  hooks.work = [&](int w) { worker_loop(w, job, s, delays); };
  const WorkerCrew::End end = s.crew.run(n, clock, schedule, stops, observer, hooks);
  const double train_s = end.train_s;

  RunResult result;
  if (end.at_row) {  // its row is the last
    result.last = recorder->rows().back();
    for (size_t i = 0; i < s.params.size(); ++i) eval_params[i] = load(s.params[i]);
  } else {
    result.last = evaluate(train_s);
  }
  result.params.assign(eval_params.begin(), eval_params.end());
  result.stopped = stops.reason();
  result.train_s = result.last.time_s;
  result.real_train_s = train_s;
  result.gradients = s.steps.load();
  result.wall_s = since(wall0);
  result.sampler_cost = s.sampler_cost;
  return result;
}

}  // namespace hsgd
