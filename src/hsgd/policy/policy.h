// The Policy seam: when buffered pushes become one update, and whether a
// pusher must wait for it. Semantics: DESIGN.md, "Policies: the exact
// semantics". A policy owns no thread, buffer or clock; the server asks it.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "hsgd/policy/mitigation.h"
#include "hsgd/policy/schedule.h"

namespace hsgd {

// How far training has come, as the server knows it. `seconds` is supplied
// by the runtime with each event (wall or virtual time); the server reads no
// clock.
struct Progress {
  int64_t updates = 0;  // the server's version V
  double seconds = 0;
  double epochs = 0;
};

enum class Aggregation { kMean, kSum };
Aggregation parse_aggregation(const std::string& s);  // mean | sum
const char* to_string(Aggregation a);

// local:H (Local SGD / periodic model averaging; the [local] config section).
// Each worker takes H SGD steps with its own momentum on its own copy of the
// parameters, then pushes the delta (pulled - local) as a pseudo-gradient.
// The server's optimizer is then the outer optimizer (runtime/row.h: server_optimizer).
struct LocalOptions {
  double lr = 0;                // local lr; 0 = optim.lr. >= 0
  double momentum = 0.9;        // worker-local heavy-ball momentum, [0, 1)
  bool async = false;           // false: averaged like sync; true: applied as they come
  std::string outer = "sgd";    // outer optimizer: sgd | momentum | nesterov (DiLoCo)
  double outer_lr = 1.0;        // > 0; sgd with lr 1 and mean aggregation = model averaging
  double outer_momentum = 0.9;  // momentum, nesterov: [0, 1)
};

struct PolicyOptions {
  std::string kind = "hybrid";  // sync | async | kasync | kbatch | hybrid | local | ssp
  int k = 0;                    // kasync, kbatch: the threshold K (>= 1); local: H (>= 1)
  int s = -1;                   // ssp: the staleness bound s (>= 0; -1 = not given)
  LocalOptions local;           // local
  ScheduleOptions schedule;     // hybrid
  Aggregation aggregation = Aggregation::kMean;
  // auto: the parts of its rule to switch off, for ablations only
  // (policy.auto_ablate; policy/auto_policy.h). "" = the full rule.
  std::string auto_ablate;
  // auto: its rule's constants overridden, for sensitivity studies only
  // (policy.auto_constants, "name=value,..."; policy/auto_policy.h). "" =
  // the rule's own.
  std::string auto_constants;
  // auto: which rule (policy.auto_rule; policy/auto_policy.h,
  // auto_rule_parts): 18, today's; 16, the rule before it; 14, the rule
  // before the sixteenth; 9, the rule before the fourteenth; 10 to 13, 15,
  // 17 and 19, tried and not adopted; 8 to 5, the rules before the ninth.
  // All kept for comparison.
  int auto_rule = 18;
  // auto with a pilot (issue 32; runtime/pilot.h): the share of the budget
  // each candidate runs on the simulator before training (policy.auto_pilot;
  // 0 = no pilot, the rule above), the candidate set (policy.auto_candidates:
  // "k", the K policies; "k+hybrid", those, hybrid and, with server
  // momentum, async with the momentum correction; "k+rule", the K policies
  // and the rule above), and the candidate the pilot chose
  // (policy.auto_choice; "" = not chosen yet). With a choice, auto is that
  // fixed policy, push for push, under the name auto; with the choice
  // kAutoRule, it is the rule, as without a pilot. 0.1 since issue 32's
  // ninth study (decision 13, examples/sweep/auto-pilot/README.md); 0 before.
  double auto_pilot = 0.1;
  // The share of each candidate's pilot, at its end, whose interval-mean
  // test accuracy ranks it (policy.auto_pilot_window; 1 = the whole pilot).
  double auto_pilot_window = 0.5;
  // The margin within which the pilot does not tell the K candidates' ranked
  // figures apart and keeps the largest K (policy.auto_pilot_margin, test
  // accuracy; 0 = the best figure). Half a point: the fifth study's decision
  // (examples/sweep/auto-pilot/README.md).
  double auto_pilot_margin = 0.005;
  // A second round (policy.auto_pilot_keep): the best this many candidates
  // of the first round continue to twice the pilot's share, and the choice
  // is made among them on that (successive halving); 0 = one round. Two:
  // the sixth study's decision (examples/sweep/auto-pilot/README.md).
  int auto_pilot_keep = 2;
  // k+hybrid: the ninth study's decision 12 (examples/sweep/auto-pilot/
  // README.md); "k" before it.
  std::string auto_candidates = "k+hybrid";
  std::string auto_choice;
};

// The pilot's name for async with the momentum correction
// (staleness.momentum_correction = true), as sweeps name that policy. A
// piloted auto that chose it runs async, and the run layer turns the
// server's correction on (runtime/row.cc, server_options).
inline constexpr const char* kAsyncCorrected = "async+staleness.momentum_correction=true";

// The pilot's name for auto's own rule (policy.auto_rule) as a candidate
// (policy.auto_candidates = "k+rule"). A piloted auto that chose it runs the
// rule, as auto without a pilot does.
inline constexpr const char* kAutoRule = "rule";

// Whether auto's pilot runs these candidates (policy.auto_candidates):
// hybrid and the corrected async ("k+hybrid"); the rule ("k+rule"). The one
// place each set is named (runtime/pilot.cc builds it; config/keys.cc reads
// the schedule keys for it).
bool pilot_runs_hybrid(const PolicyOptions& o);
bool pilot_runs_rule(const PolicyOptions& o);

// The staleness mitigations the server runs: the configured `m`, with the
// momentum correction on where `o` is auto whose pilot chose
// kAsyncCorrected. The one place that choice reaches the server
// (runtime/row.cc, server_options) and the config's checks
// (config/validate.cc).
MitigationOptions server_mitigations(const PolicyOptions& o, MitigationOptions m);

// What the server tells a policy after each finite, unfiltered push
// (Policy::observe_push): everything in it is the same on every replica of a
// sharded server (no gradient values), so replicas decide alike.
struct PushSignal {
  int worker = 0;
  int64_t staleness = 0;  // tau = V - v of the push
  double loss = 0;        // the push's training loss (finite)
  double seconds = 0;     // the runtime's time of the push
  int live_workers = 1;
  bool pusher_waits = false;  // the pusher is still waiting after this push
  // Workers whose wait ended with this push (an update was applied).
  const std::vector<int>* released = nullptr;
};

class Policy {
 public:
  virtual ~Policy() = default;
  // "sync", "async", "kasync:4", "kbatch:4", "hybrid(step)".
  virtual std::string name() const = 0;
  // The number of buffered pushes from live workers that fires an update,
  // clamped to [1, live_workers] (live_workers >= 1).
  virtual int threshold(const Progress& p, int live_workers) const = 0;
  // True: a pusher waits until the update containing its push is applied
  // (sync, kasync, hybrid). False: it pulls again at once (async, kbatch).
  virtual bool pusher_waits() const = 0;
  // 0: a worker pushes the gradient of one batch (every policy but local).
  // H >= 1 (local:H): a worker takes H local steps and pushes the model
  // delta, with batch size H x batch (see runtime/local_steps.h).
  virtual int local_steps() const { return 0; }
  // ssp: how many clocks (pushes) a worker may run ahead of the slowest live
  // worker before its pull waits; -1 (every other policy): unbounded.
  virtual int staleness_bound() const { return -1; }
  // Called by the server with every push's training loss, before the push
  // is buffered (hybrid(adaptive) smooths it into its threshold).
  virtual void on_push_loss(double /*loss*/) {}
  // Called by the server at the end of every finite push it buffered (not
  // for filtered or non-finite pushes): auto's signals.
  virtual void observe_push(const PushSignal&) {}
  // The momentum the policy's asynchrony adds by itself, in [0, 1): the
  // server's momentum optimizers shrink their own to keep the total at the
  // configured value (Optimizer::set_implicit_momentum). 0 for every policy
  // but auto.
  virtual double implicit_momentum() const { return 0; }
  // The learning rate the server's next update steps with (optim.lr after
  // optim.scale_lr and the lr schedule): given by the server at its
  // construction, after every update and after a load. auto's staleness
  // budget reads it; the others ignore it.
  virtual void on_lr(double /*lr*/) {}
  // How far the server's steady step moves the parameters, in units of lr x
  // the aggregated gradient (Optimizer::step_gain: 1 for sgd, 1 / (1 - mu)
  // for momentum and nesterov, 0 where the step is not such a multiple),
  // given once by the server at its construction, before on_lr. auto's
  // ninth rule turns its spike guard off only for 1 (plain sgd); the tenth
  // counts a step as lr x the gain in its staleness budget, and turns the
  // guard off wherever the gain is known.
  virtual void on_step_gain(double /*gain*/) {}
  // Per-run state for checkpoints (empty for the stateless policies).
  virtual std::vector<double> save_state() const { return {}; }
  // Whether restore_state reads a saved state of `size` numbers (this
  // format's size; a policy that also reads older formats says so).
  // Server::load refuses any other size before restore_state.
  virtual bool reads_state(size_t size) const { return size == save_state().size(); }
  virtual void restore_state(std::span<const double>) {}
};

// Builds a policy for `workers` workers. Throws InputError for an unknown
// kind or K outside [1, workers] (naming the key policy.k), for local H < 1
// (naming policy.name), for bad [local] values (naming local.*), for ssp
// s < 0 (policy.s) and policy.loss_smoothing outside (0, 1). `batch` is the
// workers' batch (train.batch; 0: not known), which only auto's nineteenth
// rule reads.
std::unique_ptr<Policy> make_policy(const PolicyOptions& o, int workers, double lr, int batch = 0);

// A policy's name split at its ':': "kasync:4" -> kind "kasync", number 4;
// "sync" -> kind "sync", no number. Throws InputError "<key> = '<name>':
// expected an integer K after ':'" when what follows ':' is not one.
struct PolicyName {
  std::string kind;
  std::optional<int> number;
};
PolicyName parse_policy_name(const std::string& name, const std::string& key);

// The policy names policy.name takes, in the order the docs list them (a
// ":K" form where the name takes a number).
const std::vector<std::string>& policy_names();

}  // namespace hsgd
