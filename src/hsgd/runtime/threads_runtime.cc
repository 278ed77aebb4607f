#include "hsgd/runtime/threads_runtime.h"

#include <fmt/format.h>

#include <atomic>
#include <cmath>
#include <condition_variable>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "hsgd/core/error.h"
#include "hsgd/core/rng.h"
#include "hsgd/runtime/clock.h"
#include "hsgd/runtime/compression.h"
#include "hsgd/runtime/delay.h"
#include "hsgd/runtime/gate.h"
#include "hsgd/runtime/gossip_checkpoint.h"
#include "hsgd/runtime/local_steps.h"
#include "hsgd/runtime/membership.h"
#include "hsgd/runtime/row.h"
#include "hsgd/runtime/run_control.h"
#include "hsgd/runtime/sparse_rows.h"
#include "hsgd/server/server.h"

namespace hsgd {
namespace {

// The threads blob: "THR2" carries each worker's pending push; "THR1"
// (earlier versions) has none and still resumes.
constexpr uint32_t kThreadsTag = 0x54485232;     // "THR2"
constexpr uint32_t kThreadsTagOld = 0x54485231;  // "THR1"

// A push a worker had computed but the server had not taken when the run
// stopped (at the budget, the epoch target or a stop). Its batch, its
// error-feedback residual and its local momentum are spent, so the final
// cut keeps it and the worker pushes it first after a resume: the cut is
// consistent (the samplers' samples equal the server's plus the pending
// ones; sent + residual = the gradients). Dense pushes only: a row-sparse
// push in flight at the stop is dropped (its rows were staged).
struct PendingPush {
  bool has = false;
  std::vector<float> grads;  // as the server aggregates them (decoded)
  uint64_t version = 0;
  int64_t samples = 0;
  double loss = 0;
  int64_t bytes = 0;  // on the wire ([compress])
  void save(StateWriter& w) const {
    w.put<uint8_t>(has);
    if (!has) return;
    w.put_vec(grads);
    w.put(version);
    w.put(samples);
    w.put(loss);
    w.put(bytes);
  }
  void load(StateReader& r, size_t np) {
    has = r.get<uint8_t>() != 0;
    if (!has) return;
    grads = r.get_vec<float>();
    if (grads.size() != np) r.fail("corrupt (a pending push of another size)");
    version = r.get<uint64_t>();
    samples = r.get<int64_t>();
    loss = r.get<double>();
    bytes = r.get<int64_t>();
  }
};

// What one worker carries from one step to the next: the part of its state
// a checkpoint saves. Touched only by its worker thread, except while the
// workers are paused at the gate (then by the driving thread).
struct WorkerState {
  ShardSampler sampler;
  std::optional<LocalWorker> local;  // local:H
  PendingPush pending;               // computed, not taken at the stop
};

struct Shared {
  std::mutex mu;               // guards everything below and the server
  std::condition_variable cv;  // the driving thread's (stop)
  // One per worker: its release or the stop wakes that worker alone, not
  // every waiter (sync releases all workers one by one each update).
  std::unique_ptr<std::condition_variable[]> wake;
  size_t num_wake = 0;
  Server* server = nullptr;
  // Pulls copy the parameters outside `mu` (README, "The threads runtime on
  // two cores"): a puller pins them (++pinned) under `mu` after its on_pull,
  // copies without the lock, and unpins under `mu`. Every server event that
  // may write the parameters (push, join, leave) first waits, under `mu`,
  // until none is pinned (wait_unpinned), so a pull still copies exactly the
  // parameters of the version on_pull returned. Readers holding `mu` (the
  // evaluator, checkpoints) need no pin. While a writer waits, pulls copy
  // under `mu` instead of pinning, so a stream of pulls (many workers)
  // cannot hold the writers off.
  int pinned = 0;
  int writers_waiting = 0;
  std::condition_variable unpinned;
  // Set under `mu` when the server releases worker w; atomic (as is `stop`)
  // so that a waiter may spin on it before it sleeps (wait_until_released).
  std::unique_ptr<std::atomic<uint8_t>[]> released;
  // Waiters spin before sleeping: only when every worker has a core.
  bool spin = false;
  IdleMeter idle;  // on clock's seconds
  std::atomic<bool> stop{false};
  RunStops* stops = nullptr;                // the run layer's stops; guarded by mu
  const TrainSchedule* schedule = nullptr;  // immutable budget and epoch target
  std::exception_ptr error;
  Gate gate;
  TrainClock clock;
  DelayModel* delays = nullptr;
  std::vector<WorkerState>* workers = nullptr;
  // [compress]: null when off. Its pull side and `counters` are guarded by mu.
  Compression* compress = nullptr;
  CompressCounters counters;
  Membership* membership = nullptr;  // issue 10; guarded by mu
  // Row-sparse (model.sparse): the table, the model's layout, and all the
  // server's parameters (the Server itself holds the dense prefix).
  RowTable* rows = nullptr;
  RowLayout layout;
  std::span<const float> all_params;
};

void request_stop(Shared& s) {
  s.stop = true;
  s.cv.notify_all();
  for (size_t w = 0; w < s.num_wake; ++w) s.wake[w].notify_all();
}

// Under `lk` (on s.mu): blocks until no pull is copying the parameters.
void wait_unpinned(Shared& s, std::unique_lock<std::mutex>& lk) {
  if (s.pinned == 0) return;
  ++s.writers_waiting;
  s.unpinned.wait(lk, [&] { return s.pinned == 0; });
  --s.writers_waiting;
}

// An injected gradient failure (faults.exception_rate).
struct InjectedFault : std::runtime_error {
  InjectedFault() : std::runtime_error("injected by faults.exception_rate") {}
};

// Membership (issue 10), under s.mu: worker `id` leaves or joins at `now`;
// the server's released workers are woken; below train.min_workers the run
// stops with the reason. Waits for pinned pulls first (releasing lk).
void change_membership(Shared& s, std::unique_lock<std::mutex>& lk, int id, bool join,
                       MembershipCause cause, const std::string& detail, double now) {
  wait_unpinned(s, lk);
  const Decision d = join ? s.server->on_join(id, now) : s.server->on_leave(id, now);
  for (int r : d.released) {
    if (r == id) continue;
    s.released[static_cast<size_t>(r)] = 1;
    s.wake[static_cast<size_t>(r)].notify_one();
  }
  s.released[static_cast<size_t>(id)] = 0;
  if (s.stops->check_membership(
          s.membership->record(MembershipEvent{now, id, join, cause, detail}, *s.server))) {
    request_stop(s);
  }
}

// How long a waiter spins before it sleeps on its condition variable. A
// sleep and a wake-up cost tens of microseconds here (a futex each side, a
// context switch), as much as a whole step of a cheap model: with a core per
// worker, a release that comes within the spin costs neither (sync's
// barrier on cheap steps, issue 12). Longer waits (stragglers, large K)
// sleep as before after this much.
constexpr auto kSpin = std::chrono::microseconds(50);

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Blocks worker `id` (outside the gate) until the server releases it, and
// counts the wait as idle time on the training clock. Returns false if the
// run stopped instead. With s.spin it first polls its flag for up to kSpin.
bool wait_until_released(Shared& s, int id) {
  const auto w = static_cast<size_t>(id);
  if (s.spin) {
    {
      std::lock_guard lk(s.mu);
      s.idle.begin(w, s.clock.seconds());
    }
    const auto until = SteadyClock::now() + kSpin;
    while (!s.released[w].load(std::memory_order_acquire) && !s.stop.load() &&
           SteadyClock::now() < until) {
      cpu_relax();
    }
  }
  std::unique_lock lk(s.mu);
  if (!s.spin) s.idle.begin(w, s.clock.seconds());
  s.wake[w].wait(lk, [&] { return s.released[w] || s.stop; });
  s.released[w] = 0;
  s.idle.end(w, s.clock.seconds());
  return !s.stop;
}

// Under s.mu, after the server took a push at training time `now`: wakes
// the workers it released and applies the run layer's stops (the epoch
// target, non-finite pushes). Returns whether the pusher waits.
bool pushed(Shared& s, const Decision& d, double now) {
  for (int r : d.released) {
    s.released[static_cast<size_t>(r)] = 1;
    s.wake[static_cast<size_t>(r)].notify_one();
  }
  if (s.schedule->epochs_done(s.server->samples())) request_stop(s);
  if (s.stops->check_pushes(*s.server, now)) request_stop(s);
  return d.caller_waits;
}

struct WorkerArgs {
  int id;
  const Job* job;
  Shared* shared;
  // Resumed while its push waited for an update (or its SSP pull waited):
  // read before any worker starts, since another's push may release it.
  bool starts_waiting = false;
  // Resumed while it was out (left, not yet rejoined): sits out first.
  bool starts_out = false;
};

// A worker that left waits (outside the gate) until the fault plan's rejoin
// time on the training clock, then joins again with a fresh shard and local
// state; its next step pulls the newest parameters. Returns false when the
// run stops first or no rejoin is due (the thread ends).
bool sit_out(Shared& s, int id, WorkerState& ws, const Config& c, int local_h, size_t np) {
  std::unique_lock lk(s.mu);
  for (;;) {
    if (s.stop) return false;
    const FaultDue due = s.membership->plan().next(id, false);
    if (!std::isfinite(due.time)) return false;
    const double now = s.clock.seconds();
    if (due.time <= now) {
      change_membership(s, lk, id, true, due.cause, "", now);
      s.membership->refresh(id, ws.sampler, c.train.batch, *s.server, true);
      if (local_h > 0) ws.local.emplace(make_local_worker(c, np));
      return true;
    }
    // The clock stands still during evaluations: wake at least every 50 ms.
    s.cv.wait_for(lk, std::chrono::duration<double>(std::min(0.05, due.time - now)));
  }
}

void worker_loop(const WorkerArgs& a) {
  const Config& c = *a.job->config;
  Shared& s = *a.shared;
  DelayModel& delays = *s.delays;
  WorkerState& ws = (*s.workers)[static_cast<size_t>(a.id)];
  std::unique_ptr<Model> model = a.job->make_model();
  const size_t np = a.job->initial_params.size();
  const ZeroedFloats params_buf(np), grads_buf(np);  // zero pages until touched (sparse_rows.h)
  const std::span<float> params = params_buf.span(), grads = grads_buf.span();
  model->bind(params, grads);
  std::optional<SparseWorker> sparse;  // model.sparse: row-sparse pull/push
  if (s.rows) sparse.emplace(*model, s.layout, params, grads);
  Batch batch;
  int local_h = 0;  // local:H: H local steps, then push the model delta
  Compression* const z = s.compress;
  std::string pull_bytes, push_bytes;  // [compress]: the messages as they travel
  std::vector<float> sent(z ? np : 0), scratch;
  // With pull compression: the copy the server records this worker holds.
  // Each pull message updates it, and the worker's parameters start each
  // step from it: local steps (local:H) move the parameters, never it.
  std::vector<float> held;
  {
    std::lock_guard lk(s.mu);
    local_h = s.server->policy().local_steps();
    if (z && z->pull_on()) {
      std::span<const float> h = z->held(a.id);
      held.assign(h.begin(), h.end());
      std::copy(h.begin(), h.end(), params.begin());
    }
  }
  if (a.starts_out && !sit_out(s, a.id, ws, c, local_h, np)) return;  // out at the cut
  if (a.starts_waiting && !wait_until_released(s, a.id)) return;
  GateScope inside(s.gate);  // exits on every path, exceptions included
  if (ws.pending.has) {      // resumed: the push the cut kept goes first
    if (!inside.enter()) return;
    bool wait = false;
    {
      std::unique_lock lk(s.mu);
      wait_unpinned(s, lk);
      if (s.stop) return;  // (still pending: a later cut keeps it)
      PendingPush p = std::move(ws.pending);
      ws.pending = PendingPush{};
      const double now = s.clock.seconds();
      if (z) s.counters.bytes_pushed += p.bytes;
      wait = pushed(s, s.server->on_push(a.id, p.version, p.grads, p.samples, p.loss, now), now);
    }
    inside.exit();
    if (wait && !wait_until_released(s, a.id)) return;
  }
  while (inside.enter()) {
    uint64_t version = 0;
    bool pull_waits = false;
    bool out = false;  // left by fault injection: sits out until its rejoin
    bool throws = false;
    {
      std::unique_lock lk(s.mu);
      if (s.stop) break;
      const double now = s.clock.seconds();
      const FaultDue due = s.membership->plan().next(a.id, true);
      if (due.time <= now) {
        change_membership(s, lk, a.id, false, due.cause, "", now);
        out = true;
      } else {
        s.membership->refresh(a.id, ws.sampler, c.train.batch * std::max(1, local_h), *s.server,
                              false);
      }
    }
    if (out) {
      inside.exit();
      if (!sit_out(s, a.id, ws, c, local_h, np)) break;
      continue;
    }
    if (sparse) sparse->prepare(ws.sampler, c.train.batch);  // its rows are pulled
    bool pinned = false;  // the plain pull: copied below, outside the lock
    std::span<const float> pinned_params;
    {
      std::lock_guard lk(s.mu);
      if (s.stop) break;
      const Decision d = s.server->on_pull(a.id);
      pull_waits = d.caller_waits;
      if (!pull_waits) {
        throws = s.membership->plan().gradient_throws(a.id);
        version = d.version;
        std::span<const float> p = s.server->params();
        if (sparse) {
          sparse->pull(a.id, *s.server, *s.rows);
        } else if (z && z->pull_on()) {  // the server encodes under its lock
          const auto c0 = SteadyClock::now();
          z->encode_pull(a.id, p, version, &pull_bytes);
          s.counters.bytes_pulled += static_cast<int64_t>(pull_bytes.size());
          s.counters.compress_s += since(c0);
        } else {
          if (s.writers_waiting > 0) {
            std::copy(p.begin(), p.end(), params.begin());  // do not hold the writer off
          } else {
            ++s.pinned;
            pinned = true;
            pinned_params = p;
          }
          if (z) s.counters.bytes_pulled += z->plain_bytes();
        }
      }
    }
    if (pinned) {
      // No event writes the parameters while pinned: they stay at `version`.
      std::copy(pinned_params.begin(), pinned_params.end(), params.begin());
      std::lock_guard lk(s.mu);
      if (--s.pinned == 0) s.unpinned.notify_all();
    }
    double worker_compress_s = 0;
    if (!pull_waits && z && z->pull_on()) {  // the worker decodes its pull
      const auto c0 = SteadyClock::now();
      z->decode_pull(pull_bytes, held, &scratch);
      std::copy(held.begin(), held.end(), params.begin());
      worker_compress_s += since(c0);
    }
    if (pull_waits) {
      // SSP: too far ahead. Wait outside the gate until released, then pull
      // again. (A worker waits either after its pull or after its push,
      // never both, so one `released` flag serves both waits.)
      inside.exit();
      if (!wait_until_released(s, a.id)) break;
      continue;
    }
    int64_t samples = 0;  // samples behind this push
    const auto t0 = SteadyClock::now();
    double loss = 0;
    std::string failure;  // the gradient threw: the worker leaves
    try {
      if (throws) throw InjectedFault();
      loss = sparse ? sparse->compute(&samples)
                    : compute_push(*model, params, grads, ws.sampler, c.train.batch,
                                   ws.local ? &*ws.local : nullptr, local_h, &batch, &samples);
    } catch (const InputError&) {
      throw;  // bad input ends the run
    } catch (const std::exception& e) {
      failure = e.what();
    }
    if (!failure.empty()) {
      {
        std::unique_lock lk(s.mu);
        if (s.stop) break;
        change_membership(s, lk, a.id, false,
                          throws ? MembershipCause::kException : MembershipCause::kError,
                          throws ? "" : failure, s.clock.seconds());
      }
      inside.exit();
      if (!sit_out(s, a.id, ws, c, local_h, np)) break;
      continue;
    }
    const double delay = delays.extra_seconds(a.id, since(t0));
    if (delay > 0) {
      std::unique_lock lk(s.mu);
      s.wake[static_cast<size_t>(a.id)].wait_for(lk, std::chrono::duration<double>(delay),
                                                 [&] { return s.stop.load(); });
    }
    std::span<const float> push = grads;
    if (z && z->push_on()) {
      // The worker encodes (error feedback); the server decodes the bytes.
      const auto c0 = SteadyClock::now();
      z->encode_push(a.id, grads, version, &push_bytes, sent);
      z->decode_push(push_bytes, sent);
      worker_compress_s += since(c0);
      push = sent;
    }
    bool wait = false;
    {
      std::unique_lock lk(s.mu);
      wait_unpinned(s, lk);  // the push may apply an update
      const double now = s.clock.seconds();
      if (s.stop || s.schedule->past_budget(now)) {
        // Finished after the stop or the budget: not training. Kept for
        // the final cut (PendingPush).
        request_stop(s);
        if (!sparse) {
          ws.pending = PendingPush{
              true,
              std::vector<float>(push.begin(), push.end()),
              version,
              samples,
              loss,
              z && z->push_on() ? static_cast<int64_t>(push_bytes.size()) : z ? z->plain_bytes() : 0};
        }
        break;
      }
      if (z) {
        s.counters.bytes_pushed +=
            z->push_on() ? static_cast<int64_t>(push_bytes.size()) : z->plain_bytes();
        s.counters.compress_s += worker_compress_s;
      }
      wait = pushed(s,
                    sparse ? s.server->on_push(a.id, version, sparse->dense_grads(), samples,
                                               sparse->stage(*s.rows, loss), now)
                           : s.server->on_push(a.id, version, push, samples, loss, now),
                    now);
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
  Pauser(const Job& job, Shared& s, const Dataset& test, RunStops& stops,
         const TrainSchedule& schedule)
      : job_(job),
        s_(s),
        test_(test),
        stops_(stops),
        schedule_(schedule),
        params_(job.initial_params.size()),
        grads_(job.initial_params.size()) {
    model_ = job.make_model();
    model_->bind(params_, grads_);
  }

  // Pauses the workers and the clock; returns the training time of the
  // pause, at most the budget (no push is taken at or after it, so a pause
  // that ends past it sees the state at the budget).
  double pause() {
    s_.gate.pause();
    s_.clock.pause();
    return schedule_.clamp(s_.clock.seconds());
  }
  void resume() {
    s_.clock.resume();
    s_.gate.resume();
  }

  // With the workers paused at training time `time_s`: one metrics row,
  // checked against the run layer's stops (a stop is requested if one
  // fires).
  MetricsRow evaluate(Recorder* recorder, double time_s) {
    double idle_total = 0;
    ServerStats st;
    NoiseSums noise;
    {
      std::lock_guard lk(s_.mu);
      std::span<const float> p = s_.all_params;
      std::copy(p.begin(), p.end(), params_.begin());
      st = s_.server->take_stats();
      noise = s_.server->take_noise();
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
      r = build_row(*s_.server, st, noise, e, time_s, idle, job_);
      if (s_.compress) {
        r.has_compress = true;
        r.bytes_pushed = s_.counters.bytes_pushed;
        r.bytes_pulled = s_.counters.bytes_pulled;
        r.compress_s = s_.counters.compress_s;
      }
    }
    recorder->write(r);
    std::lock_guard lk(s_.mu);
    if (stops_.check_row(r, params_, recorder->rows())) request_stop(s_);
    return r;
  }

  // A checkpoint of the state with the workers paused at training time
  // `time_s`: its parts are streamed to their files now, the checkpoint is
  // complete once write() commits it (empty without a checkpoint store).
  struct Cut {
    CheckpointInfo info;
    std::optional<PendingCheckpoint> pending;
  };
  Cut cut(const Recorder& recorder, double time_s) const {
    const Config& c = *job_.config;
    std::lock_guard lk(s_.mu);
    Cut cut;
    cut.info.id = job_.identity;
    cut.info.runtime = "threads";
    cut.info.workers = c.train.workers;
    cut.info.train_s = time_s;
    cut.info.updates = static_cast<int64_t>(s_.server->version());
    cut.info.rows = static_cast<int64_t>(recorder.rows().size());
    if (!job_.checkpoints) return cut;
    PendingCheckpoint& p = cut.pending.emplace(job_.checkpoints->begin());
    p.add("server", [&](StateWriter& w) { s_.server->save(w); });
    p.add("threads", [&](StateWriter& w) {
      w.tag(kThreadsTag);
      w.put<int32_t>(c.train.workers);
      w.put(time_s);
      w.put(last_time_);
      w.put(last_idle_);
      for (const WorkerState& ws : *s_.workers) {
        save_sampler(ws.sampler, w);
        w.put<uint8_t>(ws.local.has_value());
        if (ws.local) ws.local->save(w);
        ws.pending.save(w);
      }
      s_.delays->save(w);
      s_.idle.save(w);
      if (s_.compress) {  // [compress]: skippable, for a resume with another worker count
        StateWriter z;
        s_.compress->save(z);
        w.put(s_.counters);
        w.put_str(z.take());
      }
    });
    p.add("membership", [&](StateWriter& w) { s_.membership->save(w); });
    p.add(kRunBlob, save_run_state(stops_, schedule_));
    return cut;
  }
  void write(Cut& cut) const {
    if (cut.pending) cut.pending->commit(cut.info);
  }

  // Restores the pauser's own state from a checkpoint.
  void load(StateReader& r) {
    last_time_ = r.get<double>();
    last_idle_ = r.get<double>();
  }

  std::vector<float> params() const { return params_; }

 private:
  const Job& job_;
  Shared& s_;
  const Dataset& test_;
  RunStops& stops_;
  const TrainSchedule& schedule_;
  std::vector<float> params_, grads_;
  std::unique_ptr<Model> model_;
  double last_time_ = 0;
  double last_idle_ = 0;
};

// Restores the run's state from a checkpoint: server, samplers, local
// momentum, delay streams. With another worker count the shards are split
// again (each worker's sampler starts a fresh order of its new shard) and
// the server forgets the workers that are gone, as if they had left, and
// every worker starts live; with the same count the membership (who is
// out, the fault plan, the shards) goes on (*membership_restored = true).
// Returns the training seconds of the cut.
double restore(const Checkpoint& ck, const Config& c, Server& server,
               std::vector<WorkerState>& workers, DelayModel& delays, IdleMeter& idle,
               Pauser& pauser, Shared& s, bool* membership_restored) {
  refuse_gossip_checkpoint(ck, c.policy_name);
  ck.read("server", [&](StateReader& sr) { server.load(sr); });
  double t = 0;
  bool members = false;
  ck.read("threads", [&](StateReader& r) {
    const uint32_t tag = r.get<uint32_t>();
    if (tag != kThreadsTag && tag != kThreadsTagOld) {
      r.fail("corrupt (threads runtime section missing)");
    }
    const int saved = r.get<int32_t>();
    if (saved < 1 || saved > 4096) r.fail("corrupt (worker count)");
    t = r.get<double>();
    pauser.load(r);
    const bool same = saved == c.train.workers;
    // Membership (issue 10): with the same workers, who is out, the fault
    // plan and the shards go on; before the samplers (their shards).
    members = same && ck.has("membership");
    if (members) {
      ck.read("membership", [&](StateReader& mr) { s.membership->load(mr); });
      for (int w = 0; w < saved; ++w)
        workers[static_cast<size_t>(w)].sampler = s.membership->sampler_for(w);
    }
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
      if (tag == kThreadsTag) {
        // With another worker count the shards start afresh, and so does what
        // was in flight: its pending push is dropped.
        PendingPush p;
        p.load(r, server.params().size());
        if (same) workers[static_cast<size_t>(w)].pending = std::move(p);
      }
    }
    delays.load(r);
    idle.load(r);
    if (s.compress) {
      // With another worker count the residuals and held copies start afresh
      // (each worker then holds the initial parameters the server records).
      s.counters = r.get<CompressCounters>();
      const std::string z = r.get_str();
      if (same) {
        StateReader zr(z, ck.path + "/threads.bin (compression)");
        s.compress->load(zr);
        zr.expect_end();
      }
    }
  });
  if (members) {
    *membership_restored = true;
    return t;
  }
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
  check_job(job);
  Observer quiet;
  if (!observer) observer = &quiet;
  const auto wall0 = SteadyClock::now();

  std::vector<float> params = job.initial_params;
  const RowLayout layout = sparse_layout(job);  // rows = 0 unless model.sparse
  const std::span<float> server_params = server_span(layout, params);
  Server server(server_params, server_options(job), server_policy(c, n),
                make_optimizer(server_optimizer(c), server_params.size()));
  const std::unique_ptr<RowTable> rows = attach_rows(job, layout, params, server);

  DelayModel delays(c.stragglers, n, c.train.seed);
  std::vector<WorkerState> workers;
  workers.reserve(static_cast<size_t>(n));
  for (int w = 0; w < n; ++w) {
    workers.push_back(WorkerState{make_sampler(job, w), std::nullopt, {}});
    if (server.policy().local_steps() > 0)
      workers.back().local.emplace(make_local_worker(c, params.size()));
  }
  Membership membership(job, n);
  Shared s;
  s.membership = &membership;
  s.server = &server;
  s.rows = rows.get();
  s.layout = layout;
  s.all_params = params;
  s.delays = &delays;
  s.workers = &workers;
  s.released = std::make_unique<std::atomic<uint8_t>[]>(static_cast<size_t>(n));
  for (int w = 0; w < n; ++w) s.released[static_cast<size_t>(w)] = 0;
  s.spin = n <= static_cast<int>(std::thread::hardware_concurrency());
  s.wake = std::make_unique<std::condition_variable[]>(static_cast<size_t>(n));
  s.num_wake = static_cast<size_t>(n);
  s.idle.resize(static_cast<size_t>(n));
  std::unique_ptr<Compression> compression;
  if (c.compress.on()) {
    compression = make_compression(c, job.make_model()->param_shapes(), job.initial_params);
    s.compress = compression.get();
  }
  const Dataset test = head(*job.test, c.train.eval_samples);
  TrainSchedule schedule(c, job.train->size(), job.checkpoints != nullptr);
  RunStops stops(c);
  s.stops = &stops;
  s.schedule = &schedule;
  Pauser pauser(job, s, test, stops, schedule);

  double start_s = 0;
  if (job.resume) {
    bool restored = false;
    start_s = restore(*job.resume, c, server, workers, delays, s.idle, pauser, s, &restored);
    load_run_state(*job.resume, stops, schedule);
    // With another worker count every worker is live again (README).
    if (!restored) {
      membership.plan().restart_at(start_s);
      stops.membership_restarted();
    }
    // Released workers of a resume with fewer workers hold no thread.
    open_outputs(job);
  } else {
    open_outputs(job);
    // The row at t = 0: the initial model.
    s.clock.start(0, /*paused=*/true);
    s.gate.pause();
    observer->on_row(pauser.evaluate(recorder, 0.0));
  }
  // A fresh run whose initial model already fails the stops, or a resumed
  // run that reached its budget or epochs or whose cut was taken at a stop,
  // ends at once (at the cut's time: no training).
  const bool ended_at_start =
      schedule.past_budget(start_s) || schedule.epochs_done(server.samples()) || stops.stopped();
  if (ended_at_start) s.stop = true;
  bool stopped_at_row = !job.resume && stops.stopped();  // a row's divergence: that row is the last
  s.clock.start(start_s);  // training time starts after the first evaluation
  const double budget = schedule.budget();
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
  std::vector<char> starts_waiting(static_cast<size_t>(n), 0),
      starts_out(static_cast<size_t>(n), 0);
  for (int w = 0; w < n; ++w) {
    starts_waiting[static_cast<size_t>(w)] = server.is_waiting(w);
    starts_out[static_cast<size_t>(w)] = !server.is_live(w);
    // A wait the cut saw ending (released, not yet awake) ends here.
    if (!server.is_waiting(w)) s.idle.end(static_cast<size_t>(w), start_s);
  }
  for (int w = 0; w < n; ++w) {
    threads.emplace_back([&, w] {
      try {
        worker_loop(WorkerArgs{w, &job, &s, starts_waiting[static_cast<size_t>(w)] != 0,
                               starts_out[static_cast<size_t>(w)] != 0});
      } catch (...) {
        std::lock_guard lk(s.mu);
        if (!s.error) s.error = std::current_exception();
        request_stop(s);
      }
    });
  }

  double last_acc = recorder->rows().empty() ? 0 : recorder->rows().back().test_acc;
  const double tick = 0.5;
  for (;;) {
    double now = s.clock.seconds();
    const double wake =
        std::min({schedule.next_eval(), schedule.next_checkpoint(), budget, now + tick});
    {
      std::unique_lock lk(s.mu);
      s.cv.wait_for(lk, std::chrono::duration<double>(std::max(0.0, wake - now)),
                    [&] { return s.stop.load(); });
      now = s.clock.seconds();
      if (schedule.past_budget(now)) request_stop(s);
      if (s.stop) break;
    }
    if (schedule.eval_due(now) || schedule.checkpoint_due(now)) {
      // An evaluation due at a checkpoint's time comes first: the
      // checkpoint holds its row. A checkpoint alone writes no row.
      const double t = pauser.pause();
      if (s.stop) break;  // stopped before the pause: the closing row follows
      if (schedule.eval_due(t)) {
        const MetricsRow r = pauser.evaluate(recorder, t);
        observer->on_row(r);
        last_acc = r.test_acc;
        schedule.eval_done(t);
        {  // a front end's stop made at this row (Config::stop)
          std::lock_guard lk(s.mu);
          if (stops.check_request(/*at_evaluation=*/true)) request_stop(s);
        }
        // With the workers paused only the row's checks can stop the run.
        stopped_at_row = stops.stopped();
      }
      if (!stops.stopped() && schedule.checkpoint_due(t)) {
        schedule.checkpoint_done(t);
        Pauser::Cut cut = pauser.cut(*recorder, t);
        pauser.write(cut);
      }
      if (stops.stopped()) break;  // the workers stay paused: training ended at t
      pauser.resume();
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
  const double train_s = ended_at_start ? start_s : schedule.clamp(s.clock.seconds());
  s.gate.close();
  for (std::thread& t : threads) t.join();
  threads.clear();
  if (s.error) std::rethrow_exception(s.error);

  RunResult result;
  if (stopped_at_row) {
    result.last = recorder->rows().back();
    result.params = params;
  } else {
    // The final checkpoint is the state at the end of training, before the
    // closing row (a longer run resumed from it has no row at this time);
    // it is written only if the closing row finds no divergence.
    const bool final_cut = job.checkpoints != nullptr && stops.final_checkpoint_allowed();
    std::optional<Pauser::Cut> cut;
    if (final_cut) cut = pauser.cut(*recorder, train_s);
    MetricsRow last = pauser.evaluate(recorder, train_s);
    observer->on_row(last);
    if (cut && stops.final_checkpoint_allowed()) pauser.write(*cut);
    result.last = last;
    result.params = pauser.params();
  }
  result.stopped = stops.reason();
  result.train_s = result.last.time_s;
  result.wall_s = since(wall0);
  result.real_train_s = train_s - start_s;
  result.gradients = server.pushes();
  result.staleness_histogram = server.staleness_histogram();
  for (int w = 0; w < n; ++w) result.worker_pushes.push_back(server.clock(w));
  for (const WorkerState& ws : workers) result.sampler_cost += ws.sampler.cost;
  result.compress_on = s.compress != nullptr;
  result.compress = s.counters;
  if (rows) result.sparse = sparse_result(layout, *rows, static_cast<int64_t>(params.size()));
  result.membership = membership.log();
  return result;
}

}  // namespace hsgd
