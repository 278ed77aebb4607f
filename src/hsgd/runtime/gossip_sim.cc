#include "hsgd/runtime/gossip_sim.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <map>
#include <optional>

#include "hsgd/core/error.h"
#include "hsgd/core/network.h"
#include "hsgd/core/rng.h"
#include "hsgd/core/simd.h"
#include "hsgd/core/topology.h"
#include "hsgd/optim/optimizer.h"
#include "hsgd/policy/gossip.h"
#include "hsgd/runtime/clock.h"
#include "hsgd/runtime/compression.h"
#include "hsgd/runtime/delay.h"
#include "hsgd/runtime/gossip_checkpoint.h"
#include "hsgd/runtime/gossip_choco.h"
#include "hsgd/runtime/gossip_outer.h"
#include "hsgd/runtime/gossip_row.h"
#include "hsgd/runtime/local_steps.h"
#include "hsgd/runtime/membership.h"
#include "hsgd/runtime/row.h"
#include "hsgd/runtime/run_control.h"
#include "hsgd/runtime/sim_cores.h"
#include "hsgd/runtime/sim_events.h"
#include "hsgd/runtime/sim_runtime.h"

namespace hsgd {
namespace {

using sim::EventQueue;
using sim::EventType;

constexpr uint32_t kGossipTag = 0x47535332;  // "GSS2": part version 2
constexpr double kInf = std::numeric_limits<double>::infinity();
// The event ending a global average (the queue's membership type, which the
// gossip policies do not otherwise use).
constexpr EventType kGlobalDone = EventType::kFault;
// A worker's next fault (faults.*) is due (the queue's shard type, which the
// gossip policies do not otherwise use; its worker is the worker's id).
constexpr EventType kMembershipDue = EventType::kShardDone;

enum Stage : int32_t {
  kComputing,  // its gradient is being computed (kComputeDone due)
  kRound,      // waiting for its in-peers' round messages
  kPairing,    // adpsgd: waiting for its passive peer's reply
  kBarrier,    // waiting for the global average
};

enum MsgKind : int32_t { kModel, kReply, kReduce };

// Where a worker's compute is on the cores (sim.cores; always kNoCore when
// the cores are unlimited).
enum CoreUse : uint8_t {
  kNoCore = 0,    // not computing, or unlimited cores
  kCoreWait = 1,  // its compute waits in line for a core
  kOnCore = 2,    // its compute holds a core (kComputeDone due)
};

// "GSC2": with each worker's delay after its core part (rest_s); "GSC1"
// (before it, a straggler's delay held a core) is refused.
constexpr uint32_t kCoresTag = 0x47534332;
constexpr uint32_t kCoresTagBefore = 0x47534331;
constexpr const char* kCoresBlob = "gossip_cores";

struct Message {
  int32_t from = 0, to = 0, kind = kModel;
  int64_t round = 0;           // the round within its generation
  int64_t gen = 0;             // round messages: the graph's generation when sent
  int32_t life = 0;            // adpsgd and reduce: the sender's life (joins) when sent
  double weight = 0;           // push-sum: the share of w_from
  std::vector<float> payload;  // kModel (not adpsgd's): the model or share sent
};

struct GWorker {
  GWorker(ShardSampler s, Rng r) : sampler(std::move(s)), rng(r) {}
  int64_t step = 0;       // local steps completed (a joiner: its donor's count)
  int64_t round = 0;      // gossip rounds completed in the graph's generation
  int64_t inherited = 0;  // steps taken over from donors at joins
  int32_t life = 0;       // joins so far
  uint8_t reduce_in = 0;  // its global-average message has arrived
  int32_t stage = kComputing;
  int32_t peer = -1;  // adpsgd: the passive peer being averaged with
  double loss = 0;
  int64_t batch = 0;
  uint8_t finite = 1;
  double compute_s = 0;     // the seconds of its compute in progress (on a core, when limited)
  double rest_s = 0;        // limited cores: the delay after it, off the core
  uint8_t core = kNoCore;   // CoreUse
  double wait_since = -1;   // when it began waiting, or -1
  double idle = 0;          // seconds spent waiting
  std::vector<float> grad;  // the gradient of the step in progress
  ShardSampler sampler;
  Rng rng;  // adpsgd: its choice of peers
};

std::string full(double v) { return fmt::format("{:.17g}", v); }

class GossipRun {
 public:
  GossipRun(const Job& job, Recorder* recorder, Observer* observer)
      : job_(job),
        c_(*job.config),
        n_(c_.train.workers),
        recorder_(recorder),
        observer_(observer),
        np_(job.initial_params.size()),
        kind_(c_.policy.kind),
        topo_(c_.gossip.topology, c_.gossip.weights, n_, c_.train.seed),
        graph_(c_.gossip.topology, c_.gossip.weights, n_, c_.train.seed),
        models_(n_, job.initial_params, gossip_local_update(c_)),
        outer_(GossipOuter::make(c_, job.initial_params)),
        model_(job.make_model()),
        work_params_(np_),
        work_grads_(np_),
        test_(head(*job.test, c_.train.eval_samples)),
        delays_(c_.stragglers, n_, c_.train.seed),
        net_(std::vector<NodeLink>(static_cast<size_t>(n_),
                                   NodeLink{c_.sim.bandwidth, c_.sim.bandwidth}),
             c_.sim.latency, c_.sim.network == "shared"),
        schedule_(c_, job.train->size(), job.checkpoints != nullptr),
        stops_(c_),
        membership_(job, n_),
        cores_(c_.sim.cores) {
    model_->bind(work_params_, work_grads_);
    workers_.reserve(static_cast<size_t>(n_));
    for (int w = 0; w < n_; ++w) {
      workers_.push_back(GWorker{make_sampler(job, w),
                                 Rng(c_.train.seed, 0x676f73736970ULL + static_cast<uint64_t>(w))});
    }
    bytes_ = 4.0 * static_cast<double>(np_);
    period_ = kind_ == "pdsgdm" ? std::max(1, c_.policy.k) : 1;
    cta_ = kind_ == "dpsgd" && c_.gossip.order == "cta";
    choco_ = ChocoGossip::make(c_, model_->param_shapes(), job.initial_params, n_);
    if (choco_) {
      compress_cost_ =
          std::max(0.0, c_.compress.sim_ns_per_param) * 1e-9 * static_cast<double>(np_);
    }
  }

  RunResult run() {
    const auto wall0 = SteadyClock::now();
    if (job_.resume) {
      load(*job_.resume);
      open_outputs(job_);
    } else {
      open_outputs(job_);
      evaluate(0.0);
      for (int w = 0; w < n_ && !stops_.stopped(); ++w) start_step(w, 0.0);
      if (membership_.faults_on()) {
        for (int w = 0; w < n_; ++w) schedule_fault(w);
      }
    }
    const double budget = schedule_.budget();
    double end_time = budget;
    bool stopped_at_row = !job_.resume && stops_.stopped();
    const bool done_already = schedule_.epochs_done(counts_.samples) || stops_.stopped();
    auto last_status = SteadyClock::now();
    uint64_t processed = 0;
    while (!done_already && !stops_.stopped()) {
      if (events_.empty()) {
        throw std::runtime_error(fmt::format("gossip simulation deadlocked at t = {} s (policy {})",
                                             now_, c_.policy_name));
      }
      const double t = events_.top().time;
      run_due(
          schedule_, t, stops_, [&](double at) { evaluate(at); },
          [&](double at) { write(cut(at)); });
      if (stops_.stopped()) {
        end_time = last_row_time_;
        stopped_at_row = true;
        break;
      }
      if (t >= budget) break;
      const sim::Event ev = events_.pop();
      now_ = ev.time;
      handle(ev);
      if (stops_.stopped()) {  // non-finite gradients (check_pushes)
        end_time = ev.time;
        break;
      }
      if (stops_.check_request(/*at_evaluation=*/false)) {
        end_time = ev.time;
        break;
      }
      if (schedule_.epochs_done(counts_.samples)) {
        end_time = ev.time;
        break;
      }
      if ((++processed & 1023) == 0 && since(last_status) > 0.5) {
        last_status = SteadyClock::now();
        const Status st = gossip_status(counts_, ev.time, last_acc_, job_.train->size());
        observer_->on_status(st);
      }
    }
    if (done_already) end_time = now_;
    std::optional<Cut> final_cut;
    if (job_.checkpoints && !stopped_at_row && stops_.final_checkpoint_allowed()) {
      final_cut = cut(end_time);
    }
    RunResult result;
    result.last = stopped_at_row ? recorder_->rows().back() : evaluate(end_time);
    if (final_cut && stops_.final_checkpoint_allowed()) write(*final_cut);
    result.stopped = stops_.reason();
    result.params.resize(np_);
    models_.average(result.params);
    result.train_s = result.last.time_s;
    result.real_train_s = since(wall0) - eval_real_;
    result.wall_s = since(wall0);
    result.gradients = counts_.steps;
    for (const GWorker& g : workers_) {
      result.worker_pushes.push_back(g.step - g.inherited);
      result.sampler_cost += g.sampler.cost;
    }
    result.network = network_report(end_time);
    result.gossip = gossip_report(end_time);
    result.membership = membership_.log();
    return result;
  }

 private:
  GWorker& worker(int w) { return workers_[static_cast<size_t>(w)]; }

  // Whether worker w's step `step` ends with a gossip round.
  bool gossip_step(int64_t step) const {
    if (kind_ == "adpsgd" || n_ == 1) return false;
    return (step + 1) % period_ == 0;
  }
  bool push_sum() const { return kind_ == "sgp"; }

  // ---- messages
  void send(double t, Message m, double bytes) {
    const int64_t tag = next_tag_++;
    const int from = m.from, to = m.to;
    in_flight_.emplace(tag, std::move(m));
    net_.send(t, from, to, bytes, tag);
    wake_network();
  }
  void wake_network() {
    const double nt = net_.next_time();
    if (nt < net_due_) {
      net_due_ = nt;
      events_.push(nt, EventType::kNetwork, 0);
    }
  }

  void handle(const sim::Event& ev) {
    switch (ev.type) {
      case EventType::kComputeDone: {
        GWorker& g = worker(ev.worker);
        if (g.core == kOnCore && g.rest_s > 0) {
          // The gradient is done: the core is free for the straggler's delay.
          free_core(ev.worker, ev.time);
          events_.push(ev.time + g.rest_s, EventType::kComputeDone, ev.worker);
          g.rest_s = 0;
          break;
        }
        compute_done(ev.worker, ev.time);
        break;
      }
      case EventType::kNetwork: {
        if (ev.time != net_due_) break;  // superseded by an earlier wake-up
        net_due_ = kInf;
        for (int64_t tag : net_.advance(ev.time)) {
          auto it = in_flight_.find(tag);
          HSGD_ASSERT(it != in_flight_.end(), "a delivered message the simulator never sent");
          Message m = std::move(it->second);
          in_flight_.erase(it);
          deliver(std::move(m), ev.time);
        }
        wake_network();
        break;
      }
      case kGlobalDone:  // the global average's last latencies
        global_average_done(ev.time);
        break;
      case kMembershipDue: {
        const FaultDue due = membership_.plan().next(ev.worker, graph_.live(ev.worker));
        if (due.time != ev.time) break;  // superseded by a later membership change
        if (due.join) {
          join(ev.worker, ev.time, due.cause);
        } else {
          leave(ev.worker, ev.time, due.cause);
        }
        break;
      }
      default:
        HSGD_ASSERT(false, "an event the gossip simulator does not schedule");
    }
  }

  // ---- one step
  void start_step(int w, double t) {
    GWorker& g = worker(w);
    g.stage = kComputing;
    // Shards follow the live set (Membership: from the worker's next epoch).
    if (membership_.faults_on()) {
      membership_.refresh(w, g.sampler, c_.train.batch, graph_.live_mask(), false);
    }
    // The gradient is taken now, at the model the worker holds (push-sum:
    // de-biased); it is applied when its compute time has passed.
    models_.debiased(w, work_params_);
    Batch batch;
    g.loss = sampled_gradient(*model_, g.sampler, c_.train.batch, &batch);
    g.batch = batch.size();
    g.finite = std::isfinite(g.loss) && all_finite(work_grads_);
    g.grad.assign(work_grads_.begin(), work_grads_.end());
    if (cta_ && gossip_step(g.step)) send_model(w, t, g.round);
    double compute = c_.sim.compute_time * delays_.slowdown(w) + delays_.draw(w);
    // On a core (sim.cores): the gradient; a straggler's slow-down and delay
    // are spent asleep, as on threads and mpi.
    double core = c_.sim.compute_time;
    // CHOCO: encoding its round and decoding its in-peers' (compress.sim_ns_per_param).
    if (choco_ && gossip_step(g.step)) {
      compute += compress_cost_;
      core += compress_cost_;
    }
    start_compute(w, t, compute, core);
  }

  // Worker w's compute of `seconds`, ready at t, runs on one of sim.cores
  // cores, first come first served (runtime/sim_cores.h: the parameter
  // server simulator's rule): now, or when a core is free.
  // Of the `seconds`, only `core_s` hold the core; the rest follows off it.
  void start_compute(int w, double t, double seconds, double core_s) {
    GWorker& g = worker(w);
    g.compute_s = seconds;
    g.rest_s = 0;
    if (cores_.limited() && core_s < seconds) {
      g.compute_s = core_s;
      g.rest_s = seconds - core_s;
    }
    if (!cores_.acquire(w)) {
      g.core = kCoreWait;
      return;
    }
    g.core = cores_.limited() ? kOnCore : kNoCore;
    events_.push(t + seconds, EventType::kComputeDone, w);
  }
  // Worker w's compute is over (done, or it left): its core goes to the
  // next in line.
  void free_core(int w, double t) {
    GWorker& g = worker(w);
    if (g.core == kCoreWait) cores_.drop(w);
    const bool held = g.core == kOnCore;
    g.core = kNoCore;
    if (!held) return;
    for (const int64_t next : cores_.release()) {
      GWorker& h = worker(static_cast<int>(next));
      h.core = kOnCore;
      events_.push(t + h.compute_s, EventType::kComputeDone, static_cast<int>(next));
    }
  }

  float lr_of(const GWorker& g) const {
    return static_cast<float>(lr_at(c_.lr_schedule, c_.optim.lr, g.step));
  }

  // The local step of the gradient computed at the step's start (a
  // non-finite one is dropped and counted, like a server drops a push).
  void apply_gradient(int w, double t) {
    GWorker& g = worker(w);
    if (!g.finite) {
      ++counts_.nonfinite;
      ++consecutive_nonfinite_;
      stops_.check_pushes(consecutive_nonfinite_, counts_.steps, t);
      return;
    }
    consecutive_nonfinite_ = 0;
    models_.local_step(w, g.grad, lr_of(g));
  }

  // Worker w's round message to each of its out-peers: `payload` (what the
  // receiver gets), `bytes` on the wire.
  void send_round(int w, double t, int64_t round, std::span<const float> payload, double bytes) {
    for (int to : graph_.out_peers(w, round)) {
      Message m;
      m.from = w;
      m.to = to;
      m.kind = kModel;
      m.round = round;
      m.gen = generation_;
      m.payload.assign(payload.begin(), payload.end());
      send(t, std::move(m), bytes);
    }
  }

  void send_model(int w, double t, int64_t round) { send_round(w, t, round, models_.x(w), bytes_); }

  // CHOCO: worker w encodes its round (ChocoGossip::encode) and sends the
  // encoded bytes to its out-peers; returns q, its own part of the round
  // (and what every receiver decodes from the bytes).
  std::vector<float> send_choco(int w, double t, int64_t round) {
    std::vector<float> q(np_);
    std::string bytes;
    choco_->encode(w, worker(w).step, models_.x(w), &bytes, q);
    send_round(w, t, round, q, static_cast<double>(bytes.size()));
    return q;
  }

  void compute_done(int w, double t) {
    GWorker& g = worker(w);
    free_core(w, t);
    if (membership_.plan().gradient_throws(w)) {  // faults.exception_rate
      leave(w, t, MembershipCause::kException);
      return;
    }
    if (kind_ == "adpsgd") {
      const int peer = hsgd::adpsgd_peer(graph_, w, g.step, g.rng);
      if (peer < 0) {
        apply_gradient(w, t);
        finish_step(w, t);
        return;
      }
      g.stage = kPairing;
      g.peer = peer;
      g.wait_since = t;
      Message m;
      m.from = w;
      m.to = peer;
      m.kind = kModel;
      m.round = g.step;
      m.life = g.life;
      send(t, std::move(m), bytes_);
      return;
    }
    if (!gossip_step(g.step)) {
      apply_gradient(w, t);
      finish_step(w, t);
      return;
    }
    const int64_t round = g.round;
    std::vector<float> q;  // CHOCO: its own round message
    if (!cta_) {
      apply_gradient(w, t);
      if (kind_ == "sgp") {
        // Push-sum: keep one share of (x, w), send one to each out-peer.
        const std::vector<int> out = graph_.out_peers(w, round);
        const double share = 1.0 / (static_cast<double>(out.size()) + 1.0);
        std::span<float> x = models_.x(w);
        for (float& v : x) v = static_cast<float>(v * share);
        models_.weight(w) *= share;
        for (int to : out) {
          Message m;
          m.from = w;
          m.to = to;
          m.kind = kModel;
          m.round = round;
          m.gen = generation_;
          m.weight = models_.weight(w);
          m.payload.assign(x.begin(), x.end());
          send(t, std::move(m), bytes_ + 8);
        }
      } else if (choco_) {
        q = send_choco(w, t, round);
      } else {
        send_model(w, t, round);
      }
    }
    g.stage = kRound;
    g.wait_since = t;
    // The worker's own part of the round, as its in-peers' parts will come.
    Message self;
    self.from = w;
    self.to = w;
    self.round = round;
    self.gen = generation_;
    if (choco_) {
      self.payload = std::move(q);
    } else if (kind_ != "sgp") {
      std::span<const float> x = models_.x(w);
      self.payload.assign(x.begin(), x.end());
    }
    inbox_[{w, round, w}] = std::move(self);
    try_combine(w, t);
  }

  void deliver(Message m, double t) {
    if (m.kind == kReduce) {
      GWorker& s = worker(m.from);
      // A leaver's message counts no more (nor once it rejoined).
      if (!graph_.live(m.from) || s.life != m.life || s.stage != kBarrier) return;
      s.reduce_in = 1;
      maybe_global_average(t);
      return;
    }
    if (kind_ == "adpsgd") {
      if (m.kind == kModel) {  // at the passive side: both become the average
        // The active side left (or left and rejoined) meanwhile: nothing.
        if (!graph_.live(m.from) || worker(m.from).life != m.life) return;
        if (!graph_.live(m.to)) {  // the passive side left: no average
          pairing_done(m.from, t);
          return;
        }
        models_.pair_average(m.from, m.to);
        Message r;
        r.from = m.to;
        r.to = m.from;
        r.kind = kReply;
        r.round = m.round;
        r.life = m.life;
        send(t, std::move(r), bytes_);
      } else {  // the reply: the active worker's gradient, then its next step
        if (!graph_.live(m.to) || worker(m.to).life != m.life) return;
        pairing_done(m.to, t);
      }
      return;
    }
    if (m.gen != generation_) return;  // a round of an older graph (credited)
    const int to = m.to;
    inbox_[{to, m.round, m.from}] = std::move(m);
    try_combine(to, t);
  }

  // adpsgd: the active worker w's exchange is over.
  void pairing_done(int w, double t) {
    {
      GWorker& g = worker(w);
      g.idle += t - g.wait_since;
      g.wait_since = -1;
      g.peer = -1;
      apply_gradient(w, t);
      finish_step(w, t);
    }
  }

  // Worker w's round ends once every in-peer's part has come.
  void try_combine(int w, double t) {
    GWorker& g = worker(w);
    if (g.stage != kRound) return;
    const int64_t round = g.round;
    std::vector<int> from = graph_.in_peers(w, round);
    from.push_back(w);
    std::sort(from.begin(), from.end());
    for (int j : from) {
      if (!inbox_.count({w, round, j})) return;
    }
    if (kind_ == "sgp") {
      std::vector<double> ws;
      std::vector<std::span<const float>> srcs;
      std::vector<float> own(models_.x(w).begin(), models_.x(w).end());
      double weight = 0;
      for (int j : from) {
        const Message& m = inbox_.at({w, round, j});
        ws.push_back(1.0);
        if (j == w) {
          srcs.push_back(own);
          weight += models_.weight(w);
        } else {
          srcs.push_back(m.payload);
          weight += m.weight;
        }
      }
      weighted_sum(models_.x(w), ws, srcs);
      models_.weight(w) = weight;
    } else if (choco_) {
      const MixRow row = graph_.mixing_row(w, round);
      std::vector<std::span<const float>> qs;
      for (const auto& [j, wij] : row) qs.push_back(inbox_.at({w, round, j}).payload);
      choco_->combine(w, row, qs, models_.x(w));
    } else {
      std::vector<double> ws;
      std::vector<std::span<const float>> srcs;
      for (const auto& [j, wij] : graph_.mixing_row(w, round)) {
        ws.push_back(wij);
        srcs.push_back(inbox_.at({w, round, j}).payload);
      }
      weighted_sum(models_.x(w), ws, srcs);
      if (cta_) apply_gradient(w, t);
    }
    for (int j : from) inbox_.erase({w, round, j});
    ++rounds_;
    ++g.round;
    g.idle += t - g.wait_since;
    g.wait_since = -1;
    finish_step(w, t);
  }

  void finish_step(int w, double t) {
    GWorker& g = worker(w);
    ++g.step;
    ++counts_.steps;
    if (g.finite) {
      counts_.samples += g.batch;
      counts_.loss_sum += g.loss;
      ++counts_.loss_count;
    }
    if (c_.gossip.global_every > 0 && g.step % c_.gossip.global_every == 0 && n_ > 1) {
      enter_barrier(w, t);
      return;
    }
    start_step(w, t);
  }

  // Worker w waits for the global average and sends its live ring
  // successor a ring all-reduce's share.
  void enter_barrier(int w, double t) {
    GWorker& g = worker(w);
    g.stage = kBarrier;
    g.wait_since = t;
    g.reduce_in = 0;
    const int m_live = graph_.live_count();
    const int next = graph_.successor(w);
    Message m;
    m.from = w;
    m.to = next < 0 ? w : next;
    m.kind = kReduce;
    m.life = g.life;
    send(t, std::move(m), 2.0 * (m_live - 1) / m_live * bytes_);
  }

  // ---- Gossip-PGA's global average (a ring all-reduce)
  // Every live worker is at the barrier and its message has arrived.
  void maybe_global_average(double t) {
    if (c_.gossip.global_every == 0 || average_due_) return;
    for (int w = 0; w < n_; ++w) {
      if (graph_.live(w) && (worker(w).stage != kBarrier || !worker(w).reduce_in)) return;
    }
    average_due_ = 1;
    const double rest = std::max(0, 2 * (graph_.live_count() - 1) - 1) * c_.sim.latency;
    events_.push(t + rest, kGlobalDone, 0);
  }
  void global_average_done(double t) {
    average_due_ = 0;
    gossip_global_average(models_, choco_.get(), outer_hook(outer_.get()));
    ++global_averages_;
    for (int w = 0; w < n_; ++w) {
      GWorker& g = worker(w);
      if (!graph_.live(w) || g.stage != kBarrier) continue;
      g.reduce_in = 0;
      g.idle += t - g.wait_since;
      g.wait_since = -1;
      start_step(w, t);
    }
  }

  // ---- membership (docs/gossip.md#membership)
  void schedule_fault(int w) {
    const FaultDue due = membership_.plan().next(w, graph_.live(w));
    if (std::isfinite(due.time)) events_.push(std::max(due.time, now_), kMembershipDue, w);
  }

  // Worker w stops at once: its gradient in the making is lost; push-sum
  // gives its (x, w), and the shares sent to it, to its live successor.
  void leave(int w, double t, MembershipCause cause) {
    if (!graph_.live(w)) return;
    GWorker& g = worker(w);
    if (g.wait_since >= 0) g.idle += t - g.wait_since;
    g.wait_since = -1;
    g.stage = kComputing;
    g.peer = -1;
    g.reduce_in = 0;
    g.rest_s = 0;
    events_.drop_worker(w);
    free_core(w, t);
    std::vector<char> live = graph_.live_mask();
    live[static_cast<size_t>(w)] = 0;
    graph_.set_live(std::move(live));
    const int heir = push_sum() ? graph_.successor(w) : -1;
    models_.remove(w, heir);
    new_generation(t, w, heir, -1);
    stops_.check_membership(
        membership_.record(MembershipEvent{t, w, false, cause, ""}, graph_.live_count()));
    schedule_fault(w);
    maybe_global_average(t);
  }

  // Worker w joins at its live successor's step (so the lr schedule, the
  // pdsgdm phase and the global averages stay aligned) and model
  // (GossipModels::join_from), momentum zero, with its shard of the live set.
  void join(int w, double t, MembershipCause cause) {
    if (graph_.live(w)) return;
    GWorker& g = worker(w);
    std::vector<char> live = graph_.live_mask();
    live[static_cast<size_t>(w)] = 1;
    graph_.set_live(std::move(live));
    ++g.life;
    g.round = 0;
    g.reduce_in = 0;
    new_generation(t, -1, -1, w);
    const int donor = graph_.successor(w);
    if (donor >= 0) {
      models_.join_from(w, donor, push_sum());
      g.inherited += worker(donor).step - g.step;
      g.step = worker(donor).step;
    } else {  // nobody live to learn from (train.min_workers = 0): the initial model
      std::copy(job_.initial_params.begin(), job_.initial_params.end(), models_.x(w).begin());
      models_.weight(w) = 1.0;
    }
    membership_.refresh(w, g.sampler, c_.train.batch, graph_.live_mask(), true);
    if (donor >= 0 && worker(donor).stage == kBarrier) {
      enter_barrier(w, t);
    } else {
      start_step(w, t);
    }
    stops_.check_membership(
        membership_.record(MembershipEvent{t, w, true, cause, ""}, graph_.live_count()));
    schedule_fault(w);
  }

  // The graph changed: a new generation of rounds, numbered from 0 for every
  // live worker. Round messages of the old graph are void: push-sum shares
  // among them (in flight or delivered and not yet combined) are credited
  // at once to their receiver (the heir, for the leaver's). A worker
  // waiting for a round ends it with what it has (its own model; push-sum:
  // its kept share and the shares credited to it), then goes on in the new
  // graph; a cta worker computing its gradient sends its model again.
  void new_generation(double t, int leaver, int heir, int joiner) {
    ++generation_;
    if (kind_ == "adpsgd") return;  // no rounds: pairs check who is live
    auto to_of = [&](int to) { return to == leaver ? heir : to; };
    for (auto& [tag, m] : in_flight_) {
      if (m.kind != kModel || m.gen == generation_) continue;
      if (push_sum() && !m.payload.empty() && to_of(m.to) >= 0) {
        models_.credit(to_of(m.to), m.payload, m.weight);
      }
      m.payload.clear();  // void: dropped on arrival
      m.weight = 0;
    }
    for (auto& [key, m] : inbox_) {
      if (push_sum() && m.from != m.to && to_of(m.to) >= 0) {
        models_.credit(to_of(m.to), m.payload, m.weight);
      }
    }
    inbox_.clear();
    std::vector<int> ended, resend;
    for (int w = 0; w < n_; ++w) {
      if (!graph_.live(w) || w == joiner) continue;
      GWorker& g = worker(w);
      g.round = 0;
      if (g.stage == kRound) ended.push_back(w);
      if (g.stage == kComputing && cta_ && gossip_step(g.step)) resend.push_back(w);
    }
    for (int w : resend) send_model(w, t, 0);
    for (int w : ended) {
      GWorker& g = worker(w);
      g.idle += t - g.wait_since;
      g.wait_since = -1;
      if (cta_) apply_gradient(w, t);
      finish_step(w, t);
    }
  }

  // ---- rows
  MetricsRow evaluate(double t) {
    const auto e0 = SteadyClock::now();
    double idle = 0;
    for (const GWorker& g : workers_) idle += g.idle + (g.wait_since >= 0 ? t - g.wait_since : 0);
    const double span = (t - last_row_time_) * n_;
    const double idle_frac = span > 0 ? std::clamp((idle - last_idle_) / span, 0.0, 1.0) : 0.0;
    last_idle_ = idle;
    MetricsRow r = gossip_row(c_, models_, *model_, work_params_, test_, job_.train->size(), t,
                              counts_, idle_frac, graph_.live_count());
    if (net_.shared()) {
      r.has_net = true;
      const Network::Carried now = net_.carried(t);
      r.net_util =
          t > last_row_time_ ? net_.busiest_util(last_carried_, now, t - last_row_time_) : 0.0;
      last_carried_ = now;
    }
    last_row_time_ = t;
    last_acc_ = r.test_acc;
    recorder_->write(r);
    observer_->on_row(r);
    stops_.check_row(r, work_params_, recorder_->rows());
    eval_real_ += since(e0);
    return r;
  }

  NetworkResult network_report(double t) const {
    NetworkResult out;
    out.on = true;
    out.model = c_.sim.network;
    const auto nodes = static_cast<size_t>(n_);
    const Network::Carried zero{std::vector<double>(nodes, 0.0), std::vector<double>(nodes, 0.0)};
    const Network::Carried all = net_.carried(t);
    out.busiest_util = t > 0 ? net_.busiest_util(zero, all, t) : 0.0;
    double best = -1;
    for (size_t i = 0; i < nodes; ++i) {
      const std::string name = fmt::format("worker {}", i);
      out.nodes.push_back(name);
      out.sent.push_back(all.sent[i]);
      out.received.push_back(all.received[i]);
      if (all.sent[i] > best) {
        best = all.sent[i];
        out.busiest = name + " egress";
      }
      if (all.received[i] > best) {
        best = all.received[i];
        out.busiest = name + " ingress";
      }
    }
    return out;
  }

  GossipResult gossip_report(double t) const {
    const Network::Carried all = net_.carried(t);
    std::vector<int64_t> steps;
    for (const GWorker& g : workers_) steps.push_back(g.step - g.inherited);
    return gossip_result(c_, topo_, counts_, rounds_, global_averages_, all.sent, all.received,
                         steps);
  }

  // ---- checkpoints
  struct Cut {
    CheckpointInfo info;
    std::map<std::string, std::string> blobs;
  };
  void write(const Cut& cut) {
    if (!job_.checkpoints) return;
    const auto e0 = SteadyClock::now();
    job_.checkpoints->write(cut.info, cut.blobs);
    eval_real_ += since(e0);
  }

  Cut cut(double t) {
    StateWriter w;
    w.tag(kGossipTag);
    w.put<int32_t>(n_);
    w.put(t);
    w.put(now_);
    // The models and the messages first (tests/gossip_sim_test.cc reads
    // the push-sum mass from this head).
    models_.save(w);
    w.put<uint64_t>(in_flight_.size());
    for (const auto& [tag, m] : in_flight_) {
      w.put(tag);
      put_message(w, m);
    }
    w.put<uint64_t>(inbox_.size());
    for (const auto& [key, m] : inbox_) {
      w.put(key[0]);
      w.put(key[1]);
      w.put(key[2]);
      put_message(w, m);
    }
    events_.save(w);
    net_.save(w);
    w.put(net_due_);
    w.put(next_tag_);
    for (const GWorker& g : workers_) {
      w.put(g.step);
      w.put(g.stage);
      w.put(g.peer);
      w.put(g.loss);
      w.put(g.batch);
      w.put(g.finite);
      w.put(g.wait_since);
      w.put(g.idle);
      w.put_vec(g.grad);
      save_sampler(g.sampler, w);
      w.put(g.rng.state());
      w.put(g.round);
      w.put(g.inherited);
      w.put(g.life);
      w.put(g.reduce_in);
    }
    delays_.save(w);
    w.put(counts_.steps);
    w.put(counts_.samples);
    w.put(rounds_);
    w.put(global_averages_);
    w.put(average_due_);
    w.put(generation_);
    w.put_vec(graph_.live_mask());
    w.put(counts_.loss_sum);
    w.put(counts_.loss_count);
    w.put(counts_.nonfinite);
    w.put(consecutive_nonfinite_);
    w.put(last_row_time_);
    w.put(last_idle_);
    w.put(last_acc_);
    w.put_vec(last_carried_.sent);
    w.put_vec(last_carried_.received);
    const CheckpointInfo info =
        gossip_cut_info(job_.identity, "sim", n_, t, counts_.steps, recorder_->rows().size());
    Cut cut{info, {{"gossip", w.take()}, {kRunBlob, save_run_state(stops_, schedule_)}}};
    if (membership_.faults_on()) {
      StateWriter mw;
      membership_.save(mw);
      cut.blobs["membership"] = mw.take();
    }
    if (cores_.limited()) {  // sim.cores: only then, so other checkpoints keep their bytes
      StateWriter kw;
      kw.tag(kCoresTag);
      cores_.save(kw);
      for (const GWorker& g : workers_) {
        kw.put(g.core);
        kw.put(g.compute_s);
        kw.put(g.rest_s);
      }
      cut.blobs[kCoresBlob] = kw.take();
    }
    if (std::string rng = model_->rng_state(); !rng.empty())
      cut.blobs["model_rng"] = std::move(rng);
    if (outer_) {
      StateWriter ow;
      outer_->save(ow);
      cut.blobs[kGossipOuterBlob] = ow.take();
    }
    if (choco_) {
      StateWriter cw;
      for (int i = 0; i < n_; ++i) choco_->save_worker(i, cw);
      cut.blobs[kGossipChocoBlob] = cw.take();
    }
    return cut;
  }

  static void put_message(StateWriter& w, const Message& m) {
    w.put(m.from);
    w.put(m.to);
    w.put(m.kind);
    w.put(m.round);
    w.put(m.gen);
    w.put(m.life);
    w.put(m.weight);
    w.put_vec(m.payload);
  }
  Message get_message(StateReader& r) const {
    Message m;
    m.from = r.get<int32_t>();
    m.to = r.get<int32_t>();
    m.kind = r.get<int32_t>();
    m.round = r.get<int64_t>();
    m.gen = r.get<int64_t>();
    m.life = r.get<int32_t>();
    m.weight = r.get<double>();
    m.payload = r.get_vec<float>();
    if (m.from < 0 || m.from >= n_ || m.to < 0 || m.to >= n_ || m.kind < kModel ||
        m.kind > kReduce || (!m.payload.empty() && m.payload.size() != np_)) {
      r.fail("corrupt (a gossip message)");
    }
    return m;
  }

  void load(const Checkpoint& ck) {
    if (ck.info.workers != n_) {
      throw InputError(
          fmt::format("{}: a gossip simulation of {} workers; it resumes exactly, with the same "
                      "train.workers",
                      ck.path, ck.info.workers));
    }
    if (!ck.has("gossip")) {
      throw InputError(ck.path + ": " +
                       (ck.has(kGossipRunBlob) ? "a gossip checkpoint of the " + ck.info.runtime +
                                                     " runtime, not the simulator's"
                                               : std::string("not a gossip policy's checkpoint")) +
                       " (no gossip.bin)");
    }
    if (ck.has("membership")) {  // before the samplers: their shards
      StateReader mr(ck.blob("membership"), ck.path + "/membership.bin");
      membership_.load(mr);
      mr.expect_end();
      for (int w = 0; w < n_; ++w) {
        if (membership_.changed()) worker(w).sampler = membership_.sampler_for(w);
      }
    }
    // Version 1 (before membership) was written only by unreleased
    // builds: refused, not read.
    if (ck.version("gossip") < 2) {
      throw InputError(ck.path +
                       "/gossip.bin: part version 1, written by an unreleased hsgd before gossip "
                       "membership; resume it with that build");
    }
    StateReader r(ck.blob("gossip"), ck.path + "/gossip.bin");
    if (r.get<uint32_t>() != kGossipTag) r.fail("corrupt (gossip section missing)");
    if (r.get<int32_t>() != n_) r.fail("corrupt (worker count)");
    (void)r.get<double>();
    now_ = r.get<double>();
    models_.load(r);
    in_flight_.clear();
    for (uint64_t k = r.get<uint64_t>(); k > 0; --k) {
      const auto tag = r.get<int64_t>();
      in_flight_.emplace(tag, get_message(r));
    }
    inbox_.clear();
    for (uint64_t k = r.get<uint64_t>(); k > 0; --k) {
      std::array<int64_t, 3> key{r.get<int64_t>(), r.get<int64_t>(), r.get<int64_t>()};
      inbox_.emplace(key, get_message(r));
    }
    events_.load(r, n_, n_);  // kShardDone is kMembershipDue, per worker
    net_.load(r);
    net_due_ = r.get<double>();
    next_tag_ = r.get<int64_t>();
    for (GWorker& g : workers_) {
      g.step = r.get<int64_t>();
      g.stage = r.get<int32_t>();
      g.peer = r.get<int32_t>();
      g.loss = r.get<double>();
      g.batch = r.get<int64_t>();
      g.finite = r.get<uint8_t>();
      g.wait_since = r.get<double>();
      g.idle = r.get<double>();
      g.grad = r.get_vec<float>();
      if (g.grad.size() != np_ || g.stage < kComputing || g.stage > kBarrier) {
        r.fail("corrupt (a gossip worker)");
      }
      load_sampler(g.sampler, r);
      g.rng.set_state(r.get<uint64_t>());
      g.round = r.get<int64_t>();
      g.inherited = r.get<int64_t>();
      g.life = r.get<int32_t>();
      g.reduce_in = r.get<uint8_t>();
    }
    delays_.load(r);
    counts_.steps = r.get<int64_t>();
    counts_.samples = r.get<int64_t>();
    rounds_ = r.get<int64_t>();
    global_averages_ = r.get<int64_t>();
    average_due_ = r.get<uint8_t>();
    generation_ = r.get<int64_t>();
    std::vector<char> live = r.get_vec<char>();
    if (live.size() != static_cast<size_t>(n_)) r.fail("corrupt (live workers)");
    graph_.set_live(std::move(live));
    counts_.loss_sum = r.get<double>();
    counts_.loss_count = r.get<int64_t>();
    counts_.nonfinite = r.get<int64_t>();
    consecutive_nonfinite_ = r.get<int64_t>();
    last_row_time_ = r.get<double>();
    last_idle_ = r.get<double>();
    last_acc_ = r.get<double>();
    last_carried_.sent = r.get_vec<double>();
    last_carried_.received = r.get_vec<double>();
    r.expect_end();
    if (cores_.limited()) {
      if (!ck.has(kCoresBlob)) {
        throw InputError(
            fmt::format("{}: no {}.bin; sim.cores = {} resumes from a checkpoint of "
                        "a run with the same sim.cores",
                        ck.path, kCoresBlob, c_.sim.cores));
      }
      ck.read(kCoresBlob, [&](StateReader& kr) {
        const uint32_t tag = kr.get<uint32_t>();
        if (tag == kCoresTagBefore) {
          kr.fail(
              "written before a straggler's delay stopped holding a core (sim.cores > 0); "
              "rerun it from the start");
        }
        if (tag != kCoresTag) kr.fail("corrupt (gossip cores section missing)");
        cores_.load(kr);
        for (GWorker& g : workers_) {
          g.core = kr.get<uint8_t>();
          g.compute_s = kr.get<double>();
          g.rest_s = kr.get<double>();
          if (g.core > kOnCore || !(g.compute_s >= 0) || !(g.rest_s >= 0)) {
            kr.fail("corrupt (a worker's core)");
          }
        }
      });
    }
    load_run_state(ck, stops_, schedule_);
    if (ck.has("model_rng")) {
      model_->set_rng_state(ck.blob("model_rng"), ck.path + "/model_rng.bin");
    }
    if (outer_) ck.read(kGossipOuterBlob, [&](StateReader& r) { outer_->load(r); });
    if (choco_) {
      require_choco_blob(ck, kGossipChocoBlob);
      ck.read(kGossipChocoBlob, [&](StateReader& r) {
        for (int i = 0; i < n_; ++i) choco_->load_worker(i, r);
      });
    }
  }

  const Job& job_;
  const Config& c_;
  const int n_;
  Recorder* recorder_;
  Observer* observer_;
  const size_t np_;
  const std::string kind_;
  const Topology topo_;  // the configured graph (summary.json)
  GossipGraph graph_;    // the graph over the live workers
  GossipModels models_;
  std::unique_ptr<GossipOuter> outer_;  // SlowMo; null when off
  std::unique_ptr<Model> model_;        // gradients and evaluations
  std::unique_ptr<ChocoGossip> choco_;  // CHOCO compressed gossip; null when off
  std::vector<float> work_params_, work_grads_;
  const Dataset test_;
  DelayModel delays_;
  Network net_;
  TrainSchedule schedule_;
  RunStops stops_;
  Membership membership_;
  CorePool cores_;  // sim.cores: the workers' compute
  EventQueue events_;
  std::vector<GWorker> workers_;
  // Messages on the network by tag, and delivered round messages by
  // (receiver, round, sender).
  std::map<int64_t, Message> in_flight_;
  std::map<std::array<int64_t, 3>, Message> inbox_;
  int64_t next_tag_ = 0;
  double net_due_ = kInf;
  double bytes_ = 0;
  double compress_cost_ = 0;  // CHOCO: seconds of encoding and decoding per round
  int period_ = 1;
  bool cta_ = false;
  double now_ = 0;
  GossipCounts counts_;
  int64_t rounds_ = 0, global_averages_ = 0;
  uint8_t average_due_ = 0;  // a global average's kGlobalDone is queued
  int64_t generation_ = 0;   // membership changes so far (round messages carry it)
  int64_t consecutive_nonfinite_ = 0;
  double last_row_time_ = 0, last_idle_ = 0, last_acc_ = 0;
  Network::Carried last_carried_{std::vector<double>(static_cast<size_t>(n_), 0.0),
                                 std::vector<double>(static_cast<size_t>(n_), 0.0)};
  double eval_real_ = 0;
};

}  // namespace

std::vector<std::pair<std::string, std::string>> GossipSimRuntime::resolve(const Job& job) {
  const Config& c = *job.config;
  std::vector<std::pair<std::string, std::string>> out;
  resolve_compute_time(job, &out);
  if (!c.compress.push.none() && c.compress.sim_ns_per_param < 0) {  // CHOCO
    std::unique_ptr<Model> model = job.make_model();
    out.push_back(
        {"compress.sim_ns_per_param",
         full(calibrate_compress_ns(c, model->param_shapes(), job.initial_params.size()))});
  }
  return out;
}

RunResult GossipSimRuntime::run(const Job& job, Recorder* recorder, Observer* observer) {
  check_job(job);
  Observer quiet;
  if (!observer) observer = &quiet;
  std::vector<std::pair<std::string, std::string>> resolved = resolve(job);
  std::optional<Config> with_costs;
  const Job j = with_resolved_costs(job, resolved, &with_costs);
  RunResult r = GossipRun(j, recorder, observer).run();
  r.resolved = std::move(resolved);
  return r;
}

}  // namespace hsgd
