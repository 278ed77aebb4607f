#include "hsgd/mpi/gossip.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "hsgd/core/error.h"
#include "hsgd/core/simd.h"
#include "hsgd/core/topology.h"
#include "hsgd/mpi/gossip_adpsgd.h"
#include "hsgd/mpi/gossip_eval.h"
#include "hsgd/mpi/roles.h"
#include "hsgd/mpi/transport.h"
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

namespace hsgd::mpi {
namespace {

// gossip_membership-W: "GSM1", the live mask (n bytes), the live ranks'
// steps, Membership::save.
constexpr uint32_t kMembershipPartTag = 0x47534d31;

// Reads a gossip_membership-W part into `live`, `lockstep` and
// `membership`; throws InputError (r.fail) when it is corrupt.
void load_membership_part(StateReader& r, int n, std::vector<char>* live, int64_t* lockstep,
                          Membership& membership) {
  r.expect_tag(kMembershipPartTag, "the live set");
  *live = r.get_vec<char>();
  if (live->size() != static_cast<size_t>(n)) r.fail("corrupt (a live set of another size)");
  if (std::none_of(live->begin(), live->end(), [](char c) { return c != 0; })) {
    r.fail("corrupt (a live set without a live rank)");
  }
  *lockstep = r.get<int64_t>();
  if (*lockstep < 0) r.fail("corrupt (the live ranks' steps)");
  membership.load(r);
}

// set_gossip_leave_for_test: rank -> the step after which it leaves.
std::vector<std::pair<int, int64_t>>& test_leaves() {
  static std::vector<std::pair<int, int64_t>> leaves;
  return leaves;
}

std::string names(const std::vector<int>& workers) {
  std::string out;
  for (int w : workers) out += (out.empty() ? "" : ", ") + worker_name(w, 0);
  return out.empty() ? "nobody" : out;
}

// One gossip round's messages of this rank: receives from the in-peers,
// sends to the out-peers. The model sent is read in place: the caller does
// not write it until wait() returns. A model (or a CHOCO message) travels
// in messages of at most mpi.chunk floats (transport.h, chunks_of; both
// ends split it alike, and MPI keeps the order of one sender's messages of
// one tag), as a push or a pull does: a message above the transport's
// eager limit waits for a handshake whose reply, over a rate-limited TCP
// link, queues behind the bulk data the replying rank is sending at the
// same time (docs/results-gossip.md, "Where the real time goes").
class Exchange {
 public:
  Exchange(MPI_Comm comm, int rank, size_t np, size_t chunk)
      : comm_(comm), rank_(rank), np_(np), chunk_(chunk) {}
  Exchange(const Exchange&) = delete;
  Exchange& operator=(const Exchange&) = delete;

  bool posted() const { return !reqs_.empty(); }

  // Posts round t. `weight` (push-sum: this rank's share, sent to every
  // out-peer) or null.
  void post(int64_t round, std::vector<int> from, const std::vector<int>& to,
            std::span<const float> x, const double* weight) {
    HSGD_ASSERT(!posted(), "a gossip round posted twice");
    round_ = round;
    from_ = std::move(from);
    to_ = to;
    parts_.resize(from_.size());
    weights_in_.assign(from_.size(), 0.0);
    const int model_tag = gossip_tag(kTagGossipModel, round);
    const int weight_tag = gossip_tag(kTagGossipWeight, round);
    MPI_Request r = MPI_REQUEST_NULL;
    const std::vector<Chunk> chunks = chunks_of(np_, chunk_);
    for (size_t k = 0; k < from_.size(); ++k) {
      parts_[k].resize(np_);
      for (const Chunk& c : chunks) {
        check(MPI_Irecv(parts_[k].data() + c.begin, as_count(c.size), MPI_FLOAT, from_[k],
                        model_tag, comm_, &r),
              "MPI_Irecv");
        reqs_.push_back(r);
      }
      if (weight != nullptr) {
        check(MPI_Irecv(&weights_in_[k], 1, MPI_DOUBLE, from_[k], weight_tag, comm_, &r),
              "MPI_Irecv");
        reqs_.push_back(r);
      }
    }
    if (weight != nullptr) send_weight_ = *weight;
    for (int j : to_) {
      for (const Chunk& c : chunks) {
        check(MPI_Isend(x.data() + c.begin, as_count(c.size), MPI_FLOAT, j, model_tag, comm_, &r),
              "MPI_Isend");
        reqs_.push_back(r);
      }
      if (weight != nullptr) {
        check(MPI_Isend(&send_weight_, 1, MPI_DOUBLE, j, weight_tag, comm_, &r), "MPI_Isend");
        reqs_.push_back(r);
      }
    }
    // Requests of a round with no peers: none; posted() stays false.
    if (reqs_.empty()) reqs_.push_back(MPI_REQUEST_NULL);
  }

  // CHOCO: posts round t's encoded message `bytes` (kept by the caller
  // until wait() returns) to the out-peers, and receives the in-peers',
  // `size` bytes each (every message of a codec has the same size).
  void post_bytes(int64_t round, std::vector<int> from, const std::vector<int>& to,
                  const std::string& bytes, size_t size) {
    HSGD_ASSERT(!posted(), "a gossip round posted twice");
    round_ = round;
    from_ = std::move(from);
    to_ = to;
    HSGD_ASSERT(bytes.size() == size, "a CHOCO message of another size");
    in_bytes_.assign(from_.size(), std::string(size, '\0'));
    const int tag = gossip_tag(kTagGossipModel, round);
    const std::vector<Chunk> chunks = chunks_of(size, chunk_ * sizeof(float));
    MPI_Request r = MPI_REQUEST_NULL;
    for (size_t k = 0; k < from_.size(); ++k) {
      for (const Chunk& c : chunks) {
        check(MPI_Irecv(in_bytes_[k].data() + c.begin, as_count(c.size), MPI_BYTE, from_[k], tag,
                        comm_, &r),
              "MPI_Irecv");
        reqs_.push_back(r);
      }
    }
    for (int j : to_) {
      for (const Chunk& c : chunks) {
        check(MPI_Isend(bytes.data() + c.begin, as_count(c.size), MPI_BYTE, j, tag, comm_, &r),
              "MPI_Isend");
        reqs_.push_back(r);
      }
    }
    if (reqs_.empty()) reqs_.push_back(MPI_REQUEST_NULL);
  }
  // CHOCO: what in-peer from()[k] sent.
  const std::string& bytes_in(size_t k) const { return in_bytes_[k]; }

  // Waits for every message of the posted round. Returns the seconds waited.
  double wait(double timeout) {
    const auto t0 = SteadyClock::now();
    wait_all(reqs_, timeout, [&] {
      return fmt::format("on {} in gossip round {}: receiving from {}, sending to {}",
                         worker_name(rank_, 0), round_, names(from_), names(to_));
    });
    reqs_.clear();
    return since(t0);
  }

  const std::vector<int>& from() const { return from_; }
  std::vector<std::span<const float>> parts() const {
    return std::vector<std::span<const float>>(parts_.begin(), parts_.end());
  }
  double weight_in(size_t k) const { return weights_in_[k]; }

 private:
  MPI_Comm comm_;
  int rank_;
  size_t np_;
  size_t chunk_;  // floats per message (mpi.chunk)
  int64_t round_ = 0;
  std::vector<int> from_, to_;
  std::vector<std::vector<float>> parts_;
  std::vector<double> weights_in_;
  std::vector<std::string> in_bytes_;  // CHOCO
  double send_weight_ = 0;
  std::vector<MPI_Request> reqs_;
};

// What every rank agrees on after a step: the sums of the ranks' steps and
// the largest training clock.
struct Agreed {
  double time = 0;
  bool stop_request = false;
  int64_t samples = 0, finite = 0, nonfinite = 0;
  double loss_sum = 0;
  std::vector<int> leavers;  // the ranks that leave at this step, ascending
};

class GossipRank {
 public:
  GossipRank(const Job& job, MPI_Comm comm, Recorder* recorder, Observer* observer)
      : job_(job),
        c_(*job.config),
        comm_(comm),
        timeout_(c_.mpi.timeout),
        np_(job.initial_params.size()),
        topo_(c_.gossip.topology, c_.gossip.weights, c_.train.workers, c_.train.seed),
        graph_(c_.gossip.topology, c_.gossip.weights, c_.train.workers, c_.train.seed),
        membership_(job, c_.train.workers),
        models_(1, job.initial_params, gossip_local_update(c_)),
        outer_(GossipOuter::make(c_, job.initial_params)),
        delays_(c_.stragglers, c_.train.workers, c_.train.seed),
        // Every rank takes the checkpoint decisions (job.checkpoints is rank 0's).
        schedule_(c_, job.train->size(), c_.train.checkpoint_every > 0),
        stops_(c_),
        recorder_(recorder),
        observer_(observer),
        evaluator_(job, comm, comm_rank(comm), recorder, observer) {
    rank_ = comm_rank(comm_);
    n_ = c_.train.workers;
    kind_ = c_.policy.kind;
    period_ = kind_ == "pdsgdm" ? std::max(1, c_.policy.k) : 1;
    cta_ = kind_ == "dpsgd" && c_.gossip.order == "cta";
    push_sum_ = kind_ == "sgp";
    message_bytes_ = 4.0 * static_cast<double>(np_) + (push_sum_ ? 8.0 : 0.0);
    sampler_ = std::make_unique<ShardSampler>(make_sampler(job, rank_));
    model_ = job.make_model();
    local_.resize(np_);
    grads_.resize(np_);
    model_->bind(local_, grads_);
    choco_ = ChocoGossip::make(c_, model_->param_shapes(), job.initial_params, 1, rank_);
    if (choco_) own_q_.resize(np_);
  }

  RunResult run() {
    const auto wall0 = SteadyClock::now();
    // A resume: every rank's state from rank 0's checkpoint (a refusal is
    // the same InputError on every rank, before anything is written).
    double start_s = 0;
    const bool resumed = restore(&start_s);
    if (rank_ == 0) open_outputs(job_);
    if (!resumed) evaluate(0.0);
    barrier();
    clock_.start(start_s);
    // A resumed run that had ended at its cut (budget, epochs, a stop)
    // takes no step.
    const bool ended = resumed && (schedule_.past_budget(start_s) ||
                                   schedule_.epochs_done(run_.counts.samples) || stops_.stopped());
    double last_status = 0;
    while (!diverged_ && !ended) {
      // A rank that left (dormant_) takes no step, no data and no round; it
      // enters every collective with a zero contribution.
      const bool gossip = !dormant_ && n_ > 1 && (step_ + 1) % period_ == 0;
      const int64_t round = (step_ + 1) / period_ - 1;
      Exchange ex(comm_, rank_, np_, static_cast<size_t>(c_.mpi.chunk));
      if (cta_ && gossip) post_model(ex, round);
      if (!dormant_ &&
          phase_ != kGossipGradient) {  // (resumed with its gradient in hand: that one)
        if (membership_.changed()) {    // the shard of the live set, from its next epoch
          membership_.refresh(rank_, *sampler_, c_.train.batch, graph_.live_mask(), false);
        }
        models_.debiased(0, local_);
        const auto t0 = SteadyClock::now();
        Batch batch;
        loss_ = sampled_gradient(*model_, *sampler_, c_.train.batch, &batch);
        batch_ = batch.size();
        const double delay = delays_.extra_seconds(rank_, since(t0));
        if (delay > 0) std::this_thread::sleep_for(std::chrono::duration<double>(delay));
        finite_ = std::isfinite(loss_) && all_finite(grads_);
        phase_ = kGossipGradient;
      }
      const bool finite = finite_;
      const Agreed a = agree(finite, batch_, loss_);
      // The run layer's decisions, on figures every rank holds alike.
      bool stop = a.stop_request || schedule_.past_budget(a.time);
      bool repost = false;
      if (!a.leavers.empty()) {
        // cta: the round posted over the old graph completes (every rank
        // posted its part) and is posted again over the live graph.
        if (ex.posted()) {
          idle_ += ex.wait(timeout_);
          repost = cta_ && gossip;
        }
        leave(a.leavers, a.time);
        stop = stop || stops_.stopped();
      }
      if (!stop && a.nonfinite > 0) {
        run_.counts.nonfinite += a.nonfinite;
        run_.consecutive_nonfinite = a.finite == 0 ? run_.consecutive_nonfinite + a.nonfinite : 0;
        // (not check_pushes: a request is this rank's alone until the next
        // agreement, and one rank stopping here alone would end its run)
        stop = stops_.check_nonfinite(run_.consecutive_nonfinite, run_.counts.steps, a.time);
      } else {
        run_.consecutive_nonfinite = 0;
      }
      if (!stop && schedule_.eval_due(a.time)) {
        clock_.pause();
        evaluate(a.time);
        clock_.resume();
        schedule_.eval_done(a.time);
        stop = diverged_;
      }
      if (stop) {
        // Every rank posted this round; the gradient stays in hand (the
        // final checkpoint keeps it, and the round is posted again).
        if (ex.posted()) ex.wait(timeout_);
        break;
      }
      const float lr = static_cast<float>(lr_at(c_.lr_schedule, c_.optim.lr, step_));
      if (dormant_) {
        // (no step)
      } else if (!gossip) {
        local_step(finite, lr);
      } else {
        if (repost) post_model(ex, round);
        if (!cta_) {
          local_step(finite, lr);
          if (push_sum_) {
            post_shares(ex, round);
          } else if (choco_) {
            post_choco(ex, round);
          } else {
            post_model(ex, round);
          }
        }
        idle_ += ex.wait(timeout_);
        combine(ex, round);
        if (cta_) local_step(finite, lr);
        ++rounds_;
      }
      run_.counts.steps += graph_.live_count();
      run_.counts.samples += a.samples;
      run_.counts.loss_sum += a.loss_sum;
      run_.counts.loss_count += a.finite;
      if (!dormant_) ++step_;
      ++lockstep_;
      phase_ = kGossipBetween;
      if (schedule_.epochs_done(run_.counts.samples)) break;
      if (c_.gossip.global_every > 0 && n_ > 1 && lockstep_ % c_.gossip.global_every == 0) {
        global_average();
      }
      // Every rank between steps, at the same step: a due checkpoint.
      if (schedule_.checkpoint_due(a.time)) {
        clock_.pause();
        schedule_.checkpoint_done(a.time);
        PendingCut cut = gather_cut();
        if (cut) cut->commit(cut_info(a.time));
        clock_.resume();
      }
      if (rank_ == 0 && a.time - last_status >= 0.5) {
        last_status = a.time;
        const Status st = gossip_status(run_.counts, a.time, run_.last_acc, job_.train->size());
        observer_->on_status(st);
      }
    }
    clock_.pause();
    double end = clock_.seconds();
    allreduce(&end, 1, MPI_MAX, "the end of training");
    const double train_s = ended ? start_s : schedule_.clamp(end);
    RunResult result;
    // The final checkpoint is the state at the end of training, before the
    // closing row; written only if that row finds no divergence.
    PendingCut final_cut;
    CheckpointInfo final_info;
    if (c_.train.checkpoint_every > 0 && !diverged_ && stops_.final_checkpoint_allowed()) {
      final_cut = gather_cut();
      if (rank_ == 0) final_info = cut_info(train_s);  // the rows before the closing one
    }
    if (!diverged_) evaluate(train_s);
    if (final_cut && !diverged_ && stops_.final_checkpoint_allowed()) final_cut->commit(final_info);
    gather_result(&result);
    evaluator_.finish_result(stops_, run_, train_s, start_s, since(wall0), &result);
    if (rank_ == 0) result.membership = membership_.log();
    return result;
  }

 private:
  // ---- checkpoints (runtime/gossip_checkpoint.h's layout, as on threads)
  using PendingCut = std::optional<PendingCheckpoint>;

  // This rank's part: its model, momentum and weight, step and phase, the
  // gradient in hand, sampler, delay stream and counters.
  std::string worker_bytes() const {
    GossipWorkerState st;
    st.step = step_;
    st.phase = phase_;
    st.loss = loss_;
    st.batch = batch_;
    st.finite = finite_ ? 1 : 0;
    st.idle = idle_;
    st.sent = sent_;
    st.received = received_;
    st.rounds = rounds_;
    StateWriter w;
    const std::span<const float> grad =
        phase_ == kGossipGradient ? std::span<const float>(grads_) : std::span<const float>();
    if (dormant_) {
      // A rank that left holds x = 0, m = 0, w = 0; its part says weight 1
      // (a weight is positive in the layout), its membership part that it
      // left (restore() puts the 0 back).
      GossipModels held = models_;
      held.weight(0) = 1.0;
      save_gossip_worker(w, rank_, held, 0, *sampler_, delays_, st, grad);
    } else {
      save_gossip_worker(w, rank_, models_, 0, *sampler_, delays_, st, grad);
    }
    return w.take();
  }

  // This rank's gossip_membership-W (only once a rank has left): the live
  // set, the steps every live rank has taken, and the membership (its log
  // and this rank's shard).
  std::string membership_bytes() const {
    StateWriter w;
    w.tag(kMembershipPartTag);
    w.put_vec(graph_.live_mask());
    w.put<int64_t>(lockstep_);
    membership_.save(w);
    return w.take();
  }

  // This rank's CHOCO part (gossip_choco-W).
  std::string choco_bytes() const {
    StateWriter w;
    choco_->save_worker(0, w);
    return w.take();
  }

  CheckpointInfo cut_info(double t) const {
    return gossip_cut_info(job_.identity, "mpi", n_, t, run_.counts.steps,
                           recorder_->rows().size());
  }

  // Collective, every rank between steps (or stopped, its gradient in
  // hand): rank 0 gathers every rank's part (gather_gossip_parts), then the
  // run's (alike on every rank) and the run layer's. The checkpoint is
  // complete once rank 0 commits it.
  PendingCut gather_cut() {
    // The live set only once a rank has left: a checkpoint of a run without
    // a leave is the one it always was.
    const bool members = membership_.changed();
    std::vector<std::string (*)(int)> blobs = {&gossip_worker_blob};
    if (choco_) blobs.push_back(&gossip_choco_blob);
    if (members) blobs.push_back(&gossip_membership_blob);
    PendingCut cut = gather_gossip_parts(job_, comm_, rank_, n_, timeout_, blobs, [&] {
      std::vector<std::string> parts = {worker_bytes()};
      if (choco_) parts.push_back(choco_bytes());
      if (members) parts.push_back(membership_bytes());
      return parts;
    });
    if (!cut) return cut;
    cut->add(kGossipRunBlob, [&](StateWriter& w) { save_gossip_run(w, n_, run_); });
    if (outer_) cut->add(kGossipOuterBlob, [&](StateWriter& w) { outer_->save(w); });
    cut->add(kRunBlob, save_run_state(stops_, schedule_));
    return cut;
  }

  // Collective (receive_gossip_resume): every rank restores its part of
  // rank 0's checkpoint. False for a fresh run. Throws InputError on every
  // rank when rank 0 refuses the checkpoint.
  bool restore(double* start_s) {
    const std::optional<ResumedGossipPart> part = receive_gossip_resume(
        job_, comm_, rank_, n_, timeout_, outer_ != nullptr, choco_ != nullptr);
    if (!part) return false;
    *start_s = part->start_s;
    const std::string where = fmt::format("{} (rank {})", "the resumed gossip state", rank_);
    if (!part->membership.empty()) {
      // A rank left before the cut: the live set, and this rank's shard
      // (its sampler rebuilt for it before its position is restored).
      StateReader mr(part->membership, where + ": " + gossip_membership_blob(rank_));
      std::vector<char> live;
      load_membership_part(mr, n_, &live, &lockstep_, membership_);
      mr.expect_end();
      graph_.set_live(live);
      dormant_ = !graph_.live(rank_);
      *sampler_ = membership_.sampler_for(rank_);
    }
    if (choco_) {
      StateReader cr(part->choco, where + ": " + gossip_choco_blob(rank_));
      choco_->load_worker(0, cr);
      cr.expect_end();
    }
    GossipWorkerState st;
    StateReader wr(part->worker, where + ": " + gossip_worker_blob(rank_));
    const bool in_hand =
        load_gossip_worker(wr, rank_, n_, models_, 0, *sampler_, delays_, &st, grads_);
    wr.expect_end();
    if (in_hand != (st.phase == kGossipGradient) ||
        (st.phase != kGossipBetween && st.phase != kGossipGradient) || !st.inbox.empty()) {
      wr.fail("corrupt (an mpi gossip rank is cut between steps or with its gradient in hand)");
    }
    if (dormant_) models_.remove(0, -1);  // its part said weight 1
    step_ = st.step;
    if (part->membership.empty()) lockstep_ = st.step;
    phase_ = st.phase;
    loss_ = st.loss;
    batch_ = st.batch;
    finite_ = st.finite != 0;
    idle_ = st.idle;
    sent_ = st.sent;
    received_ = st.received;
    rounds_ = st.rounds;
    StateReader gr(part->run, where + ": " + kGossipRunBlob);
    load_gossip_run(gr, n_, &run_);
    gr.expect_end();
    if (outer_) {
      StateReader orr(part->outer, where + ": " + kGossipOuterBlob);
      outer_->load(orr);
      orr.expect_end();
    }
    load_run_state(part->run_state, where + ": " + kRunBlob, *start_s, stops_, schedule_);
    return true;
  }

  void post_model(Exchange& ex, int64_t round) {
    const std::vector<int> to = graph_.out_peers(rank_, round);
    std::vector<int> from = graph_.in_peers(rank_, round);
    count_bytes(to.size(), from.size());
    ex.post(round, std::move(from), to, models_.x(0), nullptr);
  }

  // Push-sum: keeps one share of (x, w) and sends one to each out-peer.
  void post_shares(Exchange& ex, int64_t round) {
    const std::vector<int> to = graph_.out_peers(rank_, round);
    std::vector<int> from = graph_.in_peers(rank_, round);
    const double share = 1.0 / (static_cast<double>(to.size()) + 1.0);
    for (float& v : models_.x(0)) v = static_cast<float>(v * share);
    models_.weight(0) *= share;
    count_bytes(to.size(), from.size());
    const double w = models_.weight(0);
    ex.post(round, std::move(from), to, models_.x(0), &w);
  }

  // CHOCO: encodes the round (ChocoGossip::encode; own_q_ is what every
  // receiver decodes) and posts its bytes.
  void post_choco(Exchange& ex, int64_t round) {
    const std::vector<int> to = graph_.out_peers(rank_, round);
    std::vector<int> from = graph_.in_peers(rank_, round);
    choco_->encode(0, step_, models_.x(0), &choco_bytes_, own_q_);
    const size_t size = choco_->message_bytes();
    HSGD_ASSERT(choco_bytes_.size() == size, "a CHOCO message of another size than its codec's");
    sent_ += static_cast<double>(size * to.size());
    received_ += static_cast<double>(size * from.size());
    ex.post_bytes(round, std::move(from), to, choco_bytes_, size);
  }

  void count_bytes(size_t to, size_t from) {
    sent_ += message_bytes_ * static_cast<double>(to);
    received_ += message_bytes_ * static_cast<double>(from);
  }

  void combine(const Exchange& ex, int64_t round) {
    std::span<float> x = models_.x(0);
    if (choco_) {
      const MixRow row = graph_.mixing_row(rank_, round);
      const std::vector<int>& from = ex.from();
      in_q_.resize(from.size());
      std::vector<std::span<const float>> qs;
      for (const auto& [j, w] : row) {
        if (j == rank_) {
          qs.push_back(own_q_);
          continue;
        }
        const size_t k = static_cast<size_t>(std::find(from.begin(), from.end(), j) - from.begin());
        HSGD_ASSERT(k < from.size(), "a mixing weight for a rank that sent nothing");
        in_q_[k].resize(np_);
        choco_->decode(ex.bytes_in(k), in_q_[k],
                       fmt::format("CHOCO round {} from rank {}", round, j));
        qs.push_back(in_q_[k]);
      }
      choco_->combine(0, row, qs, x);
      return;
    }
    const std::vector<float> own(x.begin(), x.end());
    gossip_combine(graph_, rank_, round, push_sum_, x, own, ex.from(), ex.parts());
    if (push_sum_) {
      for (size_t k = 0; k < ex.from().size(); ++k) models_.weight(0) += ex.weight_in(k);
    }
  }

  void local_step(bool finite, float lr) {
    if (finite) models_.local_step(0, grads_, lr);
  }

  // Every rank's step, summed; the largest clock. Its wait is idle time.
  // A rank that left, or leaves at this step (its gradient is dropped),
  // adds nothing; the SUM's element 4 + r is 1 when rank r leaves now.
  Agreed agree(bool finite, int64_t batch, double loss) {
    const bool leaving = !dormant_ && leave_due();
    const bool counts = !dormant_ && !(leaving && !choco_);
    // On the heap (n + 4 doubles); left to leak when the wait times out, as
    // the collective may still write it.
    auto* buffer = new std::vector<double>(4 + static_cast<size_t>(n_), 0.0);
    std::vector<double>& sums = *buffer;
    if (counts) {
      sums[0] = finite ? static_cast<double>(batch) : 0.0;
      sums[1] = finite ? loss : 0.0;
      sums[2] = finite ? 1.0 : 0.0;
      sums[3] = finite ? 0.0 : 1.0;
    }
    if (leaving) sums[4 + static_cast<size_t>(rank_)] = 1.0;
    const bool request = stops_.check_request(/*at_evaluation=*/false);
    double maxes[2] = {clock_.seconds(), request ? 1.0 : 0.0};
    MPI_Request r[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    check(MPI_Iallreduce(MPI_IN_PLACE, sums.data(), as_count(sums.size()), MPI_DOUBLE, MPI_SUM,
                         comm_, &r[0]),
          "MPI_Iallreduce");
    check(MPI_Iallreduce(MPI_IN_PLACE, maxes, 2, MPI_DOUBLE, MPI_MAX, comm_, &r[1]),
          "MPI_Iallreduce");
    const auto t0 = SteadyClock::now();
    wait_all(r, timeout_, [&] {
      return fmt::format("on {} after step {}: the agreement of every rank's step (a collective)",
                         worker_name(rank_, 0), step_);
    });
    const std::unique_ptr<std::vector<double>> owned(buffer);
    if (!dormant_) idle_ += since(t0);
    Agreed a;
    a.samples = static_cast<int64_t>(sums[0]);
    a.loss_sum = sums[1];
    a.finite = static_cast<int64_t>(sums[2]);
    a.nonfinite = static_cast<int64_t>(sums[3]);
    a.time = maxes[0];
    a.stop_request = maxes[1] > 0;
    for (int i = 0; i < n_; ++i) {
      if (sums[4 + static_cast<size_t>(i)] > 0) a.leavers.push_back(i);
    }
    if (a.leavers.empty()) return a;
    // A leave the lockstep loop cannot carry out stops the whole run
    // instead: with CHOCO (every rank's public copy of its neighbours), or
    // when no rank would be left. Every rank records the same line (rank
    // 0's is the one reported).
    const int after = graph_.live_count() - static_cast<int>(a.leavers.size());
    if (choco_ || after < 1) {
      const std::string why =
          choco_ ? "with compress.push (CHOCO) a gossip rank does not leave alone on mpi"
                 : "no live rank would be left";
      stops_.request(fmt::format(
          "SIGTERM or SIGINT to {} after step {}: {}, so the whole run stopped there (resume it "
          "with --resume when checkpoints are on)",
          worker_name(a.leavers.back(), 0), lockstep_, why));
      a.stop_request = true;
      a.leavers.clear();
    }
    return a;
  }

  // Whether this live rank leaves at this step: SIGTERM or SIGINT
  // (leave_requested) or a test's set_gossip_leave_for_test.
  bool leave_due() const {
    if (leave_requested()) return true;
    for (const auto& [r, s] : test_leaves()) {
      if (r == rank_ && s == step_) return true;
    }
    return false;
  }

  // Every rank, at the same step: `leavers` leave the graph at training
  // time t, as on threads (runtime/gossip_threads.cc): the graph becomes
  // the live graph; sgp: each leaver's (x, w) goes to its live successor
  // (one message, mpi.timeout), so the sums of the models and the weights
  // stay; dpsgd, pdsgdm: the leaver's model and momentum are dropped. A
  // leaver drops the gradient in hand and goes dormant. Every rank records
  // the events (the log, the shards, train.min_workers) alike.
  void leave(const std::vector<int>& leavers, double t) {
    std::vector<char> live = graph_.live_mask();
    for (int r : leavers) live[static_cast<size_t>(r)] = 0;
    graph_.set_live(live);
    if (push_sum_) hand_over(leavers);
    if (std::find(leavers.begin(), leavers.end(), rank_) != leavers.end()) {
      models_.remove(0, -1);
      dormant_ = true;
      phase_ = kGossipBetween;  // the gradient in hand is dropped
    }
    const int m = graph_.live_count();
    for (size_t k = 0; k < leavers.size(); ++k) {
      const MembershipEvent e{t, leavers[k], false, MembershipCause::kSignal, ""};
      const int after = m + static_cast<int>(leavers.size() - 1 - k);
      stops_.check_membership(membership_.record(e, after));
    }
  }

  // sgp: every leaver sends its (x, w) to its live successor, which adds
  // them to its own in ascending leaver order.
  void hand_over(const std::vector<int>& leavers) {
    const std::vector<Chunk> chunks = chunks_of(np_, static_cast<size_t>(c_.mpi.chunk));
    std::vector<int> from;
    for (int r : leavers) {
      if (graph_.successor(r) == rank_) from.push_back(r);
    }
    // Left to leak when the wait times out (a receive may still write them).
    auto* buffers = new std::pair<std::vector<std::vector<float>>, std::vector<double>>(
        std::vector<std::vector<float>>(from.size(), std::vector<float>(np_)),
        std::vector<double>(from.size(), 0.0));
    std::vector<std::vector<float>>& xs = buffers->first;
    std::vector<double>& ws = buffers->second;
    std::vector<MPI_Request> reqs;
    MPI_Request q = MPI_REQUEST_NULL;
    for (size_t k = 0; k < from.size(); ++k) {
      for (const Chunk& c : chunks) {
        check(MPI_Irecv(xs[k].data() + c.begin, as_count(c.size), MPI_FLOAT, from[k],
                        kTagGossipLeave, comm_, &q),
              "MPI_Irecv");
        reqs.push_back(q);
      }
      check(MPI_Irecv(&ws[k], 1, MPI_DOUBLE, from[k], kTagGossipLeave, comm_, &q), "MPI_Irecv");
      reqs.push_back(q);
    }
    int heir = -1;
    if (std::find(leavers.begin(), leavers.end(), rank_) != leavers.end()) {
      heir = graph_.successor(rank_);
      const std::span<const float> x = models_.x(0);
      for (const Chunk& c : chunks) {
        check(MPI_Isend(x.data() + c.begin, as_count(c.size), MPI_FLOAT, heir, kTagGossipLeave,
                        comm_, &q),
              "MPI_Isend");
        reqs.push_back(q);
      }
      check(MPI_Isend(&models_.weight(0), 1, MPI_DOUBLE, heir, kTagGossipLeave, comm_, &q),
            "MPI_Isend");
      reqs.push_back(q);
    }
    if (reqs.empty()) {
      delete buffers;
      return;
    }
    wait_all(reqs, timeout_, [&] {
      return fmt::format("on {} after step {}: a leave (push-sum mass from {} to {})",
                         worker_name(rank_, 0), lockstep_, names(from),
                         heir < 0 ? "nobody" : worker_name(heir, 0));
    });
    const std::unique_ptr<std::pair<std::vector<std::vector<float>>, std::vector<double>>> owned(
        buffers);
    for (size_t k = 0; k < from.size(); ++k) models_.credit(0, xs[k], ws[k]);
  }

  // A collective of doubles, in place, with the deadline.
  void allreduce(double* v, size_t count, MPI_Op op, const char* what) {
    MPI_Request r = MPI_REQUEST_NULL;
    check(MPI_Iallreduce(MPI_IN_PLACE, v, as_count(count), MPI_DOUBLE, op, comm_, &r),
          "MPI_Iallreduce");
    wait_one(&r, timeout_, [&] {
      return fmt::format("on {} at {} (a collective of every rank)", worker_name(rank_, 0), what);
    });
  }

  void barrier() {
    MPI_Request r = MPI_REQUEST_NULL;
    check(MPI_Ibarrier(comm_, &r), "MPI_Ibarrier");
    wait_one(&r, timeout_, [&] {
      return fmt::format("on {} at the start of training (a barrier of every rank)",
                         worker_name(rank_, 0));
    });
  }

  // Gossip-PGA: every model becomes the average (weights 1).
  void global_average() {
    std::vector<double> sum(np_ + 1);
    std::span<float> x = models_.x(0);
    for (size_t p = 0; p < np_; ++p) sum[p] = x[p];
    sum[np_] = models_.weight(0);
    const auto t0 = SteadyClock::now();
    allreduce(sum.data(), sum.size(), MPI_SUM, "a global average (gossip.global_every)");
    if (dormant_) return;  // it entered with zeros, and stays out
    idle_ += since(t0);
    for (size_t p = 0; p < np_; ++p) x[p] = static_cast<float>(sum[p] / sum[np_]);
    if (outer_) outer_->apply(x);  // SlowMo: alike on every rank (the same average)
    models_.weight(0) = 1.0;
    // After a leave (GossipModels::global_average): w_i = W / m over the m
    // live ranks, x_i = x_bar w_i (push-sum keeps its total mass).
    const int m = graph_.live_count();
    if (m < n_) {
      const double wi = sum[np_] / m;
      for (size_t p = 0; p < np_; ++p) x[p] = static_cast<float>(x[p] * wi);
      models_.weight(0) = wi;
    }
    if (choco_) choco_->reset(0, x);  // every rank knows the average
    ++run_.global_averages;
    // As a ring all-reduce would carry it (gossip_threads.cc counts alike).
    const double bytes = 2.0 * (n_ - 1) / n_ * 4.0 * static_cast<double>(np_);
    sent_ += bytes;
    received_ += bytes;
  }

  // Collective (mpi/gossip_eval.h): the row at training time t; every rank
  // learns whether the run diverged.
  void evaluate(double t) {
    diverged_ = evaluator_.evaluate(t, models_, idle_, {}, {}, run_, stops_, plain_wait(),
                                    graph_.live_count());
  }

  // mpi/gossip_eval.h's waits: with the deadline, nothing else to do.
  GossipWait plain_wait() const {
    return [this](std::span<MPI_Request> reqs, const std::function<std::string()>& what) {
      wait_all(reqs, timeout_, what);
    };
  }

  void gather_result(RunResult* result) {
    evaluator_.gather_result(sent_, received_, step_, rounds_, topo_, run_, result, plain_wait());
  }

  const Job& job_;
  const Config& c_;
  MPI_Comm comm_;
  double timeout_;
  size_t np_;
  Topology topo_;                         // the configured graph (summary.json's gossip)
  GossipGraph graph_;                     // the graph over the live ranks
  Membership membership_;                 // the log, the shards, train.min_workers
  bool dormant_ = false;                  // this rank left: no step, zero contributions
  int64_t lockstep_ = 0;                  // steps of the live ranks (every rank counts them)
  GossipModels models_;                   // this rank's x, m, w (worker 0 of one)
  std::unique_ptr<GossipOuter> outer_;    // SlowMo (null when off): alike on every rank
  std::unique_ptr<ChocoGossip> choco_;    // CHOCO (null when off): this rank's public copy
  std::string choco_bytes_;               // CHOCO: the round's message, sent in place
  std::vector<float> own_q_;              // CHOCO: the round's own message, decoded
  std::vector<std::vector<float>> in_q_;  // CHOCO: the in-peers' messages, decoded
  DelayModel delays_;
  TrainSchedule schedule_;
  RunStops stops_;
  TrainClock clock_;
  Recorder* recorder_;
  Observer* observer_;
  int rank_ = 0, n_ = 1;
  std::string kind_;
  int period_ = 1;
  bool cta_ = false, push_sum_ = false;
  double message_bytes_ = 0;
  std::unique_ptr<ShardSampler> sampler_;
  std::unique_ptr<Model> model_;
  std::vector<float> local_, grads_;
  int64_t step_ = 0;
  int32_t phase_ = kGossipBetween;  // kGossipGradient: the gradient below is in hand
  double loss_ = 0;
  int64_t batch_ = 0;
  bool finite_ = true;
  // The run's counters (every rank's steps, samples, losses; the last
  // row's), alike on every rank (the agreements); a checkpoint's gossip_run.
  GossipRunState run_;
  int64_t rounds_ = 0;
  double sent_ = 0, received_ = 0, idle_ = 0;
  bool diverged_ = false;
  GossipEvaluator evaluator_;  // the rows and the end (mpi/gossip_eval.h)
};

}  // namespace

void check_gossip_launch(const Job& job, int ranks) {
  const Config& c = *job.config;
  const std::string policy = "policy.name = '" + c.policy_name + "'";
  if (c.train.workers != ranks) {
    throw InputError(fmt::format(
        "train.workers = {}: under the mpi runtime {} runs one worker on every rank (no server "
        "ranks), and mpirun started {} (-np {}); expected train.workers = {}",
        c.train.workers, policy, ranks, ranks, ranks));
  }
  if (job_params(job) > static_cast<int64_t>(INT_MAX) - 2) {
    throw InputError(
        fmt::format("{}: a model of {} parameters is larger than one MPI message ({} floats)",
                    policy, job_params(job), INT_MAX));
  }
}

void check_gossip_resume(const Job& job, const Checkpoint& ck, int ranks) {
  const Config& c = *job.config;
  check_gossip_checkpoint(ck, c.policy_name, "mpi", ranks);
  // Every part decoded as the ranks will, into objects then dropped.
  GossipModels models(1, job.initial_params, gossip_local_update(c));
  DelayModel delays(c.stragglers, ranks, c.train.seed);
  std::vector<float> grad(job.initial_params.size());
  for (int w = 0; w < ranks; ++w) {
    ShardSampler sampler = make_sampler(job, w);
    if (ck.has(gossip_membership_blob(w))) {  // a rank had left: the shard of its live set
      Membership membership(job, ranks);
      ck.read(gossip_membership_blob(w), [&](StateReader& r) {
        std::vector<char> live;
        int64_t lockstep = 0;
        load_membership_part(r, ranks, &live, &lockstep, membership);
      });
      sampler = membership.sampler_for(w);
    } else if (w > 0 && ck.has(gossip_membership_blob(0))) {
      throw InputError(fmt::format("{}: incomplete gossip checkpoint (no {}.bin)", ck.path,
                                   gossip_membership_blob(w)));
    }
    GossipWorkerState st;
    ck.read(gossip_worker_blob(w), [&](StateReader& r) {
      const bool in_hand = load_gossip_worker(r, w, ranks, models, 0, sampler, delays, &st, grad);
      if (!models.live(0)) r.fail("corrupt (a rank out of the run: mpi has no membership)");
      if (in_hand != (st.phase == kGossipGradient) ||
          (st.phase != kGossipBetween && st.phase != kGossipGradient) || !st.inbox.empty()) {
        r.fail("corrupt (an mpi gossip rank is cut between steps or with its gradient in hand)");
      }
    });
  }
  GossipRunState rs;
  ck.read(kGossipRunBlob, [&](StateReader& r) { load_gossip_run(r, ranks, &rs); });
  if (std::unique_ptr<GossipOuter> outer = GossipOuter::make(c, job.initial_params)) {
    ck.read(kGossipOuterBlob, [&](StateReader& r) { outer->load(r); });
  }
  if (std::unique_ptr<ChocoGossip> choco =
          ChocoGossip::make(c, job.make_model()->param_shapes(), job.initial_params, 1)) {
    for (int w = 0; w < ranks; ++w) {
      require_choco_blob(ck, gossip_choco_blob(w));
      ck.read(gossip_choco_blob(w), [&](StateReader& r) { choco->load_worker(0, r); });
    }
  }
  RunStops stops(c);
  TrainSchedule schedule(c, job.train->size(), c.train.checkpoint_every > 0);
  load_run_state(ck, stops, schedule);
}

void set_gossip_leave_for_test(int rank, int64_t step) {
  if (rank < 0) {
    test_leaves().clear();
    return;
  }
  test_leaves().emplace_back(rank, step);
}

RunResult run_gossip(const Job& job, MPI_Comm comm, Recorder* recorder, Observer* observer) {
  HSGD_ASSERT(job.train && job.test && job.make_model, "incomplete job");
  int ranks = 0;
  check(MPI_Comm_size(comm, &ranks), "MPI_Comm_size");
  check_gossip_launch(job, ranks);
  check_job(job);
  Observer quiet;
  if (job.config->policy.kind == "adpsgd") {
    return run_adpsgd(job, comm, recorder, observer ? observer : &quiet);
  }
  GossipRank rank(job, comm, recorder, observer ? observer : &quiet);
  return rank.run();
}

}  // namespace hsgd::mpi
