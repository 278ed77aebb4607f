// One TOML value read as the type a config key wants; a wrong type throws
// InputError "<origin>: <key> = <value>: expected <type>". Internal to
// src/hsgd/config/ (keys.cc's setters).
#pragma once
#include <toml++/toml.h>

#include <cstdint>
#include <string>
#include <vector>

#include "hsgd/config/keys.h"
#include "hsgd/core/faults.h"

namespace hsgd::config_internal {

// The value as a message shows it: 'text', 12, 0.5, a table.
std::string describe(const toml::node& n);

int64_t as_int(const Where& w, const toml::node& n);
double as_double(const Where& w, const toml::node& n);
bool as_bool(const Where& w, const toml::node& n);
// A string; an integer is taken as its digits (policy.name = 4 is "4").
std::string as_string(const Where& w, const toml::node& n);
// An array of integers, one integer, or "256,128" (a --set value).
std::vector<int64_t> as_int_list(const Where& w, const toml::node& n);
// faults.kill / faults.rejoin: an array of "worker:W@Ts" strings, or one
// string (a --set value: comma- or semicolon-separated).
std::vector<FaultAt> as_fault_list(const Where& w, const toml::node& n);

}  // namespace hsgd::config_internal
