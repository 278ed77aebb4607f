#include "hsgd/mpi/gossip_adpsgd.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <exception>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "hsgd/core/error.h"
#include "hsgd/core/rng.h"
#include "hsgd/core/simd.h"
#include "hsgd/core/topology.h"
#include "hsgd/mpi/gossip_eval.h"
#include "hsgd/mpi/roles.h"
#include "hsgd/mpi/transport.h"
#include "hsgd/optim/optimizer.h"
#include "hsgd/policy/gossip.h"
#include "hsgd/runtime/clock.h"
#include "hsgd/runtime/delay.h"
#include "hsgd/runtime/gossip_checkpoint.h"
#include "hsgd/runtime/gossip_row.h"
#include "hsgd/runtime/local_steps.h"
#include "hsgd/runtime/run_control.h"

namespace hsgd::mpi {
namespace {

// One gradient at a time off the rank's MPI thread. start() hands it the
// inputs written before the call; done() (true once it finished) hands
// back what it wrote, and rethrows an exception it threw. Thread-safe; the
// inputs and outputs themselves belong to the gradient thread from start()
// until done() returns true.
class GradientThread {
 public:
  explicit GradientThread(std::function<void(GradientThread&)> compute)
      : compute_(std::move(compute)), thread_([this] { loop(); }) {}
  ~GradientThread() {
    stop();
    thread_.join();
  }
  GradientThread(const GradientThread&) = delete;
  GradientThread& operator=(const GradientThread&) = delete;

  void start() {
    std::lock_guard lk(mu_);
    HSGD_ASSERT(!busy_, "a gradient started while one is in progress");
    busy_ = true;
    cv_.notify_all();
  }
  bool done() { return wait_done(0); }
  // Waits up to `seconds` for the gradient to be done, without using the
  // core: whether it is.
  bool wait_done(double seconds) {
    std::unique_lock lk(mu_);
    if (seconds > 0) {
      cv_.wait_for(lk, std::chrono::duration<double>(seconds), [&] { return !busy_ || error_; });
    }
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
    return !busy_;
  }
  // The thread ends after the gradient in progress; a delay being slept is
  // cut short.
  void stop() {
    std::lock_guard lk(mu_);
    stop_ = true;
    cv_.notify_all();
  }
  // On the gradient thread: sleeps `seconds`, less if stopped.
  void sleep(double seconds) {
    std::unique_lock lk(mu_);
    cv_.wait_for(lk, std::chrono::duration<double>(seconds), [&] { return stop_; });
  }

 private:
  void loop() {
    std::unique_lock lk(mu_);
    for (;;) {
      cv_.wait(lk, [&] { return stop_ || busy_; });
      if (stop_) return;
      lk.unlock();
      std::exception_ptr error;
      try {
        compute_(*this);
      } catch (...) {
        error = std::current_exception();
      }
      lk.lock();
      error_ = error;
      busy_ = false;
      cv_.notify_all();
    }
  }
  std::function<void(GradientThread&)> compute_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool busy_ = false, stop_ = false;
  std::exception_ptr error_;
  std::thread thread_;  // last: it starts once the rest is built
};

// A rank's cumulative counts, as sent to rank 0 after its steps.
enum Report : size_t { kSteps, kSamples, kLossSum, kLossCount, kNonfinite, kTrailing, kRequest };
using ReportValues = std::array<double, 7>;

// Sends this rank posted and not yet complete, with their buffers.
struct Outgoing {
  std::vector<MPI_Request> reqs;
  int64_t header = 0;
  std::shared_ptr<const std::vector<float>> model;
};

// How long the MPI thread, with nothing to do while its gradient is
// computed, sleeps between looks at its messages: a request waits at most
// about this long (plus the sleep's overshoot, ~0.1 ms here) for an answer.
constexpr double kPollS = 100e-6;

class AdpsgdRank {
 public:
  AdpsgdRank(const Job& job, MPI_Comm comm, Recorder* recorder, Observer* observer)
      : job_(job),
        c_(*job.config),
        comm_(comm),
        timeout_(c_.mpi.timeout),
        np_(job.initial_params.size()),
        chunks_(chunks_of(np_, static_cast<size_t>(c_.mpi.chunk))),
        model_bytes_(4.0 * static_cast<double>(np_)),
        topo_(c_.gossip.topology, c_.gossip.weights, c_.train.workers, c_.train.seed),
        models_(1, job.initial_params, gossip_local_update(c_)),
        delays_(c_.stragglers, c_.train.workers, c_.train.seed),
        schedule_(c_, job.train->size(), c_.train.checkpoint_every > 0),
        stops_(c_),
        recorder_(recorder),
        observer_(observer),
        evaluator_(job, comm, comm_rank(comm), recorder, observer) {
    rank_ = comm_rank(comm_);
    n_ = c_.train.workers;
    // The same pairing stream as the threads runtime's worker.
    rng_ = Rng(c_.train.seed, 0x676f73736970ULL + static_cast<uint64_t>(rank_));
    sampler_ = std::make_unique<ShardSampler>(make_sampler(job, rank_));
    model_ = job.make_model();
    local_.resize(np_);
    grads_.resize(np_);
    in_.resize(np_);
    model_->bind(local_, grads_);
    latest_.assign(static_cast<size_t>(n_), ReportValues{});
    reports_got_.assign(static_cast<size_t>(n_), 0);
  }

  RunResult run() {
    const auto wall0 = SteadyClock::now();
    // A resume: every rank's state from rank 0's checkpoint (a refusal is
    // the same InputError on every rank, before anything is written).
    double start_s = 0;
    const bool resumed = restore(&start_s);
    if (rank_ == 0) open_outputs(job_);
    post_receives();
    grad_ = std::make_unique<GradientThread>([this](GradientThread& g) { compute(g); });
    frozen_ = true;
    if (!resumed) diverged_ = evaluate(0.0);
    barrier();
    frozen_ = false;
    clock_.start(start_s);
    start_s_ = end_s_ = start_s;
    // A resumed run that had ended at its cut (budget, epochs, a stop)
    // takes no step; one cut with its gradient in hand takes that first.
    if (resumed && (schedule_.past_budget(start_s) || schedule_.epochs_done(run_.counts.samples) ||
                    stops_.stopped())) {
      stopping_ = true;
    } else if (!diverged_) {
      if (resumed) {
        on_gradient();
      } else {
        start_gradient();
      }
    }
    Backoff backoff;
    double last_status = 0;
    for (;;) {
      serve();
      if (waiting_) {  // (an exchange started is finished, whatever else happens)
        if (exchange_done()) {
          finish_step();
          backoff.reset();
        } else {
          backoff.idle();
        }
        continue;
      }
      const double now = clock_.seconds();
      // Stopped, or a row or a cut before the budget: every rank meets. A
      // meeting that finds the run stopped (another rank's stop, met at
      // this rank's row) is this rank's last: every rank ends after it.
      if (stopping_ || diverged_ || schedule_.eval_due(now) || schedule_.checkpoint_due(now)) {
        if (!meet()) break;
        backoff.reset();
        continue;
      }
      if (schedule_.past_budget(now)) {  // the gradient in progress is dropped
        stopping_ = true;
        continue;
      }
      if (grad_->done()) {
        on_gradient();
        backoff.reset();
        continue;
      }
      if (rank_ == 0 && now - last_status >= 0.5) {
        last_status = now;
        observer_->on_status(gossip_status(streamed_, now, run_.last_acc, job_.train->size()));
      }
      // Nothing to do but answer: the core is left to the gradient thread,
      // and the MPI thread looks again within kPollS (or when the gradient
      // is done).
      grad_->wait_done(kPollS);
    }
    return finish(wall0);
  }

 private:
  // ---- the steps (on the MPI thread)

  // The model's snapshot, then the gradient thread computes at it.
  void start_gradient() {
    models_.debiased(0, local_);
    grad_->start();
  }

  // On the gradient thread.
  void compute(GradientThread& g) {
    const auto t0 = SteadyClock::now();
    Batch batch;
    loss_ = sampled_gradient(*model_, *sampler_, c_.train.batch, &batch);
    batch_ = batch.size();
    const double delay = delays_.extra_seconds(rank_, since(t0));
    if (delay > 0) g.sleep(delay);
    finite_ = std::isfinite(loss_) && all_finite(grads_);
  }

  // The gradient is in: past the budget it is dropped; otherwise the step
  // counts (sent to rank 0), then the exchange (active) and the update.
  void on_gradient() {
    if (schedule_.past_budget(clock_.seconds())) {
      stopping_ = true;
      return;
    }
    ++mine_.steps;
    if (finite_) {
      mine_.samples += batch_;
      mine_.loss_sum += loss_;
      ++mine_.loss_count;
      trailing_ = 0;
    } else {
      ++mine_.nonfinite;
      ++trailing_;
    }
    request_ = request_ || stops_.check_request(/*at_evaluation=*/false);
    report_due_ = true;
    send_report();
    const int peer = adpsgd_peer(topo_, rank_, step_, rng_);
    if (peer < 0) {
      finish_step();
    } else {
      begin_exchange(peer);
    }
  }

  void finish_step() {
    const float lr = static_cast<float>(lr_at(c_.lr_schedule, c_.optim.lr, step_));
    if (finite_) models_.local_step(0, grads_, lr);
    ++step_;
    start_gradient();
  }

  // ---- the pairwise exchange

  void begin_exchange(int peer) {
    std::span<const float> x = models_.x(0);
    sent_model_ = std::make_shared<const std::vector<float>>(x.begin(), x.end());
    post_send(peer, kTagAdpsgdRequest, step_, kTagAdpsgdModel, sent_model_);
    sent_ += model_bytes_;
    check(MPI_Irecv(&reply_header_, 1, MPI_INT64_T, peer, kTagAdpsgdReply, comm_, &reply_in_),
          "MPI_Irecv");
    peer_ = peer;
    waiting_ = true;
    own_changed_ = false;
    wait_since_ = SteadyClock::now();
  }

  // Whether the reply to this rank's request came (and was taken).
  bool exchange_done() {
    int flag = 0;
    check(MPI_Test(&reply_in_, &flag, MPI_STATUS_IGNORE), "MPI_Test");
    if (!flag) {
      if (since(wait_since_) > timeout_) {
        throw MpiError(fmt::format(
            "timed out after {} s on {} in an adpsgd exchange: waiting for the reply of {}",
            timeout_, worker_name(rank_, 0), worker_name(peer_, 0)));
      }
      return false;
    }
    if (reply_header_ != 0) {
      receive_model(peer_, kTagAdpsgdReplyModel, "the model of its adpsgd reply");
      received_ += model_bytes_;
      std::span<float> x = models_.x(0);
      const std::vector<float>& sent = *sent_model_;
      for (size_t p = 0; p < np_; ++p) {
        // The passive side's average, bit for bit (GossipModels::pair_average);
        // had this rank averaged with another meanwhile, the half-difference.
        const float avg = static_cast<float>((static_cast<double>(sent[p]) + in_[p]) * 0.5);
        x[p] = own_changed_ ? static_cast<float>(x[p] + (static_cast<double>(avg) - sent[p])) : avg;
      }
    }
    waiting_ = false;
    sent_model_.reset();
    idle_ += since(wait_since_);
    return true;
  }

  // A request from `from`: the average, unless this rank is at a row or
  // stopped; the reply either way.
  void answer(int from) {
    receive_model(from, kTagAdpsgdModel, "the model of its adpsgd request");
    received_ += model_bytes_;
    if (frozen_ || stopping_) {
      post_send(from, kTagAdpsgdReply, 0, 0, nullptr);
      return;
    }
    std::span<float> x = models_.x(0);
    auto before = std::make_shared<const std::vector<float>>(x.begin(), x.end());
    for (size_t p = 0; p < np_; ++p) {
      x[p] = static_cast<float>((static_cast<double>(x[p]) + in_[p]) * 0.5);
    }
    if (waiting_) own_changed_ = true;
    post_send(from, kTagAdpsgdReply, 1, kTagAdpsgdReplyModel, std::move(before));
    sent_ += model_bytes_;
  }

  // A model from `from` into in_, in chunks (sent right after the header
  // that announced it).
  void receive_model(int from, int tag, const char* what) {
    std::vector<MPI_Request> reqs;
    for (const Chunk& ch : chunks_) {
      MPI_Request r = MPI_REQUEST_NULL;
      check(MPI_Irecv(in_.data() + ch.begin, as_count(ch.size), MPI_FLOAT, from, tag, comm_, &r),
            "MPI_Irecv");
      reqs.push_back(r);
    }
    wait_all(reqs, timeout_, [&] {
      return fmt::format("on {} receiving from {}: {}", worker_name(rank_, 0), worker_name(from, 0),
                         what);
    });
  }

  // A header and, with `model`, the model in chunks; completed by serve().
  void post_send(int to, int header_tag, int64_t header, int model_tag,
                 std::shared_ptr<const std::vector<float>> model) {
    Outgoing& o = out_.emplace_back();
    o.header = header;
    o.model = std::move(model);
    MPI_Request r = MPI_REQUEST_NULL;
    check(MPI_Isend(&o.header, 1, MPI_INT64_T, to, header_tag, comm_, &r), "MPI_Isend");
    o.reqs.push_back(r);
    if (!o.model) return;
    for (const Chunk& ch : chunks_) {
      check(MPI_Isend(o.model->data() + ch.begin, as_count(ch.size), MPI_FLOAT, to, model_tag,
                      comm_, &r),
            "MPI_Isend");
      o.reqs.push_back(r);
    }
  }

  // ---- what the MPI thread answers whatever it waits for

  void post_receives() {
    post_request_recv();
    if (rank_ == 0) {
      post_progress_recv();
    } else {
      check(MPI_Irecv(&stop_in_flag_, 1, MPI_INT, 0, kTagAdpsgdStop, comm_, &stop_in_),
            "MPI_Irecv");
    }
  }
  void post_request_recv() {
    check(MPI_Irecv(&request_header_, 1, MPI_INT64_T, MPI_ANY_SOURCE, kTagAdpsgdRequest, comm_,
                    &request_in_),
          "MPI_Irecv");
  }
  void post_progress_recv() {
    check(MPI_Irecv(progress_in_buf_.data(), as_count(progress_in_buf_.size()), MPI_DOUBLE,
                    MPI_ANY_SOURCE, kTagAdpsgdProgress, comm_, &progress_in_),
          "MPI_Irecv");
  }

  // Requests, counts (rank 0), the stop (the others), and this rank's sends.
  void serve() {
    HSGD_ASSERT(!drained_, "served after the end");
    for (;;) {
      int flag = 0;
      MPI_Status st;
      check(MPI_Test(&request_in_, &flag, &st), "MPI_Test");
      if (!flag) break;
      answer(st.MPI_SOURCE);
      post_request_recv();
    }
    if (rank_ == 0) {
      for (;;) {
        int flag = 0;
        MPI_Status st;
        check(MPI_Test(&progress_in_, &flag, &st), "MPI_Test");
        if (!flag) break;
        take_report(st.MPI_SOURCE, progress_in_buf_);
        post_progress_recv();
      }
    } else if (stop_in_ != MPI_REQUEST_NULL) {
      int flag = 0;
      check(MPI_Test(&stop_in_, &flag, MPI_STATUS_IGNORE), "MPI_Test");
      if (flag) stopping_ = true;
    }
    if (report_due_) send_report();
    for (auto it = out_.begin(); it != out_.end();) {
      int flag = 0;
      check(MPI_Testall(as_count(it->reqs.size()), it->reqs.data(), &flag, MPI_STATUSES_IGNORE),
            "MPI_Testall");
      it = flag ? out_.erase(it) : std::next(it);
    }
  }

  // The waits of the rows and of the end: serve() meanwhile.
  GossipWait serving_wait() {
    return [this](std::span<MPI_Request> reqs, const std::function<std::string()>& what) {
      const auto t0 = SteadyClock::now();
      Backoff backoff;
      for (;;) {
        int flag = 0;
        check(MPI_Testall(as_count(reqs.size()), reqs.data(), &flag, MPI_STATUSES_IGNORE),
              "MPI_Testall");
        if (flag) return;
        serve();
        if (since(t0) > timeout_) {
          throw MpiError(fmt::format("timed out after {} s {}", timeout_, what()));
        }
        backoff.idle();
      }
    };
  }
  GossipWait plain_wait() const {
    return [this](std::span<MPI_Request> reqs, const std::function<std::string()>& what) {
      wait_all(reqs, timeout_, what);
    };
  }

  // ---- the counts and the stops

  ReportValues my_report() const {
    return {static_cast<double>(mine_.steps), static_cast<double>(mine_.samples), mine_.loss_sum,
            static_cast<double>(mine_.loss_count), static_cast<double>(mine_.nonfinite),
            static_cast<double>(trailing_),
            // 2 + this rank after SIGTERM or SIGINT (roles.h), 1 after a
            // front end's request.
            leave_requested() ? 2.0 + rank_
            : request_        ? 1.0
                              : 0.0};
  }

  // This rank's counts to rank 0, when the last ones have gone.
  void send_report() {
    if (rank_ == 0) {
      report_due_ = false;
      take_report(0, my_report());
      return;
    }
    if (report_out_ != MPI_REQUEST_NULL) {
      int flag = 0;
      check(MPI_Test(&report_out_, &flag, MPI_STATUS_IGNORE), "MPI_Test");
      if (!flag) return;
    }
    report_out_buf_ = my_report();
    check(MPI_Isend(report_out_buf_.data(), as_count(report_out_buf_.size()), MPI_DOUBLE, 0,
                    kTagAdpsgdProgress, comm_, &report_out_),
          "MPI_Isend");
    ++reports_sent_;
    report_due_ = false;
  }

  // Rank 0: rank `from`'s latest counts; the run layer's stops on the sums.
  void take_report(int from, const ReportValues& v) {
    if (from != 0) ++reports_got_[static_cast<size_t>(from)];
    latest_[static_cast<size_t>(from)] = v;
    GossipCounts sum;
    int64_t trailing = 0;
    bool request = false;
    int signalled = -1;  // the highest rank that got SIGTERM or SIGINT
    for (const ReportValues& r : latest_) {
      sum.steps += static_cast<int64_t>(r[kSteps]);
      sum.samples += static_cast<int64_t>(r[kSamples]);
      sum.loss_sum += r[kLossSum];
      sum.loss_count += static_cast<int64_t>(r[kLossCount]);
      sum.nonfinite += static_cast<int64_t>(r[kNonfinite]);
      trailing += static_cast<int64_t>(r[kTrailing]);
      request = request || r[kRequest] > 0;
      if (r[kRequest] >= 2) signalled = std::max(signalled, static_cast<int>(r[kRequest]) - 2);
    }
    streamed_ = sum;
    if (stopping_ || stop_sent_) return;  // (at the end: the stop is decided)
    if (signalled >= 0) {
      // Rank 0's line is the run's (and its final checkpoint is allowed).
      stops_.request(fmt::format(
          "SIGTERM or SIGINT to {}: a gossip rank does not leave alone on mpi, so the whole "
          "run stopped (resume it with --resume when checkpoints are on)",
          worker_name(signalled, 0)));
    }
    if (request || schedule_.epochs_done(sum.samples) ||
        (trailing > 0 && stops_.check_pushes(trailing, sum.steps, clock_.seconds()))) {
      stop_all();
    }
  }

  // Rank 0: every rank ends its run.
  void stop_all() {
    for (int r = 1; r < n_; ++r) {
      MPI_Request q = MPI_REQUEST_NULL;
      check(MPI_Isend(&stop_flag_, 1, MPI_INT, r, kTagAdpsgdStop, comm_, &q), "MPI_Isend");
      stop_out_.push_back(q);
    }
    stop_sent_ = true;
    stopping_ = true;
  }

  // ---- rows and the end

  static std::array<double, 5> counts_of(const GossipCounts& c) {
    return {static_cast<double>(c.steps), static_cast<double>(c.samples), c.loss_sum,
            static_cast<double>(c.loss_count), static_cast<double>(c.nonfinite)};
  }
  // The run's counts from the ranks' summed (counts_of).
  void fold_counts(std::span<const double> s) {
    run_.counts.steps = static_cast<int64_t>(s[0]);
    run_.counts.samples = static_cast<int64_t>(s[1]);
    run_.counts.loss_sum = s[2];
    run_.counts.loss_count = static_cast<int64_t>(s[3]);
    run_.counts.nonfinite = static_cast<int64_t>(s[4]);
  }

  // Collective: this rank's counts summed into the run's, then the row.
  bool evaluate(double t) {
    std::array<double, 5> extras = counts_of(mine_);
    const auto fold = [this](std::span<const double> s) { fold_counts(s); };
    const GossipWait wait = stopping_ && drained_ ? plain_wait() : serving_wait();
    return evaluator_.evaluate(t, models_, idle_, extras, fold, run_, stops_, wait);
  }

  // Collective, every rank between its exchanges: at its row time, or
  // stopped. The model is held still and the clock paused meanwhile. When no
  // rank has stopped it is the row at the schedule's time t (the same on
  // every rank: each takes the rows in order), after which every rank's
  // clock restarts at t, and it returns true. Otherwise every rank stops:
  // false, end_s_ the latest clock.
  bool meet() {
    frozen_ = true;
    clock_.pause();
    double v[2] = {stopping_ || diverged_ ? 1.0 : 0.0, clock_.seconds()};
    MPI_Request r = MPI_REQUEST_NULL;
    check(MPI_Iallreduce(MPI_IN_PLACE, v, 2, MPI_DOUBLE, MPI_MAX, comm_, &r), "MPI_Iallreduce");
    serving_wait()(std::span<MPI_Request>(&r, 1), [&] {
      return fmt::format("on {} at a row or the end (a collective of every rank)",
                         worker_name(rank_, 0));
    });
    if (v[0] > 0) {
      stopping_ = true;
      end_s_ = v[1];
      return false;
    }
    // The next row or cut, the same on every rank (a row first at a
    // checkpoint's time, so the checkpoint holds its row).
    const double te = schedule_.next_eval(), tc = schedule_.next_checkpoint();
    const bool row = te < schedule_.budget() && (tc >= schedule_.budget() || te <= tc);
    const double t = row ? te : tc;
    if (row) {
      diverged_ = evaluate(t);
      schedule_.eval_done(t);
      if (diverged_ || schedule_.epochs_done(run_.counts.samples)) stopping_ = true;
    } else {
      schedule_.checkpoint_done(t);
      PendingCut cut = cut_checkpoint();
      if (cut) cut->commit(cut_info(t));
    }
    clock_.start(t);
    frozen_ = false;
    return true;
  }

  // ---- checkpoints (runtime/gossip_checkpoint.h's layout, as the other
  // gossip policies on mpi; mpi/gossip_eval.h's gather and resume)
  using PendingCut = std::optional<PendingCheckpoint>;

  // Collective, at a meet() (no exchange in flight) or at the end (drained):
  // every rank holds its gradient (it waits for the one in progress), the
  // ranks' counts are summed into the run's, and rank 0 gathers every
  // rank's part; the caller commits.
  PendingCut cut_checkpoint() {
    const auto t0 = SteadyClock::now();
    while (!grad_->wait_done(0.01)) {
      if (since(t0) > timeout_) {
        throw MpiError(fmt::format(
            "timed out after {} s on {} at a checkpoint: waiting for its gradient in progress",
            timeout_, worker_name(rank_, 0)));
      }
    }
    std::array<double, 5> sums = counts_of(mine_);
    MPI_Request r = MPI_REQUEST_NULL;
    check(MPI_Iallreduce(MPI_IN_PLACE, sums.data(), as_count(sums.size()), MPI_DOUBLE, MPI_SUM,
                         comm_, &r),
          "MPI_Iallreduce");
    wait_one(&r, timeout_, [&] {
      return fmt::format("on {} at a checkpoint (the sum of the ranks' counts)",
                         worker_name(rank_, 0));
    });
    fold_counts(sums);
    PendingCut cut = gather_gossip_parts(job_, comm_, rank_, n_, timeout_, false,
                                         [&] { return std::vector<std::string>{worker_bytes()}; });
    if (!cut) return cut;
    cut->add(kGossipRunBlob, [&](StateWriter& w) { save_gossip_run(w, n_, run_); });
    cut->add(kRunBlob, save_run_state(stops_, schedule_));
    return cut;
  }

  // This rank's part, its gradient in hand (the gradient thread idle).
  std::string worker_bytes() const {
    GossipWorkerState st;
    st.step = step_;
    st.phase = kGossipGradient;
    st.loss = loss_;
    st.batch = batch_;
    st.finite = finite_ ? 1 : 0;
    st.pairing = rng_.state();
    st.idle = idle_;
    st.sent = sent_;
    st.received = received_;
    StateWriter w;
    save_gossip_worker(w, rank_, models_, 0, *sampler_, delays_, st, grads_);
    return w.take();
  }

  CheckpointInfo cut_info(double t) const {
    return gossip_cut_info(job_.identity, "mpi", n_, t, run_.counts.steps,
                           recorder_->rows().size());
  }

  // Collective (receive_gossip_resume): this rank's part of rank 0's
  // checkpoint. The run's counts restart on rank 0 (the others' own counts
  // from 0), so that the sums at rows and cuts go on from the cut's.
  bool restore(double* start_s) {
    const std::optional<ResumedGossipPart> part =
        receive_gossip_resume(job_, comm_, rank_, n_, timeout_, false, false);
    if (!part) return false;
    *start_s = part->start_s;
    const std::string where = fmt::format("the resumed gossip state (rank {})", rank_);
    GossipWorkerState st;
    StateReader wr(part->worker, where + ": " + gossip_worker_blob(rank_));
    const bool in_hand =
        load_gossip_worker(wr, rank_, n_, models_, 0, *sampler_, delays_, &st, grads_);
    wr.expect_end();
    if (!in_hand || st.phase != kGossipGradient || !st.inbox.empty()) {
      wr.fail("corrupt (an adpsgd rank on mpi is cut with its gradient in hand)");
    }
    step_ = st.step;
    loss_ = st.loss;
    batch_ = st.batch;
    finite_ = st.finite != 0;
    rng_.set_state(st.pairing);
    idle_ = st.idle;
    sent_ = st.sent;
    received_ = st.received;
    StateReader gr(part->run, where + ": " + kGossipRunBlob);
    load_gossip_run(gr, n_, &run_);
    gr.expect_end();
    load_run_state(part->run_state, where + ": " + kRunBlob, *start_s, stops_, schedule_);
    if (rank_ == 0) mine_ = run_.counts;
    return true;
  }

  void barrier() {
    MPI_Request r = MPI_REQUEST_NULL;
    check(MPI_Ibarrier(comm_, &r), "MPI_Ibarrier");
    serving_wait()(std::span<MPI_Request>(&r, 1), [&] {
      return fmt::format("on {} at the start of training (a barrier of every rank)",
                         worker_name(rank_, 0));
    });
  }

  // Every rank, stopped, past the last meet(): nothing is in flight but
  // the counts to rank 0 and its stop messages; they are taken, the
  // receives cancelled, the gradient thread ended; then the closing row and
  // the result.
  RunResult finish(SteadyClock::time_point wall0) {
    // Rank 0's: whether it sent the stop, and whether a final checkpoint
    // is allowed (its stops may hold a line the others' do not).
    double counts[3] = {static_cast<double>(reports_sent_), stop_sent_ ? 1.0 : 0.0,
                        stops_.final_checkpoint_allowed() ? 1.0 : 0.0};
    std::vector<double> all_reports(rank_ == 0 ? static_cast<size_t>(n_) : 0);
    MPI_Request rq[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    check(
        MPI_Igather(&counts[0], 1, MPI_DOUBLE, all_reports.data(), 1, MPI_DOUBLE, 0, comm_, &rq[0]),
        "MPI_Igather");
    check(MPI_Ibcast(&counts[1], 2, MPI_DOUBLE, 0, comm_, &rq[1]), "MPI_Ibcast");
    wait_all(rq, timeout_, [&] {
      return fmt::format("on {} at the end of training (the messages still due)",
                         worker_name(rank_, 0));
    });
    drain(all_reports, counts[1] > 0);
    const double train_s = schedule_.clamp(end_s_);
    // The final checkpoint is the state at the end of training (every rank
    // with its gradient in hand), before the closing row; written only if
    // that row finds no divergence.
    PendingCut final_cut;
    CheckpointInfo final_info;
    if (c_.train.checkpoint_every > 0 && !diverged_ && counts[2] > 0) {
      final_cut = cut_checkpoint();
      if (rank_ == 0) final_info = cut_info(train_s);  // the rows before the closing one
    }
    grad_.reset();  // the gradient in progress ends; a delay is cut short
    if (!diverged_) diverged_ = evaluate(train_s);
    if (final_cut && !diverged_ && stops_.final_checkpoint_allowed()) final_cut->commit(final_info);
    RunResult result;
    evaluator_.gather_result(sent_, received_, step_, 0, topo_, run_, &result, plain_wait());
    evaluator_.finish_result(stops_, run_, train_s, start_s_, since(wall0), &result);
    return result;
  }

  // After the last meet(): no request is in flight (every rank met between
  // its exchanges, and answered with no average while it waited). Rank 0 takes the counts
  // still coming; the stop message is taken if rank 0 sent one; every
  // receive left is cancelled, every send completed.
  void drain(const std::vector<double>& all_reports, bool stop_sent) {
    const auto what = [&] {
      return fmt::format("on {} at the end of training (the messages still due)",
                         worker_name(rank_, 0));
    };
    if (rank_ == 0) {
      for (int r = 1; r < n_; ++r) {
        while (static_cast<double>(reports_got_[static_cast<size_t>(r)]) <
               all_reports[static_cast<size_t>(r)]) {
          MPI_Status st;
          wait_all(std::span<MPI_Request>(&progress_in_, 1), timeout_, what, &st);
          take_report(st.MPI_SOURCE, progress_in_buf_);
          post_progress_recv();
        }
      }
      cancel_and_free(&progress_in_);
    } else if (stop_in_ != MPI_REQUEST_NULL) {
      if (stop_sent) {
        wait_one(&stop_in_, timeout_, what);
      } else {
        cancel_and_free(&stop_in_);
      }
    }
    cancel_and_free(&request_in_);
    std::vector<MPI_Request> sends = stop_out_;
    sends.push_back(report_out_);
    for (Outgoing& o : out_) sends.insert(sends.end(), o.reqs.begin(), o.reqs.end());
    wait_all(sends, timeout_, what);
    out_.clear();
    stop_out_.clear();
    report_out_ = MPI_REQUEST_NULL;
    drained_ = true;
  }

  const Job& job_;
  const Config& c_;
  MPI_Comm comm_;
  double timeout_;
  size_t np_;
  std::vector<Chunk> chunks_;  // of a model (mpi.chunk)
  double model_bytes_;
  Topology topo_;
  GossipModels models_;  // this rank's model (worker 0 of one): the MPI thread's
  DelayModel delays_;    // the gradient thread's
  TrainSchedule schedule_;
  RunStops stops_;
  TrainClock clock_;
  Recorder* recorder_;
  Observer* observer_;
  GossipEvaluator evaluator_;
  int rank_ = 0, n_ = 1;
  Rng rng_;  // the pairing stream
  // The gradient thread's, from start() until done() (GradientThread).
  std::unique_ptr<ShardSampler> sampler_;
  std::unique_ptr<Model> model_;
  std::vector<float> local_, grads_;
  double loss_ = 0;
  int64_t batch_ = 0;
  bool finite_ = true;
  std::unique_ptr<GradientThread> grad_;
  // The MPI thread's.
  int64_t step_ = 0;
  GossipCounts mine_;     // this rank's steps, samples, losses
  int64_t trailing_ = 0;  // its non-finite gradients since its last finite one
  bool request_ = false;  // a front end asked this rank to stop
  double idle_ = 0, sent_ = 0, received_ = 0;
  bool frozen_ = false;    // at a row or the end: requests are answered with no average
  bool stopping_ = false;  // the run is over for this rank
  bool diverged_ = false;
  bool drained_ = false;  // nothing left to serve (the end)
  double end_s_ = 0;      // the latest clock at the last meet()
  double start_s_ = 0;    // the training time the run started at (a resume: the cut's)
  // The exchange this rank started (active).
  bool waiting_ = false;
  int peer_ = -1;
  int64_t reply_header_ = 0;
  MPI_Request reply_in_ = MPI_REQUEST_NULL;
  std::shared_ptr<const std::vector<float>> sent_model_;
  bool own_changed_ = false;  // it averaged as the passive side meanwhile
  SteadyClock::time_point wait_since_;
  std::vector<float> in_;  // a model received
  int64_t request_header_ = 0;
  MPI_Request request_in_ = MPI_REQUEST_NULL;  // a request from any rank
  std::list<Outgoing> out_;
  // The counts to rank 0, and the stop.
  bool report_due_ = false;
  ReportValues report_out_buf_{};
  MPI_Request report_out_ = MPI_REQUEST_NULL;
  int64_t reports_sent_ = 0;
  int stop_in_flag_ = 0, stop_flag_ = 1;
  MPI_Request stop_in_ = MPI_REQUEST_NULL;
  // Rank 0: every rank's latest counts, their sums, the stop sent.
  ReportValues progress_in_buf_{};
  MPI_Request progress_in_ = MPI_REQUEST_NULL;
  std::vector<ReportValues> latest_;
  std::vector<int64_t> reports_got_;
  GossipCounts streamed_;
  bool stop_sent_ = false;
  std::vector<MPI_Request> stop_out_;
  GossipRunState run_;  // the counts of the last row, alike on every rank
};

}  // namespace

RunResult run_adpsgd(const Job& job, MPI_Comm comm, Recorder* recorder, Observer* observer) {
  AdpsgdRank rank(job, comm, recorder, observer);
  return rank.run();
}

}  // namespace hsgd::mpi
