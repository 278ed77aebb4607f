#include "hsgd/core/faults.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "hsgd/core/error.h"

namespace hsgd {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr uint32_t kFaultTag = 0x464C5431;  // "FLT1"

std::string num(double v) { return fmt::format("{}", v); }

}  // namespace

FaultAt parse_fault_at(const std::string& key, const std::string& spec) {
  auto fail = [&]() -> FaultAt {
    throw InputError(fmt::format("{} = '{}': expected worker:W@Ts, e.g. worker:3@20s", key, spec));
  };
  const std::string prefix = "worker:";
  if (spec.rfind(prefix, 0) != 0) return fail();
  const size_t at = spec.find('@');
  if (at == std::string::npos) return fail();
  const std::string id = spec.substr(prefix.size(), at - prefix.size());
  std::string t = spec.substr(at + 1);
  if (!t.empty() && t.back() == 's') t.pop_back();
  if (id.empty() || t.empty() || !std::all_of(id.begin(), id.end(), ::isdigit) || id.size() > 6) {
    return fail();
  }
  FaultAt f;
  f.worker = std::stoi(id);
  try {
    size_t used = 0;
    f.at = std::stod(t, &used);
    if (used != t.size()) return fail();
  } catch (const std::exception&) {
    return fail();
  }
  if (!std::isfinite(f.at) || f.at < 0) return fail();
  return f;
}

std::string to_string(const FaultAt& f) { return fmt::format("worker:{}@{}s", f.worker, f.at); }

void validate(const FaultOptions& o, int workers, int min_workers) {
  if (min_workers < 1) {
    throw InputError("train.min_workers = " + std::to_string(min_workers) + ": expected >= 1");
  }
  if (min_workers > workers) {
    throw InputError(fmt::format("train.min_workers = {}: expected <= train.workers = {}",
                                 min_workers, workers));
  }
  for (const auto* list : {&o.kill, &o.rejoin}) {
    const char* key = list == &o.kill ? "faults.kill" : "faults.rejoin";
    for (const FaultAt& f : *list) {
      if (f.worker >= workers) {
        throw InputError(fmt::format("{} = '{}': worker {} does not exist (train.workers = {})",
                                     key, to_string(f), f.worker, workers));
      }
    }
  }
  if (!(o.kill_rate >= 0) || !std::isfinite(o.kill_rate)) {
    throw InputError("faults.kill_rate = " + num(o.kill_rate) +
                     ": expected kills per worker per minute >= 0");
  }
  if (!(o.exception_rate >= 0 && o.exception_rate <= 1)) {
    throw InputError("faults.exception_rate = " + num(o.exception_rate) +
                     ": expected a probability per gradient in [0, 1]");
  }
  if (std::isnan(o.rejoin_after) || std::isinf(o.rejoin_after)) {
    throw InputError("faults.rejoin_after = " + num(o.rejoin_after) +
                     ": expected seconds >= 0 or 'off'");
  }
}

const char* to_string(MembershipCause c) {
  switch (c) {
    case MembershipCause::kKill:
      return "kill";
    case MembershipCause::kRandomKill:
      return "random_kill";
    case MembershipCause::kException:
      return "exception";
    case MembershipCause::kRejoin:
      return "rejoin";
    case MembershipCause::kSignal:
      return "signal";
    case MembershipCause::kError:
      return "error";
  }
  return "?";
}

FaultPlan::FaultPlan(const FaultOptions& o, int workers, uint64_t seed) : opt_(o) {
  const auto n = static_cast<size_t>(std::max(workers, 0));
  kills_.resize(n);
  rejoins_.resize(n);
  for (const FaultAt& f : o.kill) {
    if (static_cast<size_t>(f.worker) < n) kills_[static_cast<size_t>(f.worker)].push_back(f.at);
  }
  for (const FaultAt& f : o.rejoin) {
    if (static_cast<size_t>(f.worker) < n) rejoins_[static_cast<size_t>(f.worker)].push_back(f.at);
  }
  for (auto& v : kills_) std::sort(v.begin(), v.end());
  for (auto& v : rejoins_) std::sort(v.begin(), v.end());
  w_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    w_[i].rng = Rng(seed, kFaultStream + i);
    w_[i].random_kill = draw_kill(w_[i], 0.0);  // every worker starts live
  }
}

double FaultPlan::draw_kill(PerWorker& p, double from) {
  if (!(opt_.kill_rate > 0)) return kInf;
  double u = p.rng.uniform();
  if (u < 1e-300) u = 1e-300;
  return from - std::log(u) * 60.0 / opt_.kill_rate;  // Exp(rate / 60 s)
}

FaultDue FaultPlan::next(int worker, bool live) const {
  FaultDue d;
  if (worker < 0 || static_cast<size_t>(worker) >= w_.size()) return d;
  const auto w = static_cast<size_t>(worker);
  const PerWorker& p = w_[w];
  if (live) {
    if (p.next_kill < kills_[w].size()) d = {kills_[w][p.next_kill], false, MembershipCause::kKill};
    if (p.random_kill < d.time) d = {p.random_kill, false, MembershipCause::kRandomKill};
  } else {
    if (p.next_rejoin < rejoins_[w].size()) {
      d = {rejoins_[w][p.next_rejoin], true, MembershipCause::kRejoin};
    }
    if (p.timed_rejoin < d.time) d = {p.timed_rejoin, true, MembershipCause::kRejoin};
  }
  return d;
}

void FaultPlan::apply(const MembershipEvent& e) {
  if (e.worker < 0 || static_cast<size_t>(e.worker) >= w_.size()) return;
  const auto w = static_cast<size_t>(e.worker);
  PerWorker& p = w_[w];
  if (e.join) {
    // Scheduled kills that fell while the worker was out are void.
    while (p.next_kill < kills_[w].size() && kills_[w][p.next_kill] < e.time) ++p.next_kill;
    while (p.next_rejoin < rejoins_[w].size() && rejoins_[w][p.next_rejoin] <= e.time) {
      ++p.next_rejoin;
    }
    p.timed_rejoin = kInf;
    p.random_kill = draw_kill(p, e.time);
  } else {
    while (p.next_kill < kills_[w].size() && kills_[w][p.next_kill] <= e.time) ++p.next_kill;
    // Scheduled rejoins that fell while the worker was live are void.
    while (p.next_rejoin < rejoins_[w].size() && rejoins_[w][p.next_rejoin] < e.time) {
      ++p.next_rejoin;
    }
    p.random_kill = kInf;
    const bool timed = e.cause == MembershipCause::kRandomKill ||
                       e.cause == MembershipCause::kException || e.cause == MembershipCause::kError;
    p.timed_rejoin = timed && opt_.rejoin_after >= 0 ? e.time + opt_.rejoin_after : kInf;
  }
}

void FaultPlan::restart_at(double t) {
  for (size_t w = 0; w < w_.size(); ++w) {
    PerWorker& p = w_[w];
    while (p.next_kill < kills_[w].size() && kills_[w][p.next_kill] < t) ++p.next_kill;
    while (p.next_rejoin < rejoins_[w].size() && rejoins_[w][p.next_rejoin] < t) ++p.next_rejoin;
    p.timed_rejoin = kInf;
    p.random_kill = draw_kill(p, t);
  }
}

bool FaultPlan::gradient_throws(int worker) {
  if (!(opt_.exception_rate > 0) || worker < 0 || static_cast<size_t>(worker) >= w_.size()) {
    return false;
  }
  return w_[static_cast<size_t>(worker)].rng.uniform() < opt_.exception_rate;
}

void FaultPlan::save(StateWriter& w) const {
  w.tag(kFaultTag);
  w.put<uint64_t>(w_.size());
  for (const PerWorker& p : w_) {
    w.put<uint64_t>(p.rng.state());
    w.put<uint64_t>(p.next_kill);
    w.put<uint64_t>(p.next_rejoin);
    w.put(p.random_kill);
    w.put(p.timed_rejoin);
  }
}

void FaultPlan::load(StateReader& r) {
  r.expect_tag(kFaultTag, "fault plan");
  const uint64_t n = r.get<uint64_t>();
  if (n != w_.size()) r.fail("fault plan of another worker count");
  for (size_t i = 0; i < w_.size(); ++i) {
    PerWorker& p = w_[i];
    p.rng.set_state(r.get<uint64_t>());
    p.next_kill = r.get<uint64_t>();
    p.next_rejoin = r.get<uint64_t>();
    if (p.next_kill > kills_[i].size() || p.next_rejoin > rejoins_[i].size()) {
      r.fail("corrupt (fault schedule position)");
    }
    p.random_kill = r.get<double>();
    p.timed_rejoin = r.get<double>();
  }
}

}  // namespace hsgd
