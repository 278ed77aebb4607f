#include "hsgd/core/network.h"

#include <algorithm>
#include <cmath>
#include <queue>
#include <utility>

#include "hsgd/core/error.h"

namespace hsgd {

Network::Network(std::vector<NodeLink> nodes, double latency, bool shared)
    : nodes_(std::move(nodes)),
      latency_(latency),
      shared_(shared),
      sent_(nodes_.size(), 0.0),
      received_(nodes_.size(), 0.0) {
  for (const NodeLink& n : nodes_) {
    HSGD_ASSERT(n.egress > 0 && n.ingress > 0, "a network interface without capacity");
  }
}

double Network::lone_rate(const Flow& f) const {
  return std::min(nodes_[static_cast<size_t>(f.from)].egress,
                  nodes_[static_cast<size_t>(f.to)].ingress);
}

void Network::send(double now, int from, int to, double bytes, int64_t tag) {
  HSGD_ASSERT(from >= 0 && from < nodes() && to >= 0 && to < nodes() && bytes >= 0,
              "a message between unknown nodes");
  HSGD_ASSERT(now >= at_, "the network went back in time");
  progress_to(now);
  const uint64_t seq = next_seq_++;
  if (bytes == 0) {
    landing_.push_back(Landing{now + latency_, seq, tag});
    return;
  }
  flows_.push_back(Flow{from, to, tag, seq, bytes, 0, 0});
  if (shared_) {
    share();
  } else {
    Flow& f = flows_.back();
    f.rate = lone_rate(f);
    f.finish = now + bytes / f.rate;
  }
}

double Network::next_time() const {
  double t = std::numeric_limits<double>::infinity();
  for (const Flow& f : flows_) t = std::min(t, f.finish);
  for (const Landing& l : landing_) t = std::min(t, l.time);
  return t;
}

void Network::progress_to(double t) {
  if (t <= at_) return;
  const double dt = t - at_;
  for (Flow& f : flows_) {
    const double moved = std::min(f.left, f.rate * dt);
    f.left -= moved;
    sent_[static_cast<size_t>(f.from)] += moved;
    received_[static_cast<size_t>(f.to)] += moved;
  }
  at_ = t;
}

std::vector<int64_t> Network::advance(double t) {
  HSGD_ASSERT(t <= next_time(), "the network skipped a delivery");
  progress_to(t);
  // Flows whose last byte left by t: their remainder (rounding) is carried
  // now, and they land `latency` later.
  bool changed = false;
  std::erase_if(flows_, [&](const Flow& f) {
    if (f.finish > t) return false;
    sent_[static_cast<size_t>(f.from)] += f.left;
    received_[static_cast<size_t>(f.to)] += f.left;
    landing_.push_back(Landing{f.finish + latency_, f.seq, f.tag});
    changed = true;
    return true;
  });
  if (changed && shared_) share();
  std::vector<std::pair<uint64_t, int64_t>> due;
  std::erase_if(landing_, [&](const Landing& l) {
    if (l.time > t) return false;
    due.push_back({l.seq, l.tag});
    return true;
  });
  std::sort(due.begin(), due.end());
  std::sort(landing_.begin(), landing_.end(),
            [](const Landing& a, const Landing& b) { return a.seq < b.seq; });
  std::vector<int64_t> out;
  out.reserve(due.size());
  for (const auto& d : due) out.push_back(d.second);
  return out;
}

// Progressive filling. Resource 2n is node n's egress, 2n + 1 its ingress.
// The resource with the smallest fair share (capacity left / flows not yet
// fixed) fixes its flows at that share; their other resource loses what
// they use. Repeats until every flow has its rate. A heap keyed by share,
// with stale entries skipped, finds the next bottleneck.
void Network::share() {
  const size_t R = 2 * nodes_.size();
  std::vector<double> cap(R);
  std::vector<int32_t> count(R, 0);
  for (size_t n = 0; n < nodes_.size(); ++n) {
    cap[2 * n] = nodes_[n].egress;
    cap[2 * n + 1] = nodes_[n].ingress;
  }
  const auto eg = [](const Flow& f) { return 2 * static_cast<size_t>(f.from); };
  const auto in = [](const Flow& f) { return 2 * static_cast<size_t>(f.to) + 1; };
  for (const Flow& f : flows_) {
    ++count[eg(f)];
    ++count[in(f)];
  }
  // The flows of each resource (CSR), in send order.
  std::vector<int32_t> start(R + 1, 0);
  for (size_t r = 0; r < R; ++r) start[r + 1] = start[r] + count[r];
  std::vector<int32_t> members(static_cast<size_t>(start[R]));
  std::vector<int32_t> fill(start.begin(), start.end() - 1);
  for (size_t i = 0; i < flows_.size(); ++i) {
    members[static_cast<size_t>(fill[eg(flows_[i])]++)] = static_cast<int32_t>(i);
    members[static_cast<size_t>(fill[in(flows_[i])]++)] = static_cast<int32_t>(i);
  }
  using Entry = std::pair<double, size_t>;  // (share, resource): ties by resource
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
  for (size_t r = 0; r < R; ++r) {
    if (count[r] > 0) heap.push({cap[r] / count[r], r});
  }
  std::vector<uint8_t> fixed(flows_.size(), 0);
  while (!heap.empty()) {
    const auto [s, r] = heap.top();
    heap.pop();
    if (count[r] == 0 || s != cap[r] / count[r]) continue;  // stale
    for (int32_t k = start[r]; k < start[r + 1]; ++k) {
      const auto i = static_cast<size_t>(members[static_cast<size_t>(k)]);
      if (fixed[i]) continue;
      fixed[i] = 1;
      Flow& f = flows_[i];
      f.rate = s;
      const size_t other = eg(f) == r ? in(f) : eg(f);
      cap[other] = std::max(0.0, cap[other] - s);
      --count[other];
      if (count[other] > 0) heap.push({cap[other] / count[other], other});
    }
    count[r] = 0;
  }
  for (Flow& f : flows_) {
    HSGD_ASSERT(f.rate > 0, "a message without bandwidth");
    f.finish = at_ + f.left / f.rate;
  }
}

Network::Carried Network::carried(double t) const {
  Carried c{sent_, received_};
  const double dt = std::max(0.0, t - at_);
  for (const Flow& f : flows_) {
    const double moved = std::min(f.left, f.rate * dt);
    c.sent[static_cast<size_t>(f.from)] += moved;
    c.received[static_cast<size_t>(f.to)] += moved;
  }
  return c;
}

double Network::busiest_util(const Carried& since, const Carried& now, double seconds) const {
  if (!(seconds > 0)) return 0;
  double best = 0;
  for (size_t n = 0; n < nodes_.size(); ++n) {
    const double out = (now.sent[n] - since.sent[n]) / (nodes_[n].egress * seconds);
    const double in = (now.received[n] - since.received[n]) / (nodes_[n].ingress * seconds);
    best = std::max({best, out, in});
  }
  return best;
}

void Network::save(StateWriter& w) const {
  w.tag(0x4E455431);  // "NET1"
  w.put<uint64_t>(nodes_.size());
  w.put(at_);
  w.put(next_seq_);
  w.put_vec(flows_);
  w.put_vec(landing_);
  w.put_vec(sent_);
  w.put_vec(received_);
}

void Network::load(StateReader& r) {
  if (r.get<uint32_t>() != 0x4E455431) r.fail("corrupt (network section missing)");
  if (r.get<uint64_t>() != nodes_.size()) r.fail("corrupt (network nodes)");
  at_ = r.get<double>();
  next_seq_ = r.get<uint64_t>();
  flows_ = r.get_vec<Flow>();
  landing_ = r.get_vec<Landing>();
  sent_ = r.get_vec<double>();
  received_ = r.get_vec<double>();
  for (const Flow& f : flows_) {
    if (f.from < 0 || f.from >= nodes() || f.to < 0 || f.to >= nodes() || !(f.rate > 0) ||
        f.seq >= next_seq_) {
      r.fail("corrupt (a message in the network)");
    }
  }
  for (const Landing& l : landing_) {
    if (l.seq >= next_seq_) r.fail("corrupt (a message in the network)");
  }
  if (sent_.size() != nodes_.size() || received_.size() != nodes_.size()) {
    r.fail("corrupt (network counters)");
  }
}

}  // namespace hsgd
