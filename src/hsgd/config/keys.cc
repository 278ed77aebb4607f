// The declaration of every config key (keys.h says who reads it). One entry
// per key: section, name, the Config member, the doc line, then its single-key
// checks, the settings that make it moot, and its flags. Cross-section rules
// are in validate.cc's table of refusals.
#include "hsgd/config/keys.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <utility>

#include "hsgd/compress/codec.h"
#include "hsgd/config/decl.h"
#include "hsgd/config/values.h"
#include "hsgd/core/error.h"

namespace hsgd::config_internal {
namespace {

using namespace decl;  // NOLINT: the declaration's vocabulary

// ---- what makes a key moot
using Names = std::vector<std::string>;
bool among(const std::string& s, const Names& set) {
  return std::find(set.begin(), set.end(), s) != set.end();
}
std::string listed(const Names& set) {
  std::string s;
  for (size_t i = 0; i < set.size(); ++i) {
    s += (i == 0 ? "" : i + 1 == set.size() ? " or " : ", ") + set[i];
  }
  return s;
}
std::string policy_is(const Config& c) { return "policy.name = " + quoted(c.policy_name); }

// Read by these policies only.
Moot policies(const Names& kinds) {
  return {"policy.name is not " + listed(kinds),
          [kinds](const Config& c) { return among(c.policy.kind, kinds) ? "" : policy_is(c); }};
}
// Not read by these policies.
Moot not_policies(const Names& kinds) {
  return {"policy.name is " + listed(kinds),
          [kinds](const Config& c) { return among(c.policy.kind, kinds) ? policy_is(c) : ""; }};
}
// Whether the hybrid schedule's keys are read: by the hybrid policy, and by
// auto whose pilot may run hybrid or chose it (runtime/pilot.h: the
// candidate is hybrid with the run's schedule).
bool reads_schedule(const Config& c) {
  if (c.policy.kind == "hybrid") return true;
  return c.policy.kind == "auto" && c.policy.auto_pilot > 0 &&
         (pilot_runs_hybrid(c.policy) || c.policy.auto_choice == "hybrid");
}
Moot schedule_read() {
  return {"policy.name is not hybrid, nor auto with hybrid among its pilot's candidates",
          [](const Config& c) { return reads_schedule(c) ? "" : policy_is(c); }};
}
// Read by the hybrid policy under these threshold schedules only.
Moot schedules(const Names& kinds) {
  return {"policy.schedule is not " + listed(kinds), [kinds](const Config& c) {
            return !reads_schedule(c) || among(c.policy.schedule.kind, kinds)
                       ? ""
                       : "policy.schedule = " + quoted(c.policy.schedule.kind);
          }};
}
Moot runtime(const char* r) {
  return {std::string("train.runtime is not ") + r, [r](const Config& c) {
            return c.train.runtime == r ? "" : "train.runtime = " + quoted(c.train.runtime);
          }};
}
// The simulator's network keys: read by the sim runtime, and on mpi by
// auto's pilot, which simulates the cluster (runtime/pilot.h).
Moot sim_network() {
  return {"train.runtime is not sim (nor mpi with policy.auto_pilot)",
          [](const Config& c) -> std::string {
            if (c.train.runtime == "sim") return "";
            if (c.train.runtime == "mpi" && c.policy.kind == "auto" && c.policy.auto_pilot > 0) {
              return "";
            }
            return "train.runtime = " + quoted(c.train.runtime);
          }};
}
Moot no_stragglers() {
  return {"no worker is a straggler (stragglers.fraction x train.workers rounds to 0)",
          [](const Config& c) -> std::string {
            if (c.stragglers.fraction == 0) return "stragglers.fraction = 0";
            if (std::lround(c.stragglers.fraction * c.train.workers) == 0) {
              return "stragglers.fraction = " + num(c.stragglers.fraction) +
                     " makes no straggler of train.workers = " + std::to_string(c.train.workers);
            }
            return "";
          }};
}
Moot delays(const Names& kinds) {
  return {"stragglers.delay is not " + listed(kinds), [kinds](const Config& c) {
            return among(c.stragglers.delay, kinds)
                       ? ""
                       : "stragglers.delay = " + quoted(c.stragglers.delay);
          }};
}
Moot no_compressor() {
  return {"compress.push and compress.pull are none", [](const Config& c) {
            return c.compress.on() ? "" : "compress.push and compress.pull = 'none'";
          }};
}
Moot optimizers(const Names& kinds) {
  return {"optim.kind is not " + listed(kinds), [kinds](const Config& c) {
            return among(c.optim.kind, kinds) ? "" : "optim.kind = " + quoted(c.optim.kind);
          }};
}
Moot lr_schedules(const Names& kinds) {
  return {"optim.lr_schedule is not " + listed(kinds), [kinds](const Config& c) {
            return among(c.lr_schedule.kind, kinds)
                       ? ""
                       : "optim.lr_schedule = " + quoted(c.lr_schedule.kind);
          }};
}
Moot partitions(const Names& kinds) {
  return {"data.partition is not " + listed(kinds), [kinds](const Config& c) {
            return among(c.data.partition.kind, kinds)
                       ? ""
                       : "data.partition = " + quoted(c.data.partition.kind);
          }};
}
// Read when the training or the test data is one of these specs.
Moot data_specs(const Names& specs) {
  return {"neither data.spec nor data.test is " + listed(specs), [specs](const Config& c) {
            return among(c.data.spec, specs) || among(c.data.test, specs)
                       ? ""
                       : "data.spec = " + quoted(c.data.spec);
          }};
}
Moot models_without(const std::string& what, const Names& names) {
  return {"model.name is " + listed(names) + " (no " + what + ")", [names](const Config& c) {
            return among(c.model.name, names) ? "model.name = " + quoted(c.model.name) : "";
          }};
}

std::vector<Key> declare() {
  std::vector<Key> v;
  auto add = [&v](auto&& decl) { v.push_back(decl.done()); };
  const auto local = [](const Config& c) { return c.policy.kind == "local"; };
  // The outer optimizer: local:H's (DiLoCo), or SlowMo's on a gossip
  // policy's global average (runtime/gossip_outer.h).
  const auto outer = [](const Config& c) {
    return c.policy.kind == "local" ||
           (is_gossip_policy(c.policy.kind) && c.gossip.global_every > 0);
  };
  const Moot not_outer{"policy.name is not local, nor a gossip policy with gossip.global_every > 0",
                       [outer](const Config& c) { return outer(c) ? "" : policy_is(c); }};

  // ---- [data]
  add(str_key("data", "spec", HSGD_REF(data.spec),
              "The training data: fashion-mnist, synthetic, idx:DIR, cifar10:DIR, csv:FILE, "
              "libsvm:FILE, npy:X.npy,Y.npy, npz:FILE[:XKEY,YKEY], synthetic-gmm, synthetic-ctr or "
              "criteo:FILE.")
          .calibration());
  add(str_key("data", "test", HSGD_REF(data.test),
              "A separate test-set spec; empty: the data's own test split, or a held-out fraction.")
          .calibration());
  add(num_key("data", "test_fraction", HSGD_REF(data.test_fraction),
              "The fraction held out for testing when the data has no test split.")
          .check([](double v) { return v > 0 && v < 1; }, "in (0, 1)")
          .moot({"data.test is given",
                 [](const Config& c) {
                   return c.data.test.empty() ? "" : "data.test = " + quoted(c.data.test);
                 }})
          .calibration());
  add(bool_key("data", "normalize", HSGD_REF(data.normalize),
               "Standardize features with the training set's mean and std (recorded in the saved "
               "model, so hsgd eval applies the same).")
          .calibration());
  const auto synthetic = [] { return data_specs({"synthetic", "synthetic-gmm"}); };
  add(int_key("data", "synthetic_samples", HSGD_REF(data.synthetic.samples),
              "Samples of the synthetic classification set (the paper's: 10 000) and of "
              "synthetic-gmm.")
          .check(at_least(2), ">= 2")
          .moot(synthetic())
          .calibration());
  add(int_key("data", "synthetic_features", HSGD_REF(data.synthetic.features),
              "Features per synthetic sample (synthetic-gmm: dimensions).")
          .check(at_least(1), ">= 1")
          .moot(synthetic())
          .calibration());
  add(int_key("data", "synthetic_classes", HSGD_REF(data.synthetic.classes),
              "Classes of the synthetic set (synthetic-gmm: mixture components).")
          .check(at_least(2), ">= 2")
          .moot(synthetic())
          .calibration());
  add(num_key("data", "synthetic_separation", HSGD_REF(data.synthetic.class_sep),
              "Std of each coordinate of the synthetic (and synthetic-gmm) class centres (larger: "
              "easier).")
          .check(above(0), "> 0")
          .moot(synthetic())
          .calibration());
  add(num_key("data", "synthetic_noise", HSGD_REF(data.synthetic.noise),
              "Std of the per-sample Gaussian noise of the synthetic set (synthetic-gmm: the mean "
              "per-dimension component std).")
          .check([](double v) { return v >= 0; }, ">= 0")
          .moot(synthetic())
          .calibration());
  add(int_key("data", "synthetic_seed", HSGD_REF(data.synthetic.seed),
              "Seed of the synthetic and synthetic-ctr sets (independent of train.seed).")
          .moot(data_specs({"synthetic", "synthetic-gmm", "synthetic-ctr"}))
          .calibration());
  add(str_key("data", "partition", HSGD_REF(data.partition.kind),
              "How the training set is split over the workers: iid, dirichlet (per-class "
              "Dirichlet(alpha) proportions), shards (classes_per_worker classes each) or quantity "
              "(Dirichlet(alpha) shard sizes).")
          .one_of({"iid", "dirichlet", "shards", "quantity"})
          .calibration());
  add(num_key("data", "alpha", HSGD_REF(data.partition.alpha),
              "Dirichlet concentration of the dirichlet and quantity partitions (small: skewed).")
          .check(above(0), "a number > 0")
          .moot(partitions({"dirichlet", "quantity"}))
          .calibration());
  add(int_key("data", "min_partition_size", HSGD_REF(data.partition.min_partition_size),
              "dirichlet and quantity: redraw until every worker holds at least this many "
              "samples.")
          .check(at_least(1), ">= 1")
          .moot(partitions({"dirichlet", "quantity"}))
          .calibration());
  add(int_key("data", "classes_per_worker", HSGD_REF(data.partition.classes_per_worker),
              "shards: the number of distinct classes each worker holds.")
          .check(at_least(1), ">= 1")
          .moot(partitions({"shards"}))
          .calibration());
  add(num_key("data", "global_fraction", HSGD_REF(data.partition.global_fraction),
              "The fraction of the training set put in a global pool every worker samples from.")
          .check([](double v) { return v >= 0 && v < 1; }, "in [0, 1)")
          .calibration());
  add(int_key("data", "project", HSGD_REF(data.project),
              "Project the features to this many dimensions by a seeded Gaussian random matrix "
              "(seed train.seed), before standardization; 0 = off.")
          .check(at_least(0), ">= 0 (0 = off)")
          .written(Written::kNotDefault)
          .calibration());
  const auto ctr = [] { return data_specs({"synthetic-ctr"}); };
  add(int_key("data", "ctr_samples", HSGD_REF(data.synthetic.ctr.samples),
              "Samples of the synthetic-ctr click-through set.")
          .check(at_least(2), ">= 2")
          .moot(ctr())
          .calibration());
  add(int_key("data", "ctr_dense", HSGD_REF(data.synthetic.ctr.dense),
              "Dense (Gaussian) features per synthetic-ctr sample.")
          .check(at_least(0), ">= 0")
          .moot(ctr())
          .calibration());
  add(int_key("data", "ctr_fields", HSGD_REF(data.synthetic.ctr.fields),
              "Categorical features per synthetic-ctr sample.")
          .check(at_least(0), ">= 0")
          .moot(ctr())
          .calibration());
  add(num_key("data", "zipf", HSGD_REF(data.synthetic.ctr.zipf),
              "synthetic-ctr ids: rank r has probability ~ r^-zipf.")
          .check(at_least(0), "a finite number >= 0")
          .moot(ctr())
          .calibration());

  // ---- [model]
  add(str_key("model", "name", HSGD_REF(model.name),
              "The model: softmax, mlp, lenet5, cifar-cnn, linear-test, dlrm, dpgmm (a "
              "Dirichlet-process Gaussian mixture fitted by SVI), or a TorchScript file.")
          .calibration());
  add(list_key("model", "hidden", HSGD_REF(model.hidden),
               "Hidden layer widths of mlp; of dlrm's bottom MLP. A --set value: \"256,128\".")
          .check(non_empty_widths, "widths >= 1")
          .moot(models_without("hidden layers",
                               {"softmax", "lenet5", "cifar-cnn", "linear-test", "dpgmm"}))
          .calibration());
  add(int_key("model", "table_rows", HSGD_REF(data.synthetic.ctr.rows),
              "dlrm and the ctr data: ids per categorical field (criteo: hash buckets).")
          .check([](int64_t v) { return v >= 1 && v <= INT32_MAX; }, "in [1, 2^31 - 1]")
          .moot({"model.name is not dlrm and the data is not synthetic-ctr or criteo:FILE",
                 [](const Config& c) {
                   const bool ctr_data =
                       c.data.spec == "synthetic-ctr" || c.data.spec.rfind("criteo:", 0) == 0;
                   return c.model.name == "dlrm" || ctr_data
                              ? ""
                              : "model.name = " + quoted(c.model.name);
                 }})
          .calibration());
  const auto not_dlrm = [] {
    return models_without("embeddings",
                          {"softmax", "mlp", "lenet5", "cifar-cnn", "linear-test", "dpgmm"});
  };
  add(int_key("model", "embedding_dim", HSGD_REF(model.embedding_dim),
              "dlrm: embedding width (also the bottom MLP's output).")
          .check(at_least(1), ">= 1")
          .moot(not_dlrm())
          .calibration());
  add(list_key("model", "top_hidden", HSGD_REF(model.top_hidden),
               "dlrm: the top MLP's hidden widths.")
          .check(non_empty_widths, "widths >= 1")
          .moot(not_dlrm())
          .calibration());
  const auto is_dpgmm = [](const Config& c) { return c.model.name == "dpgmm"; };
  const Moot not_dpgmm{"model.name is not dpgmm", [](const Config& c) {
                         return c.model.name == "dpgmm" ? ""
                                                        : "model.name = " + quoted(c.model.name);
                       }};
  add(int_key("model", "truncation", HSGD_REF(model.truncation),
              "dpgmm: the stick-breaking truncation (components the variational posterior has).")
          .check(at_least(1), ">= 1")
          .moot(not_dpgmm)
          .written_when(is_dpgmm)
          .calibration());
  add(num_key("model", "alpha", HSGD_REF(model.alpha),
              "dpgmm: the Dirichlet-process concentration (larger: more components a priori).")
          .check(above(0), "> 0")
          .moot(not_dpgmm)
          .written_when(is_dpgmm)
          .calibration());
  add(bool_key("model", "sparse", HSGD_REF(model.sparse),
               "Row-sparse push and pull of the embedding rows: workers pull the dense part and "
               "their next batch's rows, push the dense gradient and the touched rows'.")
          .moot(not_dlrm())
          .calibration());

  // ---- [train]
  add(int_key(
          "train", "workers", HSGD_REF(train.workers),
          "Workers (mpi: set to the ranks minus train.servers; the gossip policies: the ranks).")
          .check(at_least(1), ">= 1")
          .check([](int v) { return v <= 4096; }, "<= 4096")
          .resumable()
          .hash_as("1"));
  add(int_key("train", "batch", HSGD_REF(train.batch), "Batch size per worker.")
          .check(at_least(1), ">= 1")
          .calibration());
  add(num_key("train", "budget", HSGD_REF(train.budget),
              "Seconds of training (wall, or virtual on sim; evaluation excluded); 0 = no limit.")
          .check(at_least(0), "seconds >= 0")
          .resumable()
          .hash_as("0"));
  add(num_key("train", "epochs", HSGD_REF(train.epochs),
              "Passes over the training set; 0 = no limit. The run ends at the budget or the "
              "epochs, whichever comes first.")
          .check(at_least(0), ">= 0")
          .resumable()
          .hash_as("0"));
  add(num_key("train", "eval_every", HSGD_REF(train.eval_every), "Seconds between evaluations.")
          .check([](double v) { return v > 0; }, "seconds > 0"));
  add(int_key("train", "eval_samples", HSGD_REF(train.eval_samples),
              "Evaluate on at most this many test samples; 0 = all.")
          .check(at_least(0), ">= 0"));
  add(bool_key("train", "noise_scale", HSGD_REF(train.noise_scale),
               "Estimate the gradient noise scale of the pushes (McCandlish et al. 2018) into "
               "metrics.csv's noise_scale, grad_norm_sq, grad_trace_cov and noise_lag columns "
               "(output-files.md).")
          .moot(not_policies({"local", "hogwild", "dpsgd", "adpsgd", "sgp", "pdsgdm"}))
          .written_when([](const Config& c) { return c.train.noise_scale; }));
  add(int_key("train", "seed", HSGD_REF(train.seed),
              "Seed of the initial weights, data order, delays and every other random stream."));
  add(str_key("train", "runtime", HSGD_REF(train.runtime),
              "threads (one machine), sim (the virtual-time simulator) or mpi (under mpirun).")
          .one_of({"threads", "sim", "mpi"}));
  add(str_key("train", "out", HSGD_REF(train.out), "The output directory.")
          .check([](const std::string& s) { return !s.empty(); }, "a directory name")
          .hash_as("\"-\""));
  add(int_key(
          "train", "servers", HSGD_REF(train.servers),
          "Server shards: on mpi the first `servers` ranks, on sim that many server nodes, each "
          "holding a contiguous slice of the parameters (the same slices on both). The gossip "
          "policies have no server: 0 (or 1, which they ignore); on mpi every rank is then a "
          "worker.")
          .check(at_least(0), ">= 0"));
  add(num_key("train", "checkpoint_every", HSGD_REF(train.checkpoint_every),
              "Seconds of training between checkpoints (and a final one); 0 = off.")
          .check(at_least(0), "seconds >= 0 (0 = off)")
          .resumable()
          .hash_as("0"));
  add(int_key("train", "max_nonfinite", HSGD_REF(train.max_nonfinite),
              "The run stops (exit 3) after more than this many consecutive pushes dropped for a "
              "NaN or Inf.")
          .check(at_least(1), ">= 1"));
  add(num_key("train", "diverge_factor", HSGD_REF(train.diverge_factor),
              "The run stops (exit 3) at an evaluation whose test or training loss is above this "
              "multiple of the first evaluation's test loss; 0 = off.")
          .check([](double v) { return (v == 0 || v > 1) && finite(v); }, "a factor > 1 (0 = off)")
          .written(Written::kNotDefault));
  add(int_key("train", "min_workers", HSGD_REF(train.min_workers),
              "The run stops (exit 3) when fewer than this many workers are live.")
          .check(at_least(1), ">= 1")
          .note("<= train.workers")
          .written(Written::kNotDefault));

  // ---- [checkpoint], [mpi]
  add(int_key("checkpoint", "keep", HSGD_REF(checkpoint.keep),
              "How many of the newest checkpoints are kept.")
          .check(at_least(1), ">= 1")
          .moot({"train.checkpoint_every = 0",
                 [](const Config& c) {
                   return c.train.checkpoint_every == 0 ? "train.checkpoint_every = 0" : "";
                 }})
          .resumable()
          .hash_as("1"));
  add(num_key("mpi", "timeout", HSGD_REF(mpi.timeout),
              "Seconds any one wait for a message may last before the run stops naming the rank "
              "and the operation; must exceed the longest legitimate wait.")
          .check(above(0), "seconds > 0")
          .moot(runtime("mpi")));
  add(int_key("mpi", "chunk", HSGD_REF(mpi.chunk),
              "Floats per message of a push or a pull, and of a gossip exchange: a shard's "
              "slice (a gossip policy's model, or its CHOCO message's bytes / 4) travels in "
              "chunks of this many. The worker screens each chunk of a push as it sends it (the "
              "push is applied only whole and finite); the server runs its update chunk by chunk "
              "and sends each chunk once final. Changes no result, only the time (hsgd bench "
              "--mpi --round-trip --chunk N; over rate-limited TCP links, chunks within Open "
              "MPI's btl_tcp_eager_limit, 16000 floats, avoid a handshake per message: "
              "docs/many-machines.md).")
          .check(at_least(1), ">= 1")
          .moot(runtime("mpi"))
          .resumable()
          .written(Written::kNotDefault)
          .hash_as("131072"));  // the default: out of every identity and older configs' TOML

  // ---- [policy]
  add(str_key(
      "policy", "name", HSGD_REF(policy_name),
      "sync, async, hybrid, auto, kasync:K, kbatch:K, local:H, ssp:S, hogwild, dpsgd, adpsgd, "
      "sgp or pdsgdm:P "
      "(DESIGN.md, Policies)."));
  add(int_key("policy", "k", HSGD_REF(policy.k),
              "kasync, kbatch: the threshold K; local: H, the local steps per push; pdsgdm: P, the "
              "local steps between gossip rounds (also set by the name's :K).")
          .note("kasync, kbatch: in [1, train.workers]")
          .moot(policies({"kasync", "kbatch", "local", "pdsgdm"})));
  add(int_key("policy", "s", HSGD_REF(policy.s),
              "ssp: the staleness bound s (also set by ssp:S); -1 = not given.")
          .check_if([](const Config& c) { return c.policy.kind == "ssp"; },
                    [](int s) { return s >= 0; }, ">= 0 under ssp",
                    "ssp expects a staleness bound s >= 0 (as ssp:S or policy.s)")
          .moot(policies({"ssp"})));
  add(str_key("policy", "auto_ablate", HSGD_REF(policy.auto_ablate),
              "auto: parts of its rule to switch off, for ablations only (policy/auto_policy.h); "
              "empty = the full rule.")
          .moot(policies({"auto"})));
  add(str_key("policy", "auto_constants", HSGD_REF(policy.auto_constants),
              "auto: its rule's constants overridden, for sensitivity studies only: "
              "'name=value,...', the names and meanings in docs/auto.md (\"The constants\"); "
              "empty = the rule's own.")
          .moot(policies({"auto"}))
          .written_when([](const Config& c) { return !c.policy.auto_constants.empty(); }));
  add(int_key("policy", "auto_rule", HSGD_REF(policy.auto_rule),
              "auto: which rule: 18, today's (the staleness budget at the concurrency n / K and "
              "the arrival-time cap; server momentum lowered by staleness's implicit momentum "
              "where lr / (1 - mu) x n / K is above the budget, and after the spike guard's first "
              "firing where it is not; a first K above the cap brought down to it once every "
              "arrival is known; the spike guard only where the budget does not model the step: "
              "an optimizer other than sgd, sum aggregation, or the arrival-time cap holding K "
              "below the budget's floor; docs/auto.md); 19, the eighteenth whose budget counts "
              "lr x sqrt(32 / train.batch), the rate at which the workers' batch gives the step "
              "a batch of 32's gradient noise (tried); 16, the rule before it (no guard on plain "
              "sgd where the cap holds K); 14, the rule before the sixteenth (the spike guard "
              "raises K also where mu is kept); 9, the rule before the "
              "fourteenth (the momentum correction at every rate, no early cap); 10, the ninth "
              "with the budget counting lr x the step gain (1 / (1 - mu) with server momentum) "
              "and the guard only where that gain is unknown (tried); 11, the tenth without the "
              "momentum correction (tried); 12, the ninth with the momentum correction only as "
              "far as the budget needs it (lr / (1 - mu) x n / K within it) and the tenth's early "
              "cap (tried); 13, the ninth, but the eleventh where the momentum-amplified step "
              "needs K <= 2 (lr / (1 - mu) x n <= 2 x the budget), with the early cap (tried); 15, "
              "the fourteenth with the spike guard armed only after the first block (tried); 17, "
              "the sixteenth whose guard, where mu is kept, asks for a window's mean loss above "
              "its line, not two pushes (tried); 8, "
              "the seventh with a spike's K retried after a hold (tried, not adopted); 7, the "
              "rule before the ninth (the spike guard everywhere); 6 (the budget at the measured "
              "staleness); or 5 (also the probes and the rises). 19 to 5 reproduce results made "
              "with them. 5 is not written to config.toml: runs made before this key ran rule 5 "
              "and keep their identity.")
          .check([](int v) { return v >= 5 && v <= 19; }, "5 to 19")
          .moot(policies({"auto"}))
          .written_when(
              [](const Config& c) { return c.policy.kind == "auto" && c.policy.auto_rule != 5; }));
  add(num_key("policy", "auto_pilot", HSGD_REF(policy.auto_pilot),
              "auto: a pilot before training (issue 32, docs/auto.md#auto-with-a-pilot): every "
              "candidate (policy.auto_candidates) runs on the simulator for this share of "
              "train.budget (and of train.epochs) with the run's own config and seed, and the run "
              "trains with the candidate whose interval-mean test accuracy was best over the last "
              "policy.auto_pilot_window of its pilot (policy.auto_choice). Costs about this share "
              "times the candidates' count of a run "
              "more (0.1, the default since issue 32's ninth study: about 0.8 of a run). 0 = no "
              "pilot: the rule (policy.auto_rule) steers K, as every auto run did before. A "
              "resume never runs a pilot.")
          .check([](double v) { return v >= 0 && v <= 1; }, "in [0, 1]")
          .moot(policies({"auto"}))
          // Written for every auto run, so that its config.toml says whether it
          // had a pilot; part of the identity only with a choice, as before the
          // default changed (a run without a pilot, 0 then and unwritten, keeps
          // its identity).
          .written_when([](const Config& c) { return c.policy.kind == "auto"; })
          .hashed_when([](const Config& c) {
            return c.policy.auto_pilot != 0 && !c.policy.auto_choice.empty();
          }));
  // auto's pilot's settings: read only when it runs one.
  const Moot no_pilot{"policy.auto_pilot = 0", [](const Config& c) {
                        return c.policy.auto_pilot == 0 ? "policy.auto_pilot = 0" : "";
                      }};
  add(num_key("policy", "auto_pilot_window", HSGD_REF(policy.auto_pilot_window),
              "auto with a pilot: the share of each candidate's pilot, at its end, whose "
              "interval-mean test accuracy ranks the candidates (0.5: the mean over the last half "
              "of the pilot; 1: over the whole pilot). A run's interval mean is mostly its later "
              "level, and a larger K can overtake a smaller one late.")
          .check([](double v) { return v > 0 && v <= 1; }, "in (0, 1]")
          .moot(policies({"auto"}))
          .moot(no_pilot)
          .written(Written::kNotDefault));
  add(num_key(
          "policy", "auto_pilot_margin", HSGD_REF(policy.auto_pilot_margin),
          "auto with a pilot: test accuracy within which the pilot does not tell its "
          "constant-K candidates (sync, async, kasync:K) apart: among those within this of "
          "the best of them (exactly this below included), it keeps the largest K, whose less "
          "noisy steps tend to overtake "
          "later (0.005, the default: half a point). A candidate without a constant K (hybrid, the "
          "corrected async, rule) is kept when it ranks best. 0 = the best figure.")
          .check([](double v) { return v >= 0 && v < 1; }, "in [0, 1)")
          .moot(policies({"auto"}))
          .moot(no_pilot)
          .written(Written::kNotDefault));
  add(int_key("policy", "auto_pilot_keep", HSGD_REF(policy.auto_pilot_keep),
              "auto with a pilot: a second round for the best this many candidates of the first "
              "(ranked as above): each continues its own pilot to twice policy.auto_pilot (at most "
              "the whole budget), and the choice is made among them over the last "
              "policy.auto_pilot_window of that, with the "
              "margin (2, the default: the best two). Costs this many times policy.auto_pilot of a "
              "run more. 0 = one round; a value of at least the candidates' count runs every "
              "candidate to twice the share.")
          .check(at_least(0), ">= 0")
          .moot(policies({"auto"}))
          .moot(no_pilot)
          .written(Written::kNotDefault));
  add(str_key("policy", "auto_candidates", HSGD_REF(policy.auto_candidates),
              "auto with a pilot: its candidates. k: sync, async, and kasync:K for K = 2, 4, 8 "
              "below train.workers and 16 from 20 workers up. k+hybrid (the default since issue "
              "32's ninth study; k before): those, hybrid (with the "
              "run's policy.schedule keys) and, with optim.kind momentum or nesterov, async with "
              "the momentum correction (async+staleness.momentum_correction=true). k+rule: the K "
              "policies and rule, auto's own rule (policy.auto_rule), as it runs without a "
              "pilot.")
          .one_of({"k", "k+hybrid", "k+rule"})
          .moot(policies({"auto"}))
          .moot(no_pilot)
          .written(Written::kNotDefault));
  add(str_key("policy", "auto_choice", HSGD_REF(policy.auto_choice),
              "auto with a pilot: the candidate it chose (sync, async, kasync:K, hybrid, "
              "async+staleness.momentum_correction=true or rule), written to "
              "config.toml by the run so that rerunning that file (or resuming) trains with it "
              "and runs no pilot; empty = choose by the pilot. With a choice, auto runs that "
              "fixed policy, push for push, and its rows carry the name auto; with rule, it runs "
              "its rule (policy.auto_rule), as without a pilot.")
          .check_if(
              [](const Config& c) { return c.policy.kind == "auto" && c.policy.auto_pilot == 0; },
              [](const std::string& s) { return s.empty(); }, "empty when policy.auto_pilot = 0",
              "set by a pilot only: expected empty when policy.auto_pilot = 0")
          .moot(policies({"auto"}))
          .written_when([](const Config& c) { return !c.policy.auto_choice.empty(); }));
  add(num_key("policy", "loss_smoothing", HSGD_REF(policy.schedule.loss_smoothing),
              "The adaptive schedule: the per-push factor of the training-loss average.")
          .check([](double v) { return v > 0 && v < 1; }, "in (0, 1)")
          .moot(schedule_read())
          .moot(schedules({"adaptive"})));
  add(str_key("policy", "schedule", HSGD_REF(policy.schedule.kind),
              "hybrid: the threshold schedule K(t): step (the paper), linear, exponential, cosine "
              "or adaptive.")
          .check_if(
              reads_schedule,
              [](const std::string& s) {
                return among(s, {"step", "linear", "exponential", "cosine", "adaptive"});
              },
              "step, linear, exponential, cosine or adaptive")
          .moot(schedule_read()));
  add(num_key("policy", "k0", HSGD_REF(policy.schedule.k0), "hybrid: K at t = 0.")
          .note("in [1, train.workers]")
          .moot(schedule_read()));
  add(num_key("policy", "step", HSGD_REF(policy.schedule.step),
              "hybrid step: K grows by one every `step` units of t; 0 = 3 / optim.lr (in updates). "
              "linear, exponential, cosine with ramp = 0: the ramp is (workers - k0) * step.")
          .check_if(
              reads_schedule, [](double v) { return v >= 0; }, "> 0 (or 0 for the default 3/lr)")
          .moot(schedule_read())
          .moot(schedules({"step", "linear", "exponential", "cosine"}))
          .moot({"policy.ramp is given (linear, exponential, cosine)", [](const Config& c) {
                   const ScheduleOptions& s = c.policy.schedule;
                   return reads_schedule(c) && s.kind != "step" && s.ramp != 0
                              ? "policy.ramp = " + num(s.ramp)
                              : "";
                 }}));
  add(num_key("policy", "ramp", HSGD_REF(policy.schedule.ramp),
              "hybrid linear, exponential, cosine: t at which K reaches the worker count; 0 = "
              "(workers - k0) * step.")
          .check_if(
              reads_schedule, [](double v) { return v >= 0; }, "> 0 (or 0 for the default)")
          .moot(schedule_read())
          .moot(schedules({"linear", "exponential", "cosine"})));
  add(other_key("policy", "clock", HSGD_REF(policy.schedule.clock), "string",
                "hybrid: what t counts: updates (applied updates), seconds (wall or virtual) or "
                "epochs.")
          .custom(
              [](Config& c, const Where& w, const toml::node& n) {
                c.policy.schedule.clock = parse_schedule_clock(as_string(w, n));
              },
              [](const Config& c, toml::table& t) {
                t.insert_or_assign("clock", to_string(c.policy.schedule.clock));
              })
          .note("updates, seconds or epochs")
          .moot(schedule_read())
          .moot(schedules({"step", "linear", "exponential", "cosine"})));
  add(other_key("policy", "aggregation", HSGD_REF(policy.aggregation), "string",
                "How the pushes of one update are combined: mean (an update moves as far as one "
                "push) or sum (each gradient keeps its full step).")
          .custom(
              [](Config& c, const Where& w, const toml::node& n) {
                c.policy.aggregation = parse_aggregation(as_string(w, n));
              },
              [](const Config& c, toml::table& t) {
                t.insert_or_assign("aggregation", to_string(c.policy.aggregation));
              })
          .note("mean or sum")
          .moot(not_policies({"async", "ssp", "hogwild"})));

  // ---- [local]
  add(num_key("local", "lr", HSGD_REF(policy.local.lr),
              "local: the workers' local lr; 0 = optim.lr.")
          .check_if(local, at_least(0), "> 0 (or 0 for optim.lr)")
          .moot(policies({"local"})));
  add(num_key("local", "momentum", HSGD_REF(policy.local.momentum),
              "local: worker-local heavy-ball momentum.")
          .check_if(local, in_unit_open_right(), "in [0, 1)")
          .moot(policies({"local"})));
  add(bool_key("local", "async", HSGD_REF(policy.local.async),
               "local: false, deltas averaged like sync; true, applied as they come.")
          .moot(policies({"local"})));
  add(str_key("local", "outer", HSGD_REF(policy.local.outer),
              "local: the outer optimizer on the averaged delta: sgd, momentum or nesterov "
              "(DiLoCo). dpsgd, sgp, pdsgdm with gossip.global_every: the same on the delta "
              "since the last global average (momentum: SlowMo).")
          .check_if(
              outer,
              [](const std::string& s) {
                return among(s, {"sgd", "momentum", "nesterov"});
              },
              "sgd, momentum or nesterov")
          .moot(not_outer));
  add(num_key("local", "outer_lr", HSGD_REF(policy.local.outer_lr),
              "local, and gossip.global_every: the outer learning rate (sgd with 1 and mean "
              "aggregation = model averaging).")
          .check_if(outer, above(0), "> 0")
          .moot(not_outer));
  add(num_key("local", "outer_momentum", HSGD_REF(policy.local.outer_momentum),
              "local, and gossip.global_every: the outer optimizer's momentum (momentum, "
              "nesterov).")
          .check_if(outer, in_unit_open_right(), "in [0, 1)")
          .moot(not_outer)
          .moot({"local.outer = 'sgd'", [outer](const Config& c) {
                   return outer(c) && c.policy.local.outer == "sgd" ? "local.outer = 'sgd'" : "";
                 }}));

  // ---- [gossip] (issue 28: the serverless policies, policy/gossip.h)
  add(str_key("gossip", "topology", HSGD_REF(gossip.topology),
              "dpsgd, adpsgd, sgp, pdsgdm: the gossip graph: ring, torus, exp, onepeer-exp, "
              "random-matching, complete or star (core/topology.h).")
          .check([](const std::string& s) { return among(s, topology_names()); },
                 "ring, torus, exp, onepeer-exp, random-matching, complete or star")
          .moot(policies({"dpsgd", "adpsgd", "sgp", "pdsgdm"}))
          .written(Written::kNotDefault));
  add(str_key("gossip", "weights", HSGD_REF(gossip.weights),
              "The mixing weights of the undirected graphs: uniform (1 / (max degree + 1)) or "
              "metropolis (Metropolis-Hastings, 1 / (1 + max(d_i, d_j))).")
          .one_of({"uniform", "metropolis"})
          .moot(policies({"dpsgd", "adpsgd", "pdsgdm"}))
          .written(Written::kNotDefault));
  add(str_key("gossip", "order", HSGD_REF(gossip.order),
              "dpsgd: cta (combine-then-adapt: the model is sent while the gradient is computed, "
              "D-PSGD) or atc (adapt-then-combine: the step first, then the mixing).")
          .one_of({"cta", "atc"})
          .moot(policies({"dpsgd"}))
          .written(Written::kNotDefault));
  add(int_key("gossip", "global_every", HSGD_REF(gossip.global_every),
              "dpsgd, sgp, pdsgdm: a global average of every model after each H-th step "
              "(Gossip-PGA); 0 = never.")
          .check(at_least(0), ">= 0 (0 = never)")
          .moot(policies({"dpsgd", "sgp", "pdsgdm"}))
          .written(Written::kNotDefault));
  add(num_key("gossip", "consensus_lr", HSGD_REF(gossip.consensus_lr),
              "dpsgd (atc), pdsgdm with compress.push: CHOCO's consensus step size gamma, "
              "x_i += gamma (sum_j w_ij xhat_j - xhat_i); 1 with compressor none is plain "
              "gossip.")
          .check([](double v) { return v > 0 && v <= 1; }, "in (0, 1]")
          .moot(policies({"dpsgd", "pdsgdm"}))
          .moot(no_compressor())
          .written(Written::kNotDefault));
  add(bool_key("gossip", "eval_workers", HSGD_REF(gossip.eval_workers),
               "dpsgd, adpsgd, sgp, pdsgdm: at each evaluation, also evaluate every worker's own "
               "(de-biased) model: columns worker_acc_min, worker_acc_mean, worker_acc_max "
               "(n evaluations a row instead of 1).")
          .moot(policies({"dpsgd", "adpsgd", "sgp", "pdsgdm"}))
          .written(Written::kNotDefault));

  // ---- [optim]
  add(str_key("optim", "kind", HSGD_REF(optim.kind),
              "The server's optimizer: sgd, momentum, nesterov, adam or adagrad.")
          .one_of({"sgd", "momentum", "nesterov", "adam", "adagrad"})
          .calibration());
  add(num_key("optim", "lr", HSGD_REF(optim.lr), "The learning rate.")
          .check(above(0), "> 0")
          .calibration());
  add(num_key("optim", "momentum", HSGD_REF(optim.momentum), "momentum, nesterov: the momentum.")
          .check(in_unit_open_right(), "in [0, 1)")
          .moot(optimizers({"momentum", "nesterov"}))
          .calibration());
  add(num_key("optim", "weight_decay", HSGD_REF(optim.weight_decay),
              "L2 weight decay, added to the gradient (every kind).")
          .check([](double v) { return v >= 0; }, ">= 0")
          .calibration());
  add(str_key("optim", "lr_schedule", HSGD_REF(lr_schedule.kind),
              "The learning-rate schedule: constant, step, cosine or robbins-monro (lr x (t + "
              "tau)^-kappa, t the update).")
          .one_of({"constant", "step", "cosine", "robbins-monro"})
          .calibration());
  const auto robbins_monro = [](const Config& c) { return c.lr_schedule.kind == "robbins-monro"; };
  add(num_key("optim", "tau", HSGD_REF(lr_schedule.tau),
              "robbins-monro: the delay tau of lr x (t + tau)^-kappa (> 0; >= 1 keeps the first "
              "rate <= lr).")
          .check_if(robbins_monro, above(0), "> 0")
          .moot(lr_schedules({"robbins-monro"}))
          .written_when(robbins_monro)
          .calibration());
  add(num_key("optim", "kappa", HSGD_REF(lr_schedule.kappa),
              "robbins-monro: the forgetting rate kappa (in (0.5, 1] the Robbins-Monro "
              "conditions hold).")
          .check_if(
              robbins_monro, [](double v) { return v > 0 && v <= 1; }, "in (0, 1]")
          .moot(lr_schedules({"robbins-monro"}))
          .written_when(robbins_monro)
          .calibration());
  const auto lr_step = [](const Config& c) { return c.lr_schedule.kind == "step"; };
  const auto lr_cosine = [](const Config& c) { return c.lr_schedule.kind == "cosine"; };
  add(int_key("optim", "lr_step_size", HSGD_REF(lr_schedule.step_size),
              "step: multiply the lr by lr_gamma every this many updates.")
          .check_if(lr_step, at_least(1), ">= 1")
          .moot(lr_schedules({"step"}))
          .calibration());
  add(num_key("optim", "lr_gamma", HSGD_REF(lr_schedule.gamma), "step: the factor.")
          .check_if(
              lr_step, [](double v) { return v > 0 && v <= 1; }, "in (0, 1]")
          .moot(lr_schedules({"step"}))
          .calibration());
  add(int_key("optim", "lr_horizon", HSGD_REF(lr_schedule.horizon),
              "cosine: the updates over which the lr decays to lr_min.")
          .check_if(lr_cosine, at_least(1), ">= 1 under cosine",
                    "the cosine schedule needs the number of updates to decay over (>= 1)")
          .moot(lr_schedules({"cosine"}))
          .calibration());
  add(num_key("optim", "lr_min", HSGD_REF(lr_schedule.min_lr), "cosine: the final lr.")
          .check([](double v) { return v >= 0; }, ">= 0")
          .moot(lr_schedules({"cosine"}))
          .calibration());
  add(int_key("optim", "warmup", HSGD_REF(lr_schedule.warmup),
              "Linear lr warm-up from 0 over this many updates.")
          .check(at_least(0), ">= 0")
          .calibration());
  add(num_key("optim", "beta1", HSGD_REF(optim.beta1), "adam: first-moment decay.")
          .check(in_unit_open_right(), "in [0, 1)")
          .moot(optimizers({"adam"}))
          .calibration());
  add(num_key("optim", "beta2", HSGD_REF(optim.beta2), "adam: second-moment decay.")
          .check(in_unit_open_right(), "in [0, 1)")
          .moot(optimizers({"adam"}))
          .calibration());
  add(num_key("optim", "eps", HSGD_REF(optim.eps), "adam, adagrad: the denominator's epsilon.")
          .check(above(0), "> 0")
          .moot(optimizers({"adam", "adagrad"}))
          .calibration());
  add(bool_key("optim", "scale_lr", HSGD_REF(optim.scale_lr),
               "The linear scaling rule: the base lr is lr x workers x batch / base_batch.")
          .calibration());
  add(int_key("optim", "base_batch", HSGD_REF(optim.base_batch), "scale_lr: the base batch.")
          .check(at_least(1), ">= 1")
          .moot({"optim.scale_lr = false",
                 [](const Config& c) { return c.optim.scale_lr ? "" : "optim.scale_lr = false"; }})
          .calibration());
  add(num_key("optim", "clip_norm", HSGD_REF(optim.clip_norm),
              "Clip each push to this L2 norm at the server, before the staleness mitigations; 0 "
              "= off.")
          .check(at_least(0), ">= 0 (0 = off)")
          .calibration());

  // ---- [staleness]
  add(bool_key("staleness", "scaled_lr", HSGD_REF(staleness.scaled_lr),
               "Multiply a push by 1 / max(1, tau) (Zhang et al. 2016)."));
  add(other_key("staleness", "tau_max", HSGD_REF(staleness.tau_max), "integer",
                "Drop pushes with staleness tau > tau_max (counted in `dropped`).")
          .custom(
              [](Config& c, const Where& w, const toml::node& n) {
                const int64_t v = as_int(w, n);
                if (v < 0) bad(w, n, "an integer >= 0 (leave the key out to keep the filter off)");
                c.staleness.tau_max = v;
              },
              [](const Config& c, toml::table& t) {
                t.insert_or_assign("tau_max", c.staleness.tau_max);
              })
          .shown_as(
              [](int64_t v) { return v < 0 ? std::string("absent (off)") : std::to_string(v); })
          .note(">= 0; absent = no filter")
          .written(Written::kNotDefault));
  add(bool_key(
      "staleness", "dc_asgd", HSGD_REF(staleness.dc_asgd),
      "DC-ASGD delay compensation g + lambda g*g*(w_now - w_pulled) (Zheng et al. 2017)."));
  add(num_key("staleness", "dc_lambda", HSGD_REF(staleness.dc_lambda),
              "DC-ASGD's lambda; > 0 also turns it on; 0 = 0.04 when dc_asgd = true.")
          .check(at_least(0), ">= 0 (0 = off, or the default 0.04 with staleness.dc_asgd = true)"));
  add(other_key("staleness", "rebase", HSGD_REF(staleness.rebase), "boolean or \"auto\"",
                "Apply each push from the current parameters toward its target w_pulled - g "
                "(asynchronous SVI); auto = on for model dpgmm.")
          .custom(
              [](Config& c, const Where& w, const toml::node& n) {
                if (auto b = n.value_exact<bool>()) {
                  c.staleness.rebase = *b ? 1 : 0;
                } else if (n.value_exact<std::string>() == "auto") {
                  c.staleness.rebase = -1;
                } else {
                  bad(w, n, "true, false or \"auto\"");
                }
              },
              [](const Config& c, toml::table& t) {
                if (c.staleness.rebase < 0) {
                  t.insert_or_assign("rebase", "auto");
                } else {
                  t.insert_or_assign("rebase", c.staleness.rebase != 0);
                }
              })
          .written(Written::kNotDefault));
  add(bool_key("staleness", "gap_aware", HSGD_REF(staleness.gap_aware),
               "Gap-Aware: divide each coordinate by its normalized gap (Barkai et al. 2019)."));
  add(bool_key("staleness", "momentum_correction", HSGD_REF(staleness.momentum_correction),
               "Lower the server's momentum by the implicit momentum staleness adds: mu' = max(0, "
               "1 - (1 - mu) / (1 - m)), m = tau / (tau + 1), tau the running mean staleness "
               "(Mitliagkas et al. 2016; what auto does for itself).")
          .moot(optimizers({"momentum", "nesterov"}))
          .moot(not_policies({"local", "hogwild"}))
          .written_when([](const Config& c) { return c.staleness.momentum_correction; }));

  // ---- [stragglers]
  add(num_key("stragglers", "fraction", HSGD_REF(stragglers.fraction),
              "Workers 0 .. round(fraction x workers) - 1 are stragglers.")
          .check([](double v) { return v >= 0 && v <= 1; }, "in [0, 1]"));
  add(str_key("stragglers", "delay", HSGD_REF(stragglers.delay),
              "The delay added to each straggler gradient: none, halfnormal (|N(0, sigma)|, the "
              "paper), exponential (mean scale) or lognormal (scale x exp(N(0, sigma))).")
          .one_of({"none", "halfnormal", "exponential", "lognormal"})
          .moot(no_stragglers()));
  add(num_key("stragglers", "sigma", HSGD_REF(stragglers.sigma),
              "halfnormal, lognormal: sigma, in seconds (halfnormal).")
          .check(at_least(0), "seconds >= 0")
          .moot(no_stragglers())
          .moot(delays({"halfnormal", "lognormal"})));
  add(num_key("stragglers", "scale", HSGD_REF(stragglers.scale),
              "exponential, lognormal: the scale in seconds.")
          .check(at_least(0), "seconds >= 0")
          .moot(no_stragglers())
          .moot(delays({"exponential", "lognormal"})));
  add(num_key("stragglers", "slowdown", HSGD_REF(stragglers.slowdown),
              "Each straggler computes this many times slower.")
          .check(at_least(1), "a factor >= 1")
          .moot(no_stragglers()));

  // ---- [sampling]
  const auto loss_sampling = [] {
    return Moot{"sampling.kind = 'uniform'", [](const Config& c) {
                  return c.sampling.kind == "loss" ? ""
                                                   : "sampling.kind = " + quoted(c.sampling.kind);
                }};
  };
  add(str_key("sampling", "kind", HSGD_REF(sampling.kind),
              "How a worker draws its batches: uniform (shuffled epochs) or loss (importance "
              "sampling by recorded loss).")
          .one_of({"uniform", "loss"}));
  add(num_key("sampling", "uniform_mix", HSGD_REF(sampling.uniform_mix),
              "loss: the uniform share of each example's probability.")
          .check([](double v) { return v > 0 && v <= 1; },
                 "in (0, 1] (a positive share of uniform keeps every probability above 0)")
          .moot(loss_sampling()));
  add(int_key("sampling", "warmup", HSGD_REF(sampling.warmup),
              "loss: epochs of the worker's shard sampled uniformly before the scores are used.")
          .check(at_least(0), ">= 0")
          .moot(loss_sampling()));

  // ---- [sim]
  add(num_key("sim", "compute_time", HSGD_REF(sim.compute_time),
              "Seconds of one batch on a full-speed worker; 0 = calibrate on this machine (the "
              "value found is written to the run's config.toml).")
          .check(at_least(0), "seconds >= 0 (0 = calibrate)")
          .moot(runtime("sim"))
          .calibration());
  add(num_key("sim", "server_ns_per_param", HSGD_REF(sim.server_ns_per_param),
              "Server nanoseconds per parameter per update and per push; -1 = calibrate "
              "(likewise recorded).")
          .check([](double v) { return (v >= 0 || v == -1) && finite(v); },
                 "nanoseconds >= 0, or -1 to calibrate")
          .moot(runtime("sim"))
          .calibration());
  add(num_key("sim", "latency", HSGD_REF(sim.latency),
              "One-way network latency per message, seconds.")
          .check(at_least(0), "seconds >= 0")
          .moot(sim_network()));
  add(num_key("sim", "bandwidth", HSGD_REF(sim.bandwidth),
              "Bytes per second of each node's link, each direction (10 Gbit/s = 1.25e9).")
          .check(above(0), "bytes per second > 0")
          .moot(sim_network()));
  add(str_key("sim", "network", HSGD_REF(sim.network),
              "shared: each node's link is shared by the messages it sends and receives at once "
              "(max-min fair; a server's link saturates as workers grow); independent: every "
              "message priced alone, latency + bytes / bandwidth (the model before issue 27).")
          .one_of({"shared", "independent"})
          .moot(sim_network())
          // Written for every sim run (a resume reads it back from config.toml);
          // configs from before the key ran "independent": they keep their hash.
          .written_when([](const Config& c) { return c.train.runtime == "sim"; })
          .hashed_when([](const Config& c) { return c.sim.network != "independent"; }));
  add(num_key("sim", "server_bandwidth", HSGD_REF(sim.server_bandwidth),
              "Bytes per second of each server shard's link; 0 = sim.bandwidth.")
          .check(at_least(0), "bytes per second >= 0 (0 = sim.bandwidth)")
          .moot(sim_network())
          .written(Written::kNotDefault));
  add(int_key("sim", "cores", HSGD_REF(sim.cores),
              "Cores the simulated workers' compute and the server's updates share (the gossip "
              "policies: the workers' compute), first come first served; 0 = unlimited (each "
              "worker on a core of its own).")
          .check([](int v) { return v >= 0 && v <= 65536; }, "0 (unlimited) to 65536")
          .moot(runtime("sim"))
          .written(Written::kNotDefault));
  add(int_key("sim", "threads", HSGD_REF(sim.threads),
              "Threads computing the simulated workers' gradients; 0 = every core. The output is "
              "the same for any value.")
          .check([](int v) { return v >= 0 && v <= 1024; }, "0 (every core) to 1024")
          .moot(runtime("sim"))
          .resumable()
          .hash_as("0"));

  // ---- [compress]
  const auto compressor = [&](const char* key, auto ref, const char* doc) {
    return other_key("compress", key, ref, "string", doc)
        .custom(
            [ref](Config& c, const Where& w, const toml::node& n) {
              ref(c) = parse_compressor(as_string(w, n), w.str());
            },
            [ref, key](const Config& c, toml::table& t) { t.insert_or_assign(key, ref(c).name()); })
        .note("none, fp16, topk:R, randomk:R, qsgd:S, sign, powersgd:R")
        .written(Written::kCompressorOn)
        .calibration();
  };
  add(compressor(
      "push", HSGD_REF(compress.push),
      "The push compressor: none, fp16, topk:R, randomk:R, qsgd:S, sign or powersgd:R."));
  // randomk on the pull path refreshes a blind R of a worker's copy per pull:
  // each coordinate is on average 1/R pulls old (docs/results.md,
  // Compression: 0.69 against 0.84 uncompressed at R = 0.01).
  add(compressor("pull", HSGD_REF(compress.pull), "The pull compressor (as push; not randomk).")
          .check([](const CompressorSpec& s) { return s.kind != CompressorSpec::Kind::kRandomk; },
                 "not randomk",
                 "randomk is for the push path only (on the pull path each coordinate of a "
                 "worker's copy would be 1/R pulls old on average); expected topk:R, which sends "
                 "the coordinates that changed most"));
  add(other_key("compress", "error_feedback", HSGD_REF(compress.error_feedback),
                "boolean or \"auto\"",
                "Error feedback on the push path; auto = on for the biased compressors (topk, "
                "randomk, sign, powersgd).")
          .custom(
              [](Config& c, const Where& w, const toml::node& n) {
                if (auto b = n.value_exact<bool>()) {
                  c.compress.error_feedback = *b ? 1 : 0;
                } else if (n.value_exact<std::string>() == "auto") {
                  c.compress.error_feedback = -1;
                } else {
                  bad(w, n, "true, false or \"auto\"");
                }
              },
              [](const Config& c, toml::table& t) {
                if (c.compress.error_feedback < 0) {
                  t.insert_or_assign("error_feedback", "auto");
                } else {
                  t.insert_or_assign("error_feedback", c.compress.error_feedback != 0);
                }
              })
          .moot(no_compressor())
          .moot({"compress.push = 'none'",
                 [](const Config& c) {
                   return c.compress.push.none() ? "compress.push = 'none'" : "";
                 }})
          .written(Written::kCompressorOn)
          .calibration());
  add(int_key("compress", "min_bytes", HSGD_REF(compress.min_bytes),
              "Tensors of fewer bytes go uncompressed.")
          .check(at_least(0), ">= 0")
          .moot(no_compressor())
          .written(Written::kCompressorOn)
          .calibration());
  add(int_key("compress", "warmup", HSGD_REF(compress.warmup),
              "Pushes and pulls at server versions below this go uncompressed.")
          .check(at_least(0), "updates >= 0")
          .moot(no_compressor())
          .written(Written::kCompressorOn)
          .calibration());
  add(num_key("compress", "sim_ns_per_param", HSGD_REF(compress.sim_ns_per_param),
              "sim: nanoseconds per parameter of compressing plus decompressing; -1 = calibrate.")
          .check([](double v) { return (v >= 0 || v == -1) && finite(v); },
                 "nanoseconds >= 0, or -1 to calibrate")
          .moot(no_compressor())
          .moot(runtime("sim"))
          .written(Written::kCompressorOn)
          .calibration());

  // ---- [faults]
  const auto fault_list = [&](const char* key, auto ref, const char* doc) {
    return other_key("faults", key, ref, "list of \"worker:W@Ts\"", doc)
        .custom(
            [ref](Config& c, const Where& w, const toml::node& n) { ref(c) = as_fault_list(w, n); },
            [ref, key](const Config& c, toml::table& t) {
              toml::array a;
              for (const FaultAt& f : ref(c)) a.push_back(to_string(f));
              t.insert_or_assign(key, a);
            })
        .note("W < train.workers")
        .written(Written::kNotDefault);
  };
  add(fault_list("kill", HSGD_REF(faults.kill),
                 "Kill worker W at T seconds of training (a --set value: comma-separated)."));
  add(fault_list("rejoin", HSGD_REF(faults.rejoin), "Worker W rejoins at T seconds."));
  add(num_key("faults", "kill_rate", HSGD_REF(faults.kill_rate),
              "Expected random kills per live worker per minute of training.")
          .check(at_least(0), "kills per worker per minute >= 0")
          .written(Written::kNotDefault));
  add(other_key(
          "faults", "rejoin_after", HSGD_REF(faults.rejoin_after), "number or \"off\"",
          "Seconds after a random kill or an injected exception until the worker rejoins; off "
          "= it stays out.")
          .custom(
              [](Config& c, const Where& w, const toml::node& n) {
                if (auto s = n.value_exact<std::string>(); s && *s == "off") {
                  c.faults.rejoin_after = -1;
                  return;
                }
                if (n.is_string()) bad(w, n, "seconds >= 0 or 'off'");
                const double v = as_double(w, n);
                if (!(v >= 0) || !std::isfinite(v)) bad(w, n, "seconds >= 0 or 'off'");
                c.faults.rejoin_after = v;
              },
              [](const Config& c, toml::table& t) {
                t.insert_or_assign("rejoin_after", c.faults.rejoin_after);
              })
          .shown_as([](double v) { return v < 0 ? std::string("'off'") : num(v); })
          .note("seconds >= 0 or off")
          .moot({"faults.kill_rate and faults.exception_rate are 0",
                 [](const Config& c) {
                   return c.faults.kill_rate == 0 && c.faults.exception_rate == 0
                              ? "faults.kill_rate = 0 and faults.exception_rate = 0"
                              : "";
                 }})
          .written(Written::kNotDefault));
  add(num_key("faults", "exception_rate", HSGD_REF(faults.exception_rate),
              "Probability that one gradient computation throws.")
          .check([](double v) { return v >= 0 && v <= 1; }, "a probability per gradient in [0, 1]")
          .written(Written::kNotDefault));
  return v;
}

}  // namespace

const std::vector<Key>& keys() {
  static const std::vector<Key> k = declare();
  return k;
}

const std::vector<Section>& sections() {
  static const std::vector<Section> s = {
      {"data", "The training and test data, and how they are split over the workers."},
      {"model", "The model (the zoo, dlrm, or a TorchScript file)."},
      {"train", "The run: workers, batch, length, evaluation, runtime, output, stops."},
      {"checkpoint", "Checkpoints (written every train.checkpoint_every seconds)."},
      {"mpi", "The mpi runtime."},
      {"policy", "The synchronization policy and the hybrid's threshold schedule."},
      {"local", "Local SGD (policy local:H)."},
      {"gossip", "Serverless gossip (policies dpsgd, adpsgd, sgp, pdsgdm:P)."},
      {"optim", "The server-side optimizer and its learning-rate schedule."},
      {"staleness", "Staleness mitigations, applied per push before aggregation."},
      {"stragglers", "Straggling workers and their delay distribution."},
      {"sampling", "How workers draw their batches."},
      {"sim", "The simulator's cost model (train.runtime = sim)."},
      {"compress",
       "Push and pull compression; the section is written only when a compressor is on."},
      {"faults", "Fault injection (sim and threads); written only when set."},
  };
  return s;
}

const Key* find_key(const std::string& section, const std::string& name) {
  static const auto* index = [] {
    auto* m = new std::map<std::pair<std::string, std::string>, const Key*>();
    for (const Key& k : keys()) (*m)[{k.section, k.name}] = &k;
    return m;
  }();
  auto it = index->find({section, name});
  return it == index->end() ? nullptr : it->second;
}

}  // namespace hsgd::config_internal
