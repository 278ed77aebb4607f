#include "hsgd/config/config.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "hsgd/config/effective.h"
#include "hsgd/config/keys.h"
#include "hsgd/core/error.h"
#include "hsgd/core/state.h"

namespace hsgd {
namespace {

std::string write_file(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

std::string error_of(const std::string& path, std::vector<Override> o) {
  try {
    load_config(path, o);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(Config, FileThenOverridesAndPolicyNames) {
  const std::string p = write_file("a.toml",
                                   "[train]\nworkers = 8\nbudget = 30\n[policy]\nname = "
                                   "\"kasync:3\"\n[model]\nhidden = [64, 32]\n");
  Config c =
      load_config(p, {{"train.batch", "16"}, {"optim.lr", "0.05"}, {"data.spec", "synthetic"}});
  EXPECT_EQ(c.train.workers, 8);
  EXPECT_EQ(c.train.batch, 16);
  EXPECT_DOUBLE_EQ(c.optim.lr, 0.05);
  EXPECT_EQ(c.policy.kind, "kasync");
  EXPECT_EQ(c.policy.k, 3);
  EXPECT_EQ(c.data.spec, "synthetic");
  EXPECT_EQ(c.model.hidden, (std::vector<int64_t>{64, 32}));
  Config d = load_config("", {{"train.budget", "1"},
                              {"model.hidden", "256,128"},
                              {"policy.aggregation", "sum"},
                              {"policy.clock", "seconds"},
                              {"policy.step", "10"}});
  EXPECT_EQ(d.model.hidden, (std::vector<int64_t>{256, 128}));
  EXPECT_EQ(d.policy.aggregation, Aggregation::kSum);
  Config s = load_config("", {{"train.budget", "1"}, {"policy.name", "ssp:3"}});
  EXPECT_EQ(s.policy.kind, "ssp");
  EXPECT_EQ(s.policy.s, 3);
  EXPECT_EQ(s.policy.k, 0);
  Config a = load_config(
      "",
      {{"train.budget", "1"}, {"policy.schedule", "adaptive"}, {"policy.loss_smoothing", "0.9"}});
  EXPECT_EQ(a.policy.schedule.kind, "adaptive");
  EXPECT_DOUBLE_EQ(a.policy.schedule.loss_smoothing, 0.9);
}

TEST(Config, ResolvedTomlRoundTrips) {
  Config c = load_config("", {{"train.budget", "12.5"},
                              {"policy.name", "kbatch:2"},
                              {"optim.kind", "nesterov"},
                              {"stragglers.sigma", "0.25"}});
  const std::string text = to_toml(c);
  Config d = load_config(write_file("round.toml", text), {});
  EXPECT_EQ(to_toml(d), text);
  EXPECT_EQ(d.policy.k, 2);
  EXPECT_DOUBLE_EQ(d.stragglers.sigma, 0.25);
}

TEST(Config, FullPrecisionValuesRoundTripExactlyAndTheHashIgnoresRunLength) {
  const double x = 0.0012345678901234567;
  Config c = load_config("", {{"train.budget", "1"},
                              {"sim.compute_time", "0.0012345678901234567"},
                              {"sim.server_ns_per_param", "0.30000000000000004"}});
  EXPECT_EQ(c.sim.compute_time, x);
  Config d = load_config(write_file("precise.toml", to_toml(c)), {});
  EXPECT_EQ(d.sim.compute_time, c.sim.compute_time);
  EXPECT_EQ(d.sim.server_ns_per_param, c.sim.server_ns_per_param);
  EXPECT_EQ(config_hash(c), config_hash(d));
  Config longer = load_config("", {{"sim.compute_time", "0.0012345678901234567"},
                                   {"sim.server_ns_per_param", "0.30000000000000004"},
                                   {"train.budget", "999"},
                                   {"train.checkpoint_every", "3"},
                                   {"train.workers", "7"}});
  EXPECT_EQ(config_hash(c), config_hash(longer));
  Config other = load_config("", {{"train.budget", "1"},
                                  {"sim.compute_time", "0.0012345678901234567"},
                                  {"sim.server_ns_per_param", "0.30000000000000004"},
                                  {"optim.lr", "0.02"}});
  EXPECT_NE(config_hash(c), config_hash(other));
  EXPECT_TRUE(resumable_key("train.budget"));
  EXPECT_FALSE(resumable_key("policy.name"));
}

TEST(Config, PartitionAndSamplingKeys) {
  Config c = load_config("", {{"train.budget", "1"},
                              {"data.partition", "dirichlet"},
                              {"data.alpha", "0.1"},
                              {"data.min_partition_size", "5"},
                              {"data.classes_per_worker", "3"},
                              {"data.global_fraction", "0.05"},
                              {"sampling.kind", "loss"},
                              {"sampling.uniform_mix", "0.3"},
                              {"sampling.warmup", "2"}});
  EXPECT_EQ(c.data.partition.kind, "dirichlet");
  EXPECT_DOUBLE_EQ(c.data.partition.alpha, 0.1);
  EXPECT_EQ(c.data.partition.min_partition_size, 5);
  EXPECT_EQ(c.data.partition.classes_per_worker, 3);
  EXPECT_DOUBLE_EQ(c.data.partition.global_fraction, 0.05);
  EXPECT_EQ(c.sampling.kind, "loss");
  EXPECT_DOUBLE_EQ(c.sampling.uniform_mix, 0.3);
  EXPECT_EQ(c.sampling.warmup, 2);
  const std::string text = to_toml(c);
  EXPECT_EQ(to_toml(load_config(write_file("data.toml", text), {})), text);
  // The defaults: IID, uniform.
  const Config d = load_config("", {{"train.budget", "1"}});
  EXPECT_EQ(d.data.partition.kind, "iid");
  EXPECT_EQ(d.data.partition.global_fraction, 0);
  EXPECT_EQ(d.sampling.kind, "uniform");
}

TEST(Config, StalenessAndOptimizerKeys) {
  Config d = load_config("", {{"train.budget", "1"}});
  EXPECT_FALSE(d.staleness.scaled_lr);
  EXPECT_EQ(d.staleness.tau_max, -1);
  EXPECT_FALSE(d.staleness.dc_on());
  EXPECT_FALSE(d.staleness.gap_aware);
  EXPECT_EQ(d.optim.kind, "sgd");
  EXPECT_DOUBLE_EQ(d.optim.beta1, 0.9);
  EXPECT_DOUBLE_EQ(d.optim.beta2, 0.999);
  EXPECT_DOUBLE_EQ(d.optim.eps, 1e-8);
  EXPECT_FALSE(d.optim.scale_lr);
  EXPECT_EQ(d.optim.base_batch, 32);
  const std::string p = write_file("stale.toml",
                                   "[train]\nbudget = 1\n[staleness]\nscaled_lr = true\n"
                                   "tau_max = 8\ndc_asgd = true\ngap_aware = true\n"
                                   "[optim]\nkind = \"adam\"\nbeta2 = 0.99\neps = 1e-6\n"
                                   "scale_lr = true\nbase_batch = 256\n");
  Config c = load_config(p, {{"staleness.dc_lambda", "0.1"}, {"optim.beta1", "0.8"}});
  EXPECT_TRUE(c.staleness.scaled_lr);
  EXPECT_EQ(c.staleness.tau_max, 8);
  EXPECT_TRUE(c.staleness.dc_asgd);
  EXPECT_DOUBLE_EQ(c.staleness.lambda(), 0.1);
  EXPECT_TRUE(c.staleness.gap_aware);
  EXPECT_EQ(c.optim.kind, "adam");
  EXPECT_DOUBLE_EQ(c.optim.beta1, 0.8);
  EXPECT_DOUBLE_EQ(c.optim.beta2, 0.99);
  EXPECT_DOUBLE_EQ(c.optim.eps, 1e-6);
  EXPECT_TRUE(c.optim.scale_lr);
  EXPECT_EQ(c.optim.base_batch, 256);
  // Every new key round-trips through the resolved config.
  const std::string text = to_toml(c);
  EXPECT_NE(text.find("[staleness]"), std::string::npos);
  Config e = load_config(write_file("stale-round.toml", text), {});
  EXPECT_EQ(to_toml(e), text);
  EXPECT_DOUBLE_EQ(e.optim.eps, 1e-6);
  EXPECT_EQ(e.staleness.tau_max, 8);
  // The default dc lambda when only switched on.
  EXPECT_DOUBLE_EQ(
      load_config("", {{"train.budget", "1"}, {"staleness.dc_asgd", "true"}}).staleness.lambda(),
      0.04);
}

TEST(Config, BadInputNamesTheKeyAndWhatWasExpected) {
  const std::string base_budget = "1";
  auto expect_error = [&](std::vector<Override> o, const std::string& needle) {
    o.insert(o.begin(), {"train.budget", base_budget});
    const std::string e = error_of("", o);
    EXPECT_NE(e.find(needle), std::string::npos) << "got: '" << e << "'";
  };
  expect_error({{"train.wrokers", "2"}}, "unknown key 'train.wrokers'");
  expect_error({{"trian.workers", "2"}}, "unknown section 'trian'");
  expect_error({{"train.workers", "0"}}, "train.workers = 0: expected >= 1");
  expect_error({{"train.workers", "two"}}, "train.workers = 'two': expected an integer");
  expect_error({{"optim.lr", "0"}}, "optim.lr");
  expect_error({{"optim.lr", "-0.1"}}, "optim.lr");
  expect_error({{"policy.name", "kasync:5"}, {"train.workers", "4"}}, "policy.k = 5");
  expect_error({{"policy.name", "kasync"}}, "needs K");
  expect_error({{"policy.name", "kasync:x"}}, "expected an integer K");
  expect_error({{"policy.name", "fastest"}}, "policy.name = 'fastest'");
  expect_error({{"policy.name", "ssp:-1"}}, "policy.s = -1: ssp expects a staleness bound s >= 0");
  expect_error({{"policy.name", "ssp"}}, "policy.s = -1");
  expect_error({{"policy.name", "ssp"}, {"policy.s", "-2"}}, "policy.s = -2");
  expect_error({{"policy.loss_smoothing", "1"}}, "policy.loss_smoothing = 1");
  expect_error({{"policy.loss_smoothing", "0"}}, "policy.loss_smoothing");
  expect_error({{"policy.schedule", "adaptiv"}}, "cosine or adaptive");
  expect_error({{"stragglers.fraction", "1.5"}}, "stragglers.fraction");
  expect_error({{"stragglers.sigma", "-1"}}, "stragglers.sigma");
  expect_error({{"train.eval_every", "0"}}, "train.eval_every");
  expect_error({{"train.runtime", "gpu"}}, "expected threads, sim or mpi");
  expect_error({{"data.partition", "label"}}, "data.partition = 'label'");
  expect_error({{"data.alpha", "0"}}, "data.alpha = 0: expected a number > 0");
  expect_error({{"data.global_fraction", "1"}}, "data.global_fraction = 1");
  expect_error({{"data.classes_per_worker", "0"}}, "data.classes_per_worker = 0");
  expect_error({{"data.min_partition_size", "0"}}, "data.min_partition_size = 0");
  expect_error({{"sampling.kind", "gradnorm"}}, "sampling.kind = 'gradnorm'");
  expect_error({{"sampling.uniform_mix", "0"}}, "sampling.uniform_mix = 0");
  expect_error({{"sampling.warmup", "-1"}}, "sampling.warmup = -1");
  expect_error({{"train.runtime", "mpi"}, {"train.servers", "0"}},
               "train.servers = 0: expected >= 1");
  expect_error({{"train.servers", "-1"}}, "train.servers = -1: expected >= 0");
  expect_error({{"train.servers", "2"}},
               "only the mpi runtime (server ranks) and the simulator (server nodes) have server "
               "shards");
  expect_error({{"mpi.timeout", "0"}}, "mpi.timeout = 0: expected seconds > 0");
  expect_error({{"mpi.tmeout", "1"}}, "mpi.tmeout");
  expect_error({{"sim.bandwidth", "0"}}, "sim.bandwidth = 0");
  expect_error({{"sim.latency", "-1"}}, "sim.latency");
  expect_error({{"sim.compute_time", "-0.1"}}, "sim.compute_time");
  expect_error({{"stragglers.delay", "gamma"}}, "stragglers.delay");
  // The hybrid step defaults to 3/lr updates: in seconds or epochs it must
  // be given.
  expect_error({{"policy.name", "hybrid"}, {"policy.clock", "seconds"}},
               "policy.clock = 'seconds': the hybrid step schedule needs an explicit policy.step");
  expect_error(
      {{"policy.name", "hybrid"}, {"policy.clock", "epochs"}, {"policy.schedule", "linear"}},
      "policy.step or policy.ramp");
  expect_error({{"train.checkpoint_every", "-1"}}, "train.checkpoint_every = -1");
  expect_error({{"train.max_nonfinite", "0"}}, "train.max_nonfinite = 0");
  expect_error({{"checkpoint.keep", "0"}}, "checkpoint.keep = 0");
  expect_error({{"checkpoint.kept", "1"}}, "unknown key 'checkpoint.kept'");
  expect_error({{"optim.clip_norm", "-1"}}, "optim.clip_norm = -1");
  expect_error({{"stragglers.delay", "exponential"}, {"stragglers.fraction", "0.5"}},
               "stragglers.scale");
  expect_error({{"data.test_fraction", "1"}}, "data.test_fraction");
  expect_error({{"train.budget", "0"}}, "both 0");
  expect_error({{"staleness.tau_max", "-2"}}, "staleness.tau_max = -2: expected an integer >= 0");
  expect_error({{"staleness.tau_max", "-1"}}, "staleness.tau_max = -1: expected an integer >= 0");
  expect_error({{"staleness.tau_max", "2.5"}}, "staleness.tau_max = 2.5: expected an integer");
  expect_error({{"staleness.dc_lambda", "-0.1"}}, "staleness.dc_lambda = -0.1: expected >= 0");
  expect_error({{"staleness.scaled_lr", "yes"}}, "staleness.scaled_lr = 'yes': expected true");
  expect_error({{"staleness.tau", "1"}}, "unknown key 'staleness.tau'");
  expect_error({{"optim.kind", "adamw"}}, "expected sgd, momentum, nesterov, adam or adagrad");
  expect_error({{"optim.beta1", "1"}}, "optim.beta1 = 1: expected in [0, 1)");
  expect_error({{"optim.beta2", "-0.5"}}, "optim.beta2 = -0.5: expected in [0, 1)");
  expect_error({{"optim.eps", "0"}}, "optim.eps = 0: expected > 0");
  expect_error({{"optim.base_batch", "0"}}, "optim.base_batch = 0: expected >= 1");
  expect_error({{"policy.name", "local:0"}}, "policy.name = 'local:0': local needs H >= 1");
  expect_error({{"policy.name", "local:-2"}}, "policy.name = 'local:-2'");
  expect_error({{"policy.name", "local"}}, "local needs H >= 1");
  expect_error({{"policy.name", "local:2"}, {"local.momentum", "1"}},
               "local.momentum = 1: expected in [0, 1)");
  expect_error({{"policy.name", "local:2"}, {"local.lr", "-0.1"}}, "local.lr = -0.1");
  expect_error({{"policy.name", "local:2"}, {"local.outer", "adam"}},
               "local.outer = 'adam': expected sgd, momentum or nesterov");
  expect_error({{"policy.name", "local:2"}, {"local.outer_lr", "0"}},
               "local.outer_lr = 0: expected > 0");
  expect_error({{"policy.name", "local:2"}, {"local.outer_momentum", "-1"}},
               "local.outer_momentum = -1: expected in [0, 1)");
  expect_error({{"local.async", "maybe"}}, "local.async = 'maybe': expected true or false");
  // auto's pilot: a choice whose momentum correction a row-sparse model
  // cannot run, and a candidate set it does not know.
  expect_error({{"policy.name", "auto"},
                {"policy.auto_pilot", "0.1"},
                {"policy.auto_choice", "async+staleness.momentum_correction=true"},
                {"optim.kind", "momentum"},
                {"model.name", "dlrm"},
                {"data.spec", "synthetic-ctr"},
                {"model.sparse", "true"}},
               "policy.auto_choice = 'async+staleness.momentum_correction=true': the momentum "
               "correction is not supported with row-sparse");
  expect_error(
      {{"policy.name", "auto"}, {"policy.auto_pilot", "0.1"}, {"policy.auto_candidates", "all"}},
      "policy.auto_candidates = 'all': expected");
  EXPECT_NE(error_of(write_file("bad.toml", "[train]\nworkers = \n"), {}).find("bad.toml:2"),
            std::string::npos);
  EXPECT_NE(error_of(write_file("unk.toml", "[train]\nbudget = 1\nspeed = 3\n"), {})
                .find("unk.toml: unknown key 'train.speed'"),
            std::string::npos);
  EXPECT_NE(error_of(write_file("top.toml", "workers = 3\n"), {}).find("not a [section]"),
            std::string::npos);
}

// Files that are not configs: one line naming the file and what was wrong.
TEST(Config, FilesThatAreNotConfigs) {
  const std::string dir = ::testing::TempDir() + "/a_dir.toml";
  std::filesystem::create_directories(dir);
  EXPECT_EQ(error_of(dir, {}), dir + ": expected a TOML config file, got a directory");
  const std::string empty = write_file("empty.toml", " \n\n");
  EXPECT_EQ(error_of(empty, {}), empty + ": expected a TOML config, got an empty file");
  const std::string bin = write_file("bin.toml", std::string("[train]\0\x01\x02", 10));
  EXPECT_EQ(error_of(bin, {}),
            bin + ": expected a TOML config (text), got binary data (a zero byte at offset 7)");
  EXPECT_EQ(error_of("/nonexistent/x.toml", {}),
            "/nonexistent/x.toml: cannot open (No such file or directory)");
  EXPECT_EQ(error_of("/proc/self/mem", {}), "/proc/self/mem: cannot read (Input/output error)");
  // A newline written into a string value stays inside the one line.
  const std::string nl = write_file("nl.toml", "[train]\nbudget = 1\nruntime = \"a\\nb\"\n");
  EXPECT_EQ(error_of(nl, {}).find('\n'), std::string::npos) << error_of(nl, {});
  EXPECT_NE(error_of(nl, {}).find("a\\x0ab"), std::string::npos) << error_of(nl, {});
  // A string value holding a control character other than a tab is refused
  // (found by the config fuzz target: config.toml wrote it as a multi-line
  // string, which does not read back); a tab is kept.
  const std::string out_nl = write_file("out_nl.toml", "[train]\nbudget = 1\nout = \"a\\nb\"\n");
  EXPECT_EQ(error_of(out_nl, {}),
            out_nl +
                ": train.out = 'a\\x0ab': expected text without control characters (a newline, a "
                "carriage return, ...)");
  EXPECT_NE(error_of("", {{"train.budget", "1"}, {"data.spec", "x\ry"}}).find("data.spec = "),
            std::string::npos);
  EXPECT_EQ(load_config("", {{"train.budget", "1"}, {"train.out", "a\tb"}}).train.out, "a\tb");
  // Nor three quotes in a row, which would keep config.toml's later non-ASCII
  // text from reading back (found by the fuzz target's round trip).
  EXPECT_EQ(error_of("", {{"train.budget", "1"}, {"data.spec", "a'''b"}}),
            "--set: data.spec = 'a'''b': expected text without three quotes in a row");
  EXPECT_NE(error_of("", {{"train.budget", "1"}, {"train.out", "a\"\"\"b"}})
                .find("expected text without three quotes in a row"),
            std::string::npos);
  EXPECT_EQ(load_config("", {{"train.budget", "1"}, {"train.out", "a''b\"\""}}).train.out,
            "a''b\"\"");
}

// toml++ 3.3 has undefined behaviour on some non-ASCII text outside strings
// and comments (found by the config fuzz target): refused there, accepted in
// comments and string values.
TEST(Config, NonAsciiOnlyInCommentsAndStringValues) {
  const std::string ok = write_file("ok.toml",
                                    "# caf\xc3\xa9 \xe2\x80\x94 comment\n[train]\nbudget = 1\n"
                                    "out = \"runs/caf\xc3\xa9\" # \xc3\xa9\n");
  EXPECT_EQ(load_config(ok, {}).train.out, "runs/caf\xc3\xa9");
  const std::string key = write_file("key.toml", "[train]\n\"caf\xc3\xa9\" = 1\n");
  EXPECT_EQ(error_of(key, {}), key +
                                   ":2:5: expected a TOML config: non-ASCII text is allowed only "
                                   "in comments and single-line string values, none after a "
                                   "multi-line string");
  const std::string bare = write_file("bare.toml", "[train]\nworkers = 2 \xcb\xa2\n");
  EXPECT_NE(error_of(bare, {}).find(bare + ":2:13: expected a TOML config"), std::string::npos);
  // A --set value is taken as a string rather than handed to toml++.
  EXPECT_EQ(load_config("", {{"train.budget", "1"}, {"train.out", "caf\xc3\xa9 x"}}).train.out,
            "caf\xc3\xa9 x");
  const std::string multi = write_file("multi.toml", "[train]\nout = \"\"\"\\\n \xc3\xa9\"\"\"\n");
  EXPECT_NE(error_of(multi, {}).find(multi + ":3:2:"), std::string::npos) << error_of(multi, {});
  // A line starting with # inside a multi-line string is no comment (found by
  // the fuzz target): nothing non-ASCII after the first triple quote.
  for (const std::string q : {"\"\"\"", "'''"}) {
    const std::string in =
        write_file("in.toml", "[train]\nout = " + q + "\n# \xef\xbb\xbf\n" + q + "\n");
    EXPECT_NE(error_of(in, {}).find(in + ":3:3: expected a TOML config"), std::string::npos)
        << error_of(in, {});
  }
  const std::string after = write_file("after.toml", "# \"\"\"\n[train]\nout = \"\xc3\xa9\"\n");
  EXPECT_NE(error_of(after, {}).find(after + ":3:8:"), std::string::npos) << error_of(after, {});
  const std::string before = write_file(
      "before.toml", "# caf\xc3\xa9\n[train]\nbudget = 1\nout = \"\xc3\xa9\" # \"\"\"\n");
  EXPECT_EQ(load_config(before, {}).train.out, "\xc3\xa9");
}

// gossip.consensus_lr (CHOCO's gamma) is written only when set, so a
// gossip config without it keeps its config.toml and hash; set, it is
// written, read back and part of the identity.
TEST(Config, ConsensusLrIsWrittenOnlyWhenSet) {
  const std::string ex = std::string(HSGD_SOURCE_DIR) + "/examples/gossip/slow-network.toml";
  const Config plain = load_config(ex, {});
  EXPECT_EQ(to_toml(plain).find("consensus_lr"), std::string::npos);
  const Config one = load_config(ex, {{"gossip.consensus_lr", "1"}});
  EXPECT_EQ(to_toml(one), to_toml(plain));
  EXPECT_EQ(config_hash(one), config_hash(plain));
  const Config half = load_config(ex, {{"compress.push", "topk:0.1"},
                                       {"gossip.order", "atc"},
                                       {"gossip.topology", "ring"},
                                       {"gossip.consensus_lr", "0.5"}});
  const std::string text = to_toml(half);
  EXPECT_NE(text.find("consensus_lr = 0.5"), std::string::npos) << text;
  EXPECT_EQ(load_config(write_file("choco.toml", text), {}).gossip.consensus_lr, 0.5);
  const Config half_gamma_one = load_config(
      ex, {{"compress.push", "topk:0.1"}, {"gossip.order", "atc"}, {"gossip.topology", "ring"}});
  EXPECT_NE(config_hash(half), config_hash(half_gamma_one));
}

// policy.auto_rule is part of an auto run's identity, except 5: runs made
// before the key existed ran the fifth rule, and with auto_rule = 5 their
// config.toml and hash are what they were (so they resume); a run of the
// sixth to eighteenth rule (the eighteenth is the default) is another run,
// and says so: a run made when the ninth, the fourteenth or the sixteenth
// was the default reads back as that rule.
TEST(Config, AutoRuleIsWrittenForAutoExceptTheFifth) {
  const std::string ex = std::string(HSGD_SOURCE_DIR) + "/examples/paper/synthetic.toml";
  const Config today = load_config(ex, {{"policy.name", "auto"}});
  EXPECT_EQ(today.policy.auto_rule, 18);
  EXPECT_NE(to_toml(today).find("auto_rule = 18"), std::string::npos) << to_toml(today);
  const Config fourteenth = load_config(ex, {{"policy.name", "auto"}, {"policy.auto_rule", "14"}});
  EXPECT_NE(config_hash(today), config_hash(fourteenth));
  EXPECT_EQ(load_config(write_file("auto14.toml", to_toml(fourteenth)), {}).policy.auto_rule, 14);
  const Config ninth = load_config(ex, {{"policy.name", "auto"}, {"policy.auto_rule", "9"}});
  EXPECT_NE(to_toml(ninth).find("auto_rule = 9"), std::string::npos) << to_toml(ninth);
  EXPECT_NE(config_hash(today), config_hash(ninth));
  EXPECT_EQ(load_config(write_file("auto9.toml", to_toml(ninth)), {}).policy.auto_rule, 9);
  const Config seventh = load_config(ex, {{"policy.name", "auto"}, {"policy.auto_rule", "7"}});
  EXPECT_NE(to_toml(seventh).find("auto_rule = 7"), std::string::npos) << to_toml(seventh);
  EXPECT_NE(config_hash(ninth), config_hash(seventh));
  const Config sixth = load_config(ex, {{"policy.name", "auto"}, {"policy.auto_rule", "6"}});
  EXPECT_NE(to_toml(sixth).find("auto_rule = 6"), std::string::npos) << to_toml(sixth);
  EXPECT_NE(config_hash(sixth), config_hash(seventh));
  EXPECT_EQ(load_config(write_file("auto6.toml", to_toml(sixth)), {}).policy.auto_rule, 6);
  const Config fifth = load_config(ex, {{"policy.name", "auto"}, {"policy.auto_rule", "5"}});
  const std::string fifth_text = to_toml(fifth);
  EXPECT_EQ(fifth_text.find("auto_rule"), std::string::npos) << fifth_text;
  EXPECT_NE(config_hash(fifth), config_hash(sixth));
  // The fifth rule's config.toml reads back as... today's rule unless the
  // key is given: a resume of such a run must say auto_rule = 5.
  EXPECT_EQ(load_config(write_file("auto5.toml", fifth_text), {}).policy.auto_rule, 18);
  // Another policy: not written, whatever the value.
  const Config sync = load_config(ex, {{"policy.name", "sync"}, {"policy.auto_rule", "6"}});
  EXPECT_EQ(to_toml(sync).find("auto_rule"), std::string::npos);
  EXPECT_EQ(config_hash(sync), config_hash(load_config(ex, {{"policy.name", "sync"}})));
  try {
    load_config(ex, {{"policy.name", "auto"}, {"policy.auto_rule", "4"}});
    ADD_FAILURE() << "auto_rule 4 accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("policy.auto_rule"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("5 to 19"), std::string::npos) << e.what();
  }
  EXPECT_EQ(load_config(ex, {{"policy.name", "auto"}, {"policy.auto_rule", "10"}}).policy.auto_rule,
            10);
  EXPECT_EQ(load_config(ex, {{"policy.name", "auto"}, {"policy.auto_rule", "15"}}).policy.auto_rule,
            15);
  EXPECT_EQ(load_config(ex, {{"policy.name", "auto"}, {"policy.auto_rule", "16"}}).policy.auto_rule,
            16);
  EXPECT_EQ(load_config(ex, {{"policy.name", "auto"}, {"policy.auto_rule", "17"}}).policy.auto_rule,
            17);
  EXPECT_EQ(load_config(ex, {{"policy.name", "auto"}, {"policy.auto_rule", "18"}}).policy.auto_rule,
            18);
  EXPECT_EQ(load_config(ex, {{"policy.name", "auto"}, {"policy.auto_rule", "19"}}).policy.auto_rule,
            19);
  EXPECT_THROW(load_config(ex, {{"policy.name", "auto"}, {"policy.auto_rule", "20"}}), InputError);
}

// auto's pilot became the default (policy.auto_pilot = 0.1; 0 before, and
// then not written). Every auto run now writes the key, so its config.toml
// says whether it had a pilot; the identity of runs made before is kept: a
// run without a pilot hashes as it did (with 0, or read from an old
// config.toml without the key), and one with a pilot and its choice too.
// The hashes are those of checkpoints the binary before the change wrote.
TEST(Config, ThePilotsDefaultKeepsTheIdentityOfRunsMadeBefore) {
  const std::string ex = std::string(HSGD_SOURCE_DIR) + "/examples/paper/synthetic.toml";
  const std::vector<Override> base = {{"policy.name", "auto"}, {"train.workers", "8"}};
  auto with = [&](std::vector<Override> more) {
    more.insert(more.begin(), base.begin(), base.end());
    return load_config(ex, more);
  };
  const Config now = with({});
  EXPECT_EQ(now.policy.auto_pilot, 0.1);
  EXPECT_EQ(now.policy.auto_candidates, "k+hybrid");
  const Config none = with({{"policy.auto_pilot", "0"}});
  EXPECT_NE(to_toml(none).find("auto_pilot = 0.0"), std::string::npos) << to_toml(none);
  EXPECT_EQ(config_hash(none), "8319bb6b");
  EXPECT_EQ(config_hash(now), "8319bb6b");  // an old run's config.toml, read now
  const Config chose = with({{"policy.auto_pilot", "0.2"}, {"policy.auto_choice", "async"}});
  EXPECT_EQ(config_hash(chose), "3fc774a6");
  EXPECT_NE(config_hash(chose), config_hash(with({{"policy.auto_choice", "async"}})));
  const Config sync = load_config(ex, {{"policy.name", "sync"}});
  EXPECT_EQ(to_toml(sync).find("auto_pilot"), std::string::npos);
}

TEST(Config, CompressKeys) {
  // Off (the default): no [compress] section, so config.toml and the hash
  // are what they were before compression existed.
  const Config off = load_config("", {{"train.budget", "1"}});
  EXPECT_EQ(to_toml(off).find("[compress]"), std::string::npos);
  const Config on = load_config("", {{"train.budget", "1"},
                                     {"compress.push", "topk:0.01"},
                                     {"compress.pull", "qsgd:16"},
                                     {"compress.error_feedback", "false"},
                                     {"compress.min_bytes", "1024"},
                                     {"compress.warmup", "10"}});
  EXPECT_EQ(on.compress.push.name(), "topk:0.01");
  EXPECT_EQ(on.compress.pull.levels, 16);
  EXPECT_FALSE(on.compress.push_feedback());
  EXPECT_EQ(on.compress.min_bytes, 1024);
  const std::string text = to_toml(on);
  EXPECT_NE(text.find("[compress]"), std::string::npos);
  const Config back = load_config(write_file("compress.toml", text), {});
  EXPECT_EQ(to_toml(back), text);
  EXPECT_NE(config_hash(on), config_hash(off));
  // error_feedback defaults to auto: on for the biased compressors only.
  EXPECT_TRUE(
      load_config("", {{"train.budget", "1"}, {"compress.push", "sign"}}).compress.push_feedback());
  EXPECT_FALSE(load_config("", {{"train.budget", "1"}, {"compress.push", "qsgd:4"}})
                   .compress.push_feedback());
  // qsgd with few levels on the paths with memory: scaled (memory_scale), accepted.
  EXPECT_EQ(
      load_config("", {{"train.budget", "1"}, {"compress.pull", "qsgd:4"}}).compress.pull.levels,
      4);
  EXPECT_TRUE(load_config("", {{"train.budget", "1"},
                               {"compress.push", "qsgd:2"},
                               {"compress.error_feedback", "true"}})
                  .compress.push_feedback());
  const std::vector<std::pair<std::vector<Override>, std::string>> bad = {
      {{{"compress.push", "topk:0"}},
       "compress.push = 'topk:0': expected topk:R with the kept fraction R in (0, 1]"},
      {{{"compress.pull", "randomk:0.1"}},
       "compress.pull = 'randomk:0.1': randomk is for the push path only"},
      {{{"compress.push", "randomk:1.5"}}, "compress.push = 'randomk:1.5': expected randomk:R"},
      {{{"compress.pull", "qsgd:1"}}, "compress.pull = 'qsgd:1': expected qsgd:S"},
      {{{"compress.push", "powersgd:0"}}, "compress.push = 'powersgd:0': expected powersgd:R"},
      {{{"compress.push", "zip"}}, "compress.push = 'zip': expected none, fp16"},
      {{{"compress.error_feedback", "maybe"}}, "compress.error_feedback = 'maybe': expected true"},
      {{{"compress.min_bytes", "-1"}}, "compress.min_bytes = -1: expected >= 0"},
      {{{"compress.warmup", "-3"}}, "compress.warmup = -3"},
      {{{"compress.push", "sign"}, {"policy.name", "hogwild"}, {"optim.kind", "sgd"}},
       "compress.push = 'sign': policy hogwild has no server"},
  };
  for (auto [o, needle] : bad) {
    o.insert(o.begin(), {"train.budget", "1"});
    const std::string e = error_of("", o);
    EXPECT_NE(e.find(needle), std::string::npos) << "got: '" << e << "'";
    EXPECT_EQ(e.find('\n'), std::string::npos);
  }
  const std::string file = write_file("badc.toml", "[compress]\npush = \"topk:2\"\n");
  EXPECT_NE(error_of(file, {}).find(file + ": compress.push = 'topk:2'"), std::string::npos)
      << error_of(file, {});
}

// config.toml and config_hash of known configs, as written before the keys
// were declared in one table (keys.cc): a hash names a run's checkpoints, so
// a change here would make every committed run unresumable.
TEST(Config, KnownConfigsKeepTheirTomlAndHashByteForByte) {
  const std::string src = HSGD_SOURCE_DIR;
  struct Case {
    std::string file;
    std::vector<Override> o;
    std::string toml_crc, hash;
  };
  const std::vector<Case> cases = {
      {"", {{"train.budget", "1"}}, "d612761b", "5c0e6d04"},
      {src + "/examples/demo.toml", {}, "a009727a", "224b492c"},
      {src + "/examples/churn.toml", {}, "cb2c9023", "759003bd"},
      // Sim configs now write sim.network (a resume reads it back). A run
      // of the new default model ("shared") is another run; with
      // "independent", the model before, the hash is that of before (the
      // key is left out of it), and config.toml has one line more.
      {src + "/examples/churn.toml", {{"sim.network", "independent"}}, "78063dca", "cb4764be"},
      {src + "/examples/paper/synthetic.toml",  // (it sets "independent")
       {{"sim.network", "shared"}},
       "901064a2",
       "19f7ca9a"},
      {src + "/examples/paper/fashion-mnist-lenet5.toml", {}, "60ce2106", "a1fea097"},
      {src + "/examples/paper/synthetic-step500.toml", {}, "be8b326a", "f20d15aa"},
      {src + "/examples/paper/synthetic.toml", {}, "78298265", "92bca159"},
      {src + "/tests/fuzz/corpus/config/full_keys", {}, "3e58c575", "196213d4"},
      {"",
       {{"train.budget", "3"},
        {"compress.push", "topk:0.01"},
        {"compress.pull", "qsgd:16"},
        {"compress.error_feedback", "auto"},
        {"compress.min_bytes", "64"},
        {"compress.warmup", "5"},
        {"staleness.tau_max", "4"},
        {"staleness.dc_asgd", "true"},
        {"faults.kill", "worker:1@2s"},
        {"faults.rejoin", "worker:1@3s"},
        {"faults.kill_rate", "0.5"},
        {"faults.rejoin_after", "1.5"},
        {"faults.exception_rate", "0.01"},
        {"train.min_workers", "2"},
        {"train.diverge_factor", "100"},
        {"train.runtime", "sim"}},
       "478ccb87",
       "f2b5f0c6"},
      {"",
       {{"train.epochs", "2"},
        {"policy.name", "local:4"},
        {"local.lr", "0.1"},
        {"local.outer", "nesterov"},
        {"local.async", "true"},
        {"optim.kind", "adam"},
        {"optim.lr_schedule", "cosine"},
        {"optim.lr_horizon", "100"},
        {"data.spec", "synthetic-ctr"},
        {"model.name", "dlrm"},
        {"model.top_hidden", "32,16"},
        {"model.table_rows", "1000"},
        {"faults.rejoin_after", "off"},
        {"compress.error_feedback", "true"}},
       "2dae49d5",
       "2fb0562e"},
      {"",
       {{"train.budget", "1"},
        {"model.name", "dlrm"},
        {"data.spec", "synthetic-ctr"},
        {"model.sparse", "true"},
        {"policy.name", "ssp:3"},
        {"sampling.kind", "uniform"},
        {"policy.clock", "epochs"},
        {"policy.aggregation", "sum"},
        {"train.seed", "12345678901"},
        {"train.out", "x y"}},
       "7c6e518f",
       "ee06ed94"},
  };
  for (const Case& k : cases) {
    const Config c = load_config(k.file, k.o);
    char crc[16];
    std::snprintf(crc, sizeof crc, "%08x", crc32c(to_toml(c)));
    EXPECT_EQ(crc, k.toml_crc) << k.file << "\n" << to_toml(c);
    EXPECT_EQ(config_hash(c), k.hash) << k.file;
  }
}

// Settings that the rest of the config makes moot are said, one line each,
// and the effective config resets them.
TEST(Config, MootSettingsAreSaidAndTheEffectiveConfigResetsThem) {
  auto moot = [](std::vector<Override> o) {
    o.insert(o.begin(), {"train.budget", "1"});
    return moot_settings(load_config("", o));
  };
  using Lines = std::vector<std::string>;
  EXPECT_EQ(moot({}), Lines{});
  EXPECT_EQ(moot({{"stragglers.sigma", "0.25"}}),
            Lines{"stragglers.sigma = 0.25 has no effect: stragglers.fraction = 0"});
  EXPECT_EQ(moot({{"stragglers.sigma", "0.25"}, {"stragglers.fraction", "0.5"}}), Lines{});
  EXPECT_EQ(moot({{"stragglers.delay", "exponential"}, {"stragglers.scale", "0.1"}}),
            (Lines{"stragglers.delay = 'exponential' has no effect: stragglers.fraction = 0",
                   "stragglers.scale = 0.1 has no effect: stragglers.fraction = 0"}));
  EXPECT_EQ(moot({{"stragglers.fraction", "0.1"}, {"stragglers.sigma", "0.25"}}),
            Lines{"stragglers.sigma = 0.25 has no effect: stragglers.fraction = 0.1 makes no "
                  "straggler of train.workers = 4"});
  EXPECT_EQ(moot({{"stragglers.fraction", "0.5"},
                  {"stragglers.delay", "exponential"},
                  {"stragglers.scale", "0.1"},
                  {"stragglers.sigma", "0.3"}}),
            Lines{"stragglers.sigma = 0.3 has no effect: stragglers.delay = 'exponential'"});
  EXPECT_EQ(moot({{"compress.error_feedback", "false"},
                  {"compress.min_bytes", "64"},
                  {"compress.warmup", "3"}}),
            (Lines{"compress.error_feedback = false has no effect: compress.push and "
                   "compress.pull = 'none'",
                   "compress.min_bytes = 64 has no effect: compress.push and compress.pull = "
                   "'none'",
                   "compress.warmup = 3 has no effect: compress.push and compress.pull = 'none'"}));
  EXPECT_EQ(moot({{"compress.push", "topk:0.1"}, {"compress.min_bytes", "64"}}), Lines{});
  EXPECT_EQ(moot({{"local.momentum", "0.5"}, {"local.outer", "nesterov"}}),
            (Lines{"local.momentum = 0.5 has no effect: policy.name = 'hybrid'",
                   "local.outer = 'nesterov' has no effect: policy.name = 'hybrid'"}));
  EXPECT_EQ(moot({{"policy.name", "local:2"}, {"local.momentum", "0.5"}}), Lines{});
  // SlowMo: the outer optimizer is read by a gossip policy with a global
  // average, and by nothing else without one.
  EXPECT_EQ(moot({{"policy.name", "pdsgdm:2"},
                  {"gossip.global_every", "4"},
                  {"local.outer", "momentum"},
                  {"local.outer_momentum", "0.5"}}),
            Lines{});
  EXPECT_EQ(moot({{"policy.name", "dpsgd"}, {"local.outer", "momentum"}}),
            Lines{"local.outer = 'momentum' has no effect: policy.name = 'dpsgd'"});
  // The gossip simulator shares sim.cores too; other runtimes ignore it.
  EXPECT_EQ(moot({{"train.runtime", "sim"}, {"policy.name", "sgp"}, {"sim.cores", "2"}}), Lines{});
  EXPECT_EQ(moot({{"train.runtime", "threads"}, {"policy.name", "sgp"}, {"sim.cores", "2"}}),
            Lines{"sim.cores = 2 has no effect: train.runtime = 'threads'"});
  EXPECT_EQ(moot({{"policy.name", "async"}, {"policy.step", "500"}, {"policy.k0", "2"}}),
            (Lines{"policy.k0 = 2 has no effect: policy.name = 'async'",
                   "policy.step = 500 has no effect: policy.name = 'async'"}));
  EXPECT_EQ(moot({{"policy.schedule", "adaptive"}, {"policy.step", "500"}}),
            Lines{"policy.step = 500 has no effect: policy.schedule = 'adaptive'"});
  EXPECT_EQ(moot({{"policy.step", "500"}, {"policy.ramp", "100"}}),
            Lines{"policy.ramp = 100 has no effect: policy.schedule = 'step'"});
  EXPECT_EQ(moot({{"staleness.momentum_correction", "true"}}),
            Lines{"staleness.momentum_correction = true has no effect: optim.kind = 'sgd'"});
  EXPECT_EQ(moot({{"staleness.momentum_correction", "true"}, {"optim.kind", "momentum"}}), Lines{});
  EXPECT_EQ(moot({{"policy.name", "kasync:3"}}), Lines{});  // policy.k = 3 is read
  EXPECT_EQ(moot({{"policy.name", "async"}, {"policy.aggregation", "sum"}}),
            Lines{"policy.aggregation = 'sum' has no effect: policy.name = 'async'"});
  EXPECT_EQ(moot({{"optim.beta1", "0.8"}, {"optim.lr_gamma", "0.5"}}),
            (Lines{"optim.lr_gamma = 0.5 has no effect: optim.lr_schedule = 'constant'",
                   "optim.beta1 = 0.8 has no effect: optim.kind = 'sgd'"}));
  EXPECT_EQ(moot({{"sim.latency", "0.001"}}),
            Lines{"sim.latency = 0.001 has no effect: train.runtime = 'threads'"});
  EXPECT_EQ(moot({{"sim.latency", "0.001"}, {"train.runtime", "sim"}}), Lines{});
  EXPECT_EQ(moot({{"sampling.uniform_mix", "0.5"}}),
            Lines{"sampling.uniform_mix = 0.5 has no effect: sampling.kind = 'uniform'"});
  EXPECT_EQ(moot({{"data.synthetic_samples", "500"}}),
            Lines{"data.synthetic_samples = 500 has no effect: data.spec = 'fashion-mnist'"});
  EXPECT_EQ(moot({{"checkpoint.keep", "5"}}),
            Lines{"checkpoint.keep = 5 has no effect: train.checkpoint_every = 0"});
  EXPECT_EQ(moot({{"faults.rejoin_after", "2"}}),
            Lines{"faults.rejoin_after = 2 has no effect: faults.kill_rate = 0 and "
                  "faults.exception_rate = 0"});

  // The effective config: the moot keys at their defaults, the rest kept.
  const Config a = load_config("", {{"train.budget", "1"},
                                    {"stragglers.sigma", "0.25"},
                                    {"policy.name", "async"},
                                    {"policy.step", "500"},
                                    {"optim.lr", "0.05"}});
  const Config e = effective_config(a);
  EXPECT_EQ(e.stragglers.sigma, 0);
  EXPECT_EQ(e.policy.schedule.step, 0);
  EXPECT_EQ(e.optim.lr, 0.05);
  EXPECT_EQ(moot_settings(e), Lines{});
  const Config b =
      load_config("", {{"train.budget", "1"}, {"policy.name", "async"}, {"optim.lr", "0.05"}});
  EXPECT_EQ(config_digest(e), config_digest(b));
  EXPECT_NE(config_digest(a), config_digest(b));
}

// The sweep's digest covers every key, config_hash only the run's identity.
TEST(Config, TheDigestCoversEveryKeyTheHashOnlyTheIdentity) {
  const Config c = load_config("", {{"train.budget", "2"}});
  for (const Override& o : std::vector<Override>{{"train.budget", "3"},
                                                 {"train.epochs", "1"},
                                                 {"train.workers", "2"},
                                                 {"train.checkpoint_every", "1"},
                                                 {"train.out", "elsewhere"}}) {
    const Config d = load_config("", {{"train.budget", "2"}, o});
    EXPECT_EQ(config_hash(c), config_hash(d)) << o.first;
    EXPECT_NE(config_digest(c), config_digest(d)) << o.first;
  }
  // Calibration depends on the model, batch and data, not on the budget.
  EXPECT_EQ(calibration_digest(c), calibration_digest(load_config("", {{"train.budget", "9"}})));
  for (const Override& o : std::vector<Override>{{"train.batch", "32"},
                                                 {"model.name", "mlp"},
                                                 {"data.spec", "synthetic"},
                                                 {"optim.kind", "adam"}}) {
    EXPECT_NE(calibration_digest(c),
              calibration_digest(load_config("", {{"train.budget", "2"}, o})))
        << o.first;
  }
}

// docs/config-reference.md is `hsgd config --reference` (config_cmd.cc
// prints config_reference_markdown()): regenerate it with
//   build/release/hsgd config --reference > docs/config-reference.md
TEST(Config, TheCommittedReferenceIsCurrent) {
  std::ifstream f(std::string(HSGD_SOURCE_DIR) + "/docs/config-reference.md");
  std::stringstream committed;
  committed << f.rdbuf();
  EXPECT_EQ(committed.str(), config_reference_markdown())
      << "docs/config-reference.md is stale: build/release/hsgd config --reference > "
         "docs/config-reference.md";
  // Every key a config accepts is in it.
  const std::string text = to_toml(load_config("", {{"train.budget", "1"},
                                                    {"compress.push", "sign"},
                                                    {"faults.kill_rate", "1"},
                                                    {"faults.kill", "worker:0@1s"},
                                                    {"faults.rejoin", "worker:0@2s"},
                                                    {"faults.rejoin_after", "1"},
                                                    {"faults.exception_rate", "0.1"},
                                                    {"staleness.tau_max", "3"},
                                                    {"train.min_workers", "2"},
                                                    {"train.diverge_factor", "10"}}));
  std::istringstream lines(text);
  std::string line, section;
  int keys = 0;
  while (std::getline(lines, line)) {
    if (line.size() > 2 && line[0] == '[') {
      section = line.substr(1, line.size() - 2);
      EXPECT_NE(committed.str().find("## [" + section + "]"), std::string::npos) << section;
    } else if (const size_t eq = line.find(" = "); eq != std::string::npos) {
      ++keys;
      EXPECT_NE(committed.str().find("| `" + line.substr(0, eq) + "` |"), std::string::npos)
          << section << "." << line.substr(0, eq);
    }
  }
  EXPECT_GT(keys, 100);
}

// The declaration: each key once, with a type and a doc line, in a declared
// section; a resumable key is never part of the identity.
TEST(Config, EveryKeyIsDeclaredOnceWithItsDoc) {
  std::set<std::string> sections, seen;
  for (const config_internal::Section& s : config_internal::sections()) {
    EXPECT_TRUE(sections.insert(s.name).second) << s.name;
    EXPECT_FALSE(s.doc.empty()) << s.name;
  }
  const Config d = load_config("", {{"train.budget", "1"}});
  for (const config_internal::Key& k : config_internal::keys()) {
    EXPECT_TRUE(seen.insert(k.dotted()).second) << k.dotted() << " declared twice";
    EXPECT_TRUE(sections.count(k.section)) << k.dotted();
    EXPECT_FALSE(k.doc.empty()) << k.dotted();
    EXPECT_FALSE(k.type.empty()) << k.dotted();
    if (k.resumable) {
      EXPECT_FALSE(k.hash_as.empty()) << k.dotted();
    }
    EXPECT_TRUE(resumable_key(k.dotted()) == k.resumable) << k.dotted();
    EXPECT_TRUE(k.is_default(Config{})) << k.dotted();
  }
  EXPECT_GT(seen.size(), 100u);
  EXPECT_EQ(error_of("", {{"train.budget", "1"}, {"model.hidden", "64,0"}}),
            "model.hidden = [64, 0]: expected widths >= 1");
}

// model dpgmm (issue 31): what would move its SVI step off the convex line
// is refused by validation, one line naming the key.
TEST(Config, DpgmmRefusesWhatBreaksItsSviStep) {
  const std::vector<Override> base = {
      {"train.budget", "1"}, {"model.name", "dpgmm"}, {"optim.lr", "1"}};
  const Config ok = load_config("", base);
  EXPECT_EQ(ok.model.truncation, 50);
  EXPECT_EQ(ok.model.alpha, 1.0);
  const struct {
    Override o;
    std::string key;
  } cases[] = {
      {{"optim.kind", "momentum"}, "optim.kind = 'momentum'"},
      {{"optim.kind", "adam"}, "optim.kind = 'adam'"},
      {{"optim.weight_decay", "0.01"}, "optim.weight_decay"},
      {{"policy.aggregation", "sum"}, "policy.aggregation = 'sum'"},
      {{"compress.push", "topk:0.1"}, "compress.push"},
      {{"compress.pull", "fp16"}, "compress.pull"},
      {{"optim.lr", "1.5"}, "optim.lr = 1.5"},
      {{"optim.scale_lr", "true"}, "optim.lr = 1"},
      {{"staleness.dc_asgd", "true"}, "staleness.dc_asgd"},
      {{"sampling.kind", "loss"}, "sampling.kind = 'loss'"},
  };
  for (const auto& c : cases) {
    std::vector<Override> o = base;
    o.push_back(c.o);
    const std::string e = error_of("", o);
    EXPECT_NE(e.find(c.key), std::string::npos) << e;
    EXPECT_NE(e.find("dpgmm"), std::string::npos) << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
  // Robbins-Monro's first rate lr x tau^-kappa must be <= 1 too.
  std::vector<Override> rm = base;
  rm.push_back({"optim.lr_schedule", "robbins-monro"});
  rm.push_back({"optim.tau", "0.5"});
  EXPECT_NE(error_of("", rm).find("at the first update"), std::string::npos) << error_of("", rm);
  rm.back() = {"optim.tau", "1"};
  EXPECT_EQ(error_of("", rm), "");
  // The same settings are fine for other models.
  EXPECT_EQ(error_of("", {{"train.budget", "1"}, {"optim.kind", "momentum"}}), "");
  // Its keys are checked and moot elsewhere; dpgmm configs write them.
  EXPECT_NE(error_of("", {{"train.budget", "1"}, {"model.name", "dpgmm"}, {"model.alpha", "0"}})
                .find("model.alpha = 0"),
            std::string::npos);
  EXPECT_NE(to_toml(ok).find("truncation = 50"), std::string::npos);
  EXPECT_EQ(to_toml(load_config("", {{"train.budget", "1"}})).find("truncation"),
            std::string::npos);
}

}  // namespace
}  // namespace hsgd
