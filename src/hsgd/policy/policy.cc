#include "hsgd/policy/policy.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "hsgd/core/error.h"
#include "hsgd/policy/auto_policy.h"

namespace hsgd {
namespace {

int clamp_k(int k, int live) { return std::clamp(k, 1, std::max(1, live)); }

// sync (BSP): every live worker's push; the pusher waits.
class SyncPolicy final : public Policy {
 public:
  std::string name() const override { return "sync"; }
  int threshold(const Progress&, int live) const override { return clamp_k(live, live); }
  bool pusher_waits() const override { return true; }
};

// async (ASP): every push is an update. Also names hogwild, which has no
// server: the hogwild runtime never calls it, config validation does.
class AsyncPolicy final : public Policy {
 public:
  explicit AsyncPolicy(std::string name = "async") : name_(std::move(name)) {}
  std::string name() const override { return name_; }
  int threshold(const Progress&, int) const override { return 1; }
  bool pusher_waits() const override { return false; }

 private:
  std::string name_;
};

// kasync K (Dutta et al.): K pushes; each pusher waits for its update.
// kbatch K: K pushes, possibly several from one worker; nobody waits.
class FixedKPolicy final : public Policy {
 public:
  FixedKPolicy(int k, bool waits) : k_(k), waits_(waits) {}
  std::string name() const override {
    return std::string(waits_ ? "kasync:" : "kbatch:") + std::to_string(k_);
  }
  int threshold(const Progress&, int live) const override { return clamp_k(k_, live); }
  bool pusher_waits() const override { return waits_; }

 private:
  int k_;
  bool waits_;
};

// hybrid (the smooth switch): K(t) from a threshold schedule, kasync waiting.
// With the adaptive schedule K follows the pushed losses instead of t.
class HybridPolicy final : public Policy {
 public:
  HybridPolicy(ScheduleOptions s, int workers)
      : s_(std::move(s)), workers_(workers), adaptive_(s_.k0, s_.loss_smoothing, workers) {}
  std::string name() const override { return "hybrid(" + s_.kind + ")"; }
  int threshold(const Progress& p, int live) const override {
    if (s_.kind == "adaptive") return clamp_k(adaptive_.k(workers_), live);
    double t = 0;
    switch (s_.clock) {
      case ScheduleClock::kUpdates:
        t = static_cast<double>(p.updates);
        break;
      case ScheduleClock::kSeconds:
        t = p.seconds;
        break;
      case ScheduleClock::kEpochs:
        t = p.epochs;
        break;
    }
    return clamp_k(threshold_at(s_, t, workers_), live);
  }
  bool pusher_waits() const override { return true; }
  void on_push_loss(double loss) override {
    if (s_.kind == "adaptive") adaptive_.add(loss);
  }
  std::vector<double> save_state() const override {
    return s_.kind == "adaptive" ? adaptive_.save() : std::vector<double>{};
  }
  void restore_state(std::span<const double> st) override {
    if (s_.kind == "adaptive") adaptive_.restore(st);
  }

 private:
  ScheduleOptions s_;
  int workers_;
  AdaptiveThreshold adaptive_;
};

// ssp s (Ho et al. 2013): every push is an update and nobody waits after a
// push; the server holds the pulls of workers more than s clocks ahead.
class SspPolicy final : public Policy {
 public:
  explicit SspPolicy(int s) : s_(s) {}
  std::string name() const override { return "ssp:" + std::to_string(s_); }
  int threshold(const Progress&, int) const override { return 1; }
  bool pusher_waits() const override { return false; }
  int staleness_bound() const override { return s_; }

 private:
  int s_;
};

// local:H: a push is a model delta after H local steps; sync-like averaging
// (every live worker's delta, pushers wait) or, with local.async, async-like.
class LocalPolicy final : public Policy {
 public:
  LocalPolicy(int h, bool async) : h_(h), async_(async) {}
  std::string name() const override {
    return "local:" + std::to_string(h_) + (async_ ? "(async)" : "");
  }
  int threshold(const Progress&, int live) const override {
    return async_ ? 1 : clamp_k(live, live);
  }
  bool pusher_waits() const override { return !async_; }
  int local_steps() const override { return h_; }

 private:
  int h_;
  bool async_;
};

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

void validate_local(const LocalOptions& l) {
  if (!(l.lr >= 0) || !std::isfinite(l.lr))
    throw InputError("local.lr = " + num(l.lr) + ": expected > 0 (or 0 for optim.lr)");
  if (!(l.momentum >= 0 && l.momentum < 1))
    throw InputError("local.momentum = " + num(l.momentum) + ": expected in [0, 1)");
  if (l.outer != "sgd" && l.outer != "momentum" && l.outer != "nesterov")
    throw InputError("local.outer = '" + l.outer + "': expected sgd, momentum or nesterov");
  if (!(l.outer_lr > 0) || !std::isfinite(l.outer_lr))
    throw InputError("local.outer_lr = " + num(l.outer_lr) + ": expected > 0");
  if (!(l.outer_momentum >= 0 && l.outer_momentum < 1))
    throw InputError("local.outer_momentum = " + num(l.outer_momentum) + ": expected in [0, 1)");
}

// auto with its pilot's choice (policy.auto_choice; runtime/pilot.h): the
// chosen fixed policy, push for push, under the name auto, so the rows say
// which policy the user asked for and the k column which K ran.
class PilotedPolicy final : public Policy {
 public:
  explicit PilotedPolicy(std::unique_ptr<Policy> chosen) : p_(std::move(chosen)) {}
  std::string name() const override { return "auto"; }
  int threshold(const Progress& p, int live) const override { return p_->threshold(p, live); }
  bool pusher_waits() const override { return p_->pusher_waits(); }
  int local_steps() const override { return p_->local_steps(); }
  int staleness_bound() const override { return p_->staleness_bound(); }
  void on_push_loss(double loss) override { p_->on_push_loss(loss); }
  void observe_push(const PushSignal& s) override { p_->observe_push(s); }
  double implicit_momentum() const override { return p_->implicit_momentum(); }
  void on_lr(double lr) override { p_->on_lr(lr); }
  void on_step_gain(double gain) override { p_->on_step_gain(gain); }
  std::vector<double> save_state() const override { return p_->save_state(); }
  bool reads_state(size_t size) const override { return p_->reads_state(size); }
  void restore_state(std::span<const double> s) override { p_->restore_state(s); }

 private:
  std::unique_ptr<Policy> p_;
};

std::unique_ptr<Policy> piloted_policy(const PolicyOptions& o, int workers, double lr) {
  PolicyOptions chosen;
  if (o.auto_choice == kAsyncCorrected) {
    chosen.kind = "async";  // the server's correction: server_mitigations
  } else {
    const PolicyName n = parse_policy_name(o.auto_choice, "policy.auto_choice");
    const bool fixed = (n.kind == "sync" || n.kind == "async" || n.kind == "hybrid") && !n.number;
    const bool k_ok = n.kind == "kasync" && n.number && *n.number >= 1 && *n.number <= workers;
    if (!fixed && !k_ok) {
      throw InputError("policy.auto_choice = '" + o.auto_choice +
                       "': expected sync, async, kasync:K with K in [1, workers = " +
                       std::to_string(workers) + "], hybrid, " + kAsyncCorrected + " or " +
                       kAutoRule + " (the candidate its pilot chose)");
    }
    chosen.kind = n.kind;
    chosen.k = n.number.value_or(0);
    chosen.schedule = o.schedule;  // hybrid: the run's schedule, as its pilot ran it
  }
  return std::make_unique<PilotedPolicy>(make_policy(chosen, workers, lr));
}

}  // namespace

Aggregation parse_aggregation(const std::string& s) {
  if (s == "mean") return Aggregation::kMean;
  if (s == "sum") return Aggregation::kSum;
  throw InputError("policy.aggregation = '" + s + "': expected mean or sum");
}

const char* to_string(Aggregation a) { return a == Aggregation::kMean ? "mean" : "sum"; }

std::unique_ptr<Policy> make_policy(const PolicyOptions& o, int workers, double lr, int batch) {
  if (workers < 1)
    throw InputError("train.workers = " + std::to_string(workers) + ": expected >= 1");
  const double b = o.schedule.loss_smoothing;
  if (!(b > 0 && b < 1)) {
    throw InputError("policy.loss_smoothing = " + std::to_string(b) + ": expected in (0, 1)");
  }
  if (o.kind == "sync") return std::make_unique<SyncPolicy>();
  if (o.kind == "ssp") {
    if (o.s < 0) {
      throw InputError("policy.s = " + std::to_string(o.s) +
                       ": ssp expects a staleness bound s >= 0 (as ssp:S or policy.s)");
    }
    return std::make_unique<SspPolicy>(o.s);
  }
  if (o.kind == "async") return std::make_unique<AsyncPolicy>();
  if (o.kind == "auto" && !o.auto_choice.empty() && o.auto_choice != kAutoRule) {
    return piloted_policy(o, workers, lr);
  }
  if (o.kind == "auto") {
    auto a = std::make_unique<AutoController>(
        workers, parse_auto_ablate(o.auto_ablate, auto_rule_parts(o.auto_rule)),
        o.aggregation == Aggregation::kMean ? lr : 0.0, parse_auto_constants(o.auto_constants));
    a->set_batch(batch);
    return a;
  }
  if (o.kind == "hogwild") return std::make_unique<AsyncPolicy>("hogwild");
  // The serverless gossip policies (policy/gossip.h) have no server either:
  // their runtime never calls the policy; its name is what rows carry.
  if (o.kind == "dpsgd" || o.kind == "adpsgd" || o.kind == "sgp") {
    return std::make_unique<AsyncPolicy>(o.kind);
  }
  if (o.kind == "pdsgdm") {
    if (o.k < 1) {
      throw InputError("policy.name = 'pdsgdm:" + std::to_string(o.k) +
                       "': expected P >= 1 local steps between gossip rounds");
    }
    return std::make_unique<AsyncPolicy>("pdsgdm:" + std::to_string(o.k));
  }
  if (o.kind == "kasync" || o.kind == "kbatch") {
    if (o.k < 1 || o.k > workers) {
      throw InputError("policy.k = " + std::to_string(o.k) + ": " + o.kind +
                       " expects K in [1, workers = " + std::to_string(workers) + "]");
    }
    return std::make_unique<FixedKPolicy>(o.k, o.kind == "kasync");
  }
  if (o.kind == "hybrid") {
    const ScheduleOptions& s = o.schedule;
    if (s.kind != "step" && s.kind != "linear" && s.kind != "exponential" && s.kind != "cosine" &&
        s.kind != "adaptive") {
      throw InputError("policy.schedule = '" + s.kind +
                       "': expected step, linear, exponential, cosine or adaptive");
    }
    if (s.k0 < 1 || s.k0 > workers) {
      throw InputError("policy.k0 = " + std::to_string(s.k0) +
                       ": expected K0 in [1, workers = " + std::to_string(workers) + "]");
    }
    if (s.step < 0) throw InputError("policy.step: expected > 0 (or 0 for the default 3/lr)");
    if (s.ramp < 0) throw InputError("policy.ramp: expected > 0 (or 0 for the default)");
    if (lr <= 0) throw InputError("optim.lr: expected > 0");
    return std::make_unique<HybridPolicy>(resolve_schedule(s, lr, workers), workers);
  }
  if (o.kind == "local") {
    if (o.k < 1) {
      throw InputError("policy.name = 'local:" + std::to_string(o.k) +
                       "': expected H >= 1 local steps per push");
    }
    validate_local(o.local);
    return std::make_unique<LocalPolicy>(o.k, o.local.async);
  }
  std::string names;
  for (const std::string& n : policy_names()) {
    names += (names.empty() ? "" : n == policy_names().back() ? " or " : ", ") + n;
  }
  throw InputError("policy.name = '" + o.kind + "': expected " + names);
}

bool pilot_runs_hybrid(const PolicyOptions& o) { return o.auto_candidates == "k+hybrid"; }
bool pilot_runs_rule(const PolicyOptions& o) { return o.auto_candidates == "k+rule"; }

MitigationOptions server_mitigations(const PolicyOptions& o, MitigationOptions m) {
  if (o.kind == "auto" && o.auto_choice == kAsyncCorrected) m.momentum_correction = true;
  return m;
}

PolicyName parse_policy_name(const std::string& name, const std::string& key) {
  const size_t colon = name.find(':');
  PolicyName p{name.substr(0, colon), std::nullopt};
  if (colon == std::string::npos) return p;
  const std::string k = name.substr(colon + 1);
  try {
    size_t used = 0;
    const long v = std::stol(k, &used);
    if (used != k.size()) throw std::invalid_argument(k);
    p.number = static_cast<int>(v);
  } catch (const std::exception&) {
    throw InputError(key + " = '" + name + "': expected an integer K after ':'");
  }
  return p;
}

const std::vector<std::string>& policy_names() {
  static const std::vector<std::string> names = {
      "sync",  "async",   "hybrid", "auto",   "kasync:K", "kbatch:K", "local:H",
      "ssp:S", "hogwild", "dpsgd",  "adpsgd", "sgp",      "pdsgdm:P"};
  return names;
}

}  // namespace hsgd
