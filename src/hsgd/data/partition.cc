// make_partition: iid, dirichlet, shards, quantity, and the global pool.
#include "hsgd/data/partition.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "hsgd/core/error.h"
#include "hsgd/core/rng.h"
#include "hsgd/data/streams.h"

namespace hsgd {
namespace {

// log of a Gamma(a, 1) draw (Marsaglia-Tsang; for a < 1 the boost
// G(a) = G(a + 1) U^(1/a), kept in logs so tiny alphas do not underflow).
double log_gamma_draw(double a, Rng& rng) {
  double boost = 0;
  if (a < 1) {
    double u = rng.uniform();
    if (u < 1e-300) u = 1e-300;
    boost = std::log(u) / a;
    a += 1;
  }
  const double d = a - 1.0 / 3.0;
  const double c = 1.0 / std::sqrt(9.0 * d);
  for (;;) {
    const double x = rng.normal();
    double v = 1 + c * x;
    if (v <= 0) continue;
    v = v * v * v;
    const double u = rng.uniform();
    if (std::log(u + 1e-300) < 0.5 * x * x + d - d * v + d * std::log(v)) {
      return std::log(d * v) + boost;
    }
  }
}

// A Dirichlet(alpha, ..., alpha) draw of size n, zeroing the entries not in
// `eligible` (all eligible when empty). Sums to 1.
std::vector<double> dirichlet(int n, double alpha, const std::vector<bool>& eligible, Rng& rng) {
  std::vector<double> lg(static_cast<size_t>(n));
  double top = -INFINITY;
  for (int i = 0; i < n; ++i) {
    lg[i] = log_gamma_draw(alpha, rng);
    if (eligible.empty() || eligible[i]) top = std::max(top, lg[i]);
  }
  std::vector<double> p(static_cast<size_t>(n), 0.0);
  double sum = 0;
  for (int i = 0; i < n; ++i) {
    if (eligible.empty() || eligible[i]) sum += p[i] = std::exp(lg[i] - top);
  }
  for (double& x : p) x /= sum;
  return p;
}

// Appends the pieces of `items` cut at the cumulative `proportions` to `out`.
void cut(const std::vector<int64_t>& items, const std::vector<double>& proportions,
         std::vector<std::vector<int64_t>>* out) {
  const int64_t m = static_cast<int64_t>(items.size());
  double acc = 0;
  int64_t begin = 0;
  for (size_t i = 0; i < proportions.size(); ++i) {
    acc += proportions[i];
    int64_t end = i + 1 == proportions.size()
                      ? m
                      : std::min<int64_t>(m, std::llround(acc * static_cast<double>(m)));
    end = std::max(end, begin);
    (*out)[i].insert((*out)[i].end(), items.begin() + begin, items.begin() + end);
    begin = end;
  }
}

int64_t smallest(const std::vector<std::vector<int64_t>>& shards) {
  int64_t m = INT64_MAX;
  for (const auto& s : shards) m = std::min<int64_t>(m, static_cast<int64_t>(s.size()));
  return m;
}

std::vector<std::vector<int64_t>> by_class(const Dataset& d, const std::vector<int64_t>& items) {
  std::vector<std::vector<int64_t>> c(static_cast<size_t>(d.num_classes));
  for (int64_t i : items) c[static_cast<size_t>(d.labels[i])].push_back(i);
  return c;
}

std::vector<std::vector<int64_t>> dirichlet_split(const Dataset& d, const PartitionOptions& o,
                                                  const std::vector<int64_t>& items, int n,
                                                  Rng& rng) {
  const auto classes = by_class(d, items);
  const double fair = static_cast<double>(items.size()) / n;
  for (int draw = 0; draw < kMaxPartitionDraws; ++draw) {
    std::vector<std::vector<int64_t>> shards(static_cast<size_t>(n));
    for (const auto& members : classes) {
      if (members.empty()) continue;
      std::vector<bool> eligible(static_cast<size_t>(n));
      for (int w = 0; w < n; ++w) eligible[w] = static_cast<double>(shards[w].size()) < fair;
      cut(members, dirichlet(n, o.alpha, eligible, rng), &shards);
    }
    if (smallest(shards) >= o.min_partition_size) return shards;
  }
  throw InputError(fmt::format(
      "data.partition = 'dirichlet', data.alpha = {}: no draw in {} gave each of {} workers "
      "data.min_partition_size = {} of {} samples; raise data.alpha, lower "
      "data.min_partition_size or use fewer workers",
      o.alpha, kMaxPartitionDraws, n, o.min_partition_size, items.size()));
}

std::vector<std::vector<int64_t>> quantity_split(const PartitionOptions& o,
                                                 const std::vector<int64_t>& items, int n,
                                                 Rng& rng) {
  for (int draw = 0; draw < kMaxPartitionDraws; ++draw) {
    std::vector<std::vector<int64_t>> shards(static_cast<size_t>(n));
    cut(items, dirichlet(n, o.alpha, {}, rng), &shards);
    if (smallest(shards) >= o.min_partition_size) return shards;
  }
  throw InputError(fmt::format(
      "data.partition = 'quantity', data.alpha = {}: no draw in {} gave each of {} workers "
      "data.min_partition_size = {} of {} samples; raise data.alpha, lower "
      "data.min_partition_size or use fewer workers",
      o.alpha, kMaxPartitionDraws, n, o.min_partition_size, items.size()));
}

std::vector<std::vector<int64_t>> class_shards_split(const Dataset& d, const PartitionOptions& o,
                                                     const std::vector<int64_t>& items, int n,
                                                     Rng& rng) {
  const int k = d.num_classes;
  const int c = o.classes_per_worker;
  if (c > k) {
    throw InputError(fmt::format(
        "data.classes_per_worker = {}: the training set {} has only {} classes", c, d.name, k));
  }
  if (static_cast<int64_t>(n) * c < k) {
    throw InputError(fmt::format(
        "data.partition = 'shards': {} workers x data.classes_per_worker = {} cover only {} of "
        "the {} classes, and every sample must land on a worker; raise data.classes_per_worker",
        n, c, n * c, k));
  }
  std::vector<int> order(static_cast<size_t>(k));
  std::iota(order.begin(), order.end(), 0);
  shuffle(order, rng);
  std::vector<std::vector<int>> holders(static_cast<size_t>(k));
  for (int w = 0; w < n; ++w) {
    for (int j = 0; j < c; ++j) holders[order[(static_cast<int64_t>(w) * c + j) % k]].push_back(w);
  }
  const auto classes = by_class(d, items);
  std::vector<std::vector<int64_t>> shards(static_cast<size_t>(n));
  for (int cls = 0; cls < k; ++cls) {
    const auto& members = classes[cls];
    const auto& h = holders[cls];
    const int64_t m = static_cast<int64_t>(members.size());
    const int64_t nh = static_cast<int64_t>(h.size());
    if (m < nh) {
      throw InputError(
          fmt::format("data.partition = 'shards': class {} has {} samples for {} workers with "
                      "data.classes_per_worker = {}; use fewer workers or classes per worker",
                      cls, m, nh, c));
    }
    for (int64_t j = 0; j < nh; ++j) {
      auto& s = shards[h[j]];
      s.insert(s.end(), members.begin() + j * m / nh, members.begin() + (j + 1) * m / nh);
    }
  }
  return shards;
}

}  // namespace

void validate(const PartitionOptions& o) {
  if (o.kind != "iid" && o.kind != "dirichlet" && o.kind != "shards" && o.kind != "quantity") {
    throw InputError("data.partition = '" + o.kind +
                     "': expected iid, dirichlet, shards or quantity");
  }
  if (!(o.alpha > 0) || !std::isfinite(o.alpha)) {
    throw InputError(fmt::format("data.alpha = {}: expected a number > 0", o.alpha));
  }
  if (o.min_partition_size < 1) {
    throw InputError(
        fmt::format("data.min_partition_size = {}: expected >= 1", o.min_partition_size));
  }
  if (o.classes_per_worker < 1) {
    throw InputError(
        fmt::format("data.classes_per_worker = {}: expected >= 1", o.classes_per_worker));
  }
  if (!(o.global_fraction >= 0 && o.global_fraction < 1)) {
    throw InputError(
        fmt::format("data.global_fraction = {}: expected in [0, 1)", o.global_fraction));
  }
}

Partition make_partition(const Dataset& d, const PartitionOptions& o, uint64_t seed,
                         int live_workers) {
  validate(o);
  const int n = live_workers;
  HSGD_ASSERT(n >= 1, "make_partition: no live workers");
  const int64_t total = d.size();
  std::vector<int64_t> perm(static_cast<size_t>(total));
  std::iota(perm.begin(), perm.end(), int64_t{0});
  Rng perm_rng(seed, data_internal::kShardPermutationStream);
  shuffle(perm, perm_rng);
  const int64_t pool = std::llround(o.global_fraction * static_cast<double>(total));
  Partition p;
  p.global_pool.assign(perm.begin(), perm.begin() + pool);
  const std::vector<int64_t> rest(perm.begin() + pool, perm.end());
  const int64_t m = static_cast<int64_t>(rest.size());
  if (m < n) {
    throw InputError(fmt::format(
        "{}: {} samples{} cannot be split over {} workers", d.name, m,
        pool > 0
            ? fmt::format(" outside the global pool (data.global_fraction = {})", o.global_fraction)
            : "",
        n));
  }
  if (o.kind == "dirichlet" || o.kind == "quantity") {
    if (static_cast<int64_t>(n) * o.min_partition_size > m) {
      throw InputError(fmt::format(
          "data.min_partition_size = {}: {} workers would need {} samples, the partitioned "
          "set has {}; lower data.min_partition_size or use fewer workers",
          o.min_partition_size, n, static_cast<int64_t>(n) * o.min_partition_size, m));
    }
  }
  Rng rng(seed, data_internal::kPartitionStream);
  if (o.kind == "iid") {
    p.shards.resize(static_cast<size_t>(n));
    for (int w = 0; w < n; ++w) {
      p.shards[w].assign(rest.begin() + w * m / n, rest.begin() + (w + 1) * m / n);
    }
  } else if (o.kind == "dirichlet") {
    p.shards = dirichlet_split(d, o, rest, n, rng);
  } else if (o.kind == "quantity") {
    p.shards = quantity_split(o, rest, n, rng);
  } else {
    p.shards = class_shards_split(d, o, rest, n, rng);
  }
  HSGD_ASSERT(smallest(p.shards) >= 1, "make_partition: empty shard");
  return p;
}

PartitionStats partition_stats(const Dataset& d, const Partition& p) {
  const size_t k = static_cast<size_t>(d.num_classes);
  PartitionStats s;
  s.global_pool_size = static_cast<int64_t>(p.global_pool.size());
  std::vector<double> global(k, 0.0);
  for (int32_t y : d.labels) global[static_cast<size_t>(y)] += 1;
  for (double& g : global) g /= std::max<int64_t>(1, d.size());
  std::vector<int64_t> pool_hist(k, 0);
  for (int64_t i : p.global_pool) ++pool_hist[static_cast<size_t>(d.labels[i])];
  auto tv = [&](const std::vector<int64_t>& h, int64_t size) {
    double t = 0;
    for (size_t c = 0; c < k; ++c) {
      t += std::abs(static_cast<double>(h[c]) / std::max<int64_t>(1, size) - global[c]);
    }
    return t / 2;
  };
  for (const auto& shard : p.shards) {
    std::vector<int64_t> h(k, 0);
    for (int64_t i : shard) ++h[static_cast<size_t>(d.labels[i])];
    const int64_t size = static_cast<int64_t>(shard.size());
    s.skew_tv += tv(h, size);
    std::vector<int64_t> eff = h;
    for (size_t c = 0; c < k; ++c) eff[c] += pool_hist[c];
    s.effective_skew_tv += tv(eff, size + s.global_pool_size);
    s.histograms.push_back(std::move(h));
    s.shard_sizes.push_back(size);
  }
  if (!p.shards.empty()) {
    s.skew_tv /= static_cast<double>(p.shards.size());
    s.effective_skew_tv /= static_cast<double>(p.shards.size());
  }
  return s;
}

}  // namespace hsgd
