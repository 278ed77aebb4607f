#include "hsgd/runtime/membership.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "hsgd/core/error.h"

namespace hsgd {
namespace {
constexpr uint32_t kMembershipTag = 0x4D454D31;  // "MEM1"
}

Membership::Membership(const Job& job, int workers)
    : job_(job),
      n_(workers),
      plan_(job.config->faults, workers, job.config->train.seed),
      stale_(static_cast<size_t>(workers), 0) {
  for (int w = 0; w < workers; ++w) have_.push_back(Key{workers, w});
  // Every live count the fault plan can reach (down to train.min_workers,
  // below which the run stops) needs a partition of the training set: one
  // that cannot be drawn is refused here, before anything is written, not
  // when the count is reached. (Drawn and dropped: the run draws its own.)
  const Config& c = *job.config;
  if (!plan_.enabled() || c.data.partition.kind == "iid") return;
  int lowest = 1;
  if (c.faults.kill_rate == 0 && c.faults.exception_rate == 0) {
    std::set<int> killed;
    for (const FaultAt& k : c.faults.kill) killed.insert(k.worker);
    lowest = workers - static_cast<int>(killed.size());
  }
  lowest = std::max({lowest, c.train.min_workers, 1});
  for (int count = workers - 1; count >= lowest; --count) {
    try {
      (void)make_partition(*job.train, c.data.partition, c.train.seed, count);
    } catch (const InputError& e) {
      throw InputError(fmt::format("[faults] can leave {} of {} workers live, and then: {}", count,
                                   workers, e.what()));
    }
  }
}

std::string Membership::record(const MembershipEvent& e, const Server& server) {
  return record(e, server.live_workers());
}

std::string Membership::record(const MembershipEvent& e, int live) {
  log_.push_back(e);
  plan_.apply(e);
  std::fill(stale_.begin(), stale_.end(), 1);
  const int min = job_.config->train.min_workers;
  if (e.join || live >= min) return "";
  return fmt::format(
      "{} of {} workers live, fewer than train.min_workers = {}: worker {} left at {:.3f} s "
      "({}{}{})",
      live, n_, min, e.worker, e.time, to_string(e.cause), e.detail.empty() ? "" : ": ", e.detail);
}

const Partition& Membership::partition(int count) {
  auto it = partitions_.find(count);
  if (it != partitions_.end()) return *it->second;
  std::shared_ptr<const Partition> p;
  if (count == job_.config->train.workers && job_.partition) {
    p = job_.partition;
  } else {
    const Config& c = *job_.config;
    p = std::make_shared<const Partition>(
        make_partition(*job_.train, c.data.partition, c.train.seed, count));
  }
  return *partitions_.emplace(count, std::move(p)).first->second;
}

ShardSampler Membership::build(int w, Key k) {
  const Partition& p = partition(k.count);
  HSGD_ASSERT(k.rank >= 0 && static_cast<size_t>(k.rank) < p.shards.size(), "shard rank");
  std::vector<int64_t> shard = p.shards[static_cast<size_t>(k.rank)];
  shard.insert(shard.end(), p.global_pool.begin(), p.global_pool.end());
  const Config& c = *job_.config;
  return ShardSampler(*job_.train, w, std::move(shard), c.train.seed, c.sampling);
}

bool Membership::due(int w, const ShardSampler& sampler, int64_t batch, bool now) const {
  if (!stale_[static_cast<size_t>(w)] && !now) return false;
  if (!now) {
    const SamplerState st = sampler.state();
    if (st.position + batch <= sampler.shard_size()) return false;  // its epoch goes on
  }
  return true;
}

void Membership::take(int w, ShardSampler& sampler, Key k, bool now) {
  const auto i = static_cast<size_t>(w);
  stale_[i] = 0;
  if (k.count < 1) return;
  if (!now && k.count == have_[i].count && k.rank == have_[i].rank) return;  // same shard
  have_[i] = k;
  sampler = build(w, k);
}

void Membership::refresh(int w, ShardSampler& sampler, int64_t batch, const Server& server,
                         bool now) {
  if (!due(w, sampler, batch, now)) return;
  Key k{server.live_workers(), 0};
  for (int v = 0; v < w && v < server.known_workers(); ++v) k.rank += server.is_live(v) ? 1 : 0;
  take(w, sampler, k, now);
}

void Membership::refresh(int w, ShardSampler& sampler, int64_t batch, const std::vector<char>& live,
                         bool now) {
  if (!due(w, sampler, batch, now)) return;
  Key k{0, 0};
  for (size_t v = 0; v < live.size(); ++v) {
    if (!live[v]) continue;
    ++k.count;
    if (static_cast<int>(v) < w) ++k.rank;
  }
  take(w, sampler, k, now);
}

ShardSampler Membership::sampler_for(int w) { return build(w, have_[static_cast<size_t>(w)]); }

void Membership::save(StateWriter& w) const {
  w.tag(kMembershipTag);
  w.put<int32_t>(n_);
  plan_.save(w);
  w.put<uint64_t>(log_.size());
  for (const MembershipEvent& e : log_) {
    w.put(e.time);
    w.put<int32_t>(e.worker);
    w.put<uint8_t>(e.join);
    w.put<int32_t>(static_cast<int32_t>(e.cause));
    w.put_vec(std::vector<char>(e.detail.begin(), e.detail.end()));
  }
  for (const Key& k : have_) {
    w.put(k.count);
    w.put(k.rank);
  }
  w.put_vec(stale_);
}

void Membership::load(StateReader& r) {
  r.expect_tag(kMembershipTag, "membership");
  if (r.get<int32_t>() != n_) r.fail("membership of another worker count");
  plan_.load(r);
  const uint64_t n = r.get<uint64_t>();
  if (n > (1u << 24)) r.fail("corrupt (membership log size)");
  log_.clear();
  for (uint64_t i = 0; i < n; ++i) {
    MembershipEvent e;
    e.time = r.get<double>();
    e.worker = r.get<int32_t>();
    e.join = r.get<uint8_t>() != 0;
    const int32_t cause = r.get<int32_t>();
    if (cause < 0 || cause > static_cast<int32_t>(MembershipCause::kError)) {
      r.fail("corrupt (membership cause)");
    }
    e.cause = static_cast<MembershipCause>(cause);
    const std::vector<char> d = r.get_vec<char>();
    e.detail.assign(d.begin(), d.end());
    log_.push_back(std::move(e));
  }
  for (Key& k : have_) {
    k.count = r.get<int32_t>();
    k.rank = r.get<int32_t>();
    if (k.count < 1 || k.count > n_ || k.rank < 0 || k.rank >= k.count) {
      r.fail("corrupt (a worker's shard)");
    }
  }
  stale_ = r.get_vec<char>();
  if (stale_.size() != static_cast<size_t>(n_)) r.fail("corrupt (stale shards)");
}

}  // namespace hsgd
