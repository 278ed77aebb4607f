// The one declaration of every config key (keys.cc, written with the
// builder of decl.h): name, type, default,
// allowed values, doc line, whether a resume may change it, whether it is
// part of a run's identity, when config.toml writes it, which cross-section
// settings make it moot. The parser (parse.cc), the single-key checks
// (validate.cc), the writer and the hashes (write.cc), the moot-setting
// warnings (effective.cc) and `hsgd config --reference` (reference.cc) all
// read this table; nothing else lists keys.
//
// Internal to src/hsgd/config/ (it includes toml++); the public entry points
// are in config.h and effective.h.
#pragma once
#include <toml++/toml.h>

#include <functional>
#include <string>
#include <vector>

#include "hsgd/config/config.h"

namespace hsgd::config_internal {

// Where a value came from, for messages: "job.toml: train.workers" or
// "--set train.workers".
struct Where {
  std::string origin;
  std::string key;
  std::string str() const { return origin.empty() ? key : origin + ": " + key; }
};

// `key = <value>: expected <expected>`, one line.
[[noreturn]] void bad(const Where& w, const toml::node& n, const std::string& expected);

// A single-key range: the value is accepted when `ok` holds; otherwise
// "<key> = <value>: expected <expected>". `applies` (optional) limits the
// check to configs where the key is read (optim.lr_step_size under the step
// lr schedule, say).
struct Check {
  std::function<bool(const Config&)> ok;
  std::string expected;
  std::function<bool(const Config&)> applies;
  // Replaces "expected <expected>" in the message when not empty.
  std::string message;
};

// A key made moot by the rest of the config: `reason` returns "" when the key
// is read, else what makes it moot ("stragglers.fraction = 0"); `when` says
// the same for the reference ("stragglers.fraction = 0").
struct Moot {
  std::string when;
  std::function<std::string(const Config&)> reason;
};

enum class Written {
  kAlways,
  kNotDefault,    // only when not the default, so older configs keep their hash
  kCompressorOn,  // only when compress.push or compress.pull is not none
  kWhen,          // only when Key::written_when(config) is true
};

struct Key {
  std::string section, name;  // "train", "workers"
  std::string type;           // for the reference: "integer", "number", ...
  std::string doc;            // one line
  // Parses a TOML value into the config (throws InputError naming `w`).
  std::function<void(Config&, const Where&, const toml::node&)> set;
  // Writes the value as `name = value` into a table (unconditionally).
  std::function<void(const Config&, toml::table&)> put;
  // The value equals Config{}'s.
  std::function<bool(const Config&)> is_default;
  // Copies the value of `from` into `to`.
  std::function<void(Config& to, const Config& from)> copy;
  // Formats the value for a message: 0.25, 'halfnormal', [64, 32].
  std::function<std::string(const Config&)> show;
  std::vector<Check> checks;
  std::vector<Moot> moot;
  Written written = Written::kAlways;
  std::function<bool(const Config&)> written_when;  // Written::kWhen
  // A resume may change it (`hsgd train --resume DIR --set key=...`).
  bool resumable = false;
  // Not part of a run's identity: config_hash writes `hash_as` (TOML text)
  // in its place. Empty: part of the identity.
  std::string hash_as;
  // Part of the identity only when it holds (empty: always): a new key
  // whose value before it existed stays out of older configs' hashes,
  // while config.toml still writes it so a resume reads it back.
  std::function<bool(const Config&)> hashed_when;
  // The simulator's calibrated costs depend on it (hsgd sweep's costs.txt).
  bool calibration = false;
  // A note for the reference (e.g. "absent = off"); optional.
  std::string note;

  std::string dotted() const { return section + "." + name; }
};

struct Section {
  std::string name;
  std::string doc;
};

// Every key, in declaration order (sections grouped).
const std::vector<Key>& keys();
const std::vector<Section>& sections();
// The key "section.name", or nullptr.
const Key* find_key(const std::string& section, const std::string& name);

// A rule across keys (validate.cc): `refuse` returns "" when the config is
// fine, else the one-line message. `rule` says what is refused, for the
// reference.
struct Refusal {
  std::string rule;
  std::function<std::string(const Config&)> refuse;
};
const std::vector<Refusal>& refusals();

// The message of a failed single-key check: "<key> = <value>: expected ...".
std::string check_message(const Key& k, const Check& check, const Config& c);

// Formatting shared by messages: a number as %g would, a string quoted.
std::string num(double v);

}  // namespace hsgd::config_internal
