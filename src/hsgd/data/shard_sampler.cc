// ShardSampler: one worker's contiguous shard of a shared permutation.
#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "hsgd/core/error.h"
#include "hsgd/data/dataset.h"
#include "hsgd/data/streams.h"

namespace hsgd {

ShardSampler::ShardSampler(const Dataset& d, int worker, int num_workers, uint64_t seed)
    : data_(&d), rng_(seed, data_internal::kWorkerEpochStream + static_cast<uint64_t>(worker)) {
  HSGD_ASSERT(num_workers >= 1 && worker >= 0 && worker < num_workers,
              "ShardSampler: worker out of range");
  const int64_t n = d.size();
  if (n < num_workers) {
    throw InputError(
        fmt::format("{}: {} samples cannot be split over {} workers", d.name, n, num_workers));
  }
  std::vector<int64_t> perm(static_cast<size_t>(n));
  std::iota(perm.begin(), perm.end(), int64_t{0});
  Rng perm_rng(seed, data_internal::kShardPermutationStream);
  shuffle(perm, perm_rng);
  const int64_t begin = worker * n / num_workers;
  const int64_t end = (worker + 1) * n / num_workers;
  shard_.assign(perm.begin() + begin, perm.begin() + end);
  start_epoch(rng_.state());
}

void ShardSampler::start_epoch(uint64_t rng_state) {
  epoch_rng_ = rng_state;
  rng_.set_state(rng_state);
  order_ = shard_;
  shuffle(order_, rng_);
  pos_ = 0;
}

void ShardSampler::next(int64_t batch_size, Batch* out) {
  HSGD_ASSERT(batch_size >= 0, "ShardSampler::next: negative batch size");
  idx_.clear();
  while (static_cast<int64_t>(idx_.size()) < batch_size) {
    if (pos_ == order_.size()) {
      ++epoch_;
      start_epoch(rng_.state());
    }
    const size_t take =
        std::min(order_.size() - pos_, static_cast<size_t>(batch_size) - idx_.size());
    idx_.insert(idx_.end(), order_.begin() + static_cast<std::ptrdiff_t>(pos_),
                order_.begin() + static_cast<std::ptrdiff_t>(pos_ + take));
    pos_ += take;
  }
  gather(*data_, idx_, out);
}

SamplerState ShardSampler::state() const {
  return {epoch_, static_cast<int64_t>(pos_), epoch_rng_};
}

void ShardSampler::restore(const SamplerState& s) {
  if (s.position < 0 || s.position > shard_size() || s.epoch < 0) {
    throw InputError(fmt::format(
        "sampler state: expected epoch >= 0 and position in 0..{}, got epoch {} position {}",
        shard_size(), s.epoch, s.position));
  }
  epoch_ = s.epoch;
  start_epoch(s.epoch_rng);
  pos_ = static_cast<size_t>(s.position);
}

}  // namespace hsgd
