// Validation: every key's own range (from its declaration, keys.cc), then the
// table of refusals: the rules across keys, each with its message. A rule
// that reads one key only belongs in that key's declaration, not here.
#include <cmath>
#include <string>

#include "hsgd/config/config.h"
#include "hsgd/config/keys.h"
#include "hsgd/core/error.h"
#include "hsgd/policy/policy.h"
#include "hsgd/server/sparse.h"

namespace hsgd {
namespace config_internal {
namespace {

// The message of `check`, or "" when it throws nothing: for the rules that
// another module states (the policy's constructor, the sparse server).
std::string thrown_by(const std::function<void()>& check) {
  try {
    check();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

// model dpgmm takes SVI steps lambda <- (1 - rho) lambda + rho lambda_hat:
// every Beta and Gamma parameter stays positive only for a convex
// combination, so whatever else moves lambda is refused (model/dpgmm.h).
std::string dpgmm_refusal(const Config& c) {
  if (c.model.name != "dpgmm") return "";
  const std::string why =
      ": model dpgmm takes natural-gradient SVI steps, lambda <- (1 - rho) lambda + rho "
      "lambda_hat, which keep its Beta and Gamma parameters positive only as a convex "
      "combination; ";
  if (c.optim.kind != "sgd") {
    return "optim.kind = '" + c.optim.kind + "'" + why + "expected sgd";
  }
  if (c.optim.weight_decay != 0) {
    return "optim.weight_decay = " + num(c.optim.weight_decay) + why + "expected 0";
  }
  const bool aggregates =
      c.policy.kind != "async" && c.policy.kind != "ssp" && c.policy.kind != "hogwild";
  if (aggregates && c.policy.aggregation == Aggregation::kSum) {
    return "policy.aggregation = 'sum'" + why + "expected mean";
  }
  if (c.compress.on()) {
    const bool push = !c.compress.push.none();
    return std::string(push ? "compress.push" : "compress.pull") + " = '" +
           (push ? c.compress.push.name() : c.compress.pull.name()) + "'" + why +
           "lossy compression moves it off that line; expected none";
  }
  const double base = scaled_lr(c.optim, c.train.workers, c.train.batch);
  const double first = c.lr_schedule.kind == "robbins-monro"
                           ? base * std::pow(c.lr_schedule.tau, -c.lr_schedule.kappa)
                           : base;
  if (first > 1) {
    return "optim.lr = " + num(c.optim.lr) + why + "the rate rho must be <= 1, and it is " +
           num(first) +
           (c.lr_schedule.kind == "robbins-monro" ? " at the first update (lr x tau^-kappa)" : "") +
           (c.optim.scale_lr ? " (after optim.scale_lr)" : "");
  }
  if (c.staleness.dc_asgd || c.staleness.dc_lambda > 0) {
    return "staleness.dc_asgd = true" + why +
           "DC-ASGD's correction term is not one; expected false";
  }
  if (c.policy.kind == "hogwild") {
    return "policy.name = 'hogwild'" + why +
           "hogwild workers add steps computed from racing reads with no server to rebase "
           "them; expected a policy with a server";
  }
  if (c.staleness.rebase == 0 && c.policy.kind != "sync") {
    return "staleness.rebase = false" + why +
           "a push computed from stale parameters is one only when rebased onto the current "
           "ones; expected true or auto";
  }
  if (c.sampling.kind != "uniform") {
    return "sampling.kind = '" + c.sampling.kind +
           "': model dpgmm scales its sufficient statistics by N / |B| for uniform batches; "
           "expected uniform";
  }
  if (c.policy.kind == "local") {
    const LocalOptions& l = c.policy.local;
    if (l.momentum != 0) return "local.momentum = " + num(l.momentum) + why + "expected 0";
    if (l.outer != "sgd") return "local.outer = '" + l.outer + "'" + why + "expected sgd";
    if (l.outer_lr > 1) return "local.outer_lr = " + num(l.outer_lr) + why + "expected <= 1";
    if (l.lr > 1) return "local.lr = " + num(l.lr) + why + "expected <= 1";
  }
  return "";
}

std::vector<Refusal> table() {
  auto quoted = [](const std::string& s) { return "'" + s + "'"; };
  return {
      {"model dpgmm with anything but a convex SVI step: optim.kind other than sgd, weight "
       "decay, sum aggregation, compression, a rate above 1 (lr, scale_lr, robbins-monro's "
       "first), DC-ASGD, hogwild, staleness.rebase = false off sync, loss sampling, local "
       "momentum or an outer optimizer other than sgd",
       dpgmm_refusal},
      {"train.budget and train.epochs both 0 (the run would never end)",
       [](const Config& c) -> std::string {
         if (c.train.budget != 0 || c.train.epochs != 0) return "";
         return "train.budget and train.epochs are both 0: give a time budget (--budget) or a "
                "number of epochs (--epochs)";
       }},
      {"train.servers = 0 with a policy that has a server (only the gossip policies have none)",
       [quoted](const Config& c) -> std::string {
         if (c.train.servers != 0 || is_gossip_policy(c.policy.kind)) return "";
         return "train.servers = 0: expected >= 1 (policy " + quoted(c.policy_name) +
                " has a parameter server; only the gossip policies run without one)";
       }},
      {"train.servers above 1 off the mpi and sim runtimes",
       [quoted](const Config& c) -> std::string {
         if (c.train.servers <= 1 || c.train.runtime == "mpi" || c.train.runtime == "sim") {
           return "";
         }
         return "train.servers = " + std::to_string(c.train.servers) +
                ": only the mpi runtime (server ranks) and the simulator (server nodes) have "
                "server shards; train.runtime = " +
                quoted(c.train.runtime) + " runs one server";
       }},
      {"model.sparse with train.servers > 1 on sim",
       [](const Config& c) -> std::string {
         if (!c.model.sparse || c.train.servers == 1 || c.train.runtime != "sim") return "";
         return "model.sparse = true with train.servers = " + std::to_string(c.train.servers) +
                ": the simulator runs row-sparse models with one server shard (the mpi runtime "
                "partitions the rows over its server ranks)";
       }},
      {"model.sparse with policy local or hogwild",
       [](const Config& c) -> std::string {
         if (!c.model.sparse || (c.policy.kind != "local" && c.policy.kind != "hogwild")) return "";
         return "model.sparse = true: not supported with policy " + c.policy.kind +
                " (workers push model deltas or write shared memory)";
       }},
      {"model.sparse with sampling.kind other than uniform",
       [](const Config& c) -> std::string {
         if (!c.model.sparse || c.sampling.kind == "uniform") return "";
         return "model.sparse = true: needs sampling.kind = uniform";
       }},
      {"model.sparse with a compressor",
       [](const Config& c) -> std::string {
         if (!c.model.sparse || !c.compress.on()) return "";
         return "model.sparse = true: row-sparse pushes are not compressed; expected "
                "compress.push and compress.pull = 'none'";
       }},
      {"model.sparse with DC-ASGD or Gap-Aware (dense only; server/sparse.h)",
       [](const Config& c) -> std::string {
         if (!c.model.sparse) return "";
         if (server_mitigations(c.policy, c.staleness).momentum_correction &&
             !c.staleness.momentum_correction) {
           return "policy.auto_choice = '" + c.policy.auto_choice +
                  "': the momentum correction is not supported with row-sparse push/pull "
                  "(model.sparse = true)";
         }
         return thrown_by([&] { check_sparse_supported(c.optim, c.staleness); });
       }},
      {"train.min_workers above train.workers; faults naming a worker >= train.workers",
       [](const Config& c) {
         return thrown_by([&] { validate(c.faults, c.train.workers, c.train.min_workers); });
       }},
      {"[faults] on the mpi runtime or with policy hogwild",
       [](const Config& c) -> std::string {
         if (!c.faults.any() || (c.train.runtime != "mpi" && c.policy.kind != "hogwild")) {
           return "";
         }
         return std::string("[faults]: fault injection runs on the sim and threads runtimes, ") +
                (c.train.runtime == "mpi" ? "not on mpi (README: Workers that leave and rejoin)"
                                          : "not with policy hogwild (it has no server)");
       }},
      {"a policy its constructor refuses: an unknown name, K or K0 outside [1, train.workers], "
       "an unknown policy.auto_ablate part, a bad policy.auto_constants (policy/policy.cc)",
       [](const Config& c) {
         return thrown_by([&] { make_policy(c.policy, c.train.workers, c.optim.lr); });
       }},
      {"hybrid with policy.clock seconds or epochs and the default step (3/lr is in updates)",
       [](const Config& c) -> std::string {
         const ScheduleOptions& s = c.policy.schedule;
         if (c.policy.kind != "hybrid" || s.kind == "adaptive" ||
             s.clock == ScheduleClock::kUpdates || s.step != 0 ||
             (s.kind != "step" && s.ramp != 0)) {
           return "";
         }
         // The default step is 3/lr updates; in seconds or epochs it would
         // keep K near K0 for the whole run.
         return std::string("policy.clock = '") + to_string(s.clock) + "': the hybrid " + s.kind +
                " schedule needs an explicit " +
                (s.kind == "step" ? "policy.step" : "policy.step or policy.ramp") +
                " in that unit (the default 3/lr is in updates)";
       }},
      {"policy hogwild off the threads runtime",
       [quoted](const Config& c) -> std::string {
         if (c.policy.kind != "hogwild" || c.train.runtime == "threads") return "";
         return "policy.name = 'hogwild': runs on the threads runtime only (workers write into "
                "shared memory); train.runtime = " +
                quoted(c.train.runtime) + " cannot run it";
       }},
      {"policy hogwild with an optimizer other than sgd",
       [quoted](const Config& c) -> std::string {
         if (c.policy.kind != "hogwild" || c.optim.kind == "sgd") return "";
         return "optim.kind = " + quoted(c.optim.kind) +
                ": hogwild workers apply plain SGD; expected sgd";
       }},
      // ---- the serverless gossip policies (issue 28, policy/gossip.h)
      {"a gossip policy with train.servers above 1 (there is no server: 0, or the default 1, "
       "which it ignores)",
       [quoted](const Config& c) -> std::string {
         if (!is_gossip_policy(c.policy.kind) || c.train.servers <= 1) return "";
         return "train.servers = " + std::to_string(c.train.servers) + ": policy " +
                quoted(c.policy_name) +
                " has no server (on mpi every rank is a worker); expected 0 (or 1, the default, "
                "which it ignores)";
       }},
      {"a gossip policy with an optimizer other than sgd, momentum or nesterov",
       [quoted](const Config& c) -> std::string {
         if (!is_gossip_policy(c.policy.kind) || c.optim.kind == "sgd" ||
             c.optim.kind == "momentum" || c.optim.kind == "nesterov") {
           return "";
         }
         return "optim.kind = " + quoted(c.optim.kind) +
                ": gossip workers run sgd, momentum or nesterov on their own models";
       }},
      // CHOCO compressed gossip (runtime/gossip_choco.h, docs/gossip.md#compressed-gossip-choco)
      {"a gossip policy with compress.pull (gossip compresses with compress.push)",
       [quoted](const Config& c) -> std::string {
         if (!is_gossip_policy(c.policy.kind) || c.compress.pull.none()) return "";
         return "compress.pull = " + quoted(c.compress.pull.name()) + ": policy " +
                quoted(c.policy_name) +
                " has no pull (CHOCO compresses what a worker sends with compress.push); "
                "expected none";
       }},
      {"sgp or adpsgd with compress.push (CHOCO runs with dpsgd and pdsgdm)",
       [quoted](const Config& c) -> std::string {
         if (c.compress.push.none() || (c.policy.kind != "sgp" && c.policy.kind != "adpsgd")) {
           return "";
         }
         return "compress.push = " + quoted(c.compress.push.name()) + ": policy " +
                quoted(c.policy_name) +
                (c.policy.kind == "sgp"
                     ? " mixes push-sum shares, which CHOCO's public copies do not model"
                     : " averages pairs wait-free, which CHOCO's public copies do not model") +
                "; CHOCO compressed gossip runs with dpsgd and pdsgdm; expected none";
       }},
      {"compressed gossip on a time-varying topology",
       [quoted](const Config& c) -> std::string {
         if (c.compress.push.none() || !is_gossip_policy(c.policy.kind)) return "";
         if (c.gossip.topology != "onepeer-exp" && c.gossip.topology != "random-matching") {
           return "";
         }
         return "gossip.topology = " + quoted(c.gossip.topology) +
                ": with compress.push = " + quoted(c.compress.push.name()) +
                " (CHOCO) every worker mixes its neighbours' public copies, which needs a "
                "static graph; expected ring, torus, exp, complete or star";
       }},
      {"compressed dpsgd with gossip.order cta (CHOCO is adapt-then-combine)",
       [quoted](const Config& c) -> std::string {
         if (c.compress.push.none() || c.policy.kind != "dpsgd" || c.gossip.order == "atc") {
           return "";
         }
         return "gossip.order = " + quoted(c.gossip.order) +
                ": with compress.push = " + quoted(c.compress.push.name()) +
                " dpsgd runs CHOCO, which is adapt-then-combine; expected \"atc\"";
       }},
      {"compressed gossip with [faults]",
       [quoted](const Config& c) -> std::string {
         if (c.compress.push.none() || !is_gossip_policy(c.policy.kind) || !c.faults.any()) {
           return "";
         }
         return "[faults] with compress.push = " + quoted(c.compress.push.name()) +
                ": membership changes are not implemented for CHOCO compressed gossip (the "
                "public copies would have to follow the live graph); expected no faults or "
                "compress.push = none";
       }},
      {"compressed gossip with compress.error_feedback on (CHOCO's public copy is the memory)",
       [quoted](const Config& c) -> std::string {
         if (c.compress.push.none() || !is_gossip_policy(c.policy.kind) ||
             c.compress.error_feedback != 1) {
           return "";
         }
         return "compress.error_feedback = true: with policy " + quoted(c.policy_name) +
                " CHOCO's public copies are the compressor's memory; expected \"auto\" or "
                "false";
       }},
      {"compressed gossip with compress.warmup",
       [quoted](const Config& c) -> std::string {
         if (c.compress.push.none() || !is_gossip_policy(c.policy.kind) || c.compress.warmup == 0) {
           return "";
         }
         return "compress.warmup = " + std::to_string(c.compress.warmup) + ": policy " +
                quoted(c.policy_name) +
                " compresses every gossip round (CHOCO has no warm-up); expected 0";
       }},
      {"a gossip policy with model.sparse, or with [faults] on mpi",
       [quoted](const Config& c) -> std::string {
         if (!is_gossip_policy(c.policy.kind)) return "";
         if (c.model.sparse) {
           return "model.sparse = true: not supported with policy " + quoted(c.policy_name) +
                  " (every worker holds a dense model)";
         }
         if (c.faults.any() && c.train.runtime != "sim" && c.train.runtime != "threads") {
           return "[faults] with policy " + quoted(c.policy_name) +
                  ": membership changes of the gossip graph run on the sim and threads runtimes "
                  "only, not on " +
                  c.train.runtime;
         }
         return "";
       }},
      {"gossip.global_every with adpsgd (a global average is a barrier)",
       [](const Config& c) -> std::string {
         if (c.policy.kind != "adpsgd" || c.gossip.global_every == 0) return "";
         return "gossip.global_every = " + std::to_string(c.gossip.global_every) +
                ": adpsgd is wait-free and has no step at which every worker meets; expected 0";
       }},
      {"stragglers with an exponential or lognormal delay and stragglers.scale = 0",
       [](const Config& c) -> std::string {
         const StragglerConfig& g = c.stragglers;
         if ((g.delay != "exponential" && g.delay != "lognormal") || g.fraction == 0 ||
             g.scale != 0) {
           return "";
         }
         return "stragglers.scale = 0: the " + g.delay + " delay needs a scale in seconds > 0";
       }},
      {"a compressor with policy hogwild (no server)",
       [quoted](const Config& c) -> std::string {
         const CompressOptions& z = c.compress;
         if (!z.on() || c.policy.kind != "hogwild") return "";
         const char* key = z.push.none() ? "compress.pull" : "compress.push";
         return std::string(key) + " = " + quoted(z.push.none() ? z.pull.name() : z.push.name()) +
                ": policy hogwild has no server to compress for; expected none";
       }},
  };
}

}  // namespace

const std::vector<Refusal>& refusals() {
  static const std::vector<Refusal> t = table();
  return t;
}

std::string check_message(const Key& k, const Check& check, const Config& c) {
  return k.dotted() + " = " + k.show(c) + ": " +
         (check.message.empty() ? "expected " + check.expected : check.message);
}

}  // namespace config_internal

void validate(const Config& c) {
  for (const config_internal::Key& k : config_internal::keys()) {
    for (const config_internal::Check& check : k.checks) {
      if (check.applies && !check.applies(c)) continue;
      if (!check.ok(c)) throw InputError(config_internal::check_message(k, check, c));
    }
  }
  for (const config_internal::Refusal& r : config_internal::refusals()) {
    if (std::string m = r.refuse(c); !m.empty()) throw InputError(m);
  }
}

}  // namespace hsgd
