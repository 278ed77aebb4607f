// Parsing: a config file's text and --set overrides into a Config, through
// the setters of the one declaration (keys.cc), then validate().
#include <toml++/toml.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string_view>

#include "hsgd/config/config.h"
#include "hsgd/config/keys.h"
#include "hsgd/core/error.h"

namespace hsgd {
namespace {

using config_internal::Key;
using config_internal::Where;

// "data, model, train, ..." (sorted, as the messages have always listed them).
std::string known_sections() {
  std::vector<std::string> v;
  for (const config_internal::Section& s : config_internal::sections()) v.push_back(s.name);
  std::sort(v.begin(), v.end());
  std::string out;
  for (const std::string& s : v) out += (out.empty() ? "" : ", ") + s;
  return out;
}
std::string known_keys(const std::string& section) {
  std::vector<std::string> v;
  for (const Key& k : config_internal::keys()) {
    if (k.section == section) v.push_back(k.name);
  }
  std::sort(v.begin(), v.end());
  std::string out;
  for (const std::string& s : v) out += (out.empty() ? "" : ", ") + s;
  return out;
}
bool known_section(const std::string& section) {
  for (const config_internal::Section& s : config_internal::sections()) {
    if (s.name == section) return true;
  }
  return false;
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
  if (!known_section(section)) {
    throw InputError((origin.empty() ? "" : origin + ": ") + "unknown section '" + section +
                     "' (expected one of " + known_sections() + ")");
  }
  const Key* k = config_internal::find_key(section, key);
  if (!k) {
    throw InputError((origin.empty() ? "" : origin + ": ") + "unknown key '" + dotted +
                     "' (keys of [" + section + "]: " + known_keys(section) + ")");
  }
  k->set(c, Where{origin, dotted}, value);
}

// "kasync:4" -> kind kasync, k 4.
void resolve_policy_name(Config& c) {
  const std::string& n = c.policy_name;
  const PolicyName p = parse_policy_name(n, "policy.name");
  c.policy.kind = p.kind;
  if (p.number) (c.policy.kind == "ssp" ? c.policy.s : c.policy.k) = *p.number;
  if ((c.policy.kind == "kasync" || c.policy.kind == "kbatch") && c.policy.k == 0) {
    throw InputError("policy.name = '" + n + "': " + c.policy.kind + " needs K, as " +
                     c.policy.kind + ":K or policy.k");
  }
  if (c.policy.kind == "pdsgdm" && c.policy.k < 1) {
    throw InputError("policy.name = '" + n +
                     "': pdsgdm needs P >= 1 local steps between gossip rounds, as pdsgdm:P");
  }
  if (c.policy.kind == "local" && c.policy.k < 1) {
    throw InputError("policy.name = '" + n + "': local needs H >= 1 local steps, as local:H");
  }
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
// is invalid TOML or unneeded by hsgd's keys. A line starting with `#` is a
// comment only outside a multi-line string, so no line after the first
// `"""` or `'''` of the text (wherever it stands, even in a comment) may
// hold any (found a fourth way: `"""` on one line, `#\<U+FEFF>` on the
// next). Returns the offset of the first refused byte, or npos.
size_t unsafe_non_ascii(std::string_view s) {
  auto high = [](char ch) { return static_cast<unsigned char>(ch) >= 0x80; };
  auto blank = [](char ch) { return ch == ' ' || ch == '\t'; };
  auto bare = [](char ch) {
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           ch == '_' || ch == '-';
  };
  const size_t triple = std::min(s.find("\"\"\""), s.find("'''"));
  for (size_t start = 0; start < s.size();) {
    const size_t nl = s.find('\n', start);
    const size_t end = nl == std::string_view::npos ? s.size() : nl;
    const std::string_view line = s.substr(start, end - start);
    const size_t first_high = std::find_if(line.begin(), line.end(), high) - line.begin();
    if (first_high < line.size()) {
      size_t i = 0;
      while (i < line.size() && blank(line[i])) ++i;
      const bool in_reach = triple == std::string_view::npos || triple >= start;
      bool safe = in_reach && i < line.size() && line[i] == '#';
      if (!safe) {
        const size_t key = i;
        while (i < line.size() && bare(line[i])) ++i;
        const bool has_key = i > key;
        while (i < line.size() && blank(line[i])) ++i;
        const bool eq = in_reach && has_key && i < line.size() && line[i] == '=';
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
                       "single-line string values, none after a multi-line string");
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

}  // namespace hsgd
