// Internal to hsgd/data: line splitting and number parsing for the text
// readers (CSV, LIBSVM). std::from_chars based: no locale, no allocation.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace hsgd::data_internal {

// Yields the lines of a buffer with their 1-based numbers; strips "\n" and a
// trailing "\r".
class LineReader {
 public:
  explicit LineReader(std::string_view text) : rest_(text) {}
  // False at the end of the text.
  bool next(std::string_view* line, int64_t* line_no);

 private:
  std::string_view rest_;
  int64_t line_no_ = 0;
  bool done_ = false;
};

// Yields the data rows of a text file: its lines that are not blank, with
// their 1-based numbers. Blank lines may only end the file: a row after one
// is an InputError naming `path` and the blank line. With `comment` set, a
// line is cut at its first `comment` character before it is looked at.
class RowReader {
 public:
  RowReader(std::string_view text, std::string path, char comment = '\0')
      : lines_(text), path_(std::move(path)), comment_(comment) {}
  // False at the end of the text.
  bool next(std::string_view* row, int64_t* line_no);

 private:
  LineReader lines_;
  std::string path_;
  char comment_;
  int64_t blank_line_ = 0;  // the first blank line seen, 0 if none
};

// `s` without leading and trailing spaces and tabs.
std::string_view trim(std::string_view s);
bool is_blank(std::string_view s);

// `s` fit to quote in a one-line message: control and non-ASCII bytes
// written as \xNN, cut to `max` characters with "..." after.
std::string printable(std::string_view s, size_t max = 40);

// The whole of `s` as a finite float (an optional leading '+' is allowed).
std::optional<float> parse_float(std::string_view s);
// The whole of `s` as a class label: an integer in [0, 2^31 - 2] written
// either as an integer or as a number with a zero fraction ("3", "+3", "3.0").
std::optional<int32_t> parse_label(std::string_view s);
// The whole of `s` as a decimal integer (an optional leading '+' allowed).
std::optional<int64_t> parse_int(std::string_view s);

}  // namespace hsgd::data_internal
