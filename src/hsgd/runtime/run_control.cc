#include "hsgd/runtime/run_control.h"

#include <fmt/format.h>

#include <cmath>

#include "hsgd/core/simd.h"
#include "hsgd/core/stop.h"
#include "hsgd/server/server.h"

namespace hsgd {

namespace {
constexpr uint32_t kStopsTag = 0x53544F50;     // "STOP"
constexpr uint32_t kScheduleTag = 0x53434844;  // "SCHD"

double next_multiple_after(double t, double every) { return (std::floor(t / every) + 1) * every; }
}  // namespace

TrainSchedule::TrainSchedule(const Config& c, int64_t train_samples, bool checkpoints)
    : budget_(c.train.budget > 0 ? c.train.budget : kNever),
      epoch_samples_(c.train.epochs > 0 ? static_cast<int64_t>(std::ceil(
                                              c.train.epochs * static_cast<double>(train_samples)))
                                        : 0),
      eval_every_(c.train.eval_every),
      checkpoint_every_(checkpoints ? c.train.checkpoint_every : 0) {
  start_at(0);
}

void TrainSchedule::start_at(double t) {
  next_eval_ = t <= 0 ? eval_every_ : next_multiple_after(t, eval_every_);
  next_checkpoint_ = checkpoint_every_ <= 0 ? kNever
                     : t <= 0               ? checkpoint_every_
                                            : next_multiple_after(t, checkpoint_every_);
}

void run_due(TrainSchedule& schedule, double t, const RunStops& stops,
             const std::function<void(double)>& evaluate,
             const std::function<void(double)>& checkpoint) {
  while (schedule.eval_due(t) || schedule.checkpoint_due(t)) {
    if (schedule.eval_due(t) && schedule.next_eval() <= schedule.next_checkpoint()) {
      const double at = schedule.next_eval();
      evaluate(at);
      schedule.eval_done(at);
    } else {
      const double at = schedule.next_checkpoint();
      schedule.checkpoint_done(at);
      checkpoint(at);
    }
    if (stops.stopped()) break;
  }
}

void TrainSchedule::eval_done(double t) {
  while (next_eval_ <= t) next_eval_ += eval_every_;
}

void TrainSchedule::checkpoint_done(double t) {
  if (checkpoint_every_ <= 0) return;
  while (next_checkpoint_ <= t) next_checkpoint_ += checkpoint_every_;
}

void TrainSchedule::save(StateWriter& w) const {
  w.tag(kScheduleTag);
  w.put(next_eval_);
  w.put(next_checkpoint_ == kNever ? -1.0 : next_checkpoint_);
}

void TrainSchedule::load(StateReader& r, double cut_s) {
  r.expect_tag(kScheduleTag, "schedule");
  const double ne = r.get<double>();
  const double nc = r.get<double>();
  if (!std::isfinite(ne) || !std::isfinite(nc)) r.fail("corrupt (schedule times)");
  resume_times(ne, nc, cut_s);
}

void TrainSchedule::resume_times(double next_eval, double next_checkpoint, double cut_s) {
  next_eval_ = next_eval;
  // train.checkpoint_every may change on resume: the next cut follows it.
  if (checkpoint_every_ > 0) {
    next_checkpoint_ = next_checkpoint > 0 ? next_checkpoint : cut_s + checkpoint_every_;
  } else {
    next_checkpoint_ = kNever;
  }
}

std::string divergence_line(std::span<const float> params, const MetricsRow& row,
                            double first_test_loss, double factor) {
  const auto where = [&] {
    return fmt::format("training diverged at update {} ({:.3f} s)", row.updates, row.time_s);
  };
  const char* hint = "; try a smaller optim.lr or optim.clip_norm";
  if (!std::isfinite(row.test_loss)) return where() + ": the test loss is not finite" + hint;
  if (!all_finite(params)) return where() + ": the parameters are not finite" + hint;
  if (factor > 0 && std::isfinite(first_test_loss) && first_test_loss > 0) {
    const double limit = factor * first_test_loss;
    const bool test = row.test_loss > limit;
    const bool train = std::isfinite(row.train_loss) && row.train_loss > limit;
    if (test || train) {
      return where() +
             fmt::format(
                 ": the {} loss {:.4g} is above train.diverge_factor = {:g} x "
                 "the first evaluation's test loss {:.4g}",
                 test ? "test" : "training", test ? row.test_loss : row.train_loss, factor,
                 first_test_loss) +
             hint;
    }
  }
  return "";
}

bool RunStops::check_row(const MetricsRow& row, std::span<const float> params,
                         const std::vector<MetricsRow>& rows) {
  if (stopped()) return true;
  const double first = rows.empty() ? row.test_loss : rows.front().test_loss;
  stop(divergence_line(params, row, first, c_->train.diverge_factor));
  return check_request(/*at_evaluation=*/true);
}

bool RunStops::check_request(bool at_evaluation) {
  if (stopped()) return true;
  const StopRequest* r = c_->stop;
  if (r == nullptr || !r->requested() || (at_evaluation && !r->at_evaluation())) return false;
  stop(r->reason());
  requested_ = true;
  return true;
}

bool RunStops::check_pushes(int64_t consecutive, int64_t updates, double t) {
  if (check_request(/*at_evaluation=*/false)) return true;
  return check_nonfinite(consecutive, updates, t);
}

bool RunStops::check_nonfinite(int64_t consecutive, int64_t updates, double t) {
  if (stopped()) return true;
  if (consecutive <= c_->train.max_nonfinite) return false;
  stop(fmt::format(
      "training diverged at update {} ({:.3f} s): {} consecutive pushes held a NaN or Inf "
      "(train.max_nonfinite = {}); try a smaller optim.lr or optim.clip_norm",
      updates, t, consecutive, c_->train.max_nonfinite));
  return true;
}

bool RunStops::check_pushes(const Server& server, double t) {
  return check_pushes(server.consecutive_nonfinite(), static_cast<int64_t>(server.version()), t);
}

bool RunStops::check_membership(const std::string& why) {
  if (!why.empty()) stop(why, /*below_min=*/true);
  return stopped();
}

void RunStops::stop(const std::string& why, bool below_min) {
  if (why.empty() || stopped()) return;
  reason_ = why;
  below_min_ = below_min;
}

void RunStops::request(const std::string& why) {
  if (stopped()) return;
  stop(StopRequest::kPrefix + why);
  requested_ = true;
}

void RunStops::save(StateWriter& w) const {
  w.tag(kStopsTag);
  w.put_str(requested_ ? std::string() : reason_);  // a request is not kept
  w.put<uint8_t>(below_min_);
}

void RunStops::load(StateReader& r) {
  r.expect_tag(kStopsTag, "stops");
  reason_ = r.get_str();
  below_min_ = r.get<uint8_t>() != 0;
  if (below_min_ && reason_.empty()) r.fail("corrupt (a stop with no reason)");
}

std::string save_run_state(const RunStops& stops, const TrainSchedule& schedule) {
  StateWriter w;
  stops.save(w);
  schedule.save(w);
  return w.take();
}

void load_run_state(const Checkpoint& ck, RunStops& stops, TrainSchedule& schedule) {
  if (!ck.has(kRunBlob)) {
    schedule.start_at(ck.info.train_s);
    return;
  }
  load_run_state(ck.blob(kRunBlob), ck.path + "/" + kRunBlob + ".bin", ck.info.train_s, stops,
                 schedule);
}

void load_run_state(std::string_view bytes, const std::string& what, double cut_s, RunStops& stops,
                    TrainSchedule& schedule) {
  StateReader r(bytes, what);
  stops.load(r);
  schedule.load(r, cut_s);
  r.expect_end();
}

}  // namespace hsgd
