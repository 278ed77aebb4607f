// The builder of a key's declaration (keys.cc): a typed Key from the Config
// member it reads and writes, with chained checks, moot rules and flags.
//   add(int_key("train", "workers", HSGD_REF(train.workers), "doc")
//           .check(at_least(1), ">= 1")
//           .resumable());
// Internal to keys.cc.
#pragma once
#include <toml++/toml.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "hsgd/config/keys.h"
#include "hsgd/config/values.h"

namespace hsgd::config_internal::decl {

// The member a key reads and writes, for a Config or a const Config.
#define HSGD_REF(member) \
  [](auto& c) -> auto& { return c.member; }

inline const Config& defaults() {
  static const Config d;
  return d;
}

inline std::string quoted(const std::string& s) { return "'" + s + "'"; }

// The value `put` writes, as TOML text (`name = value` without `name = `).
inline std::string written_text(const std::function<void(const Config&, toml::table&)>& put,
                                const Config& c) {
  toml::table t;
  put(c, t);
  std::ostringstream os;
  os << t;
  std::string s = os.str();
  const size_t eq = s.find(" = ");
  return eq == std::string::npos ? s : s.substr(eq + 3);
}

// The builder of one Key; R is the member accessor (HSGD_REF).
template <class R>
class Decl {
 public:
  using T = std::remove_cvref_t<decltype(std::declval<R>()(std::declval<Config&>()))>;

  Decl(const char* section, const char* name, R ref, std::string type, std::string doc)
      : ref_(ref) {
    k_.section = section;
    k_.name = name;
    k_.type = std::move(type);
    k_.doc = std::move(doc);
    k_.copy = [ref](Config& to, const Config& from) { ref(to) = ref(from); };
    if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
      k_.set = [ref](Config& c, const Where& w, const toml::node& n) {
        ref(c) = as_int_list(w, n);
      };
      k_.put = [ref, name](const Config& c, toml::table& t) {
        toml::array a;
        for (int64_t v : ref(c)) a.push_back(v);
        t.insert_or_assign(name, a);
      };
      k_.show = [ref](const Config& c) {
        std::string s;
        for (int64_t v : ref(c)) s += (s.empty() ? "" : ", ") + std::to_string(v);
        return "[" + s + "]";
      };
    } else if constexpr (std::is_same_v<T, bool>) {
      k_.set = [ref](Config& c, const Where& w, const toml::node& n) { ref(c) = as_bool(w, n); };
      k_.put = [ref, name](const Config& c, toml::table& t) { t.insert_or_assign(name, ref(c)); };
      k_.show = [ref](const Config& c) { return std::string(ref(c) ? "true" : "false"); };
    } else if constexpr (std::is_integral_v<T>) {
      k_.set = [ref](Config& c, const Where& w, const toml::node& n) {
        ref(c) = static_cast<T>(as_int(w, n));
      };
      k_.put = [ref, name](const Config& c, toml::table& t) {
        t.insert_or_assign(name, static_cast<int64_t>(ref(c)));
      };
      k_.show = [ref](const Config& c) { return std::to_string(ref(c)); };
    } else if constexpr (std::is_floating_point_v<T>) {
      k_.set = [ref](Config& c, const Where& w, const toml::node& n) { ref(c) = as_double(w, n); };
      k_.put = [ref, name](const Config& c, toml::table& t) { t.insert_or_assign(name, ref(c)); };
      k_.show = [ref](const Config& c) { return num(ref(c)); };
    } else if constexpr (std::is_same_v<T, std::string>) {
      k_.set = [ref](Config& c, const Where& w, const toml::node& n) { ref(c) = as_string(w, n); };
      k_.put = [ref, name](const Config& c, toml::table& t) { t.insert_or_assign(name, ref(c)); };
      k_.show = [ref](const Config& c) { return quoted(ref(c)); };
    }
    if constexpr (std::is_arithmetic_v<T> || std::is_enum_v<T> || std::is_same_v<T, std::string> ||
                  std::is_same_v<T, std::vector<int64_t>>) {
      k_.is_default = [ref](const Config& c) { return ref(c) == ref(defaults()); };
    }
  }

  // A value of another type: its own parser and writer.
  Decl& custom(std::function<void(Config&, const Where&, const toml::node&)> set,
               std::function<void(const Config&, toml::table&)> put) {
    k_.set = std::move(set);
    k_.put = std::move(put);
    k_.show = nullptr;  // as written
    return *this;
  }
  // Accepted when ok(value); else "key = value: expected <expected>".
  // `message`, if given, replaces "expected <expected>" in the error.
  Decl& check(std::function<bool(const T&)> ok, std::string expected, std::string message = "") {
    return check_if(nullptr, std::move(ok), std::move(expected), std::move(message));
  }
  // The same, checked only where `applies` (the key is read there).
  Decl& check_if(std::function<bool(const Config&)> applies, std::function<bool(const T&)> ok,
                 std::string expected, std::string message = "") {
    R ref = ref_;
    k_.checks.push_back(Check{[ref, ok](const Config& c) { return ok(ref(c)); },
                              std::move(expected), std::move(applies), std::move(message)});
    return *this;
  }
  Decl& one_of(std::initializer_list<const char*> values) {
    std::vector<std::string> v(values.begin(), values.end());
    std::string text;
    for (size_t i = 0; i < v.size(); ++i) {
      text += (i == 0 ? "" : i + 1 == v.size() ? " or " : ", ") + v[i];
    }
    return check([v](const T& s) { return std::find(v.begin(), v.end(), s) != v.end(); }, text);
  }
  // How messages and the reference show the value (default: as written).
  Decl& shown_as(std::function<std::string(const T&)> f) {
    R ref = ref_;
    k_.show = [ref, f](const Config& c) { return f(ref(c)); };
    return *this;
  }
  Decl& moot(Moot m) {
    k_.moot.push_back(std::move(m));
    return *this;
  }
  Decl& written(Written w) {
    k_.written = w;
    return *this;
  }
  // Written (and part of the identity) only when `when` holds: a new key
  // whose value before it existed stays out of older configs' hashes.
  Decl& written_when(std::function<bool(const Config&)> when) {
    k_.written = Written::kWhen;
    k_.written_when = std::move(when);
    return *this;
  }
  Decl& hashed_when(std::function<bool(const Config&)> when) {
    k_.hashed_when = std::move(when);
    return *this;
  }
  Decl& resumable() {
    k_.resumable = true;
    return *this;
  }
  // Not part of the run's identity: config_hash writes `text` in its place.
  Decl& hash_as(std::string text) {
    k_.hash_as = std::move(text);
    return *this;
  }
  Decl& calibration() {
    k_.calibration = true;
    return *this;
  }
  Decl& note(std::string text) {
    k_.note = std::move(text);
    return *this;
  }

  Key done() {
    if (!k_.show) {
      auto put = k_.put;
      k_.show = [put](const Config& c) { return written_text(put, c); };
    }
    if (!k_.is_default) {
      auto put = k_.put;
      k_.is_default = [put](const Config& c) {
        return written_text(put, c) == written_text(put, defaults());
      };
    }
    return std::move(k_);
  }

 private:
  Key k_;
  R ref_;
};

template <class R>
Decl<R> int_key(const char* s, const char* n, R r, std::string doc) {
  return Decl<R>(s, n, r, "integer", std::move(doc));
}
template <class R>
Decl<R> num_key(const char* s, const char* n, R r, std::string doc) {
  return Decl<R>(s, n, r, "number", std::move(doc));
}
template <class R>
Decl<R> bool_key(const char* s, const char* n, R r, std::string doc) {
  return Decl<R>(s, n, r, "boolean", std::move(doc));
}
template <class R>
Decl<R> str_key(const char* s, const char* n, R r, std::string doc) {
  return Decl<R>(s, n, r, "string", std::move(doc));
}
template <class R>
Decl<R> list_key(const char* s, const char* n, R r, std::string doc) {
  return Decl<R>(s, n, r, "list of integers", std::move(doc));
}
template <class R>
Decl<R> other_key(const char* s, const char* n, R r, std::string type, std::string doc) {
  return Decl<R>(s, n, r, std::move(type), std::move(doc));
}

// ---- ranges
inline bool finite(double v) { return std::isfinite(v); }
inline auto at_least(double lo) {
  return [lo](const auto& v) { return static_cast<double>(v) >= lo && finite(v); };
}
inline auto above(double lo) {
  return [lo](const auto& v) { return static_cast<double>(v) > lo && finite(v); };
}
inline auto in_unit_open_right() {  // [0, 1)
  return [](double v) { return v >= 0 && v < 1; };
}
inline bool non_empty_widths(const std::vector<int64_t>& v) {
  return std::all_of(v.begin(), v.end(), [](int64_t h) { return h >= 1; });
}

}  // namespace hsgd::config_internal::decl
