// Click-through data: the synthetic-ctr generator, the Criteo TSV reader and
// the AUC.
#include "hsgd/data/ctr.h"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <numeric>
#include <optional>
#include <vector>

#include "hsgd/core/error.h"
#include "hsgd/core/rng.h"
#include "hsgd/data/file_bytes.h"
#include "hsgd/data/streams.h"
#include "hsgd/data/text_lines.h"

namespace hsgd {
namespace {

void check_options(const CtrOptions& o) {
  auto fail = [](const char* key, const std::string& expected, const std::string& got) {
    throw InputError(fmt::format("synthetic-ctr: {}: expected {}, got {}", key, expected, got));
  };
  if (o.samples < 2) fail("data.ctr_samples", "at least 2", std::to_string(o.samples));
  if (o.dense < 0) fail("data.ctr_dense", "at least 0", std::to_string(o.dense));
  if (o.fields < 0) fail("data.ctr_fields", "at least 0", std::to_string(o.fields));
  if (o.dense + o.fields == 0) fail("data.ctr_dense + data.ctr_fields", "at least 1", "0");
  if (o.rows < 1 || o.rows > INT32_MAX) {
    fail("model.table_rows", "in [1, 2^31 - 1]", std::to_string(o.rows));
  }
  if (!(o.zipf >= 0) || !std::isfinite(o.zipf)) {
    fail("data.zipf", "a finite number >= 0", fmt::format("{}", o.zipf));
  }
}

double sigmoid(double z) { return 1.0 / (1.0 + std::exp(-z)); }

uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace

double binary_auc(const float* scores, const int32_t* labels, int64_t n) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  std::sort(order.begin(), order.end(),
            [&](int64_t a, int64_t b) { return scores[a] < scores[b]; });
  double rank_sum = 0;  // sum of the positives' (1-based, tie-averaged) ranks
  int64_t pos = 0;
  for (int64_t i = 0; i < n;) {
    int64_t j = i;
    while (j < n && scores[order[static_cast<size_t>(j)]] == scores[order[static_cast<size_t>(i)]])
      ++j;
    const double mid = 0.5 * static_cast<double>(i + 1 + j);  // average rank of i+1..j
    for (int64_t k = i; k < j; ++k) {
      if (labels[order[static_cast<size_t>(k)]] == 1) {
        rank_sum += mid;
        ++pos;
      }
    }
    i = j;
  }
  const int64_t neg = n - pos;
  if (pos == 0 || neg == 0) return std::nan("");
  return (rank_sum - 0.5 * static_cast<double>(pos) * static_cast<double>(pos + 1)) /
         (static_cast<double>(pos) * static_cast<double>(neg));
}

Dataset make_synthetic_ctr(const CtrOptions& o) {
  check_options(o);
  const auto n = static_cast<size_t>(o.samples);
  const auto nd = static_cast<size_t>(o.dense);
  const auto nf = static_cast<size_t>(o.fields);
  const auto rows = static_cast<size_t>(o.rows);
  Dataset d;
  d.name = "synthetic-ctr";
  d.sample_shape = {o.dense};
  d.num_classes = 2;
  d.categorical_rows.assign(nf, o.rows);

  // The planted model.
  Rng model_rng(o.seed, data_internal::kCtrModelStream);
  std::vector<double> w(nd), effect(nf * rows);
  for (double& v : w)
    v = model_rng.normal() / std::sqrt(static_cast<double>(std::max<size_t>(nd, 1)));
  for (double& v : effect)
    v = model_rng.normal() / std::sqrt(static_cast<double>(std::max<size_t>(nf, 1)));

  // Zipf ids by inverse CDF over the ranks.
  std::vector<double> cdf(rows);
  double total = 0;
  for (size_t r = 0; r < rows; ++r) {
    total += std::pow(static_cast<double>(r + 1), -o.zipf);
    cdf[r] = total;
  }
  Rng id_rng(o.seed, data_internal::kCtrIdStream);
  d.categorical.resize(n * nf);
  for (int32_t& id : d.categorical) {
    const double u = id_rng.uniform() * total;
    const size_t r = static_cast<size_t>(std::upper_bound(cdf.begin(), cdf.end(), u) - cdf.begin());
    id = static_cast<int32_t>(std::min(r, rows - 1));
  }
  Rng dense_rng(o.seed, data_internal::kCtrDenseStream);
  d.features.resize(n * nd);
  for (float& v : d.features) v = static_cast<float>(dense_rng.normal());

  std::vector<double> z(n);
  for (size_t i = 0; i < n; ++i) {
    double s = 0;
    for (size_t k = 0; k < nd; ++k) s += w[k] * d.features[i * nd + k];
    for (size_t j = 0; j < nf; ++j)
      s += effect[j * rows + static_cast<size_t>(d.categorical[i * nf + j])];
    z[i] = s;
  }
  // Bias: mean sigmoid(z + b) = 0.25, by bisection.
  double lo = -20, hi = 20;
  for (int it = 0; it < 60; ++it) {
    const double b = 0.5 * (lo + hi);
    double m = 0;
    for (double v : z) m += sigmoid(v + b);
    (m / static_cast<double>(n) > 0.25 ? hi : lo) = b;
  }
  const double b = 0.5 * (lo + hi);
  Rng label_rng(o.seed, data_internal::kCtrLabelStream);
  d.labels.resize(n);
  std::vector<float> score(n);
  for (size_t i = 0; i < n; ++i) {
    d.labels[i] = label_rng.uniform() < sigmoid(z[i] + b) ? 1 : 0;
    score[i] = static_cast<float>(z[i]);
  }
  d.planted_auc = binary_auc(score.data(), d.labels.data(), o.samples);
  return d;
}

namespace {

constexpr size_t kCriteoInts = 13;
constexpr size_t kCriteoCats = 26;
constexpr size_t kCriteoFields = 1 + kCriteoInts + kCriteoCats;

[[noreturn]] void fail_field(const std::string& path, int64_t line, size_t field,
                             const std::string& expected, std::string_view got) {
  throw InputError(fmt::format("{}:line {} field {}: expected {}, got '{}'", path, line, field,
                               expected, data_internal::printable(got)));
}

std::optional<uint64_t> parse_hex(std::string_view s) {
  if (s.empty() || s.size() > 16) return std::nullopt;
  uint64_t v = 0;
  for (char c : s) {
    int d;
    if (c >= '0' && c <= '9')
      d = c - '0';
    else if (c >= 'a' && c <= 'f')
      d = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F')
      d = c - 'A' + 10;
    else
      return std::nullopt;
    v = v * 16 + static_cast<uint64_t>(d);
  }
  return v;
}

}  // namespace

Dataset parse_criteo(const std::string& path, std::string_view raw, int64_t rows) {
  if (rows < 2 || rows > INT32_MAX) {
    throw InputError(
        fmt::format("model.table_rows = {}: criteo data needs at least 2 rows per "
                    "table (row 0 holds missing values) and at most 2^31 - 1",
                    rows));
  }
  std::string storage;
  const std::string_view text = data_internal::decode(path, raw, &storage);
  Dataset d;
  d.name = path;
  d.sample_shape = {static_cast<int64_t>(kCriteoInts)};
  d.num_classes = 2;
  d.categorical_rows.assign(kCriteoCats, rows);
  data_internal::RowReader lines(text, path);
  std::string_view line;
  int64_t line_no = 0;
  std::string_view f[kCriteoFields];
  const auto buckets = static_cast<uint64_t>(rows - 1);
  while (lines.next(&line, &line_no)) {
    size_t count = 0, start = 0;
    for (size_t i = 0; i <= line.size(); ++i) {
      if (i == line.size() || line[i] == '\t') {
        if (count < kCriteoFields) f[count] = line.substr(start, i - start);
        ++count;
        start = i + 1;
      }
    }
    if (count != kCriteoFields) {
      throw InputError(fmt::format(
          "{}:line {}: expected 40 tab-separated fields (label, 13 integers, 26 categorical), "
          "got {}",
          path, line_no, count));
    }
    const std::string_view label = data_internal::trim(f[0]);
    if (label != "0" && label != "1") fail_field(path, line_no, 1, "a label 0 or 1", f[0]);
    d.labels.push_back(label == "1" ? 1 : 0);
    for (size_t k = 0; k < kCriteoInts; ++k) {
      const std::string_view s = data_internal::trim(f[1 + k]);
      double x = 0;
      if (!s.empty()) {
        const auto v = data_internal::parse_int(s);
        if (!v) fail_field(path, line_no, 2 + k, "an integer or nothing", f[1 + k]);
        x = std::log1p(static_cast<double>(std::max<int64_t>(*v, 0)));
      }
      d.features.push_back(static_cast<float>(x));
    }
    for (size_t j = 0; j < kCriteoCats; ++j) {
      const std::string_view s = data_internal::trim(f[1 + kCriteoInts + j]);
      int32_t id = 0;
      if (!s.empty()) {
        const auto v = parse_hex(s);
        if (!v) {
          fail_field(path, line_no, 2 + kCriteoInts + j,
                     "a hex value of at most 16 digits or nothing", f[1 + kCriteoInts + j]);
        }
        id = static_cast<int32_t>(1 + mix64(*v ^ mix64(j + 1)) % buckets);
      }
      d.categorical.push_back(id);
    }
  }
  if (d.labels.empty()) throw InputError(path + ": expected at least one data line, got none");
  return d;
}

Dataset read_criteo(const std::string& path, int64_t rows) {
  return parse_criteo(path, data_internal::read_raw(path), rows);
}

}  // namespace hsgd
