#include "hsgd/runtime/sim_cores.h"

#include <algorithm>

namespace hsgd {

bool CorePool::acquire(int64_t who) {
  if (!limited()) return true;
  if (free_ > 0) {
    --free_;
    return true;
  }
  line_.push_back(who);
  return false;
}

std::vector<int64_t> CorePool::release() {
  std::vector<int64_t> started;
  ++free_;
  while (free_ > 0 && !line_.empty()) {
    started.push_back(line_.front());
    line_.pop_front();
    --free_;
  }
  return started;
}

void CorePool::drop(int64_t who) { std::erase(line_, who); }

void CorePool::save(StateWriter& w) const {
  w.put<int32_t>(free_);
  w.put_vec(std::vector<int64_t>(line_.begin(), line_.end()));
}

void CorePool::load(StateReader& r) {
  free_ = r.get<int32_t>();
  const std::vector<int64_t> line = r.get_vec<int64_t>();
  if (free_ < 0 || free_ > std::max(cores_, 0) || (!line.empty() && free_ > 0)) {
    r.fail("corrupt (the simulated cores)");
  }
  line_.assign(line.begin(), line.end());
}

}  // namespace hsgd
