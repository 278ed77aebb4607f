#include "hsgd/server/sparse.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "hsgd/core/error.h"
#include "hsgd/core/simd.h"

namespace hsgd {
namespace {

constexpr uint32_t kRowTableTag = 0x524f5732;  // "ROW2": with row versions and RowStats

void check_range(std::span<const int64_t> ids, int64_t rows) {
  for (int64_t id : ids) {
    if (id < 0 || id >= rows) {
      throw InputError("row push: id " + std::to_string(id) + " outside [0, " +
                       std::to_string(rows) + ")");
    }
  }
}

}  // namespace

void RowStats::merge(const RowStats& o) {
  pulls = std::max(pulls, o.pulls);
  pushes = std::max(pushes, o.pushes);
  pulled_rows += o.pulled_rows;
  pushed_rows += o.pushed_rows;
  row_updates += o.row_updates;
  staleness_sum += o.staleness_sum;
  staleness_count += o.staleness_count;
  staleness_max = std::max(staleness_max, o.staleness_max);
}

RowPush make_row_push(std::span<const int64_t> ids, std::span<const float> grads, int64_t dim,
                      int64_t rows) {
  HSGD_ASSERT(dim >= 1, "make_row_push: dim must be >= 1");
  HSGD_ASSERT(grads.size() == ids.size() * static_cast<size_t>(dim),
              "make_row_push: grads must hold ids.size() x dim floats");
  check_range(ids, rows);
  std::vector<size_t> order(ids.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return ids[a] < ids[b]; });
  RowPush p;
  const auto d = static_cast<size_t>(dim);
  for (size_t k : order) {
    const float* g = grads.data() + k * d;
    if (p.ids.empty() || p.ids.back() != ids[k]) {
      p.ids.push_back(ids[k]);
      p.values.insert(p.values.end(), g, g + d);
    } else {
      float* dst = p.values.data() + p.values.size() - d;
      for (size_t c = 0; c < d; ++c) dst[c] += g[c];
    }
  }
  return p;
}

void check_sparse_supported(const OptimizerOptions& o, const MitigationOptions& m) {
  if (o.kind == "nesterov") {
    throw InputError(
        "optim.kind = 'nesterov': not supported with row-sparse push/pull (model.sparse = true); "
        "use sgd, momentum, adagrad or adam");
  }
  if (m.needs_pulled_copy()) {
    throw InputError(
        "staleness: DC-ASGD and Gap-Aware need the whole pulled parameters; they are not "
        "supported with row-sparse push/pull (model.sparse = true)");
  }
  if (m.momentum_correction) {
    throw InputError(
        "staleness.momentum_correction = true: not supported with row-sparse push/pull "
        "(model.sparse = true): the embedding rows keep their own momentum");
  }
}

RowOptimizer::RowOptimizer(const OptimizerOptions& o, int64_t rows, int64_t dim)
    : o_(o), rows_(rows), dim_(dim) {
  const auto n = static_cast<size_t>(rows * dim);
  if (o.kind == "momentum" || o.kind == "adam") m_.assign(n, 0.0f);
  if (o.kind == "adagrad" || o.kind == "adam") v_.assign(n, 0.0f);
  if (o.kind == "adam") count_.assign(static_cast<size_t>(rows), 0);
}

void RowOptimizer::step(std::span<float> table, std::span<const int64_t> ids,
                        std::span<const float> grads, double lr) {
  const auto d = static_cast<size_t>(dim_);
  const auto a = static_cast<float>(lr);
  const auto wd = static_cast<float>(o_.weight_decay);
  const auto eps = static_cast<float>(o_.eps);
  for (size_t k = 0; k < ids.size(); ++k) {
    const size_t base = static_cast<size_t>(ids[k]) * d;
    float* w = table.data() + base;
    const float* g = grads.data() + k * d;
    if (o_.kind == "sgd") {
      for (size_t c = 0; c < d; ++c) w[c] -= a * (g[c] + wd * w[c]);
    } else if (o_.kind == "momentum") {
      const auto mu = static_cast<float>(o_.momentum);
      float* v = m_.data() + base;
      for (size_t c = 0; c < d; ++c) {
        const float gi = g[c] + wd * w[c];
        v[c] = mu * v[c] + gi;
        w[c] -= a * v[c];
      }
    } else if (o_.kind == "adagrad") {
      float* acc = v_.data() + base;
      for (size_t c = 0; c < d; ++c) {
        const float gi = g[c] + wd * w[c];
        acc[c] += gi * gi;
        w[c] -= a * gi / (std::sqrt(acc[c]) + eps);
      }
    } else {  // adam, lazy: the row's own step count
      const int64_t t = ++count_[static_cast<size_t>(ids[k])];
      float c1, c2;
      bias_corrections(t, &c1, &c2);
      const auto b1 = static_cast<float>(o_.beta1), b2 = static_cast<float>(o_.beta2);
      float* m = m_.data() + base;
      float* v = v_.data() + base;
      for (size_t c = 0; c < d; ++c) {
        const float gi = g[c] + wd * w[c];
        m[c] = b1 * m[c] + (1.0f - b1) * gi;
        v[c] = b2 * v[c] + (1.0f - b2) * gi * gi;
        w[c] -= a * (m[c] / c1) / (std::sqrt(v[c] / c2) + eps);
      }
    }
  }
}

// Two std::pow per row cost more than the row's 16 floats of update: the
// values for counts below kBiasMemo are computed once, by the same
// expression, so they are the same bits (#12).
void RowOptimizer::bias_corrections(int64_t t, float* c1, float* c2) {
  constexpr int64_t kBiasMemo = int64_t{1} << 16;  // 512 KB at most
  const auto at = [&](int64_t u, float* a, float* b) {
    *a = static_cast<float>(1.0 - std::pow(o_.beta1, static_cast<double>(u)));
    *b = static_cast<float>(1.0 - std::pow(o_.beta2, static_cast<double>(u)));
  };
  if (t >= kBiasMemo) return at(t, c1, c2);
  const auto i = static_cast<size_t>(t);
  while (bias_.size() <= 2 * i + 1) {
    float a = 0, b = 0;
    at(static_cast<int64_t>(bias_.size() / 2), &a, &b);
    bias_.push_back(a);
    bias_.push_back(b);
  }
  *c1 = bias_[2 * i];
  *c2 = bias_[2 * i + 1];
}

int64_t RowOptimizer::state_bytes() const {
  return static_cast<int64_t>((m_.size() + v_.size()) * sizeof(float) +
                              count_.size() * sizeof(int64_t));
}

void RowOptimizer::save(StateWriter& w) const {
  w.put_vec(m_);
  w.put_vec(v_);
  w.put_vec(count_);
}

void RowOptimizer::load(StateReader& r) {
  r.get_into(std::span<float>(m_), "row optimizer first moments");
  r.get_into(std::span<float>(v_), "row optimizer second moments");
  r.get_into(std::span<int64_t>(count_), "row optimizer counts");
}

RowTable::RowTable(std::span<float> table, int64_t dim, const OptimizerOptions& o,
                   Aggregation aggregation, const MitigationOptions& staleness)
    : table_(table),
      rows_(dim >= 1 ? static_cast<int64_t>(table.size()) / dim : 0),
      dim_(dim),
      aggregation_(aggregation),
      staleness_(staleness),
      optimizer_(o, rows_, dim),
      version_(static_cast<size_t>(rows_), 0) {
  HSGD_ASSERT(dim >= 1 && table.size() % static_cast<size_t>(dim) == 0,
              "RowTable: the table must be whole rows");
  check_sparse_supported(o, staleness);
}

void RowTable::check_ids(std::span<const int64_t> ids) const { check_range(ids, rows_); }

bool RowTable::stage(RowPush push) {
  check_ids(push.ids);
  HSGD_ASSERT(push.values.size() == push.ids.size() * static_cast<size_t>(dim_),
              "RowTable::stage: values must hold ids.size() x dim floats");
  HSGD_ASSERT(std::is_sorted(push.ids.begin(), push.ids.end()) &&
                  std::adjacent_find(push.ids.begin(), push.ids.end()) == push.ids.end(),
              "RowTable::stage: ids must be sorted and unique (make_row_push)");
  const bool finite = all_finite(push.values);
  ++stats_.pushes;
  stats_.pushed_rows += static_cast<int64_t>(push.ids.size());
  staged_ = std::move(push);
  has_staged_ = finite;
  return finite;
}

void RowTable::pull(std::span<const int64_t> ids, std::span<float> out) const {
  check_ids(ids);
  HSGD_ASSERT(out.size() == ids.size() * static_cast<size_t>(dim_), "RowTable::pull: out size");
  const auto d = static_cast<size_t>(dim_);
  for (size_t k = 0; k < ids.size(); ++k) {
    std::copy_n(table_.data() + static_cast<size_t>(ids[k]) * d, d, out.data() + k * d);
  }
}

void RowTable::pull(int worker, std::span<const int64_t> ids, std::span<float> out) {
  HSGD_ASSERT(worker >= 0, "RowTable::pull: worker must be >= 0");
  pull(ids, out);
  if (pulled_.size() <= static_cast<size_t>(worker))
    pulled_.resize(static_cast<size_t>(worker) + 1);
  Pulled& p = pulled_[static_cast<size_t>(worker)];
  p.ids.assign(ids.begin(), ids.end());
  p.versions.resize(ids.size());
  for (size_t k = 0; k < ids.size(); ++k) p.versions[k] = version_[static_cast<size_t>(ids[k])];
  ++stats_.pulls;
  stats_.pulled_rows += static_cast<int64_t>(ids.size());
}

int64_t RowTable::state_bytes() const {
  return static_cast<int64_t>(table_.size() * sizeof(float) + version_.size() * sizeof(int64_t)) +
         optimizer_.state_bytes();
}

void RowTable::on_buffered(int worker, int64_t tau) {
  if (!has_staged_) return;  // a push with no rows staged (dense-only caller)
  has_staged_ = false;
  // Per-row staleness: the rows this worker pulled (both lists sorted).
  if (worker >= 0 && static_cast<size_t>(worker) < pulled_.size()) {
    const Pulled& p = pulled_[static_cast<size_t>(worker)];
    size_t i = 0;
    for (int64_t id : staged_.ids) {
      while (i < p.ids.size() && p.ids[i] < id) ++i;
      if (i == p.ids.size()) break;
      if (p.ids[i] != id) continue;
      const int64_t st = version_[static_cast<size_t>(id)] - p.versions[i];
      stats_.staleness_sum += static_cast<double>(st);
      ++stats_.staleness_count;
      stats_.staleness_max = std::max(stats_.staleness_max, st);
    }
  }
  if (staleness_.scaled_lr) scale_by_staleness(staged_.values, tau);
  if (buffer_.ids.empty()) {  // the first push of the update (every push under async)
    std::swap(buffer_, staged_);
    return;
  }
  // Merge the staged rows into the buffer (both sorted by id).
  const auto d = static_cast<size_t>(dim_);
  merged_.ids.clear();
  merged_.values.clear();
  size_t i = 0, j = 0;
  const RowPush& a = buffer_;
  const RowPush& b = staged_;
  while (i < a.ids.size() || j < b.ids.size()) {
    const bool take_a = j == b.ids.size() || (i < a.ids.size() && a.ids[i] < b.ids[j]);
    const bool take_b = i == a.ids.size() || (j < b.ids.size() && b.ids[j] < a.ids[i]);
    if (take_a) {
      merged_.ids.push_back(a.ids[i]);
      merged_.values.insert(merged_.values.end(), a.values.begin() + i * d,
                            a.values.begin() + (i + 1) * d);
      ++i;
    } else if (take_b) {
      merged_.ids.push_back(b.ids[j]);
      merged_.values.insert(merged_.values.end(), b.values.begin() + j * d,
                            b.values.begin() + (j + 1) * d);
      ++j;
    } else {  // the same id in both
      merged_.ids.push_back(a.ids[i]);
      for (size_t c = 0; c < d; ++c)
        merged_.values.push_back(a.values[i * d + c] + b.values[j * d + c]);
      ++i;
      ++j;
    }
  }
  std::swap(buffer_, merged_);
}

void RowTable::on_apply(size_t pushes, double lr) {
  if (aggregation_ == Aggregation::kMean && pushes > 1) {
    const float inv = 1.0f / static_cast<float>(pushes);
    for (float& v : buffer_.values) v *= inv;
  }
  optimizer_.step(table_, buffer_.ids, buffer_.values, lr);
  for (int64_t id : buffer_.ids) ++version_[static_cast<size_t>(id)];
  stats_.row_updates += static_cast<int64_t>(buffer_.ids.size());
  buffer_.ids.clear();
  buffer_.values.clear();
}

void RowTable::save(StateWriter& w) const {
  w.tag(kRowTableTag);
  w.put_span(std::span<const float>(table_));
  w.put_vec(buffer_.ids);
  w.put_vec(buffer_.values);
  optimizer_.save(w);
  w.put_vec(version_);
  w.put<uint64_t>(pulled_.size());
  for (const Pulled& p : pulled_) {
    w.put_vec(p.ids);
    w.put_vec(p.versions);
  }
  w.put(stats_.pulls);
  w.put(stats_.pulled_rows);
  w.put(stats_.pushes);
  w.put(stats_.pushed_rows);
  w.put(stats_.row_updates);
  w.put(stats_.staleness_sum);
  w.put(stats_.staleness_count);
  w.put(stats_.staleness_max);
}

void RowTable::load(StateReader& r) {
  r.expect_tag(kRowTableTag, "embedding rows");
  r.get_into(table_, "embedding rows");
  buffer_.ids = r.get_vec<int64_t>();
  buffer_.values = r.get_vec<float>();
  if (buffer_.values.size() != buffer_.ids.size() * static_cast<size_t>(dim_) ||
      !std::is_sorted(buffer_.ids.begin(), buffer_.ids.end()) ||
      (!buffer_.ids.empty() && (buffer_.ids.front() < 0 || buffer_.ids.back() >= rows_))) {
    r.fail("corrupt (buffered rows)");
  }
  optimizer_.load(r);
  r.get_into(std::span<int64_t>(version_), "embedding row versions");
  const auto workers = r.get<uint64_t>();
  if (workers > (1u << 20))
    r.fail("corrupt (row pulls of " + std::to_string(workers) + " workers)");
  pulled_.assign(static_cast<size_t>(workers), {});
  for (Pulled& p : pulled_) {
    p.ids = r.get_vec<int64_t>();
    p.versions = r.get_vec<int64_t>();
    if (p.ids.size() != p.versions.size() || !std::is_sorted(p.ids.begin(), p.ids.end()) ||
        (!p.ids.empty() && (p.ids.front() < 0 || p.ids.back() >= rows_))) {
      r.fail("corrupt (pulled rows)");
    }
  }
  stats_.pulls = r.get<int64_t>();
  stats_.pulled_rows = r.get<int64_t>();
  stats_.pushes = r.get<int64_t>();
  stats_.pushed_rows = r.get<int64_t>();
  stats_.row_updates = r.get<int64_t>();
  stats_.staleness_sum = r.get<double>();
  stats_.staleness_count = r.get<int64_t>();
  stats_.staleness_max = r.get<int64_t>();
  has_staged_ = false;
}

}  // namespace hsgd
