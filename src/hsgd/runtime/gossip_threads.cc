#include "hsgd/runtime/gossip_threads.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <climits>
#include <cmath>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>

#include "hsgd/core/error.h"
#include "hsgd/core/rng.h"
#include "hsgd/core/simd.h"
#include "hsgd/core/topology.h"
#include "hsgd/optim/optimizer.h"
#include "hsgd/policy/gossip.h"
#include "hsgd/runtime/clock.h"
#include "hsgd/runtime/delay.h"
#include "hsgd/runtime/gossip_checkpoint.h"
#include "hsgd/runtime/gossip_choco.h"
#include "hsgd/runtime/gossip_outer.h"
#include "hsgd/runtime/gossip_row.h"
#include "hsgd/runtime/local_steps.h"
#include "hsgd/runtime/membership.h"
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
        initial(job.initial_params),
        topo(c.gossip.topology, c.gossip.weights, n, c.train.seed),
        graph(c.gossip.topology, c.gossip.weights, n, c.train.seed),
        membership(job, n),
        models(n, job.initial_params, gossip_local_update(c)),
        outer(GossipOuter::make(c, job.initial_params)),
        choco(ChocoGossip::make(c, job.make_model()->param_shapes(), job.initial_params, n)),
        sent(static_cast<size_t>(n), 0.0),
        received(static_cast<size_t>(n), 0.0),
        steps(static_cast<size_t>(n), 0),
        rounds(static_cast<size_t>(n), 0),
        inherited(static_cast<size_t>(n), 0),
        lives(static_cast<size_t>(n), 0),
        phases(static_cast<size_t>(n), kGossipBetween),
        idle(static_cast<size_t>(n), 0.0) {
    for (int i = 0; i < n; ++i) model_mu.push_back(std::make_unique<std::mutex>());
  }
  const Config& c;
  const int n;
  const size_t np;
  const std::vector<float>& initial;
  const Topology topo;  // the configured graph (its report; CHOCO's rows)
  // Membership (docs/gossip.md#membership). A leave or a join is carried
  // out by the worker itself, inside the gate, with every model_mu and then
  // crew.mu held (lock_models): so `graph` and `gen` may be read
  // under either a model_mu or crew.mu, and whatever a worker does under its
  // own model_mu (read the round, post it, take and combine it) is never cut
  // by a membership change.
  GossipGraph graph;      // the graph over the live workers
  Membership membership;  // under crew.mu
  int64_t gen = 0;        // the generation of rounds: membership changes so far
  GossipModels models;    // x_i, m_i, w_i: worker i's under model_mu[i]
  // SlowMo's state (null when off): used by the last worker to reach a
  // global average's barrier, with every model_mu held.
  std::unique_ptr<GossipOuter> outer;
  // CHOCO (null when off): worker i's public copy under model_mu[i].
  std::unique_ptr<ChocoGossip> choco;
  std::vector<std::unique_ptr<std::mutex>> model_mu;
  WorkerCrew crew;  // the threads, and crew.mu: it guards everything below
  std::map<std::array<int64_t, 3>, Mail> mailbox;  // (receiver, round, sender)
  GossipCounts counts;
  int64_t consecutive_nonfinite = 0, global_averages = 0;
  int barrier_count = 0;
  int64_t barrier_gen = 0;
  std::vector<double> sent, received;
  std::vector<int64_t> steps, rounds;
  std::vector<int64_t> inherited;  // steps taken over from donors at joins
  std::vector<int32_t> lives;      // joins of each worker so far (adpsgd's exchanges)
  // Where each worker is in its step (GossipPhase): changed only inside the
  // gate, so a pause sees every worker's as it is.
  std::vector<int32_t> phases;
  std::vector<double> idle;  // seconds each worker spent waiting
  SamplerCost sampler_cost;
  RunStops* stops = nullptr;
  const TrainSchedule* schedule = nullptr;
  TrainClock* clock = nullptr;
  const GossipThreadsRuntime::MembershipProbe* probe = nullptr;
};

// Every model_mu in id order (a membership change, a global average), to be
// followed by crew.mu.
std::vector<std::unique_lock<std::mutex>> lock_models(Shared& s) {
  std::vector<std::unique_lock<std::mutex>> all;
  for (auto& m : s.model_mu) all.emplace_back(*m);
  return all;
}

// A membership change (with every lock held): a new generation of rounds
// (a round is still named by the step it belongs to: see Worker::passed).
// The round messages of the old graph are void: push-sum shares are
// credited at once to their receiver (the heir, for the leaver's); a
// worker waiting for its in-peers sees `gen` change and ends its step with
// what it has.
void new_generation(Shared& s, int leaver, int heir) {
  ++s.gen;
  for (const auto& [key, m] : s.mailbox) {
    const int to = static_cast<int>(key[0]) == leaver ? heir : static_cast<int>(key[0]);
    if (s.c.policy.kind == "sgp" && key[2] != key[0] && to >= 0) {
      s.models.credit(to, m.payload, m.weight);
    }
  }
  s.mailbox.clear();
  s.crew.cv.notify_all();
}

// Gossip-PGA's global average (with every lock held, inside the gate): every
// live model is replaced by the average, and every worker's barrier ends.
void complete_global_average(Shared& s) {
  // Every live worker is at the barrier, past every round it takes: what
  // is left in the mailbox (parts posted, after a membership change, to a
  // worker that had passed their round) is push-sum mass, credited before
  // the average, or a model nobody combines.
  if (s.membership.faults_on()) {
    for (const auto& [key, m] : s.mailbox) {
      if (s.c.policy.kind == "sgp" && key[2] != key[0]) {
        s.models.credit(static_cast<int>(key[0]), m.payload, m.weight);
      }
    }
    s.mailbox.clear();
  }
  gossip_global_average(s.models, s.choco.get(), outer_hook(s.outer.get()));
  // As a ring all-reduce over the live workers would carry it.
  const int m = s.graph.live_count();
  const double bytes = 2.0 * (m - 1) / m * 4.0 * static_cast<double>(s.np);
  for (int w = 0; w < s.n; ++w) {
    s.phases[static_cast<size_t>(w)] = kGossipBetween;
    if (!s.graph.live(w)) continue;
    const int next = s.graph.successor(w);
    s.sent[static_cast<size_t>(w)] += bytes;
    if (next >= 0) s.received[static_cast<size_t>(next)] += bytes;
  }
  s.barrier_count = 0;
  ++s.barrier_gen;
  ++s.global_averages;
  s.crew.cv.notify_all();
}

// Posts worker `from`'s model (or push-sum share, or CHOCO message) to `to`
// for `round`, counted as `bytes` (-1: a model's, with the push-sum weight).
void post(Shared& s, int from, int to, int64_t round, std::span<const float> x, double weight,
          double bytes = -1) {
  Mail m;
  m.payload.assign(x.begin(), x.end());
  m.weight = weight;
  if (bytes < 0) {
    bytes = 4.0 * static_cast<double>(s.np) + (s.c.policy.kind == "sgp" ? 8.0 : 0.0);
  }
  std::lock_guard lk(s.crew.mu);
  s.mailbox[{to, round, from}] = std::move(m);
  s.sent[static_cast<size_t>(from)] += bytes;
  s.received[static_cast<size_t>(to)] += bytes;
  s.crew.cv.notify_all();
}

// One worker's loop. A step goes through the phases of GossipPhase, each
// entered afresh by a worker resumed from a checkpoint in it:
//   between   (inside the gate) cta posts the round; the gradient;
//   gradient  (inside) the run layer's rules (account); atc, pdsgdm and sgp
//             take the local step and post; adpsgd averages with its peer
//             and steps; a step without a round ends here;
//   round     the wait for the in-peers' parts (outside the gate, so an
//             evaluation or a checkpoint can pause every worker
//             meanwhile), then (inside) the parts are taken and combined;
//             cta takes its local step;
//   barrier   after every H-th step (gossip.global_every), outside.
// A stop leaves the worker in its phase, with what it holds (the gradient,
// the parts not yet taken): the final checkpoint saves it as it is.
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
    faults_ = s.membership.faults_on();
  }

  void run() {
    GateScope inside(s_.crew.gate);
    // Resumed out of the run (it had left, its rejoin not yet carried
    // out): it sits out first.
    if (faults_ && !live() && !sit_out(inside)) return end_run();
    // Resumed at the global average's barrier (or joined at it): that first.
    if (phase() == kGossipBarrier && !global_average(inside)) return end_run();
    while (inside.enter()) {
      if (s_.crew.stopped()) break;
      const bool gossip = kind_ != "adpsgd" && s_.n > 1 && (step_ + 1) % period_ == 0;
      if (phase() == kGossipBetween) {
        MembershipCause cause{};
        if (faults_ && fault_due(&cause)) {
          // It leaves before its gradient (lost), sits out until its
          // rejoin (outside the gate) and joins.
          leave(cause);
          inside.exit();
          if (!sit_out(inside)) break;
          if (phase() == kGossipBarrier && !global_average(inside)) break;
          continue;
        }
        {
          std::lock_guard lk(*s_.model_mu[static_cast<size_t>(id_)]);
          s_.models.debiased(id_, local_);
          if (cta_ && gossip) post_model();
        }
        const auto t0 = SteadyClock::now();
        Batch batch;
        loss_ = sampled_gradient(*model_, sampler_, c_.train.batch, &batch);
        batch_ = batch.size();
        const double delay = delays_.extra_seconds(id_, since(t0));
        if (delay > 0) {
          std::unique_lock lk(s_.crew.mu);
          s_.crew.cv.wait_for(lk, std::chrono::duration<double>(delay),
                              [&] { return s_.crew.stop; });
        }
        finite_ = std::isfinite(loss_) && all_finite(grads_);
        set_phase(kGossipGradient);
      }
      const float lr = static_cast<float>(lr_at(c_.lr_schedule, c_.optim.lr, step_));
      if (phase() == kGossipGradient) {
        // Past the budget, or stopped: the gradient stays in hand.
        if (!account(finite_)) break;
        if (kind_ == "adpsgd") {
          exchange();
          step(finite_, lr);
        } else if (!gossip) {
          step(finite_, lr);
        } else {
          if (!cta_) {
            std::lock_guard lk(*s_.model_mu[static_cast<size_t>(id_)]);
            if (finite_) s_.models.local_step(id_, grads_, lr);
            if (kind_ == "sgp") {
              post_shares();
            } else if (s_.choco) {
              post_choco();
            } else {
              post_model();
            }
          }
          set_phase(kGossipRound);
        }
      }
      if (phase() == kGossipRound) {
        // cta: a membership change since its post voided it; it posts its
        // model again in the new generation.
        if (cta_) {
          std::lock_guard lk(*s_.model_mu[static_cast<size_t>(id_)]);
          if (post_gen_ != s_.gen) post_model();
        }
        // The wait for the in-peers happens outside the gate, so an
        // evaluation or a checkpoint can pause every worker meanwhile; the
        // parts stay in the mailbox until taken inside it.
        inside.exit();
        if (!wait_for_round()) break;
        if (!inside.enter()) break;
        take_and_combine();
        if (cta_) step(finite_, lr);
      }
      finish();
      inside.exit();
      if (phase() == kGossipBarrier && !global_average(inside)) break;
    }
    end_run();
  }

  // The worker's part of a checkpoint (every worker paused between steps,
  // waiting outside the gate, or stopped), with crew.mu held.
  void save(StateWriter& w) const {
    GossipWorkerState st;
    st.step = step_;
    st.phase = s_.phases[static_cast<size_t>(id_)];
    st.loss = loss_;
    st.batch = batch_;
    st.finite = finite_ ? 1 : 0;
    st.pairing = rng_.state();
    st.idle = s_.idle[static_cast<size_t>(id_)];
    st.sent = s_.sent[static_cast<size_t>(id_)];
    st.received = s_.received[static_cast<size_t>(id_)];
    st.rounds = s_.rounds[static_cast<size_t>(id_)];
    for (auto it = s_.mailbox.lower_bound({id_, INT64_MIN, INT64_MIN});
         it != s_.mailbox.end() && it->first[0] == id_; ++it) {
      st.inbox.push_back(GossipMail{it->first[1], static_cast<int32_t>(it->first[2]),
                                    it->second.weight, it->second.payload});
    }
    const bool in_hand = st.phase == kGossipGradient || (st.phase == kGossipRound && cta_);
    save_gossip_worker(w, id_, s_.models, id_, sampler_, delays_, st,
                       in_hand ? std::span<const float>(grads_) : std::span<const float>());
  }
  // Its CHOCO state (gossip_choco-W), with crew.mu held.
  void save_choco(StateWriter& w) const { s_.choco->save_worker(id_, w); }
  void load_choco(StateReader& r) { s_.choco->load_worker(id_, r); }

  // Its membership bookkeeping (with crew.mu held, or before any thread
  // starts): the generation of its last post.
  int64_t post_gen() const { return post_gen_; }
  void set_post_gen(int64_t g) { post_gen_ = g; }

  // Restores the worker's part, before any thread starts (after the
  // membership, whose shards its sampler follows: Membership::sampler_for).
  void load(StateReader& r) {
    if (s_.membership.changed()) sampler_ = s_.membership.sampler_for(id_);
    GossipWorkerState st;
    const bool had =
        load_gossip_worker(r, id_, s_.n, s_.models, id_, sampler_, delays_, &st, grads_);
    const bool in_hand = st.phase == kGossipGradient || (st.phase == kGossipRound && cta_);
    if (had != in_hand)
      r.fail("corrupt (a gradient in hand where the phase holds none, or none where it does)");
    step_ = st.step;
    s_.phases[static_cast<size_t>(id_)] = st.phase;
    loss_ = st.loss;
    batch_ = st.batch;
    finite_ = st.finite != 0;
    rng_.set_state(st.pairing);
    s_.idle[static_cast<size_t>(id_)] = st.idle;
    s_.sent[static_cast<size_t>(id_)] = st.sent;
    s_.received[static_cast<size_t>(id_)] = st.received;
    s_.rounds[static_cast<size_t>(id_)] = st.rounds;
    s_.steps[static_cast<size_t>(id_)] = st.step;
    // The round it posted, when it is in one (its generation: the
    // membership part, set_post_gen).
    post_round_ = (step_ + 1) / period_ - 1;
    for (GossipMail& m : st.inbox) {
      s_.mailbox[{id_, m.round, m.from}] = Mail{std::move(m.payload), m.weight};
    }
  }

 private:
  int32_t phase() {
    std::lock_guard lk(s_.crew.mu);
    return s_.phases[static_cast<size_t>(id_)];
  }
  bool live() {
    std::lock_guard lk(s_.crew.mu);
    return s_.graph.live(id_);
  }
  void set_phase(int32_t p) {
    std::lock_guard lk(s_.crew.mu);
    s_.phases[static_cast<size_t>(id_)] = p;
  }
  void end_run() {
    std::lock_guard lk(s_.crew.mu);
    s_.sampler_cost += sampler_.cost;
  }

  // The posts below run with the worker's model_mu held: the generation and
  // round they post in, the graph's peers and the model are one cut.
  void begin_post() {
    post_gen_ = s_.gen;
    post_round_ = (step_ + 1) / period_ - 1;
  }

  void post_model() {
    begin_post();
    std::span<const float> x = s_.models.x(id_);
    for (int to : s_.graph.out_peers(id_, post_round_)) post(s_, id_, to, post_round_, x, 0);
  }

  // CHOCO: encodes the round (ChocoGossip::encode) and posts what it
  // decodes to to the out-peers, counted as the encoded bytes, and to its
  // own mailbox (not counted), where the round's combine takes it. (No
  // membership: refused with [faults].)
  void post_choco() {
    begin_post();
    std::vector<float> q(s_.np);
    std::string bytes;
    s_.choco->encode(id_, step_, s_.models.x(id_), &bytes, q);
    for (int to : s_.topo.out_peers(id_, post_round_)) {
      post(s_, id_, to, post_round_, q, 0, static_cast<double>(bytes.size()));
    }
    post(s_, id_, id_, post_round_, q, 0, 0);
  }

  // Push-sum: keeps one share of (x, w) and posts one to each out-peer.
  void post_shares() {
    begin_post();
    const std::vector<int> out = s_.graph.out_peers(id_, post_round_);
    const double share = 1.0 / (static_cast<double>(out.size()) + 1.0);
    for (float& v : s_.models.x(id_)) v = static_cast<float>(v * share);
    s_.models.weight(id_) *= share;
    std::span<const float> x = s_.models.x(id_);
    const double w = s_.models.weight(id_);
    for (int to : out) post(s_, id_, to, post_round_, x, w);
  }

  // The workers whose parts make the round (CHOCO: its own too), under a
  // model_mu or crew.mu.
  std::vector<int> round_from() const {
    if (!s_.choco) return s_.graph.in_peers(id_, post_round_);
    std::vector<int> from = s_.topo.in_peers(id_, post_round_);
    from.push_back(id_);
    std::sort(from.begin(), from.end());
    return from;
  }

  // Waits until every in-peer's part of its round is in the mailbox, or a
  // membership change voided the round. False when the run stopped.
  bool wait_for_round() {
    const auto t0 = SteadyClock::now();
    std::unique_lock lk(s_.crew.mu);
    s_.crew.cv.wait(lk, [&] {
      if (s_.crew.stop || s_.gen != post_gen_) return true;
      for (int j : round_from()) {
        if (!s_.mailbox.count({id_, post_round_, j}) && !passed(j, post_round_)) return false;
      }
      return true;
    });
    s_.idle[static_cast<size_t>(id_)] += since(t0);
    return !s_.crew.stop;
  }

  // Takes the parts of its round (inside the gate), in ascending sender
  // order, and combines them. A round voided by a membership change is not
  // combined: the step ends with what the worker has (mixing: its own
  // model; push-sum: its kept share and the shares credited to it).
  void take_and_combine() {
    std::lock_guard ml(*s_.model_mu[static_cast<size_t>(id_)]);
    std::vector<int> from;
    std::vector<Mail> mails;
    {
      std::lock_guard lk(s_.crew.mu);
      if (s_.gen != post_gen_) return;
      // Parts of earlier rounds posted to it after it passed them (their
      // sender took the step in this generation, it had ended it in the
      // last): push-sum credits them, mixing drops them.
      for (auto it = s_.mailbox.lower_bound({id_, INT64_MIN, INT64_MIN});
           it != s_.mailbox.end() && it->first[0] == id_ && it->first[1] < post_round_;) {
        if (kind_ == "sgp") s_.models.credit(id_, it->second.payload, it->second.weight);
        it = s_.mailbox.erase(it);
      }
      from = round_from();
      for (int j : from) {
        auto it = s_.mailbox.find({id_, post_round_, j});
        if (it == s_.mailbox.end()) {
          HSGD_ASSERT(passed(j, post_round_), "a gossip part taken before it came");
          mails.emplace_back();  // none: it passed the round
          continue;
        }
        mails.push_back(std::move(it->second));
        s_.mailbox.erase(it);
      }
      ++s_.rounds[static_cast<size_t>(id_)];
    }
    combine(post_round_, from, mails);
  }

  // Whether worker j took the step of `round` already (under crew.mu): in a
  // generation after a membership change, a worker that ended that step in
  // the last one (its round voided) does not post it again, so nobody waits
  // for its part.
  bool passed(int j, int64_t round) const {
    return s_.steps[static_cast<size_t>(j)] / period_ > round;
  }

  // With model_mu held.
  void combine(int64_t round, const std::vector<int>& from, const std::vector<Mail>& mails) {
    std::span<float> x = s_.models.x(id_);
    if (s_.choco) {  // `from` holds every worker of the mixing row, itself too
      const MixRow row = s_.topo.mixing_row(id_, round);
      std::vector<std::span<const float>> qs;
      for (const auto& [j, w] : row) {
        const size_t k = static_cast<size_t>(std::find(from.begin(), from.end(), j) - from.begin());
        HSGD_ASSERT(k < mails.size(), "a mixing weight for a worker that sent nothing");
        qs.push_back(mails[k].payload);
      }
      s_.choco->combine(id_, row, qs, x);
      return;
    }
    // An in-peer that passed the round sent nothing: mixing takes the
    // worker's own model in its place (the row still sums to 1); push-sum
    // has no share from it (its shares of the voided round were credited).
    const std::vector<float> own(x.begin(), x.end());
    const bool push_sum = kind_ == "sgp";
    std::vector<int> got;
    std::vector<std::span<const float>> parts;
    for (size_t k = 0; k < from.size(); ++k) {
      const bool none = mails[k].payload.empty();
      if (push_sum && none) continue;
      got.push_back(from[k]);
      parts.push_back(none ? std::span<const float>(own)
                           : std::span<const float>(mails[k].payload));
    }
    gossip_combine(s_.graph, id_, round, push_sum, x, own, got, parts);
    if (push_sum) {
      for (const Mail& m : mails) s_.models.weight(id_) += m.weight;
    }
  }

  // adpsgd: an active worker averages its model with its peer's under both
  // workers' locks, unless the peer left (or left and rejoined) since it
  // was picked: then the exchange is over, with no average.
  void exchange() {
    int peer = -1;
    int32_t life = 0;
    {
      std::lock_guard lk(s_.crew.mu);
      peer = hsgd::adpsgd_peer(s_.graph, id_, step_, rng_);
      if (peer < 0) return;
      life = s_.lives[static_cast<size_t>(peer)];
    }
    std::scoped_lock lk(*s_.model_mu[static_cast<size_t>(id_)],
                        *s_.model_mu[static_cast<size_t>(peer)]);
    if (!s_.graph.live(peer) || s_.lives[static_cast<size_t>(peer)] != life) return;
    s_.models.pair_average(id_, peer);
    std::lock_guard g(s_.crew.mu);
    const double bytes = 4.0 * static_cast<double>(s_.np);
    s_.sent[static_cast<size_t>(id_)] += bytes;
    s_.received[static_cast<size_t>(peer)] += bytes;
    s_.sent[static_cast<size_t>(peer)] += bytes;
    s_.received[static_cast<size_t>(id_)] += bytes;
  }

  // ---- membership (docs/gossip.md#membership), inside the gate
  // At the start of a step (under crew.mu): whether its fault plan makes it
  // leave now (a kill due, or this gradient throws); else its shard follows
  // the live set (Membership::refresh).
  bool fault_due(MembershipCause* cause) {
    std::lock_guard lk(s_.crew.mu);
    if (s_.crew.stop) return false;
    const FaultDue due = s_.membership.plan().next(id_, true);
    if (due.time <= s_.clock->seconds()) {
      *cause = due.cause;
      return true;
    }
    if (s_.membership.plan().gradient_throws(id_)) {
      *cause = MembershipCause::kException;
      return true;
    }
    s_.membership.refresh(id_, sampler_, c_.train.batch, s_.graph.live_mask(), false);
    return false;
  }

  // The worker leaves: the graph is rebuilt over the live workers, push-sum
  // gives its (x, w) and the shares posted to it to its live successor, a
  // new generation of rounds starts; a leave that completes a global
  // average's barrier does the average.
  void leave(MembershipCause cause) {
    auto all = lock_models(s_);
    std::lock_guard lk(s_.crew.mu);
    std::vector<char> live = s_.graph.live_mask();
    live[static_cast<size_t>(id_)] = 0;
    s_.graph.set_live(std::move(live));
    const int heir = kind_ == "sgp" ? s_.graph.successor(id_) : -1;
    s_.models.remove(id_, heir);
    new_generation(s_, id_, heir);
    const MembershipEvent e{s_.clock->seconds(), id_, false, cause, ""};
    recorded(e, heir);
    if (c_.gossip.global_every > 0 && s_.barrier_count > 0 &&
        s_.barrier_count >= s_.graph.live_count()) {
      complete_global_average(s_);
    }
  }

  // Outside the gate: waits for its rejoin on the training clock, then
  // joins. False when the run stops first (or no rejoin is due).
  bool sit_out(GateScope& inside) {
    MembershipCause cause{};
    {
      std::unique_lock lk(s_.crew.mu);
      for (;;) {
        if (s_.crew.stop) return false;
        const FaultDue due = s_.membership.plan().next(id_, false);
        const double now = s_.clock->seconds();
        if (due.time <= now) {
          cause = due.cause;
          break;
        }
        // The clock stands still during evaluations: wake at least every 50 ms.
        const double wait = std::isfinite(due.time) ? std::min(0.05, due.time - now) : 0.05;
        s_.crew.cv.wait_for(lk, std::chrono::duration<double>(wait));
      }
    }
    if (!inside.enter()) return false;
    const bool joined = join(cause);
    inside.exit();
    return joined;
  }

  // The worker joins from its live successor (GossipModels::join_from:
  // its model, sgp half its mass, momentum zero) at the successor's step,
  // with its shard of the live set; it joins the global average's barrier
  // when the successor is at it.
  bool join(MembershipCause cause) {
    auto all = lock_models(s_);
    std::lock_guard lk(s_.crew.mu);
    if (s_.crew.stop) return false;
    const auto i = static_cast<size_t>(id_);
    std::vector<char> live = s_.graph.live_mask();
    live[i] = 1;
    s_.graph.set_live(std::move(live));
    ++s_.lives[i];
    new_generation(s_, -1, -1);
    const int donor = s_.graph.successor(id_);
    if (donor >= 0) {
      s_.models.join_from(id_, donor, kind_ == "sgp");
      const int64_t at = s_.steps[static_cast<size_t>(donor)];
      s_.inherited[i] += at - step_;
      step_ = at;
      s_.steps[i] = at;
    } else {  // nobody live to learn from (train.min_workers = 0): the initial model
      std::copy(s_.initial.begin(), s_.initial.end(), s_.models.x(id_).begin());
      s_.models.weight(id_) = 1.0;
    }
    s_.membership.refresh(id_, sampler_, c_.train.batch, s_.graph.live_mask(), true);
    const bool at_barrier = donor >= 0 && s_.phases[static_cast<size_t>(donor)] == kGossipBarrier;
    s_.phases[i] = at_barrier ? kGossipBarrier : kGossipBetween;
    recorded(MembershipEvent{s_.clock->seconds(), id_, true, cause, ""}, donor);
    return true;
  }

  // After a leave or a join (every lock held): the log, train.min_workers,
  // the tests' probe.
  void recorded(const MembershipEvent& e, int other) {
    if (s_.stops->check_membership(s_.membership.record(e, s_.graph.live_count()))) {
      s_.crew.stop = true;
    }
    if (s_.probe && *s_.probe) (*s_.probe)(e, other, s_.models);
    s_.crew.cv.notify_all();
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

  // The step is done (inside the gate): counted; the next phase is the
  // global average's barrier after every H-th step.
  void finish() {
    ++step_;
    bool done = false;
    {
      std::lock_guard lk(s_.crew.mu);
      ++s_.counts.steps;
      s_.steps[static_cast<size_t>(id_)] = step_;
      if (finite_) {
        s_.counts.samples += batch_;
        s_.counts.loss_sum += loss_;
        ++s_.counts.loss_count;
      }
      const bool global =
          c_.gossip.global_every > 0 && s_.n > 1 && step_ % c_.gossip.global_every == 0;
      s_.phases[static_cast<size_t>(id_)] = global ? kGossipBarrier : kGossipBetween;
      done = s_.schedule->epochs_done(s_.counts.samples);
    }
    if (done) s_.crew.request_stop();
  }

  // Gossip-PGA: every live worker meets; the last to arrive averages every
  // live model and ends every worker's barrier phase (inside the gate, so
  // no evaluation or checkpoint sees half of it). A joiner may arrive
  // meanwhile (then the last is the joiner) and a leave may complete the
  // barrier (then the leaver averages). False when the run stopped.
  bool global_average(GateScope& inside) {
    const auto t0 = SteadyClock::now();
    std::unique_lock lk(s_.crew.mu);
    const int64_t gen = s_.barrier_gen;
    ++s_.barrier_count;
    s_.crew.cv.notify_all();
    for (;;) {
      s_.crew.cv.wait(lk, [&] {
        return s_.crew.stop || s_.barrier_gen != gen || s_.barrier_count >= s_.graph.live_count();
      });
      if (s_.crew.stop || s_.barrier_gen != gen) break;
      lk.unlock();
      if (!inside.enter()) return false;
      {
        auto all = lock_models(s_);
        std::lock_guard g(s_.crew.mu);
        if (s_.barrier_gen == gen && s_.barrier_count >= s_.graph.live_count()) {
          complete_global_average(s_);
        }
      }
      inside.exit();
      lk.lock();
    }
    s_.idle[static_cast<size_t>(id_)] += since(t0);
    return s_.barrier_gen != gen;
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
  bool faults_ = false;
  int64_t step_ = 0;
  // The generation and round of its last post (the round it waits for).
  int64_t post_gen_ = 0, post_round_ = 0;
  // The step in progress (phases gradient and round).
  double loss_ = 0;
  int64_t batch_ = 0;
  bool finite_ = true;
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
  s.probe = &on_membership;
  DelayModel delays(c.stragglers, n, c.train.seed);
  const Dataset test = head(*job.test, c.train.eval_samples);
  std::unique_ptr<Model> eval_model = job.make_model();
  std::vector<float> eval_params(s.np), eval_grads(s.np);
  eval_model->bind(eval_params, eval_grads);

  TrainClock clock;
  TrainSchedule schedule(c, job.train->size(), job.checkpoints != nullptr);
  RunStops stops(c);
  s.stops = &stops;
  s.schedule = &schedule;
  s.clock = &clock;
  GossipRunState rs;  // the rows' bookkeeping (counts, averages: in s)
  // Evaluates with every worker paused between steps.
  auto evaluate = [&](double time_s) {
    double idle_frac = 0;
    GossipCounts counts;
    {
      std::lock_guard lk(s.crew.mu);
      double idle = 0;
      for (double x : s.idle) idle += x;
      const double span = (time_s - rs.last_time) * n;
      idle_frac = span > 0 ? std::clamp((idle - rs.last_idle) / span, 0.0, 1.0) : 0.0;
      rs.last_idle = idle;
      counts = s.counts;
      s.counts.loss_sum = 0;
      s.counts.loss_count = 0;
      s.counts.nonfinite = 0;
    }
    const int live = s.membership.faults_on() ? s.graph.live_count() : -1;
    const MetricsRow r = gossip_row(c, s.models, *eval_model, eval_params, test, job.train->size(),
                                    time_s, counts, idle_frac, live);
    rs.last_time = time_s;
    rs.last_acc = r.test_acc;
    s.crew.record(r, eval_params, recorder, observer, stops);
    return r;
  };

  std::vector<std::unique_ptr<Worker>> workers;
  for (int w = 0; w < n; ++w) workers.push_back(std::make_unique<Worker>(w, job, s, delays));

  // A checkpoint of the state with every worker paused between steps (or
  // stopped) at training time t: its parts are streamed to their files now,
  // the checkpoint is complete once committed.
  struct Cut {
    CheckpointInfo info;
    std::optional<PendingCheckpoint> pending;
  };
  auto cut = [&](double t) {
    Cut k;
    std::lock_guard lk(s.crew.mu);
    k.info =
        gossip_cut_info(job.identity, "threads", n, t, s.counts.steps, recorder->rows().size());
    PendingCheckpoint& p = k.pending.emplace(job.checkpoints->begin());
    GossipRunState now = rs;
    now.counts = s.counts;
    now.consecutive_nonfinite = s.consecutive_nonfinite;
    now.global_averages = s.global_averages;
    p.add(kGossipRunBlob, [&](StateWriter& w) { save_gossip_run(w, n, now); });
    if (s.outer) p.add(kGossipOuterBlob, [&](StateWriter& w) { s.outer->save(w); });
    for (int w = 0; w < n; ++w) {
      p.add(gossip_worker_blob(w),
            [&](StateWriter& sw) { workers[static_cast<size_t>(w)]->save(sw); });
      if (s.choco) {
        p.add(gossip_choco_blob(w),
              [&](StateWriter& sw) { workers[static_cast<size_t>(w)]->save_choco(sw); });
      }
    }
    if (s.membership.faults_on()) {
      p.add(kGossipMembershipBlob, [&](StateWriter& w) {
        GossipLiveState live;
        live.gen = s.gen;
        live.live = s.graph.live_mask();
        for (const auto& wk : workers) live.post_gen.push_back(wk->post_gen());
        live.inherited = s.inherited;
        live.lives = s.lives;
        save_gossip_membership(w, live);
      });
      p.add("membership", [&](StateWriter& w) { s.membership.save(w); });
    }
    p.add(kRunBlob, save_run_state(stops, schedule));
    return k;
  };

  WorkerCrew::Resumed resumed;
  if (job.resume) {
    const Checkpoint& ck = *job.resume;
    check_gossip_checkpoint(ck, c.policy_name, "threads", n);
    check_gossip_membership(ck, c.policy_name, s.membership.faults_on());
    ck.read(kGossipRunBlob, [&](StateReader& r) { load_gossip_run(r, n, &rs); });
    if (s.membership.faults_on()) {
      // Before the workers: their samplers follow the shards of the live set.
      ck.read("membership", [&](StateReader& r) { s.membership.load(r); });
      GossipLiveState live;
      ck.read(kGossipMembershipBlob, [&](StateReader& r) { load_gossip_membership(r, n, &live); });
      s.gen = live.gen;
      s.graph.set_live(live.live);
      s.inherited = live.inherited;
      s.lives = live.lives;
      for (int w = 0; w < n; ++w) {
        workers[static_cast<size_t>(w)]->set_post_gen(live.post_gen[static_cast<size_t>(w)]);
      }
    }
    if (s.outer) ck.read(kGossipOuterBlob, [&](StateReader& r) { s.outer->load(r); });
    for (int w = 0; w < n; ++w) {
      ck.read(gossip_worker_blob(w),
              [&](StateReader& r) { workers[static_cast<size_t>(w)]->load(r); });
      if (s.choco) {
        require_choco_blob(ck, gossip_choco_blob(w));
        ck.read(gossip_choco_blob(w),
                [&](StateReader& r) { workers[static_cast<size_t>(w)]->load_choco(r); });
      }
    }
    for (int w = 0; w < n; ++w) {
      if (s.models.live(w) != s.graph.live(w)) {
        throw InputError(
            fmt::format("{}/{}.bin: corrupt (worker {} is {} there, its model says "
                        "otherwise)",
                        ck.path, kGossipMembershipBlob, w, s.graph.live(w) ? "live" : "out"));
      }
    }
    load_run_state(ck, stops, schedule);
    s.counts = rs.counts;
    s.consecutive_nonfinite = rs.consecutive_nonfinite;
    s.global_averages = rs.global_averages;
    resumed.at = ck.info.train_s;
    resumed.ended = schedule.past_budget(resumed.at) || schedule.epochs_done(s.counts.samples) ||
                    stops.stopped();
    resumed.last_acc = rs.last_acc;
  }
  open_outputs(job);
  WorkerCrew::Hooks hooks;
  hooks.evaluate = evaluate;
  hooks.progress = [&](Status* st) {
    std::lock_guard lk(s.crew.mu);
    st->updates = s.counts.steps;
    st->samples = s.counts.samples;
  };
  hooks.work = [&](int w) { workers[static_cast<size_t>(w)]->run(); };
  if (job.checkpoints) {
    hooks.checkpoint = [&](double t) {
      Cut k = cut(t);
      k.pending->commit(k.info);
    };
  }
  const WorkerCrew::End end =
      s.crew.run(n, clock, schedule, stops, observer, hooks, job.resume ? &resumed : nullptr);
  const double train_s = end.train_s;

  RunResult result;
  if (end.at_row) {
    result.last = recorder->rows().back();
    s.models.average(eval_params);
  } else {
    // The final checkpoint is the state at the end of training, before the
    // closing row; it is written only if the closing row finds no
    // divergence.
    std::optional<Cut> final_cut;
    if (job.checkpoints && stops.final_checkpoint_allowed()) final_cut = cut(train_s);
    result.last = evaluate(train_s);
    if (final_cut && stops.final_checkpoint_allowed()) final_cut->pending->commit(final_cut->info);
  }
  result.params.assign(eval_params.begin(), eval_params.end());
  result.stopped = stops.reason();
  result.train_s = result.last.time_s;
  result.real_train_s = train_s - resumed.at;
  result.gradients = s.counts.steps;
  result.wall_s = since(wall0);
  result.sampler_cost = s.sampler_cost;
  for (int w = 0; w < n; ++w) {
    result.worker_pushes.push_back(s.steps[static_cast<size_t>(w)] -
                                   s.inherited[static_cast<size_t>(w)]);
  }
  result.membership = s.membership.log();
  int64_t rounds = 0;
  for (int64_t r : s.rounds) rounds += r;
  result.gossip = gossip_result(c, s.topo, s.counts, rounds, s.global_averages, s.sent, s.received,
                                result.worker_pushes);
  return result;
}

}  // namespace hsgd
