// The live progress line: rewritten in place on a terminal, one plain line
// per evaluation otherwise.
#pragma once
#include <cstdio>

#include "hsgd/runtime/runtime.h"

namespace hsgd::cli {

class Progress final : public Observer {
 public:
  Progress(std::FILE* out, bool terminal, double budget, double epochs);
  void on_row(const MetricsRow& r) override;
  void on_status(const Status& s) override;
  // Ends an in-place line.
  void finish();

 private:
  void print(const Status& s);
  std::FILE* out_;
  bool terminal_;
  double budget_, epochs_;
  double last_acc_ = 0;
  double last_loss_ = 0;
  bool dirty_ = false;
};

}  // namespace hsgd::cli
