#include "hsgd/config/config.h"
#include "hsgd/server/sparse.h"

#include <toml++/toml.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string_view>

#include "hsgd/core/error.h"
#include "hsgd/core/state.h"

namespace hsgd {
namespace {

// Where a value came from, for messages: "job.toml: train.workers" or
// "--set train.workers".
struct Where {
  std::string origin;
  std::string key;
  std::string str() const { return origin.empty() ? key : origin + ": " + key; }
};

std::string describe(const toml::node& n) {
  std::ostringstream os;
  if (n.is_string()) {
    os << "'" << n.as_string()->get() << "'";
  } else {
    n.visit([&os](const auto& v) {
      if constexpr (toml::is_table<decltype(v)>) {
        os << "a table";
      } else {
        os << v;
      }
    });
  }
  return os.str();
}

[[noreturn]] void bad(const Where& w, const toml::node& n, const std::string& expected) {
  throw InputError(w.str() + " = " + describe(n) + ": expected " + expected);
}

int64_t as_int(const Where& w, const toml::node& n) {
  if (auto v = n.value_exact<int64_t>()) return *v;
  if (auto d = n.value_exact<double>(); d && std::floor(*d) == *d && std::abs(*d) < 9e15) {
    return static_cast<int64_t>(*d);
  }
  bad(w, n, "an integer");
}
double as_double(const Where& w, const toml::node& n) {
  if (auto v = n.value_exact<double>()) return *v;
  if (auto i = n.value_exact<int64_t>()) return static_cast<double>(*i);
  bad(w, n, "a number");
}
bool as_bool(const Where& w, const toml::node& n) {
  if (auto v = n.value_exact<bool>()) return *v;
  bad(w, n, "true or false");
}
std::string as_string(const Where& w, const toml::node& n) {
  if (auto v = n.value_exact<std::string>()) return *v;
  if (auto i = n.value_exact<int64_t>()) return std::to_string(*i);
  bad(w, n, "a string");
}
std::vector<int64_t> as_int_list(const Where& w, const toml::node& n) {
  std::vector<int64_t> out;
  if (const toml::array* a = n.as_array()) {
    for (const toml::node& e : *a) out.push_back(as_int(w, e));
    return out;
  }
  if (n.is_integer()) return {as_int(w, n)};
  if (auto s = n.value_exact<std::string>()) {  // "256,128" from --set
    std::stringstream ss(*s);
    std::string item;
    while (std::getline(ss, item, ',')) {
      try {
        size_t used = 0;
        out.push_back(std::stoll(item, &used));
        if (used != item.size()) throw std::invalid_argument(item);
      } catch (const std::exception&) {
        bad(w, n, "a list of integers");
      }
    }
    return out;
  }
  bad(w, n, "a list of integers");
}

using Setter = std::function<void(Config&, const Where&, const toml::node&)>;
using Getter = std::function<toml::node_view<const toml::node>(void)>;

struct Field {
  Setter set;
  std::function<void(const Config&, toml::table&)> put;
};

template <class T>
void put_value(toml::table& t, const std::string& key, const T& v) {
  t.insert_or_assign(key, v);
}

// faults.kill / faults.rejoin: an array of "worker:W@Ts" strings, or one
// string (a --set value: comma- or semicolon-separated).
std::vector<FaultAt> as_fault_list(const Where& w, const toml::node& n) {
  std::vector<FaultAt> out;
  auto add = [&](const std::string& spec) {
    out.push_back(parse_fault_at(w.str(), spec));
  };
  if (const toml::array* a = n.as_array()) {
    for (const toml::node& e : *a) {
      auto s = e.value_exact<std::string>();
      if (!s) bad(w, e, "a list of \"worker:W@Ts\" strings, e.g. [\"worker:3@20s\"]");
      add(*s);
    }
    return out;
  }
  if (auto s = n.value_exact<std::string>()) {
    // Comma- or semicolon-separated (';' inside an `hsgd compare --policies`
    // entry, whose list is comma-separated).
    std::string item;
    for (char ch : *s + ",") {
      if (ch == ',' || ch == ';') {
        if (!item.empty()) add(item);
        item.clear();
      } else {
        item += ch;
      }
    }
    return out;
  }
  bad(w, n, "a list of \"worker:W@Ts\" strings, e.g. [\"worker:3@20s\"]");
}

// The registry of every config key: section -> key -> setter/writer.
const std::map<std::string, std::map<std::string, Field>>& fields() {
  static const auto* f = [] {
    auto* m = new std::map<std::string, std::map<std::string, Field>>();
    auto& r = *m;
#define HSGD_INT(sec, key, member)                                                                 \
  r[sec][key] = Field {                                                                            \
    [](Config& c, const Where& w, const toml::node& n) {                                           \
      c.member = static_cast<decltype(c.member)>(as_int(w, n));                                    \
    },                                                                                             \
        [](const Config& c, toml::table& t) { put_value(t, key, static_cast<int64_t>(c.member)); } \
  }
#define HSGD_DBL(sec, key, member)                                                      \
  r[sec][key] = Field {                                                                 \
    [](Config& c, const Where& w, const toml::node& n) { c.member = as_double(w, n); }, \
        [](const Config& c, toml::table& t) { put_value(t, key, c.member); }            \
  }
#define HSGD_BOOL(sec, key, member)                                                   \
  r[sec][key] = Field {                                                               \
    [](Config& c, const Where& w, const toml::node& n) { c.member = as_bool(w, n); }, \
        [](const Config& c, toml::table& t) { put_value(t, key, c.member); }          \
  }
#define HSGD_STR(sec, key, member)                                                      \
  r[sec][key] = Field {                                                                 \
    [](Config& c, const Where& w, const toml::node& n) { c.member = as_string(w, n); }, \
        [](const Config& c, toml::table& t) { put_value(t, key, c.member); }            \
  }
    HSGD_STR("data", "spec", data.spec);
    HSGD_STR("data", "test", data.test);
    HSGD_DBL("data", "test_fraction", data.test_fraction);
    r["data"]["normalize"] = Field{
        [](Config& c, const Where& w, const toml::node& n) { c.data.normalize = as_bool(w, n); },
        [](const Config& c, toml::table& t) { t.insert_or_assign("normalize", c.data.normalize); }};
    HSGD_INT("data", "synthetic_samples", data.synthetic.samples);
    HSGD_INT("data", "synthetic_features", data.synthetic.features);
    HSGD_INT("data", "synthetic_classes", data.synthetic.classes);
    HSGD_DBL("data", "synthetic_separation", data.synthetic.class_sep);
    HSGD_DBL("data", "synthetic_noise", data.synthetic.noise);
    HSGD_INT("data", "synthetic_seed", data.synthetic.seed);
    // Non-IID partitions and importance sampling (issue 15).
    HSGD_STR("data", "partition", data.partition.kind);
    HSGD_DBL("data", "alpha", data.partition.alpha);
    HSGD_INT("data", "min_partition_size", data.partition.min_partition_size);
    HSGD_INT("data", "classes_per_worker", data.partition.classes_per_worker);
    HSGD_DBL("data", "global_fraction", data.partition.global_fraction);
    HSGD_STR("sampling", "kind", sampling.kind);
    HSGD_DBL("sampling", "uniform_mix", sampling.uniform_mix);
    HSGD_INT("sampling", "warmup", sampling.warmup);
    HSGD_STR("model", "name", model.name);
    r["model"]["hidden"] = Field{
        [](Config& c, const Where& w, const toml::node& n) { c.model.hidden = as_int_list(w, n); },
        [](const Config& c, toml::table& t) {
          toml::array a;
          for (int64_t h : c.model.hidden) a.push_back(h);
          t.insert_or_assign("hidden", a);
        }};
    // Click-through data and the dlrm model (issue 16; data/ctr.h).
    HSGD_INT("data", "ctr_samples", data.synthetic.ctr.samples);
    HSGD_INT("data", "ctr_dense", data.synthetic.ctr.dense);
    HSGD_INT("data", "ctr_fields", data.synthetic.ctr.fields);
    HSGD_DBL("data", "zipf", data.synthetic.ctr.zipf);
    HSGD_INT("model", "table_rows", data.synthetic.ctr.rows);
    HSGD_INT("model", "embedding_dim", model.embedding_dim);
    HSGD_BOOL("model", "sparse", model.sparse);
    r["model"]["top_hidden"] = Field{
        [](Config& c, const Where& w, const toml::node& n) {
          c.model.top_hidden = as_int_list(w, n);
        },
        [](const Config& c, toml::table& t) {
          toml::array a;
          for (int64_t h : c.model.top_hidden) a.push_back(h);
          t.insert_or_assign("top_hidden", a);
        }};
    HSGD_INT("train", "workers", train.workers);
    HSGD_INT("train", "batch", train.batch);
    HSGD_DBL("train", "budget", train.budget);
    HSGD_DBL("train", "epochs", train.epochs);
    HSGD_DBL("train", "eval_every", train.eval_every);
    HSGD_INT("train", "eval_samples", train.eval_samples);
    HSGD_INT("train", "seed", train.seed);
    HSGD_STR("train", "runtime", train.runtime);
    HSGD_STR("train", "out", train.out);
    HSGD_INT("train", "servers", train.servers);
    HSGD_DBL("train", "checkpoint_every", train.checkpoint_every);
    HSGD_INT("train", "max_nonfinite", train.max_nonfinite);
    HSGD_INT("checkpoint", "keep", checkpoint.keep);
    HSGD_DBL("mpi", "timeout", mpi.timeout);
    HSGD_STR("policy", "name", policy_name);
    HSGD_INT("policy", "k", policy.k);
    HSGD_INT("policy", "s", policy.s);
    HSGD_STR("policy", "auto_ablate", policy.auto_ablate);  // auto (#17), ablations only
    HSGD_DBL("policy", "loss_smoothing", policy.schedule.loss_smoothing);
    HSGD_STR("policy", "schedule", policy.schedule.kind);
    HSGD_DBL("policy", "k0", policy.schedule.k0);
    HSGD_DBL("policy", "step", policy.schedule.step);
    HSGD_DBL("policy", "ramp", policy.schedule.ramp);
    r["policy"]["clock"] = Field{[](Config& c, const Where& w, const toml::node& n) {
                                   c.policy.schedule.clock = parse_schedule_clock(as_string(w, n));
                                 },
                                 [](const Config& c, toml::table& t) {
                                   t.insert_or_assign("clock", to_string(c.policy.schedule.clock));
                                 }};
    r["policy"]["aggregation"] =
        Field{[](Config& c, const Where& w, const toml::node& n) {
                c.policy.aggregation = parse_aggregation(as_string(w, n));
              },
              [](const Config& c, toml::table& t) {
                t.insert_or_assign("aggregation", to_string(c.policy.aggregation));
              }};
    HSGD_DBL("local", "lr", policy.local.lr);
    HSGD_DBL("local", "momentum", policy.local.momentum);
    HSGD_BOOL("local", "async", policy.local.async);
    HSGD_STR("local", "outer", policy.local.outer);
    HSGD_DBL("local", "outer_lr", policy.local.outer_lr);
    HSGD_DBL("local", "outer_momentum", policy.local.outer_momentum);
    HSGD_STR("optim", "kind", optim.kind);
    HSGD_DBL("optim", "lr", optim.lr);
    HSGD_DBL("optim", "momentum", optim.momentum);
    HSGD_DBL("optim", "weight_decay", optim.weight_decay);
    HSGD_STR("optim", "lr_schedule", lr_schedule.kind);
    HSGD_INT("optim", "lr_step_size", lr_schedule.step_size);
    HSGD_DBL("optim", "lr_gamma", lr_schedule.gamma);
    HSGD_INT("optim", "lr_horizon", lr_schedule.horizon);
    HSGD_DBL("optim", "lr_min", lr_schedule.min_lr);
    HSGD_INT("optim", "warmup", lr_schedule.warmup);
    HSGD_DBL("optim", "beta1", optim.beta1);
    HSGD_DBL("optim", "beta2", optim.beta2);
    HSGD_DBL("optim", "eps", optim.eps);
    HSGD_BOOL("optim", "scale_lr", optim.scale_lr);
    HSGD_INT("optim", "base_batch", optim.base_batch);
    HSGD_DBL("optim", "clip_norm", optim.clip_norm);
    HSGD_BOOL("staleness", "scaled_lr", staleness.scaled_lr);
    // The filter is off while the key is absent (tau_max = -1 inside); a
    // written value must be >= 0, and an off filter is not written.
    r["staleness"]["tau_max"] =
        Field{[](Config& c, const Where& w, const toml::node& n) {
                const int64_t v = as_int(w, n);
                if (v < 0) bad(w, n, "an integer >= 0 (leave the key out to keep the filter off)");
                c.staleness.tau_max = v;
              },
              [](const Config& c, toml::table& t) {
                if (c.staleness.tau_max >= 0) t.insert_or_assign("tau_max", c.staleness.tau_max);
              }};
    HSGD_BOOL("staleness", "dc_asgd", staleness.dc_asgd);
    HSGD_DBL("staleness", "dc_lambda", staleness.dc_lambda);
    HSGD_BOOL("staleness", "gap_aware", staleness.gap_aware);
    HSGD_DBL("stragglers", "fraction", stragglers.fraction);
    HSGD_DBL("stragglers", "sigma", stragglers.sigma);
    HSGD_STR("stragglers", "delay", stragglers.delay);
    HSGD_DBL("stragglers", "scale", stragglers.scale);
    HSGD_DBL("sim", "compute_time", sim.compute_time);
    HSGD_DBL("sim", "server_ns_per_param", sim.server_ns_per_param);
    HSGD_DBL("sim", "latency", sim.latency);
    HSGD_DBL("sim", "bandwidth", sim.bandwidth);
    HSGD_INT("sim", "threads", sim.threads);
    HSGD_DBL("stragglers", "slowdown", stragglers.slowdown);
    // [compress] (issue 14). Written only when a compressor is on, so a run
    // without compression has the config.toml and hash it had before.
    for (const char* key : {"push", "pull"}) {
      const bool push = std::string(key) == "push";
      r["compress"][key] = Field{
          [push](Config& c, const Where& w, const toml::node& n) {
            (push ? c.compress.push : c.compress.pull) =
                parse_compressor(as_string(w, n), w.str());
          },
          [push, key](const Config& c, toml::table& t) {
            if (c.compress.on()) {
              t.insert_or_assign(key, (push ? c.compress.push : c.compress.pull).name());
            }
          }};
    }
    r["compress"]["error_feedback"] =
        Field{[](Config& c, const Where& w, const toml::node& n) {
                if (auto b = n.value_exact<bool>()) {
                  c.compress.error_feedback = *b ? 1 : 0;
                } else if (n.value_exact<std::string>() == "auto") {
                  c.compress.error_feedback = -1;
                } else {
                  bad(w, n, "true, false or \"auto\"");
                }
              },
              [](const Config& c, toml::table& t) {
                if (!c.compress.on()) return;
                if (c.compress.error_feedback < 0) {
                  t.insert_or_assign("error_feedback", "auto");
                } else {
                  t.insert_or_assign("error_feedback", c.compress.error_feedback != 0);
                }
              }};
    auto compress_num = [&r](const char* key, auto member) {
      r["compress"][key] = Field{
          [member](Config& c, const Where& w, const toml::node& n) {
            using T = std::remove_reference_t<decltype(c.compress.*member)>;
            if constexpr (std::is_integral_v<T>) {
              c.compress.*member = as_int(w, n);
            } else {
              c.compress.*member = as_double(w, n);
            }
          },
          [member, key](const Config& c, toml::table& t) {
            if (c.compress.on()) t.insert_or_assign(key, c.compress.*member);
          }};
    };
    compress_num("min_bytes", &CompressOptions::min_bytes);
    compress_num("warmup", &CompressOptions::warmup);
    compress_num("sim_ns_per_param", &CompressOptions::sim_ns_per_param);
    // Membership and fault injection (issue 10). Written only when not the
    // default, so a fault-free config (and its hash) is unchanged.
    r["train"]["min_workers"] =
        Field{[](Config& c, const Where& w, const toml::node& n) {
                c.train.min_workers = static_cast<int>(as_int(w, n));
              },
              [](const Config& c, toml::table& t) {
                if (c.train.min_workers != 1) {
                  t.insert_or_assign("min_workers", c.train.min_workers);
                }
              }};
    for (const char* key : {"kill", "rejoin"}) {
      const bool kill = std::string(key) == "kill";
      r["faults"][key] = Field{
          [kill](Config& c, const Where& w, const toml::node& n) {
            (kill ? c.faults.kill : c.faults.rejoin) = as_fault_list(w, n);
          },
          [kill, key](const Config& c, toml::table& t) {
            const std::vector<FaultAt>& v = kill ? c.faults.kill : c.faults.rejoin;
            if (v.empty()) return;
            toml::array a;
            for (const FaultAt& f : v) a.push_back(to_string(f));
            t.insert_or_assign(key, a);
          }};
    }
    // Written only when not the default, so earlier configs keep their hash.
    r["train"]["diverge_factor"] =
        Field{[](Config& c, const Where& w, const toml::node& n) {
                c.train.diverge_factor = as_double(w, n);
              },
              [](const Config& c, toml::table& t) {
                if (c.train.diverge_factor != TrainConfig{}.diverge_factor) {
                  t.insert_or_assign("diverge_factor", c.train.diverge_factor);
                }
              }};
    r["faults"]["kill_rate"] =
        Field{[](Config& c, const Where& w, const toml::node& n) {
                c.faults.kill_rate = as_double(w, n);
              },
              [](const Config& c, toml::table& t) {
                if (c.faults.kill_rate != 0) t.insert_or_assign("kill_rate", c.faults.kill_rate);
              }};
    r["faults"]["exception_rate"] =
        Field{[](Config& c, const Where& w, const toml::node& n) {
                c.faults.exception_rate = as_double(w, n);
              },
              [](const Config& c, toml::table& t) {
                if (c.faults.exception_rate != 0) {
                  t.insert_or_assign("exception_rate", c.faults.exception_rate);
                }
              }};
    r["faults"]["rejoin_after"] =
        Field{[](Config& c, const Where& w, const toml::node& n) {
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
                if (c.faults.rejoin_after >= 0) {
                  t.insert_or_assign("rejoin_after", c.faults.rejoin_after);
                }
              }};
#undef HSGD_INT
#undef HSGD_DBL
#undef HSGD_STR
#undef HSGD_BOOL
    return m;
  }();
  return *f;
}

std::string known_keys(const std::string& section) {
  std::string s;
  for (const auto& [k, _] : fields().at(section)) s += (s.empty() ? "" : ", ") + k;
  return s;
}
std::string known_sections() {
  std::string s;
  for (const auto& [k, _] : fields()) s += (s.empty() ? "" : ", ") + k;
  return s;
}

void set_key(Config& c, const std::string& origin, const std::string& dotted,
             const toml::node& value) {
  const size_t dot = dotted.find('.');
  if (dot == std::string::npos) {
    throw InputError((origin.empty() ? "" : origin + ": ") + "'" + dotted +
                     "': expected section.key (sections: " + known_sections() + ")");
  }
  const std::string section = dotted.substr(0, dot);
  const std::string key = dotted.substr(dot + 1);
  auto s = fields().find(section);
  if (s == fields().end()) {
    throw InputError((origin.empty() ? "" : origin + ": ") + "unknown section '" + section +
                     "' (expected one of " + known_sections() + ")");
  }
  auto f = s->second.find(key);
  if (f == s->second.end()) {
    throw InputError((origin.empty() ? "" : origin + ": ") + "unknown key '" + dotted +
                     "' (keys of [" + section + "]: " + known_keys(section) + ")");
  }
  f->second.set(c, Where{origin, dotted}, value);
}

// "kasync:4" -> kind kasync, k 4.
void resolve_policy_name(Config& c) {
  const std::string& n = c.policy_name;
  const size_t colon = n.find(':');
  c.policy.kind = n.substr(0, colon);
  if (colon != std::string::npos) {
    const std::string k = n.substr(colon + 1);
    try {
      size_t used = 0;
      const long v = std::stol(k, &used);
      if (used != k.size()) throw std::invalid_argument(k);
      (c.policy.kind == "ssp" ? c.policy.s : c.policy.k) = static_cast<int>(v);
    } catch (const std::exception&) {
      throw InputError("policy.name = '" + n + "': expected an integer K after ':'");
    }
  }
  if ((c.policy.kind == "kasync" || c.policy.kind == "kbatch") && c.policy.k == 0) {
    throw InputError("policy.name = '" + n + "': " + c.policy.kind + " needs K, as " +
                     c.policy.kind + ":K or policy.k");
  }
  if (c.policy.kind == "local" && c.policy.k < 1) {
    throw InputError("policy.name = '" + n + "': local needs H >= 1 local steps, as local:H");
  }
}

std::string num(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

// `what` with every control byte (a newline in a quoted TOML string, say)
// written as \xNN: an error is one line.
std::string one_line(const std::string& what) {
  std::string out;
  for (char ch : what) {
    const auto u = static_cast<unsigned char>(ch);
    if (u < 0x20 || u == 0x7f) {
      static const char* kHex = "0123456789abcdef";
      out += "\\x";
      out += kHex[u >> 4];
      out += kHex[u & 15];
    } else {
      out += ch;
    }
  }
  return out;
}

// The text of a config file, or InputError naming the file and what was
// wrong: a directory, unreadable, empty, or binary.
std::string read_config_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    throw InputError(path + ": expected a TOML config file, got a directory");
  }
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) throw InputError(path + ": cannot open (" + std::strerror(errno) + ")");
  std::string text;
  char buf[1 << 14];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, f.get())) > 0;) text.append(buf, n);
  if (std::ferror(f.get())) throw InputError(path + ": cannot read (" + std::strerror(errno) + ")");
  return text;
}

// Where toml++ 3.3 must not see a non-ASCII byte. Its whitespace test
// (is_non_ascii_horizontal_whitespace) reaches __builtin_unreachable for
// U+00A1..U+0499 and U+FB26..U+FEFE, and the parser runs it on characters
// of keys, of values it scans for an error message, of multi-line strings
// and between tokens: undefined behaviour on a config holding "é" there
// (found three ways by the config fuzz target; predicting toml++'s tokens in
// general proved fragile). So a line may hold non-ASCII text only in two
// shapes whose tokens are certain: a comment line (`# ...`), and
// `key = "value"` or `key = 'value'` with a bare ASCII key, the string closed
// on that line and followed only by blanks and an optional comment; the
// non-ASCII bytes inside the string or the comment. Elsewhere non-ASCII text
// is invalid TOML or unneeded by hsgd's keys. Returns the offset of the
// first refused byte, or npos.
size_t unsafe_non_ascii(std::string_view s) {
  auto high = [](char ch) { return static_cast<unsigned char>(ch) >= 0x80; };
  auto blank = [](char ch) { return ch == ' ' || ch == '\t'; };
  auto bare = [](char ch) {
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           ch == '_' || ch == '-';
  };
  for (size_t start = 0; start < s.size();) {
    const size_t nl = s.find('\n', start);
    const size_t end = nl == std::string_view::npos ? s.size() : nl;
    const std::string_view line = s.substr(start, end - start);
    const size_t first_high = std::find_if(line.begin(), line.end(), high) - line.begin();
    if (first_high < line.size()) {
      size_t i = 0;
      while (i < line.size() && blank(line[i])) ++i;
      bool safe = i < line.size() && line[i] == '#';
      if (!safe) {
        const size_t key = i;
        while (i < line.size() && bare(line[i])) ++i;
        const bool has_key = i > key;
        while (i < line.size() && blank(line[i])) ++i;
        const bool eq = has_key && i < line.size() && line[i] == '=';
        if (eq) ++i;
        while (i < line.size() && blank(line[i])) ++i;
        const char q = i < line.size() ? line[i] : '\0';
        if (eq && (q == '"' || q == '\'') && !(i + 1 < line.size() && line[i + 1] == q)) {
          size_t j = i + 1;
          while (j < line.size() && line[j] != q) j += (q == '"' && line[j] == '\\') ? 2 : 1;
          if (j < line.size()) {  // closed on this line
            ++j;
            while (j < line.size() && blank(line[j])) ++j;
            safe = j == line.size() || line[j] == '#' || line[j] == '\r';
          }
        }
      }
      if (!safe) return start + first_high;
    }
    start = end + 1;
  }
  return std::string_view::npos;
}

Config parse_config_unchecked(const std::string& path, std::string_view file_text,
                              const std::vector<Override>& overrides) {
  Config c;
  if (!path.empty()) {
    if (file_text.find_first_not_of(" \t\r\n") == std::string_view::npos) {
      throw InputError(path + ": expected a TOML config, got an empty file");
    }
    if (const size_t nul = file_text.find('\0'); nul != std::string_view::npos) {
      throw InputError(path + ": expected a TOML config (text), got binary data (a zero byte at " +
                       "offset " + std::to_string(nul) + ")");
    }
    if (const size_t at = unsafe_non_ascii(file_text); at != std::string_view::npos) {
      const std::string_view before = file_text.substr(0, at);
      const size_t line = static_cast<size_t>(std::count(before.begin(), before.end(), '\n')) + 1;
      const size_t nl = before.rfind('\n');
      const size_t column = at - (nl == std::string_view::npos ? 0 : nl + 1) + 1;
      throw InputError(path + ":" + std::to_string(line) + ":" + std::to_string(column) +
                       ": expected a TOML config: non-ASCII text is allowed only in comments and "
                       "single-line string values");
    }
    toml::table t;
    try {
      t = toml::parse(file_text, path);
    } catch (const toml::parse_error& e) {
      const auto& src = e.source();
      throw InputError(path + ":" + std::to_string(src.begin.line) + ":" +
                       std::to_string(src.begin.column) +
                       ": expected a TOML config: " + std::string(e.description()));
    }
    for (const auto& [section, node] : t) {
      const toml::table* st = node.as_table();
      if (!st) {
        throw InputError(path + ": '" + std::string(section.str()) +
                         "' is not a [section] (sections: " + known_sections() + ")");
      }
      for (const auto& [key, value] : *st) {
        set_key(c, path, std::string(section.str()) + "." + std::string(key.str()), value);
      }
    }
  }
  for (const auto& [key, text] : overrides) {
    toml::table parsed;
    std::string doc = "v = ";
    doc += text;
    // Text toml++ must not see (see unsafe_non_ascii) is taken as a string.
    bool ok = unsafe_non_ascii(doc) == std::string_view::npos;
    try {
      if (ok) parsed = toml::parse(doc);
    } catch (const toml::parse_error&) {
      ok = false;
    }
    if (ok) {
      set_key(c, "--set", key, *parsed.get("v"));
    } else {
      set_key(c, "--set", key, toml::value<std::string>(text));
    }
  }
  resolve_policy_name(c);
  validate(c);
  return c;
}

}  // namespace

Config parse_config(const std::string& path, std::string_view text,
                    const std::vector<Override>& overrides) {
  try {
    return parse_config_unchecked(path, text, overrides);
  } catch (const InputError& e) {
    throw InputError(one_line(e.what()));
  }
}

Config load_config(const std::string& path, const std::vector<Override>& overrides) {
  return parse_config(path, path.empty() ? std::string() : read_config_file(path), overrides);
}

namespace {

void validate_compress(const Config& c) {
  const CompressOptions& z = c.compress;
  if (z.min_bytes < 0) {
    throw InputError("compress.min_bytes = " + std::to_string(z.min_bytes) + ": expected >= 0");
  }
  if (z.warmup < 0) {
    throw InputError("compress.warmup = " + std::to_string(z.warmup) +
                     ": expected updates >= 0");
  }
  if (!(z.sim_ns_per_param >= 0 || z.sim_ns_per_param == -1) ||
      !std::isfinite(z.sim_ns_per_param)) {
    throw InputError("compress.sim_ns_per_param = " + num(z.sim_ns_per_param) +
                     ": expected nanoseconds >= 0, or -1 to calibrate");
  }
  // randomk on the pull path refreshes a blind R of a worker's copy per
  // pull: each coordinate is on average 1/R pulls old (docs/results.md,
  // Compression: 0.69 against 0.84 uncompressed at R = 0.01, 0.74 at 0.1).
  if (z.pull.kind == CompressorSpec::Kind::kRandomk) {
    throw InputError("compress.pull = '" + z.pull.name() +
                     "': randomk is for the push path only (on the pull path each coordinate of "
                     "a worker's copy would be 1/R pulls old on average); expected topk:R, which "
                     "sends the coordinates that changed most");
  }
  if (z.on() && c.policy.kind == "hogwild") {
    const char* key = z.push.none() ? "compress.pull" : "compress.push";
    throw InputError(std::string(key) + " = '" +
                     (z.push.none() ? z.pull.name() : z.push.name()) +
                     "': policy hogwild has no server to compress for; expected none");
  }
}

}  // namespace

void validate(const Config& c) {
  const TrainConfig& t = c.train;
  if (t.workers < 1)
    throw InputError("train.workers = " + std::to_string(t.workers) + ": expected >= 1");
  if (t.workers > 4096) {
    throw InputError("train.workers = " + std::to_string(t.workers) + ": expected <= 4096");
  }
  if (t.batch < 1) throw InputError("train.batch = " + std::to_string(t.batch) + ": expected >= 1");
  if (!(t.budget >= 0) || !std::isfinite(t.budget)) {
    throw InputError("train.budget = " + num(t.budget) + ": expected seconds >= 0");
  }
  if (!(t.epochs >= 0) || !std::isfinite(t.epochs)) {
    throw InputError("train.epochs = " + num(t.epochs) + ": expected >= 0");
  }
  if (t.budget == 0 && t.epochs == 0) {
    throw InputError(
        "train.budget and train.epochs are both 0: give a time budget (--budget) or a number of "
        "epochs (--epochs)");
  }
  if (!(t.eval_every > 0)) {
    throw InputError("train.eval_every = " + num(t.eval_every) + ": expected seconds > 0");
  }
  if (t.eval_samples < 0) {
    throw InputError("train.eval_samples = " + std::to_string(t.eval_samples) + ": expected >= 0");
  }
  if (t.runtime != "threads" && t.runtime != "sim" && t.runtime != "mpi") {
    throw InputError("train.runtime = '" + t.runtime + "': expected threads, sim or mpi");
  }
  if (t.servers < 1) {
    throw InputError("train.servers = " + std::to_string(t.servers) + ": expected >= 1");
  }
  if (t.servers != 1 && t.runtime != "mpi") {
    throw InputError("train.servers = " + std::to_string(t.servers) +
                     ": only the mpi runtime has server ranks; train.runtime = '" + t.runtime +
                     "' runs one server");
  }
  if (!(c.mpi.timeout > 0) || !std::isfinite(c.mpi.timeout)) {
    throw InputError("mpi.timeout = " + num(c.mpi.timeout) + ": expected seconds > 0");
  }
  if (t.out.empty()) throw InputError("train.out: expected a directory name");
  if (!(t.checkpoint_every >= 0) || !std::isfinite(t.checkpoint_every)) {
    throw InputError("train.checkpoint_every = " + num(t.checkpoint_every) +
                     ": expected seconds >= 0 (0 = off)");
  }
  if (t.max_nonfinite < 1) {
    throw InputError("train.max_nonfinite = " + std::to_string(t.max_nonfinite) +
                     ": expected >= 1");
  }
  if (!(t.diverge_factor == 0 || t.diverge_factor > 1) || !std::isfinite(t.diverge_factor)) {
    throw InputError("train.diverge_factor = " + num(t.diverge_factor) +
                     ": expected a factor > 1 (0 = off)");
  }
  if (c.checkpoint.keep < 1) {
    throw InputError("checkpoint.keep = " + std::to_string(c.checkpoint.keep) + ": expected >= 1");
  }
  if (!(c.optim.clip_norm >= 0) || !std::isfinite(c.optim.clip_norm)) {
    throw InputError("optim.clip_norm = " + num(c.optim.clip_norm) + ": expected >= 0 (0 = off)");
  }
  if (!(c.data.test_fraction > 0 && c.data.test_fraction < 1)) {
    throw InputError("data.test_fraction = " + num(c.data.test_fraction) + ": expected in (0, 1)");
  }
  const SyntheticOptions& s = c.data.synthetic;
  if (s.samples < 2) throw InputError("data.synthetic_samples: expected >= 2");
  if (s.features < 1) throw InputError("data.synthetic_features: expected >= 1");
  if (s.classes < 2) throw InputError("data.synthetic_classes: expected >= 2");
  if (!(s.class_sep > 0)) throw InputError("data.synthetic_separation: expected > 0");
  if (!(s.noise >= 0)) throw InputError("data.synthetic_noise: expected >= 0");
  const CtrOptions& ctr = c.data.synthetic.ctr;
  if (ctr.samples < 2) throw InputError("data.ctr_samples: expected >= 2");
  if (ctr.dense < 0) throw InputError("data.ctr_dense: expected >= 0");
  if (ctr.fields < 0) throw InputError("data.ctr_fields: expected >= 0");
  if (!(ctr.zipf >= 0) || !std::isfinite(ctr.zipf)) {
    throw InputError("data.zipf: expected a finite number >= 0");
  }
  if (ctr.rows < 1 || ctr.rows > INT32_MAX) {
    throw InputError("model.table_rows: expected in [1, 2^31 - 1], got " +
                     std::to_string(ctr.rows));
  }
  if (c.model.embedding_dim < 1) {
    throw InputError("model.embedding_dim: expected >= 1, got " +
                     std::to_string(c.model.embedding_dim));
  }
  if (c.model.sparse) {
    if (c.policy.kind == "local" || c.policy.kind == "hogwild") {
      throw InputError("model.sparse = true: not supported with policy " + c.policy.kind +
                       " (workers push model deltas or write shared memory)");
    }
    if (c.sampling.kind != "uniform") {
      throw InputError("model.sparse = true: needs sampling.kind = uniform");
    }
    if (c.compress.on()) {
      throw InputError(
          "model.sparse = true: row-sparse pushes are not compressed; expected compress.push and "
          "compress.pull = 'none'");
    }
    check_sparse_supported(c.optim, c.staleness);
  }
  for (int64_t h : c.model.top_hidden) {
    if (h < 1) {
      throw InputError("model.top_hidden: expected widths >= 1, got " + std::to_string(h));
    }
  }
  for (int64_t h : c.model.hidden) {
    if (h < 1) throw InputError("model.hidden: expected widths >= 1, got " + std::to_string(h));
  }
  validate(c.faults, t.workers, t.min_workers);
  if (c.faults.any() && (t.runtime == "mpi" || c.policy.kind == "hogwild")) {
    throw InputError(std::string("[faults]: fault injection runs on the sim and threads "
                                 "runtimes, ") +
                     (t.runtime == "mpi" ? "not on mpi (README: Workers that leave and rejoin)"
                                         : "not with policy hogwild (it has no server)"));
  }
  validate(c.data.partition);
  validate(c.sampling);
  validate(c.optim, c.lr_schedule);
  validate(c.staleness);
  make_policy(c.policy, t.workers, c.optim.lr);  // throws for bad policy keys
  const ScheduleOptions& sch = c.policy.schedule;
  if (c.policy.kind == "hybrid" && sch.kind != "adaptive" && sch.clock != ScheduleClock::kUpdates &&
      sch.step == 0 && (sch.kind == "step" || sch.ramp == 0)) {
    // The default step is 3/lr updates; in seconds or epochs it would keep K
    // near K0 for the whole run.
    throw InputError(std::string("policy.clock = '") + to_string(sch.clock) + "': the hybrid " +
                     sch.kind + " schedule needs an explicit " +
                     (sch.kind == "step" ? "policy.step" : "policy.step or policy.ramp") +
                     " in that unit (the default 3/lr is in updates)");
  }
  if (c.policy.kind == "hogwild") {
    if (t.runtime != "threads") {
      throw InputError(
          "policy.name = 'hogwild': runs on the threads runtime only (workers write "
          "into shared memory); train.runtime = '" +
          t.runtime + "' cannot run it");
    }
    if (c.optim.kind != "sgd") {
      throw InputError("optim.kind = '" + c.optim.kind +
                       "': hogwild workers apply plain SGD; expected sgd");
    }
  }
  const StragglerConfig& g = c.stragglers;
  if (!(g.fraction >= 0 && g.fraction <= 1)) {
    throw InputError("stragglers.fraction = " + num(g.fraction) + ": expected in [0, 1]");
  }
  if (!(g.sigma >= 0) || !std::isfinite(g.sigma)) {
    throw InputError("stragglers.sigma = " + num(g.sigma) + ": expected seconds >= 0");
  }
  if (g.delay != "none" && g.delay != "halfnormal" && g.delay != "exponential" &&
      g.delay != "lognormal") {
    throw InputError("stragglers.delay = '" + g.delay +
                     "': expected none, halfnormal, exponential or lognormal");
  }
  if (!(g.scale >= 0) || !std::isfinite(g.scale)) {
    throw InputError("stragglers.scale = " + num(g.scale) + ": expected seconds >= 0");
  }
  if ((g.delay == "exponential" || g.delay == "lognormal") && g.fraction > 0 && g.scale == 0) {
    throw InputError("stragglers.scale = 0: the " + g.delay +
                     " delay needs a scale in seconds > 0");
  }
  const SimConfig& m = c.sim;
  if (!(m.compute_time >= 0) || !std::isfinite(m.compute_time)) {
    throw InputError("sim.compute_time = " + num(m.compute_time) +
                     ": expected seconds >= 0 (0 = calibrate)");
  }
  if (!(m.server_ns_per_param >= 0 || m.server_ns_per_param == -1) ||
      !std::isfinite(m.server_ns_per_param)) {
    throw InputError("sim.server_ns_per_param = " + num(m.server_ns_per_param) +
                     ": expected nanoseconds >= 0, or -1 to calibrate");
  }
  if (!(m.latency >= 0) || !std::isfinite(m.latency)) {
    throw InputError("sim.latency = " + num(m.latency) + ": expected seconds >= 0");
  }
  if (!(m.bandwidth > 0) || !std::isfinite(m.bandwidth)) {
    throw InputError("sim.bandwidth = " + num(m.bandwidth) + ": expected bytes per second > 0");
  }
  if (m.threads < 0 || m.threads > 1024) {
    throw InputError("sim.threads = " + std::to_string(m.threads) +
                     ": expected 0 (every core) to 1024");
  }
  if (!(g.slowdown >= 1) || !std::isfinite(g.slowdown)) {
    throw InputError("stragglers.slowdown = " + num(g.slowdown) + ": expected a factor >= 1");
  }
  validate_compress(c);
}

std::string toml_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

std::string config_hash(const Config& c) {
  Config n = c;
  n.train.budget = 0;
  n.train.epochs = 0;
  n.train.checkpoint_every = 0;
  n.train.out.assign(1, '-');  // not = "-": GCC 12 -Wrestrict false positive
  n.train.workers = 1;
  n.checkpoint.keep = 1;
  n.sim.threads = 0;  // the simulator's output does not depend on it
  const std::string text = to_toml(n);
  char buf[16];
  std::snprintf(buf, sizeof buf, "%08x", crc32c(text));
  return buf;
}

bool resumable_key(const std::string& k) {
  return k == "train.budget" || k == "train.epochs" || k == "train.checkpoint_every" ||
         k == "checkpoint.keep" || k == "train.workers" || k == "sim.threads";
}

std::string to_toml(const Config& c) {
  toml::table root;
  for (const auto& [section, keys] : fields()) {
    toml::table t;
    for (const auto& [key, field] : keys) field.put(c, t);
    if (!t.empty()) root.insert_or_assign(section, t);  // [faults], [compress] only when set
  }
  std::ostringstream os;
  os << root << "\n";
  return os.str();
}

}  // namespace hsgd
