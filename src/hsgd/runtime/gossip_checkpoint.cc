#include "hsgd/runtime/gossip_checkpoint.h"

#include <fmt/format.h>

#include "hsgd/core/error.h"
#include "hsgd/runtime/local_steps.h"

namespace hsgd {
namespace {
constexpr uint32_t kWorkerTag = 0x47535731;  // "GSW1"
constexpr uint32_t kRunTag = 0x47535231;     // "GSR1"
constexpr uint32_t kLiveTag = 0x47534D31;    // "GSM1"
}  // namespace

CheckpointInfo gossip_cut_info(const CheckpointIdentity& id, const char* runtime, int workers,
                               double t, int64_t steps, size_t rows) {
  CheckpointInfo info;
  info.id = id;
  info.runtime = runtime;
  info.workers = workers;
  info.train_s = t;
  info.updates = steps;
  info.rows = static_cast<int64_t>(rows);
  return info;
}

std::string gossip_worker_blob(int w) { return "gossip_worker-" + std::to_string(w); }

void save_gossip_worker(StateWriter& w, int id, const GossipModels& models, int i,
                        const ShardSampler& sampler, const DelayModel& delays,
                        const GossipWorkerState& s, std::span<const float> grad) {
  w.tag(kWorkerTag);
  w.put<int32_t>(id);
  models.save_worker(i, w);
  w.put(s.step);
  w.put(s.phase);
  w.put(s.loss);
  w.put(s.batch);
  w.put(s.finite);
  w.put_span(grad);
  w.put(s.pairing);
  delays.save_worker(id, w);
  save_sampler(sampler, w);
  w.put(s.idle);
  w.put(s.sent);
  w.put(s.received);
  w.put(s.rounds);
  w.put<uint64_t>(s.inbox.size());
  for (const GossipMail& m : s.inbox) {
    w.put(m.round);
    w.put(m.from);
    w.put(m.weight);
    w.put_vec(m.payload);
  }
}

bool load_gossip_worker(StateReader& r, int id, int workers, GossipModels& models, int i,
                        ShardSampler& sampler, DelayModel& delays, GossipWorkerState* s,
                        std::span<float> grad) {
  r.expect_tag(kWorkerTag, "gossip worker");
  if (r.get<int32_t>() != id) r.fail(fmt::format("corrupt (not worker {}'s state)", id));
  models.load_worker(i, r);
  GossipWorkerState st;
  st.step = r.get<int64_t>();
  st.phase = r.get<int32_t>();
  st.loss = r.get<double>();
  st.batch = r.get<int64_t>();
  st.finite = r.get<uint8_t>();
  if (st.step < 0 || st.phase < kGossipBetween || st.phase > kGossipBarrier || st.batch < 0) {
    r.fail("corrupt (a gossip worker's step)");
  }
  const std::vector<float> g = r.get_vec<float>();
  if (!g.empty() && g.size() != grad.size()) r.fail("corrupt (a gradient of another shape)");
  if (g.empty() && st.phase == kGossipGradient) r.fail("corrupt (a gradient in hand missing)");
  std::copy(g.begin(), g.end(), grad.begin());
  st.pairing = r.get<uint64_t>();
  delays.load_worker(id, r);
  load_sampler(sampler, r);
  st.idle = r.get<double>();
  st.sent = r.get<double>();
  st.received = r.get<double>();
  st.rounds = r.get<int64_t>();
  for (uint64_t k = r.get<uint64_t>(); k > 0; --k) {
    GossipMail m;
    m.round = r.get<int64_t>();
    m.from = r.get<int32_t>();
    m.weight = r.get<double>();
    m.payload = r.get_vec<float>();
    if (m.from < 0 || m.from >= workers || m.payload.size() != models.num_params()) {
      r.fail("corrupt (a gossip message)");
    }
    st.inbox.push_back(std::move(m));
  }
  *s = std::move(st);
  return !g.empty();
}

void save_gossip_run(StateWriter& w, int workers, const GossipRunState& s) {
  w.tag(kRunTag);
  w.put<int32_t>(workers);
  w.put(s.counts.steps);
  w.put(s.counts.samples);
  w.put(s.counts.loss_sum);
  w.put(s.counts.loss_count);
  w.put(s.counts.nonfinite);
  w.put(s.consecutive_nonfinite);
  w.put(s.global_averages);
  w.put(s.last_time);
  w.put(s.last_idle);
  w.put(s.last_acc);
}

void load_gossip_run(StateReader& r, int workers, GossipRunState* s) {
  r.expect_tag(kRunTag, "gossip run");
  if (r.get<int32_t>() != workers) r.fail("corrupt (worker count)");
  GossipRunState st;
  st.counts.steps = r.get<int64_t>();
  st.counts.samples = r.get<int64_t>();
  st.counts.loss_sum = r.get<double>();
  st.counts.loss_count = r.get<int64_t>();
  st.counts.nonfinite = r.get<int64_t>();
  st.consecutive_nonfinite = r.get<int64_t>();
  st.global_averages = r.get<int64_t>();
  st.last_time = r.get<double>();
  st.last_idle = r.get<double>();
  st.last_acc = r.get<double>();
  if (st.counts.steps < 0 || st.counts.samples < 0) r.fail("corrupt (gossip counts)");
  *s = st;
}

void save_gossip_membership(StateWriter& w, const GossipLiveState& s) {
  w.tag(kLiveTag);
  w.put<int32_t>(static_cast<int32_t>(s.live.size()));
  w.put(s.gen);
  w.put_vec(s.live);
  w.put_vec(s.post_gen);
  w.put_vec(s.inherited);
  w.put_vec(s.lives);
}

void load_gossip_membership(StateReader& r, int workers, GossipLiveState* s) {
  r.expect_tag(kLiveTag, "gossip membership");
  if (r.get<int32_t>() != workers) r.fail("corrupt (worker count)");
  GossipLiveState st;
  st.gen = r.get<int64_t>();
  st.live = r.get_vec<char>();
  st.post_gen = r.get_vec<int64_t>();
  st.inherited = r.get_vec<int64_t>();
  st.lives = r.get_vec<int32_t>();
  const auto n = static_cast<size_t>(workers);
  if (st.gen < 0 || st.live.size() != n || st.post_gen.size() != n || st.inherited.size() != n ||
      st.lives.size() != n) {
    r.fail("corrupt (gossip membership)");
  }
  for (size_t w = 0; w < n; ++w) {
    if (st.post_gen[w] < 0 || st.post_gen[w] > st.gen || st.lives[w] < 0) {
      r.fail("corrupt (a worker's generation or joins)");
    }
  }
  *s = std::move(st);
}

void check_gossip_membership(const Checkpoint& ck, const std::string& policy, bool faults) {
  const bool has = ck.has(kGossipMembershipBlob) && ck.has("membership");
  if (faults == has) return;
  if (faults) {
    throw InputError(fmt::format(
        "{}: a gossip checkpoint without membership (no {}.bin and membership.bin); policy '{}' "
        "with [faults] resumes from a checkpoint of a run with the same [faults]",
        ck.path, kGossipMembershipBlob, policy));
  }
  throw InputError(
      fmt::format("{}: a gossip checkpoint with membership ({}.bin); policy '{}' without [faults] "
                  "resumes from a checkpoint of a run without [faults]",
                  ck.path, kGossipMembershipBlob, policy));
}

void check_gossip_checkpoint(const Checkpoint& ck, const std::string& policy,
                             const std::string& runtime, int workers) {
  if (!ck.has(kGossipRunBlob)) {
    const char* what = ck.has("gossip") ? "the simulator's gossip checkpoint"
                       : ck.has("server") || ck.has("server-0") ? "a parameter-server checkpoint"
                                                                : "not a gossip checkpoint";
    throw InputError(
        fmt::format("{}: {} (no {}.bin); policy '{}' on the {} runtime resumes from "
                    "a gossip checkpoint of that runtime",
                    ck.path, what, kGossipRunBlob, policy, runtime));
  }
  if (ck.info.runtime != runtime) {
    throw InputError(
        fmt::format("{}: written by the {} runtime; policy '{}' on the {} runtime "
                    "resumes from a gossip checkpoint of that runtime",
                    ck.path, ck.info.runtime, policy, runtime));
  }
  if (ck.info.workers != workers) {
    throw InputError(fmt::format(
        "{}: a gossip checkpoint of {} workers; policy '{}' resumes with the same train.workers "
        "(the gossip graph is over the workers; on mpi, the rank count): expected {}, not {}",
        ck.path, ck.info.workers, policy, ck.info.workers, workers));
  }
  for (int w = 0; w < workers; ++w) {
    if (!ck.has(gossip_worker_blob(w))) {
      throw InputError(fmt::format("{}: incomplete gossip checkpoint (no {}.bin)", ck.path,
                                   gossip_worker_blob(w)));
    }
  }
}

void refuse_gossip_checkpoint(const Checkpoint& ck, const std::string& policy) {
  if (!ck.has(kGossipRunBlob) && !ck.has("gossip")) return;
  throw InputError(
      fmt::format("{}: a gossip policy's checkpoint; policy '{}' resumes from a parameter-server "
                  "checkpoint (server.bin)",
                  ck.path, policy));
}

}  // namespace hsgd
