#include "hsgd/runtime/sim_runtime.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <map>
#include <optional>
#include <thread>

#include "hsgd/core/error.h"
#include "hsgd/core/stats.h"
#include "hsgd/runtime/clock.h"
#include "hsgd/runtime/compression.h"
#include "hsgd/runtime/delay.h"
#include "hsgd/runtime/gossip_checkpoint.h"
#include "hsgd/runtime/local_steps.h"
#include "hsgd/runtime/membership.h"
#include "hsgd/runtime/row.h"
#include "hsgd/runtime/run_control.h"
#include "hsgd/runtime/sim_compute.h"
#include "hsgd/runtime/sim_events.h"
#include "hsgd/runtime/sim_fabric.h"
#include "hsgd/runtime/sparse_rows.h"
#include "hsgd/server/server.h"

namespace hsgd {
namespace {

using sim::Event;
using sim::EventQueue;
using sim::EventType;

// One simulated worker's state between its pull and its push (its push
// itself is computed by SimCompute).
struct SimWorker {
  uint64_t version = 0;
  double loss = 0;
  int64_t batch = 0;
  double wait_since = -1;  // virtual time it started waiting, or -1
  double idle = 0;         // cumulative waiting seconds
  ShardSampler sampler;
  RowPush rows;  // model.sparse: the rows part of the push in flight
  // [compress]: the wire bytes of the push in flight, counted in
  // bytes_pushed when the server takes it (README, "What the figures mean").
  int64_t push_bytes = 0;
};

std::string full(double v) { return fmt::format("{:.17g}", v); }

// "SIM3" ends with the simulated cluster (sim_fabric.h: network, shards,
// cores) and each worker's decision in service; "SIM2" carries each
// worker's in-flight push bytes; "SIM1" (earlier versions, which counted
// them when computed) has none. All three resume.
constexpr uint32_t kSimTag = 0x53494D33;     // "SIM3"
constexpr uint32_t kSimTag2 = 0x53494D32;    // "SIM2"
constexpr uint32_t kSimTagOld = 0x53494D31;  // "SIM1"

// The simulated cluster (network, shards, cores) is used unless the run is
// the model before issue 27 exactly: independent messages, one server,
// unlimited cores. That path is kept as it was, so earlier results
// reproduce byte for byte.
bool staged(const Config& c) {
  return c.sim.network != "independent" || c.train.servers > 1 || c.sim.cores > 0;
}

// One simulated run. Its members are the whole state of the simulation
// between two events: exactly what a checkpoint saves (save()/load()).
class SimRun final : public PushKernel, public SimFabric::Host {
 public:
  SimRun(const Job& job, Recorder* recorder, Observer* observer)
      : job_(job),
        c_(*job.config),
        n_(c_.train.workers),
        recorder_(recorder),
        observer_(observer),
        np_(job.initial_params.size()),
        model_(job.make_model()),
        work_params_(np_),
        work_grads_(np_),
        params_(job.initial_params),
        layout_(sparse_layout(job)),
        server_(server_span(layout_, params_), server_options(job), server_policy(c_, n_),
                make_optimizer(server_optimizer(c_), server_span(layout_, params_).size())),
        rows_(attach_rows(job, layout_, params_, server_)),
        delays_(c_.stragglers, n_, c_.train.seed),
        local_h_(server_.policy().local_steps()),
        test_(head(*job.test, c_.train.eval_samples)),
        compress_(make_compression(c_, model_->param_shapes(), job.initial_params)),
        membership_(job, n_),
        schedule_(c_, job.train->size(), job.checkpoints != nullptr),
        stops_(c_) {
    model_->bind(work_params_, work_grads_);
    compress_cost_ = std::max(0.0, c_.compress.sim_ns_per_param) * 1e-9 * static_cast<double>(np_);
    workers_.reserve(static_cast<size_t>(n_));
    for (int w = 0; w < n_; ++w) {
      workers_.push_back(SimWorker{0, 0, 0, -1, 0, make_sampler(job, w), {}, 0});
    }
    for (int w = 0; local_h_ > 0 && w < n_; ++w) locals_.push_back(make_local_worker(c_, np_));
    compute_ = std::make_unique<SimCompute>(sim_threads(c_), n_, np_, job.make_model, this);
    const double bytes = 4.0 * static_cast<double>(np_);
    transfer_ = c_.sim.latency + bytes / c_.sim.bandwidth;
    server_cost_ = c_.sim.server_ns_per_param * 1e-9 * static_cast<double>(np_);
    if (rows_) sparse_.emplace(*model_, layout_, work_params_, work_grads_);
    if (staged(c_)) {
      SimFabric::Options o;
      o.workers = n_;
      o.shards = split_shards(np_, c_.train.servers);
      o.latency = c_.sim.latency;
      o.bandwidth = c_.sim.bandwidth;
      o.server_bandwidth = c_.sim.server_bandwidth > 0 ? c_.sim.server_bandwidth : c_.sim.bandwidth;
      o.shared = c_.sim.network == "shared";
      o.cores = c_.sim.cores;
      o.server_s_per_param = c_.sim.server_ns_per_param * 1e-9;
      fabric_ = std::make_unique<SimFabric>(std::move(o), this);
      last_carried_ = fabric_->network().carried(0);
      decisions_.resize(static_cast<size_t>(n_));
      orphaned_.assign(static_cast<size_t>(n_), 0);
    }
  }

  RunResult run() {
    const auto wall0 = SteadyClock::now();
    if (job_.resume) {
      load(*job_.resume);
      open_outputs(job_);
    } else {
      open_outputs(job_);
      for (int w = 0; w < n_; ++w) events_.push(c_.sim.latency, EventType::kPullArrive, w);
      for (int w = 0; w < n_; ++w) schedule_fault(w);
      evaluate(0.0);
    }
    const double budget = schedule_.budget();
    double end_time = budget;
    compute_->set_horizon(budget);  // pushes due after it are never needed
    auto last_status = SteadyClock::now();
    uint64_t processed = 0;
    // A fresh run whose initial model fails the stops: that row is the last.
    bool stopped_at_row = !job_.resume && stops_.stopped();
    // A resumed run that already reached its epochs, or whose cut was taken
    // at a stop, ends at once.
    const bool done_already = schedule_.epochs_done(server_.samples()) || stops_.stopped();
    while (!done_already && !stops_.stopped()) {
      if (events_.empty()) {
        throw std::runtime_error(
            fmt::format("simulation deadlocked at t = {} s: every worker is waiting (policy {})",
                        last_row_time_, server_.policy().name()));
      }
      const double t = events_.top().time;
      // Evaluations, then checkpoints, due before this event (a checkpoint at
      // an evaluation's time includes its row).
      run_due(
          schedule_, t, stops_, [&](double at) { evaluate(at); },
          [&](double at) { write(cut(at)); });
      if (stops_.stopped()) {
        end_time = last_row_time_;
        stopped_at_row = true;
        break;
      }
      if (t >= budget) break;
      const Event ev = events_.pop();
      now_ = ev.time;
      handle(ev);
      if (stops_.check_pushes(server_, ev.time)) {
        end_time = ev.time;
        break;
      }
      if (schedule_.epochs_done(server_.samples())) {
        end_time = ev.time;
        break;
      }
      if ((++processed & 1023) == 0 && since(last_status) > 0.5) {
        last_status = SteadyClock::now();
        status(ev.time);
      }
    }
    if (done_already) end_time = now_;
    // The final checkpoint is the state at the end of training, before the
    // closing row (which a longer run may not have: resuming drops it); it
    // is written only if the closing row finds no divergence.
    std::optional<Cut> final_cut;
    if (job_.checkpoints && !stopped_at_row && stops_.final_checkpoint_allowed()) {
      final_cut = cut(end_time);
    }
    compute_->stop();  // pushes not yet computed are dropped
    RunResult result;
    result.last = stopped_at_row ? recorder_->rows().back() : evaluate(end_time);
    if (final_cut && stops_.final_checkpoint_allowed()) write(std::move(*final_cut));
    result.stopped = stops_.reason();
    result.params = params_;
    result.train_s = end_time;
    result.gradients = server_.pushes();
    result.staleness_histogram = server_.staleness_histogram();
    for (int w = 0; w < n_; ++w) result.worker_pushes.push_back(server_.clock(w));
    result.wall_s = since(wall0);
    result.real_train_s = result.wall_s - eval_real_;
    for (const SimWorker& sw : workers_) result.sampler_cost += sw.sampler.cost;
    result.compress_on = compress_ != nullptr;
    result.compress = counters_;
    result.membership = membership_.log();
    if (rows_) result.sparse = sparse_result(layout_, *rows_, static_cast<int64_t>(params_.size()));
    if (fabric_) result.network = fabric_->report(end_time, c_.sim.network);
    return result;
  }

 private:
  // sim.threads, 0 = every core; one for TorchScript models, whose forward
  // may draw from torch's process-wide generator (dropout): the order of
  // draws must not depend on the threads.
  static int sim_threads(const Config& c) {
    if (is_torchscript(c.model.name)) return 1;
    if (c.sim.threads > 0) return c.sim.threads;
    return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  }

  // PushKernel: worker w's next push, on a SimCompute thread (the worker's
  // sampler and local state are only touched there until the push is taken).
  double compute(int w, Model& model, std::span<float> params, std::span<float> grads,
                 Batch* scratch, int64_t* samples) override {
    // local:H: H local steps (H x the compute time in virtual time).
    return compute_push(model, params, grads, workers_[static_cast<size_t>(w)].sampler,
                        c_.train.batch, local_h_ > 0 ? &locals_[static_cast<size_t>(w)] : nullptr,
                        local_h_, scratch, samples);
  }
  // Only local steps move the parameters they start from.
  bool writes_params() const override { return local_h_ > 0; }

  double idle_at(double t) const {
    double total = 0;
    for (const SimWorker& sw : workers_) {
      total += sw.idle + (sw.wait_since >= 0 ? t - sw.wait_since : 0.0);
    }
    return total;
  }

  MetricsRow evaluate(double t) {
    const auto e0 = SteadyClock::now();
    std::copy(params_.begin(), params_.end(), work_params_.begin());
    const EvalResult e = model_->evaluate(test_);
    const double idle_total = idle_at(t);
    const double idle = idle_fraction(idle_total - last_idle_, t - last_row_time_, n_);
    double net_util = 0;
    if (fabric_) {  // the busiest interface over the interval
      Network::Carried now = fabric_->network().carried(t);
      net_util = fabric_->network().busiest_util(last_carried_, now, t - last_row_time_);
      last_carried_ = std::move(now);
    }
    last_row_time_ = t;
    last_idle_ = idle_total;
    MetricsRow r = build_row(server_, server_.take_stats(), server_.take_noise(), e, t, idle, job_);
    if (fabric_ && fabric_->network().shared()) {
      r.has_net = true;
      r.net_util = net_util;
    }
    if (compress_) {
      r.has_compress = true;
      r.bytes_pushed = counters_.bytes_pushed;
      r.bytes_pulled = counters_.bytes_pulled;
      r.compress_s = counters_.compress_s;
    }
    recorder_->write(r);
    observer_->on_row(r);
    eval_real_ += since(e0);
    // (A stop below train.min_workers keeps its reason through the last
    // row: the first stop wins.)
    stops_.check_row(r, params_, recorder_->rows());
    return r;
  }

  void start_service(double now) {
    const int w = server_queue_.front();
    server_queue_.pop_front();
    double cost = take_push(w, now, &in_service_decision_);
    in_service_ = w;
    server_busy_ = true;
    cost *= in_service_decision_.applied ? 2.0 : 1.0;
    events_.push(now + cost, EventType::kServerDone, w);
  }

  // The server takes worker w's push at `now`: its decision in *d; returns
  // the service cost of a push (an update costs as much again).
  double take_push(int w, double now, Decision* d) {
    SimWorker& sw = workers_[static_cast<size_t>(w)];
    const PushResult push = compute_->take(w);
    sw.loss = push.loss;
    sw.batch = push.samples;
    if (compress_) counters_.bytes_pushed += sw.push_bytes;  // taken: counted
    sw.push_bytes = 0;
    double cost = server_cost_;
    if (rows_) {  // model.sparse: the dense part and the push's rows
      const double loss = rows_->stage(sw.rows) ? sw.loss : std::nan("");
      *d = server_.on_push(w, sw.version, push.grads.first(static_cast<size_t>(layout_.dense)),
                           sw.batch, loss, now);
      cost = sparse_cost(sw);
    } else {
      *d = server_.on_push(w, sw.version, push.grads, sw.batch, sw.loss, now);
    }
    compute_->finish(w);
    return cost;
  }
  double sparse_cost(const SimWorker& sw) const {
    return c_.sim.server_ns_per_param * 1e-9 *
           static_cast<double>(layout_.dense + static_cast<int64_t>(sw.rows.values.size()));
  }

  // SimFabric::Host: the simulated cluster's events go in the one queue.
  void schedule(double t, FabricEvent e, int id) override {
    events_.push(
        t, static_cast<EventType>(static_cast<int>(EventType::kNetwork) + static_cast<int>(e)), id);
  }
  bool start_push(int w, double t) override {
    take_push(w, t, &decisions_[static_cast<size_t>(w)]);
    return decisions_[static_cast<size_t>(w)].applied;
  }
  void push_served(int w, double t) override {
    bool orphaned = orphaned_[static_cast<size_t>(w)] != 0;
    finish_push(w, decisions_[static_cast<size_t>(w)], &orphaned, t);
    orphaned_[static_cast<size_t>(w)] = orphaned;
  }

  // Worker w's push has been served at t under decision d: released
  // workers pull again, and so does w unless it waits (or left meanwhile).
  void finish_push(int w, const Decision& d, bool* orphaned, double t) {
    SimWorker& sw = workers_[static_cast<size_t>(w)];
    for (int r : d.released) {
      SimWorker& rw = workers_[static_cast<size_t>(r)];
      // Left (or left and rejoined) since this push's service began.
      if (rw.wait_since < 0 && membership_.changed()) continue;
      HSGD_ASSERT(rw.wait_since >= 0, "released a worker that was not waiting");
      rw.idle += t - rw.wait_since;
      rw.wait_since = -1;
      events_.push(t + c_.sim.latency, EventType::kPullArrive, r);
    }
    if (*orphaned) {  // the pusher left while its push was served
      *orphaned = false;
    } else if (d.caller_waits) {
      sw.wait_since = t;
    } else {
      events_.push(t + c_.sim.latency, EventType::kPullArrive, w);
    }
  }

  void handle(const Event& ev) {
    const int w = ev.worker;
    SimWorker& sw = workers_[static_cast<size_t>(w)];
    switch (ev.type) {
      case EventType::kPullArrive: {
        const Decision d = server_.on_pull(w);
        if (d.caller_waits) {  // SSP: too far ahead; pulls again when released
          sw.wait_since = ev.time;
          break;
        }
        if (membership_.plan().gradient_throws(w)) {  // faults.exception_rate
          leave(w, ev.time, MembershipCause::kException);
          break;
        }
        compute_->settle(w);  // (nothing outstanding at a pull: its last push was finished)
        membership_.refresh(w, sw.sampler, c_.train.batch * std::max(1, local_h_), server_, false);
        std::span<const float> pulled = server_.params();
        uint64_t key = d.version;  // requests of one version share a parameter snapshot
        double pull_t = transfer_, push_t = transfer_;
        // What travels (staged: the simulated cluster's messages carry it).
        const auto dense_bytes = static_cast<int64_t>(4 * np_);
        int64_t pull_bytes = dense_bytes, push_bytes = dense_bytes;
        double z_cost = 0;  // compression seconds of this step
        if (sparse_) {
          // model.sparse: the dense part and the batch's rows, both ways;
          // computed now, on this thread (the rows are pulled for the batch).
          sparse_->prepare(sw.sampler, c_.train.batch);
          sparse_->pull(w, server_, *rows_);
          int64_t samples = 0;
          const double loss = sparse_->compute(&samples);
          sparse_->take_rows(&sw.rows);
          compute_->install(w, work_grads_, loss, samples);
          pull_t = c_.sim.latency +
                   static_cast<double>(sparse_->traffic().pull_bytes) / c_.sim.bandwidth;
          push_t = c_.sim.latency +
                   static_cast<double>(sparse_->traffic().push_bytes) / c_.sim.bandwidth;
          pull_bytes = sparse_->traffic().pull_bytes;
          push_bytes = sparse_->traffic().push_bytes;
        } else if (compress_ && compress_->pull_on()) {
          pull_t = compressed_pull(w, pulled, d.version);  // the worker's copy, in work_params_
          pull_bytes = static_cast<int64_t>(wire_.size());
          z_cost += z_cost_;
          pulled = work_params_;
          key = kOwnCopy + own_copies_++;  // one worker's own copy: never shared
        } else if (compress_) {
          counters_.bytes_pulled += compress_->plain_bytes();
        }
        sw.version = d.version;
        // local:H: H x the compute time, one delay draw.
        const double compute =
            std::max(1, local_h_) * c_.sim.compute_time * delays_.slowdown(w) + delays_.draw(w);
        // The part on a core (sim.cores): the gradient; a straggler's
        // slow-down and delay are spent asleep, as on threads and mpi.
        const double core = std::max(1, local_h_) * c_.sim.compute_time;
        if (sparse_) {
          // (computed above, with the rows)
        } else if (compress_ && compress_->push_on()) {
          // The compressed push's size, hence its time on the wire, is known
          // only once the gradient is: it is computed now, on this thread,
          // and what the server will decode waits in the engine as the
          // worker's outstanding push.
          compute_->request(w, pulled, key, ev.time);
          const PushResult g = compute_->take(w);
          std::copy(g.grads.begin(), g.grads.end(), work_grads_.begin());
          const double loss = g.loss;
          const int64_t samples = g.samples;
          compute_->finish(w);
          sent_.resize(np_);
          push_t = compressed_push(w, d.version, sent_, &sw.push_bytes);
          push_bytes = sw.push_bytes;
          z_cost += z_cost_;
          compute_->install(w, sent_, loss, samples);
        } else {
          if (compress_) sw.push_bytes = compress_->plain_bytes();
          compute_->request(w, pulled, key, ev.time + pull_t + compute + push_t);
        }
        if (fabric_) {
          fabric_->pull_served(ev.time, w, fabric_->split_bytes(pull_bytes, SimFabric::kReplyBytes),
                               compute + z_cost, core + z_cost,
                               fabric_->split_bytes(push_bytes, SimFabric::kRequestBytes));
          if (sparse_) fabric_->set_push_cost(w, sparse_cost(sw));
        } else {
          events_.push(ev.time + pull_t + compute + push_t, EventType::kPushArrive, w);
        }
        break;
      }
      case EventType::kPushArrive:
        server_queue_.push_back(w);
        if (!server_busy_) start_service(ev.time);
        break;
      case EventType::kServerDone: {
        HSGD_ASSERT(in_service_ == w, "server finished a push it was not serving");
        server_busy_ = false;
        finish_push(w, in_service_decision_, &in_service_orphaned_, ev.time);
        if (!server_queue_.empty()) start_service(ev.time);
        break;
      }
      case EventType::kNetwork:
        fabric_->on_event(ev.time, FabricEvent::kNetwork, w);
        break;
      case EventType::kComputeDone:
        fabric_->on_event(ev.time, FabricEvent::kComputeDone, w);
        break;
      case EventType::kShardDone:
        fabric_->on_event(ev.time, FabricEvent::kShardDone, w);
        break;
      case EventType::kFault: {
        const FaultDue due = membership_.plan().next(w, server_.is_live(w));
        if (due.time != ev.time) break;  // superseded by a later membership change
        if (due.join) {
          join(w, ev.time, due.cause);
        } else {
          leave(w, ev.time, due.cause);
        }
        break;
      }
    }
  }

  // [compress]: the worker's parameters after a compressed pull (what the
  // server records it holds), and the message's time on the network plus
  // the configured compression cost.
  double compressed_pull(int w, std::span<const float> params, uint64_t version) {
    const bool z = compress_->encode_pull(w, params, version, &wire_);
    std::span<const float> h = compress_->held(w);
    std::copy(h.begin(), h.end(), work_params_.begin());
    counters_.bytes_pulled += static_cast<int64_t>(wire_.size());
    const double cost = z ? compress_cost_ : 0.0;
    counters_.compress_s += cost;
    z_cost_ = cost;
    return c_.sim.latency + static_cast<double>(wire_.size()) / c_.sim.bandwidth + cost;
  }
  // The worker's compressed push (error feedback): `sent` receives what the
  // server decodes and aggregates.
  // *bytes receives its size on the wire (counted when the server takes it).
  double compressed_push(int w, uint64_t version, std::span<float> sent, int64_t* bytes) {
    const bool z = compress_->encode_push(w, work_grads_, version, &wire_, sent);
    *bytes = static_cast<int64_t>(wire_.size());
    const double cost = z ? compress_cost_ : 0.0;
    counters_.compress_s += cost;
    z_cost_ = cost;
    return c_.sim.latency + static_cast<double>(wire_.size()) / c_.sim.bandwidth + cost;
  }

  // Membership (issue 10): small hooks around the loop above.
  void schedule_fault(int w) {
    const FaultDue due = membership_.plan().next(w, server_.is_live(w));
    if (std::isfinite(due.time)) events_.push(std::max(due.time, now_), EventType::kFault, w);
  }

  // Releases worker r, whose wait the server ended at time t.
  void release(int r, double t) {
    SimWorker& rw = workers_[static_cast<size_t>(r)];
    if (rw.wait_since < 0) return;
    rw.idle += t - rw.wait_since;
    rw.wait_since = -1;
    events_.push(t + c_.sim.latency, EventType::kPullArrive, r);
  }

  void after_membership(int w, const Decision& d, const MembershipEvent& e) {
    for (int r : d.released) {
      if (r != w) release(r, e.time);
    }
    stops_.check_membership(membership_.record(e, server_));
    schedule_fault(w);
  }

  // Worker w leaves at time t: what it was computing is lost; a push the
  // server is serving stays (DESIGN.md: a leaver's buffered push is kept).
  void leave(int w, double t, MembershipCause cause) {
    if (!server_.is_live(w)) return;
    SimWorker& sw = workers_[static_cast<size_t>(w)];
    if (sw.wait_since >= 0) {
      sw.idle += t - sw.wait_since;
      sw.wait_since = -1;
    }
    events_.drop_worker(w);
    std::erase(server_queue_, w);
    // Its gradient in the making is lost, but its sampler moves on as if it
    // had been computed, whatever sim.threads is.
    if (compute_->outstanding(w)) compute_->finish(w);
    if (server_busy_ && in_service_ == w) in_service_orphaned_ = true;
    if (fabric_ && fabric_->drop_worker(t, w)) orphaned_[static_cast<size_t>(w)] = 1;
    const Decision d = server_.on_leave(w, t);
    after_membership(w, d, MembershipEvent{t, w, false, cause, ""});
  }

  // Worker w (re)joins at time t with a fresh shard and local state; its
  // first event is a pull of the newest parameters.
  void join(int w, double t, MembershipCause cause) {
    if (server_.is_live(w)) return;
    const Decision d = server_.on_join(w, t);
    SimWorker& sw = workers_[static_cast<size_t>(w)];
    membership_.refresh(w, sw.sampler, c_.train.batch, server_, true);
    if (local_h_ > 0) locals_[static_cast<size_t>(w)] = make_local_worker(c_, np_);
    events_.push(t + c_.sim.latency, EventType::kPullArrive, w);
    after_membership(w, d, MembershipEvent{t, w, true, cause, ""});
  }

  void status(double t) {
    Status st;
    st.time_s = t;
    st.updates = static_cast<int64_t>(server_.version());
    st.samples = server_.samples();
    st.k = server_.threshold(t);
    st.epochs = static_cast<double>(st.samples) / static_cast<double>(job_.train->size());
    st.train_loss = std::nan("");
    observer_->on_status(st);
  }

  // A checkpoint whose parts are on disk, complete once write() commits it
  // (empty without a checkpoint store).
  struct Cut {
    CheckpointInfo info;
    std::optional<PendingCheckpoint> pending;
  };
  void write(Cut cut) {
    if (!cut.pending) return;
    const auto e0 = SteadyClock::now();
    cut.pending->commit(cut.info);
    eval_real_ += since(e0);  // like evaluation, not simulated work
  }

  // The cut between events at virtual time t: every part streamed to its
  // file now (the simulator's own part is taken even without a store: it
  // takes the in-flight pushes).
  Cut cut(double t) {
    const auto e0 = SteadyClock::now();
    compute_->settle_all();  // every in-flight push computed; no thread touches a worker
    Cut cut;
    cut.info.id = job_.identity;
    cut.info.runtime = "sim";
    cut.info.workers = n_;
    cut.info.train_s = t;
    cut.info.updates = static_cast<int64_t>(server_.version());
    cut.info.rows = static_cast<int64_t>(recorder_->rows().size());
    if (!job_.checkpoints) {
      StateWriter discarded;
      save_sim(discarded, t);
      return cut;
    }
    PendingCheckpoint& p = cut.pending.emplace(job_.checkpoints->begin());
    p.add("server", [&](StateWriter& w) { server_.save(w); });
    p.add("sim", [&](StateWriter& w) { save_sim(w, t); });
    p.add("membership", [&](StateWriter& w) { membership_.save(w); });
    p.add(kRunBlob, save_run_state(stops_, schedule_));
    // The models' random stream (TorchScript dropout: torch's generator),
    // after settle_all's draws: the resumed run draws on from here.
    if (std::string rng = model_->rng_state(); !rng.empty()) p.add("model_rng", rng);
    eval_real_ += since(e0);
    return cut;
  }

  // Part "sim" at virtual time t.
  void save_sim(StateWriter& w, double t) {
    w.tag(kSimTag);
    w.put<int32_t>(n_);
    w.put(t);
    w.put(now_);
    events_.save(w);
    w.put_vec(std::vector<int32_t>(server_queue_.begin(), server_queue_.end()));
    w.put<uint8_t>(server_busy_);
    w.put<int32_t>(in_service_);
    w.put<uint8_t>(in_service_decision_.applied);
    w.put<uint64_t>(in_service_decision_.version);
    w.put<uint8_t>(in_service_decision_.caller_waits);
    w.put_vec(in_service_decision_.released);
    std::vector<float> zeros;
    for (int i = 0; i < n_; ++i) {
      const SimWorker& sw = workers_[static_cast<size_t>(i)];
      // The in-flight push, or zeros for a worker with none.
      if (compute_->outstanding(i)) {
        const PushResult push = compute_->take(i);
        w.put_span(push.grads);
        w.put(sw.version);
        w.put(push.loss);
        w.put(push.samples);
      } else {
        if (zeros.empty()) zeros.assign(np_, 0.0f);
        w.put_vec(zeros);
        w.put(sw.version);
        w.put(sw.loss);
        w.put(sw.batch);
      }
      if (rows_) {  // model.sparse: the rows of the push in flight
        w.put_vec(sw.rows.ids);
        w.put_vec(sw.rows.values);
      }
      w.put(sw.wait_since);
      w.put(sw.idle);
      w.put(sw.push_bytes);
      save_sampler(sw.sampler, w);
    }
    for (const LocalWorker& l : locals_) l.save(w);
    delays_.save(w);
    // The schedule's times (also in blob "run", which a resume reads first;
    // kept here so that checkpoints of earlier versions still resume).
    w.put(schedule_.next_eval());
    w.put(std::isfinite(schedule_.next_checkpoint()) ? schedule_.next_checkpoint() : -1.0);
    w.put(last_row_time_);
    w.put(last_idle_);
    w.put<uint8_t>(in_service_orphaned_);
    if (compress_) {  // [compress]: residuals, held copies, warm starts, counters
      compress_->save(w);
      w.put(counters_);
    }
    w.put<uint8_t>(fabric_ != nullptr);  // SIM3: the simulated cluster
    if (fabric_) {
      fabric_->save(w);
      for (const Decision& d : decisions_) {
        w.put<uint8_t>(d.applied);
        w.put<uint64_t>(d.version);
        w.put<uint8_t>(d.caller_waits);
        w.put_vec(d.released);
      }
      w.put_vec(orphaned_);
      w.put_vec(last_carried_.sent);
      w.put_vec(last_carried_.received);
    }
  }

  void load(const Checkpoint& ck) {
    refuse_gossip_checkpoint(ck, c_.policy_name);
    if (ck.info.workers != n_) {
      throw InputError(fmt::format(
          "{}: a simulation of {} workers; the simulator resumes exactly, with the same "
          "train.workers",
          ck.path, ck.info.workers));
    }
    ck.read("server", [&](StateReader& sr) { server_.load(sr); });
    if (ck.has("membership")) {  // before the samplers: their shards
      ck.read("membership", [&](StateReader& mr) { membership_.load(mr); });
      for (int w = 0; w < n_; ++w) {
        workers_[static_cast<size_t>(w)].sampler = membership_.sampler_for(w);
      }
    }
    double next_eval = 0, next_checkpoint = 0;
    ck.read("sim", [&](StateReader& r) {
      const uint32_t tag = r.get<uint32_t>();
      if (tag != kSimTag && tag != kSimTag2 && tag != kSimTagOld) {
        r.fail("corrupt (simulator section missing)");
      }
      if (r.get<int32_t>() != n_) r.fail("corrupt (worker count)");
      (void)r.get<double>();  // the cut's time (also in the manifest)
      now_ = r.get<double>();
      events_.load(r, n_, c_.train.servers);
      const std::vector<int32_t> q = r.get_vec<int32_t>();
      server_queue_.assign(q.begin(), q.end());
      server_busy_ = r.get<uint8_t>() != 0;
      in_service_ = r.get<int32_t>();
      in_service_decision_.applied = r.get<uint8_t>() != 0;
      in_service_decision_.version = r.get<uint64_t>();
      in_service_decision_.caller_waits = r.get<uint8_t>() != 0;
      in_service_decision_.released = r.get_vec<int>();
      for (int v : q) {
        if (v < 0 || v >= n_) r.fail("corrupt (server queue)");
      }
      for (int v : in_service_decision_.released) {
        if (v < 0 || v >= n_) r.fail("corrupt (released workers)");
      }
      if (server_busy_ && (in_service_ < 0 || in_service_ >= n_)) r.fail("corrupt (in service)");
      // Workers whose push is on its way to the server or queued there have
      // it in flight: it is theirs to push again.
      std::vector<bool> in_flight = events_.workers_with(EventType::kPushArrive, n_);
      for (int v : q) in_flight[static_cast<size_t>(v)] = true;
      std::vector<float> grads(np_);
      std::vector<std::vector<float>> grads_of;
      for (int i = 0; i < n_; ++i) {
        SimWorker& sw = workers_[static_cast<size_t>(i)];
        r.get_into(std::span<float>(grads), "a worker's gradient");
        sw.version = r.get<uint64_t>();
        sw.loss = r.get<double>();
        sw.batch = r.get<int64_t>();
        if (fabric_) {  // which pushes are in flight: the cluster's section, read last
          grads_of.emplace_back(grads);
        } else if (in_flight[static_cast<size_t>(i)]) {
          compute_->install(i, grads, sw.loss, sw.batch);
        }
        if (rows_) {  // model.sparse: the rows of the push in flight
          sw.rows.ids = r.get_vec<int64_t>();
          sw.rows.values = r.get_vec<float>();
          if (sw.rows.values.size() != sw.rows.ids.size() * static_cast<size_t>(layout_.dim)) {
            r.fail("corrupt (a worker's rows)");
          }
        }
        sw.wait_since = r.get<double>();
        sw.idle = r.get<double>();
        sw.push_bytes = tag != kSimTagOld ? r.get<int64_t>() : 0;
        if (sw.push_bytes < 0) r.fail("corrupt (a push's bytes)");
        load_sampler(sw.sampler, r);
      }
      for (LocalWorker& l : locals_) l.load(r);
      delays_.load(r);
      next_eval = r.get<double>();
      next_checkpoint = r.get<double>();
      last_row_time_ = r.get<double>();
      last_idle_ = r.get<double>();
      in_service_orphaned_ = r.get<uint8_t>() != 0;
      if (compress_) {
        compress_->load(r);
        counters_ = r.get<CompressCounters>();
      }
      // SIM3: the simulated cluster; earlier checkpoints ran without it.
      const bool has_fabric = tag == kSimTag && r.get<uint8_t>() != 0;
      if (has_fabric != (fabric_ != nullptr)) {
        r.fail(fabric_ ? "written by the simulator before its network model: resume it with "
                         "sim.network = \"independent\""
                       : "corrupt (a simulated cluster this run does not have)");
      }
      if (fabric_) {
        fabric_->load(r);
        for (Decision& d : decisions_) {
          d.applied = r.get<uint8_t>() != 0;
          d.version = r.get<uint64_t>();
          d.caller_waits = r.get<uint8_t>() != 0;
          d.released = r.get_vec<int>();
          for (int v : d.released) {
            if (v < 0 || v >= n_) r.fail("corrupt (released workers)");
          }
        }
        orphaned_ = r.get_vec<uint8_t>();
        last_carried_.sent = r.get_vec<double>();
        last_carried_.received = r.get_vec<double>();
        if (orphaned_.size() != static_cast<size_t>(n_)) r.fail("corrupt (workers that left)");
        for (int i = 0; i < n_; ++i) {
          const SimWorker& sw = workers_[static_cast<size_t>(i)];
          if (fabric_->carries_push(i)) {
            compute_->install(i, grads_of[static_cast<size_t>(i)], sw.loss, sw.batch);
          }
        }
      }
    });
    if (ck.has(kRunBlob)) {
      load_run_state(ck, stops_, schedule_);
    } else {  // a checkpoint of an earlier version: its times are the sim blob's
      schedule_.resume_times(next_eval, next_checkpoint, ck.info.train_s);
    }
    // Older checkpoints have none: the stream then starts from the seed.
    if (ck.has("model_rng")) {
      model_->set_rng_state(ck.blob("model_rng"), ck.path + "/model_rng.bin");
    }
  }

  const Job& job_;
  const Config& c_;
  const int n_;
  Recorder* recorder_;
  Observer* observer_;
  const size_t np_;
  // The evaluations' model (the gradients are SimCompute's).
  std::unique_ptr<Model> model_;
  std::vector<float> work_params_, work_grads_;
  std::vector<float> params_;
  const RowLayout layout_;  // rows = 0 unless model.sparse
  Server server_;
  std::unique_ptr<RowTable> rows_;      // model.sparse: attached to server_
  std::optional<SparseWorker> sparse_;  // model.sparse: the workers' row-sparse step
  DelayModel delays_;
  std::vector<SimWorker> workers_;
  const int local_h_;
  std::vector<LocalWorker> locals_;  // local:H: momentum kept across rounds
  const Dataset test_;
  double transfer_ = 0;     // one message with parameters
  double server_cost_ = 0;  // one push (an update costs as much again)
  EventQueue events_;
  std::deque<int> server_queue_;
  bool server_busy_ = false;
  int in_service_ = -1;
  Decision in_service_decision_;
  double now_ = 0;  // the time of the last event taken
  double last_row_time_ = 0;
  double last_idle_ = 0;
  double eval_real_ = 0;  // real seconds spent evaluating and checkpointing
  // [compress]; null when off.
  std::unique_ptr<Compression> compress_;
  double compress_cost_ = 0;  // virtual seconds per compressed message
  CompressCounters counters_;
  std::string wire_;   // the last compressed message
  double z_cost_ = 0;  // the compression seconds of the last compressed message
  // Membership (issue 10).
  Membership membership_;
  bool in_service_orphaned_ = false;  // the push in service is of a worker that left
  // The run layer (run_control.h): schedule and stops.
  TrainSchedule schedule_;
  RunStops stops_;
  // [compress]: a compressed pull's parameters are the worker's own, so its
  // request gets a key of its own (above every server version).
  static constexpr uint64_t kOwnCopy = uint64_t{1} << 63;
  uint64_t own_copies_ = 0;
  std::vector<float> sent_;  // a compressed push as the server decodes it
  // The simulated cluster (issue 27): null on the model before it
  // (staged() false). Per worker: the decision on its push in service, and
  // whether it left while its push was being served.
  std::unique_ptr<SimFabric> fabric_;
  std::vector<Decision> decisions_;
  std::vector<uint8_t> orphaned_;
  Network::Carried last_carried_;  // at the last row (net_util)
  // Declared last: its threads call compute() on the members above, and
  // stop before they are destroyed.
  std::unique_ptr<SimCompute> compute_;
};

}  // namespace

void resolve_compute_time(const Job& job, std::vector<std::pair<std::string, std::string>>* out) {
  const Config& c = *job.config;
  if (c.sim.compute_time != 0) return;
  std::unique_ptr<Model> model = job.make_model();
  std::vector<float> params = job.initial_params, grads(params.size());
  model->bind(params, grads);
  out->push_back({"sim.compute_time",
                  full(calibrate_compute_time(*model, *job.train, c.train.batch, c.train.seed))});
}

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

std::vector<std::pair<std::string, std::string>> SimRuntime::resolve(const Job& job) {
  const Config& c = *job.config;
  std::vector<std::pair<std::string, std::string>> out;
  resolve_compute_time(job, &out);
  if (c.sim.server_ns_per_param < 0) {
    out.push_back(
        {"sim.server_ns_per_param", full(calibrate_server_ns(c, job.initial_params.size()))});
  }
  if (c.compress.on() && c.compress.sim_ns_per_param < 0) {
    std::unique_ptr<Model> model = job.make_model();
    out.push_back(
        {"compress.sim_ns_per_param",
         full(calibrate_compress_ns(c, model->param_shapes(), job.initial_params.size()))});
  }
  return out;
}

Job with_resolved_costs(const Job& job,
                        const std::vector<std::pair<std::string, std::string>>& resolved,
                        std::optional<Config>* config) {
  if (resolved.empty()) return job;
  *config = *job.config;
  for (const auto& [k, v] : resolved) {
    const double x = std::stod(v);
    if (k == "sim.compute_time") {
      (*config)->sim.compute_time = x;
    } else if (k == "sim.server_ns_per_param") {
      (*config)->sim.server_ns_per_param = x;
    } else if (k == "compress.sim_ns_per_param") {
      (*config)->compress.sim_ns_per_param = x;
    } else {
      HSGD_ASSERT(false, "a resolved cost the simulators do not know");
    }
  }
  Job j = job;
  j.config = &**config;
  return j;
}

RunResult SimRuntime::run(const Job& job, Recorder* recorder, Observer* observer) {
  check_job(job);
  Observer quiet;
  if (!observer) observer = &quiet;
  // Costs not resolved by the caller are measured here and reported back.
  std::vector<std::pair<std::string, std::string>> resolved = resolve(job);
  std::optional<Config> with_costs;
  const Job j = with_resolved_costs(job, resolved, &with_costs);
  RunResult r = SimRun(j, recorder, observer).run();
  r.resolved = std::move(resolved);
  return r;
}

}  // namespace hsgd
