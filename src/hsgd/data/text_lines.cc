#include "hsgd/data/text_lines.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>

#include "hsgd/core/error.h"

namespace hsgd::data_internal {
namespace {

std::string_view strip_plus(std::string_view s) {
  if (s.size() > 1 && s[0] == '+' && s[1] != '-' && s[1] != '+') s.remove_prefix(1);
  return s;
}

}  // namespace

bool RowReader::next(std::string_view* row, int64_t* line_no) {
  std::string_view line;
  while (lines_.next(&line, line_no)) {
    if (comment_ != '\0') line = line.substr(0, line.find(comment_));
    if (is_blank(line)) {
      if (blank_line_ == 0) blank_line_ = *line_no;
      continue;
    }
    if (blank_line_ != 0) {
      throw InputError(fmt::format(
          "{}:line {}: expected a data row, got a blank line (blank lines may only end the file)",
          path_, blank_line_));
    }
    *row = line;
    return true;
  }
  return false;
}

bool LineReader::next(std::string_view* line, int64_t* line_no) {
  if (done_) return false;
  const void* nl = std::memchr(rest_.data(), '\n', rest_.size());
  size_t len = nl != nullptr ? static_cast<size_t>(static_cast<const char*>(nl) - rest_.data())
                             : rest_.size();
  if (nl == nullptr) {
    done_ = true;
    if (rest_.empty()) return false;  // the text ended with "\n"
  }
  std::string_view l = rest_.substr(0, len);
  if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
  rest_.remove_prefix(nl != nullptr ? len + 1 : len);
  *line = l;
  *line_no = ++line_no_;
  return true;
}

std::string_view trim(std::string_view s) {
  size_t b = 0;
  while (b < s.size() && (s[b] == ' ' || s[b] == '\t')) ++b;
  size_t e = s.size();
  while (e > b && (s[e - 1] == ' ' || s[e - 1] == '\t')) --e;
  return s.substr(b, e - b);
}

bool is_blank(std::string_view s) { return trim(s).empty(); }

std::string printable(std::string_view s, size_t max) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i == max) return out + "...";
    const auto u = static_cast<unsigned char>(s[i]);
    if (u < 0x20 || u >= 0x7f) {
      static const char* kHex = "0123456789abcdef";
      out += "\\x";
      out += kHex[u >> 4];
      out += kHex[u & 15];
    } else {
      out += s[i];
    }
  }
  return out;
}

std::optional<float> parse_float(std::string_view s) {
  s = strip_plus(s);
  float v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

std::optional<int64_t> parse_int(std::string_view s) {
  s = strip_plus(s);
  int64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

std::optional<int32_t> parse_label(std::string_view s) {
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max() - 1;  // max + 1 must fit
  if (auto i = parse_int(s)) {
    if (*i < 0 || *i > kMax) return std::nullopt;
    return static_cast<int32_t>(*i);
  }
  s = strip_plus(s);
  double d = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), d);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  if (!(d >= 0 && d <= static_cast<double>(kMax)) || d != std::floor(d)) return std::nullopt;
  return static_cast<int32_t>(d);
}

}  // namespace hsgd::data_internal
