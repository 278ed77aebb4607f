// What a config means, as distinct from how it was written: the settings the
// rest of the config makes moot, the config with them reset, and digests of
// the whole resolved config. All from the one declaration of the keys
// (config/keys.cc); config_reference_markdown() prints that declaration.
#pragma once
#include <string>
#include <vector>

#include "hsgd/config/config.h"

namespace hsgd {

// One line per key set to a non-default value that the rest of the config
// makes moot, in declaration order, e.g.
//   "stragglers.sigma = 0.25 has no effect: stragglers.fraction = 0".
// The CLI prints each as "hsgd: warning: <line>" on stderr.
std::vector<std::string> moot_settings(const Config& c);

// `c` with every moot key (moot_settings) reset to its default: two configs
// that train alike have equal effective configs (hsgd sweep refuses an axis
// whose values do not change it).
Config effective_config(const Config& c);

// 8 hex digits (CRC-32C) of every key of the resolved config, each written
// whatever its config.toml rule: a run is the same run only if this is
// equal (hsgd sweep's done-marker). Unlike config_hash it covers the keys a
// resume may change (budget, epochs, workers, ...).
std::string config_digest(const Config& c);

// The same over the keys the simulator's calibrated costs depend on (data,
// model, batch, optimizer, compression, the costs given): hsgd sweep's
// costs.txt holds it and is recalibrated when it differs.
std::string calibration_digest(const Config& c);

// "train.workers, train.budget, ...": the keys `hsgd train --resume` accepts
// (resumable_key), in declaration order.
std::string resumable_keys();

// The config reference in markdown (`hsgd config --reference`, committed as
// docs/config-reference.md): every section and key with its type, default,
// allowed values, doc line, flags and when it is moot, then the refused
// combinations.
std::string config_reference_markdown();

// Every config key, from its declaration (keys.cc), in declaration order:
// what `--set` and the Python module's set= take.
struct KeyInfo {
  std::string key;            // "train.workers"
  std::string type;           // "integer", "number", ...
  std::string doc;            // one line
  std::string default_value;  // as messages show it: 4, 'halfnormal', [128]
};
std::vector<KeyInfo> config_keys();

}  // namespace hsgd
