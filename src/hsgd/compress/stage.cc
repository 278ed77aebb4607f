#include "hsgd/compress/stage.h"

#include <algorithm>
#include <cmath>

#include "hsgd/core/error.h"
#include "hsgd/core/rng.h"
#include "hsgd/core/simd.h"

namespace hsgd {
namespace {

constexpr uint32_t kPushTag = 0x50534331;  // "PSC1"
constexpr uint32_t kPullTag = 0x504C4331;  // "PLC1"

uint64_t message_key(uint64_t seed, uint64_t side, uint64_t worker, uint64_t round) {
  Rng r(seed ^ (side << 56), worker * 0x100000001b3ULL + round);
  return r.next_u64();
}

}  // namespace

double memory_scale(const CompressorSpec& spec) {
  if (spec.kind != CompressorSpec::Kind::kQsgd) return 1.0;
  const double d = static_cast<double>(kBucket), s = spec.levels;
  const double omega = std::min(d / (s * s), std::sqrt(d) / s);
  return omega >= 1.0 ? 1.0 / (1.0 + omega) : 1.0;
}

PushStage::PushStage(const CompressOptions& o, std::vector<TensorSlot> layout, uint64_t seed,
                     int worker)
    : codec_(o.push, std::move(layout), static_cast<size_t>(o.min_bytes),
             Rng(seed, 0x70757368u + static_cast<uint64_t>(worker)).next_u64()),
      feedback_(o.push_feedback() && !o.push.none()),
      scale_(feedback_ ? static_cast<float>(memory_scale(o.push)) : 1.0f),
      warmup_(o.warmup),
      seed_(seed),
      worker_(worker) {
  if (feedback_) residual_.assign(codec_.numel(), 0.0f);
  p_.resize(codec_.numel());
}

void PushStage::compress(std::span<const float> grad, uint64_t version, std::string* bytes,
                         std::span<float> sent) {
  const size_t n = codec_.numel();
  HSGD_ASSERT(grad.size() == n && sent.size() == n, "compress: push of the wrong size");
  const bool raw = static_cast<int64_t>(version) < warmup_;
  if (feedback_) {
    for (size_t i = 0; i < n; ++i) p_[i] = grad[i] + residual_[i];
  } else {
    std::copy(grad.begin(), grad.end(), p_.begin());
  }
  if (!all_finite(p_)) {
    // A NaN or Inf (in the gradient, or p overflowing): sent raw, so the
    // server sees it and drops the push (topk or randomk could leave the NaN
    // out), and the stage stays as it was: p - sent would be NaN in every
    // coordinate of the residual from now on (issue 25, defect 3).
    codec_.encode(p_, message_key(seed_, 1, static_cast<uint64_t>(worker_), round_), true, bytes);
    codec_.decode(std::span<const char>(bytes->data(), bytes->size()), sent, "push");
    return;
  }
  const uint64_t key = message_key(seed_, 1, static_cast<uint64_t>(worker_), round_++);
  if (scale_ != 1.0f && !raw) {  // C(a p): see memory_scale
    scaled_.resize(n);
    for (size_t i = 0; i < n; ++i) scaled_[i] = scale_ * p_[i];
    codec_.encode(scaled_, key, raw, bytes);
  } else {
    codec_.encode(p_, key, raw, bytes);
  }
  codec_.decode(std::span<const char>(bytes->data(), bytes->size()), sent, "push");
  // A finite p whose message decodes to a non-finite value (fp16 past 65504)
  // is dropped by the server too: the residual stays as it was.
  if (feedback_ && all_finite(sent)) {
    for (size_t i = 0; i < n; ++i) residual_[i] = p_[i] - sent[i];
  }
}

void PushStage::save(StateWriter& w) const {
  w.tag(kPushTag);
  w.put(round_);
  w.put_vec(residual_);
  codec_.save(w);
}

void PushStage::load(StateReader& r) {
  r.expect_tag(kPushTag, "push compressor");
  round_ = r.get<uint64_t>();
  r.get_into(std::span<float>(residual_), "a push residual");
  codec_.load(r);
}

PushDecoder::PushDecoder(const CompressOptions& o, std::vector<TensorSlot> layout)
    : codec_(o.push, std::move(layout), static_cast<size_t>(o.min_bytes), 0) {}

PullStage::PullStage(const CompressOptions& o, std::vector<TensorSlot> layout, uint64_t seed,
                     int workers, std::span<const float> initial)
    : o_(o), seed_(seed) {
  for (int w = 0; w < workers; ++w) {
    codecs_.emplace_back(o.pull, layout, static_cast<size_t>(o.min_bytes),
                         Rng(seed, 0x70756c6cu + static_cast<uint64_t>(w)).next_u64());
    held_.emplace_back(initial.begin(), initial.end());
  }
  rounds_.assign(static_cast<size_t>(workers), 0);
}

std::span<const float> PullStage::pull(int worker, std::span<const float> params, uint64_t version,
                                       std::string* bytes) {
  const auto w = static_cast<size_t>(worker);
  HSGD_ASSERT(w < held_.size(), "compress: pull of an unknown worker");
  std::vector<float>& held = held_[w];
  Codec& codec = codecs_[w];
  const uint64_t key = message_key(seed_, 2, w, rounds_[w]++);
  if (static_cast<int64_t>(version) < o_.warmup) {
    codec.encode(params, key, true, bytes);
    held.assign(params.begin(), params.end());
    return held;
  }
  delta_.resize(params.size());
  const auto a = static_cast<float>(memory_scale(o_.pull));  // see memory_scale
  if (a != 1.0f) {
    for (size_t i = 0; i < params.size(); ++i) delta_[i] = a * (params[i] - held[i]);
  } else {
    for (size_t i = 0; i < params.size(); ++i) delta_[i] = params[i] - held[i];
  }
  codec.encode(delta_, key, false, bytes);
  codec.decode(std::span<const char>(bytes->data(), bytes->size()), delta_, "pull");
  for (size_t i = 0; i < params.size(); ++i) held[i] += delta_[i];
  return held;
}

void PullStage::save(StateWriter& w) const {
  w.tag(kPullTag);
  w.put<uint64_t>(held_.size());
  for (size_t i = 0; i < held_.size(); ++i) {
    w.put(rounds_[i]);
    w.put_vec(held_[i]);
    codecs_[i].save(w);
  }
}

void PullStage::load(StateReader& r) {
  r.expect_tag(kPullTag, "pull compressor");
  if (r.get<uint64_t>() != held_.size()) r.fail("corrupt (pull compressor worker count)");
  for (size_t i = 0; i < held_.size(); ++i) {
    rounds_[i] = r.get<uint64_t>();
    r.get_into(std::span<float>(held_[i]), "a worker's pulled copy");
    codecs_[i].load(r);
  }
}

bool is_raw_message(std::span<const char> bytes) { return bytes.size() > 5 && bytes[5] == 1; }

void apply_pull(const Codec& decoder, std::span<const char> bytes, std::span<float> params,
                std::vector<float>* scratch, const std::string& what) {
  if (is_raw_message(bytes)) {
    decoder.decode(bytes, params, what);
    return;
  }
  scratch->resize(params.size());
  decoder.decode(bytes, *scratch, what);
  for (size_t i = 0; i < params.size(); ++i) params[i] += (*scratch)[i];
}

}  // namespace hsgd
