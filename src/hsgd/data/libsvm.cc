// LIBSVM reader: `label idx:val idx:val ...`, densified.
#include <fmt/format.h>

#include <algorithm>
#include <string_view>
#include <vector>

#include "hsgd/core/error.h"
#include "hsgd/data/file_bytes.h"
#include "hsgd/data/readers.h"
#include "hsgd/data/text_lines.h"

namespace hsgd {
namespace {

// Dense output is rows * max index floats; refuse more than 2^30 of them,
// and more than kDensePerByte per byte of input (at least kMinDenseBound):
// memory follows the file's size, not the indices it writes (a 20-byte line
// "0 1000000000:1" must not allocate 4 GB). 256 per byte admits data sets
// as sparse as RCV1 (0.16 % non-zero).
constexpr int64_t kMaxDenseValues = int64_t{1} << 30;
constexpr int64_t kDensePerByte = 256;
constexpr int64_t kMinDenseBound = int64_t{1} << 20;

[[noreturn]] void fail_token(const std::string& path, int64_t line, const std::string& expected,
                             std::string_view token) {
  throw InputError(fmt::format("{}:line {}: expected {}, got '{}'", path, line, expected,
                               data_internal::printable(token)));
}

bool is_space(char c) { return c == ' ' || c == '\t'; }

// Splits off the next whitespace-separated token; empty at the end.
std::string_view next_token(std::string_view* rest) {
  size_t b = 0;
  while (b < rest->size() && is_space((*rest)[b])) ++b;
  size_t e = b;
  while (e < rest->size() && !is_space((*rest)[e])) ++e;
  std::string_view token = rest->substr(b, e - b);
  rest->remove_prefix(e);
  return token;
}

struct Entry {
  int64_t row;
  int64_t index;  // 1-based
  float value;
};

}  // namespace

Dataset parse_libsvm(const std::string& path, std::string_view raw) {
  std::string storage;
  const std::string_view text = data_internal::decode(path, raw, &storage);
  Dataset d;
  d.name = path;
  std::vector<Entry> entries;
  int64_t max_index = 0;
  int32_t max_label = -1;
  data_internal::RowReader rows(text, path, '#');
  std::string_view line;
  int64_t line_no = 0;
  while (rows.next(&line, &line_no)) {
    std::string_view rest = line;
    std::string_view label_token = next_token(&rest);
    auto label = data_internal::parse_label(label_token);
    if (!label) fail_token(path, line_no, "a non-negative integer label", label_token);
    const int64_t row = d.size();
    d.labels.push_back(*label);
    max_label = std::max(max_label, *label);
    int64_t last = 0;
    for (std::string_view token = next_token(&rest); !token.empty(); token = next_token(&rest)) {
      size_t colon = token.find(':');
      if (colon == std::string_view::npos) fail_token(path, line_no, "index:value", token);
      auto index = data_internal::parse_int(token.substr(0, colon));
      if (!index || *index < 1) fail_token(path, line_no, "an index >= 1", token);
      if (*index <= last) {
        fail_token(path, line_no,
                   fmt::format("an index above {} (indices must be strictly increasing)", last),
                   token);
      }
      if (*index > kMaxDenseValues) {
        fail_token(path, line_no, fmt::format("an index <= {}", kMaxDenseValues), token);
      }
      auto value = data_internal::parse_float(token.substr(colon + 1));
      if (!value) fail_token(path, line_no, "a number after ':'", token);
      last = *index;
      entries.push_back({row, *index, *value});
    }
    max_index = std::max(max_index, last);
  }
  if (d.labels.empty()) {
    throw InputError(fmt::format("{}:line 1: expected a data row, got {}", path,
                                 text.empty() ? "an empty file" : "only blank lines"));
  }
  if (max_index == 0) {
    throw InputError(fmt::format("{}: expected at least one feature, got none on any line", path));
  }
  const int64_t bound = std::min(
      kMaxDenseValues, std::max(kMinDenseBound, kDensePerByte * static_cast<int64_t>(text.size())));
  if (d.size() > bound / max_index) {
    throw InputError(fmt::format(
        "{}: expected at most {} dense values ({} per byte of a {}-byte file, at most {}), got {} "
        "rows x {} features",
        path, bound, kDensePerByte, text.size(), kMaxDenseValues, d.size(), max_index));
  }
  d.sample_shape = {max_index};
  d.num_classes = max_label + 1;
  d.features.assign(static_cast<size_t>(d.size() * max_index), 0.0f);
  for (const Entry& e : entries) d.features[e.row * max_index + e.index - 1] = e.value;
  return d;
}

Dataset read_libsvm(const std::string& path) {
  return parse_libsvm(path, data_internal::read_raw(path));
}

}  // namespace hsgd
