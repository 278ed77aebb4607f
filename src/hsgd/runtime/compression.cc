#include "hsgd/runtime/compression.h"

#include <algorithm>

#include "hsgd/core/error.h"
#include "hsgd/core/rng.h"
#include "hsgd/core/stats.h"
#include "hsgd/runtime/clock.h"

namespace hsgd {
namespace {
constexpr uint32_t kTag = 0x434D5031;  // "CMP1"
}

Compression::Compression(const CompressOptions& o, const std::vector<std::vector<int64_t>>& shapes,
                         std::span<const float> initial, int workers, uint64_t seed)
    : push_on_(!o.push.none()), pull_on_(!o.pull.none()), numel_(initial.size()) {
  const std::vector<TensorSlot> layout = make_layout(shapes, 0, numel_);
  if (push_on_) {
    for (int w = 0; w < workers; ++w) push_.emplace_back(o, layout, seed, w);
    push_decoder_ = std::make_unique<PushDecoder>(o, layout);
  }
  if (pull_on_) {
    pull_ = std::make_unique<PullStage>(o, layout, seed, workers, initial);
    pull_decoder_ = std::make_unique<Codec>(o.pull, layout, static_cast<size_t>(o.min_bytes), 0);
  }
}

bool Compression::encode_push(int worker, std::span<const float> grad, uint64_t version,
                              std::string* bytes, std::span<float> sent) {
  PushStage& s = push_[static_cast<size_t>(worker)];
  s.compress(grad, version, bytes, sent);
  return !is_raw_message(*bytes);
}

void Compression::decode_push(std::span<const char> bytes, std::span<float> grad) const {
  push_decoder_->decode(bytes, grad, "a compressed push");
}

bool Compression::encode_pull(int worker, std::span<const float> params, uint64_t version,
                              std::string* bytes) {
  pull_->pull(worker, params, version, bytes);
  return !is_raw_message(*bytes);
}

std::span<const float> Compression::held(int worker) const { return pull_->held(worker); }

void Compression::decode_pull(std::span<const char> bytes, std::span<float> params,
                              std::vector<float>* scratch) const {
  apply_pull(*pull_decoder_, bytes, params, scratch, "a compressed pull");
}

void Compression::save(StateWriter& w) const {
  w.tag(kTag);
  w.put<uint64_t>(push_.size());
  for (const PushStage& s : push_) s.save(w);
  w.put<uint8_t>(pull_ ? 1 : 0);
  if (pull_) pull_->save(w);
}

void Compression::load(StateReader& r) {
  r.expect_tag(kTag, "compression");
  if (r.get<uint64_t>() != push_.size()) r.fail("corrupt (push compressor count)");
  for (PushStage& s : push_) s.load(r);
  if ((r.get<uint8_t>() != 0) != static_cast<bool>(pull_)) r.fail("corrupt (pull compressor)");
  if (pull_) pull_->load(r);
}

std::unique_ptr<Compression> make_compression(const Config& c,
                                              const std::vector<std::vector<int64_t>>& shapes,
                                              std::span<const float> initial) {
  if (!c.compress.on()) return nullptr;
  return std::make_unique<Compression>(c.compress, shapes, initial, c.train.workers, c.train.seed);
}

double calibrate_compress_ns(const Config& c, const std::vector<std::vector<int64_t>>& shapes,
                             size_t num_params) {
  std::vector<float> g(num_params), out(num_params);
  Rng rng(c.train.seed, 0xC0FFEE);
  for (float& v : g) v = static_cast<float>(rng.normal() * 1e-2);
  const std::vector<TensorSlot> layout = make_layout(shapes, 0, num_params);
  std::vector<double> ns;
  std::string bytes;
  for (const CompressorSpec& spec : {c.compress.push, c.compress.pull}) {
    if (spec.none()) continue;
    Codec codec(spec, layout, static_cast<size_t>(c.compress.min_bytes), c.train.seed);
    std::vector<double> t;
    for (int i = 0; i < 7; ++i) {
      const auto t0 = SteadyClock::now();
      codec.encode(g, static_cast<uint64_t>(i), false, &bytes);
      codec.decode(bytes, out, "calibration");
      t.push_back(since(t0) * 1e9 / static_cast<double>(std::max<size_t>(num_params, 1)));
    }
    ns.push_back(median(t));
  }
  return ns.empty() ? 0.0 : *std::max_element(ns.begin(), ns.end());
}

}  // namespace hsgd
