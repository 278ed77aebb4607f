// Moot settings and the effective config, from the declaration's moot rules
// (keys.cc).
#include "hsgd/config/effective.h"

#include "hsgd/config/keys.h"

namespace hsgd {

namespace {

// Why key k is moot in c ("" when it is read or left at its default).
std::string moot_reason(const config_internal::Key& k, const Config& c) {
  if (k.is_default(c)) return "";
  for (const config_internal::Moot& m : k.moot) {
    if (std::string r = m.reason(c); !r.empty()) return r;
  }
  return "";
}

}  // namespace

std::vector<std::string> moot_settings(const Config& c) {
  std::vector<std::string> out;
  for (const config_internal::Key& k : config_internal::keys()) {
    if (std::string r = moot_reason(k, c); !r.empty()) {
      out.push_back(k.dotted() + " = " + k.show(c) + " has no effect: " + r);
    }
  }
  return out;
}

Config effective_config(const Config& c) {
  const Config defaults;
  Config e = c;
  for (const config_internal::Key& k : config_internal::keys()) {
    if (!moot_reason(k, c).empty()) k.copy(e, defaults);
  }
  return e;
}

std::vector<KeyInfo> config_keys() {
  const Config defaults;
  std::vector<KeyInfo> out;
  for (const config_internal::Key& k : config_internal::keys()) {
    out.push_back({k.dotted(), k.type, k.doc, k.show(defaults)});
  }
  return out;
}

}  // namespace hsgd
