// ShardSampler: one worker's shard, its epoch order, and importance draws.
#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "hsgd/core/error.h"
#include "hsgd/data/dataset.h"
#include "hsgd/data/partition.h"
#include "hsgd/data/streams.h"

namespace hsgd {

ShardSampler::ShardSampler(const Dataset& d, int worker, int num_workers, uint64_t seed)
    : ShardSampler(
          d, worker,
          [&] {
            HSGD_ASSERT(num_workers >= 1 && worker >= 0 && worker < num_workers,
                        "ShardSampler: worker out of range");
            return std::move(make_partition(d, {}, seed, num_workers).shards[worker]);
          }(),
          seed) {}

ShardSampler::ShardSampler(const Dataset& d, int worker, std::vector<int64_t> shard, uint64_t seed,
                           const SamplingOptions& sampling)
    : data_(&d),
      sampling_(sampling),
      shard_(std::move(shard)),
      rng_(seed, data_internal::kWorkerEpochStream + static_cast<uint64_t>(worker)),
      draw_rng_(seed, data_internal::kImportanceStream + static_cast<uint64_t>(worker)) {
  HSGD_ASSERT(worker >= 0 && !shard_.empty(), "ShardSampler: bad worker or empty shard");
  validate(sampling_);
  if (wants_losses()) table_ = ImportanceTable(shard_.size());
  start_epoch(rng_.state());
}

void ShardSampler::start_epoch(uint64_t rng_state) {
  epoch_rng_ = rng_state;
  rng_.set_state(rng_state);
  order_.resize(shard_.size());
  std::iota(order_.begin(), order_.end(), int64_t{0});
  shuffle(order_, rng_);
  pos_ = 0;
}

void ShardSampler::next(int64_t batch_size, Batch* out) {
  HSGD_ASSERT(batch_size >= 0, "ShardSampler::next: negative batch size");
  last_.clear();
  bool weighted = false;
  std::vector<int64_t> drawn;
  std::vector<float> w, weights;
  while (static_cast<int64_t>(last_.size()) < batch_size) {
    if (pos_ == order_.size()) {
      ++epoch_;
      start_epoch(rng_.state());
    }
    const size_t take =
        std::min(order_.size() - pos_, static_cast<size_t>(batch_size) - last_.size());
    if (importance_phase()) {  // draws with replacement; N of them make an epoch
      table_.draw(static_cast<int64_t>(take), sampling_.uniform_mix, draw_rng_, &drawn, &w);
      last_.insert(last_.end(), drawn.begin(), drawn.end());
      weights.insert(weights.end(), w.begin(), w.end());
      weighted = true;
    } else {
      last_.insert(last_.end(), order_.begin() + static_cast<std::ptrdiff_t>(pos_),
                   order_.begin() + static_cast<std::ptrdiff_t>(pos_ + take));
      weights.insert(weights.end(), take, 1.0f);
    }
    pos_ += take;
  }
  idx_.resize(last_.size());
  for (size_t i = 0; i < last_.size(); ++i) idx_[i] = shard_[static_cast<size_t>(last_[i])];
  gather(*data_, idx_, out);
  if (weighted) out->weights = std::move(weights);
}

void ShardSampler::observe(std::span<const float> losses) {
  if (!wants_losses()) return;
  HSGD_ASSERT(losses.size() == last_.size(), "ShardSampler::observe: not the last batch's size");
  for (size_t i = 0; i < losses.size(); ++i) {
    table_.set_score(static_cast<size_t>(last_[i]), losses[i]);
  }
}

SamplerState ShardSampler::state() const {
  SamplerState s{epoch_, static_cast<int64_t>(pos_), epoch_rng_, 0, {}};
  if (wants_losses()) {
    s.draw_rng = draw_rng_.state();
    s.scores = table_.scores();
  }
  return s;
}

void ShardSampler::restore(const SamplerState& s) {
  if (s.position < 0 || s.position > shard_size() || s.epoch < 0) {
    throw InputError(fmt::format(
        "sampler state: expected epoch >= 0 and position in 0..{}, got epoch {} position {}",
        shard_size(), s.epoch, s.position));
  }
  if (wants_losses()) {
    table_.restore(s.scores);
    draw_rng_.set_state(s.draw_rng);
  }
  epoch_ = s.epoch;
  start_epoch(s.epoch_rng);
  pos_ = static_cast<size_t>(s.position);
}

}  // namespace hsgd
