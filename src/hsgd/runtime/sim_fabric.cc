#include "hsgd/runtime/sim_fabric.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "hsgd/core/error.h"

namespace hsgd {
namespace {

std::vector<NodeLink> links(const SimFabric::Options& o) {
  std::vector<NodeLink> l(static_cast<size_t>(o.workers), {o.bandwidth, o.bandwidth});
  l.resize(l.size() + o.shards.size(), {o.server_bandwidth, o.server_bandwidth});
  return l;
}

}  // namespace

SimFabric::SimFabric(Options o, Host* host)
    : o_(std::move(o)),
      host_(host),
      shards_(o_.shards),
      net_(links(o_), o_.latency, o_.shared),
      steps_(static_cast<size_t>(o_.workers)),
      core_s_(static_cast<size_t>(o_.workers), 0.0),
      push_bytes_(static_cast<size_t>(o_.workers)),
      slice_in_(static_cast<size_t>(o_.workers), std::vector<uint8_t>(o_.shards.size(), 0)),
      shard_(o_.shards.size()),
      cores_(o_.cores) {
  HSGD_ASSERT(!shards_.empty(), "a simulated cluster without a server");
}

std::vector<int64_t> SimFabric::split_bytes(int64_t payload, int64_t header) const {
  size_t total = 0;
  for (const ParamShard& s : shards_) total += s.size;
  std::vector<int64_t> out(shards_.size(), 0);
  int64_t given = 0;
  for (size_t s = 1; s < shards_.size(); ++s) {
    // Exact for a dense message (4 bytes a parameter: 4 x the slice).
    out[s] = total == 0
                 ? 0
                 : payload * static_cast<int64_t>(shards_[s].size) / static_cast<int64_t>(total);
    given += out[s];
  }
  out[0] = payload - given + header;
  return out;
}

int64_t SimFabric::tag(int w, int s, int kind) const {
  const auto S = static_cast<int64_t>(shards_.size());
  const auto gen = static_cast<int64_t>(steps_[static_cast<size_t>(w)].gen);
  return ((gen * o_.workers + w) * S + s) * 2 + kind;
}

void SimFabric::pull_served(double t, int w, std::vector<int64_t> bytes, double compute_s,
                            double core_s, std::vector<int64_t> push_bytes) {
  Step& st = steps_[static_cast<size_t>(w)];
  HSGD_ASSERT(st.stage == kIdle, "a pull served to a worker in the middle of a step");
  st.stage = kPulling;
  st.taken = 0;
  st.pending = servers();
  st.compute_s = compute_s;
  core_s_[static_cast<size_t>(w)] = std::min(core_s, compute_s);
  push_bytes_[static_cast<size_t>(w)] = std::move(push_bytes);
  for (int s = 0; s < servers(); ++s) {
    net_.send(t, node_of_shard(s), w, static_cast<double>(bytes[static_cast<size_t>(s)]),
              tag(w, s, 0));
  }
  wake_network();
}

void SimFabric::wake_network() {
  const double next = net_.next_time();
  if (std::isfinite(next) && next != net_wake_) {
    host_->schedule(next, FabricEvent::kNetwork, 0);
    net_wake_ = next;
  }
}

void SimFabric::on_event(double t, FabricEvent e, int id) {
  switch (e) {
    case FabricEvent::kNetwork: {
      net_wake_ = -1;  // (wake_network() below schedules the next one)
      // A wake-up made stale by a later change finds nothing due.
      if (t < net_.next_time()) break;
      for (int64_t m : net_.advance(t)) deliver(t, m);
      break;
    }
    case FabricEvent::kComputeDone: {
      Step& st = steps_[static_cast<size_t>(id)];
      if ((st.stage != kComputing && st.stage != kDelaying) || st.done_at != t) {
        break;  // the worker left meanwhile
      }
      if (st.stage == kComputing && cores_.limited()) {
        release(t);
        // The delay after the gradient holds no core.
        const double rest = st.compute_s - core_s_[static_cast<size_t>(id)];
        if (rest > 0) {
          st.stage = kDelaying;
          st.done_at = t + rest;
          host_->schedule(st.done_at, FabricEvent::kComputeDone, id);
          break;
        }
      }
      st.stage = kPushing;
      st.pending = servers();
      for (int s = 0; s < servers(); ++s) {
        slice_in_[static_cast<size_t>(id)][static_cast<size_t>(s)] = 0;
        net_.send(t, id, node_of_shard(s),
                  static_cast<double>(push_bytes_[static_cast<size_t>(id)][static_cast<size_t>(s)]),
                  tag(id, s, 1));
      }
      break;
    }
    case FabricEvent::kShardDone:
      shard_done(t, id);
      break;
  }
  wake_network();
}

void SimFabric::deliver(double t, int64_t m) {
  const int kind = static_cast<int>(m % 2);
  const int64_t ws = m / 2;
  const auto S = static_cast<int64_t>(servers());
  const int s = static_cast<int>(ws % S);
  const int64_t gw = ws / S;
  const int w = static_cast<int>(gw % o_.workers);
  Step& st = steps_[static_cast<size_t>(w)];
  if (static_cast<uint32_t>(gw / o_.workers) != st.gen) return;  // sent before it left
  HSGD_ASSERT(st.pending > 0 && st.stage == (kind == 0 ? kPulling : kPushing),
              "a message out of its step");
  --st.pending;
  if (kind == 0) {
    if (st.pending == 0) compute(t, w);
    return;
  }
  slice_in_[static_cast<size_t>(w)][static_cast<size_t>(s)] = 1;
  if (st.pending == 0) st.stage = kQueued;
  if (s == 0) shard_[0].arrived.push_back(w);
  try_serve(t, s);
}

void SimFabric::compute(double t, int w) {
  Step& st = steps_[static_cast<size_t>(w)];
  st.stage = kCoreWait;
  if (!cores_.acquire(w)) return;  // release() starts it
  st.stage = kComputing;
  st.done_at = t + (cores_.limited() ? core_s_[static_cast<size_t>(w)] : st.compute_s);
  host_->schedule(st.done_at, FabricEvent::kComputeDone, w);
}

void SimFabric::release(double t) {
  for (const int64_t who : cores_.release()) {
    if (who >= 0) {
      Step& st = steps_[static_cast<size_t>(who)];
      st.stage = kComputing;
      st.done_at = t + core_s_[static_cast<size_t>(who)];  // (limited cores only)
      host_->schedule(st.done_at, FabricEvent::kComputeDone, static_cast<int>(who));
    } else {
      serve(t, static_cast<int>(-who - 1));
    }
  }
}

void SimFabric::try_serve(double t, int s) {
  Shard& sh = shard_[static_cast<size_t>(s)];
  if (sh.busy || sh.core_wait) return;
  if (s == 0) {
    if (sh.arrived.empty()) return;
  } else {
    if (sh.next >= order_base_ + order_.size()) return;  // shard 0 has not ordered it yet
    const int w = order_[static_cast<size_t>(sh.next - order_base_)].worker;
    if (!slice_in_[static_cast<size_t>(w)][static_cast<size_t>(s)]) return;
  }
  if (!cores_.acquire(-(s + 1))) {
    sh.core_wait = true;
    return;
  }
  serve(t, s);
}

void SimFabric::serve(double t, int s) {
  Shard& sh = shard_[static_cast<size_t>(s)];
  sh.core_wait = false;
  sh.busy = true;
  double cost = o_.server_s_per_param * static_cast<double>(shards_[static_cast<size_t>(s)].size);
  uint64_t at = 0;
  if (s == 0) {
    const int w = sh.arrived.front();
    sh.arrived.pop_front();
    Step& st = steps_[static_cast<size_t>(w)];
    if (st.cost >= 0) cost = st.cost;
    st.cost = -1;
    st.taken = 1;
    const bool applied = host_->start_push(w, t);
    order_.push_back(Ordered{w, 0, static_cast<uint8_t>(applied), st.gen, cost});
    at = order_base_ + order_.size() - 1;
  } else {
    at = sh.next++;
  }
  const Ordered& o = order_[static_cast<size_t>(at - order_base_)];
  if (s == 0) cost = o.cost0;
  sh.serving = at;
  host_->schedule(t + cost * (o.applied ? 2.0 : 1.0), FabricEvent::kShardDone, s);
  if (s == 0) {
    for (int s2 = 1; s2 < servers(); ++s2) try_serve(t, s2);
  }
}

void SimFabric::shard_done(double t, int s) {
  Shard& sh = shard_[static_cast<size_t>(s)];
  HSGD_ASSERT(sh.busy, "a shard finished a push it was not serving");
  Ordered& o = order_[static_cast<size_t>(sh.serving - order_base_)];
  sh.busy = false;
  if (cores_.limited()) release(t);
  if (++o.served == servers()) {
    HSGD_ASSERT(&o == &order_.front(), "pushes served out of shard 0's order");
    const int w = o.worker;
    Step& st = steps_[static_cast<size_t>(w)];
    if (st.gen == o.gen) st.stage = kIdle;  // (a leaver's new step is not this one)
    order_.pop_front();
    ++order_base_;
    host_->push_served(w, t);
  }
  try_serve(t, s);
}

bool SimFabric::drop_worker(double t, int w) {
  Step& st = steps_[static_cast<size_t>(w)];
  const bool was_computing = st.stage == kComputing;
  ++st.gen;
  if (was_computing && cores_.limited()) release(t);
  cores_.drop(w);
  std::erase(shard_[0].arrived, w);
  st.stage = kIdle;
  st.pending = 0;
  st.cost = -1;
  bool ordered = false;
  for (const Ordered& o : order_) ordered = ordered || o.worker == w;
  if (ordered) {  // its slices still on the way count as arrived: the shards serve it
    std::fill(slice_in_[static_cast<size_t>(w)].begin(), slice_in_[static_cast<size_t>(w)].end(),
              1);
    for (int s = 1; s < servers(); ++s) try_serve(t, s);
  }
  return ordered;
}

NetworkResult SimFabric::report(double t, const std::string& model) const {
  NetworkResult out;
  out.on = true;
  out.model = model;
  const auto nodes = static_cast<size_t>(net_.nodes());
  const Network::Carried zero{std::vector<double>(nodes, 0.0), std::vector<double>(nodes, 0.0)};
  const Network::Carried all = net_.carried(t);
  out.busiest_util = net_.busiest_util(zero, all, t);
  const auto name = [&](size_t node) {
    const int n = static_cast<int>(node);
    return n >= o_.workers ? fmt::format("server {}", n - o_.workers) : fmt::format("worker {}", n);
  };
  double best = -1;
  for (size_t node = 0; node < nodes; ++node) {  // which interface is the busiest
    const double bw = static_cast<int>(node) >= o_.workers ? o_.server_bandwidth : o_.bandwidth;
    if (all.sent[node] / bw > best) {
      best = all.sent[node] / bw;
      out.busiest = name(node) + " egress";
    }
    if (all.received[node] / bw > best) {
      best = all.received[node] / bw;
      out.busiest = name(node) + " ingress";
    }
  }
  const auto add = [&](size_t node) {
    out.nodes.push_back(name(node));
    out.sent.push_back(all.sent[node]);
    out.received.push_back(all.received[node]);
  };
  for (size_t node = static_cast<size_t>(o_.workers); node < nodes; ++node) add(node);
  for (size_t node = 0; node < static_cast<size_t>(o_.workers); ++node) add(node);
  return out;
}

namespace {
template <class T>
std::vector<T> to_vec(const std::deque<T>& d) {
  return std::vector<T>(d.begin(), d.end());
}
}  // namespace

namespace {
constexpr uint32_t kCoreParts = 0x46414232;  // "FAB2"
}  // namespace

void SimFabric::save(StateWriter& w) const {
  w.tag(0x46414231);  // "FAB1"
  net_.save(w);
  w.put(net_wake_);
  w.put_vec(steps_);
  for (const auto& b : push_bytes_) w.put_vec(b);
  for (const auto& b : slice_in_) w.put_vec(b);
  for (const Shard& sh : shard_) {
    w.put_vec(to_vec(sh.arrived));
    w.put(sh.serving);
    w.put<uint8_t>(sh.busy);
    w.put<uint8_t>(sh.core_wait);
    w.put(sh.next);
  }
  w.put_vec(to_vec(order_));
  w.put(order_base_);
  cores_.save(w);
  // Limited cores: each step's part on a core ("FAB2"; checkpoints from
  // before it, which held a core through a straggler's delay, are refused).
  if (cores_.limited()) {
    w.tag(kCoreParts);
    w.put_vec(core_s_);
  }
}

void SimFabric::load(StateReader& r) {
  if (r.get<uint32_t>() != 0x46414231) r.fail("corrupt (simulated cluster section missing)");
  net_.load(r);
  net_wake_ = r.get<double>();
  steps_ = r.get_vec<Step>();
  if (steps_.size() != static_cast<size_t>(o_.workers)) r.fail("corrupt (workers' steps)");
  for (auto& b : push_bytes_) b = r.get_vec<int64_t>();
  for (auto& b : slice_in_) {
    b = r.get_vec<uint8_t>();
    if (b.size() != shards_.size()) r.fail("corrupt (pushes' slices)");
  }
  for (Shard& sh : shard_) {
    const std::vector<int32_t> a = r.get_vec<int32_t>();
    sh.arrived.assign(a.begin(), a.end());
    sh.serving = r.get<uint64_t>();
    sh.busy = r.get<uint8_t>() != 0;
    sh.core_wait = r.get<uint8_t>() != 0;
    sh.next = r.get<uint64_t>();
    for (int32_t v : a) {
      if (v < 0 || v >= o_.workers) r.fail("corrupt (a shard's queue)");
    }
  }
  const std::vector<Ordered> o = r.get_vec<Ordered>();
  order_.assign(o.begin(), o.end());
  order_base_ = r.get<uint64_t>();
  cores_.load(r);
  if (cores_.limited()) {
    if (r.get<uint32_t>() != kCoreParts) {
      r.fail(
          "written before a straggler's delay stopped holding a core (sim.cores > 0); "
          "rerun it from the start");
    }
    core_s_ = r.get_vec<double>();
    if (core_s_.size() != static_cast<size_t>(o_.workers)) r.fail("corrupt (core parts)");
  }
  for (const Ordered& e : order_) {
    if (e.worker < 0 || e.worker >= o_.workers) r.fail("corrupt (the shards' order)");
  }
  for (const Shard& sh : shard_) {
    if (sh.busy && (sh.serving < order_base_ || sh.serving - order_base_ >= order_.size())) {
      r.fail("corrupt (a shard's push in service)");
    }
  }
}

}  // namespace hsgd
