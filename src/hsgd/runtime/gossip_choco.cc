#include "hsgd/runtime/gossip_choco.h"

#include <fmt/format.h>

#include <algorithm>

#include "hsgd/compress/stage.h"
#include "hsgd/core/error.h"
#include "hsgd/core/rng.h"
#include "hsgd/policy/gossip.h"

namespace hsgd {
namespace {

constexpr uint32_t kChocoTag = 0x43484331;  // "CHC1"

uint64_t round_key(uint64_t seed, int id, int64_t step) {
  Rng r(seed ^ (uint64_t{3} << 56),
        static_cast<uint64_t>(id) * 0x100000001b3ULL + static_cast<uint64_t>(step));
  return r.next_u64();
}

}  // namespace

std::string gossip_choco_blob(int w) { return fmt::format("gossip_choco-{}", w); }

void gossip_global_average(GossipModels& models, ChocoGossip* choco,
                           const std::function<void(std::span<float>)>& outer) {
  models.global_average(outer);
  if (!choco) return;
  for (int i = 0; i < models.size(); ++i) {
    if (models.live(i)) choco->reset(i, models.x(i));
  }
}

void require_choco_blob(const Checkpoint& ck, const std::string& blob) {
  if (ck.has(blob)) return;
  throw InputError(ck.path + ": no " + blob +
                   ".bin: a checkpoint of a gossip run without compression; resume it with "
                   "compress.push = none");
}

ChocoGossip::ChocoGossip(const Config& c, const std::vector<std::vector<int64_t>>& shapes,
                         std::span<const float> init, int held, int first_id)
    : np_(init.size()),
      gamma_(c.gossip.consensus_lr),
      scale_(memory_scale(c.compress.push)),
      seed_(c.train.seed),
      first_id_(first_id),
      decoder_(c.compress.push, make_layout(shapes, 0, init.size()),
               static_cast<size_t>(c.compress.min_bytes), 0) {
  const std::vector<TensorSlot> layout = make_layout(shapes, 0, np_);
  held_.reserve(static_cast<size_t>(held));
  for (int i = 0; i < held; ++i) {
    held_.push_back(
        Held{std::vector<double>(init.begin(), init.end()),
             std::vector<double>(init.begin(), init.end()),
             Codec(c.compress.push, layout, static_cast<size_t>(c.compress.min_bytes),
                   Rng(c.train.seed, 0x63686f63u + static_cast<uint64_t>(first_id + i)).next_u64()),
             std::vector<float>(np_)});
  }
}

std::unique_ptr<ChocoGossip> ChocoGossip::make(const Config& c,
                                               const std::vector<std::vector<int64_t>>& shapes,
                                               std::span<const float> init, int held,
                                               int first_id) {
  if (!is_gossip_policy(c.policy.kind) || c.compress.push.none()) return nullptr;
  return std::make_unique<ChocoGossip>(c, shapes, init, held, first_id);
}

size_t ChocoGossip::message_bytes() const { return decoder_.encoded_size(); }

void ChocoGossip::encode(int i, int64_t step, std::span<const float> x, std::string* bytes,
                         std::span<float> q) {
  Held& h = held_[static_cast<size_t>(i)];
  for (size_t p = 0; p < np_; ++p) h.diff[p] = static_cast<float>(scale_ * (x[p] - h.xhat[p]));
  h.codec.encode(h.diff, round_key(seed_, first_id_ + i, step), /*raw=*/false, bytes);
  h.codec.decode(*bytes, q, "a CHOCO round message");
  for (size_t p = 0; p < np_; ++p) h.xhat[p] += q[p];
}

void ChocoGossip::decode(std::span<const char> bytes, std::span<float> q,
                         const std::string& what) const {
  decoder_.decode(bytes, q, what);
}

void ChocoGossip::combine(int i, const MixRow& row, const std::vector<std::span<const float>>& q,
                          std::span<float> x) {
  HSGD_ASSERT(row.size() == q.size(), "one CHOCO message per mixing weight");
  Held& h = held_[static_cast<size_t>(i)];
  for (size_t p = 0; p < np_; ++p) {
    double d = 0;
    for (size_t k = 0; k < row.size(); ++k) d += row[k].second * q[k][p];
    h.s[p] += d;
    x[p] = static_cast<float>(x[p] + gamma_ * (h.s[p] - h.xhat[p]));
  }
}

void ChocoGossip::reset(int i, std::span<const float> x) {
  Held& h = held_[static_cast<size_t>(i)];
  std::copy(x.begin(), x.end(), h.xhat.begin());
  std::copy(x.begin(), x.end(), h.s.begin());
}

void ChocoGossip::save_worker(int i, StateWriter& w) const {
  const Held& h = held_[static_cast<size_t>(i)];
  w.tag(kChocoTag);
  w.put<uint64_t>(np_);
  w.put_vec(h.xhat);
  w.put_vec(h.s);
  h.codec.save(w);
}

void ChocoGossip::load_worker(int i, StateReader& r) {
  Held& h = held_[static_cast<size_t>(i)];
  r.expect_tag(kChocoTag, "CHOCO gossip state");
  if (r.get<uint64_t>() != np_) r.fail("corrupt (CHOCO state of another model size)");
  std::vector<double> xhat = r.get_vec<double>(), s = r.get_vec<double>();
  if (xhat.size() != np_ || s.size() != np_) r.fail("corrupt (CHOCO state of another shape)");
  h.xhat = std::move(xhat);
  h.s = std::move(s);
  h.codec.load(r);
}

}  // namespace hsgd
