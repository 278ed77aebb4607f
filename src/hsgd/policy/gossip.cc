#include "hsgd/policy/gossip.h"

#include <algorithm>
#include <cmath>

#include "hsgd/core/error.h"

namespace hsgd {

bool is_gossip_policy(const std::string& kind) {
  return kind == "dpsgd" || kind == "adpsgd" || kind == "sgp" || kind == "pdsgdm";
}

namespace {
int pick_passive(int w, const std::vector<int>& nb, Rng& rng) {
  if (w % 2 != 0) return -1;
  std::vector<int> passive;
  for (int j : nb) {
    if (j % 2 != 0) passive.push_back(j);
  }
  const std::vector<int>& pool = passive.empty() ? nb : passive;
  if (pool.empty()) return -1;
  return pool[static_cast<size_t>(rng.below(pool.size()))];
}
}  // namespace

int adpsgd_peer(const Topology& topo, int w, int64_t t, Rng& rng) {
  if (w % 2 != 0) return -1;
  return pick_passive(w, topo.neighbours(w, t), rng);
}

int adpsgd_peer(const GossipGraph& g, int w, int64_t t, Rng& rng) {
  if (w % 2 != 0 || !g.live(w)) return -1;
  return pick_passive(w, g.neighbours(w, t), rng);
}

GossipGraph::GossipGraph(std::string kind, std::string weights, int n, uint64_t seed)
    : kind_(std::move(kind)),
      weights_(std::move(weights)),
      n_(n),
      seed_(seed),
      live_(static_cast<size_t>(n), 1),
      local_(kind_, weights_, n, seed) {
  for (int i = 0; i < n; ++i) {
    ids_.push_back(i);
    local_id_.push_back(i);
  }
}

void GossipGraph::set_live(std::vector<char> live) {
  HSGD_ASSERT(live.size() == static_cast<size_t>(n_), "one live flag per worker");
  live_ = std::move(live);
  ids_.clear();
  local_id_.assign(static_cast<size_t>(n_), -1);
  for (int i = 0; i < n_; ++i) {
    if (!live_[static_cast<size_t>(i)]) continue;
    local_id_[static_cast<size_t>(i)] = static_cast<int>(ids_.size());
    ids_.push_back(i);
  }
  local_ = Topology(kind_, weights_, std::max(1, live_count()), seed_);
}

std::vector<int> GossipGraph::global(std::vector<int> local) const {
  for (int& j : local) j = ids_[static_cast<size_t>(j)];
  return local;  // ascending: relabelling keeps the order
}

std::vector<int> GossipGraph::neighbours(int i, int64_t t) const {
  const int l = local_id_[static_cast<size_t>(i)];
  return l < 0 ? std::vector<int>{} : global(local_.neighbours(l, t));
}
std::vector<int> GossipGraph::out_peers(int i, int64_t t) const {
  const int l = local_id_[static_cast<size_t>(i)];
  return l < 0 ? std::vector<int>{} : global(local_.out_peers(l, t));
}
std::vector<int> GossipGraph::in_peers(int i, int64_t t) const {
  const int l = local_id_[static_cast<size_t>(i)];
  return l < 0 ? std::vector<int>{} : global(local_.in_peers(l, t));
}
MixRow GossipGraph::mixing_row(int i, int64_t t) const {
  const int l = local_id_[static_cast<size_t>(i)];
  if (l < 0) return {};
  MixRow row = local_.mixing_row(l, t);
  for (auto& [j, w] : row) j = ids_[static_cast<size_t>(j)];
  return row;
}

int GossipGraph::successor(int i) const {
  for (int k = 1; k < n_; ++k) {
    const int j = (i + k) % n_;
    if (live(j)) return j;
  }
  return -1;
}

void weighted_sum(std::span<float> out, const std::vector<double>& weights,
                  const std::vector<std::span<const float>>& sources) {
  HSGD_ASSERT(weights.size() == sources.size(), "one weight per source");
  const size_t np = out.size();
  for (size_t p = 0; p < np; ++p) {
    double s = 0;
    for (size_t k = 0; k < sources.size(); ++k) s += weights[k] * sources[k][p];
    out[p] = static_cast<float>(s);
  }
}

void gossip_combine(const Topology& topo, int i, int64_t t, bool push_sum, std::span<float> x,
                    std::span<const float> own, const std::vector<int>& from,
                    const std::vector<std::span<const float>>& parts) {
  gossip_combine(push_sum ? MixRow{} : topo.mixing_row(i, t), i, push_sum, x, own, from, parts);
}

void gossip_combine(const GossipGraph& g, int i, int64_t t, bool push_sum, std::span<float> x,
                    std::span<const float> own, const std::vector<int>& from,
                    const std::vector<std::span<const float>>& parts) {
  gossip_combine(push_sum ? MixRow{} : g.mixing_row(i, t), i, push_sum, x, own, from, parts);
}

void gossip_combine(const MixRow& row, int i, bool push_sum, std::span<float> x,
                    std::span<const float> own, const std::vector<int>& from,
                    const std::vector<std::span<const float>>& parts) {
  HSGD_ASSERT(from.size() == parts.size(), "one part per in-peer");
  std::vector<double> ws;
  std::vector<std::span<const float>> srcs;
  if (push_sum) {
    bool own_done = false;
    for (size_t k = 0; k < from.size(); ++k) {
      if (!own_done && from[k] > i) {
        ws.push_back(1.0);
        srcs.push_back(own);
        own_done = true;
      }
      ws.push_back(1.0);
      srcs.push_back(parts[k]);
    }
    if (!own_done) {
      ws.push_back(1.0);
      srcs.push_back(own);
    }
    weighted_sum(x, ws, srcs);
    return;
  }
  for (const auto& [j, wij] : row) {
    ws.push_back(wij);
    if (j == i) {
      srcs.push_back(own);
    } else {
      const size_t k = static_cast<size_t>(std::find(from.begin(), from.end(), j) - from.begin());
      HSGD_ASSERT(k < parts.size(), "a mixing weight for a worker that sent nothing");
      srcs.push_back(parts[k]);
    }
  }
  weighted_sum(x, ws, srcs);
}

GossipModels::GossipModels(int n, std::span<const float> init, LocalUpdate update)
    : n_(n), np_(init.size()), update_(std::move(update)) {
  x_.resize(static_cast<size_t>(n_) * np_);
  for (int i = 0; i < n_; ++i) std::copy(init.begin(), init.end(), x_.begin() + off(i));
  if (update_.kind != "sgd") m_.assign(x_.size(), 0.0f);
  w_.assign(static_cast<size_t>(n_), 1.0);
}

void GossipModels::debiased(int i, std::span<float> out) const {
  const double w = weight(i);
  std::span<const float> xi = x(i);
  if (w == 1.0) {
    std::copy(xi.begin(), xi.end(), out.begin());
    return;
  }
  for (size_t p = 0; p < np_; ++p) out[p] = static_cast<float>(xi[p] / w);
}

void GossipModels::local_step(int i, std::span<const float> g, float lr) {
  std::span<float> xi = x(i);
  const float wd = update_.weight_decay;
  if (update_.kind == "sgd") {
    for (size_t p = 0; p < np_; ++p) xi[p] -= lr * (g[p] + wd * xi[p]);
    return;
  }
  float* m = m_.data() + off(i);
  const float mu = update_.momentum;
  const bool nesterov = update_.kind == "nesterov";
  for (size_t p = 0; p < np_; ++p) {
    const float gp = g[p] + wd * xi[p];
    m[p] = mu * m[p] + gp;
    xi[p] -= lr * (nesterov ? gp + mu * m[p] : m[p]);
  }
}

void GossipModels::mix(const Topology& topo, int64_t t) {
  std::vector<float> next(x_.size());
  for (int i = 0; i < n_; ++i) {
    std::vector<double> ws;
    std::vector<std::span<const float>> srcs;
    for (const auto& [j, w] : topo.mixing_row(i, t)) {
      ws.push_back(w);
      srcs.push_back(x(j));
    }
    weighted_sum({next.data() + off(i), np_}, ws, srcs);
  }
  x_.swap(next);
}

void GossipModels::push_sum(const Topology& topo, int64_t t) {
  std::vector<float> next(x_.size());
  std::vector<double> nw(w_.size());
  for (int i = 0; i < n_; ++i) {
    // Worker i combines its own share and its in-peers' shares, senders in
    // ascending order.
    std::vector<int> from = topo.in_peers(i, t);
    from.push_back(i);
    std::sort(from.begin(), from.end());
    std::vector<double> ws;
    std::vector<std::span<const float>> srcs;
    double wsum = 0;
    for (int j : from) {
      const double share = 1.0 / (static_cast<double>(topo.out_peers(j, t).size()) + 1.0);
      ws.push_back(share);
      srcs.push_back(x(j));
      wsum += share * weight(j);
    }
    weighted_sum({next.data() + off(i), np_}, ws, srcs);
    nw[static_cast<size_t>(i)] = wsum;
  }
  x_.swap(next);
  w_.swap(nw);
}

void GossipModels::pair_average(int i, int j) {
  std::span<float> a = x(i), b = x(j);
  for (size_t p = 0; p < np_; ++p) {
    const float v = static_cast<float>((static_cast<double>(a[p]) + b[p]) * 0.5);
    a[p] = v;
    b[p] = v;
  }
  const double w = (weight(i) + weight(j)) * 0.5;
  weight(i) = w;
  weight(j) = w;
}

void GossipModels::global_average(const std::function<void(std::span<float>)>& outer) {
  std::vector<float> avg(np_);
  average(avg);
  if (outer) outer(avg);
  double total = 0;
  int live_n = 0;
  for (int i = 0; i < n_; ++i) {
    if (!live(i)) continue;
    total += weight(i);
    ++live_n;
  }
  const double wi = live_n == n_ ? 1.0 : total / live_n;
  for (int i = 0; i < n_; ++i) {
    if (!live(i)) continue;
    std::span<float> xi = x(i);
    if (wi == 1.0) {
      std::copy(avg.begin(), avg.end(), xi.begin());
    } else {
      for (size_t p = 0; p < np_; ++p) xi[p] = static_cast<float>(avg[p] * wi);
    }
    w_[static_cast<size_t>(i)] = wi;
  }
}

void GossipModels::remove(int i, int heir) {
  std::span<float> xi = x(i);
  if (heir >= 0) credit(heir, xi, weight(i));
  std::fill(xi.begin(), xi.end(), 0.0f);
  if (!m_.empty())
    std::fill(m_.begin() + static_cast<std::ptrdiff_t>(off(i)),
              m_.begin() + static_cast<std::ptrdiff_t>(off(i) + np_), 0.0f);
  weight(i) = 0;
}

void GossipModels::join_from(int i, int donor, bool push_sum) {
  std::span<float> xd = x(donor), xi = x(i);
  if (push_sum) {
    for (float& v : xd) v *= 0.5f;  // exact: a power of two
    weight(donor) *= 0.5;
  }
  std::copy(xd.begin(), xd.end(), xi.begin());
  weight(i) = weight(donor);
  if (!m_.empty())
    std::fill(m_.begin() + static_cast<std::ptrdiff_t>(off(i)),
              m_.begin() + static_cast<std::ptrdiff_t>(off(i) + np_), 0.0f);
}

void GossipModels::credit(int i, std::span<const float> share, double w) {
  std::span<float> xi = x(i);
  for (size_t p = 0; p < np_; ++p) xi[p] += share[p];
  weight(i) += w;
}

void GossipModels::average(std::span<float> out) const {
  double wsum = 0;
  for (double w : w_) wsum += w;
  for (size_t p = 0; p < np_; ++p) {
    double s = 0;
    for (int i = 0; i < n_; ++i) s += x_[off(i) + p];
    out[p] = static_cast<float>(s / wsum);
  }
}

GossipModels::Consensus GossipModels::consensus() const {
  std::vector<float> avg(np_);
  average(avg);
  Consensus c;
  double sq = 0;
  int live_n = 0;
  for (int i = 0; i < n_; ++i) {
    const double w = weight(i);
    if (!(w > 0)) continue;  // left (membership)
    ++live_n;
    for (size_t p = 0; p < np_; ++p) {
      const double d = x_[off(i) + p] / w - avg[p];
      sq += d * d;
    }
  }
  double norm = 0;
  for (float v : avg) norm += static_cast<double>(v) * v;
  c.xi = live_n > 0 ? std::sqrt(sq / live_n) : 0.0;
  c.norm = std::sqrt(norm);
  return c;
}

void GossipModels::save(StateWriter& w) const {
  w.tag(0x47535331);  // "GSS1"
  w.put<int32_t>(n_);
  w.put<uint64_t>(np_);
  w.put_vec(x_);
  w.put_vec(m_);
  w.put_vec(w_);
}

void GossipModels::load(StateReader& r) {
  if (r.get<uint32_t>() != 0x47535331) r.fail("corrupt (gossip models missing)");
  if (r.get<int32_t>() != n_ || r.get<uint64_t>() != np_) {
    r.fail("corrupt (gossip models of another shape)");
  }
  std::vector<float> x = r.get_vec<float>(), m = r.get_vec<float>();
  std::vector<double> w = r.get_vec<double>();
  if (x.size() != x_.size() || m.size() != m_.size() || w.size() != w_.size()) {
    r.fail("corrupt (gossip models of another shape)");
  }
  x_ = std::move(x);
  m_ = std::move(m);
  w_ = std::move(w);
}

void GossipModels::save_worker(int i, StateWriter& w) const {
  w.tag(0x47535331);  // "GSS1": as save() of one worker
  w.put<int32_t>(1);
  w.put<uint64_t>(np_);
  w.put_span(x(i));
  w.put_span(m_.empty() ? std::span<const float>()
                        : std::span<const float>(m_).subspan(off(i), np_));
  w.put_vec(std::vector<double>{weight(i)});
}

void GossipModels::load_worker(int i, StateReader& r) {
  if (r.get<uint32_t>() != 0x47535331) r.fail("corrupt (gossip model missing)");
  if (r.get<int32_t>() != 1 || r.get<uint64_t>() != np_) {
    r.fail("corrupt (a gossip model of another shape)");
  }
  r.get_into(x(i), "the model");
  if (m_.empty()) {
    r.get_into(std::span<float>(), "the momentum (sgd has none)");
  } else {
    r.get_into(std::span<float>(m_).subspan(off(i), np_), "the momentum");
  }
  double wi = 0;
  r.get_into(std::span<double>(&wi, 1), "the push-sum weight");
  // 0 marks a worker that left (membership), which holds nothing.
  if (!(wi >= 0) || !std::isfinite(wi)) r.fail("corrupt (a negative push-sum weight)");
  if (wi == 0) {
    const auto zero = [](float v) { return v == 0; };
    if (!std::all_of(x(i).begin(), x(i).end(), zero) ||
        (!m_.empty() &&
         !std::all_of(m_.begin() + static_cast<std::ptrdiff_t>(off(i)),
                      m_.begin() + static_cast<std::ptrdiff_t>(off(i) + np_), zero))) {
      r.fail("corrupt (a worker that left, with weight 0, holding a model)");
    }
  }
  weight(i) = wi;
}

}  // namespace hsgd
