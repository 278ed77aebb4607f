// The hsgd subcommands. Each returns the process exit code; InputError
// propagates to main(), which prints it and exits with 2.
#pragma once
#include <string>
#include <vector>

#include "hsgd/config/config.h"

namespace hsgd::cli {

struct TrainArgs {
  std::string config_path;
  std::vector<Override> overrides;  // flags first, then --set, in order
  bool quiet = false;
};
int train(const TrainArgs& a);

struct EvalArgs {
  std::string model_path;
  std::string data;
  bool json = false;
};
int eval(const EvalArgs& a);

int plot(const std::vector<std::string>& dirs, std::string out);

struct BenchArgs {
  std::string data = "fashion-mnist";
  double seconds = 3;  // per throughput measurement
  int repeats = 5;     // compute-only rounds (median reported)
};
int bench(const BenchArgs& a);

}  // namespace hsgd::cli
