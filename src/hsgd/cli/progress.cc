#include "hsgd/cli/progress.h"

#include <fmt/format.h>

#include <cmath>

namespace hsgd::cli {

Progress::Progress(std::FILE* out, bool terminal, double budget, double epochs)
    : out_(out), terminal_(terminal), budget_(budget), epochs_(epochs) {}

void Progress::print(const Status& s) {
  std::string limit = budget_ > 0 ? fmt::format("/{:.0f}s", budget_) : "";
  std::string line = fmt::format(
      "[{:7.1f}s{}] updates {:>7}  K {:>3}  train_loss {}  test_acc {:5.1f}%  samples/s {:>7.0f}",
      s.time_s, limit, s.updates, s.k,
      std::isnan(s.train_loss) ? std::string("   -  ") : fmt::format("{:.4f}", s.train_loss),
      100.0 * s.test_acc, s.samples_per_s);
  if (epochs_ > 0) line += fmt::format("  epoch {:.2f}", s.epochs);
  if (terminal_) {
    std::fprintf(out_, "\r\033[K%s", line.c_str());
    dirty_ = true;
  } else {
    std::fprintf(out_, "%s\n", line.c_str());
  }
  std::fflush(out_);
}

void Progress::on_row(const MetricsRow& r) {
  last_acc_ = r.test_acc;
  if (!std::isnan(r.train_loss)) last_loss_ = r.train_loss;
  if (!terminal_) {
    Status s;
    s.time_s = r.time_s;
    s.updates = r.updates;
    s.samples = r.samples;
    s.k = r.k;
    s.train_loss = r.train_loss;
    s.test_acc = r.test_acc;
    s.epochs = r.epoch;
    s.samples_per_s = r.time_s > 0 ? static_cast<double>(r.samples) / r.time_s : 0.0;
    print(s);
  }
}

void Progress::on_status(const Status& s) {
  if (!terminal_) return;
  Status t = s;
  if (std::isnan(t.train_loss) || t.train_loss == 0) t.train_loss = last_loss_;
  t.test_acc = last_acc_;
  print(t);
}

void Progress::finish() {
  if (dirty_) std::fprintf(out_, "\n");
  dirty_ = false;
}

}  // namespace hsgd::cli
