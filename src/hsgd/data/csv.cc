// CSV reader: `label,f1,...,fn` per line, no header.
#include <fmt/format.h>

#include <algorithm>
#include <string_view>

#include "hsgd/core/error.h"
#include "hsgd/data/file_bytes.h"
#include "hsgd/data/readers.h"
#include "hsgd/data/text_lines.h"

namespace hsgd {
namespace {

[[noreturn]] void fail_field(const std::string& path, int64_t line, size_t field,
                             const std::string& expected, std::string_view got) {
  throw InputError(fmt::format("{}:line {} field {}: expected {}, got '{}'{}", path, line, field,
                               expected, data_internal::printable(got),
                               line == 1 ? " (CSV files must not have a header row)" : ""));
}

size_t count_fields(std::string_view line) {
  return static_cast<size_t>(std::count(line.begin(), line.end(), ',')) + 1;
}

}  // namespace

Dataset parse_csv(const std::string& path, std::string_view raw) {
  std::string storage;
  const std::string_view text = data_internal::decode(path, raw, &storage);
  Dataset d;
  d.name = path;
  size_t width = 0;  // fields per row, set by the first row
  int32_t max_label = -1;
  data_internal::RowReader rows(text, path);
  std::string_view line;
  int64_t line_no = 0;
  while (rows.next(&line, &line_no)) {
    if (width == 0) {
      width = count_fields(line);
      if (width < 2) {
        throw InputError(fmt::format(
            "{}:line {}: expected a label and at least one feature, got 1 field", path, line_no));
      }
      d.sample_shape = {static_cast<int64_t>(width - 1)};
      const size_t rows_guess = text.size() / (line.size() + 1) + 1;
      d.labels.reserve(rows_guess);
      d.features.reserve(rows_guess * (width - 1));
    }
    size_t field = 0;
    size_t start = 0;
    for (;;) {
      size_t comma = line.find(',', start);
      std::string_view raw =
          line.substr(start, comma == std::string_view::npos ? comma : comma - start);
      ++field;
      if (field > width) {
        throw InputError(fmt::format("{}:line {}: expected {} fields, got {}", path, line_no, width,
                                     count_fields(line)));
      }
      std::string_view f = data_internal::trim(raw);
      if (field == 1) {
        auto label = data_internal::parse_label(f);
        if (!label) fail_field(path, line_no, field, "a non-negative integer label", f);
        d.labels.push_back(*label);
        max_label = std::max(max_label, *label);
      } else {
        auto v = data_internal::parse_float(f);
        if (!v) fail_field(path, line_no, field, "a number", f);
        d.features.push_back(*v);
      }
      if (comma == std::string_view::npos) break;
      start = comma + 1;
    }
    if (field != width) {
      throw InputError(
          fmt::format("{}:line {}: expected {} fields, got {}", path, line_no, width, field));
    }
  }
  if (d.labels.empty()) {
    throw InputError(fmt::format("{}:line 1: expected a data row, got {}", path,
                                 text.empty() ? "an empty file" : "only blank lines"));
  }
  d.num_classes = max_label + 1;
  return d;
}

Dataset read_csv(const std::string& path) { return parse_csv(path, data_internal::read_raw(path)); }

}  // namespace hsgd
