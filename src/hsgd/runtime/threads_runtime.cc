#include "hsgd/runtime/threads_runtime.h"

#include <fmt/format.h>

#include <atomic>
#include <cmath>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>

#include "hsgd/core/error.h"
#include "hsgd/core/rng.h"
#include "hsgd/runtime/clock.h"
#include "hsgd/runtime/delay.h"
#include "hsgd/runtime/gate.h"
#include "hsgd/runtime/local_steps.h"
#include "hsgd/runtime/row.h"
#include "hsgd/runtime/sparse_rows.h"
#include "hsgd/server/server.h"

namespace hsgd {
namespace {

constexpr uint32_t kThreadsTag = 0x54485231;  // "THR1"

// What one worker carries from one step to the next: the part of its state
// a checkpoint saves. Touched only by its worker thread, except while the
// workers are paused at the gate (then by the driving thread).
struct WorkerState {
  ShardSampler sampler;
  std::optional<LocalWorker> local;  // local:H
};

struct Shared {
  std::mutex mu;  // guards everything below and the server
  std::condition_variable cv;
  Server* server = nullptr;
  std::vector<char> released;
  IdleMeter idle;  // on clock's seconds
  bool stop = false;
  std::string stopped;  // why the run stopped early (RunResult::stopped)
  std::exception_ptr error;
  Gate gate;
  TrainClock clock;
  DelayModel* delays = nullptr;
  std::vector<WorkerState>* workers = nullptr;
  // Row-sparse (model.sparse): the table, the model's layout, and all the
  // server's parameters (the Server itself holds the dense prefix).
  RowTable* rows = nullptr;
  RowLayout layout;
  std::span<const float> all_params;
};

void request_stop(Shared& s) {
  s.stop = true;
  s.cv.notify_all();
}

// Blocks worker `id` (outside the gate) until the server releases it, and
// counts the wait as idle time on the training clock. Returns false if the
// run stopped instead.
bool wait_until_released(Shared& s, int id) {
  const auto w = static_cast<size_t>(id);
  std::unique_lock lk(s.mu);
  s.idle.begin(w, s.clock.seconds());
  s.cv.wait(lk, [&] { return s.released[w] || s.stop; });
  s.released[w] = 0;
  s.idle.end(w, s.clock.seconds());
  return !s.stop;
}

struct WorkerArgs {
  int id;
  const Job* job;
  Shared* shared;
  int64_t epoch_target_samples;  // 0 = none
  double budget;                 // training seconds; a push at or after it is dropped
  // Resumed while its push waited for an update (or its SSP pull waited):
  // read before any worker starts, since another's push may release it.
  bool starts_waiting = false;
};

void worker_loop(const WorkerArgs& a) {
  const Config& c = *a.job->config;
  Shared& s = *a.shared;
  DelayModel& delays = *s.delays;
  WorkerState& ws = (*s.workers)[static_cast<size_t>(a.id)];
  std::unique_ptr<Model> model = a.job->make_model();
  const size_t np = a.job->initial_params.size();
  std::vector<float> params(np), grads(np);
  model->bind(params, grads);
  std::optional<SparseWorker> sparse;  // model.sparse: row-sparse pull/push
  if (s.rows) sparse.emplace(*model, s.layout, params, grads);
  Batch batch;
  int local_h = 0;  // local:H: H local steps, then push the model delta
  {
    std::lock_guard lk(s.mu);
    local_h = s.server->policy().local_steps();
  }
  if (a.starts_waiting && !wait_until_released(s, a.id)) return;
  GateScope inside(s.gate);  // exits on every path, exceptions included
  while (inside.enter()) {
    uint64_t version = 0;
    bool pull_waits = false;
    if (sparse) sparse->prepare(ws.sampler, c.train.batch);  // its rows are pulled
    {
      std::lock_guard lk(s.mu);
      if (s.stop) break;
      const Decision d = s.server->on_pull(a.id);
      pull_waits = d.caller_waits;
      if (!pull_waits) {
        version = d.version;
        if (sparse) {
          sparse->pull(*s.server, *s.rows);
        } else {
          std::span<const float> p = s.server->params();
          std::copy(p.begin(), p.end(), params.begin());
        }
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
    const double loss =
        sparse ? sparse->compute(&pushed)
               : compute_push(*model, params, grads, ws.sampler, c.train.batch,
                              ws.local ? &*ws.local : nullptr, local_h, &batch, &pushed);
    const double delay = delays.extra_seconds(a.id, since(t0));
    if (delay > 0) {
      std::unique_lock lk(s.mu);
      s.cv.wait_for(lk, std::chrono::duration<double>(delay), [&] { return s.stop; });
    }
    bool wait = false;
    {
      std::lock_guard lk(s.mu);
      if (s.stop) break;
      const double now = s.clock.seconds();
      if (now >= a.budget) {  // finished after the budget: not training
        request_stop(s);
        break;
      }
      Decision d =
          sparse ? s.server->on_push(a.id, version, sparse->dense_grads(), pushed,
                                     sparse->stage(*s.rows, loss), now)
                 : s.server->on_push(a.id, version, grads, pushed, loss, now);
      for (int r : d.released) s.released[static_cast<size_t>(r)] = 1;
      if (!d.released.empty()) s.cv.notify_all();
      if (a.epoch_target_samples > 0 && s.server->samples() >= a.epoch_target_samples) {
        request_stop(s);
      }
      const std::string why = nonfinite_pushes(*s.server, c, now);
      if (!why.empty() && s.stopped.empty()) {
        s.stopped = why;
        request_stop(s);
      }
      wait = d.caller_waits;
    }
    inside.exit();
    if (wait && !wait_until_released(s, a.id)) break;
  }
}

// Evaluates and checkpoints while the workers are paused at the gate, on
// the driving thread. The training clock runs until every worker has left
// the gate (their work in flight is training) and stands still from then
// until they go on.
class Pauser {
 public:
  Pauser(const Job& job, Shared& s, const Dataset& test)
      : job_(job),
        s_(s),
        test_(test),
        params_(job.initial_params.size()),
        grads_(job.initial_params.size()),
        budget_(job.config->train.budget > 0 ? job.config->train.budget : 1e300) {
    model_ = job.make_model();
    model_->bind(params_, grads_);
  }

  // Pauses the workers (unless the caller has: at the start and the end),
  // evaluates, and writes a checkpoint when `checkpoint`.
  MetricsRow evaluate(Recorder* recorder, bool checkpoint, bool paused_already = false) {
    if (!paused_already) s_.gate.pause();
    s_.clock.pause();
    double time_s = 0, idle_total = 0;
    ServerStats st;
    {
      std::lock_guard lk(s_.mu);
      // No push is taken at or after the budget, so a pause that ends past
      // it sees the state at the budget.
      time_s = std::min(s_.clock.seconds(), budget_);
      std::span<const float> p = s_.all_params;
      std::copy(p.begin(), p.end(), params_.begin());
      st = s_.server->take_stats();
      idle_total = s_.idle.total(time_s);
    }
    const EvalResult e = model_->evaluate(test_);
    const double idle =
        idle_fraction(idle_total - last_idle_, time_s - last_time_, job_.config->train.workers);
    last_time_ = time_s;
    last_idle_ = idle_total;
    MetricsRow r;
    {
      std::lock_guard lk(s_.mu);
      r = build_row(*s_.server, st, e, time_s, idle, job_);
    }
    recorder->write(r);
    const std::string why = divergence(params_, e.loss, time_s, static_cast<int64_t>(r.updates));
    if (!why.empty()) {
      diverged_ = true;
      std::lock_guard lk(s_.mu);
      if (s_.stopped.empty()) s_.stopped = why;
      request_stop(s_);
    } else if (checkpoint) {
      write_checkpoint(recorder, time_s);
    }
    if (!paused_already) {
      s_.clock.resume();
      s_.gate.resume();
    }
    return r;
  }

  // Restores the pauser's own state from a checkpoint.
  void load(StateReader& r) {
    last_time_ = r.get<double>();
    last_idle_ = r.get<double>();
  }

  std::vector<float> params() const { return params_; }
  // True once an evaluation found non-finite parameters or test loss.
  bool diverged() const { return diverged_; }

 private:
  void write_checkpoint(Recorder* recorder, double time_s) {
    if (!job_.checkpoints) return;
    const Config& c = *job_.config;
    std::lock_guard lk(s_.mu);
    StateWriter server_bytes;
    s_.server->save(server_bytes);
    StateWriter w;
    w.tag(kThreadsTag);
    w.put<int32_t>(c.train.workers);
    w.put(time_s);
    w.put(last_time_);
    w.put(last_idle_);
    for (const WorkerState& ws : *s_.workers) {
      save_sampler(ws.sampler, w);
      w.put<uint8_t>(ws.local.has_value());
      if (ws.local) ws.local->save(w);
    }
    s_.delays->save(w);
    s_.idle.save(w);
    CheckpointInfo info;
    info.id = job_.identity;
    info.runtime = "threads";
    info.workers = c.train.workers;
    info.train_s = time_s;
    info.updates = static_cast<int64_t>(s_.server->version());
    info.rows = static_cast<int64_t>(recorder->rows().size());
    job_.checkpoints->write(info, {{"server", server_bytes.take()}, {"threads", w.take()}});
  }

  const Job& job_;
  Shared& s_;
  const Dataset& test_;
  std::vector<float> params_, grads_;
  std::unique_ptr<Model> model_;
  double last_time_ = 0;
  double last_idle_ = 0;
  bool diverged_ = false;
  const double budget_;
};

// Restores the run's state from a checkpoint: server, samplers, local
// momentum, delay streams. With another worker count the shards are split
// again (each worker's sampler starts a fresh order of its new shard) and
// the server forgets the workers that are gone, as if they had left.
// Returns the training seconds of the cut.
double restore(const Checkpoint& ck, const Config& c, Server& server,
               std::vector<WorkerState>& workers, DelayModel& delays, IdleMeter& idle,
               Pauser& pauser) {
  StateReader sr(ck.blob("server"), ck.path + "/server.bin");
  server.load(sr);
  sr.expect_end();
  StateReader r(ck.blob("threads"), ck.path + "/threads.bin");
  r.expect_tag(kThreadsTag, "threads runtime");
  const int saved = r.get<int32_t>();
  if (saved < 1 || saved > 4096) r.fail("corrupt (worker count)");
  const double t = r.get<double>();
  pauser.load(r);
  const bool same = saved == c.train.workers;
  for (int w = 0; w < saved; ++w) {
    if (same) {
      load_sampler(workers[static_cast<size_t>(w)].sampler, r);
    } else {
      (void)read_sampler(r);
    }
    if (r.get<uint8_t>()) {
      std::optional<LocalWorker>& local = workers[static_cast<size_t>(same ? w : 0)].local;
      if (!local) r.fail("corrupt (local-SGD state for a policy without it)");
      if (same) {
        local->load(r);
      } else {
        LocalWorker scratch = *local;  // momentum of a worker split away
        scratch.load(r);
      }
    }
  }
  delays.load(r);
  idle.load(r);
  r.expect_end();
  for (int w = c.train.workers; w < server.known_workers(); ++w) server.on_leave(w, t);
  for (int w = 0; w < c.train.workers; ++w) {
    if (!server.is_live(w)) server.on_join(w, t);
  }
  return t;
}

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
  const RowLayout layout = sparse_layout(job);  // rows = 0 unless model.sparse
  const std::span<float> server_params = server_span(layout, params);
  Server server(server_params, server_options(job), make_policy(c.policy, n, c.optim.lr),
                make_optimizer(server_optimizer(c), server_params.size()));
  const std::unique_ptr<RowTable> rows = attach_rows(job, layout, params, server);

  DelayModel delays(c.stragglers, n, c.train.seed);
  std::vector<WorkerState> workers;
  workers.reserve(static_cast<size_t>(n));
  for (int w = 0; w < n; ++w) {
    workers.push_back(WorkerState{make_sampler(job, w), std::nullopt});
    if (server.policy().local_steps() > 0)
      workers.back().local.emplace(make_local_worker(c, params.size()));
  }
  Shared s;
  s.server = &server;
  s.rows = rows.get();
  s.layout = layout;
  s.all_params = params;
  s.delays = &delays;
  s.workers = &workers;
  s.released.assign(static_cast<size_t>(n), 0);
  s.idle.resize(static_cast<size_t>(n));
  const Dataset test = head(*job.test, c.train.eval_samples);
  Pauser pauser(job, s, test);

  double start_s = 0;
  if (job.resume) {
    start_s = restore(*job.resume, c, server, workers, delays, s.idle, pauser);
    // Released workers of a resume with fewer workers hold no thread.
  } else {
    // The row at t = 0: the initial model.
    s.clock.start(0, /*paused=*/true);
    s.gate.pause();
    MetricsRow first = pauser.evaluate(recorder, false, /*paused_already=*/true);
    observer->on_row(first);
  }
  s.clock.start(start_s);  // training time starts after the first evaluation

  const int64_t epoch_target =
      c.train.epochs > 0
          ? static_cast<int64_t>(std::ceil(c.train.epochs * static_cast<double>(job.train->size())))
          : 0;
  if (epoch_target > 0 && server.samples() >= epoch_target) s.stop = true;  // resumed, done
  const double budget = c.train.budget > 0 ? c.train.budget : 1e300;
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
  s.gate.resume();
  double tick_time = start_s;
  int64_t tick_samples = server.samples();  // read before the workers start
  std::vector<char> starts_waiting(static_cast<size_t>(n), 0);
  for (int w = 0; w < n; ++w) {
    starts_waiting[static_cast<size_t>(w)] = server.is_waiting(w);
    // A wait the cut saw ending (released, not yet awake) ends here.
    if (!server.is_waiting(w)) s.idle.end(static_cast<size_t>(w), start_s);
  }
  for (int w = 0; w < n; ++w) {
    threads.emplace_back([&, w] {
      try {
        worker_loop(WorkerArgs{w, &job, &s, epoch_target, budget,
                               starts_waiting[static_cast<size_t>(w)] != 0});
      } catch (...) {
        std::lock_guard lk(s.mu);
        if (!s.error) s.error = std::current_exception();
        request_stop(s);
      }
    });
  }

  const double eval_every = c.train.eval_every;
  const double ckpt_every = job.checkpoints ? c.train.checkpoint_every : 0;
  auto next_after = [](double t, double every) { return (std::floor(t / every) + 1) * every; };
  double next_eval = next_after(start_s, eval_every);
  double next_ckpt = ckpt_every > 0 ? next_after(start_s, ckpt_every) : 1e300;
  double last_acc = recorder->rows().empty() ? 0 : recorder->rows().back().test_acc;
  const double tick = 0.5;
  for (;;) {
    double now = s.clock.seconds();
    const double wake = std::min({next_eval, next_ckpt, budget, now + tick});
    {
      std::unique_lock lk(s.mu);
      s.cv.wait_for(lk, std::chrono::duration<double>(std::max(0.0, wake - now)),
                    [&] { return s.stop; });
      now = s.clock.seconds();
      if (now >= budget) request_stop(s);
      if (s.stop) break;
    }
    if (now >= next_eval || now >= next_ckpt) {
      const bool ckpt = now >= next_ckpt;
      MetricsRow r = pauser.evaluate(recorder, ckpt);
      observer->on_row(r);
      last_acc = r.test_acc;
      while (next_eval <= r.time_s) next_eval += eval_every;
      while (ckpt && next_ckpt <= r.time_s) next_ckpt += ckpt_every;
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
  // Training ends here: no push is made after the stop, and the time the
  // workers take to notice is not training.
  s.clock.pause();
  const double train_s = std::min(s.clock.seconds(), budget);
  s.gate.close();
  for (std::thread& t : threads) t.join();
  threads.clear();
  if (s.error) std::rethrow_exception(s.error);

  RunResult result;
  if (pauser.diverged()) {  // its row is the last
    result.last = recorder->rows().back();
    result.params = params;
  } else {
    MetricsRow last = pauser.evaluate(recorder, job.checkpoints != nullptr && s.stopped.empty(),
                                      /*paused_already=*/true);
    observer->on_row(last);
    result.last = last;
    result.params = pauser.params();
  }
  result.stopped = s.stopped;
  result.train_s = result.last.time_s;
  result.wall_s = since(wall0);
  result.real_train_s = train_s - start_s;
  result.gradients = server.pushes();
  result.staleness_histogram = server.staleness_histogram();
  for (int w = 0; w < n; ++w) result.worker_pushes.push_back(server.clock(w));
  for (const WorkerState& ws : workers) result.sampler_cost += ws.sampler.cost;
  return result;
}

}  // namespace hsgd
