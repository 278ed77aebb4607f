#include <fmt/format.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <map>
#include <optional>

#include "hsgd/mpi/compressed.h"
#include "hsgd/mpi/fair.h"
#include "hsgd/mpi/roles.h"
#include "hsgd/mpi/shard_server.h"
#include "hsgd/runtime/clock.h"
#include "hsgd/runtime/gossip_checkpoint.h"
#include "hsgd/runtime/membership.h"
#include "hsgd/runtime/row.h"
#include "hsgd/runtime/run_control.h"
#include "hsgd/runtime/sparse_rows.h"

namespace hsgd::mpi {
namespace {

constexpr uint32_t kMpiTag = 0x4D504931;  // "MPI1"

// Blob "mpi": rank 0's own part of a checkpoint.
struct PrimaryState {
  int workers = 0;  // worker ranks that wrote it
  double t = 0;     // the cut's training time
  double last_time = 0, last_idle = 0;
  IdleMeter idle;
  CompressCounters tally;
};

// Decodes blob "mpi" for the launch `l`. Throws InputError naming the file.
PrimaryState decode_primary_state(const Checkpoint& ck, const Layout& l, bool compress) {
  const std::string file = ck.path + "/mpi.bin";
  StateReader m(ck.blob("mpi"), file);
  m.expect_tag(kMpiTag, "mpi runtime");
  const int servers = m.get<int32_t>();
  PrimaryState st;
  st.workers = m.get<int32_t>();
  if (servers != l.servers) {
    throw InputError(fmt::format("{}: written by {} server ranks, this launch has {}", file,
                                 servers, l.servers));
  }
  if (st.workers < 1) m.fail("corrupt (worker count)");
  st.t = m.get<double>();
  st.last_time = m.get<double>();
  st.last_idle = m.get<double>();
  if (!std::isfinite(st.t) || st.t < 0) m.fail("corrupt (the cut's time)");
  st.idle.resize(static_cast<size_t>(l.workers));
  st.idle.load(m);
  if (compress) st.tally = m.get<CompressCounters>();
  m.expect_end();
  return st;
}

// Rank 0: server shard 0, the order of events, evaluation and the metrics.
class Primary {
 public:
  Primary(const Job& job, const Layout& l, const std::vector<float>& initial, Recorder* recorder,
          Observer* observer)
      : job_(job),
        c_(*job.config),
        l_(l),
        shard_(job, l, 0, initial),
        recorder_(recorder),
        observer_(observer),
        test_(head(*job.test, c_.train.eval_samples)),
        eval_buf_(l.num_params),
        eval_grad_buf_(l.num_params),
        eval_params_(eval_buf_.span()),
        eval_grads_(eval_grad_buf_.span()) {
    const auto nw = static_cast<size_t>(l.workers);
    requests_.resize(nw);
    replies_.resize(nw);
    req_recv_.assign(nw, MPI_REQUEST_NULL);
    reply_send_.assign(nw, MPI_REQUEST_NULL);
    state_.assign(nw, kComputing);
    idle_.resize(nw);
    at_gate_.assign(nw, 0);
    skip_request_.assign(nw, 0);
    for (int w = 0; w < l.workers; ++w) {
      const auto i = static_cast<size_t>(w);
      check(MPI_Recv_init(&requests_[i], sizeof(Request), MPI_BYTE, l.worker_rank(w), kTagRequest,
                          l_.comm, &req_recv_[i]),
            "MPI_Recv_init");
      check(MPI_Send_init(&replies_[i], sizeof(Reply), MPI_BYTE, l.worker_rank(w), kTagReply,
                          l_.comm, &reply_send_[i]),
            "MPI_Send_init");
    }
    gather_recv_.assign(static_cast<size_t>(l.servers), MPI_REQUEST_NULL);
    for (int s = 1; s < l.servers; ++s) {
      const Shard& sh = l.shards[static_cast<size_t>(s)];
      check(MPI_Recv_init(eval_params_.data() + sh.begin, as_count(sh.size), MPI_FLOAT, s,
                          kTagGather, l_.comm, &gather_recv_[static_cast<size_t>(s)]),
            "MPI_Recv_init");
    }
    model_ = job.make_model();
    model_->bind(eval_params_, eval_grads_);
  }
  ~Primary() {
    for (MPI_Request& r : req_recv_) cancel_and_free(&r);
    for (MPI_Request& r : gather_recv_) cancel_and_free(&r);
    for (MPI_Request& r : reply_send_) free_request(&r);
    for (Outgoing& o : outgoing_) {
      for (MPI_Request& r : o.reqs) free_request(&r);
    }
  }

  RunResult run() {
    const auto wall0 = SteadyClock::now();
    double start_s = 0;
    double last_acc = 0;
    if (job_.resume) {
      start_s = restore(*job_.resume);
      if (!recorder_->rows().empty()) last_acc = recorder_->rows().back().test_acc;
    } else {
      clock_.start(0, /*paused=*/true);
      last_acc = evaluate(0).test_acc;
    }
    // A resumed run whose evaluation or checkpoint falls at the cut's time
    // (the final cut is taken before the closing row, so a run resumed
    // from it with a longer budget owes the row at that time): the clock
    // stands still until the first gate cut, which every worker reaches at
    // once (each re-sends the request it was blocked in), so the row is at
    // the cut's time exactly, as on threads and sim, and not at the time
    // the workers' requests took to arrive.
    const bool due_at_start = job_.resume && !stops_.stopped() &&
                              (schedule_.eval_due(start_s) || schedule_.checkpoint_due(start_s));
    // Training time starts after the first evaluation.
    clock_.start(start_s, /*paused=*/due_at_start);
    if (due_at_start) pausing_ = true;
    check(MPI_Startall(as_count(req_recv_.size()), req_recv_.data()), "MPI_Startall");

    double next_tick = start_s + 0.5;
    double tick_time = start_s;
    int64_t tick_samples = server().samples();
    if (stops_.stopped()) {
      // Stopped at the first row (its row is the closing row), or a resumed
      // checkpoint whose stop is set (run_control.h): training ends at
      // once, with the closing row at the cut (the final cut is taken
      // before the closing row, as on threads and sim).
      if (job_.resume) evaluate(start_s);
      closed_ = true;
      begin_stop(start_s);
    } else if (schedule_.epochs_done(server().samples())) {
      request_end();
    }
    std::vector<int> done_idx(req_recv_.size());
    auto last_progress = SteadyClock::now();
    Backoff backoff;
    while (!all_done()) {
      pump_events();
      const double now = clock_.seconds();
      if (!ending_ && schedule_.past_budget(now)) request_end();
      // Evaluation, checkpoints and the end of training pause the workers
      // as the threads runtime's gate does: a worker's next request is held
      // until every worker is at the gate (holding a request or waiting on
      // its policy); the clock runs until then, stands still while
      // evaluating and writing, and the held requests are served in the
      // order they came (after the end: answered stop).
      if (!ending_ && (schedule_.eval_due(now) || schedule_.checkpoint_due(now))) pausing_ = true;
      if (pausing_ && (stopping_ || all_at_gate())) {
        if (!stopping_) {
          clock_.pause();
          at_gate(&last_acc);
          clock_.resume();
        }
        pausing_ = false;
        std::vector<int> held;
        held.swap(held_);
        for (int w : held) {
          at_gate_[static_cast<size_t>(w)] = 0;
          handle(w);
        }
        last_progress = SteadyClock::now();
        continue;
      }
      if (!stopping_ && now >= next_tick) {
        Status st;
        st.time_s = now;
        st.updates = static_cast<int64_t>(server().version());
        st.samples = server().samples();
        st.k = server().threshold(now);
        st.epochs = static_cast<double>(st.samples) / static_cast<double>(job_.train->size());
        st.test_acc = last_acc;
        st.samples_per_s = now > tick_time
                               ? static_cast<double>(st.samples - tick_samples) / (now - tick_time)
                               : 0;
        tick_time = now;
        tick_samples = st.samples;
        observer_->on_status(st);
        next_tick = now + 0.5;
      }
      int count = 0;
      check(MPI_Testsome(as_count(req_recv_.size()), req_recv_.data(), &count, done_idx.data(),
                         MPI_STATUSES_IGNORE),
            "MPI_Testsome");
      if (count != MPI_UNDEFINED && count > 0) {
        // Requests that came together: each worker is served first in turn.
        first_ = serve_order(std::span<int>(done_idx.data(), static_cast<size_t>(count)),
                             l_.workers, first_);
        for (int i = 0; i < count; ++i) {
          const int w = done_idx[static_cast<size_t>(i)];
          if (pausing_) {
            held_.push_back(w);
            at_gate_[static_cast<size_t>(w)] = 1;
          } else {
            handle(w);
          }
        }
        last_progress = SteadyClock::now();
        backoff.reset();
        continue;
      }
      if (since(last_progress) > l_.timeout) {
        std::string who;
        for (int w = 0; w < l_.workers; ++w) {
          if (state_[static_cast<size_t>(w)] == kComputing) {
            who += (who.empty() ? "" : ", ") + worker_name(w, l_.servers);
          }
        }
        if (who.empty()) {
          throw MpiError(
              fmt::format("server shard 0: every worker has waited {:g} s for a release (policy {} "
                          "deadlocked)",
                          l_.timeout, server().policy().name()));
        }
        throw MpiError(fmt::format(
            "timed out after {:g} s on server shard 0 waiting for a request from {} (raise "
            "mpi.timeout if this is slow, not stuck)",
            l_.timeout, who));
      }
      // Nothing came: the pending update's next chunk (shard_server.h).
      if (shard_.advance()) {
        backoff.reset();
      } else {
        backoff.idle();
      }
    }
    clock_.pause();
    if (!closed_) {  // every worker left before a cut could end training
      evaluate(schedule_.clamp(clock_.seconds()));
      closed_ = true;
    }
    if (!gathered_) gather();  // resumed at a stop: the parameters for model.bin
    // The closing row: written at the final cut, or the stopped run's last.
    const MetricsRow last = recorder_->rows().empty() ? MetricsRow{} : recorder_->rows().back();
    const double train_s = last.time_s;
    std::string rows_file;
    if (shard_.sparse()) {  // the final rows, chunk by chunk, for model.bin
      emit(Event{.type = kEventModel});
      rows_file = c_.train.out + "/model-rows.partial";
      shard_.sparse()->write_chunks(rows_file);
    }
    emit(Event{.type = Event::kStop});
    drain_events();
    shard_.settle();
    for (MPI_Request& r : reply_send_) {
      wait_one(&r, l_.timeout, [&] { return std::string("sending the stop replies"); });
    }

    RunResult result;
    if (shard_.sparse()) {  // the dense part; the rows are in rows_file
      result.params.assign(eval_params_.begin(), eval_params_.begin() + l_.rows.dense);
      result.rows_file = rows_file;
    } else {
      result.params.assign(eval_params_.begin(), eval_params_.end());
    }
    result.last = last;
    result.train_s = train_s;
    result.real_train_s = train_s;
    result.wall_s = since(wall0);
    result.gradients = server().pushes();
    result.staleness_histogram = server().staleness_histogram();
    for (int w = 0; w < l_.workers; ++w) result.worker_pushes.push_back(server().clock(w));
    result.membership = membership_.log();
    result.stopped = stops_.reason();
    if (shard_.sparse()) result.sparse = shard_.sparse()->gathered();
    result.compress_on = c_.compress.on();
    result.compress = tally_.counters;
    result.compress.compress_s += server_compress_s_;
    result.server_compress_s = server_compress_s_;
    return result;
  }

 private:
  enum State { kComputing, kWaiting, kDone };
  struct Outgoing {
    Event ev;
    std::vector<MPI_Request> reqs;
  };

  Server& server() { return shard_.server(); }
  // Every worker holds a request at rank 0 or waits on its policy.
  bool all_at_gate() const {
    for (size_t w = 0; w < state_.size(); ++w) {
      if (state_[w] == kComputing && !at_gate_[w]) return false;
    }
    return true;
  }
  bool all_done() const {
    return std::all_of(state_.begin(), state_.end(), [](State s) { return s == kDone; });
  }

  // Sends an event to every other server rank (from a buffer kept until the
  // sends complete).
  void emit(const Event& e) {
    if (l_.servers == 1) return;
    Outgoing& o = outgoing_.emplace_back();
    o.ev = e;
    o.reqs.assign(static_cast<size_t>(l_.servers - 1), MPI_REQUEST_NULL);
    for (int s = 1; s < l_.servers; ++s) {
      check(MPI_Isend(&o.ev, sizeof(Event), MPI_BYTE, s, kTagEvent, l_.comm,
                      &o.reqs[static_cast<size_t>(s - 1)]),
            "MPI_Isend");
    }
  }
  // Forgets the events whose sends completed.
  void pump_events() {
    while (!outgoing_.empty()) {
      int done = 0;
      std::vector<MPI_Request>& r = outgoing_.front().reqs;
      check(MPI_Testall(as_count(r.size()), r.data(), &done, MPI_STATUSES_IGNORE), "MPI_Testall");
      if (!done) return;
      outgoing_.pop_front();
    }
  }
  void drain_events() {
    while (!outgoing_.empty()) {
      wait_all(outgoing_.front().reqs, l_.timeout,
               [] { return std::string("on server shard 0 sending events to the other shards"); });
      outgoing_.pop_front();
    }
  }

  void reply(int w, Reply::Type type, uint64_t version) {
    const auto i = static_cast<size_t>(w);
    wait_one(&reply_send_[i], l_.timeout, [&] {
      return fmt::format("on server shard 0 answering {}", worker_name(w, l_.servers));
    });
    replies_[i].type = type;
    replies_[i].version = version;
    check(MPI_Start(&reply_send_[i]), "MPI_Start");
  }

  // Serves worker w's request (once: a held request is served when the gate
  // opens). [compress]: the bytes and seconds it reports count here, its
  // push's bytes only when the server takes the push (Server::on_push), so
  // bytes_pushed counts what was applied (or screened), never a push
  // dropped after the end of training, and a checkpoint's counters are
  // those of the pushes in it.
  void handle(int w) {
    const auto i = static_cast<size_t>(w);
    const Request r = requests_[i];
    if (r.type == Request::kPush && !stopping_) {
      const double now = clock_.seconds();
      if (!ending_ && schedule_.past_budget(now)) request_end();
      if (pausing_) {  // it comes after the budget: held for the final cut, then dropped
        hold(w);
        return;
      }
    }
    if (shard_.sparse() && (r.type == Request::kPush || r.type == Request::kPull)) {
      // model.sparse: every rank takes the row message that came with it.
      shard_.sparse()->take(w);
      emit(Event{.type = kEventRows, .worker = w});
    }
    const bool takes_push = r.type == Request::kPush && !stopping_ && !skip_request_[i];
    if (c_.compress.on()) tally_.add(r, takes_push);
    if (skip_request_[i]) {
      skip_request_[i] = 0;
      if (state_[i] != kDone) check(MPI_Start(&req_recv_[i]), "MPI_Start");
      return;
    }
    if (r.type == Request::kPush) {
      const double now = clock_.seconds();
      if (stopping_) {  // after the end of training: received and dropped
        shard_.discard(w);
        emit(Event{.type = Event::kDiscard, .worker = w});
        stop_worker(w);
        return;
      }
      Decision d = shard_.push(w, r.version, r.batch, r.loss, now, r.finite != 0);
      emit(Event{.type = Event::kPush,
                 .worker = w,
                 .push_version = r.version,
                 .batch = r.batch,
                 .loss = r.loss,
                 .seconds = now,
                 .version = d.version,
                 .finite = r.finite});
      if (d.caller_waits) {
        state_[i] = kWaiting;
        idle_.begin(i, now);
      } else {
        pull(w);
      }
      release(d.released);
      if (stops_.check_pushes(server(), now) || schedule_.epochs_done(server().samples())) {
        request_end();
      }
    } else if (r.type == Request::kPull) {
      if (stopping_) {
        stop_worker(w);
        return;
      }
      pull(w);
    } else if (r.type == Request::kLeave) {
      leave(w);
      return;
    } else {
      throw MpiError(fmt::format("server shard 0 received an unknown request type {} from {}",
                                 r.type, worker_name(w, l_.servers)));
    }
    if (state_[i] != kDone) check(MPI_Start(&req_recv_[i]), "MPI_Start");
  }

  void pull(int w) {
    const auto i = static_cast<size_t>(w);
    const Decision d = server().on_pull(w);
    emit(Event{
        .type = Event::kPull, .worker = w, .version = d.version, .waits = d.caller_waits ? 1 : 0});
    if (d.caller_waits) {
      state_[i] = kWaiting;
      idle_.begin(i, schedule_.clamp(clock_.seconds()));
    } else {
      state_[i] = kComputing;
      reply(w, Reply::kGo, d.version);
      shard_.send_params(w);
    }
    release(d.released);
  }

  void release(const std::vector<int>& released) {
    for (int r : released) {
      const auto i = static_cast<size_t>(r);
      if (state_[i] != kWaiting) continue;
      idle_.end(i, schedule_.clamp(clock_.seconds()));
      if (stopping_) {
        stop_worker(r);
      } else {
        pull(r);
      }
    }
  }

  void stop_worker(int w) {
    reply(w, Reply::kStop, 0);
    state_[static_cast<size_t>(w)] = kDone;
  }

  // Worker w leaves (SIGTERM / SIGINT on its rank): every shard runs
  // on_leave in rank 0's order, the workers it releases go on, and w is
  // answered stop. Below train.min_workers the run ends (exit 3).
  void leave(int w) {
    const double now = clock_.seconds();
    const Decision d = shard_.leave(w, now);
    emit(Event{.type = Event::kLeave, .worker = w, .seconds = now, .version = d.version});
    left_[static_cast<size_t>(w)] = 1;
    const std::string why =
        membership_.record(MembershipEvent{now, w, false, MembershipCause::kSignal, ""}, server());
    stop_worker(w);
    release(d.released);
    if (stops_.check_membership(why)) request_end();
  }

  // The end of training (the budget, the epoch target or a stop): at the
  // next gate cut (at_gate), which writes the closing row and the final
  // checkpoint. Pushes that come after it are dropped.
  void request_end() {
    if (ending_) return;
    ending_ = true;
    pausing_ = true;
  }

  // Holds worker w's request until the gate opens.
  void hold(int w) {
    held_.push_back(w);
    at_gate_[static_cast<size_t>(w)] = 1;
  }

  // At a gate cut (clock paused, every worker blocked on rank 0): the
  // evaluation and checkpoint due (an evaluation first, so a checkpoint
  // holds its row), or the end of training: the closing row at the
  // training time clamped to the budget, the final checkpoint when the
  // stops allow one (run_control.h), then stop.
  void at_gate(double* last_acc) {
    const double now = clock_.seconds();
    const double t = schedule_.clamp(now);
    if (!ending_ && schedule_.past_budget(now)) request_end();
    if (!ending_ && schedule_.eval_due(t)) {
      const MetricsRow r = evaluate(t);
      schedule_.eval_done(t);
      *last_acc = r.test_acc;
      if (stops_.stopped()) {  // diverged: its row is the closing row
        closed_ = true;
        begin_stop(t);
        return;
      }
    }
    if (ending_) {
      // The final cut is the state at the end of training, before the
      // closing row (as on threads and sim: a longer run resumed from it has
      // no row here), written only if that row finds no divergence.
      std::optional<Cut> cut;
      if (job_.checkpoints && stops_.final_checkpoint_allowed()) cut = gather_checkpoint(t);
      evaluate(t);
      closed_ = true;
      schedule_.eval_done(t);
      schedule_.checkpoint_done(t);
      if (cut && stops_.final_checkpoint_allowed()) job_.checkpoints->write(cut->info, cut->blobs);
      begin_stop(t);
      return;
    }
    if (schedule_.checkpoint_due(t)) {
      schedule_.checkpoint_done(t);
      write_checkpoint(t);
    }
  }

  // A checkpoint at the gate (clock paused, every worker blocked on rank 0):
  // every shard's server state, every worker's state, and rank 0's own.
  // Rank 0 gathers them all and writes the checkpoint, so no shared
  // filesystem is needed.
  struct Cut {
    CheckpointInfo info;
    std::map<std::string, std::string> blobs;
  };
  void write_checkpoint(double t) {
    if (!job_.checkpoints) return;
    const Cut cut = gather_checkpoint(t);
    job_.checkpoints->write(cut.info, cut.blobs);
  }
  // The same, gathered but not written.
  Cut gather_checkpoint(double t) {
    std::map<std::string, std::string> blobs;
    emit(Event{.type = Event::kCheckpoint});
    blobs["server-0"] = shard_.save();
    for (int s = 1; s < l_.servers; ++s) {
      blobs["server-" + std::to_string(s)] = recv_bytes(l_.comm, s, l_.timeout, [&] {
        return fmt::format("on rank 0 waiting for shard {}'s checkpoint state", s);
      });
    }
    for (int w = 0; w < l_.workers; ++w) {
      if (left_[static_cast<size_t>(w)]) {  // gone: a resume starts it afresh
        blobs["worker-" + std::to_string(w)] = "";
        continue;
      }
      // A push held at the gate is not in the cut (taken after it, or
      // dropped after the final one): the worker saves its state from
      // before computing it (issue 25, defect 8).
      const bool held_push = at_gate_[static_cast<size_t>(w)] &&
                             requests_[static_cast<size_t>(w)].type == Request::kPush;
      reply(w, Reply::kSave, held_push ? Reply::kSaveBeforePush : 0);
      blobs["worker-" + std::to_string(w)] =
          recv_bytes(l_.comm, l_.worker_rank(w), l_.timeout, [&] {
            return fmt::format("on rank 0 waiting for the checkpoint state of {}",
                               worker_name(w, l_.servers));
          });
    }
    StateWriter m;
    m.tag(kMpiTag);
    m.put<int32_t>(l_.servers);
    m.put<int32_t>(l_.workers);
    m.put(t);
    m.put(last_time_);
    m.put(last_idle_);
    idle_.save(m);
    if (c_.compress.on()) m.put(tally_.counters);
    blobs["mpi"] = m.take();
    blobs[kRunBlob] = save_run_state(stops_, schedule_);
    CheckpointInfo info;
    info.id = job_.identity;
    info.runtime = "mpi";
    info.workers = l_.workers;
    info.servers = l_.servers;
    info.train_s = t;
    info.updates = static_cast<int64_t>(server().version());
    info.rows = static_cast<int64_t>(recorder_->rows().size());
    return Cut{info, std::move(blobs)};
  }

  // Restores rank 0's state, sends every other rank its part, and marks the
  // workers that were waiting at the cut. Returns the cut's training time.
  double restore(const Checkpoint& ck) {
    PrimaryState st = decode_primary_state(ck, l_, c_.compress.on());
    const int workers = st.workers;
    const double t = st.t;
    last_time_ = st.last_time;
    last_idle_ = st.last_idle;
    idle_ = std::move(st.idle);
    tally_.counters = st.tally;
    load_run_state(ck, stops_, schedule_);
    shard_.load(ck.blob("server-0"), ck.path + "/server-0.bin", t);
    for (int s = 1; s < l_.servers; ++s) {
      StateWriter msg;
      msg.put(t);
      msg.put_str(ck.blob("server-" + std::to_string(s)));
      send_bytes(l_.comm, s, msg.take(), l_.timeout,
                 [&] { return fmt::format("on rank 0 sending shard {} its checkpoint state", s); });
    }
    const std::string none;
    for (int w = 0; w < l_.workers; ++w) {
      const std::string& bytes =
          workers == l_.workers ? ck.blob("worker-" + std::to_string(w)) : none;
      send_bytes(l_.comm, l_.worker_rank(w), bytes, l_.timeout, [&] {
        return fmt::format("on rank 0 sending {} its checkpoint state", worker_name(w, l_.servers));
      });
    }
    for (int w = 0; w < l_.workers; ++w) {
      const auto i = static_cast<size_t>(w);
      if (server().is_waiting(w)) {
        // Its push (or SSP pull) waits: its first request, a pull, is
        // dropped; the release answers it. Its wait goes on from where the
        // checkpoint's idle meter has it start, before the cut (restarting
        // it at the cut would drop the part before the cut from the idle
        // seconds, which the row at the cut counted).
        state_[i] = kWaiting;
        skip_request_[i] = 1;
      } else {
        idle_.end(i, t);
      }
    }
    return t;
  }

  // Training ends at training time t: the waiting workers are answered
  // stop now, the others at their next request.
  void begin_stop(double t) {
    ending_ = true;
    stopping_ = true;
    for (int w = 0; w < l_.workers; ++w) {
      if (state_[static_cast<size_t>(w)] == kWaiting) {
        idle_.end(static_cast<size_t>(w), t);
        stop_worker(w);
      }
    }
  }

  // Gathers the shards at this point of the event order, evaluates them as
  // the row at training time `time_s`, writes it and checks the stops on it
  // (RunStops::check_row); the caller pauses the clock
  // (evaluation is not training time). model.sparse: rank 0 gathers only
  // the rows the evaluation reads, into calloc'd memory.
  MetricsRow evaluate(double time_s) {
    gather();
    const ServerStats st = server().take_stats();
    const EvalResult e = model_->evaluate(test_);
    const double idle_total = idle_.total(time_s);
    const double idle = idle_fraction(idle_total - last_idle_, time_s - last_time_, l_.workers);
    last_time_ = time_s;
    last_idle_ = idle_total;
    MetricsRow row = build_row(server(), st, gathered_noise_, e, time_s, idle, job_);
    if (c_.compress.on()) {
      tally_.fill(&row);
      row.compress_s += server_compress_s_;
    }
    emit_row(row);  // first: a front end's stop made at this row counts (Config::stop)
    stops_.check_row(row, eval_params_, recorder_->rows());
    return row;
  }

  // Gathers the shards' parameters into eval_params_ at this point of the
  // event order (model.sparse: the rows evaluation reads), and the server
  // ranks' compression seconds.
  void gather() {
    emit(Event{.type = Event::kEval});
    if (l_.servers > 1) {
      check(MPI_Startall(as_count(l_.servers - 1), gather_recv_.data() + 1), "MPI_Startall");
    }
    std::span<const float> own = shard_.params();
    std::copy(own.begin(), own.end(), eval_params_.begin());
    wait_all(gather_recv_, l_.timeout, [] {
      return std::string("on server shard 0 gathering the other shards' parameters for evaluation");
    });
    if (shard_.sparse()) shard_.sparse()->gather(eval_params_);  // and the rows it reads
    gathered_noise_ = shard_.gather_noise();                     // in the order the shards send
    if (c_.compress.on()) server_compress_s_ = shard_.gather_compress_seconds();
    gathered_ = true;
  }

  void emit_row(const MetricsRow& r) {
    recorder_->write(r);
    observer_->on_row(r);
  }

  const Job& job_;
  const Config& c_;
  const Layout& l_;
  ShardServer shard_;
  Recorder* recorder_;
  Observer* observer_;
  Dataset test_;
  // calloc'd (a row-sparse model's rows: only the pages of gathered rows).
  ZeroedFloats eval_buf_, eval_grad_buf_;
  std::span<float> eval_params_, eval_grads_;
  int first_ = 0;  // the worker served first among requests that come together
  std::unique_ptr<Model> model_;
  std::vector<Request> requests_;
  std::vector<Reply> replies_;
  std::vector<MPI_Request> req_recv_, reply_send_, gather_recv_;
  std::vector<State> state_;
  IdleMeter idle_;  // on clock_'s seconds, clamped to the budget (no wait counts past it)
  std::vector<char> at_gate_;  // its request is held by a pause
  std::vector<int> held_;      // held requests, in arrival order
  bool pausing_ = false;
  bool ending_ = false;             // the next gate cut ends training (final checkpoint)
  std::vector<char> skip_request_;  // resumed waiting: its first request is dropped
  std::deque<Outgoing> outgoing_;
  TrainClock clock_;
  // The run layer (run_control.h): the schedule and the stops.
  TrainSchedule schedule_{c_, job_.train->size(), job_.checkpoints != nullptr};
  RunStops stops_{c_};
  bool stopping_ = false;  // training has ended: every request is answered stop
  bool closed_ = false;    // the closing row is written
  bool gathered_ = false;  // eval_params_ holds the shards' parameters
  double last_idle_ = 0, last_time_ = 0;
  // Membership (issue 10): workers that left on a signal, and the log.
  std::vector<char> left_ = std::vector<char>(static_cast<size_t>(l_.workers), 0);
  Membership membership_{job_, l_.workers};
  CompressTally tally_;           // [compress]: the workers' reported bytes and seconds
  double server_compress_s_ = 0;  // [compress]: the server ranks' seconds, at the last evaluation
  NoiseSums gathered_noise_;      // train.noise_scale: the last gather()'s, over every shard
};

}  // namespace

void check_primary_state(const Job& job, const Layout& l, const Checkpoint& ck) {
  refuse_gossip_checkpoint(ck, job.config->policy_name);
  decode_primary_state(ck, l, job.config->compress.on());
  RunStops stops(*job.config);
  TrainSchedule schedule(*job.config, job.train->size(), job.config->train.checkpoint_every > 0);
  load_run_state(ck, stops, schedule);
}

int checkpoint_workers(const Job& job, const Layout& l, const Checkpoint& ck) {
  return decode_primary_state(ck, l, job.config->compress.on()).workers;
}

RunResult run_primary(const Job& job, const Layout& l, const std::vector<float>& initial,
                      Recorder* recorder, Observer* observer) {
  HSGD_ASSERT(!job.checkpoints || job.config->train.checkpoint_every > 0,
              "mpi checkpoints need train.checkpoint_every > 0 (the workers keep their state)");
  Primary primary(job, l, initial, recorder, observer);
  return primary.run();
}

}  // namespace hsgd::mpi
