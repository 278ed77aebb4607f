// Writing: the resolved config as TOML (config.toml), the run's identity
// hash, and the digests of hsgd sweep, all from the one declaration
// (keys.cc): which keys are written, when, and which are not identity.
#include <toml++/toml.h>

#include <cstdio>
#include <sstream>

#include "hsgd/config/config.h"
#include "hsgd/config/effective.h"
#include "hsgd/config/keys.h"
#include "hsgd/core/error.h"
#include "hsgd/core/state.h"

namespace hsgd {
namespace {

using config_internal::Key;
using config_internal::Written;

bool written(const Key& k, const Config& c) {
  switch (k.written) {
    case Written::kAlways:
      return true;
    case Written::kNotDefault:
      return !k.is_default(c);
    case Written::kCompressorOn:
      return c.compress.on();
    case Written::kWhen:
      return k.written_when(c);
  }
  return true;
}

// The keys `pick` selects, as TOML (sections and keys sorted: toml++'s
// tables are ordered maps).
template <class Pick>
std::string toml_of(const Config& c, Pick pick) {
  toml::table root;
  for (const Key& k : config_internal::keys()) {
    if (!pick(k)) continue;
    toml::table* t = root[k.section].as_table();
    if (!t) t = root.insert_or_assign(k.section, toml::table{}).first->second.as_table();
    k.put(c, *t);
  }
  std::ostringstream os;
  os << root << "\n";
  return os.str();
}

std::string crc_hex(const std::string& text) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%08x", crc32c(text));
  return buf;
}

}  // namespace

std::string toml_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

std::string to_toml(const Config& c) {
  return toml_of(c, [&c](const Key& k) { return written(k, c); });
}

std::string config_hash(const Config& c) {
  Config n = c;
  for (const Key& k : config_internal::keys()) {
    if (k.hash_as.empty()) continue;
    const toml::table t = toml::parse("v = " + k.hash_as);
    k.set(n, config_internal::Where{"config_hash", k.dotted()}, *t.get("v"));
  }
  return crc_hex(toml_of(
      n, [&n](const Key& k) { return written(k, n) && (!k.hashed_when || k.hashed_when(n)); }));
}

bool resumable_key(const std::string& dotted) {
  for (const Key& k : config_internal::keys()) {
    if (k.resumable && k.dotted() == dotted) return true;
  }
  return false;
}

std::string resumable_keys() {
  std::string s;
  for (const Key& k : config_internal::keys()) {
    if (k.resumable) s += (s.empty() ? "" : ", ") + k.dotted();
  }
  return s;
}

std::string config_digest(const Config& c) {
  return crc_hex(toml_of(c, [](const Key&) { return true; }));
}

std::string calibration_digest(const Config& c) {
  return crc_hex(toml_of(c, [](const Key& k) { return k.calibration; }));
}

}  // namespace hsgd
