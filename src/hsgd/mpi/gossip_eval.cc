#include "hsgd/mpi/gossip_eval.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "hsgd/core/error.h"
#include "hsgd/mpi/gossip.h"
#include "hsgd/mpi/roles.h"
#include "hsgd/mpi/transport.h"
#include "hsgd/runtime/gossip_choco.h"
#include "hsgd/runtime/gossip_outer.h"
#include "hsgd/runtime/gossip_row.h"
#include "hsgd/runtime/row.h"

namespace hsgd::mpi {

int comm_rank(MPI_Comm comm) {
  int r = 0;
  check(MPI_Comm_rank(comm, &r), "MPI_Comm_rank");
  return r;
}

GossipEvaluator::GossipEvaluator(const Job& job, MPI_Comm comm, int rank, Recorder* recorder,
                                 Observer* observer)
    : job_(job),
      c_(*job.config),
      comm_(comm),
      rank_(rank),
      n_(job.config->train.workers),
      recorder_(recorder),
      observer_(observer) {
  // Rank 0 evaluates the average model; with gossip.eval_workers every
  // rank also evaluates its own.
  if (rank_ == 0 || c_.gossip.eval_workers) {
    HSGD_ASSERT(rank_ != 0 || (recorder_ != nullptr && observer_ != nullptr),
                "rank 0 needs a recorder and an observer");
    test_ = head(*job.test, c_.train.eval_samples);
    model_ = job.make_model();
    params_.resize(job.initial_params.size());
    grads_.resize(job.initial_params.size());
    model_->bind(params_, grads_);
  }
}

bool GossipEvaluator::evaluate(double t, const GossipModels& models, double idle,
                               std::span<double> extras,
                               const std::function<void(std::span<const double>)>& fold,
                               GossipRunState& run, RunStops& stops, const GossipWait& wait,
                               int live) {
  const size_t np = models.num_params();
  const int m = live < 0 ? n_ : live;
  const bool mine = models.live(0);  // false: this rank left (zero contribution)
  // gossip.eval_workers: this rank's own de-biased model first (rank 0's
  // params_ take the average below); min, sum and max to rank 0.
  WorkerAccuracy workers;
  if (c_.gossip.eval_workers) {
    double acc = 0;
    if (mine) {
      models.debiased(0, params_);
      acc = model_->evaluate(test_).accuracy;
    }
    const double none = -std::numeric_limits<double>::infinity();
    double extremes[2] = {mine ? -acc : none, mine ? acc : none}, sum_acc = 0, most[2] = {0, 0};
    MPI_Request rq[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    check(MPI_Ireduce(extremes, most, 2, MPI_DOUBLE, MPI_MAX, 0, comm_, &rq[0]), "MPI_Ireduce");
    check(MPI_Ireduce(&acc, &sum_acc, 1, MPI_DOUBLE, MPI_SUM, 0, comm_, &rq[1]), "MPI_Ireduce");
    wait(rq, [&] {
      return fmt::format("on {} at an evaluation of every worker's model (a reduce to rank 0)",
                         worker_name(rank_, 0));
    });
    workers = {-most[0], sum_acc / m, most[1]};
  }
  std::vector<double> sum(np + 2 + extras.size());
  std::span<const float> x = models.x(0);
  for (size_t p = 0; p < np; ++p) sum[p] = x[p];
  sum[np] = models.weight(0);
  sum[np + 1] = idle;
  std::copy(extras.begin(), extras.end(), sum.begin() + static_cast<ptrdiff_t>(np + 2));
  MPI_Request r = MPI_REQUEST_NULL;
  check(MPI_Iallreduce(MPI_IN_PLACE, sum.data(), as_count(sum.size()), MPI_DOUBLE, MPI_SUM, comm_,
                       &r),
        "MPI_Iallreduce");
  wait(std::span<MPI_Request>(&r, 1), [&] {
    return fmt::format("on {} at an evaluation (a collective of every rank)",
                       worker_name(rank_, 0));
  });
  std::copy(sum.begin() + static_cast<ptrdiff_t>(np + 2), sum.end(), extras.begin());
  if (fold) fold(extras);
  const double wsum = sum[np];
  const double w = models.weight(0);
  double sq = 0;
  for (size_t p = 0; p < np; ++p) {
    const float avg = static_cast<float>(sum[p] / wsum);
    const double d = mine ? x[p] / w - avg : 0.0;
    sq += d * d;
    if (rank_ == 0) params_[p] = avg;
  }
  double sq_sum = 0;
  check(MPI_Ireduce(&sq, &sq_sum, 1, MPI_DOUBLE, MPI_SUM, 0, comm_, &r), "MPI_Ireduce");
  wait(std::span<MPI_Request>(&r, 1), [&] {
    return fmt::format("on {} at an evaluation (a reduce to rank 0)", worker_name(rank_, 0));
  });
  int diverged = 0;
  if (rank_ == 0) {
    GossipModels::Consensus cs;
    double norm = 0;
    for (float v : params_) norm += static_cast<double>(v) * v;
    cs.xi = std::sqrt(sq_sum / m);
    cs.norm = std::sqrt(norm);
    const double idle_all = sum[np + 1];
    const double span = (t - run.last_time) * m;
    const double idle_frac =
        span > 0 ? std::clamp((idle_all - run.last_idle) / span, 0.0, 1.0) : 0.0;
    run.last_idle = idle_all;
    run.last_time = t;
    const MetricsRow row = gossip_row(c_, cs, *model_, test_, job_.train->size(), t, run.counts,
                                      idle_frac, &workers, live);
    recorder_->write(row);
    observer_->on_row(row);
    run.last_acc = row.test_acc;
    // A stop whose state is sound (a request: a signal to a rank) is not a
    // divergence: its final checkpoint is still written.
    diverged = stops.check_row(row, params_, recorder_->rows()) && !stops.final_checkpoint_allowed()
                   ? 1
                   : 0;
  }
  check(MPI_Ibcast(&diverged, 1, MPI_INT, 0, comm_, &r), "MPI_Ibcast");
  wait(std::span<MPI_Request>(&r, 1), [&] {
    return fmt::format("on {} at an evaluation (rank 0's verdict)", worker_name(rank_, 0));
  });
  return diverged != 0;
}

void GossipEvaluator::gather_result(double sent, double received, int64_t steps, int64_t rounds,
                                    const Topology& topo, const GossipRunState& run,
                                    RunResult* result, const GossipWait& wait) {
  double mine[4] = {sent, received, static_cast<double>(steps), static_cast<double>(rounds)};
  std::vector<double> all(rank_ == 0 ? 4 * static_cast<size_t>(n_) : 0);
  MPI_Request r = MPI_REQUEST_NULL;
  check(MPI_Igather(mine, 4, MPI_DOUBLE, all.data(), 4, MPI_DOUBLE, 0, comm_, &r), "MPI_Igather");
  wait(std::span<MPI_Request>(&r, 1),
       [&] { return fmt::format("on {} at the end (a gather to rank 0)", worker_name(rank_, 0)); });
  if (rank_ != 0) return;
  std::vector<double> sent_all, received_all;
  std::vector<int64_t> steps_all;
  int64_t rounds_all = 0;
  for (int i = 0; i < n_; ++i) {
    const double* v = all.data() + 4 * static_cast<size_t>(i);
    sent_all.push_back(v[0]);
    received_all.push_back(v[1]);
    steps_all.push_back(static_cast<int64_t>(v[2]));
    rounds_all += static_cast<int64_t>(v[3]);
  }
  result->worker_pushes = steps_all;
  result->gossip = gossip_result(c_, topo, run.counts, rounds_all, run.global_averages, sent_all,
                                 received_all, steps_all);
}

std::string gossip_membership_blob(int w) { return fmt::format("gossip_membership-{}", w); }

void GossipEvaluator::finish_result(const RunStops& stops, const GossipRunState& run,
                                    double train_s, double start_s, double wall_s,
                                    RunResult* result) const {
  result->stopped = stops.reason();
  if (rank_ != 0) {
    result->primary = false;
    return;
  }
  result->last = recorder_->rows().back();
  result->params = params_;
  result->train_s = result->last.time_s;
  result->real_train_s = train_s - start_s;
  result->gradients = run.counts.steps;
  result->wall_s = wall_s;
}

std::optional<PendingCheckpoint> gather_gossip_parts(
    const Job& job, MPI_Comm comm, int rank, int n, double timeout, bool choco,
    const std::function<std::vector<std::string>()>& parts) {
  std::vector<std::string (*)(int)> names = {&gossip_worker_blob};
  if (choco) names.push_back(&gossip_choco_blob);
  return gather_gossip_parts(job, comm, rank, n, timeout, names, parts);
}

std::optional<PendingCheckpoint> gather_gossip_parts(
    const Job& job, MPI_Comm comm, int rank, int n, double timeout,
    const std::vector<std::string (*)(int)>& names,
    const std::function<std::vector<std::string>()>& parts) {
  const auto what = [&](int r) {
    return [rank, r] {
      return fmt::format("on {} at a checkpoint (rank {}'s state to rank 0)", worker_name(rank, 0),
                         r);
    };
  };
  const size_t count = names.size();
  if (rank != 0) {
    const std::vector<std::string> mine = parts();
    HSGD_ASSERT(mine.size() == count, "a gossip rank's part of another shape");
    for (const std::string& bytes : mine) send_bytes(comm, 0, bytes, timeout, what(rank));
    return std::nullopt;
  }
  std::optional<PendingCheckpoint> cut;
  if (job.checkpoints) cut.emplace(job.checkpoints->begin());
  for (int r = 0; r < n; ++r) {
    std::vector<std::string> got;
    if (r == 0) {
      got = parts();
      HSGD_ASSERT(got.size() == count, "a gossip rank's part of another shape");
    } else {
      for (size_t k = 0; k < count; ++k) got.push_back(recv_bytes(comm, r, timeout, what(r)));
    }
    if (!cut) continue;
    for (size_t k = 0; k < count; ++k) cut->add(names[k](r), got[k]);
  }
  return cut;
}

std::optional<ResumedGossipPart> receive_gossip_resume(const Job& job, MPI_Comm comm, int rank,
                                                       int n, double timeout, bool outer,
                                                       bool choco) {
  int resumed = rank == 0 && job.resume != nullptr ? 1 : 0;
  MPI_Request req = MPI_REQUEST_NULL;
  check(MPI_Ibcast(&resumed, 1, MPI_INT, 0, comm, &req), "MPI_Ibcast");
  const auto what = [&] {
    return fmt::format("on {} at the resume (rank 0's checkpoint)", worker_name(rank, 0));
  };
  wait_one(&req, timeout, what);
  if (!resumed) return std::nullopt;
  std::string error;
  if (rank == 0) {
    try {
      check_gossip_resume(job, *job.resume, n);
    } catch (const InputError& e) {
      error = e.what();
    }
  }
  int64_t len = static_cast<int64_t>(error.size());
  check(MPI_Ibcast(&len, 1, MPI_INT64_T, 0, comm, &req), "MPI_Ibcast");
  wait_one(&req, timeout, what);
  error.resize(static_cast<size_t>(len));
  if (len > 0) {
    check(MPI_Ibcast(error.data(), as_count(error.size()), MPI_CHAR, 0, comm, &req), "MPI_Ibcast");
    wait_one(&req, timeout, what);
    throw InputError(error);
  }
  std::string mine;
  if (rank == 0) {
    const Checkpoint& ck = *job.resume;
    for (int r = n - 1; r >= 0; --r) {  // rank 0's own last: it keeps it
      const std::string name = gossip_worker_blob(r);
      StateWriter w;
      w.put(ck.info.train_s);
      w.put_str(ck.blob(name));
      w.put_str(ck.blob(kGossipRunBlob));
      w.put_str(outer ? ck.blob(kGossipOuterBlob) : std::string());
      w.put_str(ck.blob(kRunBlob));
      w.put_str(choco ? ck.blob(gossip_choco_blob(r)) : std::string());
      const std::string member = gossip_membership_blob(r);
      w.put_str(ck.has(member) ? ck.blob(member) : std::string());
      ck.cache.erase(name);  // one rank's part in memory at a time
      if (r == 0) {
        mine = w.take();
      } else {
        send_bytes(comm, r, w.take(), timeout, what);
      }
    }
  } else {
    mine = recv_bytes(comm, 0, timeout, what);
  }
  StateReader r(mine, fmt::format("the resumed gossip state (rank {})", rank));
  ResumedGossipPart part;
  part.start_s = r.get<double>();
  part.worker = r.get_str();
  part.run = r.get_str();
  part.outer = r.get_str();
  part.run_state = r.get_str();
  part.choco = r.get_str();
  part.membership = r.get_str();
  r.expect_end();
  return part;
}

}  // namespace hsgd::mpi
