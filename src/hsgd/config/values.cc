#include "hsgd/config/values.h"

#include <cmath>
#include <sstream>
#include <stdexcept>

#include "hsgd/core/error.h"

namespace hsgd::config_internal {

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

std::string num(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

void bad(const Where& w, const toml::node& n, const std::string& expected) {
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
  if (auto v = n.value_exact<std::string>()) {
    // A control character (a newline, say, from "\n") is in no name or path
    // hsgd reads, and would make config.toml write a multi-line string; three
    // quotes in a row in config.toml would keep its later non-ASCII text
    // from being read back (parse.cc, unsafe_non_ascii).
    for (char ch : *v) {
      const auto u = static_cast<unsigned char>(ch);
      if ((u < 0x20 && ch != '\t') || u == 0x7f) {
        bad(w, n, "text without control characters (a newline, a carriage return, ...)");
      }
    }
    if (v->find("\"\"\"") != std::string::npos || v->find("'''") != std::string::npos) {
      bad(w, n, "text without three quotes in a row");
    }
    return *v;
  }
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

std::vector<FaultAt> as_fault_list(const Where& w, const toml::node& n) {
  std::vector<FaultAt> out;
  auto add = [&](const std::string& spec) { out.push_back(parse_fault_at(w.str(), spec)); };
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

}  // namespace hsgd::config_internal
